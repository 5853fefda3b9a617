// Reference LayerNorm and RMSNorm, forward and backward, in double.
//
// With xhat = (x - mean) * rstd (LayerNorm) or x * rstd (RMSNorm) and g = dout * weight:
//   LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   RMSNorm:   dx = rstd * (g - xhat * mean(g * xhat))
//   dweight += sum over rows of dout * xhat;  dbias += sum over rows of dout.
#include <cmath>
#include <vector>

#include "zerorun/kernels/access.h"
#include "zerorun/kernels/ref/ref.h"

namespace zerorun::kernels::ref {
namespace {

double Weight(const void* w, DType t, int64_t c) { return w != nullptr ? LoadD(w, t, c) : 1.0; }

void LayerNormForward(void* out, float* mean, float* rstd, const void* x, const void* weight, const void* bias,
                      int64_t N, int64_t C, float eps, DType act_type, DType param_type) {
  for (int64_t i = 0; i < N; ++i) {
    double m = 0.0;
    for (int64_t c = 0; c < C; ++c) m += LoadD(x, act_type, i * C + c);
    m /= static_cast<double>(C);
    double var = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      double d = LoadD(x, act_type, i * C + c) - m;
      var += d * d;
    }
    var /= static_cast<double>(C);
    double r = 1.0 / std::sqrt(var + static_cast<double>(eps));
    for (int64_t c = 0; c < C; ++c) {
      double v = (LoadD(x, act_type, i * C + c) - m) * r * Weight(weight, param_type, c);
      if (bias != nullptr) v += LoadD(bias, param_type, c);
      StoreD(out, act_type, i * C + c, v);
    }
    mean[i] = static_cast<float>(m);
    rstd[i] = static_cast<float>(r);
  }
}

// Shared by both norms: mean == nullptr means RMSNorm (no centring, no mean(g) term).
void NormBackward(void* dx, void* dweight, void* dbias, const void* dout, const void* x, const void* weight,
                  const float* mean, const float* rstd, int64_t N, int64_t C, DType act_type, DType param_type,
                  DType grad_type) {
  std::vector<double> dw(static_cast<size_t>(C), 0.0), db(static_cast<size_t>(C), 0.0);
  for (int64_t i = 0; i < N; ++i) {
    double m = mean != nullptr ? mean[i] : 0.0;
    double r = rstd[i];
    double g_mean = 0.0, gx_mean = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (LoadD(x, act_type, i * C + c) - m) * r;
      double dy = LoadD(dout, act_type, i * C + c);
      double g = dy * Weight(weight, param_type, c);
      g_mean += g;
      gx_mean += g * xhat;
      dw[c] += dy * xhat;
      db[c] += dy;
    }
    g_mean /= static_cast<double>(C);
    gx_mean /= static_cast<double>(C);
    if (mean == nullptr) g_mean = 0.0;
    if (dx == nullptr) continue;
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (LoadD(x, act_type, i * C + c) - m) * r;
      double g = LoadD(dout, act_type, i * C + c) * Weight(weight, param_type, c);
      StoreD(dx, act_type, i * C + c, r * (g - g_mean - xhat * gx_mean));
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    if (dweight != nullptr) StoreD(dweight, grad_type, c, LoadD(dweight, grad_type, c) + dw[c]);
    if (dbias != nullptr) StoreD(dbias, grad_type, c, LoadD(dbias, grad_type, c) + db[c]);
  }
}

void LayerNormBackward(void* dx, void* dweight, void* dbias, const void* dout, const void* x, const void* weight,
                       const float* mean, const float* rstd, int64_t N, int64_t C, DType act_type,
                       DType param_type, DType grad_type) {
  NormBackward(dx, dweight, dbias, dout, x, weight, mean, rstd, N, C, act_type, param_type, grad_type);
}

void RMSNormForward(void* out, float* rstd, const void* x, const void* weight, int64_t N, int64_t C, float eps,
                    DType act_type, DType param_type) {
  for (int64_t i = 0; i < N; ++i) {
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      double v = LoadD(x, act_type, i * C + c);
      ss += v * v;
    }
    double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + static_cast<double>(eps));
    for (int64_t c = 0; c < C; ++c) {
      StoreD(out, act_type, i * C + c, LoadD(x, act_type, i * C + c) * r * Weight(weight, param_type, c));
    }
    rstd[i] = static_cast<float>(r);
  }
}

void RMSNormBackward(void* dx, void* dweight, const void* dout, const void* x, const void* weight, const float* rstd,
                     int64_t N, int64_t C, DType act_type, DType param_type, DType grad_type) {
  NormBackward(dx, dweight, nullptr, dout, x, weight, nullptr, rstd, N, C, act_type, param_type, grad_type);
}

}  // namespace

void FillNorm(KernelTable& t) {
  t.layernorm_forward = &LayerNormForward;
  t.layernorm_backward = &LayerNormBackward;
  t.rmsnorm_forward = &RMSNormForward;
  t.rmsnorm_backward = &RMSNormBackward;
}

}  // namespace zerorun::kernels::ref

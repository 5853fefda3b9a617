// Reference causal multi-head self-attention, per (batch, head, query position), in double.
// For query t of head h: scores s_ts = q_t . k_s / sqrt(HS) for s <= t, p = softmax(scores),
// out_t = sum_s p_ts v_s. Backward, with dp_ts = dout_t . v_s and ds_ts = p_ts (dp_ts - sum_s' p dp):
//   dv_s += p_ts dout_t;  dq_t += ds_ts k_s / sqrt(HS);  dk_s += ds_ts q_t / sqrt(HS).
#include <cmath>
#include <limits>
#include <vector>

#include "zerorun/kernels/access.h"
#include "zerorun/kernels/ref/ref.h"

namespace zerorun::kernels::ref {
namespace {

void AttentionForward(void* out, float* att, const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                      DType type) {
  int64_t HS = C / NH;
  double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> p(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        int64_t q = (b * T + t) * 3 * C + h * HS;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t s = 0; s <= t; ++s) {
          int64_t k = (b * T + s) * 3 * C + C + h * HS;
          double dot = 0.0;
          for (int64_t d = 0; d < HS; ++d) dot += LoadD(qkv, type, q + d) * LoadD(qkv, type, k + d);
          p[s] = dot * scale;
          mx = std::max(mx, p[s]);
        }
        double sum = 0.0;
        for (int64_t s = 0; s <= t; ++s) {
          p[s] = std::exp(p[s] - mx);
          sum += p[s];
        }
        float* att_row = att + ((b * NH + h) * T + t) * T;
        for (int64_t s = 0; s < T; ++s) {
          if (s <= t) p[s] /= sum;
          att_row[s] = s <= t ? static_cast<float>(p[s]) : 0.0f;
        }
        for (int64_t d = 0; d < HS; ++d) {
          double acc = 0.0;
          for (int64_t s = 0; s <= t; ++s) acc += p[s] * LoadD(qkv, type, (b * T + s) * 3 * C + 2 * C + h * HS + d);
          StoreD(out, type, (b * T + t) * C + h * HS + d, acc);
        }
      }
    }
  }
}

void AttentionBackward(void* dqkv, const void* dout, const void* qkv, const float* att, int64_t B, int64_t T,
                       int64_t C, int64_t NH, DType type) {
  int64_t HS = C / NH;
  double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> acc(static_cast<size_t>(B * T * 3 * C), 0.0);
  std::vector<double> dp(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const float* p = att + ((b * NH + h) * T + t) * T;
        int64_t q = (b * T + t) * 3 * C + h * HS;
        int64_t o = (b * T + t) * C + h * HS;
        double dot = 0.0;
        for (int64_t s = 0; s <= t; ++s) {
          int64_t v = (b * T + s) * 3 * C + 2 * C + h * HS;
          double d = 0.0;
          for (int64_t e = 0; e < HS; ++e) {
            double g = LoadD(dout, type, o + e);
            d += g * LoadD(qkv, type, v + e);
            acc[v + e] += p[s] * g;
          }
          dp[s] = d;
          dot += p[s] * d;
        }
        for (int64_t s = 0; s <= t; ++s) {
          double ds = p[s] * (dp[s] - dot) * scale;
          int64_t k = (b * T + s) * 3 * C + C + h * HS;
          for (int64_t e = 0; e < HS; ++e) {
            acc[q + e] += ds * LoadD(qkv, type, k + e);
            acc[k + e] += ds * LoadD(qkv, type, q + e);
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < B * T * 3 * C; ++i) StoreD(dqkv, type, i, acc[i]);
}

}  // namespace

void FillAttention(KernelTable& t) {
  t.attention_forward = &AttentionForward;
  t.attention_backward = &AttentionBackward;
}

}  // namespace zerorun::kernels::ref

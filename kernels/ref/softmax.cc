// Reference row softmax (forward, backward) and fused softmax cross-entropy, in double.
//   softmax: y = exp(x - max) / sum exp(x - max);  dx = y * (dout - sum(dout * y))
//   cross-entropy of a row with target k: loss = logsumexp(x) - x_k;  dloss/dx = softmax(x) - onehot(k)
#include <cmath>
#include <limits>
#include <vector>

#include "zerorun/kernels/access.h"
#include "zerorun/kernels/ref/ref.h"

namespace zerorun::kernels::ref {
namespace {

void SoftmaxForward(void* out, const void* x, int64_t N, int64_t C, DType type) {
  std::vector<double> row(static_cast<size_t>(C));
  for (int64_t i = 0; i < N; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < C; ++c) {
      row[c] = LoadD(x, type, i * C + c);
      mx = std::max(mx, row[c]);
    }
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      row[c] = std::exp(row[c] - mx);
      sum += row[c];
    }
    for (int64_t c = 0; c < C; ++c) StoreD(out, type, i * C + c, row[c] / sum);
  }
}

void SoftmaxBackward(void* dx, const void* dout, const void* y, int64_t N, int64_t C, DType type) {
  std::vector<double> g(static_cast<size_t>(C)), yy(static_cast<size_t>(C));
  for (int64_t i = 0; i < N; ++i) {
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      g[c] = LoadD(dout, type, i * C + c);
      yy[c] = LoadD(y, type, i * C + c);
      dot += g[c] * yy[c];
    }
    for (int64_t c = 0; c < C; ++c) StoreD(dx, type, i * C + c, yy[c] * (g[c] - dot));
  }
}

CrossEntropyResult CrossEntropy(void* dlogits, float* losses, const void* logits, const int32_t* targets, int64_t N,
                                int64_t V, DType type, int32_t ignore_index, float grad_scale) {
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) count += targets[i] != ignore_index;
  double total = 0.0;
  double g = count > 0 ? static_cast<double>(grad_scale) / static_cast<double>(count) : 0.0;
  std::vector<double> row(static_cast<size_t>(V));
  for (int64_t i = 0; i < N; ++i) {
    bool ignored = targets[i] == ignore_index;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < V; ++v) {
      row[v] = LoadD(logits, type, i * V + v);
      mx = std::max(mx, row[v]);
    }
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    double lse = mx + std::log(sum);
    double loss = ignored ? 0.0 : lse - row[targets[i]];
    if (losses != nullptr) losses[i] = static_cast<float>(loss);
    total += loss;
    if (dlogits != nullptr) {
      for (int64_t v = 0; v < V; ++v) {
        double d = ignored ? 0.0 : (std::exp(row[v] - lse) - (v == targets[i] ? 1.0 : 0.0)) * g;
        StoreD(dlogits, type, i * V + v, d);
      }
    }
  }
  CrossEntropyResult r;
  r.count = count;
  r.loss = count > 0 ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
  return r;
}

}  // namespace

void FillSoftmax(KernelTable& t) {
  t.softmax_forward = &SoftmaxForward;
  t.softmax_backward = &SoftmaxBackward;
  t.cross_entropy = &CrossEntropy;
}

}  // namespace zerorun::kernels::ref

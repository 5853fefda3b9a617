// Reference token + position embedding. The backward sums each token's rows in double and adds the
// total to the gradient once, so a 16-bit gradient is rounded once per call however often a token
// occurs.
#include <algorithm>
#include <numeric>
#include <vector>

#include "zerorun/kernels/access.h"
#include "zerorun/kernels/ref/ref.h"

namespace zerorun::kernels::ref {
namespace {

void EmbeddingForward(void* out, DType out_type, const int32_t* tokens, const void* wte, const void* wpe,
                      DType param_type, int64_t B, int64_t T, int64_t C, int64_t V) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      int64_t row = b * T + t;
      int64_t tok = tokens[row];
      for (int64_t c = 0; c < C; ++c) {
        double v = LoadD(wte, param_type, tok * C + c);
        if (wpe != nullptr) v += LoadD(wpe, param_type, t * C + c);
        StoreD(out, out_type, row * C + c, v);
      }
    }
  }
}

void EmbeddingBackward(void* dwte, void* dwpe, DType grad_type, const void* dout, DType dout_type,
                       const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t V) {
  int64_t rows = B * T;
  std::vector<double> acc(static_cast<size_t>(C));
  if (dwte != nullptr) {
    std::vector<int64_t> order(static_cast<size_t>(rows));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return tokens[x] < tokens[y]; });
    for (int64_t i = 0; i < rows;) {
      int64_t tok = tokens[order[i]];
      std::fill(acc.begin(), acc.end(), 0.0);
      for (; i < rows && tokens[order[i]] == tok; ++i) {
        for (int64_t c = 0; c < C; ++c) acc[c] += LoadD(dout, dout_type, order[i] * C + c);
      }
      for (int64_t c = 0; c < C; ++c) StoreD(dwte, grad_type, tok * C + c, LoadD(dwte, grad_type, tok * C + c) + acc[c]);
    }
  }
  if (dwpe != nullptr) {
    for (int64_t t = 0; t < T; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t c = 0; c < C; ++c) acc[c] += LoadD(dout, dout_type, (b * T + t) * C + c);
      }
      for (int64_t c = 0; c < C; ++c) StoreD(dwpe, grad_type, t * C + c, LoadD(dwpe, grad_type, t * C + c) + acc[c]);
    }
  }
}

}  // namespace

void FillEmbedding(KernelTable& t) {
  t.embedding_forward = &EmbeddingForward;
  t.embedding_backward = &EmbeddingBackward;
}

}  // namespace zerorun::kernels::ref

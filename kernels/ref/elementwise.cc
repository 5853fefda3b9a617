// Reference elementwise ops, dropout and buffer reductions.
#include <cmath>

#include "zerorun/kernels/access.h"
#include "zerorun/kernels/dropout_mask.h"
#include "zerorun/kernels/ref/ref.h"

namespace zerorun::kernels::ref {
namespace {

void Add(void* out, const void* a, const void* b, int64_t n, DType type) {
  for (int64_t i = 0; i < n; ++i) StoreD(out, type, i, LoadD(a, type, i) + LoadD(b, type, i));
}

void Axpy(void* y, DType y_type, const void* x, DType x_type, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    StoreD(y, y_type, i, LoadD(y, y_type, i) + static_cast<double>(alpha) * LoadD(x, x_type, i));
  }
}

void Scale(void* out, const void* x, float alpha, int64_t n, DType type) {
  for (int64_t i = 0; i < n; ++i) StoreD(out, type, i, static_cast<double>(alpha) * LoadD(x, type, i));
}

void Fill(void* out, float value, int64_t n, DType type) {
  for (int64_t i = 0; i < n; ++i) Store(out, type, i, value);
}

void Copy(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  for (int64_t i = 0; i < n; ++i) StoreD(dst, dst_type, i, LoadD(src, src_type, i));
}

// Shared by forward and backward: y = x * keep / (1 - p), the scale computed once in fp32.
void DropoutApply(void* out, const void* x, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                  uint64_t offset) {
  uint32_t threshold = DropoutThreshold(p);
  float scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; ++i) {
    bool keep = DropoutKeep(seed, stream, offset + static_cast<uint64_t>(i), threshold);
    Store(out, type, i, keep ? Load(x, type, i) * scale : 0.0f);
  }
}

void DropoutForward(void* out, const void* x, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                    uint64_t offset) {
  DropoutApply(out, x, n, type, p, seed, stream, offset);
}

void DropoutBackward(void* dx, const void* dout, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                     uint64_t offset) {
  DropoutApply(dx, dout, n, type, p, seed, stream, offset);
}

double SumSquares(const void* x, int64_t n, DType type) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double v = LoadD(x, type, i);
    acc += v * v;
  }
  return acc;
}

bool AllFinite(const void* x, int64_t n, DType type) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(LoadD(x, type, i))) return false;
  }
  return true;
}

}  // namespace

void FillElementwise(KernelTable& t) {
  t.add = &Add;
  t.axpy = &Axpy;
  t.scale = &Scale;
  t.fill = &Fill;
  t.copy = &Copy;
  t.dropout_forward = &DropoutForward;
  t.dropout_backward = &DropoutBackward;
  t.sum_squares = &SumSquares;
  t.all_finite = &AllFinite;
}

}  // namespace zerorun::kernels::ref

// Row conversions: the AVX-512 prefix when active, core's converters for the rest.
#include "zerorun/kernels/row_convert.h"

#include <cstring>

#include "zerorun/core/cpu_features.h"

namespace zerorun::kernels {

void RowToF32(const void* src, DType t, float* dst, size_t n) {
  if (t == DType::kF32) {
    if (src != dst) std::memmove(dst, src, n * sizeof(float));
    return;
  }
  size_t done = 0;
  if ((t == DType::kF16 || t == DType::kBF16) && ActiveIsa() == Isa::kAvx512) {
    auto s = static_cast<const uint16_t*>(src);
    done = t == DType::kF16 ? detail::F16ToF32Avx512(s, dst, n) : detail::BF16ToF32Avx512(s, dst, n);
  }
  if (done < n) {
    Convert(static_cast<const char*>(src) + done * DTypeSize(t), t, dst + done, DType::kF32, n - done);
  }
}

void RowFromF32(const float* src, void* dst, DType t, size_t n) {
  if (t == DType::kF32) {
    if (src != dst) std::memmove(dst, src, n * sizeof(float));
    return;
  }
  size_t done = 0;
  if ((t == DType::kF16 || t == DType::kBF16) && ActiveIsa() == Isa::kAvx512) {
    auto d = static_cast<uint16_t*>(dst);
    done = t == DType::kF16 ? detail::F32ToF16Avx512(src, d, n) : detail::F32ToBF16Avx512(src, d, n);
  }
  if (done < n) Convert(src + done, DType::kF32, static_cast<char*>(dst) + done * DTypeSize(t), t, n - done);
}

}  // namespace zerorun::kernels

// Reduction kernels: fp32 sums and averages run on the kernels' SIMD add and divide (ActiveIsa; both
// are exact IEEE operations, so every ISA gives the same bits); max/min, fp64 and integers are plain
// loops; 16-bit types go through fp32 in blocks with core's bulk converters (F16C when present).
#include "zerorun/comm/reduce.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "zerorun/core/cpu_features.h"
#include "zerorun/core/error.h"
#include "zerorun/kernels/cpu/vec.h"

namespace zerorun::comm {

namespace {

constexpr size_t kBlock = 2048;

template <typename T>
void ReduceTyped(T* out, const T* a, const T* b, size_t n, ReduceOp op, int divisor) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
#pragma GCC ivdep
      for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      break;
    case ReduceOp::kMax:
#pragma GCC ivdep
      for (size_t i = 0; i < n; ++i) out[i] = a[i] < b[i] ? b[i] : a[i];
      break;
    case ReduceOp::kMin:
#pragma GCC ivdep
      for (size_t i = 0; i < n; ++i) out[i] = b[i] < a[i] ? b[i] : a[i];
      break;
  }
  if (op == ReduceOp::kAvg && divisor > 0) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(out[i] / static_cast<T>(divisor));
  }
}

// The -O2 build leaves ReduceTyped's loops scalar; this was 27% of a 64 KiB two-rank shm all-reduce.
void ReduceF32(float* out, const float* a, const float* b, size_t n, ReduceOp op, int divisor) {
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg) {
    ReduceTyped(out, a, b, n, op, divisor);
    return;
  }
  const kernels::cpu::VecOps& v = kernels::cpu::Vec();
  v.add(out, a, b, static_cast<int64_t>(n));
  if (op == ReduceOp::kAvg && divisor > 0) v.divide(out, out, static_cast<float>(divisor), static_cast<int64_t>(n));
}

void ToF32(const void* in, DType t, float* out, size_t n) {
  if (t == DType::kF16) {
    ConvertF16ToF32(static_cast<const uint16_t*>(in), out, n);
  } else {
    ConvertBF16ToF32(static_cast<const uint16_t*>(in), out, n);
  }
}

void FromF32(const float* in, DType t, void* out, size_t n) {
  if (t == DType::kF16) {
    ConvertF32ToF16(in, static_cast<uint16_t*>(out), n);
  } else {
    ConvertF32ToBF16(in, static_cast<uint16_t*>(out), n);
  }
}

void ScaleAvg(float* x, size_t n, ReduceOp op, int divisor) {
  if (op != ReduceOp::kAvg || divisor <= 0) return;
  kernels::cpu::Vec().divide(x, x, static_cast<float>(divisor), static_cast<int64_t>(n));
}

}  // namespace

DType AccumType(DType t) { return Is16Bit(t) ? DType::kF32 : t; }

void ReduceBuffers(void* out, const void* a, const void* b, size_t n, DType dtype, ReduceOp op, int divisor) {
  switch (dtype) {
    case DType::kF32:
      ReduceF32(static_cast<float*>(out), static_cast<const float*>(a), static_cast<const float*>(b), n, op, divisor);
      return;
    case DType::kF64:
      ReduceTyped(static_cast<double*>(out), static_cast<const double*>(a), static_cast<const double*>(b), n, op, divisor);
      return;
    case DType::kI32:
      ReduceTyped(static_cast<int32_t*>(out), static_cast<const int32_t*>(a), static_cast<const int32_t*>(b), n, op, divisor);
      return;
    case DType::kI64:
      ReduceTyped(static_cast<int64_t*>(out), static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), n, op, divisor);
      return;
    case DType::kF16:
    case DType::kBF16: {
      float fa[kBlock], fb[kBlock];
      for (size_t i = 0; i < n; i += kBlock) {
        size_t m = std::min(kBlock, n - i);
        ToF32(static_cast<const uint16_t*>(a) + i, dtype, fa, m);
        ToF32(static_cast<const uint16_t*>(b) + i, dtype, fb, m);
        ReduceF32(fa, fa, fb, m, op, 0);
        ScaleAvg(fa, m, op, divisor);
        FromF32(fa, dtype, static_cast<uint16_t*>(out) + i, m);
      }
      return;
    }
    default:
      ZR_THROW(InvalidArgument, "reduction over dtype {} is not supported", DTypeName(dtype));
  }
}

void ReduceIntoAccum(void* out_acc, const void* a_acc, const void* b, size_t n, DType dtype, ReduceOp op) {
  if (!Is16Bit(dtype)) {
    ReduceBuffers(out_acc, a_acc, b, n, dtype, op, 0);
    return;
  }
  float fb[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = std::min(kBlock, n - i);
    ToF32(static_cast<const uint16_t*>(b) + i, dtype, fb, m);
    ReduceF32(static_cast<float*>(out_acc) + i, static_cast<const float*>(a_acc) + i, fb, m, op, 0);
  }
}

void FinishFromAccum(void* out, const void* in_acc, size_t n, DType dtype, ReduceOp op, int divisor) {
  if (!Is16Bit(dtype)) {
    if (out != in_acc) std::memmove(out, in_acc, n * DTypeSize(dtype));
    if (op == ReduceOp::kAvg && divisor > 0) {
      switch (dtype) {
        case DType::kF32: ScaleAvg(static_cast<float*>(out), n, op, divisor); break;
        case DType::kF64: for (size_t i = 0; i < n; ++i) static_cast<double*>(out)[i] /= divisor; break;
        case DType::kI32: for (size_t i = 0; i < n; ++i) static_cast<int32_t*>(out)[i] /= divisor; break;
        case DType::kI64: for (size_t i = 0; i < n; ++i) static_cast<int64_t*>(out)[i] /= divisor; break;
        default: break;
      }
    }
    return;
  }
  float f[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = std::min(kBlock, n - i);
    CopyBytes(f, static_cast<const float*>(in_acc) + i, m * sizeof(float));
    ScaleAvg(f, m, op, divisor);
    FromF32(f, dtype, static_cast<uint16_t*>(out) + i, m);
  }
}

void ToAccum(void* out_acc, const void* in, size_t n, DType dtype) {
  if (!Is16Bit(dtype)) {
    if (out_acc != in) std::memmove(out_acc, in, n * DTypeSize(dtype));
    return;
  }
  ToF32(in, dtype, static_cast<float*>(out_acc), n);
}

namespace {

// 64 bytes per iteration with explicit vector moves (a plain loop could be turned back into memcpy).
// Both widths are kept: AVX2 moves made the 2-rank shm all-reduce faster than SSE2 moves (256 KiB:
// 6.4-8.0 vs 5.5-6.2 GB/s busbw, 512 KiB: 8.8-10.0 vs 6.5-7.3; zerorun-bench, six runs of each build,
// alternating). A single-thread copy loop showed no difference: the gain is in the cross-core copies.
void CopySse2(char* d, const char* s, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, n - i);
}

__attribute__((target("avx2"))) void CopyAvx2(char* d, const char* s, size_t n) {
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
  std::memcpy(d + i, s + i, n - i);
}

}  // namespace

void CopyBytes(void* dst, const void* src, size_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (bytes < 4096 || (d < s + bytes && s < d + bytes)) {
    std::memmove(dst, src, bytes);
    return;
  }
  static const bool avx2 = GetCpuFeatures().avx2;
  if (avx2) {
    CopyAvx2(d, s, bytes);
  } else {
    CopySse2(d, s, bytes);
  }
}

}  // namespace zerorun::comm

// Element access over type-erased buffers, for the kernel implementations (not a public API).
// Load/Store switch on the dtype per element: fine for ref/ and for tails; the fast paths convert
// whole rows with LoadRow/StoreRow (row_convert.h: core's bulk converters, AVX-512 when present).
#pragma once

#include <cstdint>

#include "zerorun/core/dtype.h"
#include "zerorun/kernels/row_convert.h"

namespace zerorun::kernels {

inline float Load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return HalfBitsToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return BF16BitsToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kF64: return static_cast<float>(static_cast<const double*>(p)[i]);
    default: return 0.0f;
  }
}

inline double LoadD(const void* p, DType t, int64_t i) {
  if (t == DType::kF64) return static_cast<const double*>(p)[i];
  return static_cast<double>(Load(p, t, i));
}

// Rounds once from double: a double is first rounded to fp32 then to 16 bits, which can double-round
// only at exact 16-bit ties of the fp32 value; the tests' 16-bit tolerances cover that.
inline void Store(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = FloatToHalfBits(v); break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = FloatToBF16Bits(v); break;
    case DType::kF64: static_cast<double*>(p)[i] = v; break;
    default: break;
  }
}

inline void StoreD(void* p, DType t, int64_t i, double v) {
  if (t == DType::kF64) {
    static_cast<double*>(p)[i] = v;
  } else {
    Store(p, t, i, static_cast<float>(v));
  }
}

// Byte address of element i.
inline const void* At(const void* p, DType t, int64_t i) {
  return static_cast<const char*>(p) + static_cast<size_t>(i) * DTypeSize(t);
}
inline void* At(void* p, DType t, int64_t i) { return static_cast<char*>(p) + static_cast<size_t>(i) * DTypeSize(t); }

// dst[0..n) = src elements [i, i + n) as fp32.
inline void LoadRow(const void* src, DType t, int64_t i, float* dst, int64_t n) {
  RowToF32(At(src, t, i), t, dst, static_cast<size_t>(n));
}
// dst elements [i, i + n) = src[0..n) rounded to t.
inline void StoreRow(const float* src, void* dst, DType t, int64_t i, int64_t n) {
  RowFromF32(src, At(dst, t, i), t, static_cast<size_t>(n));
}

}  // namespace zerorun::kernels

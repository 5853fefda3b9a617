// dtype names and the scalar paths of the bulk converters; dispatch to dtype_avx2.cc when available.
#include "zerorun/core/dtype.h"

#include <cctype>
#include <cstring>

#include "zerorun/core/cpu_features.h"
#include "zerorun/core/error.h"

namespace zerorun {

namespace detail {
// Defined in dtype_avx2.cc (compiled with -mavx2 -mf16c). Each converts the largest multiple of 8
// and returns how many elements it handled; the caller finishes the tail with the scalar code.
size_t ConvertF32ToF16Avx2(const float* src, uint16_t* dst, size_t n);
size_t ConvertF16ToF32Avx2(const uint16_t* src, float* dst, size_t n);
size_t ConvertF32ToBF16Avx2(const float* src, uint16_t* dst, size_t n);
size_t ConvertBF16ToF32Avx2(const uint16_t* src, float* dst, size_t n);
}  // namespace detail

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
    case DType::kI8: return 1;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  ZR_CHECK(false, "bad dtype {}", static_cast<int>(t));
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "fp64";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}

DType ParseDType(std::string_view name) {
  std::string s;
  for (char c : name) s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  if (s == "fp32" || s == "float32" || s == "float" || s == "f32") return DType::kF32;
  if (s == "fp16" || s == "float16" || s == "half" || s == "f16") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "fp64" || s == "float64" || s == "double" || s == "f64") return DType::kF64;
  if (s == "int8" || s == "i8") return DType::kI8;
  if (s == "uint8" || s == "u8") return DType::kU8;
  if (s == "int32" || s == "i32" || s == "int") return DType::kI32;
  if (s == "int64" || s == "i64" || s == "long") return DType::kI64;
  ZR_THROW(InvalidArgument, "unknown dtype '{}' (expected fp32, fp16, bf16, fp64, int8, uint8, int32 or int64)",
           name);
}

namespace {
bool UseAvx2() { return ActiveIsa() >= Isa::kAvx2; }
}  // namespace

void ConvertF32ToF16(const float* src, uint16_t* dst, size_t n) {
  size_t i = UseAvx2() ? detail::ConvertF32ToF16Avx2(src, dst, n) : 0;
  for (; i < n; ++i) dst[i] = FloatToHalfBits(src[i]);
}
void ConvertF16ToF32(const uint16_t* src, float* dst, size_t n) {
  size_t i = UseAvx2() ? detail::ConvertF16ToF32Avx2(src, dst, n) : 0;
  for (; i < n; ++i) dst[i] = HalfBitsToFloat(src[i]);
}
void ConvertF32ToBF16(const float* src, uint16_t* dst, size_t n) {
  size_t i = UseAvx2() ? detail::ConvertF32ToBF16Avx2(src, dst, n) : 0;
  for (; i < n; ++i) dst[i] = FloatToBF16Bits(src[i]);
}
void ConvertBF16ToF32(const uint16_t* src, float* dst, size_t n) {
  size_t i = UseAvx2() ? detail::ConvertBF16ToF32Avx2(src, dst, n) : 0;
  for (; i < n; ++i) dst[i] = BF16BitsToFloat(src[i]);
}

void Convert(const void* src, DType st, void* dst, DType dt, size_t n) {
  ZR_CHECK(IsFloating(st) && IsFloating(dt), "Convert: {} -> {} is not a floating conversion", DTypeName(st),
           DTypeName(dt));
  if (n == 0) return;
  if (st == dt) {
    if (src != dst) std::memmove(dst, src, n * DTypeSize(st));
    return;
  }
  ZR_CHECK(src != dst, "Convert: in-place {} -> {} is not supported", DTypeName(st), DTypeName(dt));
  auto u16in = static_cast<const uint16_t*>(src);
  auto u16out = static_cast<uint16_t*>(dst);
  if (st == DType::kF32 && dt == DType::kF16) return ConvertF32ToF16(static_cast<const float*>(src), u16out, n);
  if (st == DType::kF32 && dt == DType::kBF16) return ConvertF32ToBF16(static_cast<const float*>(src), u16out, n);
  if (st == DType::kF16 && dt == DType::kF32) return ConvertF16ToF32(u16in, static_cast<float*>(dst), n);
  if (st == DType::kBF16 && dt == DType::kF32) return ConvertBF16ToF32(u16in, static_cast<float*>(dst), n);
  // Remaining pairs (those with fp64) go element by element. fp64 -> 16-bit rounds through fp32, so
  // it may round twice; fp64 exists only for reference computations in tests.
  for (size_t i = 0; i < n; ++i) {
    double v;
    switch (st) {
      case DType::kF32: v = static_cast<const float*>(src)[i]; break;
      case DType::kF16: v = HalfBitsToFloat(u16in[i]); break;
      case DType::kBF16: v = BF16BitsToFloat(u16in[i]); break;
      default: v = static_cast<const double*>(src)[i]; break;
    }
    switch (dt) {
      case DType::kF32: static_cast<float*>(dst)[i] = static_cast<float>(v); break;
      case DType::kF64: static_cast<double*>(dst)[i] = v; break;
      case DType::kF16: u16out[i] = FloatToHalfBits(static_cast<float>(v)); break;
      default: u16out[i] = FloatToBF16Bits(static_cast<float>(v)); break;
    }
  }
}

}  // namespace zerorun

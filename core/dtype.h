// Element types and exact conversions between fp32 and the 16-bit formats.
//
// fp32 -> fp16/bf16 rounds to nearest, ties to even, and treats NaN, +-Inf, subnormals and overflow
// exactly as IEEE 754 (and x86 F16C) do: overflow becomes Inf, a NaN stays a NaN of the same sign with
// its payload truncated and the quiet bit set, subnormal results are produced (never flushed).
// fp16/bf16 -> fp32 is exact. The bulk converters pick F16C/AVX2 at run time and agree bit for bit
// with the scalar functions below.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zerorun {

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI8, kU8, kI32, kI64 };

size_t DTypeSize(DType t);
// Canonical short name: fp32, fp16, bf16, fp64, int8, uint8, int32, int64.
const char* DTypeName(DType t);
// Accepts the canonical names and the usual spellings (float32, float, fp16, half, float16, bfloat16,
// torch.bfloat16, ...); throws InvalidArgument naming the input otherwise.
DType ParseDType(std::string_view name);
inline bool IsFloating(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF64; }
inline bool Is16Bit(DType t) { return t == DType::kF16 || t == DType::kBF16; }

// ---- scalar conversions --------------------------------------------------------------------------

inline uint16_t FloatToHalfBits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to Inf
  if (a >= 0x38800000u) {  // normal half: rebias the exponent, round the 13 dropped bits to even
    return static_cast<uint16_t>(sign | ((a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13));
  }
  // Subnormal half (multiples of 2^-24): adding 0.5f (whose ulp is 2^-24) lets the FPU round to even.
  float t = std::bit_cast<float>(a) + 0.5f;
  return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(t) - 0x3f000000u));
}

inline float HalfBitsToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  if (exp == 0) {
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24, exact
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(v));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t FloatToBF16Bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float BF16BitsToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// 16-bit storage types. They convert explicitly; arithmetic happens in fp32.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) : bits(FloatToHalfBits(f)) {}
  static Half FromBits(uint16_t b) { Half h; h.bits = b; return h; }
  explicit operator float() const { return HalfBitsToFloat(bits); }
};
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(FloatToBF16Bits(f)) {}
  static BFloat16 FromBits(uint16_t b) { BFloat16 h; h.bits = b; return h; }
  explicit operator float() const { return BF16BitsToFloat(bits); }
};
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kF64; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kI8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };

// Load/store any floating storage type as fp32 (the accumulation type).
inline float ToFloat(float v) { return v; }
inline float ToFloat(Half v) { return HalfBitsToFloat(v.bits); }
inline float ToFloat(BFloat16 v) { return BF16BitsToFloat(v.bits); }
template <typename T> inline T FromFloat(float v);
template <> inline float FromFloat<float>(float v) { return v; }
template <> inline Half FromFloat<Half>(float v) { return Half(v); }
template <> inline BFloat16 FromFloat<BFloat16>(float v) { return BFloat16(v); }

// ---- bulk conversions (runtime ISA dispatch; identical results on every path) --------------------

void ConvertF32ToF16(const float* src, uint16_t* dst, size_t n);
void ConvertF16ToF32(const uint16_t* src, float* dst, size_t n);
void ConvertF32ToBF16(const float* src, uint16_t* dst, size_t n);
void ConvertBF16ToF32(const uint16_t* src, float* dst, size_t n);
// Any floating dtype to any floating dtype (fp32, fp16, bf16, fp64). Same-type is a copy.
// `src` and `dst` must not overlap unless they are the same pointer with the same dtype.
void Convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

}  // namespace zerorun

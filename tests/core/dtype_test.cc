// dtype conversions: exhaustive 16-bit round trips, fp32 -> 16-bit rounding against an independent
// oracle (nearest representable value by search, ties to even), and every ISA path bit-identical.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "zerorun/core/cpu_features.h"
#include "zerorun/core/dtype.h"
#include "zerorun/core/error.h"

namespace zr = zerorun;

namespace {

bool IsNanHalf(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool IsNanBF16(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// Oracle for fp32 -> fp16: the finite non-negative halves as doubles, searched for the nearest.
struct HalfOracle {
  std::vector<double> values;  // index = bit pattern 0x0000..0x7bff
  HalfOracle() {
    for (uint32_t h = 0; h <= 0x7bff; ++h) {
      uint32_t e = h >> 10, m = h & 0x3ff;
      values.push_back(e == 0 ? std::ldexp(static_cast<double>(m), -24)
                              : std::ldexp(1.0 + m / 1024.0, static_cast<int>(e) - 15));
    }
  }
  uint16_t Round(float f) const {
    if (std::isnan(f)) return 0x7e00;  // sign/payload checked separately
    uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    double a = std::fabs(static_cast<double>(f));
    // Halfway between the largest half (65504) and 2^16 rounds to even, i.e. to Inf.
    if (a >= 65520.0) return sign | 0x7c00;
    auto it = std::lower_bound(values.begin(), values.end(), a);
    size_t hi = static_cast<size_t>(it - values.begin());
    if (hi == 0) return sign;
    if (hi >= values.size()) return sign | 0x7bff;
    size_t lo = hi - 1;
    double dlo = a - values[lo], dhi = values[hi] - a;
    size_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) == 0 ? lo : hi);
    return static_cast<uint16_t>(sign | pick);
  }
};

uint16_t BF16Oracle(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t lo = x & 0xffff0000u;       // truncation toward zero in magnitude
  uint32_t hi = lo + 0x10000u;          // next bf16 away from zero
  double a = std::fabs(static_cast<double>(f));
  double vlo = std::fabs(static_cast<double>(std::bit_cast<float>(lo)));
  double vhi = (hi & 0x7fffffffu) >= 0x7f800000u ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(std::bit_cast<float>(hi)));
  uint32_t pick;
  if (a - vlo < vhi - a) pick = lo;
  else if (vhi - a < a - vlo) pick = hi;
  else pick = ((lo >> 16) & 1) == 0 ? lo : hi;
  return static_cast<uint16_t>(pick >> 16);
}

std::vector<float> EdgeFloats() {
  float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 65536.0f, 1e30f,
                          inf, -inf, 6.1035156e-05f /* min normal half */, 5.9604645e-08f /* min subnormal */,
                          2.9802322e-08f /* half of it: ties to zero */, 2.9802326e-08f, 8.940697e-08f,
                          std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::max(), 1.0009765625f, 1.00048828125f /* tie */,
                          1.00146484375f /* tie up to even */, 3.3895314e38f, 1.0039062f, 1.0019531f};
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x7fbfffffu, 0x7f7fffffu, 0x3f808000u,
                        0x3f818000u, 0x3f80ffffu, 0x00000001u, 0x80000001u, 0x007fffffu}) {
    v.push_back(std::bit_cast<float>(bits));
  }
  return v;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("every fp16 bit pattern round-trips through fp32") {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = zr::HalfBitsToFloat(static_cast<uint16_t>(h));
    uint16_t back = zr::FloatToHalfBits(f);
    if (IsNanHalf(static_cast<uint16_t>(h))) {
      REQUIRE(std::isnan(f));
      // NaNs keep sign and payload; a signalling NaN comes back quiet (as on F16C hardware).
      CHECK(back == (h | 0x200));
    } else {
      REQUIRE(back == h);
    }
  }
}

TEST_CASE("every bf16 bit pattern round-trips through fp32") {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = zr::BF16BitsToFloat(static_cast<uint16_t>(b));
    uint16_t back = zr::FloatToBF16Bits(f);
    if (IsNanBF16(static_cast<uint16_t>(b))) {
      REQUIRE(std::isnan(f));
      CHECK(back == (b | 0x40));
    } else {
      REQUIRE(back == b);
    }
  }
}

TEST_CASE("fp16 widening is exact: values match the IEEE definition") {
  CHECK(zr::HalfBitsToFloat(0x3c00) == 1.0f);
  CHECK(zr::HalfBitsToFloat(0x7bff) == 65504.0f);
  CHECK(zr::HalfBitsToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(zr::HalfBitsToFloat(0x0400) == std::ldexp(1.0f, -14));
  CHECK(std::isinf(zr::HalfBitsToFloat(0xfc00)));
  CHECK(zr::HalfBitsToFloat(0xfc00) < 0);
  CHECK(std::signbit(zr::HalfBitsToFloat(0x8000)));
}

TEST_CASE("fp32 -> fp16 rounds to nearest even on edge cases and 2M random values") {
  HalfOracle oracle;
  auto check = [&](float f) {
    uint16_t got = zr::FloatToHalfBits(f);
    if (std::isnan(f)) {
      REQUIRE(IsNanHalf(got));
      REQUIRE((got & 0x8000) == (std::signbit(f) ? 0x8000 : 0));
      return;
    }
    uint16_t want = oracle.Round(f);
    INFO("f=" << f << " bits=0x" << std::hex << std::bit_cast<uint32_t>(f));
    REQUIRE(got == want);
  };
  for (float f : EdgeFloats()) check(f);
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 1000000; ++i) check(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  // Values inside the half range, where rounding matters most.
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  std::uniform_real_distribution<float> small(-1e-4f, 1e-4f);
  for (int i = 0; i < 500000; ++i) {
    check(dist(rng));
    check(small(rng));
  }
}

TEST_CASE("fp32 -> bf16 rounds to nearest even on edge cases and 2M random values") {
  auto check = [&](float f) {
    uint16_t got = zr::FloatToBF16Bits(f);
    if (std::isnan(f)) {
      REQUIRE(IsNanBF16(got));
      REQUIRE((got & 0x8000) == (std::signbit(f) ? 0x8000 : 0));
      return;
    }
    INFO("bits=0x" << std::hex << std::bit_cast<uint32_t>(f));
    REQUIRE(got == BF16Oracle(f));
  };
  for (float f : EdgeFloats()) check(f);
  std::mt19937_64 rng(99);
  for (int i = 0; i < 2000000; ++i) check(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  CHECK(zr::FloatToBF16Bits(3.4028235e38f) == 0x7f80);  // FLT_MAX rounds up to Inf
}

TEST_CASE("bulk conversions agree bit for bit with the scalar functions on every ISA path") {
  std::mt19937_64 rng(7);
  std::vector<float> src;
  for (float f : EdgeFloats()) src.push_back(f);
  for (int i = 0; i < 100003; ++i) src.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  std::vector<uint16_t> h16(65536);
  for (uint32_t i = 0; i < 65536; ++i) h16[i] = static_cast<uint16_t>(i);

  for (zr::Isa isa : {zr::Isa::kScalar, zr::Isa::kAvx2}) {
    zr::SetMaxIsa(isa);
    CAPTURE(zr::IsaName(zr::ActiveIsa()));
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{4099}, src.size()}) {
      std::vector<uint16_t> out(n);
      zr::ConvertF32ToF16(src.data(), out.data(), n);
      for (size_t i = 0; i < n; ++i) REQUIRE(out[i] == zr::FloatToHalfBits(src[i]));
      zr::ConvertF32ToBF16(src.data(), out.data(), n);
      for (size_t i = 0; i < n; ++i) REQUIRE(out[i] == zr::FloatToBF16Bits(src[i]));
    }
    std::vector<float> wide(h16.size());
    zr::ConvertF16ToF32(h16.data(), wide.data(), h16.size());
    for (size_t i = 0; i < h16.size(); ++i) {
      REQUIRE(std::bit_cast<uint32_t>(wide[i]) == std::bit_cast<uint32_t>(zr::HalfBitsToFloat(h16[i])));
    }
    zr::ConvertBF16ToF32(h16.data(), wide.data(), h16.size());
    for (size_t i = 0; i < h16.size(); ++i) {
      REQUIRE(std::bit_cast<uint32_t>(wide[i]) == std::bit_cast<uint32_t>(zr::BF16BitsToFloat(h16[i])));
    }
  }
  zr::SetMaxIsa(zr::Isa::kAvx512);
}

TEST_CASE("generic Convert covers every floating pair") {
  std::vector<float> src = {1.5f, -2.25f, 65504.0f, 1e-3f, 0.0f};
  for (zr::DType mid : {zr::DType::kF16, zr::DType::kBF16, zr::DType::kF64, zr::DType::kF32}) {
    std::vector<char> buf(src.size() * zr::DTypeSize(mid));
    std::vector<float> back(src.size());
    zr::Convert(src.data(), zr::DType::kF32, buf.data(), mid, src.size());
    zr::Convert(buf.data(), mid, back.data(), zr::DType::kF32, src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      float tol = mid == zr::DType::kBF16 ? std::fabs(src[i]) / 128 : mid == zr::DType::kF16 ? std::fabs(src[i]) / 1024 : 0;
      CHECK(std::fabs(back[i] - src[i]) <= tol);
    }
  }
}

TEST_CASE("dtype names parse and print") {
  CHECK(zr::ParseDType("bfloat16") == zr::DType::kBF16);
  CHECK(zr::ParseDType("torch.float16") == zr::DType::kF16);
  CHECK(zr::ParseDType("FP32") == zr::DType::kF32);
  CHECK(std::string(zr::DTypeName(zr::DType::kBF16)) == "bf16");
  CHECK(zr::DTypeSize(zr::DType::kI64) == 8);
  CHECK_THROWS_AS(zr::ParseDType("float8"), zr::InvalidArgument);
  try {
    zr::ParseDType("float8");
  } catch (const zr::Error& e) {
    CHECK(std::string(e.what()).find("float8") != std::string::npos);
  }
}

}  // TEST_SUITE

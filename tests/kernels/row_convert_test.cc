// The kernels' row conversions (kernels/row_convert.h) agree bit for bit with core's scalar
// conversions on every 16-bit pattern and on fp32 patterns covering ties, subnormals, overflow, Inf
// and NaN payloads, on every ISA path.
#include <doctest/doctest.h>

#include <vector>

#include "kernel_test_util.h"
#include "zerorun/kernels/row_convert.h"

namespace zerorun::kernels::test {
namespace {

TEST_SUITE("unit") {

TEST_CASE("row conversions are bit-identical to core's scalar conversions") {
  std::vector<uint16_t> all16(65536 + 5);  // + 5: a tail that is not a multiple of 16
  for (size_t i = 0; i < all16.size(); ++i) all16[i] = static_cast<uint16_t>(i * 40503u);
  std::vector<uint32_t> bits;
  for (uint32_t i = 0; i < 200000; ++i) bits.push_back(static_cast<uint32_t>(Philox4x32(1, 2, i)[0]));
  for (uint32_t hi : {0x00000000u, 0x007fffffu, 0x33800000u, 0x387fe000u, 0x38800000u, 0x3f808000u, 0x3f818000u,
                      0x477fe000u, 0x477ff000u, 0x7f7fffffu, 0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu}) {
    for (uint32_t d = 0; d < 5; ++d) {
      bits.push_back(hi + d);
      bits.push_back((hi + d) | 0x80000000u);
      bits.push_back(hi - d);
    }
  }
  std::vector<float> f(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) f[i] = std::bit_cast<float>(bits[i]);
  ForEachIsa([&](Isa) {
    std::vector<float> wide(all16.size());
    RowToF32(all16.data(), DType::kF16, wide.data(), all16.size());
    int64_t bad = 0;
    for (size_t i = 0; i < all16.size(); ++i) {
      bad += std::bit_cast<uint32_t>(wide[i]) != std::bit_cast<uint32_t>(HalfBitsToFloat(all16[i]));
    }
    RowToF32(all16.data(), DType::kBF16, wide.data(), all16.size());
    for (size_t i = 0; i < all16.size(); ++i) {
      bad += std::bit_cast<uint32_t>(wide[i]) != std::bit_cast<uint32_t>(BF16BitsToFloat(all16[i]));
    }
    std::vector<uint16_t> narrow(f.size());
    RowFromF32(f.data(), narrow.data(), DType::kF16, f.size());
    for (size_t i = 0; i < f.size(); ++i) bad += narrow[i] != FloatToHalfBits(f[i]);
    RowFromF32(f.data(), narrow.data(), DType::kBF16, f.size());
    for (size_t i = 0; i < f.size(); ++i) bad += narrow[i] != FloatToBF16Bits(f[i]);
    CHECK(bad == 0);
  });
}

}  // TEST_SUITE
}  // namespace
}  // namespace zerorun::kernels::test

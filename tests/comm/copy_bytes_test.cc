// comm::CopyBytes (the vector-move memmove of the shared-memory paths): every size around its 4 KiB
// cut-over and its 128/64-byte blocks, unaligned ends, and overlapping ranges, against memmove.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "zerorun/comm/reduce.h"

using zerorun::comm::CopyBytes;

TEST_SUITE("unit") {

TEST_CASE("CopyBytes equals memmove for every size, alignment and overlap") {
  std::vector<unsigned char> src(70000), dst(70000 + 64), want(70000 + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{4096 + 127},
                   size_t{4096 + 128}, size_t{65536 + 13}, size_t{69000}}) {
    for (size_t off : {size_t{0}, size_t{1}, size_t{17}, size_t{33}}) {
      INFO("n " << n << " offset " << off);
      std::fill(dst.begin(), dst.end(), 0xAB);
      want = dst;
      std::memmove(want.data() + off, src.data() + (off * 3) % 64, n);
      CopyBytes(dst.data() + off, src.data() + (off * 3) % 64, n);
      CHECK(dst == want);  // the bytes past the end are untouched too
    }
  }
  // Overlapping ranges (forward and backward by less than a block) behave as memmove.
  for (long shift : {-100L, -1L, 1L, 100L}) {
    INFO("shift " << shift);
    std::vector<unsigned char> a(src.begin(), src.begin() + 20000), b = a;
    CopyBytes(a.data() + 5000 + shift, a.data() + 5000, 10000);
    std::memmove(b.data() + 5000 + shift, b.data() + 5000, 10000);
    CHECK(a == b);
  }
}

}  // TEST_SUITE

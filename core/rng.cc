// Philox4x32-10 and the fills built on it.
#include "zerorun/core/rng.h"

#include <cmath>

#include "zerorun/core/philox.h"
#include "zerorun/core/thread_pool.h"

namespace zerorun {
namespace {

inline uint32_t WordAt(uint64_t seed, uint64_t stream, uint64_t word) { return PhiloxWordAt(seed, stream, word); }

inline float NormalAt(uint64_t seed, uint64_t stream, uint64_t index) {
  // Words 2*index and 2*index+1 sit in the same block (index*2 is even).
  auto block = Philox4x32(seed, stream, (2 * index) >> 2);
  int w = static_cast<int>((2 * index) & 3);
  float u1 = (static_cast<float>(block[w] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
  float u2 = U32ToUniform(block[w + 1]);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

}  // namespace

std::array<uint32_t, 4> Philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  PhiloxWords b = Philox4x32Block(key, counter_hi, counter_lo);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

uint64_t HashName(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

uint32_t Rng::NextU32() { return WordAt(seed_, stream_, offset_++); }
float Rng::Uniform() { return U32ToUniform(NextU32()); }
float Rng::Normal() {
  // Align to an even word so (offset, offset+1) share a block.
  if (offset_ & 1) ++offset_;
  float v = NormalAt(seed_, stream_, offset_ / 2);
  offset_ += 2;
  return v;
}

void FillUniform(float* dst, size_t n, uint64_t seed, uint64_t stream, uint64_t offset, float lo, float hi) {
  float scale = hi - lo;
  ParallelFor(0, static_cast<int64_t>(n), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      dst[i] = lo + scale * U32ToUniform(WordAt(seed, stream, offset + static_cast<uint64_t>(i)));
    }
  });
}

void FillNormal(float* dst, size_t n, uint64_t seed, uint64_t stream, uint64_t offset, float mean, float stddev) {
  ParallelFor(0, static_cast<int64_t>(n), 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = mean + stddev * NormalAt(seed, stream, offset + static_cast<uint64_t>(i));
  });
}

}  // namespace zerorun

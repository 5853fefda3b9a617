// Philox4x32-10 and the fills built on it.
#include "zerorun/core/rng.h"

#include <cmath>

#include "zerorun/core/thread_pool.h"

namespace zerorun {
namespace {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

inline uint32_t MulHiLo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

inline uint32_t WordAt(uint64_t seed, uint64_t stream, uint64_t word) {
  return Philox4x32(seed, stream, word >> 2)[word & 3];
}

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
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = MulHiLo(kM0, c0, &hi0);
    uint32_t lo1 = MulHiLo(kM1, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
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

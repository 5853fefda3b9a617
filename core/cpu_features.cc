// CPUID probing and the ZERORUN_ISA cap.
#include "zerorun/core/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace zerorun {
namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t Xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

// CPUID and XGETBV directly (not __builtin_cpu_supports, which clang 14 lacks for f16c): an ISA
// counts only when the OS also saves its registers.
CpuFeatures Probe() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = Xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;
  if (!ymm_state) return f;
  unsigned b7 = 0, a71 = 0;
  if (__get_cpuid_max(0, nullptr) >= 7) {
    unsigned a7 = 0, c7 = 0, d7 = 0;
    __cpuid_count(7, 0, a7, b7, c7, d7);
    unsigned b71 = 0, c71 = 0, d71 = 0;
    if (a7 >= 1) __cpuid_count(7, 1, a71, b71, c71, d71);  // sub-leaf 1: EAX bit 5 is AVX512_BF16
  }
  f.f16c = f16c;
  f.avx2 = (b7 & (1u << 5)) && fma;
  const bool avx512 = (b7 & (1u << 16)) && (b7 & (1u << 17)) && (b7 & (1u << 30)) && (b7 & (1u << 31));
  f.avx512 = avx512 && zmm_state && f.avx2 && f.f16c;
  f.avx512_bf16 = f.avx512 && (a71 & (1u << 5));
#endif
  return f;
}

Isa CapFromEnv() {
  const char* env = std::getenv("ZERORUN_ISA");
  if (env == nullptr) return Isa::kAvx512;
  if (std::strcmp(env, "scalar") == 0) return Isa::kScalar;
  if (std::strcmp(env, "avx2") == 0) return Isa::kAvx2;
  if (std::strcmp(env, "avx512") != 0 && *env != '\0') {
    std::fprintf(stderr, "zerorun: ignoring ZERORUN_ISA='%s' (use scalar|avx2|avx512)\n", env);
  }
  return Isa::kAvx512;
}

std::atomic<int> g_cap{-1};

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Probe();
  return features;
}

Isa ActiveIsa() {
  int cap = g_cap.load(std::memory_order_relaxed);
  if (cap < 0) {
    cap = static_cast<int>(CapFromEnv());
    g_cap.store(cap, std::memory_order_relaxed);
  }
  const CpuFeatures& f = GetCpuFeatures();
  Isa best = f.avx512 ? Isa::kAvx512 : (f.avx2 && f.f16c) ? Isa::kAvx2 : Isa::kScalar;
  return static_cast<Isa>(std::min(cap, static_cast<int>(best)));
}

void SetMaxIsa(Isa isa) { g_cap.store(static_cast<int>(isa), std::memory_order_relaxed); }

std::string IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

}  // namespace zerorun

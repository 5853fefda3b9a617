// CPUID probing and the ZERORUN_ISA cap.
#include "zerorun/core/cpu_features.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace zerorun {
namespace {

CpuFeatures Probe() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && f.avx2 && f.f16c;
#endif
  return f;
}

Isa CapFromEnv() {
  const char* env = std::getenv("ZERORUN_ISA");
  if (env == nullptr) return Isa::kAvx512;
  if (std::strcmp(env, "scalar") == 0) return Isa::kScalar;
  if (std::strcmp(env, "avx2") == 0) return Isa::kAvx2;
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

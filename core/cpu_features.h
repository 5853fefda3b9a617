// What the CPU we run on can do, read once at start-up (CPUID via the compiler's builtins). SIMD
// kernels are compiled per instruction set (*_avx2.cc, *_avx512.cc) and chosen with these at run
// time, so one binary runs on any x86-64. ZERORUN_ISA=scalar|avx2|avx512 caps the choice (tests use it
// to exercise every path on one machine).
#pragma once

#include <string>

namespace zerorun {

enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2 = false;    // with FMA
  bool f16c = false;
  bool avx512 = false;  // F, BW, VL, DQ
  bool avx512_bf16 = false;  // AVX512_BF16 (vdpbf16ps, vcvtneps2bf16) beside the above
};

// The features of this CPU (ignores ZERORUN_ISA).
const CpuFeatures& GetCpuFeatures();
// The best ISA this CPU supports, capped by ZERORUN_ISA and by SetMaxIsa.
Isa ActiveIsa();
// Caps ActiveIsa() for this process (tests); kAvx512 restores the CPU's own limit.
void SetMaxIsa(Isa isa);
std::string IsaName(Isa isa);

}  // namespace zerorun

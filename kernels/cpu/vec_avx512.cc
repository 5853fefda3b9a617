// VecOps for AVX-512 (F, DQ): 16 floats per register, exp through scalef. Built everywhere, run only
// where the CPU has AVX-512 (the kernel tests cover it there).
// GCC 12's AVX-512 headers start masked intrinsics from _mm512_undefined_ps(), which -Wuninitialized
// reports once inlined (a compiler false positive); silence it for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "zerorun/kernels/cpu/vec_avx512.h"
#include "zerorun/kernels/cpu/vec_impl.h"

namespace zerorun::kernels::cpu {
namespace detail {
const VecOps& VecOpsAvx512() { return VecImpl<Avx512V>::Table(); }
}  // namespace detail

}  // namespace zerorun::kernels::cpu

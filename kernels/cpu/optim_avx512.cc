// The optimizer loops of optim_impl.h compiled for AVX-512. Chosen at run time by optim.cc.
#define ZR_OPTIM_DEFINE_LOOPS
#include "zerorun/kernels/cpu/optim_impl.h"

namespace zerorun::kernels::cpu::detail {
const OptimBlockFns& OptimBlockFnsAvx512() { return kOptimBlockFns; }
}  // namespace zerorun::kernels::cpu::detail

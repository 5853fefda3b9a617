// The portable VecOps (plain C++ and <cmath>) and the per-call choice among ISAs.
#include "zerorun/kernels/cpu/vec.h"

#include "zerorun/core/cpu_features.h"
#include "zerorun/kernels/cpu/vec_impl.h"

namespace zerorun::kernels::cpu {

namespace detail {
const VecOps& VecOpsScalar() { return VecImpl<ScalarV>::Table(); }
}  // namespace detail

const VecOps& Vec() {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return detail::VecOpsAvx512();
    case Isa::kAvx2: return detail::VecOpsAvx2();
    default: return detail::VecOpsScalar();
  }
}

}  // namespace zerorun::kernels::cpu

// Registers the multi-tensor optimizer kernels (kernels/cuda/optim.h), one tensor per call, as the
// CUDA optimizer table of kernels/optim_ops.h (CUDA builds only; not run on a GPU yet).
#include "zerorun/kernels/cuda/optim.h"
#include "zerorun/kernels/optim_ops.h"

namespace zerorun::kernels::cuda {
namespace {

OptimTensor One(const OptimSpan& s, const float* s0, const float* s1) {
  OptimTensor t;
  t.span = s;
  t.state0 = const_cast<float*>(s0);
  t.state1 = const_cast<float*>(s1);
  return t;
}

const OptimTable& CudaOptimTable() {
  static const OptimTable table = [] {
    OptimTable t;
    t.name = "cuda";
    t.adam = [](const AdamHyper& h, const OptimSpan& s, float* m, float* v) {
      OptimTensor x = One(s, m, v);
      AdamStep(h, &x, 1);
    };
    t.lion = [](const LionHyper& h, const OptimSpan& s, float* m) {
      OptimTensor x = One(s, m, nullptr);
      LionStep(h, &x, 1);
    };
    t.sgd = [](const SgdHyper& h, const OptimSpan& s, float* buf) {
      OptimTensor x = One(s, buf, nullptr);
      SgdStep(h, &x, 1);
    };
    t.adagrad = [](const AdagradHyper& h, const OptimSpan& s, float* sum) {
      OptimTensor x = One(s, sum, nullptr);
      AdagradStep(h, &x, 1);
    };
    t.lamb_moments = [](const LambHyper& h, const OptimSpan& s, float* m, float* v) {
      OptimTensor x = One(s, m, v);
      LambNorms norms;
      LambMoments(h, &x, 1, &norms);
      return norms;
    };
    t.lamb_apply = [](const LambHyper& h, const OptimSpan& s, const float* m, const float* v, float trust) {
      OptimTensor x = One(s, m, v);
      LambApply(h, &x, 1, &trust);
    };
    return t;
  }();
  return table;
}

const bool kRegistered = [] {
  RegisterOptimTable(DeviceType::kCUDA, &CudaOptimTable());
  return true;
}();

}  // namespace
}  // namespace zerorun::kernels::cuda

// UpdateRule: what the partitioned optimizer (partition_optimizer.h) needs from an optimizer — the
// arithmetic of one step over a contiguous span of parameters, given that span's state. The state
// itself is not the rule's: it lives in a StateStore (state_store.h), sub-group by sub-group, so the
// same rule runs whether the state is resident, pinned on the host, on NVMe or on a device.
// runtime::Optimizer implements it (hyper-parameters per group, step counts, kernel dispatch); zero/
// never sees optimizer types or hyper-parameters.
//
// Contract: every call is for parameter group `group` (0 <= group < the number of groups the rule was
// built with) and uses that group's current hyper-parameters and step count. span.params are the fp32
// master weights (updated in place), span.grads the reduced gradients (multiplied by span.grad_scale
// first), span.param_copy (optional) receives the updated weights in its dtype. state[k] points at the
// span's first element of state slot k (StateNames() order), each span.n fp32 values, updated in
// place. Calls for disjoint spans of one step may come in any order (not concurrently).
#pragma once

#include <string>
#include <vector>

#include "zerorun/kernels/ref/optim.h"

namespace zerorun::zero {

class UpdateRule {
 public:
  virtual ~UpdateRule() = default;
  // The fp32 state every element carries (e.g. {"exp_avg", "exp_avg_sq"}); the same for every group.
  virtual std::vector<std::string> StateNames() const = 0;
  // The value state slot `slot` of group `group` starts from (Adagrad's initial_accumulator_value; 0).
  virtual float InitialState(int group, int slot) const = 0;
  // Rules with per-tensor trust ratios (Lamb) need each whole tensor's norms, summed over every piece
  // of it on every rank, between their two passes: then the caller runs Moments over every piece,
  // agrees the sums, and runs Apply with TrustRatio of each tensor. Otherwise it calls Update.
  virtual bool NeedsTensorNorms() const = 0;
  // One step of an elementwise rule over the span.
  virtual void Update(int group, const kernels::OptimSpan& span, float* const* state) = 0;
  // Tensor-norm rules: pass 1 updates the moments and returns this piece's sums; TrustRatio turns a
  // whole tensor's sums into its ratio; pass 2 applies the update with it.
  virtual kernels::LambNorms Moments(int group, const kernels::OptimSpan& span, float* const* state) = 0;
  virtual float TrustRatio(int group, const kernels::LambNorms& whole_tensor) const = 0;
  virtual void Apply(int group, const kernels::OptimSpan& span, float* const* state, float trust) = 0;
};

}  // namespace zerorun::zero

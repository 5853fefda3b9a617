// ModuleObserver: the seam between models and the engine (DESIGN.md). Modules announce their forward
// and backward windows and when the gradients of their parameters are final; the engine implements
// this interface to gather/release ZeRO-3 parameters, stream gradients into reduction buckets and
// drive activation checkpointing. runtime/nn never calls comm/ or zero/ itself.
#pragma once

#include <vector>

namespace zerorun {
class Tensor;
}

namespace zerorun::nn {

class Module;
class Parameter;

// Call order for one module M (each call runs on the thread that runs the model):
//   forward:  PreForward(M) -> M's own forward (children nest inside) -> ForwardOutput(M, y) -> PostForward(M)
//   backward: PreBackward(M) -> M's own backward (children nest inside)
//             -> GradsReady(M, params) if any of M's direct parameters became final -> PostBackward(M)
// Parameters M owns directly (M.DirectParameters()) are readable from PreForward/PreBackward until
// PostForward/PostBackward returns, provided they are available(); an observer that gathers (ZeRO-3)
// does so in Pre* and may release in Post*. `recompute` marks activation checkpointing's replay of a
// forward inside backward: it does not count as a use of the parameters and must not be treated as a
// new micro-step. If a layer throws, Post* still runs (GradsReady does not).
class ModuleObserver {
 public:
  virtual ~ModuleObserver() = default;
  virtual void PreForward(Module& /*m*/, bool /*recompute*/) {}
  virtual void PostForward(Module& /*m*/, bool /*recompute*/) {}
  // The output of m's unary forward (Module::Forward; not for activation checkpointing's replays), in
  // order of completion: a child's before its parent's. For checks that read activations.
  virtual void ForwardOutput(Module& /*m*/, const Tensor& /*y*/) {}
  virtual void PreBackward(Module& /*m*/) {}
  virtual void PostBackward(Module& /*m*/) {}
  // The gradients of `params` (a subset of m.DirectParameters() with requires_grad) are final for this
  // backward: no later part of this backward adds to them. Fires exactly once per parameter per
  // backward, after the last use — for a tied parameter, in the backward of the module that used it
  // first in forward.
  virtual void GradsReady(Module& /*m*/, const std::vector<Parameter*>& /*params*/) {}
};

// The default: every parameter resident, nothing to do. Modules with no observer behave the same.
class NoopObserver final : public ModuleObserver {};

}  // namespace zerorun::nn

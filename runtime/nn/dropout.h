// Dropout with counter-based randomness: element i of forward call c of module M keeps its value
// (scaled by 1/(1-p)) iff uniform(seed, HashName(M.path()), (c << 32) + i) >= p. The call counter
// advances once per training-mode forward that is not a replay, so activation checkpointing can
// reproduce a mask exactly by restoring the counter (Module::set_rng_calls) and replaying. Nothing is
// stored: backward regenerates the mask from the same coordinates (kernels::DropoutBackward).
#pragma once

#include "zerorun/runtime/nn/module.h"

namespace zerorun::nn {

class Dropout final : public Module {
 public:
  // 0 <= p < 1; p == 0 (or eval mode) is the identity.
  explicit Dropout(float p);
  float p() const { return p_; }

 protected:
  Tensor OnForward(const Tensor& x) override;   // x (any shape, floating) -> same
  Tensor OnBackward(const Tensor& dy) override;

 private:
  float p_;
  bool identity_ = true;  // the last forward was the identity
  uint64_t offset_ = 0;   // RNG word offset of the last training forward; backward regenerates the mask
  int64_t numel_ = 0;
};

}  // namespace zerorun::nn

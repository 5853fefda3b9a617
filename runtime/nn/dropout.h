// Dropout with counter-based randomness: element i of forward call c of module M keeps its value
// (scaled by 1/(1-p)) iff uniform(seed, HashName(M.path()), (c << 32) + i) >= p. The call counter
// advances once per training-mode forward that is not a replay, so activation checkpointing can
// reproduce a mask exactly by restoring the counter (Module::set_rng_calls) and replaying.
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
  void OnReleaseActivations() override { mask_ = Tensor(); }

 private:
  float p_;
  bool identity_ = true;  // the last forward was the identity
  Tensor mask_;           // (numel) uint8 keep mask of the last training forward
};

// out[i] = in[i] * mask[i] * scale, for any floating dtype (fp32 arithmetic, one rounding).
void DropoutApply(const Tensor& in, const uint8_t* mask, float scale, const Tensor& out);
// Fills `mask` (n bytes): 1 where uniform(seed, stream, offset + i) >= p.
void DropoutMask(uint8_t* mask, int64_t n, float p, uint64_t seed, uint64_t stream, uint64_t offset);

}  // namespace zerorun::nn

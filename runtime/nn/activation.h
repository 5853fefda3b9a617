// Elementwise activations: GELU (tanh approximation or exact erf), SiLU, and SwiGLU over a fused
// [gate | up] projection (halves the last dimension).
#pragma once

#include "zerorun/runtime/nn/module.h"

namespace zerorun::nn {

enum class GeluKind : uint8_t { kTanh, kExact };

class Gelu final : public Module {
 public:
  explicit Gelu(GeluKind kind = GeluKind::kTanh) : Module("Gelu"), kind_(kind) {}

 protected:
  Tensor OnForward(const Tensor& x) override;
  Tensor OnBackward(const Tensor& dy) override;
  void OnReleaseActivations() override { x_ = Tensor(); }

 private:
  GeluKind kind_;
  Tensor x_;
};

class Silu final : public Module {
 public:
  Silu() : Module("Silu") {}

 protected:
  Tensor OnForward(const Tensor& x) override;
  Tensor OnBackward(const Tensor& dy) override;
  void OnReleaseActivations() override { x_ = Tensor(); }

 private:
  Tensor x_;
};

// x (..., 2H) = [gate | up] -> silu(gate) * up (..., H).
class SwiGlu final : public Module {
 public:
  SwiGlu() : Module("SwiGlu") {}

 protected:
  Tensor OnForward(const Tensor& x) override;
  Tensor OnBackward(const Tensor& dy) override;
  void OnReleaseActivations() override { x_ = Tensor(); }

 private:
  Tensor x_;
};

}  // namespace zerorun::nn

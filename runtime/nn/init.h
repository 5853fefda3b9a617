// Parameter initializers. An initial value depends only on (seed, parameter name, element index):
// the stream is HashName(name) and element i draws Philox words at offset i, so every rank, every
// ZeRO layout and every way of splitting the tree into modules starts from bit-identical weights,
// and a rank can fill just its own shard of a parameter (FillInit with offset_elems).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "zerorun/core/tensor.h"

namespace zerorun::nn {

// A recipe, not values: kept on the Parameter and applied by Module::Initialize (or by the engine on a
// shard). Fan-in/fan-out follow PyTorch: for a shape (out, in, k...) fan_in = in*k..., fan_out = out*k...;
// a 1-D shape has fan_in = fan_out = its length.
struct Init {
  enum class Kind : uint8_t { kZeros, kOnes, kConstant, kNormal, kUniform, kXavierUniform, kXavierNormal,
                              kKaimingUniform, kKaimingNormal };
  Kind kind = Kind::kZeros;
  float a = 0.0f;     // constant value | normal mean | uniform low | xavier/kaiming gain
  float b = 0.0f;     // normal stddev | uniform high

  static Init Zeros() { return {Kind::kZeros, 0, 0}; }
  static Init Ones() { return {Kind::kOnes, 0, 0}; }
  static Init Constant(float v) { return {Kind::kConstant, v, 0}; }
  static Init Normal(float mean, float stddev) { return {Kind::kNormal, mean, stddev}; }
  static Init Uniform(float lo, float hi) { return {Kind::kUniform, lo, hi}; }
  // U(-g*sqrt(6/(fan_in+fan_out)), +...) and N(0, g*sqrt(2/(fan_in+fan_out))).
  static Init XavierUniform(float gain = 1.0f) { return {Kind::kXavierUniform, gain, 0}; }
  static Init XavierNormal(float gain = 1.0f) { return {Kind::kXavierNormal, gain, 0}; }
  // U(-g*sqrt(3/fan_in), +...) and N(0, g/sqrt(fan_in)); gain sqrt(2) is He init for ReLU. PyTorch's
  // nn.Linear default (kaiming_uniform with a=sqrt(5)) is KaimingUniform(1/sqrt(3)) = U(+-1/sqrt(fan_in)).
  static Init KaimingUniform(float gain = 1.4142135f) { return {Kind::kKaimingUniform, gain, 0}; }
  static Init KaimingNormal(float gain = 1.4142135f) { return {Kind::kKaimingNormal, gain, 0}; }
  // GPT-2: N(0, 0.02) for weights, and N(0, 0.02/sqrt(2*n_layer)) for the projections that write into
  // the residual stream (attention output and MLP output).
  static Init Gpt2() { return Normal(0.0f, 0.02f); }
  static Init Gpt2Residual(int n_layer);

  std::string ToString() const;  // "normal(0, 0.02)"
};

// fan_in / fan_out of `shape` (see Init).
int64_t FanIn(const Shape& shape);
int64_t FanOut(const Shape& shape);

// Writes elements [offset_elems, offset_elems + n) of the parameter `name` of `shape` as fp32 into
// `dst`. Pure function of (init, shape, seed, name, index).
void FillInit(const Init& init, const Shape& shape, uint64_t seed, std::string_view name, int64_t offset_elems,
              float* dst, int64_t n);

// Fills all of `t` (any floating dtype, CPU) as the parameter `name`; 16-bit values are rounded once.
void FillInitTensor(const Init& init, uint64_t seed, std::string_view name, const Tensor& t);

}  // namespace zerorun::nn

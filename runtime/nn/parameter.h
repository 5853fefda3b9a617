// Parameter: one named, trainable tensor of a model, and the rules for touching it.
//
// A Parameter is created by a module (Module::AddParameter) and may be shared by several modules (tied
// weights: one Parameter, several owners). Its data and grad are Tensors that the engine may re-point
// at views into its own flat buffers (BindData/BindGrad); ZeRO-3 additionally marks a parameter
// released (SetAvailable(false)) while only a shard is resident.
//
// Access rule (always checked): layers read data() and write grad() only while a module that owns the
// parameter directly is inside its forward or backward (the "window"), and only while the parameter is
// available. Anything else aborts with the parameter's name, so a layer that would read a released
// ZeRO-3 parameter fails under every stage, not just under stage 3. The engine, optimizers and
// checkpoints use the unchecked engine_data()/engine_grad().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "zerorun/core/tensor.h"
#include "zerorun/runtime/nn/init.h"

namespace zerorun::nn {

class Module;

// Per-parameter hints for the optimizer's parameter groups. The engine decides what to do with them.
struct ParamOptions {
  bool weight_decay = true;   // false: excluded from weight decay (biases, norm gains by convention)
  float lr_scale = 1.0f;      // multiplies the group's learning rate
  std::string group;          // optional named group ("" = default)

  static ParamOptions NoDecay() {
    ParamOptions o;
    o.weight_decay = false;
    return o;
  }
};

class Parameter {
 public:
  // Usually created through Module::AddParameter. No memory is allocated until Module::Initialize (or
  // the engine binds views).
  Parameter(std::string local_name, Shape shape, DType dtype, Init init, ParamOptions options = {});
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  // Stable dotted name from the root of the tree, e.g. "h.3.attn.qkv.weight": the path of its first
  // owner (depth-first registration order) plus its local name. For a tied parameter the name of the
  // first owner wins.
  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  const Init& init() const { return init_; }
  const ParamOptions& options() const { return options_; }
  ParamOptions& mutable_options() { return options_; }
  // The module that named this parameter (its first owner).
  Module* owner() const { return owner_; }

  // Frozen parameters (requires_grad false) get no gradient, no grad tensor and no grads-ready call.
  bool requires_grad() const { return requires_grad_; }
  void set_requires_grad(bool v) { requires_grad_ = v; }

  // ---- for layers: checked access (see the access rule above) ---------------------------------
  // (shape) values in dtype().
  const Tensor& data() const;
  // (shape) gradient; backward ADDS into it. Requires requires_grad().
  const Tensor& grad() const;

  // ---- for the engine, optimizers, checkpoints and tests: unchecked -------------------------
  const Tensor& engine_data() const { return data_; }
  const Tensor& engine_grad() const { return grad_; }
  // Re-points data/grad at `view` (same shape; data of dtype(); grad of any floating dtype). The old
  // storage is dropped. Views may live in buffers the engine owns.
  void BindData(const Tensor& view);
  void BindGrad(const Tensor& view);
  // Drops the grad binding (the engine's transient gradient buckets, ZeRO stage 2): grad() fails
  // until the next BindGrad/AllocateGrad.
  void ReleaseGrad() { grad_ = Tensor(); }
  // Drops the data binding (ZeRO stage 3 between a module's windows; pair with SetAvailable(false)).
  void ReleaseData() { data_ = Tensor(); }
  // Allocates data (MemCategory::kParams) / grad (kGrads, zeroed) if not bound yet.
  void AllocateData(Device device = Device::CPU());
  void AllocateGrad(Device device = Device::CPU());
  // ZeRO-3: false while the full value is not resident. Default true.
  bool available() const { return available_; }
  void SetAvailable(bool v) { available_ = v; }
  // True while some owning module is inside forward/backward.
  bool in_window() const { return window_depth_ > 0; }
  // Forward uses (this pass, training mode) whose backward has not run yet; "grads final" fires when
  // this drops to 0 in backward.
  int pending_backward_uses() const { return pending_uses_; }

 private:
  friend class Module;
  std::string local_name_;
  std::string name_;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_;
  Init init_;
  ParamOptions options_;
  bool requires_grad_ = true;
  bool available_ = true;
  Module* owner_ = nullptr;
  int window_depth_ = 0;
  int pending_uses_ = 0;
  Tensor data_;
  Tensor grad_;
};

using ParameterPtr = std::shared_ptr<Parameter>;

}  // namespace zerorun::nn

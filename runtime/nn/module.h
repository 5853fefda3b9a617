// Module: a tree of named children and named Parameters with explicit forward and backward, in the
// manner of llm.c's *_forward/*_backward pairs: a layer saves what its backward needs during forward
// (in its own members, allocated as MemCategory::kActivations) and its backward ADDS parameter
// gradients into Parameter::grad() and returns the input gradient. There is no autograd tape.
//
// Public entry points are non-virtual: they run the installed ModuleObserver around the layer's own
// implementation and open the parameter-access window (see parameter.h). Layers with the unary shape
// x -> y override OnForward/OnBackward; layers with other signatures (embeddings of token ids, losses,
// whole models) write their own public methods and open a ForwardScope/BackwardScope first thing.
//
// Not thread-safe: one model is driven by one thread at a time (ranks-as-threads each own a model).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zerorun/core/tensor.h"
#include "zerorun/runtime/nn/checkpoint.h"
#include "zerorun/runtime/nn/observer.h"
#include "zerorun/runtime/nn/parameter.h"

namespace zerorun::nn {

class Module {
 public:
  explicit Module(std::string type_name);
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- identity and tree ---------------------------------------------------------------------
  const std::string& type_name() const { return type_name_; }
  // Dotted path from the root: "" for the root, "h.3.attn" for a grandchild.
  const std::string& path() const { return path_; }
  // "h.3.attn (CausalSelfAttention)", or "<root> (GPT)": for messages.
  std::string Describe() const;
  Module* parent() const { return parent_; }
  // Direct children in registration order, with their local names.
  const std::vector<std::pair<std::string, Module*>>& children() const { return child_list_; }
  // This module and all descendants, pre-order (registration order).
  std::vector<Module*> Modules();
  // Parameters this module registered itself (created or tied), in registration order. The engine
  // gathers exactly these around this module's windows.
  const std::vector<Parameter*>& DirectParameters() const { return direct_params_; }
  // This module's and its descendants' parameters, each once (tied ones at their first appearance),
  // pre-order. This is the canonical parameter order (flattening, checkpoints).
  std::vector<Parameter*> Parameters() const;
  // By full dotted name within this subtree; nullptr if absent.
  Parameter* FindParameter(std::string_view name) const;
  // Sum of numel over Parameters().
  int64_t NumParameterElements() const;

  // ---- lifecycle -----------------------------------------------------------------------------
  // Allocates data (and grads of trainable parameters) that are not bound yet, fills every parameter
  // from its Init with (seed, name), and sets the RNG seed (SetRngSeed(seed)). Call on the root after
  // the tree is complete (names are final) and after the engine bound any views.
  void Initialize(uint64_t seed, Device device = Device::CPU());
  // Zeroes the grads of all trainable parameters (engine_grad; no window needed).
  void ZeroGrad();
  // Seed of the counter-based RNG used by dropout; recursive. A module's stream is HashName(path()).
  void SetRngSeed(uint64_t seed);
  uint64_t rng_seed() const { return rng_seed_; }
  // Train (default) / eval mode, recursive. Eval: dropout is identity, nothing is saved for backward,
  // parameters are not counted as used, and Backward throws.
  void Train(bool on = true);
  void Eval() { Train(false); }
  bool training() const { return training_; }
  // Installs `observer` (nullptr: none) on this module and all descendants; modules added later
  // inherit their parent's. Not owned.
  void SetObserver(ModuleObserver* observer);
  ModuleObserver* observer() const { return observer_; }
  // Drops everything saved for backward, recursively (after an eval pass, or by checkpointing).
  void ReleaseActivations();
  // Forwards of this module awaiting their backward.
  int pending_backward() const { return pending_backward_; }
  // Resets the backward bookkeeping of this subtree (pending uses), e.g. after a training-mode forward
  // whose backward will never run. The outermost forward of a tree does this by itself.
  void ResetPass();

  // ---- the unary interface -------------------------------------------------------------------
  // y = f(x). Throws InvalidArgument if this module has no single-tensor forward.
  Tensor Forward(const Tensor& x);
  // dx from dy (same shape as y); adds parameter gradients. Undefined Tensor if the input has no
  // gradient (token ids). Throws InvalidArgument without a matching training-mode Forward.
  Tensor Backward(const Tensor& dy);

  // ---- activation checkpointing (checkpoint.h) ---------------------------------------------------
  // When on (training mode, unary interface only): Forward keeps only its input and drops everything
  // the subtree saved; Backward first replays the forward as a recompute (observer: PreForward/
  // PostForward with recompute = true) with the subtree's RNG counters rewound, so dropout masks repeat
  // bit for bit, then runs the real backward. Parameter names do not change. This makes the module a
  // checkpoint segment of its own; runtime/activation_checkpointing.h applies policies (runs of blocks,
  // host memory, a contiguous buffer) through CheckpointSegment. Each module of a segment must run once
  // per forward pass.
  void SetActivationCheckpointing(bool on);
  bool activation_checkpointing() const { return checkpoint_ != nullptr; }
  // The segment this module belongs to (nullptr: none).
  const CheckpointSegment* checkpoint_segment() const { return checkpoint_.get(); }

  // ---- RNG cursor (activation checkpointing saves and restores it to replay dropout) ------------
  uint64_t rng_calls() const { return rng_calls_; }
  void set_rng_calls(uint64_t calls) { rng_calls_ = calls; }

  // Marks forwards on this thread as activation-checkpoint replays while alive.
  class RecomputeScope {
   public:
    RecomputeScope();
    ~RecomputeScope();
    RecomputeScope(const RecomputeScope&) = delete;
    RecomputeScope& operator=(const RecomputeScope&) = delete;

   private:
    bool previous_;
  };
  static bool recomputing();

 protected:
  virtual Tensor OnForward(const Tensor& x);
  virtual Tensor OnBackward(const Tensor& dy);
  // Drop this module's saved tensors (children are handled by ReleaseActivations).
  virtual void OnReleaseActivations() {}

  // Registers a child under `name` (no dots, unique among this module's children and parameters).
  template <typename T>
  T* AddModule(std::string name, std::unique_ptr<T> child) {
    T* raw = child.get();
    AdoptChild(std::move(name), std::unique_ptr<Module>(std::move(child)));
    return raw;
  }
  // Creates a parameter named `name` owned by this module.
  Parameter* AddParameter(std::string name, Shape shape, DType dtype, Init init, ParamOptions options = {});
  // Registers an existing parameter (weight tying): `name` is its local name here; the parameter keeps
  // the name its creator gave it.
  Parameter* AddParameter(std::string name, ParameterPtr shared);
 public:
  // The shared handle of one of this module's direct parameters (to tie it elsewhere).
  ParameterPtr SharedParameter(const Parameter* p) const;

 protected:
  // RAII windows for layers with their own signatures: open first thing in the public method.
  class ForwardScope {
   public:
    explicit ForwardScope(Module& m);
    ~ForwardScope() noexcept(false);
    ForwardScope(const ForwardScope&) = delete;
    ForwardScope& operator=(const ForwardScope&) = delete;

   private:
    Module& m_;
    bool recompute_;
    int exceptions_;
  };
  class BackwardScope {
   public:
    explicit BackwardScope(Module& m);
    ~BackwardScope() noexcept(false);
    BackwardScope(const BackwardScope&) = delete;
    BackwardScope& operator=(const BackwardScope&) = delete;

   private:
    Module& m_;
    int exceptions_;
  };

  // A new activation tensor (MemCategory::kActivations), uninitialised / zeroed.
  static Tensor NewActivation(const Shape& shape, DType dtype);
  static Tensor NewActivationZeros(const Shape& shape, DType dtype);
  // Philox coordinates for this forward's random numbers: stream HashName(path()), and a word offset
  // unique to this call (calls << 32, so one call may draw up to 2^32 words). Advances the cursor.
  uint64_t rng_stream() const;
  uint64_t NextRngOffset() { return (rng_calls_++) << 32; }

 private:
  void AdoptChild(std::string name, std::unique_ptr<Module> child);
  void CheckLocalName(const std::string& name) const;
  void UpdatePaths();
  Module* Root();

  std::string type_name_;
  std::string local_name_;
  std::string path_;
  Module* parent_ = nullptr;
  std::vector<std::unique_ptr<Module>> owned_children_;
  std::vector<std::pair<std::string, Module*>> child_list_;
  std::vector<ParameterPtr> direct_param_handles_;
  std::vector<Parameter*> direct_params_;
  std::vector<std::string> direct_param_local_names_;
  ModuleObserver* observer_ = nullptr;
  bool training_ = true;
  uint64_t rng_seed_ = 0;
  uint64_t rng_calls_ = 0;
  int pending_backward_ = 0;
  std::shared_ptr<CheckpointSegment> checkpoint_;  // activation checkpointing: the segment, if any
  int checkpoint_pos_ = -1;                        // this module's position in it
  friend class CheckpointSegment;
};

}  // namespace zerorun::nn

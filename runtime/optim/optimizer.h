// The optimizer object: per-group hyper-parameters, step counts and fp32 state (charged to
// MemCategory::kOptimizer) for this rank's flat partition of each parameter group, stepped with the
// fused CPU kernels (kernels/cpu/optim.h). It knows nothing of ranks or ZeRO stages: the engine hands
// it the partition [offset, offset+count) it owns, with gradients already reduced, and the combined
// unscale+clip factor in OptimSpan::grad_scale.
//
// Optimizers and their parameters follow DeepSpeed (reference §1.2): "Adam" is AdamW unless
// adam_w_mode is false; Lion; torch's SGD and Adagrad; DeepSpeed's FusedLamb.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zerorun/core/tensor.h"
#include "zerorun/core/thread_pool.h"
#include "zerorun/kernels/ref/optim.h"
#include "zerorun/runtime/optim/hyper_target.h"

namespace zerorun::runtime {

enum class OptimizerType { kAdam, kLion, kSgd, kAdagrad, kLamb };

// "Adam"/"AdamW" (any case), "Lion", "Lamb", "Adagrad" (any case, DeepSpeed lower-cases its own
// names) and torch's "SGD" (case-sensitive, as torch.optim lookups are). `*is_adamw` (optional) is set
// for "AdamW", which forces adam_w_mode. Throws InvalidArgument listing the supported names.
OptimizerType ParseOptimizerType(std::string_view name, bool* is_adamw = nullptr);
const char* OptimizerTypeName(OptimizerType t);  // "Adam", "Lion", "SGD", "Adagrad", "Lamb"

// Hyper-parameters of one parameter group; which fields matter depends on the type. DeepSpeed names.
struct OptimizerHyper {
  double lr = 1e-3;
  double beta1 = 0.9;            // Adam, Lion, Lamb (betas[0])
  double beta2 = 0.999;          // Adam, Lion, Lamb (betas[1])
  double eps = 1e-8;             // Adam, Lamb; Adagrad uses 1e-10 by DeepSpeed's default: set it
  double weight_decay = 0.0;
  bool bias_correction = true;   // Adam, Lamb
  bool adam_w_mode = true;       // Adam: decoupled decay (DeepSpeed's default)
  double momentum = 0.0;         // SGD
  double dampening = 0.0;        // SGD
  bool nesterov = false;         // SGD (needs momentum > 0 and dampening 0)
  double lr_decay = 0.0;         // Adagrad
  double initial_accumulator_value = 0.0;  // Adagrad
  double max_coeff = 10.0;       // Lamb
  double min_coeff = 0.01;       // Lamb
  bool eps_inside_sqrt = false;  // Lamb
};

// A piece of one model tensor inside a group's partition (Lamb needs whole-tensor norms).
struct TensorPiece {
  int64_t offset = 0;     // in the partition
  int64_t count = 0;
  int64_t tensor_id = 0;  // the same on every rank for the same tensor; 0 <= id < num_tensors
};

struct ParamGroupSpec {
  std::string name;        // for messages ("decay", "no_decay", ...)
  int64_t numel = 0;       // elements of this rank's partition of the group
  OptimizerHyper hyper;
  // Lamb only: the tensors (or pieces of tensors) of this partition, and how many tensors the group has
  // in total across ranks. Empty: the whole partition is one tensor.
  std::vector<TensorPiece> pieces;
  int64_t num_tensors = 0;
};

struct OptimizerOptions {
  OptimizerType type = OptimizerType::kAdam;
  // The pool the kernels run on (nullptr: ThreadPool::Default()).
  ThreadPool* pool = nullptr;
  // Where state is charged (nullptr: MemoryAccount::Current() at construction).
  MemoryAccount* account = nullptr;
};

class Optimizer final : public HyperTarget {
 public:
  // Validates every group's hyper-parameters (InvalidArgument naming the group and field) and allocates
  // zeroed state (Adagrad: initial_accumulator_value).
  Optimizer(const OptimizerOptions& options, std::vector<ParamGroupSpec> groups);

  OptimizerType type() const { return options_.type; }

  // Starts an applied optimizer step: every group's step count goes up by one. Call once per applied
  // (not overflow-skipped) step, before the StepRange calls of that step.
  void BeginStep();

  // Updates elements [offset, offset + span.n) of group `group`'s partition with the current step
  // count; span.params/grads/param_copy point at element `offset`. Sub-ranges of one step may be
  // stepped in any order and from different threads (disjoint ranges). Lamb needs the whole
  // partition in one call (offset 0, n = numel) because of its per-tensor trust ratios.
  void StepRange(int group, int64_t offset, const kernels::OptimSpan& span);
  // The whole partition of `group`: StepRange(group, 0, span) with span.n == numel.
  void Step(int group, const kernels::OptimSpan& span) { StepRange(group, 0, span); }

  // Lamb across ranks: sums (2*num_tensors: p^2 then u^2 per tensor id) must be all-reduced (SUM)
  // in place over the ranks that share the group. Unset: this rank holds whole tensors.
  using NormReducer = std::function<void(std::vector<double>& sums)>;
  void set_norm_reducer(NormReducer reducer) { norm_reducer_ = std::move(reducer); }
  // The trust ratios of the last Lamb step of `group`, by tensor id.
  const std::vector<float>& lamb_trust_ratios(int group) const { return groups_.at(group).trust; }

  int64_t step_count(int group) const { return groups_.at(group).step; }
  const OptimizerHyper& hyper(int group) const { return groups_.at(group).spec.hyper; }
  OptimizerHyper& mutable_hyper(int group) { return groups_.at(group).spec.hyper; }
  const ParamGroupSpec& group_spec(int group) const { return groups_.at(group).spec; }
  // The named state tensors of a group ("exp_avg", "exp_avg_sq", "momentum_buffer", "sum"), each (numel).
  std::vector<std::string> StateNames() const;
  const Tensor& state(int group, std::string_view name) const;
  int64_t state_bytes() const;

  // What DeepSpeed's progress line shows as "mom": betas for Adam/Lion/Lamb, momentum for SGD, else 0.
  std::vector<double> Momentum(int group) const;

  // HyperTarget (LR schedulers)
  int NumGroups() const override { return static_cast<int>(groups_.size()); }
  double GetLr(int group) const override { return groups_.at(group).spec.hyper.lr; }
  void SetLr(int group, double lr) override { groups_.at(group).spec.hyper.lr = lr; }
  bool HasBetas() const override;
  std::pair<double, double> GetBetas(int group) const override;
  void SetBetas(int group, double beta1, double beta2) override;

  // Checkpoint state: tensors are views of the live state ("group{g}.{name}"), scalars are the step
  // counts and the hyper-parameters schedulers change ("group{g}.step", ".lr", ".beta1", ".beta2",
  // ".momentum", ".weight_decay", ".eps").
  struct State {
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::vector<std::pair<std::string, double>> scalars;
  };
  State SaveState() const;
  // Copies the tensors in and sets the scalars. Throws CheckpointError naming the entry when one is
  // missing or its size differs; the optimizer is unchanged then.
  void LoadState(const State& state);

 private:
  struct Group {
    ParamGroupSpec spec;
    int64_t step = 0;
    std::vector<std::pair<std::string, Tensor>> state;
    std::vector<float> trust;
  };
  float* StateData(Group& g, std::string_view name);
  void StepLamb(int index, Group& g, const kernels::OptimSpan& span);

  OptimizerOptions options_;
  std::vector<Group> groups_;
  NormReducer norm_reducer_;
};

}  // namespace zerorun::runtime

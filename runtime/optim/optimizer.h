// The optimizer: per-group hyper-parameters and step counts, and the update rules over spans of
// parameters (the fused CPU kernels, kernels/cpu/optim.h). It holds no state of its own: it is the
// zero::UpdateRule (zero/update_rule.h) that ZeRO's partitioned optimizer steps this rank's partition
// with, sub-group by sub-group, handing it each span's state from the state store (zero/state_store.h,
// where master weights and moments live). It knows nothing of ranks or ZeRO stages; gradients arrive
// already reduced, with the combined unscale+clip factor in OptimSpan::grad_scale. It is also the
// target LR schedulers drive (HyperTarget).
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
#include "zerorun/zero/update_rule.h"

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

struct ParamGroupSpec {
  std::string name;  // for messages ("decay", "no_decay", ...)
  OptimizerHyper hyper;
};

struct OptimizerOptions {
  OptimizerType type = OptimizerType::kAdam;
  // The pool the kernels run on (nullptr: ThreadPool::Default()).
  ThreadPool* pool = nullptr;
};

class Optimizer final : public HyperTarget, public zero::UpdateRule {
 public:
  // Validates every group's hyper-parameters (InvalidArgument naming the group and field).
  Optimizer(const OptimizerOptions& options, std::vector<ParamGroupSpec> groups);

  OptimizerType type() const { return options_.type; }

  // Starts an applied optimizer step: every group's step count goes up by one. Call once per applied
  // (not overflow-skipped) step, before that step's updates.
  void BeginStep();

  int64_t step_count(int group) const { return groups_.at(group).step; }
  const OptimizerHyper& hyper(int group) const { return groups_.at(group).spec.hyper; }
  OptimizerHyper& mutable_hyper(int group) { return groups_.at(group).spec.hyper; }
  const ParamGroupSpec& group_spec(int group) const { return groups_.at(group).spec; }

  // What DeepSpeed's progress line shows as "mom": betas for Adam/Lion/Lamb, momentum for SGD, else 0.
  std::vector<double> Momentum(int group) const;

  // zero::UpdateRule. State names: "exp_avg", "exp_avg_sq" (Adam, Lamb), "exp_avg" (Lion),
  // "momentum_buffer" (SGD with momentum; none without), "sum" (Adagrad, starting at
  // initial_accumulator_value). Every update uses the group's current step count (REQUIRES: >= 1).
  std::vector<std::string> StateNames() const override;
  float InitialState(int group, int slot) const override;
  bool NeedsTensorNorms() const override { return options_.type == OptimizerType::kLamb; }
  void Update(int group, const kernels::OptimSpan& span, float* const* state) override;
  kernels::LambNorms Moments(int group, const kernels::OptimSpan& span, float* const* state) override;
  float TrustRatio(int group, const kernels::LambNorms& whole_tensor) const override;
  void Apply(int group, const kernels::OptimSpan& span, float* const* state, float trust) override;

  // HyperTarget (LR schedulers)
  int NumGroups() const override { return static_cast<int>(groups_.size()); }
  double GetLr(int group) const override { return groups_.at(group).spec.hyper.lr; }
  void SetLr(int group, double lr) override { groups_.at(group).spec.hyper.lr = lr; }
  bool HasBetas() const override;
  std::pair<double, double> GetBetas(int group) const override;
  void SetBetas(int group, double beta1, double beta2) override;

  // Checkpoint scalars: the step counts and the hyper-parameters schedulers change ("group{g}.step",
  // ".lr", ".beta1", ".beta2", ".momentum", ".weight_decay", ".eps"). The state tensors are in the
  // state store (zero/state_store.h: ReadState/WriteState).
  std::vector<std::pair<std::string, double>> SaveScalars() const;
  // Sets them. Throws CheckpointError naming the entry when one is missing or a step count is not a
  // non-negative integer; the optimizer is unchanged then.
  void LoadScalars(const std::vector<std::pair<std::string, double>>& scalars);

 private:
  struct Group {
    ParamGroupSpec spec;
    int64_t step = 0;
  };
  const Group& Checked(int group) const;
  kernels::LambHyper LambHyperOf(const Group& g) const;

  OptimizerOptions options_;
  std::vector<Group> groups_;
};

}  // namespace zerorun::runtime

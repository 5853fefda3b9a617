// Engine internals shared by engine.cc and engine_step.cc (not installed API): per-group buffers and
// the translation of the typed config into optimizer, scheduler and loss-scaler objects.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "zerorun/core/tensor.h"
#include "zerorun/runtime/config/config.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/loss_scaler.h"
#include "zerorun/runtime/lr_schedules.h"
#include "zerorun/runtime/monitor.h"
#include "zerorun/runtime/optim/optimizer.h"
#include "zerorun/zero/gradient_reducer.h"
#include "zerorun/zero/param_coordinator.h"
#include "zerorun/zero/partition.h"

namespace zerorun::runtime {

struct Engine::GroupState {
  zero::FlatGroupLayout layout;
  zero::Range own;        // this rank's range of the flat buffer: all of it (stage 0) or its partition
  Tensor flat_params;     // (padded) model dtype: every parameter of the group is a view of it
  Tensor flat_grads;      // stages 0/1: (padded) gradient dtype, parameters' grads are views of it
  Tensor part_grads;      // stage 2: (partition) reduced gradients of this rank's partition
  Tensor own_grads;       // (own.size()) the gradients the optimizer reads
  Tensor own_params;      // (own.size()) view of flat_params
  Tensor master;          // (own.size()) fp32 master weights (= own_params for fp32 training)
  std::unique_ptr<zero::GradientReducer> reducer;  // stages 0-2
  std::vector<int64_t> shard_offsets;               // stage 3: each parameter's shard in the partition
  // The pieces of the group's parameters inside this rank's range, flat_offset relative to own.begin
  // (overflow attribution, Lamb's per-tensor norms).
  std::vector<zero::ParamSlice> own_slices;
};

struct Engine::Impl {
  std::vector<GroupState> groups;
  std::unordered_map<nn::Parameter*, std::pair<int, int>> where;  // parameter -> (group, index)
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrScheduler> scheduler;  // may be null (constant lr)
  LossScaler scaler;
  std::unique_ptr<nn::ModuleObserver> observer;
  std::unique_ptr<CsvMonitor> monitor;
  bool reducing = false;                   // this backward reduces its gradients
  // Stage 3: the coordinator over every trainable parameter (id = position in group order), the
  // modules' ids for its trace, and each parameter's transient full gradient during backward.
  std::unique_ptr<zero::ParamCoordinator> coord;
  std::unordered_map<nn::Parameter*, int> param_id;
  std::unordered_map<const nn::Module*, int> module_id;
  std::vector<Tensor> full_grads;
  Tensor frozen_shards;                    // stage 3: this rank's shards of the frozen parameters
  // ignore_unused_parameters: the trainable parameters whose gradients were reported final in this
  // backward (the others got none), how many there are, and whether the first miss was logged.
  std::unordered_set<nn::Parameter*> grads_seen;
  int64_t trainable_params = 0;
  bool unused_reported = false;
  double last_print_time = 0;              // progress-line throughput
  int64_t last_print_samples = 0;
  int64_t tokens_per_sample = 0;           // numel / rows of the last inputs (B, T) → T

  // Calls fn(p, value) for each of `params` in order with its full value: at stage 3 gathered for
  // `purpose` (a collective: every rank must call it) and released after fn returns; otherwise the
  // parameter's own data.
  void VisitFullParameters(zero::ParamCoordinator::Purpose purpose, const std::vector<nn::Parameter*>& params,
                           const std::function<void(nn::Parameter*, const Tensor&)>& fn);
};

// fp16 → DeepSpeed's dynamic (or static) scaler from the fp16 section; bf16/fp32 → static 1.
LossScaler MakeLossScaler(const Config& config);
// The optimizer section as the optimizer's hyper-parameters; `type` receives the optimizer type.
// Throws ConfigError when the config has no optimizer.
OptimizerHyper OptimizerHyperFromConfig(const OptimizerConfig& config, OptimizerType* type);
// The scheduler section as a scheduler over `target` (nullptr when the config has none).
std::unique_ptr<LrScheduler> MakeSchedulerFromConfig(const SchedulerConfig& config, HyperTarget& target);

}  // namespace zerorun::runtime

// Engine internals shared by engine.cc, engine_step.cc and engine_save.cc (not installed API): the
// ZeRO strategy the engine drives, the model's parameters as zero/ sees them, and the translation of
// the typed config into optimizer, scheduler, loss-scaler and strategy options.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "zerorun/core/tensor.h"
#include "zerorun/core/trace.h"
#include "zerorun/runtime/checkpoint_writer.h"
#include "zerorun/runtime/config/config.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/loss_scaler.h"
#include "zerorun/runtime/lr_schedules.h"
#include "zerorun/runtime/monitor.h"
#include "zerorun/runtime/observe/flops_profiler.h"
#include "zerorun/runtime/optim/optimizer.h"
#include "zerorun/zero/strategy.h"

namespace zerorun::runtime {

// The model's parameters by the dense ids zero/ uses (trainable ones group by group, then frozen):
// re-points them for the strategy and reads their initial values (init recipe and seed, or the
// value the model holds).
class EngineParamHost final : public zero::ParamHost {
 public:
  EngineParamHost(std::vector<nn::Parameter*> params, std::optional<uint64_t> init_seed)
      : params_(std::move(params)), init_seed_(init_seed) {}
  void ReadInitial(int id, int64_t offset, const Tensor& out) override;
  bool HasValue(int id) const override { return P(id).engine_data().defined(); }
  Tensor Value(int id) const override;
  void BindData(int id, const Tensor& value) override;
  void ReleaseData(int id) override;
  void BindGrad(int id, const Tensor& grad) override;
  void ReleaseGrad(int id) override { P(id).ReleaseGrad(); }
  nn::Parameter& P(int id) const { return *params_.at(static_cast<size_t>(id)); }

 private:
  std::vector<nn::Parameter*> params_;
  std::optional<uint64_t> init_seed_;
};

struct PendingCheckpointWrite;
CheckpointWriteResult FinishPendingSave(comm::Communicator& comm, std::shared_ptr<PendingCheckpointWrite>& pending);

struct Engine::Impl {
  // Where the model, gradients, buckets and the resident optimizer state live: the communicator's
  // device. Every engine entry runs the kernels of kernels/ops.h there (a KernelDeviceScope on its
  // default stream); inputs on another device are copied there first.
  Device device;
  std::unique_ptr<EngineParamHost> host;
  std::unordered_map<nn::Parameter*, int> param_id;        // every parameter of the model -> zero/'s id
  std::unordered_map<const nn::Module*, int> module_id;    // modules with parameters, in first-use order
  std::unique_ptr<Optimizer> optimizer;                    // hyper-parameters, step counts, update rules
  std::unique_ptr<LrScheduler> scheduler;                  // may be null (constant lr)
  LossScaler scaler;
  std::unique_ptr<zero::Strategy> strategy;                // declared after what it refers to
  std::unique_ptr<nn::ModuleObserver> observer;
  // csv_monitor and tensorboard (rank 0): the scalars of every boundary step (engine_observe.cc).
  std::vector<std::unique_ptr<Monitor>> monitors;
  // An asynchronous save still being written (SaveCheckpointOptions::async); finished by the next
  // save, load or the destructor.
  std::shared_ptr<PendingCheckpointWrite> pending_save;
  // What an asynchronous save copies the rank's chunks into (checkpoint.writer.decoupled: reserved and
  // touched at construction), reused by every save once the previous one is finished.
  std::shared_ptr<Storage> save_arena;
  double last_boundary_time = 0;           // tokens_per_second between boundaries
  comm::CommStats last_comm_stats;         // bytes per collective between boundaries
  int64_t mem_after_forward = 0;           // memory_breakdown: total bytes at the window's points
  int64_t mem_after_backward = 0;
  std::unique_ptr<Tracer> tracer;          // EngineOptions::trace_file
  bool trace_written = false;
  double window_start = 0;                 // NowSeconds() at the window's first Forward
  // flops_profiler (rank 0): recording during the profiled step, then its profile.
  std::unique_ptr<FlopsProfiler> profiler;
  std::unique_ptr<FlopsProfile> flops_profile;
  double peak_flops = 0;
  std::string peak_source;
  // ignore_unused_parameters: the trainable parameters whose gradients were reported final in this
  // backward (the others got none), how many there are, and whether the first miss was logged.
  std::unordered_set<nn::Parameter*> grads_seen;
  int64_t trainable_params = 0;
  bool unused_reported = false;
  double last_print_time = 0;              // progress-line throughput
  int64_t last_print_samples = 0;
  int64_t tokens_per_sample = 0;           // numel / rows of the last inputs (B, T) → T
  // Backward order of the last backward (engine_numerics.cc): per parameter id, the position of the
  // first module with it as a direct parameter whose backward ended, and that module.
  std::vector<int64_t> backward_pos;
  std::vector<const nn::Module*> backward_module;
  int64_t backward_count = 0;
  // numerics.check_activations: the first module whose output in this Forward was not finite.
  const nn::Module* first_bad_output = nullptr;
  std::string first_bad_output_name;

  // Calls fn(p, value) for each of `params` in order with its full value for `purpose` (at stage 3 a
  // gather, a collective every rank must join, released after fn returns).
  void VisitFullParameters(zero::ParamCoordinator::Purpose purpose, const std::vector<nn::Parameter*>& params,
                           const std::function<void(nn::Parameter*, const Tensor&)>& fn);
};

// " in N parameter(s) on rank(s) ...; first in backward order: ..." for an overflow's warning ("" when
// the result names nothing).
std::string NonFiniteText(const StepResult& r);

// `t` on `device`: itself when it is there already, else a copy (charged to activations).
Tensor OnDevice(const Tensor& t, Device device);

// fp16 → DeepSpeed's dynamic (or static) scaler from the fp16 section; bf16/fp32 → static 1.
LossScaler MakeLossScaler(const Config& config);
// The optimizer section as the optimizer's hyper-parameters; `type` receives the optimizer type.
// Throws ConfigError when the config has no optimizer.
OptimizerHyper OptimizerHyperFromConfig(const OptimizerConfig& config, OptimizerType* type);
// The scheduler section as a scheduler over `target` (nullptr when the config has none).
std::unique_ptr<LrScheduler> MakeSchedulerFromConfig(const SchedulerConfig& config, HyperTarget& target);
// The zero_optimization section (and the dtypes) as the strategy's options, on `device`.
zero::StrategyOptions StrategyOptionsFromConfig(const Config& config, Device device, int rank);

}  // namespace zerorun::runtime

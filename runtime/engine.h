// Engine: trains a model with a DeepSpeed config over a communicator — the C++ counterpart of
// `deepspeed.initialize(...)`'s engine. The client loop per micro-batch is DeepSpeed's:
//
//     float loss = engine.Forward(inputs, targets);   // the model's mean loss on this micro-batch
//     engine.Backward();                              // gradients of loss × loss_scale / gas
//     engine.Step();                                  // on the accumulation boundary: reduce, update
//
// What it does (DESIGN.md "one training step"): the ZeRO strategy of the configured stage
// (zero/strategy.h) lays out parameters, gradients and optimizer state; during forward and backward
// the model's observer hands each module's window to it (stage 3 gathers parameters there) and final
// gradients stream into reduction buckets that travel while backward goes on (overlap). On the
// boundary Step() waits for the reductions, has the strategy agree overflow and the global norm across
// ranks, updates the loss scale, and has the strategy step this rank's partition of fp32 master
// weights (state store, sub-group by sub-group) with one combined unscale+clip factor, writing the
// 16-bit copy and refreshing the parameters (all-gathers at stages 1/2); then steps the LR schedule
// (not on skipped steps) and advances the counters. The engine itself holds no stage branches.
//
// Counters follow DeepSpeed (reference §3.1): micro_steps counts Step() calls; global_steps and
// global_samples advance on every boundary, skipped ones included; skipped_steps counts overflows.
//
// Thread safety: one engine per rank, driven by one thread. With the `local` backend each rank thread
// owns its engine and its model.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/memory.h"
#include "zerorun/core/tensor.h"
#include "zerorun/core/timer.h"
#include "zerorun/runtime/activation_checkpointing.h"
#include "zerorun/runtime/config/config.h"
#include "zerorun/runtime/engine_checkpoint.h"
#include "zerorun/runtime/nn/loss.h"
#include "zerorun/runtime/param_groups.h"

namespace zerorun {
class Tracer;
}
namespace zerorun::runtime {
struct FlopsProfile;
}
namespace zerorun::zero {
class Strategy;
}

namespace zerorun::runtime {

class Optimizer;

struct EngineOptions {
  // How trainable parameters are grouped for the optimizer (weight decay on/off, lr multipliers).
  ParamGroupOptions groups;
  // Log DeepSpeed's progress line every `steps_per_print` steps (rank 0) when the config sets it.
  bool log_progress = true;
  // Name used in log lines for this engine ("" : "rank R").
  std::string name;
  // Initialise the parameters from their Init recipes with this seed (and seed the model's dropout
  // RNG) instead of taking the model's current values: then the model need not be Initialize()d, and
  // at ZeRO stage 3 each rank only ever materialises its own shards of the full model. The values are
  // bit-identical to model.Initialize(seed) (initialisation is position-stable).
  std::optional<uint64_t> init_seed;
  // Activation checkpointing: which modules, where kept inputs live, profiling
  // (runtime/activation_checkpointing.h). Unset: what the config's activation_checkpointing section
  // asks for (off when the file writes none of its keys); set, it wins over the config.
  std::optional<ActivationCheckpointingOptions> activation_checkpointing;
  // Timeline (core/trace.h, docs/monitoring.md): a Chrome trace-event JSON of this rank — each step,
  // forward/backward/optimizer phases, every module's forward, backward and recompute, optimizer
  // sub-groups, and the communicator's ops (bucket reductions, gathers) with bytes on their own track.
  // "{rank}" in the path is replaced by the rank; without it, ranks > 0 write "<stem>.rank<R><ext>".
  // Written by WriteTrace() or when the engine is destroyed. Empty: no trace.
  std::string trace_file;
  // Only the first `trace_steps` optimizer steps are traced (0: all).
  int64_t trace_steps = 0;
  // flops_profiler: this rank's peak FLOP/s for MFU. 0: the environment's ZERORUN_PEAK_TFLOPS, else a
  // short GEMM probe at construction (runtime/observe/flops_profiler.h).
  double peak_flops = 0;
};

// One parameter group's gradient statistics over all ranks (the `numerics` section; docs/monitoring.md):
// every element of the group's reduced gradients counted once, whichever rank holds it.
struct GroupNumerics {
  int64_t numel = 0;
  double grad_max_abs = 0;     // largest |g| over the finite elements, unscaled (÷ loss scale)
  double grad_norm = 0;        // L2 norm over the finite elements, unscaled
  double zero_fraction = 0;    // elements exactly 0
  double nonfinite_fraction = 0;
  // fp16 only: elements whose scaled value g·loss_scale is nonzero and below 2^-24 (fp16's smallest
  // subnormal) / above 65504 or not finite. Measured on the values as accumulated (grad_accum_dtype):
  // fp16 gradients have already flushed the first kind to zero.
  double fp16_underflow_fraction = 0;
  double fp16_overflow_fraction = 0;
};

// The result of one Step() call.
struct StepResult {
  bool boundary = false;      // the call ended an accumulation window
  bool applied = false;       // parameters were updated (boundary without a skipped overflow)
  bool overflow = false;      // non-finite gradients: skipped with fp16, and bf16 with check_grad_overflow;
                              // fp32 (and unchecked bf16) detect them only with numerics.enabled
  double grad_norm = -1;      // unscaled global L2 norm of the applied step (-1 if not computed)
  double loss_scale = 1;      // the scale used for this step's gradients
  // On overflow, agreed across ranks (every rank's partition is examined): the parameters with
  // non-finite gradients, the first in backward order first (at most 16 per rank), the ranks holding
  // such elements, and the first module in backward order that owns one of them — the module whose
  // backward ran earliest in the window's last backward among those whose parameters' reduced
  // gradients are not finite (docs/monitoring.md).
  std::vector<std::string> nonfinite_params;
  std::vector<int> nonfinite_ranks;
  std::string nonfinite_module;  // its path ("" for the root module)
  std::vector<int> nonfinite_module_ranks;  // the ranks holding its non-finite gradient elements
  // On a numerics step (numerics.enabled, every numerics.interval steps): per parameter group.
  std::vector<GroupNumerics> numerics;
};

class Engine {
 public:
  // `model` must be initialised (parameter values set); its parameter dtype must be the config's model
  // dtype (fp32, bf16 with bf16.enabled, fp16 with fp16.enabled). `config` must have been loaded with
  // world_size == comm->size(). Throws ConfigError / InvalidArgument naming what does not fit (IoError for
  // an unusable monitor or swap path); the model is then as it was before (parameters, values, no observer).
  Engine(nn::LossModule& model, Config config, std::shared_ptr<comm::Communicator> comm,
         EngineOptions options = {});
  // Same, with a communicator the caller keeps alive for the engine's lifetime.
  Engine(nn::LossModule& model, Config config, comm::Communicator& comm, EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- the training loop ---------------------------------------------------------------------
  // inputs, targets: the model's arguments (e.g. (B, T) int32 tokens and targets). Returns the loss.
  float Forward(const Tensor& inputs, const Tensor& targets);
  // Back-propagates the last Forward with gradient scale loss_scale / gradient_accumulation_steps.
  void Backward();
  // Ends a micro-step; on the accumulation boundary reduces and updates (see the file comment).
  StepResult Step();
  // Zeroes the accumulated gradients (Step() does it after every boundary).
  void ZeroGrad();

  // The full value of every parameter of the model (model().Parameters() order), as new CPU tensors.
  // At stage 3 this gathers the shards: a collective that every rank must call.
  std::vector<Tensor> GatherParameters();

  // DeepSpeed's save_16bit_model: writes the full model's current parameter values (model dtype: bf16,
  // fp16, or fp32 for fp32 training; tied parameters once, under their first name) as a safetensors
  // file `save_dir/filename` with metadata {"format": "pt", "zerorun_global_steps", ...}; frozen
  // parameters are left out with exclude_frozen_parameters. A collective: every rank must call it.
  // Rank 0 creates save_dir and writes; at stage 3 each parameter is gathered in turn and streamed out,
  // so no rank holds more than one full parameter beyond its usual working set. The file appears
  // atomically (temp file, fsync, rename); the call ends with a barrier, so on return on any rank the
  // file is in place. May be called anywhere between Step() calls, also inside an accumulation window.
  // Returns false without saving (a warning on rank 0, no collective) at stage 3 unless
  // zero_optimization.stage3_gather_16bit_weights_on_model_save is set. A failed write (ENOSPC, EIO, an
  // unwritable path) leaves any existing file untouched and throws IoError on every rank.
  // Load the file with LoadSafetensorsIntoModel (runtime/model_io.h).
  bool Save16BitModel(const std::string& save_dir, const std::string& filename = "model.safetensors",
                      bool exclude_frozen_parameters = false);

  // ---- training checkpoints (docs/checkpoint.md; runtime/engine_checkpoint.h) -------------------
  // DeepSpeed's save_checkpoint: everything needed to continue bit for bit (parameters, fp32 masters,
  // optimizer state, counters, loss scaler, LR scheduler, dropout RNG, the sampler's cursor when given,
  // client state, config) as <save_dir>/<tag>/; each rank writes the ranges it owns, in parallel, and
  // `latest` is updated only once every rank's files are durable. A collective: every rank calls it,
  // between accumulation windows. Throws IoError / InvalidArgument on every rank alike.
  SaveCheckpointResult SaveCheckpoint(const std::string& save_dir, const SaveCheckpointOptions& options = {});
  // DeepSpeed's load_checkpoint, at any world size and ZeRO stage (each rank reads only what it
  // holds). Missing `latest` (tag "") returns loaded = false and changes nothing. A damaged or
  // foreign checkpoint throws CheckpointError on every rank and leaves the engine unchanged. A
  // collective, between accumulation windows (or before the first Forward).
  LoadCheckpointResult LoadCheckpoint(const std::string& load_dir, const LoadCheckpointOptions& options = {});
  // Waits for an asynchronous save (SaveCheckpointOptions::async, checkpoint.writer.decoupled) to be
  // durable and published (`latest` written), and returns what it wrote (bytes_written: this rank's);
  // nullopt when none is pending. The background write's error is thrown here, every rank alike
  // (IoError). A collective: every rank calls it. For a job that must know its checkpoint is on disk
  // before it goes on (exiting, uploading it, deleting an older one).
  std::optional<SaveCheckpointResult> WaitForCheckpoint();

  // ---- state ---------------------------------------------------------------------------------
  int64_t global_steps() const { return global_steps_; }
  int64_t global_samples() const { return global_samples_; }
  int64_t micro_steps() const { return micro_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  // (micro_steps + 1) % gradient_accumulation_steps == 0.
  bool IsGradientAccumulationBoundary() const;
  bool WasStepApplied() const { return last_step_.applied; }
  const StepResult& last_step() const { return last_step_; }
  // Current learning rate per parameter group.
  std::vector<double> GetLr() const;
  // (beta1, beta2) per group for optimizers with betas; (momentum, 0) for SGD.
  std::vector<std::pair<double, double>> GetMomentum() const;
  // Unscaled global gradient norm of the last applied step (-1 before the first).
  double GetGlobalGradNorm() const { return last_grad_norm_; }
  double loss_scale() const;
  float last_loss() const { return last_loss_; }

  const Config& config() const { return config_; }
  comm::Communicator& comm() const { return *comm_; }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->size(); }
  int zero_stage() const { return config_.zero_optimization.StageNumber(); }
  DType model_dtype() const { return model_dtype_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // The optimizer: hyper-parameters, step counts and update rules (its state is in the strategy's
  // state store, zero/state_store.h).
  const Optimizer& optimizer() const;
  // The ZeRO strategy (zero/strategy.h): this rank's layout, its state store (fp32 master weights and
  // optimizer state, zero/state_store.h) and where each parameter's state lives (StateExtents). For
  // checkpoints and tests; training goes through Forward/Backward/Step.
  zero::Strategy& zero_strategy();
  // Parameters of the model (unique; tied counted once), trainable or not.
  int64_t num_parameters() const { return num_parameters_; }
  // Bytes this engine (and the model driven through it) holds, by category.
  MemoryAccount& memory() { return *account_; }
  // Milliseconds by name: forward, backward, backward_allreduce (waiting for gradient reductions after
  // backward), step, allgather (waiting for parameter gathers after the update), reduce_wait (the part
  // of backward spent reducing gradient buckets synchronously, "overlap_comm": false, or waiting for
  // one of the two in-flight bucket slots to free up); stage 3 also
  // gather_wait (the part of forward and backward spent blocked on parameter gathers).
  Timers& timers() { return timers_; }
  nn::LossModule& model() { return model_; }
  // The flops_profiler's profile of its step (rank 0, once that step ended; nullptr before, or when the
  // profiler is off).
  const FlopsProfile* flops_profile() const;
  // Writes the timeline to EngineOptions::trace_file (this rank's path, returned; "" when no trace is
  // kept). Throws IoError naming the path. May be called more than once (the file is replaced).
  std::string WriteTrace();
  // numerics.check_activations: the module (path, type) whose forward output in the last Forward was
  // the first not to be finite, in order of completion (a child before its parent); "" when none was
  // (or the check is off).
  const std::string& first_nonfinite_output() const;
  // The checkpointing policy in force (nullptr: no activation checkpointing).
  const ActivationCheckpointer* activation_checkpointer() const { return checkpointer_.get(); }

 private:
  struct Impl;
  class Observer;
  friend class Observer;

  void Init();
  void InitOrUndo();  // Init(), and on a throw the model left as it was
  // What SaveCheckpoint writes from this rank: the manifest's tensors, the chunks and where each
  // chunk's data comes from (engine_checkpoint.cc).
  struct SavePlan;
  SavePlan PlanSave(bool exclude_frozen_parameters);
  // checkpoint.writer.decoupled: allocates and touches the host buffer an asynchronous save copies
  // into, so that no save pays for fresh memory (engine_checkpoint.cc).
  void ReserveSaveArena();
  void BuildOptimizer();
  void BuildStrategy(const std::vector<nn::Parameter*>& model_params);
  void LogProgress();
  // engine_observe.cc: monitors (csv_monitor, tensorboard) and memory_breakdown.
  void InitMonitors();
  void WriteMonitorEvents(const StepResult& r);
  void NoteMemory(const char* point);
  Tracer* ActiveTracer();  // the tracer while steps are traced (nullptr: none)
  void TraceStepEnd();
  void InitFlopsProfiler();
  void MaybeStartFlopsProfile();  // at a window's first Forward
  void FinishFlopsProfile();      // after the boundary step
  StepResult BoundaryStep();
  // engine_numerics.cc: the `numerics` section and the naming of non-finite gradients.
  void ReportNonFiniteGradients(StepResult* r);  // collective, after an agreed overflow
  void ComputeGradNumerics(StepResult* r);       // collective, on numerics steps
  void CheckLoss();                              // after a Forward: a non-finite loss is named
  void CheckUnusedParameters();  // after a backward that left trainable parameters without gradients

  nn::LossModule& model_;
  Config config_;
  std::shared_ptr<comm::Communicator> comm_owner_;
  comm::Communicator* comm_;
  EngineOptions options_;
  std::shared_ptr<MemoryAccount> account_;  // shared: the model's parameter views may outlive the engine
  Timers timers_;
  DType model_dtype_ = DType::kF32;
  std::vector<ParamGroup> groups_;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<ActivationCheckpointer> checkpointer_;
  int64_t num_parameters_ = 0;

  int64_t global_steps_ = 0;
  int64_t global_samples_ = 0;
  int64_t micro_steps_ = 0;
  int64_t skipped_steps_ = 0;
  double last_grad_norm_ = -1;
  float last_loss_ = 0;
  bool forward_pending_ = false;
  StepResult last_step_;
};

}  // namespace zerorun::runtime

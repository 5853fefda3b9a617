// The typed DeepSpeed-compatible configuration: plain structs, one per JSON section, every field with
// DeepSpeed's *code* default (reference deepspeed.md §1; where DeepSpeed's docs disagree the code wins).
// The engine reads only these structs; nothing outside runtime/config parses JSON. Every JSON key a
// field answers to, its type, range and documentation live in the field lists of config_schema*.cc,
// which docs/config.md mirrors (a test keeps them in step).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "zerorun/core/dtype.h"

namespace zerorun::runtime {

// ---- enums -----------------------------------------------------------------------------------------

enum class ZeroStage : int { kDisabled = 0, kOptimizerStates = 1, kGradients = 2, kParameters = 3 };
enum class OffloadDevice : int { kNone = 0, kCpu = 1, kNvme = 2 };
// Optimizers zerorun implements (DeepSpeed's others are refused with a message).
enum class OptimizerKind : int { kNone = 0, kAdam, kAdamW, kLamb, kLion, kSgd, kAdagrad };
enum class SchedulerKind : int { kNone = 0, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR, kOneCycle, kLRRangeTest };
enum class WarmupType : int { kLog = 0, kLinear = 1 };
enum class TagValidation : int { kIgnore = 0, kWarn = 1, kFail = 2 };
enum class AllReduceOp : int { kMean = 0, kSum = 1 };
enum class LrScalingRule : int { kNone = 0, kLinear = 1, kSqrt = 2 };

const char* ZeroStageName(ZeroStage s);        // "0".."3"
const char* OffloadDeviceName(OffloadDevice d);  // "none", "cpu", "nvme"
const char* OptimizerKindName(OptimizerKind t);  // DeepSpeed spelling: "Adam", "AdamW", "SGD", ...
const char* SchedulerKindName(SchedulerKind t);  // "WarmupLR", ...

// ---- batch (§1.1) ------------------------------------------------------------------------------------

// As given in the file, then resolved by ResolveBatch: after loading all three are set and
// train_batch_size == micro × accumulation × world_size.
struct BatchConfig {
  std::optional<int64_t> train_batch_size;                // global samples per optimizer step
  std::optional<int64_t> train_micro_batch_size_per_gpu;  // samples per rank per forward/backward
  std::optional<int64_t> gradient_accumulation_steps;     // micro-steps per optimizer step
  int world_size = 1;                                     // data-parallel world size used to resolve
  bool managed_gradient_accumulation = true;              // false: every step() is a boundary (§3.6)
  bool dataloader_drop_last = false;                      // drop the last incomplete batch
};

// ---- optimizer (§1.2) --------------------------------------------------------------------------------

struct AdamParams {
  double lr = 1e-3;                          // learning rate
  std::vector<double> betas = {0.9, 0.999};  // (beta1, beta2): running-average coefficients
  double eps = 1e-8;                         // added to the denominator
  double weight_decay = 0.0;                 // decoupled (AdamW mode) or L2 (adam_w_mode false)
  bool bias_correction = true;               // bias-correct m and v
  bool adam_w_mode = true;  // decoupled weight decay; effective = (type is AdamW) || adam_w_mode
  bool torch_adam = false;  // DeepSpeed: use torch.optim.Adam(W); same update rule here
  bool amsgrad = false;     // refused when true (FusedAdam raises)
  bool fp32_optimizer_states = true;  // CPU Adam keeps m, v in fp32
};
struct LambParams {
  double lr = 1e-3;                          // learning rate
  std::vector<double> betas = {0.9, 0.999};  // (beta1, beta2)
  double eps = 1e-8;                         // added to the denominator
  double weight_decay = 0.0;                 // weight decay
  bool bias_correction = true;               // bias-correct m and v
  bool eps_inside_sqrt = false;              // eps inside the square root
  double max_coeff = 10.0;  // trust-ratio clamp
  double min_coeff = 0.01;
};
struct LionParams {
  double lr = 1e-3;                          // learning rate
  std::vector<double> betas = {0.9, 0.999};  // (beta1: update interpolation, beta2: momentum decay)
  double weight_decay = 0.0;                 // decoupled weight decay
};
struct SgdParams {  // torch.optim.SGD
  double lr = 1e-3;           // learning rate
  double momentum = 0.0;      // momentum factor
  double dampening = 0.0;     // dampening of the momentum
  double weight_decay = 0.0;  // L2 penalty added to the gradient
  bool nesterov = false;  // requires momentum > 0 and dampening == 0
};
struct AdagradParams {  // torch.optim.Adagrad / DeepSpeedCPUAdagrad
  double lr = 1e-2;                        // learning rate
  double lr_decay = 0.0;                   // lr / (1 + (step - 1) * lr_decay)
  double weight_decay = 0.0;               // L2 penalty added to the gradient
  double initial_accumulator_value = 0.0;  // initial sum of squared gradients
  double eps = 1e-10;                      // added to the denominator
};
struct OptimizerConfig {
  OptimizerKind type = OptimizerKind::kNone;  // kNone: no optimizer from the config (client's own)
  // Only the member matching `type` is meaningful.
  AdamParams adam;  // kAdam, kAdamW
  LambParams lamb;
  LionParams lion;
  SgdParams sgd;
  AdagradParams adagrad;
  bool legacy_fusion = false;  // accepted for compatibility; no effect
  // AdamW (decoupled) update in effect: type AdamW, or Adam with adam_w_mode (the default).
  bool AdamWMode() const { return type == OptimizerKind::kAdamW || (type == OptimizerKind::kAdam && adam.adam_w_mode); }
  double Lr() const;  // the base learning rate of the active optimizer (0 when none)
};

// ---- scheduler (§1.3) --------------------------------------------------------------------------------

struct WarmupLRParams {
  double warmup_min_lr = 0.0;           // lr at the start of warm-up
  std::optional<double> warmup_max_lr;  // null: each param group's optimizer lr
  int64_t warmup_num_steps = 1000;      // > 0; the schedule uses max(2, this)
  WarmupType warmup_type = WarmupType::kLog;
  int64_t last_batch_iteration = -1;    // -1: start
};
struct WarmupDecayLRParams {
  std::optional<int64_t> total_num_steps;  // required: the lr reaches warmup_min_lr here
  double warmup_min_lr = 0.0;              // lr at the start of warm-up and end of decay
  double warmup_max_lr = 0.001;            // peak lr
  int64_t warmup_num_steps = 1000;         // > 0
  WarmupType warmup_type = WarmupType::kLog;
  int64_t last_batch_iteration = -1;       // -1: start
};
struct WarmupCosineLRParams {
  std::optional<int64_t> total_num_steps;  // required: warm-up plus cosine decay
  double warmup_min_ratio = 0.0;           // lr ratio (of the optimizer's lr) at the start of warm-up
  int64_t warmup_num_steps = 1000;         // > 0
  double cos_min_ratio = 0.0001;           // floor of the cosine decay
  WarmupType warmup_type = WarmupType::kLog;
  int64_t last_batch_iteration = -1;       // -1: start
};
struct OneCycleParams {
  std::optional<double> cycle_min_lr;  // required
  std::optional<double> cycle_max_lr;  // required
  double decay_lr_rate = 0.0;                          // lr decay after the cycle
  int64_t cycle_first_step_size = 2000;                // > 0: steps of the rising half
  std::optional<int64_t> cycle_second_step_size;       // null: = first (>= 0)
  int64_t cycle_first_stair_count = 0;                 // 0: continuous
  std::optional<int64_t> cycle_second_stair_count;     // null: = first
  int64_t decay_step_size = 0;                         // 0: no decay after the cycle
  bool cycle_momentum = true;                          // cycle beta1 inversely (forces beta2 0.99)
  double cycle_min_mom = 0.8;                          // momentum at the lr peak
  double cycle_max_mom = 0.9;                          // momentum at the cycle ends
  double decay_mom_rate = 0.0;                         // momentum decay after the cycle
  int64_t last_batch_iteration = -1;                   // -1: start
};
struct LRRangeTestParams {
  double lr_range_test_min_lr = 1e-3;      // starting lr
  int64_t lr_range_test_step_size = 2000;  // > 0: steps per interval
  double lr_range_test_step_rate = 1.0;    // lr = min · (1 + rate · interval)
  bool lr_range_test_staircase = false;    // hold the lr within an interval
  int64_t last_batch_iteration = -1;       // -1: start
};
struct SchedulerConfig {
  SchedulerKind type = SchedulerKind::kNone;  // kNone: no schedule from the config
  // Only the member matching `type` is meaningful.
  WarmupLRParams warmup_lr;
  WarmupDecayLRParams warmup_decay_lr;
  WarmupCosineLRParams warmup_cosine_lr;
  OneCycleParams one_cycle;
  LRRangeTestParams lr_range_test;
};

// ---- precision (§1.4-§1.6, §2) -----------------------------------------------------------------------

struct Fp16Config {
  bool enabled = false;
  bool auto_cast = false;               // cast floating forward inputs to half
  double loss_scale = 0.0;              // 0: dynamic scaling; > 0: static scale
  int64_t initial_scale_power = 16;     // dynamic: initial scale 2^power
  int64_t loss_scale_window = 1000;     // clean steps between scale doublings
  int64_t hysteresis = 2;               // overflows tolerated before halving ("delayed shift")
  bool consecutive_hysteresis = false;  // refill hysteresis on every clean step
  int64_t min_loss_scale = 1;
  bool fp16_master_weights_and_grads = false;  // fp16 masters and grads (ZeRO only)
  bool DynamicLossScale() const { return enabled && loss_scale == 0.0; }
};
struct Bf16Config {
  bool enabled = false;                        // train in bf16 (never loss-scaled)
  bool immediate_grad_update = false;          // BF16_Optimizer: apply grads as they arrive
  bool check_grad_overflow = true;             // ZeRO-1/2: skip a step whose gradients are not finite
  bool bf16_master_weights_and_grads = false;  // bf16 masters and grads (ZeRO only)
  bool bf16_optimizer_states = false;          // bf16 optimizer states (needs bf16 masters)
};
struct AmpConfig {      // apex AMP: refused when enabled; its other keys are accepted and ignored
  bool enabled = false;  // use apex AMP
};
struct DataTypesConfig {
  std::optional<DType> grad_accum_dtype;  // null: the model dtype
  std::optional<DType> param_dtype;       // null: the model dtype (if set must equal it)
  std::optional<DType> buffer_dtype;      // null: buffers keep their dtype
};

// ---- ZeRO (§1.8) -------------------------------------------------------------------------------------

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;  // where optimizer state lives (nvme: stage 3)
  std::optional<std::string> nvme_path;         // swap directory; required for nvme
  int64_t buffer_count = 4;                     // swap buffers (>= states per param: 4 for Adam)
  bool pin_memory = true;                       // page-locked host buffers
  bool pipeline_read = false;                   // overlap NVMe reads with the optimizer step
  bool pipeline_write = false;                  // overlap NVMe writes with the optimizer step
  bool fast_init = false;                       // faster swap-file initialisation
  double ratio = 1.0;                           // fraction of optimizer state offloaded; < 1 needs stage 3
  bool super_offload = false;                   // SuperOffload (not implemented: warning)
  double cpuadam_cores_perc = 0.8;              // share of cores the CPU optimizer uses
  bool Pipeline() const { return pipeline_read || pipeline_write; }
};
struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::kNone;  // where partitioned params live (stage 3)
  std::optional<std::string> nvme_path;         // swap directory; required for nvme
  int64_t buffer_count = 5;                     // parameter swap buffers
  int64_t buffer_size = 100'000'000;  // elements
  int64_t max_in_cpu = 1'000'000'000;  // elements kept in CPU memory when on NVMe
  bool pin_memory = true;              // page-locked host buffers
};
struct ZeroConfig {
  ZeroStage stage = ZeroStage::kDisabled;  // what is partitioned across data-parallel ranks
  bool contiguous_gradients = true;        // copy gradients into one contiguous buffer as they arrive
  std::optional<bool> overlap_comm;        // null in the file: resolved to (stage == 3); always set after loading
  bool reduce_scatter = true;              // reduce gradients by reduce-scatter (else all-reduce)
  int64_t reduce_bucket_size = 500'000'000;  // elements per gradient-reduction bucket
  bool use_multi_rank_bucket_allreduce = true;  // stage 1/2: one all-reduce per bucket
  bool allgather_partitions = true;             // accepted; no effect (as in DeepSpeed)
  int64_t allgather_bucket_size = 500'000'000;  // elements per all-gather bucket (stage 1/2: even)
  bool load_from_fp32_weights = true;           // restore fp32 masters from the checkpoint's fp32 copy
  bool elastic_checkpoint = false;              // stage 1/2 legacy elastic checkpoint
  std::optional<OffloadParamConfig> offload_param;          // null: not configured
  std::optional<OffloadOptimizerConfig> offload_optimizer;  // null: not configured
  int64_t sub_group_size = 1'000'000'000;                   // elements per optimizer-step sub-group
  int64_t prefetch_bucket_size = 50'000'000;    // stage 3: elements prefetched ahead (stage3_ alias)
  int64_t param_persistence_threshold = 100'000;  // stage 3: smaller params stay gathered
  int64_t model_persistence_threshold = std::numeric_limits<int64_t>::max();  // stage 3: cap on persistent elements
  int64_t max_live_parameters = 1'000'000'000;  // stage 3: gathered elements kept at most
  int64_t max_reuse_distance = 1'000'000'000;   // stage 3: keep gathered if reused within this many elements
  bool gather_16bit_weights_on_model_save = false;  // stage 3: gather full 16-bit weights when saving
  int64_t module_granularity_threshold = 0;         // stage 3 (not implemented: warning)
  bool use_all_reduce_for_fetch_params = false;     // stage 3 (not implemented: warning)
  bool allgather_sequential = false;                // stage 3: one param at a time (prefetch 1)
  bool ignore_unused_parameters = true;             // every stage: params without gradients count as zero (false: error)
  bool legacy_stage1 = false;                       // refused when true
  bool round_robin_gradients = false;               // stage 1/2: round-robin gradient placement
  int64_t zero_hpz_partition_size = 1;              // ZeRO++ (not implemented: warning)
  bool zero_quantized_weights = false;              // ZeRO++ (not implemented: warning)
  bool zero_quantized_nontrainable_weights = false;  // ZeRO++ (not implemented: warning)
  bool zero_quantized_gradients = false;            // ZeRO++ (not implemented: warning)
  int64_t mics_shard_size = -1;                     // MiCS (not implemented: warning)
  bool mics_hierarchical_params_gather = false;     // MiCS (not implemented: warning)
  bool memory_efficient_linear = true;              // stage 3 memory-efficient linear
  bool pipeline_loading_checkpoint = false;         // stage 3 (not implemented: warning)
  bool override_module_apply = true;                // stage 3: gather params around module.apply
  bool log_trace_cache_warnings = false;            // stage 3 trace-cache warnings
  bool enable_sanity_checks = false;                // extra stage 3 checks
  bool save_muon_momentum_buffer_in_memory = false;  // Muon (not implemented: warning)

  int StageNumber() const { return static_cast<int>(stage); }
  OffloadDevice OptimizerOffload() const { return offload_optimizer ? offload_optimizer->device : OffloadDevice::kNone; }
  OffloadDevice ParamOffload() const { return offload_param ? offload_param->device : OffloadDevice::kNone; }
};

// ---- I/O, checkpointing, monitoring (§1.10-§1.16) ----------------------------------------------------

struct AioConfig {  // the offload I/O engine's settings (offload/io_engine.h, docs/offload.md)
  int64_t block_size = 1'048'576;    // bytes per I/O request; a multiple of 4096
  int64_t queue_depth = 8;           // requests in flight per worker ring
  int64_t intra_op_parallelism = 1;  // workers splitting each read/write (alias: thread_count)
  bool single_submit = false;        // one io_uring_submit per request instead of per batch
  bool overlap_events = true;        // refill the queue as completions arrive
  bool use_gds = false;              // GPUDirect Storage: true is refused
  friend bool operator==(const AioConfig&, const AioConfig&) = default;
};
struct ActivationCheckpointingConfig {
  bool partition_activations = false;           // partition checkpoints across model-parallel ranks
  bool cpu_checkpointing = false;               // keep checkpointed activations in CPU memory
  bool contiguous_memory_optimization = false;  // one buffer for checkpoints (needs number_checkpoints)
  std::optional<int64_t> number_checkpoints;    // checkpoints per step
  bool synchronize_checkpoint_boundary = false;  // device synchronize at each boundary
  bool profile = false;                          // log forward/backward time per checkpoint
};
struct CheckpointWriterConfig {
  std::string type = "fast";                 // mock | python | fast
  bool decoupled = false;                    // write from a separate process
  int64_t io_buffer_size = 64 << 20;         // bytes per writer buffer
  bool io_buffer_double = true;              // double buffering
  bool show_statistics = false;              // log write statistics
  std::optional<std::string> data_parallel;  // null | replica | socket | machine
  int64_t io_multiplier = 1;                 // I/O size multiplier
};
struct CheckpointConfig {
  TagValidation tag_validation = TagValidation::kWarn;  // tags equal across ranks: ignore / warn / fail
  bool load_universal = false;                 // load a universal (reshardable) checkpoint
  bool use_node_local_storage = false;         // every node writes its own copy
  bool parallel_write_pipeline_stage = false;  // "parallel_write": {"pipeline_stage": ...}
  bool checkpoint_serialization = true;        // zipfile serialization (DeepSpeed/torch)
  std::optional<CheckpointWriterConfig> writer;  // DeepSpeed fast writer (not implemented: warning)
};
struct TensorBoardConfig {
  bool enabled = false;                       // write scalar events
  std::string output_path;                    // "": the launch directory
  std::string job_name = "DeepSpeedJobName";  // sub-directory
};
struct CsvMonitorConfig {
  bool enabled = false;                       // write scalars as CSV
  std::string output_path;                    // "": the launch directory
  std::string job_name = "DeepSpeedJobName";  // sub-directory
};
struct WandbConfig {  // not implemented: enabled warns
  bool enabled = false;
  std::optional<std::string> group;  // run group
  std::optional<std::string> team;   // entity
  std::string project = "deepspeed";
};
struct CometConfig {  // not implemented: enabled warns
  bool enabled = false;
  int64_t samples_log_interval = 100;
  std::optional<std::string> project, workspace, api_key, experiment_name, experiment_key, mode;
  std::optional<bool> online;
};
struct FlopsProfilerConfig {
  bool enabled = false;                    // profile once (forces wall_clock_breakdown)
  double recompute_fwd_factor = 0.0;       // extra forward cost of recomputation
  int64_t profile_step = 1;                // global step profiled
  int64_t module_depth = -1;               // module depth printed (-1: all)
  int64_t top_modules = 1;                 // top modules printed
  bool detailed = true;                    // per-module detail
  std::optional<std::string> output_file;  // null: stdout
};
struct CommsLoggerConfig {
  bool enabled = false;               // log collectives
  bool verbose = false;               // log every collective
  bool prof_all = true;               // profile all operations
  bool debug = false;                 // include the caller
  std::vector<std::string> prof_ops;  // operations profiled when prof_all is false
};
// zerorun's own key (not DeepSpeed's): the learning rate follows the global batch. With B the resolved
// train_batch_size (micro batch x accumulation x world size) and B0 the reference, every absolute lr of
// the config (the optimizer's lr and the schedule's warmup_min_lr / warmup_max_lr / cycle_min_lr /
// cycle_max_lr / lr_range_test_min_lr) is multiplied by B / B0 (linear: Goyal et al. 2017) or
// sqrt(B / B0) (square root: Krizhevsky 2014, Hoffer et al. 2017) when the config is loaded, so the
// same file gives the right lr at any world size or accumulation. docs/config.md "lr_scaling".
struct LrScalingConfig {
  LrScalingRule rule = LrScalingRule::kNone;  // none | linear | sqrt
  int64_t reference_batch_size = 256;         // B0: the global batch the lrs in the file were tuned for
  double factor = 1.0;                        // resolved when loading: the multiplier applied
};
// zerorun's own section (not DeepSpeed's): numerics monitoring (docs/monitoring.md "Numerics
// statistics"). Statistics are per parameter group over all ranks' gradients; the activation check is
// a debug mode that reads every module's forward output once more.
struct NumericsConfig {
  bool enabled = false;            // gradient statistics every `interval` steps (log, tensorboard, csv_monitor);
                                   // fp32 and unchecked bf16 runs also name non-finite gradients (not skipped)
  int64_t interval = 1;            // optimizer steps between statistics (steps interval, 2·interval, ...)
  bool check_activations = false;  // every module's forward output checked for NaN/Inf; a non-finite loss
                                   // names the first module (in forward order) whose output was not finite
};
// DeepSpeed features zerorun does not implement whose sections have an on/off switch: only the switch
// is read (the rest of each section is accepted as written and means nothing while the switch is off,
// in DeepSpeed too). What zerorun does when a switch is on is declared in config_dispositions.cc.
struct FeatureSwitches {
  bool progressive_layer_drop = false;  // "progressive_layer_drop": {"enabled"}
  bool quantize_training = false;       // "quantize_training": {"enabled"} (MoQ)
  bool curriculum_learning = false;     // "curriculum_learning": {"enabled"} (legacy curriculum)
  bool data_efficiency = false;         // "data_efficiency": {"enabled"}
  bool eigenvalue = false;              // "eigenvalue": {"enabled"}
  bool hybrid_engine = false;           // "hybrid_engine": {"enabled"} (RLHF)
  bool autotuning = false;              // "autotuning": {"enabled"}
  bool torch_autocast = false;          // "torch_autocast": {"enabled"}
};
struct ElasticityConfig {  // accepted when disabled; enabled is refused (not implemented)
  bool enabled = false;
  int64_t max_train_batch_size = 2000;     // largest global batch
  std::vector<int64_t> micro_batch_sizes;  // candidate micro batch sizes
  int64_t min_gpus = 1;
  int64_t max_gpus = 10000;
  int64_t min_time = 0;                    // minutes between scalings
  bool prefer_larger_batch = true;         // ties pick the larger batch
  bool ignore_non_elastic_batch_info = false;
  double version = 0.2;                    // algorithm version (<= 0.2)
  int64_t num_gpus_per_node = 1;
  int64_t model_parallel_size = 1;
};

// ---- the whole file ----------------------------------------------------------------------------------

struct ConfigBody {
  BatchConfig batch;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  Fp16Config fp16;
  Bf16Config bf16;
  AmpConfig amp;
  DataTypesConfig data_types;
  ZeroConfig zero_optimization;
  AioConfig aio;
  ActivationCheckpointingConfig activation_checkpointing;
  CheckpointConfig checkpoint;
  TensorBoardConfig tensorboard;
  CsvMonitorConfig csv_monitor;
  WandbConfig wandb;
  CometConfig comet;
  FlopsProfilerConfig flops_profiler;
  CommsLoggerConfig comms_logger;
  ElasticityConfig elasticity;
  LrScalingConfig lr_scaling;
  NumericsConfig numerics;
  FeatureSwitches switches;

  // Gradient / communication scalars (§1.7).
  double gradient_clipping = 1.0;  // 0 disables; clipping is ON by default
  bool prescale_gradients = false;                         // divide gradients before the all-reduce
  double gradient_predivide_factor = 1.0;                  // pre-divide gradients by this before reducing
  AllReduceOp gradient_allreduce_op = AllReduceOp::kMean;  // mean or sum of the ranks' gradients
  std::optional<DType> communication_data_type;  // null in the file: the model dtype; set after loading
  DType seq_parallel_communication_data_type = DType::kF32;  // Ulysses only (not implemented)
  bool sparse_gradients = false;               // sparse embedding gradients (not implemented: warning)
  bool disable_allgather = false;              // legacy; unused
  bool zero_allow_untested_optimizer = false;  // allow Lamb/SGD (and client optimizers) with ZeRO
  bool zero_force_ds_cpu_optimizer = true;     // offload requires the CPU Adam/Lion optimizer
  std::optional<int64_t> steps_per_print;  // null: no progress line
  bool wall_clock_breakdown = false;       // forced on by flops_profiler.enabled
  bool memory_breakdown = false;           // log memory use
  bool dump_state = false;                 // print the engine state at init (rank 0)
  std::optional<int64_t> vocabulary_size;  // warning when not a multiple of 8
  bool graph_harvesting = false;           // CUDA graph harvesting (not implemented: warning)
  std::optional<std::string> log_level;  // "debug" | "info" | "warning" | "error" | "critical"
  bool use_data_before_expert_parallelism = false;  // MoE (not implemented: warning)
  bool timers_throughput_enabled = true;       // "timers": {"throughput": {"enabled"}}
  bool timers_throughput_synchronized = true;  // "timers": {"throughput": {"synchronized"}}
  int64_t sequence_parallel_size = 1;          // Ulysses sequence parallelism (not implemented: > 1 refused)
  std::optional<int64_t> data_parallel_size;   // if set, must equal the world size (every rank is data-parallel)
};

}  // namespace zerorun::runtime

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
  double lr = 1e-3;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
  bool adam_w_mode = true;  // decoupled weight decay; effective = (type is AdamW) || adam_w_mode
  bool torch_adam = false;  // DeepSpeed: use torch.optim.Adam(W); same update rule here
  bool amsgrad = false;     // refused when true (FusedAdam raises)
  bool fp32_optimizer_states = true;  // CPU Adam keeps m, v in fp32
};
struct LambParams {
  double lr = 1e-3;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
  bool eps_inside_sqrt = false;
  double max_coeff = 10.0;  // trust-ratio clamp
  double min_coeff = 0.01;
};
struct LionParams {
  double lr = 1e-3;
  std::vector<double> betas = {0.9, 0.999};
  double weight_decay = 0.0;
};
struct SgdParams {  // torch.optim.SGD
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // requires momentum > 0 and dampening == 0
};
struct AdagradParams {  // torch.optim.Adagrad / DeepSpeedCPUAdagrad
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
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
  double warmup_min_lr = 0.0;
  std::optional<double> warmup_max_lr;  // null: each param group's optimizer lr
  int64_t warmup_num_steps = 1000;      // > 0; the schedule uses max(2, this)
  WarmupType warmup_type = WarmupType::kLog;
  int64_t last_batch_iteration = -1;
};
struct WarmupDecayLRParams {
  std::optional<int64_t> total_num_steps;  // required
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t last_batch_iteration = -1;
};
struct WarmupCosineLRParams {
  std::optional<int64_t> total_num_steps;  // required
  double warmup_min_ratio = 0.0;
  int64_t warmup_num_steps = 1000;
  double cos_min_ratio = 0.0001;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t last_batch_iteration = -1;
};
struct OneCycleParams {
  std::optional<double> cycle_min_lr;  // required
  std::optional<double> cycle_max_lr;  // required
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;                // > 0
  std::optional<int64_t> cycle_second_step_size;       // null: = first (>= 0)
  int64_t cycle_first_stair_count = 0;
  std::optional<int64_t> cycle_second_stair_count;     // null: = first
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
  int64_t last_batch_iteration = -1;
};
struct LRRangeTestParams {
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;  // > 0
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
  int64_t last_batch_iteration = -1;
};
struct SchedulerConfig {
  SchedulerKind type = SchedulerKind::kNone;
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
  bool fp16_master_weights_and_grads = false;
  bool DynamicLossScale() const { return enabled && loss_scale == 0.0; }
};
struct Bf16Config {
  bool enabled = false;
  bool immediate_grad_update = false;
  bool check_grad_overflow = true;  // ZeRO-1/2: skip a step whose gradients are not finite
  bool bf16_master_weights_and_grads = false;
  bool bf16_optimizer_states = false;
};
struct AmpConfig {  // apex AMP: refused when enabled
  bool enabled = false;
};
struct DataTypesConfig {
  std::optional<DType> grad_accum_dtype;  // null: the model dtype
  std::optional<DType> param_dtype;       // null: the model dtype (if set must equal it)
  std::optional<DType> buffer_dtype;      // null: buffers keep their dtype
};

// ---- ZeRO (§1.8) -------------------------------------------------------------------------------------

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::optional<std::string> nvme_path;  // required for nvme
  int64_t buffer_count = 4;
  bool pin_memory = true;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;              // fraction of optimizer state offloaded; < 1 needs stage 3
  bool super_offload = false;
  double cpuadam_cores_perc = 0.8;
  bool Pipeline() const { return pipeline_read || pipeline_write; }
};
struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::optional<std::string> nvme_path;
  int64_t buffer_count = 5;
  int64_t buffer_size = 100'000'000;  // elements
  int64_t max_in_cpu = 1'000'000'000;  // elements kept in CPU memory when on NVMe
  bool pin_memory = true;
};
struct ZeroConfig {
  ZeroStage stage = ZeroStage::kDisabled;
  bool contiguous_gradients = true;
  std::optional<bool> overlap_comm;  // null in the file: resolved to (stage == 3); always set after loading
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500'000'000;  // elements
  bool use_multi_rank_bucket_allreduce = true;
  bool allgather_partitions = true;
  int64_t allgather_bucket_size = 500'000'000;  // elements
  bool load_from_fp32_weights = true;
  bool elastic_checkpoint = false;
  std::optional<OffloadParamConfig> offload_param;          // null: not configured
  std::optional<OffloadOptimizerConfig> offload_optimizer;  // null: not configured
  int64_t sub_group_size = 1'000'000'000;
  int64_t prefetch_bucket_size = 50'000'000;
  int64_t param_persistence_threshold = 100'000;
  int64_t model_persistence_threshold = std::numeric_limits<int64_t>::max();
  int64_t max_live_parameters = 1'000'000'000;
  int64_t max_reuse_distance = 1'000'000'000;
  bool gather_16bit_weights_on_model_save = false;
  int64_t module_granularity_threshold = 0;
  bool use_all_reduce_for_fetch_params = false;
  bool allgather_sequential = false;
  bool ignore_unused_parameters = true;
  bool legacy_stage1 = false;  // refused when true
  bool round_robin_gradients = false;
  int64_t zero_hpz_partition_size = 1;
  bool zero_quantized_weights = false;
  bool zero_quantized_nontrainable_weights = false;
  bool zero_quantized_gradients = false;
  int64_t mics_shard_size = -1;
  bool mics_hierarchical_params_gather = false;
  bool memory_efficient_linear = true;
  bool pipeline_loading_checkpoint = false;
  bool override_module_apply = true;
  bool log_trace_cache_warnings = false;
  bool enable_sanity_checks = false;
  bool save_muon_momentum_buffer_in_memory = false;

  int StageNumber() const { return static_cast<int>(stage); }
  OffloadDevice OptimizerOffload() const { return offload_optimizer ? offload_optimizer->device : OffloadDevice::kNone; }
  OffloadDevice ParamOffload() const { return offload_param ? offload_param->device : OffloadDevice::kNone; }
};

// ---- I/O, checkpointing, monitoring (§1.10-§1.16) ----------------------------------------------------

struct AioConfig {
  int64_t block_size = 1'048'576;  // bytes per I/O request
  int64_t queue_depth = 8;
  int64_t intra_op_parallelism = 1;  // worker threads splitting each request
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};
struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  std::optional<int64_t> number_checkpoints;
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
};
struct CheckpointWriterConfig {
  std::string type = "fast";  // mock | python | fast
  bool decoupled = false;
  int64_t io_buffer_size = 64 << 20;
  bool io_buffer_double = true;
  bool show_statistics = false;
  std::optional<std::string> data_parallel;  // null | replica | socket | machine
  int64_t io_multiplier = 1;
};
struct CheckpointConfig {
  TagValidation tag_validation = TagValidation::kWarn;
  bool load_universal = false;
  bool use_node_local_storage = false;
  bool parallel_write_pipeline_stage = false;  // "parallel_write": {"pipeline_stage": ...}
  bool checkpoint_serialization = true;
  std::optional<CheckpointWriterConfig> writer;
};
struct TensorBoardConfig {
  bool enabled = false;
  std::string output_path;  // "": the launch directory
  std::string job_name = "DeepSpeedJobName";
};
struct CsvMonitorConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};
struct WandbConfig {
  bool enabled = false;
  std::optional<std::string> group;
  std::optional<std::string> team;
  std::string project = "deepspeed";
};
struct CometConfig {
  bool enabled = false;
  int64_t samples_log_interval = 100;
  std::optional<std::string> project, workspace, api_key, experiment_name, experiment_key, mode;
  std::optional<bool> online;
};
struct FlopsProfilerConfig {
  bool enabled = false;
  double recompute_fwd_factor = 0.0;
  int64_t profile_step = 1;
  int64_t module_depth = -1;
  int64_t top_modules = 1;
  bool detailed = true;
  std::optional<std::string> output_file;
};
struct CommsLoggerConfig {
  bool enabled = false;
  bool verbose = false;
  bool prof_all = true;
  bool debug = false;
  std::vector<std::string> prof_ops;
};
struct ElasticityConfig {  // accepted when disabled; enabled is refused (not implemented)
  bool enabled = false;
  int64_t max_train_batch_size = 2000;
  std::vector<int64_t> micro_batch_sizes;
  int64_t min_gpus = 1;
  int64_t max_gpus = 10000;
  int64_t min_time = 0;
  bool prefer_larger_batch = true;
  bool ignore_non_elastic_batch_info = false;
  double version = 0.2;
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

  // Gradient / communication scalars (§1.7).
  double gradient_clipping = 1.0;  // 0 disables; clipping is ON by default
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  AllReduceOp gradient_allreduce_op = AllReduceOp::kMean;
  std::optional<DType> communication_data_type;  // null in the file: the model dtype; set after loading
  DType seq_parallel_communication_data_type = DType::kF32;
  bool sparse_gradients = false;
  bool disable_allgather = false;
  bool zero_allow_untested_optimizer = false;
  bool zero_force_ds_cpu_optimizer = true;
  std::optional<int64_t> steps_per_print;  // null: no progress line
  bool wall_clock_breakdown = false;       // forced on by flops_profiler.enabled
  bool memory_breakdown = false;
  bool dump_state = false;
  std::optional<int64_t> vocabulary_size;
  bool graph_harvesting = false;
  std::optional<std::string> log_level;  // "debug" | "info" | "warning" | "error" | "critical"
  bool use_data_before_expert_parallelism = false;
  bool timers_throughput_enabled = true;       // "timers": {"throughput": {"enabled"}}
  bool timers_throughput_synchronized = true;  // "timers": {"throughput": {"synchronized"}}
};

}  // namespace zerorun::runtime

// What zerorun does with every DeepSpeed key: THE one table. Each key the loader accepts has exactly one
// row (tests/config/config_dispositions_test.cc walks the schema and fails on a key without one, and on
// a row whose key does not exist), saying one of
//   kActed    zerorun reads it and does what DeepSpeed does with it (`why`: where);
//   kWarned   accepted, but a value other than DeepSpeed's default has no effect in zerorun: loading
//             warns once, "accepted, has no effect in zerorun because <why>";
//   kRefused  a value other than the default cannot be honoured (it would change memory or numerics):
//             ValidateForEngine — the engine's constructor and `zerorun-config check` — fails naming
//             the key and <why>;
//   kFollows  the key qualifies another one (`why` names it) and means what that key decides (e.g.
//             offload_param.pin_memory means nothing while offload_param.device is refused).
// Sections (objects) need no row: their keys decide. A section row (kWarned) warns when the section is
// written at all; sections accepted whole (type "any") always have a row.
//
// Rows with `issue` set are waiting for that open issue: when it lands, change `use` to kActed and `why`
// to where the key is read, and delete `issue`. Nothing else needs to change.
#include <algorithm>
#include <unordered_map>

#include "zerorun/runtime/config/config_visitor.h"

namespace zerorun::runtime {
namespace {

using enum KeyUse;

// Issues that own keys (docs/config.md "Dispositions" lists them).
constexpr int kOffload = 14;        // CPU/NVMe offload and its I/O engine
constexpr int kCheckpoints = 15;    // training checkpoints (save/load/reshard)
constexpr int kObservability = 20;  // TensorBoard, W&B, Comet, FLOPs profiler, memory breakdown

const char* kOptOffload = "zero_optimization.offload_optimizer.device";
const char* kParamOffload = "zero_optimization.offload_param.device";
const char* kLowPrecisionState =
    "zerorun keeps fp32 master weights, fp32 gradients for the optimizer and fp32 optimizer state; 16-bit ones "
    "are not implemented (the memory and the numerics would differ from what the config asks)";
const char* kZeroPP =
    "ZeRO++ quantized communication is not implemented: zerorun would communicate exact values, so training "
    "would not follow DeepSpeed's quantized run; remove the key to train with exact communication";

const std::vector<KeyDisposition> kTable = {
    // ---- batch ---------------------------------------------------------------------------------------
    {"train_batch_size", kActed, "batch resolution; engine counters (global_samples)"},
    {"train_micro_batch_size_per_gpu", kActed, "batch resolution; rows per micro-batch (zerorun-train's sampler)"},
    {"gradient_accumulation_steps", kActed, "engine: accumulation boundary and the 1/gas gradient scale"},
    {"managed_gradient_accumulation", kRefused,
     "unmanaged gradient accumulation (every step() an accumulation boundary) is not implemented yet"},
    {"dataloader_drop_last", kActed,
     "zerorun-train's distributed sampler (runtime/data): false keeps the last partial micro-batch of an epoch, "
     "true drops it, as DeepSpeed's data loader"},

    // ---- optimizer ------------------------------------------------------------------------------------
    {"optimizer.type", kActed, "engine: the optimizer (a config without one is refused: no client optimizers)"},
    {"optimizer.params.lr", kActed, "optimizer hyper-parameters"},
    {"optimizer.params.betas", kActed, "optimizer hyper-parameters"},
    {"optimizer.params.eps", kActed, "optimizer hyper-parameters"},
    {"optimizer.params.weight_decay", kActed, "optimizer hyper-parameters (param groups may turn it off)"},
    {"optimizer.params.bias_correction", kActed, "optimizer hyper-parameters"},
    {"optimizer.params.adam_w_mode", kActed, "Adam: decoupled (true) or L2 (false) weight decay"},
    {"optimizer.params.torch_adam", kWarned,
     "torch.optim.Adam(W) and DeepSpeed's fused Adam compute the same update, which zerorun's fused Adam "
     "computes either way"},
    {"optimizer.params.amsgrad", kRefused, "AMSGrad is not implemented (DeepSpeed's FusedAdam refuses it too)"},
    {"optimizer.params.fp32_optimizer_states", kRefused, kLowPrecisionState},
    {"optimizer.params.max_grad_norm", kRefused, "use gradient_clipping (DeepSpeed refuses it too)"},
    {"optimizer.params.eps_inside_sqrt", kActed, "Lamb hyper-parameters"},
    {"optimizer.params.max_coeff", kActed, "Lamb hyper-parameters"},
    {"optimizer.params.min_coeff", kActed, "Lamb hyper-parameters"},
    {"optimizer.params.momentum", kActed, "SGD hyper-parameters"},
    {"optimizer.params.dampening", kActed, "SGD hyper-parameters"},
    {"optimizer.params.nesterov", kActed, "SGD hyper-parameters"},
    {"optimizer.params.lr_decay", kActed, "Adagrad hyper-parameters"},
    {"optimizer.params.initial_accumulator_value", kActed, "Adagrad hyper-parameters"},
    {"optimizer.legacy_fusion", kWarned,
     "it selects a code path of DeepSpeed's fp16 optimizer wrapper; zerorun has one fused optimizer path"},

    // ---- scheduler -----------------------------------------------------------------------------------
    {"scheduler.type", kActed, "engine: the LR schedule"},
    {"scheduler.params.warmup_min_lr", kActed, "LR schedule"},
    {"scheduler.params.warmup_max_lr", kActed, "LR schedule"},
    {"scheduler.params.warmup_num_steps", kActed, "LR schedule"},
    {"scheduler.params.warmup_type", kActed, "LR schedule"},
    {"scheduler.params.last_batch_iteration", kActed, "LR schedule (the step it resumes from)"},
    {"scheduler.params.total_num_steps", kActed, "LR schedule"},
    {"scheduler.params.warmup_min_ratio", kActed, "LR schedule"},
    {"scheduler.params.cos_min_ratio", kActed, "LR schedule"},
    {"scheduler.params.cycle_min_lr", kActed, "LR schedule"},
    {"scheduler.params.cycle_max_lr", kActed, "LR schedule"},
    {"scheduler.params.decay_lr_rate", kActed, "LR schedule"},
    {"scheduler.params.cycle_first_step_size", kActed, "LR schedule"},
    {"scheduler.params.cycle_second_step_size", kActed, "LR schedule"},
    {"scheduler.params.cycle_first_stair_count", kActed, "LR schedule"},
    {"scheduler.params.cycle_second_stair_count", kActed, "LR schedule"},
    {"scheduler.params.decay_step_size", kActed, "LR schedule"},
    {"scheduler.params.cycle_momentum", kActed, "LR schedule (beta1 cycling)"},
    {"scheduler.params.cycle_min_mom", kActed, "LR schedule"},
    {"scheduler.params.cycle_max_mom", kActed, "LR schedule"},
    {"scheduler.params.decay_mom_rate", kActed, "LR schedule"},
    {"scheduler.params.lr_range_test_min_lr", kActed, "LR schedule"},
    {"scheduler.params.lr_range_test_step_size", kActed, "LR schedule"},
    {"scheduler.params.lr_range_test_step_rate", kActed, "LR schedule"},
    {"scheduler.params.lr_range_test_staircase", kActed, "LR schedule"},

    // ---- precision -----------------------------------------------------------------------------------
    {"fp16.enabled", kActed, "model dtype fp16 with loss scaling"},
    {"fp16.auto_cast", kActed, "engine: floating-point model inputs are cast to fp16 before forward"},
    {"fp16.loss_scale", kActed, "loss scaler"},
    {"fp16.initial_scale_power", kActed, "loss scaler"},
    {"fp16.loss_scale_window", kActed, "loss scaler"},
    {"fp16.hysteresis", kActed, "loss scaler"},
    {"fp16.consecutive_hysteresis", kActed, "loss scaler"},
    {"fp16.min_loss_scale", kActed, "loss scaler"},
    {"fp16.fp16_master_weights_and_grads", kRefused, kLowPrecisionState},
    {"bf16.enabled", kActed, "model dtype bf16"},
    {"bf16.immediate_grad_update", kWarned,
     "zerorun's layers add each gradient into the accumulation buffer (data_types.grad_accum_dtype) as backward "
     "produces it, which is what true asks for"},
    {"bf16.check_grad_overflow", kActed, "engine: a non-finite bf16 step is skipped"},
    {"bf16.bf16_master_weights_and_grads", kRefused, kLowPrecisionState},
    {"bf16.bf16_optimizer_states", kRefused, kLowPrecisionState},
    {"amp.enabled", kRefused, "apex AMP is not supported; use fp16 or bf16 (refused when loading)"},
    {"torch_autocast.enabled", kRefused,
     "torch autocast (16-bit compute of an fp32 model) is not implemented; train in bf16 or fp16 instead"},
    {"data_types.grad_accum_dtype", kActed, "gradient accumulation buffers"},
    {"data_types.param_dtype", kActed, "checked against the training dtype"},
    {"data_types.buffer_dtype", kWarned, "zerorun modules hold no buffers (only parameters and activations)"},

    // ---- gradients and communication -----------------------------------------------------------------
    {"gradient_clipping", kActed, "engine: global-norm clipping"},
    {"prescale_gradients", kActed, "gradient reduction scaling"},
    {"gradient_predivide_factor", kActed, "gradient reduction scaling"},
    {"gradient_allreduce_op", kActed, "gradient reduction: mean or sum"},
    {"communication_data_type", kActed, "dtype of gradient reductions"},
    {"seq_parallel_communication_data_type", kWarned,
     "it only applies to Ulysses sequence parallelism, which zerorun does not have"},
    {"sparse_gradients", kWarned, "zerorun reduces embedding gradients densely; the reduced values are the same"},
    {"disable_allgather", kWarned, "DeepSpeed's ZeRO ignores it too (legacy key)"},
    {"zero_allow_untested_optimizer", kActed, "loader: allows Lamb/SGD with ZeRO"},
    {"zero_force_ds_cpu_optimizer", kFollows, kOptOffload},

    // ---- logging, timers -----------------------------------------------------------------------------
    {"steps_per_print", kActed, "engine: the progress line"},
    {"wall_clock_breakdown", kActed, "engine: phase timers in the progress line and the monitors"},
    {"memory_breakdown", kActed,
     "engine: rank 0 logs the memory account after forward, backward and step, by category, every boundary"},
    {"dump_state", kActed, "engine: rank 0 logs the effective config and the engine's layout at construction"},
    {"vocabulary_size", kActed, "loader: a warning when not a multiple of 8 (DeepSpeed's only use)"},
    {"graph_harvesting", kWarned, "zerorun does not capture CUDA graphs"},
    {"log_level", kActed, "engine: zerorun's log level"},
    {"use_data_before_expert_parallelism", kWarned,
     "it orders data for MoE expert parallelism, which zerorun does not have"},
    {"timers.throughput.enabled", kActed, "engine: the samples/s progress line"},
    {"timers.throughput.synchronized", kActed,
     "timings are read after the work completed (CPU operations are synchronous)"},
    {"allgather_size", kActed,
     "legacy: allgather_bucket_size of the boolean zero_optimization form (warned and unused with the object form)"},

    // ---- ZeRO ----------------------------------------------------------------------------------------
    {"zero_optimization.stage", kActed, "engine: the ZeRO stage"},
    {"zero_optimization.contiguous_gradients", kWarned,
     "zerorun always reduces gradients through contiguous bucket buffers of reduce_bucket_size elements"},
    {"zero_optimization.overlap_comm", kActed, "engine: overlapped or synchronous bucket reductions"},
    {"zero_optimization.reduce_scatter", kWarned,
     "zerorun always reduce-scatters stage 1/2 gradient buckets (one reduce-scatter per bucket); the reduced "
     "values are the same as with an all-reduce"},
    {"zero_optimization.reduce_bucket_size", kActed, "gradient bucket size"},
    {"zero_optimization.use_multi_rank_bucket_allreduce", kWarned,
     "zerorun reduces each stage 1/2 bucket with one reduce-scatter either way; the values are the same"},
    {"zero_optimization.allgather_partitions", kWarned, "DeepSpeed ignores it too"},
    {"zero_optimization.allgather_bucket_size", kActed, "stage 1/2: chunked parameter all-gather"},
    {"zero_optimization.load_from_fp32_weights", kActed,
     "Engine::LoadCheckpoint: fp32 masters from the checkpoint's fp32 copy (false: from the saved model-dtype weights)"},
    {"zero_optimization.elastic_checkpoint", kWarned,
     "every zerorun checkpoint loads at any world size and ZeRO stage (docs/checkpoint.md), so there is no elastic "
     "variant to choose"},
    {"zero_optimization.offload_param.device", kActed,
     "zero/ shard store (stage 3): cpu holds the 16-bit parameter shards in host buffers, nvme in swap files "
     "brought into buffer_count buffers ahead of use (offload/shard_stores.h)"},
    {"zero_optimization.offload_param.nvme_path", kFollows, kParamOffload},
    {"zero_optimization.offload_param.buffer_count", kFollows, kParamOffload},
    {"zero_optimization.offload_param.buffer_size", kFollows, kParamOffload},
    {"zero_optimization.offload_param.max_in_cpu", kWarned,
     "zerorun's NVMe parameter store keeps only its buffer_count buffers (each the size of the largest shard) in "
     "host memory; there is no separate in-CPU cache for max_in_cpu to size"},
    {"zero_optimization.offload_param.pin_memory", kFollows, kParamOffload},
    {"zero_optimization.offload_optimizer.device", kActed,
     "zero/ state store: cpu holds master weights and optimizer state in host buffers (offload/host_state_store.h), "
     "nvme swaps them sub-group by sub-group through swap files (offload/nvme_state_store.h)"},
    {"zero_optimization.offload_optimizer.nvme_path", kFollows, kOptOffload},
    {"zero_optimization.offload_optimizer.buffer_count", kFollows, kOptOffload},
    {"zero_optimization.offload_optimizer.pin_memory", kFollows, kOptOffload},
    {"zero_optimization.offload_optimizer.pipeline_read", kFollows, kOptOffload},
    {"zero_optimization.offload_optimizer.pipeline_write", kFollows, kOptOffload},
    {"zero_optimization.offload_optimizer.fast_init", kFollows, kOptOffload},
    {"zero_optimization.offload_optimizer.ratio", kRefused,
     "partial optimizer offload (ratio < 1: part of the state kept on the device) is not implemented", kOffload},
    {"zero_optimization.offload_optimizer.super_offload", kRefused,
     "SuperOffload (its own CPU/GPU optimizer schedule) is not implemented", kOffload},
    {"zero_optimization.offload_optimizer.cpuadam_cores_perc", kWarned,
     "zerorun's CPU optimizer kernels run on its kernel thread pool (ZERORUN_NUM_THREADS), not a share of cores"},
    {"zero_optimization.sub_group_size", kActed,
     "zero/ state store: the optimizer steps each partition sub-group by sub-group (the unit of swapping)"},
    {"zero_optimization.prefetch_bucket_size", kActed, "stage 3 parameter prefetch"},
    {"zero_optimization.param_persistence_threshold", kActed, "stage 3: parameters kept gathered"},
    {"zero_optimization.model_persistence_threshold", kRefused,
     "the cap on the total of persistent stage-3 parameters is not implemented: zerorun would keep every "
     "parameter up to param_persistence_threshold gathered (more memory than the cap allows)"},
    {"zero_optimization.max_live_parameters", kActed, "stage 3 parameter coordinator"},
    {"zero_optimization.max_reuse_distance", kActed, "stage 3 parameter coordinator"},
    {"zero_optimization.gather_16bit_weights_on_model_save", kActed, "Engine::Save16BitModel at stage 3"},
    {"zero_optimization.module_granularity_threshold", kWarned,
     "zerorun gathers each module's own parameters at its forward and backward; the values are the same"},
    {"zero_optimization.use_all_reduce_for_fetch_params", kWarned,
     "zerorun gathers stage-3 parameters with all-gathers; the values are the same"},
    {"zero_optimization.allgather_sequential", kActed, "stage 3: forces one parameter per prefetch"},
    {"zero_optimization.ignore_unused_parameters", kActed, "engine: parameters without gradients"},
    {"zero_optimization.legacy_stage1", kRefused, "removed from DeepSpeed 0.5.9 (refused when loading)"},
    {"zero_optimization.round_robin_gradients", kActed, "stage 1/2 flat-buffer order"},
    {"zero_optimization.zero_hpz_partition_size", kWarned,
     "ZeRO++ hierarchical partitioning keeps a secondary parameter copy per node; zerorun shards across all "
     "ranks (less memory, the same values)"},
    {"zero_optimization.zero_quantized_weights", kRefused, kZeroPP},
    {"zero_optimization.zero_quantized_nontrainable_weights", kRefused, kZeroPP},
    {"zero_optimization.zero_quantized_gradients", kRefused, kZeroPP},
    {"zero_optimization.zeropp_loco_param", kFollows, "zero_optimization.zero_quantized_gradients"},
    {"zero_optimization.mics_shard_size", kWarned,
     "MiCS shards within groups of ranks; zerorun shards across all ranks (less memory per rank, the same values)"},
    {"zero_optimization.mics_hierarchical_params_gather", kFollows, "zero_optimization.mics_shard_size"},
    {"zero_optimization.memory_efficient_linear", kWarned,
     "zerorun's linear layers never keep gathered weights for backward (stage 3 gathers them again), which is "
     "what true asks for"},
    {"zero_optimization.pipeline_loading_checkpoint", kWarned,
     "zerorun has no pipeline parallelism; stage-3 checkpoints load shard by shard at any world size"},
    {"zero_optimization.override_module_apply", kWarned,
     "zerorun models have no module.apply hook; parameters are initialised from their init recipes"},
    {"zero_optimization.log_trace_cache_warnings", kWarned,
     "zerorun's stage-3 prefetch trace re-records silently when the module order changes"},
    {"zero_optimization.enable_sanity_checks", kActed, "stage 3: gather agreement before every gather"},
    {"zero_optimization.save_muon_momentum_buffer_in_memory", kWarned,
     "the Muon optimizer is not implemented (refused as optimizer.type)"},
    {"zero_optimization.leaf_module", kWarned,
     "zerorun gathers per module already; leaf modules only change where DeepSpeed places its hooks"},
    {"zero_optimization.zenflow", kRefused,
     "ZenFlow (asynchronous, partial optimizer updates with offload) is not implemented; its updates differ "
     "from synchronous ones",
     kOffload},

    // ---- NVMe I/O (offload/io_engine.h; config_resolve.cc warns when no NVMe offload uses the section) --
    {"aio.block_size", kActed, "the offload I/O engine (zerorun-bench io; NVMe offload, issue #14)"},
    {"aio.queue_depth", kActed, "the offload I/O engine (zerorun-bench io; NVMe offload, issue #14)"},
    {"aio.intra_op_parallelism", kActed, "the offload I/O engine (zerorun-bench io; NVMe offload, issue #14)"},
    {"aio.single_submit", kActed, "the offload I/O engine (zerorun-bench io; NVMe offload, issue #14)"},
    {"aio.overlap_events", kActed, "the offload I/O engine (zerorun-bench io; NVMe offload, issue #14)"},
    {"aio.use_gds", kRefused, "NVIDIA GPUDirect Storage is not supported (refused when loading)"},

    // ---- activation checkpointing (runtime/activation_checkpointing.h) ----------------------------------
    {"activation_checkpointing.partition_activations", kWarned,
     "it splits each checkpoint across model-parallel ranks, which hold the same activation; zerorun's "
     "model-parallel size is 1, so every rank keeps its whole checkpoint, as DeepSpeed does at model-parallel "
     "size 1 (data-parallel ranks hold different activations: partitioning them would save nothing)"},
    {"activation_checkpointing.cpu_checkpointing", kActed, "checkpoint inputs kept in host memory"},
    {"activation_checkpointing.contiguous_memory_optimization", kActed,
     "checkpoint inputs copied into one preallocated buffer"},
    {"activation_checkpointing.number_checkpoints", kActed,
     "the model's blocks are cut into this many checkpointed segments"},
    {"activation_checkpointing.synchronize_checkpoint_boundary", kActed,
     "the device stream is synchronised at each checkpoint boundary"},
    {"activation_checkpointing.profile", kActed, "forward/recompute/backward time per checkpoint in the log"},

    // ---- checkpoints ---------------------------------------------------------------------------------
    {"checkpoint.tag_validation", kActed, "Engine::SaveCheckpoint: every rank's tag compared with rank 0's"},
    {"checkpoint.load_universal", kWarned,
     "zerorun checkpoints load at any world size and ZeRO stage without a universal conversion (docs/checkpoint.md)"},
    {"checkpoint.use_node_local_storage", kRefused,
     "the checkpoint directory must be one file system every rank sees (rank 0 publishes every rank's files); "
     "node-local checkpoint storage is not implemented"},
    {"checkpoint.parallel_write.pipeline_stage", kWarned,
     "zerorun has no pipeline parallelism; every rank already writes its own shard in parallel"},
    {"checkpoint.checkpoint_serialization", kWarned,
     "zerorun checkpoints are safetensors shards and JSON (docs/checkpoint.md), not torch serialization"},
    {"checkpoint.writer", kWarned,
     "DeepSpeed's fast writer settings are not used: every rank writes its own shard, with O_DIRECT through io_uring "
     "and its own buffers (8 x 2 MiB) whatever the type (docs/checkpoint.md)",
     kCheckpoints},
    {"checkpoint.writer.type", kFollows, "checkpoint.writer"},
    {"checkpoint.writer.decoupled", kActed,
     "Engine::SaveCheckpoint: every save asynchronous (snapshot to host memory, files written by a background "
     "thread, latest published at the next save/load or engine destruction; docs/checkpoint.md)"},
    {"checkpoint.writer.io_buffer_size", kFollows, "checkpoint.writer"},
    {"checkpoint.writer.io_buffer_double", kFollows, "checkpoint.writer"},
    {"checkpoint.writer.show_statistics", kFollows, "checkpoint.writer"},
    {"checkpoint.writer.data_parallel", kFollows, "checkpoint.writer"},
    {"checkpoint.writer.io_multiplier", kFollows, "checkpoint.writer"},

    // ---- monitors and profilers ------------------------------------------------------------------------
    {"tensorboard.enabled", kActed, "engine: TensorBoard event files on rank 0 (runtime/observe/tensorboard.h)"},
    {"tensorboard.output_path", kActed, "engine: TensorBoard event files on rank 0"},
    {"tensorboard.job_name", kActed, "engine: TensorBoard event files on rank 0"},
    {"csv_monitor.enabled", kActed, "engine: CSV scalar files on rank 0"},
    {"csv_monitor.output_path", kActed, "engine: CSV scalar files on rank 0"},
    {"csv_monitor.job_name", kActed, "engine: CSV scalar files on rank 0"},
    {"wandb.enabled", kWarned, "Weights & Biases logging is not implemented", kObservability},
    {"wandb.group", kFollows, "wandb.enabled"},
    {"wandb.team", kFollows, "wandb.enabled"},
    {"wandb.project", kFollows, "wandb.enabled"},
    {"comet.enabled", kWarned, "Comet logging is not implemented", kObservability},
    {"comet.samples_log_interval", kFollows, "comet.enabled"},
    {"comet.project", kFollows, "comet.enabled"},
    {"comet.workspace", kFollows, "comet.enabled"},
    {"comet.api_key", kFollows, "comet.enabled"},
    {"comet.experiment_name", kFollows, "comet.enabled"},
    {"comet.experiment_key", kFollows, "comet.enabled"},
    {"comet.online", kFollows, "comet.enabled"},
    {"comet.mode", kFollows, "comet.enabled"},
    {"flops_profiler.enabled", kActed,
     "engine: rank 0 profiles one step (per-module MACs counted by the layers, latency, MFU; "
     "runtime/observe/flops_profiler.h)"},
    {"flops_profiler.recompute_fwd_factor", kWarned,
     "zerorun counts the recomputed forward of activation checkpointing itself (the profile's HFU line), so no "
     "factor is applied"},
    {"flops_profiler.profile_step", kActed, "engine: the step profiled (when global_steps equals it)"},
    {"flops_profiler.module_depth", kActed, "the profile's depth (-1: all)"},
    {"flops_profiler.top_modules", kActed, "the profile's aggregated part"},
    {"flops_profiler.detailed", kActed, "the profile's module tree"},
    {"flops_profiler.output_file", kActed, "the profile is written there instead of the log"},
    {"comms_logger.enabled", kActed, "engine: the communicator's comms logger (zerorun-train prints its summary)"},
    {"comms_logger.verbose", kActed, "engine: the communicator's comms logger"},
    {"comms_logger.prof_all", kActed, "engine: the communicator's comms logger"},
    {"comms_logger.debug", kActed, "engine: the communicator's comms logger"},
    {"comms_logger.prof_ops", kActed, "engine: the communicator's comms logger"},
    {"lr_scaling.rule", kActed,
     "zerorun's own key (not DeepSpeed's): the optimizer's and the schedule's absolute lrs are multiplied by "
     "train_batch_size / reference_batch_size (linear) or its square root (sqrt) when the config is loaded"},
    {"lr_scaling.reference_batch_size", kFollows, "lr_scaling.rule"},
    {"numerics.enabled", kActed,
     "zerorun's own key (not DeepSpeed's): engine: per-group gradient statistics over all ranks, to the log, "
     "tensorboard and csv_monitor (docs/monitoring.md)"},
    {"numerics.interval", kActed, "engine: the statistics are computed every interval optimizer steps"},
    {"numerics.check_activations", kActed,
     "zerorun's own key: engine: every module's forward output is checked for NaN/Inf; a non-finite loss names "
     "the first module whose output was not finite"},
    {"elasticity.enabled", kRefused, "elastic training is not supported (refused when loading)"},
    {"elasticity.max_train_batch_size", kFollows, "elasticity.enabled"},
    {"elasticity.micro_batch_sizes", kFollows, "elasticity.enabled"},
    {"elasticity.min_gpus", kFollows, "elasticity.enabled"},
    {"elasticity.max_gpus", kFollows, "elasticity.enabled"},
    {"elasticity.min_time", kFollows, "elasticity.enabled"},
    {"elasticity.prefer_larger_batch", kFollows, "elasticity.enabled"},
    {"elasticity.ignore_non_elastic_batch_info", kFollows, "elasticity.enabled"},
    {"elasticity.version", kFollows, "elasticity.enabled"},
    {"elasticity.num_gpus_per_node", kFollows, "elasticity.enabled"},
    {"elasticity.model_parallel_size", kFollows, "elasticity.enabled"},

    // ---- DeepSpeed features zerorun does not have ---------------------------------------------------
    {"progressive_layer_drop.enabled", kRefused,
     "progressive layer drop (skipping layers during training) is not implemented; training would differ"},
    {"quantize_training.enabled", kRefused,
     "quantization-aware training (MoQ) is not implemented; training would differ"},
    {"curriculum_learning.enabled", kRefused,
     "curriculum learning (a schedule over sequence length or difficulty) is not implemented; training would "
     "differ"},
    {"data_efficiency.enabled", kRefused,
     "data efficiency (curriculum sampling, random layer token drop) is not implemented; training would differ"},
    {"eigenvalue.enabled", kWarned, "the Hessian eigenvalue computation is not implemented (it only reports)"},
    {"hybrid_engine.enabled", kWarned, "the RLHF hybrid engine (inference kernels between training steps) is not "
                                       "implemented; training steps are unaffected"},
    {"autotuning.enabled", kActed,
     "zerorun-sweep --autotune CONFIG runs the tuning experiments the section asks for (docs/experiments.md "
     "\"Autotuning\"); the training engine does not read it, as DeepSpeed's does not (its launcher runs them)"},
    {"pipeline", kWarned,
     "zerorun has no pipeline parallelism (DeepSpeed's non-pipeline engine ignores this section too)"},
    {"sparse_attention", kWarned,
     "the section configures DeepSpeed's sparse attention modules, which a zerorun model does not use"},
    {"compression_training", kRefused,
     "compression training (pruning, quantization, layer reduction) is not implemented; training would differ"},
    {"tensor_parallel", kRefused,
     "AutoTP tensor parallelism is not implemented; zerorun would hold the whole model per data-parallel rank"},
    {"expert_parallel", kWarned, "zerorun has no mixture-of-experts layers, so there is nothing to parallelise"},
    {"compile", kWarned, "zerorun is compiled ahead of time: there is no torch.compile / DeepCompile step"},
    {"weight_quantization", kRefused, "weight quantization is not implemented; training would differ"},
    {"nebula", kWarned, "the Nebula checkpoint engine is not implemented; zerorun writes its own checkpoints "
     "(docs/checkpoint.md)"},
    {"datastates", kWarned, "the DataStates checkpoint engine is not implemented; zerorun writes its own "
     "checkpoints (docs/checkpoint.md)"},
    {"sequence_parallel_size", kRefused,
     "Ulysses sequence parallelism is not implemented (every rank is data-parallel)"},
    {"data_parallel_size", kActed, "ValidateForEngine: must equal the world size (every rank is data-parallel)"},
    {"mup", kRefused, "muP (width-scaled initialisation and learning rates) is not implemented; training would differ"},
};

const std::unordered_map<std::string_view, const KeyDisposition*>& Index() {
  static const auto index = [] {
    std::unordered_map<std::string_view, const KeyDisposition*> m;
    for (const KeyDisposition& d : kTable) m.emplace(d.path, &d);
    return m;
  }();
  return index;
}

// The default config with the same optimizer/scheduler types and the same optional sections as `c`, so
// that every key of `c` has a default to compare with.
Config ReferenceFor(const Config& c) {
  Config r;
  r.optimizer.type = c.optimizer.type;
  r.scheduler.type = c.scheduler.type;
  if (c.zero_optimization.offload_param) r.zero_optimization.offload_param.emplace();
  if (c.zero_optimization.offload_optimizer) r.zero_optimization.offload_optimizer.emplace();
  if (c.checkpoint.writer) r.checkpoint.writer.emplace();
  return r;
}

}  // namespace

const std::vector<KeyDisposition>& KeyDispositions() { return kTable; }

const KeyDisposition* FindKeyDisposition(std::string_view path) {
  auto it = Index().find(path);
  return it == Index().end() ? nullptr : it->second;
}

const char* KeyUseName(KeyUse u) {
  switch (u) {
    case KeyUse::kActed: return "acted";
    case KeyUse::kWarned: return "warned";
    case KeyUse::kRefused: return "refused";
    case KeyUse::kFollows: return "follows";
  }
  return "?";
}

namespace config_detail {
std::string NoEffectWarning(const KeyDisposition& d) {
  return Format("accepted, has no effect in zerorun because {}{}", d.why,
                d.issue ? Format(" (issue #{})", d.issue) : std::string());
}
}  // namespace config_detail

std::vector<ConfigIssue> UnsupportedKeys(const Config& config) {
  std::vector<ConfigIssue> out;
  const std::vector<std::pair<std::string, std::string>> values = config_detail::EffectiveValues(config);
  std::unordered_map<std::string, std::string> defaults;
  for (auto& [path, text] : config_detail::EffectiveValues(ReferenceFor(config))) defaults.emplace(path, text);
  auto issue_text = [](const KeyDisposition& d) {
    return d.issue ? Format(" (issue #{})", d.issue) : std::string();
  };
  for (const auto& [path, text] : values) {
    const KeyDisposition* d = FindKeyDisposition(path);
    if (d == nullptr || d->use != KeyUse::kRefused) continue;
    auto def = defaults.find(path);
    if (def == defaults.end() || def->second == text) continue;
    const Provenance* p = config.ProvenanceOf(path);
    const std::string from = p && p->kind != Provenance::Kind::kFile && p->kind != Provenance::Kind::kDefault
                                 ? " [" + p->ToString() + "]"
                                 : std::string();
    out.push_back({path, Format("{}{} is not supported by zerorun: {}{}; remove the key or write {}", text, from,
                                d->why, issue_text(*d), def->second)});
  }
  // Sections accepted whole: refused when written at all.
  for (const KeyDisposition& d : kTable) {
    if (d.use != KeyUse::kRefused) continue;
    const Provenance* p = config.ProvenanceOf(d.path);
    if (p == nullptr || p->kind != Provenance::Kind::kFile) continue;
    const bool typed = std::any_of(values.begin(), values.end(), [&](const auto& v) { return v.first == d.path; });
    if (!typed) out.push_back({d.path, Format("the section is not supported by zerorun: {}{}; remove it", d.why, issue_text(d))});
  }
  return out;
}

}  // namespace zerorun::runtime

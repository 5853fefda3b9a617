// Field lists of the remaining sections: aio, activation_checkpointing, checkpoint, the monitors,
// flops_profiler, comms_logger, elasticity, and the DeepSpeed sections zerorun accepts but does not
// implement (one warning each). Reference: deepspeed.md §1.10-§1.17.
#include "zerorun/runtime/config/config_visitor.h"

namespace zerorun::runtime::config_detail {
namespace {

const EnumSpec& TagValidationEnum() {
  static const EnumSpec spec{{{"Warn", int(TagValidation::kWarn)},
                              {"Ignore", int(TagValidation::kIgnore)},
                              {"Fail", int(TagValidation::kFail)}},
                             true,
                             {}};
  return spec;
}

// Read by the offload I/O engine (offload/io_engine.h, docs/offload.md); the cross-key rules are in
// config_resolve.cc (CheckAio).
void VisitAio(ConfigVisitor& v, AioConfig& a) {
  v.Int({.key = "block_size", .doc = "bytes per I/O request (a multiple of 4096)", .min = 0, .min_exclusive = true},
        a.block_size);
  v.Int({.key = "queue_depth", .doc = "requests in flight per worker ring", .min = 1, .max = 4096}, a.queue_depth);
  // DeepSpeed's docs call it thread_count; DeepSpeed's code reads only intra_op_parallelism.
  v.Int({.key = "intra_op_parallelism", .doc = "workers (each an io_uring ring) splitting each read/write",
         .alias = "thread_count", .min = 1, .max = 256},
        a.intra_op_parallelism);
  v.Bool({.key = "single_submit", .doc = "one io_uring_submit per request instead of per batch"}, a.single_submit);
  v.Bool({.key = "overlap_events", .doc = "refill the queue as completions arrive (false: batch, wait for all)"},
         a.overlap_events);
  v.Bool({.key = "use_gds", .doc = "GPUDirect Storage (true is refused)"}, a.use_gds);
}

void VisitActivationCheckpointing(ConfigVisitor& v, ActivationCheckpointingConfig& a) {
  v.Bool({.key = "partition_activations", .doc = "partition checkpoints across model-parallel ranks"},
         a.partition_activations);
  v.Bool({.key = "cpu_checkpointing", .doc = "keep checkpointed activations in CPU memory"}, a.cpu_checkpointing);
  v.Bool({.key = "contiguous_memory_optimization", .doc = "copy checkpoints into one buffer"},
         a.contiguous_memory_optimization);
  v.OptInt({.key = "number_checkpoints", .doc = "checkpoints per step (contiguous buffer size)", .min = 0},
           a.number_checkpoints);
  v.Bool({.key = "synchronize_checkpoint_boundary", .doc = "synchronise the device at each boundary"},
         a.synchronize_checkpoint_boundary);
  v.Bool({.key = "profile", .doc = "log forward/backward time per checkpoint"}, a.profile);
}

void VisitWriter(ConfigVisitor& v, CheckpointWriterConfig& w) {
  v.String({.key = "type", .doc = "writer: mock, python or fast"}, w.type);
  v.Bool({.key = "decoupled", .doc = "write from a separate process"}, w.decoupled);
  v.Int({.key = "io_buffer_size", .doc = "bytes per writer buffer", .min = 0}, w.io_buffer_size);
  v.Bool({.key = "io_buffer_double", .doc = "double buffering"}, w.io_buffer_double);
  v.Bool({.key = "show_statistics", .doc = "log write statistics"}, w.show_statistics);
  v.OptString({.key = "data_parallel", .doc = "null, replica, socket or machine"}, w.data_parallel);
  v.Int({.key = "io_multiplier", .doc = "I/O size multiplier", .min = 0}, w.io_multiplier);
}

void VisitCheckpoint(ConfigVisitor& v, CheckpointConfig& c) {
  VisitEnum(v, {.key = "tag_validation", .doc = "checkpoint tags equal across ranks: Ignore, Warn or Fail"},
            c.tag_validation, TagValidationEnum());
  v.Bool({.key = "load_universal", .doc = "load a universal (reshardable) checkpoint"}, c.load_universal);
  v.Bool({.key = "use_node_local_storage", .doc = "every node writes its own copy"}, c.use_node_local_storage);
  VisitSection(v, {.key = "parallel_write", .doc = "parallel checkpoint writing"}, c,
               [](ConfigVisitor& v, CheckpointConfig& c) {
                 v.Bool({.key = "pipeline_stage", .doc = "pipeline stages write in parallel"},
                        c.parallel_write_pipeline_stage);
               });
  v.Bool({.key = "checkpoint_serialization", .doc = "zipfile serialization (DeepSpeed/torch)"},
         c.checkpoint_serialization);
  VisitOptSection(v, {.key = "writer", .doc = "DeepSpeed fast checkpoint writer; null: default"},
                  c.writer, VisitWriter);
}

template <class T>
void VisitFileMonitor(ConfigVisitor& v, T& m) {
  v.Bool({.key = "enabled", .doc = "write scalar events"}, m.enabled);
  v.String({.key = "output_path", .doc = "directory (\"\": the launch directory)"}, m.output_path);
  v.String({.key = "job_name", .doc = "sub-directory / file prefix"}, m.job_name);
}
void VisitWandb(ConfigVisitor& v, WandbConfig& w) {
  v.Bool({.key = "enabled", .doc = "log to Weights & Biases"}, w.enabled);
  v.OptString({.key = "group", .doc = "run group"}, w.group);
  v.OptString({.key = "team", .doc = "team (entity)"}, w.team);
  v.String({.key = "project", .doc = "project name"}, w.project);
}
void VisitComet(ConfigVisitor& v, CometConfig& c) {
  v.Bool({.key = "enabled", .doc = "log to Comet"}, c.enabled);
  v.Int({.key = "samples_log_interval", .doc = "samples between logs", .min = 0}, c.samples_log_interval);
  v.OptString({.key = "project", .doc = "project"}, c.project);
  v.OptString({.key = "workspace", .doc = "workspace"}, c.workspace);
  v.OptString({.key = "api_key", .doc = "API key"}, c.api_key);
  v.OptString({.key = "experiment_name", .doc = "experiment name"}, c.experiment_name);
  v.OptString({.key = "experiment_key", .doc = "experiment key"}, c.experiment_key);
  v.OptBool({.key = "online", .doc = "online mode"}, c.online);
  v.OptString({.key = "mode", .doc = "experiment mode"}, c.mode);
}

void VisitFlopsProfiler(ConfigVisitor& v, FlopsProfilerConfig& f) {
  v.Bool({.key = "enabled", .doc = "profile FLOPs once (also turns on wall_clock_breakdown)"}, f.enabled);
  v.Float({.key = "recompute_fwd_factor", .doc = "extra forward cost of recomputation", .min = 0},
          f.recompute_fwd_factor);
  v.Int({.key = "profile_step", .doc = "global step profiled", .min = 0}, f.profile_step);
  v.Int({.key = "module_depth", .doc = "module depth printed (-1: all)", .min = -1}, f.module_depth);
  v.Int({.key = "top_modules", .doc = "top modules printed", .min = 0}, f.top_modules);
  v.Bool({.key = "detailed", .doc = "per-module detail"}, f.detailed);
  v.OptString({.key = "output_file", .doc = "file for the profile; null: stdout"}, f.output_file);
}

void VisitCommsLogger(ConfigVisitor& v, CommsLoggerConfig& c) {
  v.Bool({.key = "enabled", .doc = "log collectives"}, c.enabled);
  v.Bool({.key = "verbose", .doc = "log every collective"}, c.verbose);
  v.Bool({.key = "prof_all", .doc = "profile all operations"}, c.prof_all);
  v.Bool({.key = "debug", .doc = "include the caller"}, c.debug);
  v.StringList({.key = "prof_ops", .doc = "operations to profile when prof_all is false"}, c.prof_ops);
}

void VisitElasticity(ConfigVisitor& v, ElasticityConfig& e) {
  v.Bool({.key = "enabled", .doc = "elastic batch sizing (not implemented: true is refused)"}, e.enabled);
  v.Int({.key = "max_train_batch_size", .doc = "largest global batch", .min = 0}, e.max_train_batch_size);
  v.IntList({.key = "micro_batch_sizes", .doc = "candidate micro batch sizes", .min = 0, .min_exclusive = true},
            e.micro_batch_sizes);
  v.Int({.key = "min_gpus", .doc = "fewest GPUs", .min = 0}, e.min_gpus);
  v.Int({.key = "max_gpus", .doc = "most GPUs", .min = 0}, e.max_gpus);
  v.Int({.key = "min_time", .doc = "minimum minutes between scalings", .min = 0}, e.min_time);
  v.Bool({.key = "prefer_larger_batch", .doc = "ties pick the larger batch"}, e.prefer_larger_batch);
  v.Bool({.key = "ignore_non_elastic_batch_info", .doc = "ignore the batch keys when enabled"},
         e.ignore_non_elastic_batch_info);
  v.Float({.key = "version", .doc = "algorithm version (<= 0.2)", .min = 0, .max = 0.2}, e.version);
  v.Int({.key = "num_gpus_per_node", .doc = "GPUs per node", .min = 0}, e.num_gpus_per_node);
  v.Int({.key = "model_parallel_size", .doc = "model-parallel degree (> 1 needs version 0.2)", .min = 0},
        e.model_parallel_size);
}

const EnumSpec& LrScalingRuleEnum() {
  static const EnumSpec spec{{{"none", int(LrScalingRule::kNone)},
                              {"linear", int(LrScalingRule::kLinear)},
                              {"sqrt", int(LrScalingRule::kSqrt)}},
                             true,
                             {}};
  return spec;
}
void VisitLrScaling(ConfigVisitor& v, LrScalingConfig& l) {
  VisitEnum(v, {.key = "rule", .doc = "scale the config's lrs with the global batch: none, linear, sqrt"}, l.rule,
            LrScalingRuleEnum());
  v.Int({.key = "reference_batch_size", .doc = "the global batch the file's lrs are for", .min = 1},
        l.reference_batch_size);
}

void VisitNumerics(ConfigVisitor& v, NumericsConfig& n) {
  v.Bool({.key = "enabled", .doc = "per-group gradient statistics (max-abs, norm, zeros, fp16 range) every interval steps"},
         n.enabled);
  v.Int({.key = "interval", .doc = "optimizer steps between gradient statistics", .min = 1}, n.interval);
  v.Bool({.key = "check_activations", .doc = "debug: check every module's forward output for NaN/Inf"},
         n.check_activations);
}

}  // namespace

void VisitOtherSections(ConfigVisitor& v, ConfigBody& c) {
  VisitSection(v, {.key = "aio", .doc = "asynchronous NVMe I/O"}, c.aio, VisitAio);
  VisitSection(v, {.key = "activation_checkpointing", .doc = "activation checkpointing"}, c.activation_checkpointing,
               VisitActivationCheckpointing);
  VisitSection(v, {.key = "checkpoint", .doc = "checkpoint saving and loading"}, c.checkpoint, VisitCheckpoint);
  VisitSection(v, {.key = "tensorboard", .doc = "TensorBoard event files", .lenient = true}, c.tensorboard,
               VisitFileMonitor<TensorBoardConfig>);
  VisitSection(v, {.key = "csv_monitor", .doc = "CSV scalar files", .lenient = true}, c.csv_monitor,
               VisitFileMonitor<CsvMonitorConfig>);
  VisitSection(v, {.key = "wandb", .doc = "Weights & Biases (not implemented)", .lenient = true}, c.wandb, VisitWandb);
  VisitSection(v, {.key = "comet", .doc = "Comet (not implemented)", .lenient = true}, c.comet, VisitComet);
  VisitSection(v, {.key = "flops_profiler", .doc = "FLOPs profiler"}, c.flops_profiler, VisitFlopsProfiler);
  VisitSection(v, {.key = "comms_logger", .doc = "communication logger", .lenient = true}, c.comms_logger,
               VisitCommsLogger);
  VisitSection(v, {.key = "elasticity", .doc = "elastic training"}, c.elasticity, VisitElasticity);
  VisitSection(v, {.key = "lr_scaling", .doc = "zerorun's own: lr scaled with the global batch"}, c.lr_scaling,
               VisitLrScaling);
  VisitSection(v, {.key = "numerics", .doc = "zerorun's own: gradient statistics and the activation check"},
               c.numerics, VisitNumerics);

  // DeepSpeed features zerorun does not implement. Sections with an on/off switch are read as far as
  // the switch (the rest of the section follows it); the others are accepted whole. What zerorun does
  // with each (a warning or a refusal, and why) is declared in config_dispositions.cc.
  static const std::pair<const char*, bool FeatureSwitches::*> kSwitched[] = {
      {"progressive_layer_drop", &FeatureSwitches::progressive_layer_drop},
      {"quantize_training", &FeatureSwitches::quantize_training},
      {"curriculum_learning", &FeatureSwitches::curriculum_learning},
      {"data_efficiency", &FeatureSwitches::data_efficiency},
      {"eigenvalue", &FeatureSwitches::eigenvalue},
      {"hybrid_engine", &FeatureSwitches::hybrid_engine},
      {"autotuning", &FeatureSwitches::autotuning},
  };
  for (const auto& entry : kSwitched) {
    bool FeatureSwitches::*member = entry.second;  // a structured binding cannot be captured before clang 16
    VisitSection(v, {.key = entry.first, .doc = "DeepSpeed feature switched by enabled", .lenient = true}, c.switches,
                 [member](ConfigVisitor& v, FeatureSwitches& s) {
                   v.Bool({.key = "enabled", .doc = "the feature's switch"}, s.*member);
                   v.AcceptRest("the section's other keys follow its switch");
                 });
  }
  static const std::pair<const char*, const char*> kWhole[] = {
      {"pipeline", "pipeline parallelism (PipelineModule only)"},
      {"sparse_attention", "sparse attention modules"},
      {"compression_training", "compression training"},
      {"tensor_parallel", "AutoTP tensor parallelism"},
      {"expert_parallel", "MoE expert parallelism"},
      {"compile", "torch.compile / DeepCompile"},
      {"weight_quantization", "weight quantization"},
      {"nebula", "Nebula checkpoint engine"},
      {"datastates", "DataStates checkpoint engine"},
      {"mup", "muP"},
  };
  for (const auto& [key, doc] : kWhole) v.Opaque({.key = key, .doc = doc});
  v.Int({.key = "sequence_parallel_size", .doc = "Ulysses sequence-parallel degree", .min = 0, .min_exclusive = true},
        c.sequence_parallel_size);
  v.OptInt({.key = "data_parallel_size", .doc = "data-parallel degree; null: the world size", .min = 0,
            .min_exclusive = true},
           c.data_parallel_size);
}

}  // namespace zerorun::runtime::config_detail

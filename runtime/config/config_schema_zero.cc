// Field list of `zero_optimization` and its `offload_optimizer` / `offload_param` sections, with the
// stage3_* aliases and deprecated keys translated as DeepSpeed does (reference deepspeed.md §1.8, §1.9).
// These are pydantic sections in DeepSpeed: unknown keys are rejected there too, and "500"/"yes" coerce.
#include "zerorun/runtime/config/config_visitor.h"

namespace zerorun::runtime::config_detail {
namespace {

void VisitOffloadOptimizer(ConfigVisitor& v, OffloadOptimizerConfig& o) {
  VisitEnum(v, {.key = "device", .doc = "where optimizer state lives: none, cpu or nvme (nvme: stage 3)"}, o.device,
            OffloadDeviceEnum());
  v.OptString({.key = "nvme_path", .doc = "directory for NVMe swap files (required for nvme)"}, o.nvme_path);
  v.Int({.key = "buffer_count", .doc = "swap buffers (>= states per parameter, 4 for Adam)", .min = 0},
        o.buffer_count);
  v.Bool({.key = "pin_memory", .doc = "page-locked host buffers"}, o.pin_memory);
  v.Bool({.key = "pipeline_read", .doc = "overlap NVMe reads with the optimizer step"}, o.pipeline_read);
  v.Bool({.key = "pipeline_write", .doc = "overlap NVMe writes with the optimizer step"}, o.pipeline_write);
  v.Bool({.key = "fast_init", .doc = "faster NVMe swap-file initialisation"}, o.fast_init);
  v.Float({.key = "ratio", .doc = "fraction of optimizer state offloaded (< 1: stage 3)", .min = 0, .max = 1},
          o.ratio);
  v.Bool({.key = "super_offload", .doc = "SuperOffload (stage 3)"},
         o.super_offload);
  v.Float({.key = "cpuadam_cores_perc", .doc = "share of cores used by the CPU optimizer", .min = 0, .max = 1},
          o.cpuadam_cores_perc);
}

void VisitOffloadParam(ConfigVisitor& v, OffloadParamConfig& o) {
  VisitEnum(v, {.key = "device", .doc = "where partitioned parameters live: none, cpu or nvme (stage 3)"}, o.device,
            OffloadDeviceEnum());
  v.OptString({.key = "nvme_path", .doc = "directory for NVMe swap files (required for nvme)"}, o.nvme_path);
  v.Int({.key = "buffer_count", .doc = "parameter swap buffers", .min = 0}, o.buffer_count);
  v.Int({.key = "buffer_size", .doc = "elements per parameter swap buffer", .min = 0}, o.buffer_size);
  v.Int({.key = "max_in_cpu", .doc = "elements kept in CPU memory when on NVMe", .min = 0}, o.max_in_cpu);
  v.Bool({.key = "pin_memory", .doc = "page-locked host buffers"}, o.pin_memory);
}

}  // namespace

void VisitZero(ConfigVisitor& v, ZeroConfig& z) {
  int64_t stage = z.StageNumber();
  v.Int({.key = "stage", .doc = "0: off, 1: optimizer states, 2: + gradients, 3: + parameters", .min = 0, .max = 3},
        stage);
  z.stage = static_cast<ZeroStage>(stage);
  v.Bool({.key = "contiguous_gradients", .doc = "copy gradients into one contiguous buffer"}, z.contiguous_gradients);
  v.OptBool({.key = "overlap_comm", .doc = "overlap reduction with backward; null: true only for stage 3",
             .default_text = "null"},
            z.overlap_comm);
  v.Bool({.key = "reduce_scatter", .doc = "reduce gradients by reduce-scatter (else all-reduce)"}, z.reduce_scatter);
  v.Int({.key = "reduce_bucket_size", .doc = "elements per gradient-reduction bucket", .min = 0, .auto_ok = true},
        z.reduce_bucket_size);
  v.Bool({.key = "use_multi_rank_bucket_allreduce", .doc = "stage 1/2: one all-reduce per bucket"},
         z.use_multi_rank_bucket_allreduce);
  v.Bool({.key = "allgather_partitions", .doc = "accepted; no effect (as in DeepSpeed)"}, z.allgather_partitions);
  v.Int({.key = "allgather_bucket_size", .doc = "elements per parameter all-gather bucket (stage 1/2: even)",
         .min = 0},
        z.allgather_bucket_size);
  v.Bool({.key = "load_from_fp32_weights", .doc = "restore fp32 masters from the checkpoint's fp32 copy"},
         z.load_from_fp32_weights);
  v.Bool({.key = "elastic_checkpoint", .doc = "stage 1/2 legacy elastic checkpoint"}, z.elastic_checkpoint);
  VisitOptSection(v, {.key = "offload_param", .doc = "stage 3 parameter offload; null: off", .lenient = true},
                  z.offload_param, VisitOffloadParam);
  VisitOptSection(v, {.key = "offload_optimizer", .doc = "optimizer-state offload; null: off", .lenient = true},
                  z.offload_optimizer, VisitOffloadOptimizer);
  v.Int({.key = "sub_group_size", .doc = "elements per optimizer-step sub-group", .min = 0}, z.sub_group_size);
  v.Int({.key = "prefetch_bucket_size", .doc = "stage 3: elements prefetched ahead of use",
         .alias = "stage3_prefetch_bucket_size", .min = 0, .auto_ok = true},
        z.prefetch_bucket_size);
  v.Int({.key = "param_persistence_threshold", .doc = "stage 3: params smaller than this stay gathered",
         .alias = "stage3_param_persistence_threshold", .min = 0, .auto_ok = true},
        z.param_persistence_threshold);
  v.Int({.key = "model_persistence_threshold", .doc = "stage 3: cap on the total persistent elements",
         .alias = "stage3_model_persistence_threshold", .min = 0},
        z.model_persistence_threshold);
  v.Int({.key = "max_live_parameters", .doc = "stage 3: gathered elements kept at most",
         .alias = "stage3_max_live_parameters", .min = 0},
        z.max_live_parameters);
  v.Int({.key = "max_reuse_distance", .doc = "stage 3: keep a param gathered if reused within this many elements",
         .alias = "stage3_max_reuse_distance", .min = 0},
        z.max_reuse_distance);
  v.Bool({.key = "gather_16bit_weights_on_model_save", .doc = "stage 3: gather full 16-bit weights when saving",
          .alias = "stage3_gather_16bit_weights_on_model_save",
          .deprecated = "stage3_gather_fp16_weights_on_model_save"},
         z.gather_16bit_weights_on_model_save);
  v.Int({.key = "module_granularity_threshold", .doc = "stage 3: fetch small modules as one unit",
         .alias = "stage3_module_granularity_threshold", .min = 0},
        z.module_granularity_threshold);
  v.Bool({.key = "use_all_reduce_for_fetch_params", .doc = "stage 3: fetch params with all-reduce",
          .alias = "stage3_use_all_reduce_for_fetch_params"},
         z.use_all_reduce_for_fetch_params);
  v.Bool({.key = "allgather_sequential", .doc = "stage 3: gather one param at a time (prefetch 1)",
          .alias = "stage3_allgather_sequential"},
         z.allgather_sequential);
  v.Bool({.key = "ignore_unused_parameters", .doc = "params without gradients count as zero (false: error naming them)"},
         z.ignore_unused_parameters);
  v.Bool({.key = "legacy_stage1", .doc = "removed in DeepSpeed 0.5.9; true is refused"}, z.legacy_stage1);
  v.Bool({.key = "round_robin_gradients", .doc = "stage 1/2: round-robin gradient placement"},
         z.round_robin_gradients);
  v.Int({.key = "zero_hpz_partition_size", .doc = "ZeRO++ hierarchical partition size", .min = 0},
        z.zero_hpz_partition_size);
  v.Bool({.key = "zero_quantized_weights", .doc = "ZeRO++ int8 weight all-gather"},
         z.zero_quantized_weights);
  v.Bool({.key = "zero_quantized_nontrainable_weights", .doc = "ZeRO++ quantised frozen weights"},
         z.zero_quantized_nontrainable_weights);
  v.Bool({.key = "zero_quantized_gradients", .doc = "ZeRO++ int4 gradient reduction"},
         z.zero_quantized_gradients);
  v.Opaque({.key = "zeropp_loco_param", .doc = "ZeRO++ LoCo parameters"});
  v.Int({.key = "mics_shard_size", .doc = "MiCS shard size (-1: off)", .min = -1},
        z.mics_shard_size);
  v.Bool({.key = "mics_hierarchical_params_gather", .doc = "MiCS hierarchical gather"},
         z.mics_hierarchical_params_gather);
  v.Bool({.key = "memory_efficient_linear", .doc = "stage 3 memory-efficient linear"}, z.memory_efficient_linear);
  v.Bool({.key = "pipeline_loading_checkpoint", .doc = "stage 3 pipelined checkpoint loading"},
         z.pipeline_loading_checkpoint);
  v.Bool({.key = "override_module_apply", .doc = "stage 3: gather params around module.apply"},
         z.override_module_apply);
  v.Bool({.key = "log_trace_cache_warnings", .doc = "stage 3 trace-cache warnings"}, z.log_trace_cache_warnings);
  v.Bool({.key = "enable_sanity_checks", .doc = "extra stage 3 checks"}, z.enable_sanity_checks);
  v.Bool({.key = "save_muon_momentum_buffer_in_memory", .doc = "Muon momentum kept in memory"},
         z.save_muon_momentum_buffer_in_memory);
  v.Opaque({.key = "leaf_module", .doc = "stage 3 leaf modules"});
  v.Opaque({.key = "zenflow", .doc = "ZenFlow"});

  // Deprecated forms, translated after the new keys were read (old and new together is an error).
  if (std::optional<bool> b = v.DeprecatedBool({.key = "cpu_offload", .doc = "true → offload_optimizer.device cpu",
                                                .status = FieldStatus::kDeprecated},
                                               "offload_optimizer")) {
    if (v.Present("offload_optimizer")) {
      v.Error("cpu_offload",
              "Cannot provide deprecated parameter 'cpu_offload' and replacing parameter 'offload_optimizer' together");
    } else if (*b) {
      z.offload_optimizer.emplace();
      z.offload_optimizer->device = OffloadDevice::kCpu;
      v.SetProvenance("offload_optimizer", {Provenance::Kind::kDeprecated, "cpu_offload"});
      v.SetProvenance("offload_optimizer.device", {Provenance::Kind::kDeprecated, "cpu_offload"});
    }
  }
  if (std::optional<bool> b = v.DeprecatedBool({.key = "cpu_offload_param", .doc = "true → offload_param.device cpu",
                                                .status = FieldStatus::kDeprecated},
                                               "offload_param")) {
    if (v.Present("offload_param")) {
      v.Error("cpu_offload_param",
              "Cannot provide deprecated parameter 'cpu_offload_param' and replacing parameter 'offload_param' "
              "together");
    } else if (*b) {
      z.offload_param.emplace();
      z.offload_param->device = OffloadDevice::kCpu;
      v.SetProvenance("offload_param", {Provenance::Kind::kDeprecated, "cpu_offload_param"});
      v.SetProvenance("offload_param.device", {Provenance::Kind::kDeprecated, "cpu_offload_param"});
    }
  }
  (void)v.DeprecatedBool({.key = "cpu_offload_use_pin_memory", .doc = "warning only; not translated",
                          .status = FieldStatus::kDeprecated},
                         "offload_optimizer.pin_memory");
}

}  // namespace zerorun::runtime::config_detail

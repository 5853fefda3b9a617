// After reading: the batch triple is resolved exactly as DeepSpeed's _set_batch_related_parameters
// (floor divisions in its order, then its four assertions with its messages), "auto" values are derived
// where possible, stage-dependent defaults are filled in, and the cross-field rules are checked.
// Every derived value records how it was derived.
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>

#include "zerorun/runtime/config/config_loader.h"
#include "zerorun/runtime/config/config_visitor.h"

namespace zerorun::runtime::config_detail {
namespace {

using Kind = Provenance::Kind;

bool IsAuto(const Collected& out, const std::string& path) { return out.auto_paths.count(path) > 0; }

void Derive(Collected& out, const std::string& path, std::string how) {
  if (IsAuto(out, path)) out.provenance[path] = {Kind::kAuto, "\"auto\" → " + how};
  else out.provenance[path] = {Kind::kDerived, std::move(how)};
}

// Python's floor division (DeepSpeed's `//`).
int64_t FloorDiv(int64_t a, int64_t b) {
  if (b == -1) return a == INT64_MIN ? INT64_MAX : -a;
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
// a × b × c, or nullopt on overflow.
std::optional<int64_t> Mul3(int64_t a, int64_t b, int64_t c) {
  int64_t ab = 0, abc = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc)) return std::nullopt;
  return abc;
}

// Errors name the key the user wrote: a value given as <= 0 is reported on its own key, and a
// derived value that fails DeepSpeed's checks on the keys it was derived from.
void ResolveBatch(BatchConfig& b, int w, Collected& out) {
  auto& tbs = b.train_batch_size;
  auto& mbs = b.train_micro_batch_size_per_gpu;
  auto& gas = b.gradient_accumulation_steps;
  b.world_size = w;
  constexpr const char* kTbs = "train_batch_size";
  constexpr const char* kMbs = "train_micro_batch_size_per_gpu";
  constexpr const char* kGas = "gradient_accumulation_steps";
  // Given values first, each under its own key (DeepSpeed would report some of them under a value
  // it derived from them, e.g. micro -1 as "Train batch size: -2").
  bool bad = false;
  if (tbs && *tbs <= 0) {
    out.Error(kTbs, Format("Train batch size: {} has to be greater than 0", *tbs));
    bad = true;
  }
  if (mbs && *mbs <= 0) {
    out.Error(kMbs, Format("Micro batch size per gpu: {} has to be greater than 0", *mbs));
    bad = true;
  }
  if (gas && *gas <= 0) {
    out.Error(kGas, Format("Gradient accumulation steps: {} has to be greater than 0", *gas));
    bad = true;
  }
  if (bad) return;
  auto too_large = [&](const char* key) { out.Error(key, "the batch arithmetic overflows a 64-bit integer"); };
  // A derived value (`what`, DeepSpeed's name for it) that is not positive: reported on `key`,
  // which the user wrote, with the arithmetic that produced it.
  auto derived_bad = [&](const char* key, const char* what, int64_t v, const std::string& how, const std::string& hint) {
    out.Error(key, Format("{}: {} has to be greater than 0 (derived from the values given: {} = {}; {})", what, v, how,
                          v, hint));
  };
  std::string how;      // the derivation, for messages
  const char* derived = "";
  if (tbs && mbs && gas) {
    // all given: nothing derived
  } else if (tbs && mbs) {
    gas = FloorDiv(FloorDiv(*tbs, *mbs), w);
    how = Format("(train_batch_size // train_micro_batch_size_per_gpu) // world = ({} // {}) // {}", *tbs, *mbs, w);
    derived = kGas;
    Derive(out, kGas, how);
    if (*gas <= 0) {
      derived_bad(kTbs, "Gradient accumulation steps", *gas, how,
                  Format("train_batch_size must be at least train_micro_batch_size_per_gpu × world = {}",
                         Mul3(*mbs, w, 1).value_or(INT64_MAX)));
      return;
    }
  } else if (tbs && gas) {
    mbs = FloorDiv(FloorDiv(*tbs, w), *gas);
    how = Format("(train_batch_size // world) // gradient_accumulation_steps = ({} // {}) // {}", *tbs, w, *gas);
    derived = kMbs;
    Derive(out, kMbs, how);
    if (*mbs <= 0) {
      derived_bad(kTbs, "Micro batch size per gpu", *mbs, how,
                  Format("train_batch_size must be at least gradient_accumulation_steps × world = {}",
                         Mul3(*gas, w, 1).value_or(INT64_MAX)));
      return;
    }
  } else if (mbs && gas) {
    const auto t = Mul3(*mbs, *gas, w);
    if (!t) return too_large(kMbs);
    tbs = *t;
    Derive(out, kTbs, Format("micro × accumulation × world = {} × {} × {}", *mbs, *gas, w));
  } else if (tbs) {
    gas = 1;
    mbs = FloorDiv(*tbs, w);
    Derive(out, kGas, "1 (only train_batch_size given)");
    how = Format("train_batch_size // world = {} // {}", *tbs, w);
    derived = kMbs;
    Derive(out, kMbs, how);
    if (*mbs <= 0) {
      derived_bad(kTbs, "Micro batch size per gpu", *mbs, how,
                  Format("train_batch_size must be at least the world size {}", w));
      return;
    }
  } else if (mbs) {
    gas = 1;
    const auto t = Mul3(*mbs, 1, w);
    if (!t) return too_large(kMbs);
    tbs = *t;
    Derive(out, kGas, "1 (only train_micro_batch_size_per_gpu given)");
    Derive(out, kTbs, Format("micro × world = {} × {}", *mbs, w));
  } else if (IsAuto(out, kTbs) || IsAuto(out, kMbs)) {
    const bool both = IsAuto(out, kTbs) && IsAuto(out, kMbs);
    out.Error(IsAuto(out, kMbs) ? kMbs : kTbs,
              Format("{} \"auto\" but nothing to derive {} from: zerorun resolves \"auto\" batch sizes from the "
                     "other batch keys (HF Trainer fills them from its own arguments); give "
                     "train_micro_batch_size_per_gpu or train_batch_size a number",
                     both ? "train_batch_size and train_micro_batch_size_per_gpu are both" :
                            (IsAuto(out, kMbs) ? "train_micro_batch_size_per_gpu is" : "train_batch_size is"),
                     both ? "them" : "it"));
    return;
  } else {
    out.Error(kTbs, "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
    return;
  }
  if (Mul3(*mbs, *gas, w) != tbs) {
    out.Error(kTbs,
              Format("Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
                     "gradient_acc_step * world_size {} != {} * {} * {}{}",
                     *tbs, *mbs, *gas, w, how.empty() ? "" : Format(" ({} derived as {})", derived, how)));
  }
}

// HF Trainer's rules for the ZeRO "auto" bucket sizes from the model's hidden size.
void ResolveAutoBuckets(ZeroConfig& z, int64_t hidden, Collected& out) {
  if (hidden > 3'000'000'000LL) hidden = 0;  // nonsense; refuse rather than overflow
  struct Item {
    const char* path;
    int64_t* value;
    int64_t derived;
    const char* rule;
  };
  const Item items[] = {
      {"zero_optimization.reduce_bucket_size", &z.reduce_bucket_size, hidden * hidden, "hidden_size²"},
      {"zero_optimization.prefetch_bucket_size", &z.prefetch_bucket_size,
       static_cast<int64_t>(0.9 * static_cast<double>(hidden) * static_cast<double>(hidden)), "0.9 × hidden_size²"},
      {"zero_optimization.param_persistence_threshold", &z.param_persistence_threshold, 10 * hidden,
       "10 × hidden_size"},
  };
  for (const Item& it : items) {
    if (!IsAuto(out, it.path)) continue;
    if (hidden <= 0) {
      out.Error(it.path, Format("\"auto\" needs the model's hidden size to be resolved ({}); give it "
                                "(LoadOptions::hidden_size, zerorun-config --hidden-size) or write a number",
                                it.rule));
      continue;
    }
    *it.value = it.derived;
    out.provenance[it.path] = {Kind::kAuto, Format("\"auto\" → {} with hidden_size {}", it.rule, hidden)};
  }
}

DType ModelDType(const ConfigBody& c) {
  if (c.fp16.enabled) return DType::kF16;
  if (c.bf16.enabled) return DType::kBF16;
  return DType::kF32;
}

void CheckOptimizer(ConfigBody& c, Collected& out) {
  const OptimizerConfig& o = c.optimizer;
  const ZeroConfig& z = c.zero_optimization;
  if ((o.type == OptimizerKind::kAdam || o.type == OptimizerKind::kAdamW) && o.adam.amsgrad) {
    out.Error("optimizer.params.amsgrad", "expected false (FusedAdam does not support the AMSGrad variant); found true");
  }
  if (o.type == OptimizerKind::kSgd && o.sgd.nesterov && (o.sgd.momentum <= 0 || o.sgd.dampening != 0)) {
    out.Error("optimizer.params.nesterov",
              Format("Nesterov momentum requires a momentum and zero dampening; found momentum {}, dampening {}",
                     FormatDouble(o.sgd.momentum), FormatDouble(o.sgd.dampening)));
  }
  if (o.type == OptimizerKind::kLamb && c.fp16.loss_scale != 0) {
    out.Error("fp16.loss_scale", Format("DeepSpeed lamb optimizer requires dynamic loss scaling: expected 0; found {}",
                                        FormatDouble(c.fp16.loss_scale)));
  }
  const bool zero_on = z.stage != ZeroStage::kDisabled;
  if (zero_on && (o.type == OptimizerKind::kLamb || o.type == OptimizerKind::kSgd) &&
      !c.zero_allow_untested_optimizer) {
    out.Error("optimizer.type",
              Format("You are using an untested ZeRO Optimizer ({}). Please add <\"zero_allow_untested_optimizer\": "
                     "true> in the configuration file to use it.",
                     OptimizerKindName(o.type)));
  }
  if (z.OptimizerOffload() != OffloadDevice::kNone && o.type != OptimizerKind::kNone &&
      o.type != OptimizerKind::kAdam && o.type != OptimizerKind::kAdamW && o.type != OptimizerKind::kAdagrad &&
      o.type != OptimizerKind::kLion) {
    out.Error("zero_optimization.offload_optimizer.device",
              Format("optimizer offload supports Adam, AdamW, Adagrad and Lion (the CPU optimizers); found optimizer {}",
                     OptimizerKindName(o.type)));
  }
}

void CheckScheduler(ConfigBody& c, Collected& out) {
  SchedulerConfig& s = c.scheduler;
  const std::string p = "scheduler.params.";
  switch (s.type) {
    case SchedulerKind::kWarmupDecayLR:
      if (!s.warmup_decay_lr.total_num_steps) {
        out.Error(p + "total_num_steps", "required by WarmupDecayLR; missing");
      } else if (*s.warmup_decay_lr.total_num_steps < s.warmup_decay_lr.warmup_num_steps) {
        out.Warn(p + "total_num_steps",
                 Format("total_num_steps {} is less than warmup_num_steps {}", *s.warmup_decay_lr.total_num_steps,
                        s.warmup_decay_lr.warmup_num_steps));
      }
      break;
    case SchedulerKind::kWarmupCosineLR:
      if (!s.warmup_cosine_lr.total_num_steps) out.Error(p + "total_num_steps", "required by WarmupCosineLR; missing");
      break;
    case SchedulerKind::kOneCycle:
      if (!s.one_cycle.cycle_min_lr) out.Error(p + "cycle_min_lr", "required by OneCycle; missing");
      if (!s.one_cycle.cycle_max_lr) out.Error(p + "cycle_max_lr", "required by OneCycle; missing");
      if (s.one_cycle.cycle_momentum &&
          (c.optimizer.type == OptimizerKind::kSgd || c.optimizer.type == OptimizerKind::kAdagrad)) {
        out.Warn(p + "cycle_momentum",
                 Format("optimizer {} has no betas: momentum cycling is disabled", OptimizerKindName(c.optimizer.type)));
        s.one_cycle.cycle_momentum = false;
        out.provenance[p + "cycle_momentum"] = {Kind::kDerived, "false: the optimizer has no betas"};
      }
      break;
    default: break;
  }
}

void CheckPrecision(ConfigBody& c, Collected& out) {
  const ZeroConfig& z = c.zero_optimization;
  const int stage = z.StageNumber();
  if (c.fp16.enabled && c.bf16.enabled) {
    out.Error("bf16.enabled", "bfloat16 and fp16 modes cannot be simultaneously enabled (fp16.enabled is true too)");
  }
  if (c.amp.enabled) {
    out.Error("amp.enabled", "apex AMP is not supported by zerorun; use \"fp16\" or \"bf16\" instead");
  }
  if (c.fp16.DynamicLossScale()) {
    if (c.fp16.loss_scale_window <= 0) {
      out.Error("fp16.loss_scale_window",
                Format("expected an integer > 0 with dynamic loss scaling; found {}", c.fp16.loss_scale_window));
    }
    if (c.fp16.min_loss_scale <= 0) {
      out.Error("fp16.min_loss_scale",
                Format("expected an integer > 0 with dynamic loss scaling; found {}", c.fp16.min_loss_scale));
    }
  }
  if (c.fp16.fp16_master_weights_and_grads) {
    if (stage == 0) {
      out.Error("fp16.fp16_master_weights_and_grads", "requires ZeRO stage 1, 2 or 3; found stage 0");
    } else if (stage < 3 && z.OptimizerOffload() != OffloadDevice::kCpu) {
      out.Error("fp16.fp16_master_weights_and_grads",
                "with ZeRO stage 1/2 requires zero_optimization.offload_optimizer.device \"cpu\" (CPU Adam)");
    }
  }
  if (c.bf16.bf16_optimizer_states && !c.bf16.bf16_master_weights_and_grads) {
    out.Error("bf16.bf16_optimizer_states", "requires bf16.bf16_master_weights_and_grads true");
  }
  if (c.bf16.bf16_master_weights_and_grads) {
    if (stage == 0) {
      out.Error("bf16.bf16_master_weights_and_grads", "requires ZeRO stage 1, 2 or 3; found stage 0");
    } else if (stage < 3 && !c.bf16.bf16_optimizer_states && z.OptimizerOffload() != OffloadDevice::kCpu) {
      out.Error("bf16.bf16_master_weights_and_grads",
                "with ZeRO stage 1/2 (without bf16_optimizer_states) requires offload_optimizer.device \"cpu\"");
    }
  }
  const DType model = ModelDType(c);
  if (c.data_types.param_dtype && *c.data_types.param_dtype != model) {
    out.Error("data_types.param_dtype", Format("must equal the training dtype {} (from fp16/bf16.enabled); found {}",
                                               DTypeName(model), DTypeName(*c.data_types.param_dtype)));
  }
  const DType accum = c.data_types.grad_accum_dtype.value_or(model);
  if (stage == 0 && accum != model) {
    out.Error("data_types.grad_accum_dtype",
              Format("unsupported mix of model_dtype={} and grad_accum_dtype={} without ZeRO (stage 0)",
                     DTypeName(model), DTypeName(accum)));
  }
  if (!c.communication_data_type) {
    c.communication_data_type = model;
    out.provenance["communication_data_type"] = {Kind::kDerived, Format("null → the model dtype {}", DTypeName(model))};
  }
}

void CheckOffload(ConfigBody& c, Collected& out) {
  ZeroConfig& z = c.zero_optimization;
  const int stage = z.StageNumber();
  if (z.offload_optimizer) {
    const OffloadOptimizerConfig& o = *z.offload_optimizer;
    const std::string p = "zero_optimization.offload_optimizer.";
    if (o.device == OffloadDevice::kNvme && !o.nvme_path) {
      out.Error(p + "nvme_path", "required when device is \"nvme\"; missing");
    }
    if (o.device != OffloadDevice::kNone && stage == 0) {
      out.Error(p + "device", Format("optimizer offload requires ZeRO stage 1, 2 or 3; found stage 0 (device \"{}\")",
                                     OffloadDeviceName(o.device)));
    }
    if (o.device == OffloadDevice::kNvme && stage != 3 && stage != 0) {
      // DeepSpeed refuses it; zerorun's state store swaps a stage 1/2 partition the same way as stage 3's.
      out.Warn(p + "device", Format("NVMe optimizer offload at ZeRO stage {}: DeepSpeed accepts it only at stage 3 "
                                    "(zerorun swaps a stage 1/2 partition as it does stage 3's)",
                                    stage));
    }
    if (o.device == OffloadDevice::kNvme && !o.pin_memory) {
      out.Warn(p + "pin_memory", "false has no effect with device \"nvme\": the swap buffers are always page-aligned "
                                 "and locked where RLIMIT_MEMLOCK allows (O_DIRECT and registered io_uring buffers "
                                 "need them)");
    }
    if (o.ratio < 1.0 && stage != 3) {
      out.Error(p + "ratio", Format("Partial offloading only supported for ZeRO Stage 3; found ratio {} at stage {}",
                                    FormatDouble(o.ratio), stage));
    }
    if (o.device != OffloadDevice::kNone && (stage == 1 || stage == 2) && !z.contiguous_gradients) {
      z.contiguous_gradients = true;
      out.provenance["zero_optimization.contiguous_gradients"] = {Kind::kDerived,
                                                                  "forced true by optimizer offload at stage 1/2"};
    }
  }
  if (z.offload_param) {
    const OffloadParamConfig& o = *z.offload_param;
    const std::string p = "zero_optimization.offload_param.";
    if (o.device == OffloadDevice::kNvme && !o.nvme_path) {
      out.Error(p + "nvme_path", "required when device is \"nvme\"; missing");
    }
    if (o.device != OffloadDevice::kNone && stage != 3) {
      out.Error(p + "device", Format("parameter offload requires ZeRO stage 3; found stage {} (device \"{}\")", stage,
                                     OffloadDeviceName(o.device)));
    }
    if (o.device == OffloadDevice::kNvme && !o.pin_memory) {
      out.Warn(p + "pin_memory", "false has no effect with device \"nvme\": the shard swap buffers are always "
                                 "page-aligned and locked where RLIMIT_MEMLOCK allows (O_DIRECT and registered io_uring "
                                 "buffers need them)");
    }
  }
}

void CheckZero(ConfigBody& c, Collected& out) {
  ZeroConfig& z = c.zero_optimization;
  const int stage = z.StageNumber();
  if (!z.overlap_comm) {
    z.overlap_comm = stage == 3;
    out.provenance["zero_optimization.overlap_comm"] = {
        Kind::kDerived, Format("null → {} (true only for stage 3)", stage == 3 ? "true" : "false")};
  }
  if (z.legacy_stage1) {
    out.Error("zero_optimization.legacy_stage1",
              "legacy_stage1 was removed from DeepSpeed (>= 0.5.9) and is not supported; remove it");
  }
  if ((stage == 1 || stage == 2) && z.allgather_bucket_size % 2 != 0) {
    out.Error("zero_optimization.allgather_bucket_size",
              Format("allgather_bucket_size must be a multiple of nccl_start_alignment_factor (2); found {}",
                     z.allgather_bucket_size));
  }
  if (z.allgather_sequential && stage == 3 && z.prefetch_bucket_size != 1) {
    z.prefetch_bucket_size = 1;
    out.provenance["zero_optimization.prefetch_bucket_size"] = {Kind::kDerived, "1: forced by allgather_sequential"};
  }
  if (c.gradient_allreduce_op == AllReduceOp::kSum && stage == 3) {
    out.Error("gradient_allreduce_op", "gradient_allreduce_op \"sum\" is not supported with ZeRO stage 3");
  }
  if (!c.batch.managed_gradient_accumulation && stage <= 1 && *z.overlap_comm) {
    out.Error("managed_gradient_accumulation",
              Format("false (unmanaged accumulation) is incompatible with zero_optimization.overlap_comm at stage {}",
                     stage));
  }
}

void CheckMisc(ConfigBody& c, Collected& out) {
  if (c.flops_profiler.enabled && !c.wall_clock_breakdown) {
    c.wall_clock_breakdown = true;
    out.provenance["wall_clock_breakdown"] = {Kind::kDerived, "forced true by flops_profiler.enabled"};
  }
  if (c.log_level) {
    static const std::set<std::string> kLevels = {"debug", "info", "warning", "warn", "error", "critical", "fatal"};
    std::string l = *c.log_level;
    for (char& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (!kLevels.count(l)) {
      out.Error("log_level",
                Format("expected one of \"debug\", \"info\", \"warning\", \"error\", \"critical\"; found \"{}\"",
                       *c.log_level));
    }
  }
  if (c.vocabulary_size && *c.vocabulary_size % 8 != 0) {
    out.Warn("vocabulary_size", Format("{} is not a multiple of 8 (slower matrix multiplies)", *c.vocabulary_size));
  }
  if (c.elasticity.enabled) {
    out.Error("elasticity.enabled", "elastic training is not supported by zerorun; set it false or remove the section");
  }
  if (c.activation_checkpointing.contiguous_memory_optimization && !c.activation_checkpointing.number_checkpoints) {
    out.Error("activation_checkpointing.number_checkpoints",
              "required when contiguous_memory_optimization is true; missing");
  }
  if (c.checkpoint.writer) {
    const std::string& t = c.checkpoint.writer->type;
    if (t != "mock" && t != "python" && t != "fast" && t != "MOCK" && t != "PYTHON" && t != "FAST") {
      out.Error("checkpoint.writer.type", Format("expected one of \"mock\", \"python\", \"fast\"; found \"{}\"", t));
    }
  }
}

// The aio section: DeepSpeed's documented thread_count read as intra_op_parallelism (with a note that
// DeepSpeed's code ignores it), GPUDirect refused, the O_DIRECT block size, and a warning when the
// section sets something but nothing uses it.
void CheckAio(ConfigBody& c, Collected& out) {
  auto prov = out.provenance.find("aio.intra_op_parallelism");
  if (prov != out.provenance.end() && prov->second.kind == Kind::kAlias && prov->second.detail == "thread_count") {
    out.Warn("aio.thread_count",
             Format("read as aio.intra_op_parallelism = {}, as DeepSpeed's documentation describes it; DeepSpeed's own "
                    "code ignores thread_count (it reads only intra_op_parallelism), so under DeepSpeed this file "
                    "would run with 1 worker",
                    c.aio.intra_op_parallelism));
  }
  if (c.aio.use_gds) {
    out.Error("aio.use_gds", "GPUDirect Storage is not supported by zerorun (NVMe I/O goes through pinned host "
                             "buffers); set it false or remove it");
  }
  if (c.aio.block_size % 4096 != 0 || c.aio.block_size > (int64_t{1} << 30)) {
    out.Error("aio.block_size",
              Format("must be a multiple of 4096 (the O_DIRECT alignment of swap-file requests) and at most 1 GiB "
                     "(one request); found {}",
                     c.aio.block_size));
  }
  const ZeroConfig& z = c.zero_optimization;
  if (!(c.aio == AioConfig{}) && z.OptimizerOffload() != OffloadDevice::kNvme && z.ParamOffload() != OffloadDevice::kNvme) {
    out.Warn("aio", "used only by NVMe offload (offload_optimizer or offload_param with device \"nvme\") and by "
                    "zerorun-bench io; this config offloads nothing to NVMe, so the section has no effect");
  }
}

// lr_scaling: multiplies every absolute lr of the config by (B / B0) or sqrt(B / B0).
void ApplyLrScaling(ConfigBody& c, Collected& out) {
  LrScalingConfig& l = c.lr_scaling;
  l.factor = 1.0;
  if (l.rule == LrScalingRule::kNone) return;
  const double ratio = static_cast<double>(c.batch.train_batch_size.value_or(l.reference_batch_size)) /
                       static_cast<double>(l.reference_batch_size);
  l.factor = l.rule == LrScalingRule::kLinear ? ratio : std::sqrt(ratio);
  const std::string how = Format("× {} ({} rule: train_batch_size {} / reference_batch_size {})", FormatDouble(l.factor),
                                 l.rule == LrScalingRule::kLinear ? "linear" : "sqrt",
                                 c.batch.train_batch_size.value_or(0), l.reference_batch_size);
  auto scale = [&](const std::string& path, double& lr) {
    out.provenance[path] = {Kind::kDerived, Format("{} {}", FormatDouble(lr), how)};
    lr *= l.factor;
  };
  const std::string o = "optimizer.params.", s = "scheduler.params.";
  switch (c.optimizer.type) {
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: scale(o + "lr", c.optimizer.adam.lr); break;
    case OptimizerKind::kLamb: scale(o + "lr", c.optimizer.lamb.lr); break;
    case OptimizerKind::kLion: scale(o + "lr", c.optimizer.lion.lr); break;
    case OptimizerKind::kSgd: scale(o + "lr", c.optimizer.sgd.lr); break;
    case OptimizerKind::kAdagrad: scale(o + "lr", c.optimizer.adagrad.lr); break;
    case OptimizerKind::kNone: break;
  }
  SchedulerConfig& sc = c.scheduler;
  switch (sc.type) {
    case SchedulerKind::kWarmupLR:
      scale(s + "warmup_min_lr", sc.warmup_lr.warmup_min_lr);
      if (sc.warmup_lr.warmup_max_lr) scale(s + "warmup_max_lr", *sc.warmup_lr.warmup_max_lr);
      break;
    case SchedulerKind::kWarmupDecayLR:
      scale(s + "warmup_min_lr", sc.warmup_decay_lr.warmup_min_lr);
      scale(s + "warmup_max_lr", sc.warmup_decay_lr.warmup_max_lr);
      break;
    case SchedulerKind::kOneCycle:
      if (sc.one_cycle.cycle_min_lr) scale(s + "cycle_min_lr", *sc.one_cycle.cycle_min_lr);
      if (sc.one_cycle.cycle_max_lr) scale(s + "cycle_max_lr", *sc.one_cycle.cycle_max_lr);
      break;
    case SchedulerKind::kLRRangeTest: scale(s + "lr_range_test_min_lr", sc.lr_range_test.lr_range_test_min_lr); break;
    case SchedulerKind::kWarmupCosineLR:  // ratios of the optimizer's lr, which is scaled
    case SchedulerKind::kNone: break;
  }
}

}  // namespace

void ResolveAndValidate(ConfigBody& c, int world_size, int64_t hidden_size, Collected& out) {
  ResolveBatch(c.batch, world_size, out);
  ApplyLrScaling(c, out);
  ResolveAutoBuckets(c.zero_optimization, hidden_size, out);
  CheckZero(c, out);
  CheckOffload(c, out);
  CheckPrecision(c, out);
  CheckOptimizer(c, out);
  CheckScheduler(c, out);
  CheckMisc(c, out);
  CheckAio(c, out);
}

}  // namespace zerorun::runtime::config_detail

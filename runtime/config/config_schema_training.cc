// Field lists of the top level: batch keys, optimizer, scheduler, precision (fp16/bf16/amp/data_types)
// and the gradient/communication scalars, with DeepSpeed's key names, code defaults (held by the struct
// initialisers) and ranges. Reference: deepspeed.md §1.1-§1.7, §1.17.
#include "zerorun/runtime/config/config_visitor.h"

namespace zerorun::runtime::config_detail {
namespace {

const EnumSpec& OptimizerEnum() {
  static const EnumSpec spec{
      {{"Adam", int(OptimizerKind::kAdam)},
       {"AdamW", int(OptimizerKind::kAdamW)},
       {"Lamb", int(OptimizerKind::kLamb)},
       {"Lion", int(OptimizerKind::kLion)},
       {"SGD", int(OptimizerKind::kSgd)},
       {"Adagrad", int(OptimizerKind::kAdagrad)}},
      true,
      {"OneBitAdam", "ZeroOneAdam", "OneBitLamb", "MuAdam", "MuAdamW", "MuSGD", "Muon", "RMSprop", "Adamax",
       "Adadelta", "NAdam", "RAdam", "ASGD", "Rprop", "SparseAdam", "LBFGS"}};
  return spec;
}
const EnumSpec& SchedulerEnum() {
  static const EnumSpec spec{{{"WarmupLR", int(SchedulerKind::kWarmupLR)},
                              {"WarmupDecayLR", int(SchedulerKind::kWarmupDecayLR)},
                              {"WarmupCosineLR", int(SchedulerKind::kWarmupCosineLR)},
                              {"OneCycle", int(SchedulerKind::kOneCycle)},
                              {"LRRangeTest", int(SchedulerKind::kLRRangeTest)}},
                             false,
                             {"StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LambdaLR",
                              "LinearLR", "ConstantLR", "ReduceLROnPlateau", "CyclicLR", "OneCycleLR",
                              "CosineAnnealingWarmRestarts", "PolynomialLR", "SequentialLR", "ChainedScheduler"}};
  return spec;
}
const EnumSpec& AllReduceOpEnum() {
  static const EnumSpec spec{{{"mean", int(AllReduceOp::kMean)}, {"sum", int(AllReduceOp::kSum)}}, true, {}};
  return spec;
}
const EnumSpec& CommDTypeEnum() {  // communication_data_type: only fp16/bf16/fp32, case-insensitive
  static const EnumSpec spec{
      {{"fp16", int(DType::kF16)}, {"bf16", int(DType::kBF16)}, {"fp32", int(DType::kF32)}}, true, {}};
  return spec;
}

const char* kMaxGradNorm =
    "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the deepspeed "
    "parameter 'gradient_clipping'";

void VisitBetas(ConfigVisitor& v, std::vector<double>& betas) {
  v.FloatList({.key = "betas", .doc = "coefficients of the running averages (beta1, beta2)", .min = 0, .max = 1},
              betas, 2);
}

void VisitAdam(ConfigVisitor& v, AdamParams& p) {
  v.Float({.key = "lr", .doc = "learning rate", .min = 0}, p.lr);
  VisitBetas(v, p.betas);
  v.Float({.key = "eps", .doc = "added to the denominator", .min = 0}, p.eps);
  v.Float({.key = "weight_decay", .doc = "weight decay (decoupled in AdamW mode)", .min = 0}, p.weight_decay);
  v.Bool({.key = "bias_correction", .doc = "bias-correct the moment estimates"}, p.bias_correction);
  v.Bool({.key = "adam_w_mode", .doc = "decoupled weight decay; \"Adam\" is AdamW unless false"}, p.adam_w_mode);
  v.Bool({.key = "torch_adam", .doc = "DeepSpeed: use torch's Adam; same update rule here"}, p.torch_adam);
  v.Bool({.key = "amsgrad", .doc = "AMSGrad variant; true is refused (FusedAdam raises)"}, p.amsgrad);
  v.Bool({.key = "fp32_optimizer_states", .doc = "CPU Adam: keep moments in fp32"}, p.fp32_optimizer_states);
  v.Refused({.key = "max_grad_norm", .doc = "refused: use gradient_clipping"}, kMaxGradNorm);
}
void VisitLamb(ConfigVisitor& v, LambParams& p) {
  v.Float({.key = "lr", .doc = "learning rate", .min = 0}, p.lr);
  VisitBetas(v, p.betas);
  v.Float({.key = "eps", .doc = "added to the denominator", .min = 0}, p.eps);
  v.Float({.key = "weight_decay", .doc = "weight decay", .min = 0}, p.weight_decay);
  v.Bool({.key = "bias_correction", .doc = "bias-correct the moment estimates"}, p.bias_correction);
  v.Bool({.key = "eps_inside_sqrt", .doc = "add eps inside the square root"}, p.eps_inside_sqrt);
  v.Float({.key = "max_coeff", .doc = "upper clamp of the trust ratio", .min = 0}, p.max_coeff);
  v.Float({.key = "min_coeff", .doc = "lower clamp of the trust ratio", .min = 0}, p.min_coeff);
  v.Refused({.key = "max_grad_norm", .doc = "refused: use gradient_clipping"}, kMaxGradNorm);
}
void VisitLion(ConfigVisitor& v, LionParams& p) {
  v.Float({.key = "lr", .doc = "learning rate", .min = 0}, p.lr);
  VisitBetas(v, p.betas);
  v.Float({.key = "weight_decay", .doc = "decoupled weight decay", .min = 0}, p.weight_decay);
  v.Refused({.key = "max_grad_norm", .doc = "refused: use gradient_clipping"}, kMaxGradNorm);
}
void VisitSgd(ConfigVisitor& v, SgdParams& p) {
  v.Float({.key = "lr", .doc = "learning rate", .min = 0}, p.lr);
  v.Float({.key = "momentum", .doc = "momentum factor", .min = 0}, p.momentum);
  v.Float({.key = "dampening", .doc = "dampening of the momentum", .min = 0}, p.dampening);
  v.Float({.key = "weight_decay", .doc = "L2 penalty added to the gradient", .min = 0}, p.weight_decay);
  v.Bool({.key = "nesterov", .doc = "Nesterov momentum (needs momentum > 0, dampening 0)"}, p.nesterov);
  v.Refused({.key = "max_grad_norm", .doc = "refused: use gradient_clipping"}, kMaxGradNorm);
}
void VisitAdagrad(ConfigVisitor& v, AdagradParams& p) {
  v.Float({.key = "lr", .doc = "learning rate", .min = 0}, p.lr);
  v.Float({.key = "lr_decay", .doc = "learning-rate decay", .min = 0}, p.lr_decay);
  v.Float({.key = "weight_decay", .doc = "L2 penalty added to the gradient", .min = 0}, p.weight_decay);
  v.Float({.key = "initial_accumulator_value", .doc = "initial sum of squares", .min = 0},
          p.initial_accumulator_value);
  v.Float({.key = "eps", .doc = "added to the denominator", .min = 0}, p.eps);
  v.Refused({.key = "max_grad_norm", .doc = "refused: use gradient_clipping"}, kMaxGradNorm);
}

void VisitOptimizer(ConfigVisitor& v, OptimizerConfig& o) {
  std::optional<OptimizerKind> type;
  if (o.type != OptimizerKind::kNone) type = o.type;
  VisitOptEnum(v, {.key = "type", .doc = "optimizer; null: none from the config (client optimizer)"}, type,
               OptimizerEnum());
  o.type = type.value_or(OptimizerKind::kNone);
  const Field params{.key = "params", .doc = "constructor arguments of the optimizer"};
  auto visit_params = [&](OptimizerKind t) {
    switch (t) {
      case OptimizerKind::kAdam:
      case OptimizerKind::kAdamW: VisitSection(v, params, o.adam, VisitAdam); break;
      case OptimizerKind::kLamb: VisitSection(v, params, o.lamb, VisitLamb); break;
      case OptimizerKind::kLion: VisitSection(v, params, o.lion, VisitLion); break;
      case OptimizerKind::kSgd: VisitSection(v, params, o.sgd, VisitSgd); break;
      case OptimizerKind::kAdagrad: VisitSection(v, params, o.adagrad, VisitAdagrad); break;
      case OptimizerKind::kNone:
        if (v.Present("params") && !v.Present("type")) v.Error("params", "given without optimizer.type");
        v.Skip("params");  // with an invalid type the type's error says it all
        break;
    }
  };
  if (v.Describing()) {
    const std::pair<const char*, OptimizerKind> variants[] = {{"Adam,AdamW", OptimizerKind::kAdam},
                                                              {"Lamb", OptimizerKind::kLamb},
                                                              {"Lion", OptimizerKind::kLion},
                                                              {"SGD", OptimizerKind::kSgd},
                                                              {"Adagrad", OptimizerKind::kAdagrad}};
    for (const auto& [name, t] : variants) {
      v.SetVariant(name);
      visit_params(t);
    }
    v.SetVariant("");
  } else {
    visit_params(o.type);
  }
  v.Bool({.key = "legacy_fusion", .doc = "fp16 FusedAdam wrapper detail; no effect"}, o.legacy_fusion);
}

void VisitWarmup(ConfigVisitor& v, int64_t& steps, WarmupType& type) {
  v.Int({.key = "warmup_num_steps", .doc = "warm-up steps (the schedule uses max(2, N))", .min = 0,
         .min_exclusive = true},
        steps);
  VisitEnum(v, {.key = "warmup_type", .doc = "warm-up curve"}, type, WarmupTypeEnum());
}
void VisitLastIter(ConfigVisitor& v, int64_t& it) {
  v.Int({.key = "last_batch_iteration", .doc = "iteration to resume from (-1: start)", .min = -1}, it);
}
void VisitWarmupLR(ConfigVisitor& v, WarmupLRParams& p) {
  v.Float({.key = "warmup_min_lr", .doc = "lr at the start of warm-up", .min = 0}, p.warmup_min_lr);
  v.OptFloat({.key = "warmup_max_lr", .doc = "lr at the end of warm-up; null: the optimizer's lr", .min = 0},
             p.warmup_max_lr);
  VisitWarmup(v, p.warmup_num_steps, p.warmup_type);
  VisitLastIter(v, p.last_batch_iteration);
}
void VisitWarmupDecayLR(ConfigVisitor& v, WarmupDecayLRParams& p) {
  v.OptInt({.key = "total_num_steps", .doc = "required: step at which the lr reaches warmup_min_lr", .min = 0,
            .min_exclusive = true},
           p.total_num_steps);
  v.Float({.key = "warmup_min_lr", .doc = "lr at the start of warm-up and end of decay", .min = 0}, p.warmup_min_lr);
  v.Float({.key = "warmup_max_lr", .doc = "peak lr", .min = 0}, p.warmup_max_lr);
  VisitWarmup(v, p.warmup_num_steps, p.warmup_type);
  VisitLastIter(v, p.last_batch_iteration);
}
void VisitWarmupCosineLR(ConfigVisitor& v, WarmupCosineLRParams& p) {
  v.OptInt({.key = "total_num_steps", .doc = "required: length of warm-up plus cosine decay", .min = 0,
            .min_exclusive = true},
           p.total_num_steps);
  v.Float({.key = "warmup_min_ratio", .doc = "lr ratio at the start of warm-up", .min = 0, .max = 1},
          p.warmup_min_ratio);
  VisitWarmup(v, p.warmup_num_steps, p.warmup_type);
  v.Float({.key = "cos_min_ratio", .doc = "lr ratio floor of the cosine decay", .min = 0, .max = 1},
          p.cos_min_ratio);
  VisitLastIter(v, p.last_batch_iteration);
}
void VisitOneCycle(ConfigVisitor& v, OneCycleParams& p) {
  v.OptFloat({.key = "cycle_min_lr", .doc = "required: lr at the cycle ends", .min = 0}, p.cycle_min_lr);
  v.OptFloat({.key = "cycle_max_lr", .doc = "required: lr at the cycle peak", .min = 0}, p.cycle_max_lr);
  v.Float({.key = "decay_lr_rate", .doc = "lr decay rate after the cycle", .min = 0}, p.decay_lr_rate);
  v.Int({.key = "cycle_first_step_size", .doc = "steps of the rising half", .min = 0, .min_exclusive = true},
        p.cycle_first_step_size);
  v.OptInt({.key = "cycle_second_step_size", .doc = "steps of the falling half; null: first", .min = 0},
           p.cycle_second_step_size);
  v.Int({.key = "cycle_first_stair_count", .doc = "stairs in the rising half (0: continuous)", .min = 0},
        p.cycle_first_stair_count);
  v.OptInt({.key = "cycle_second_stair_count", .doc = "stairs in the falling half; null: first", .min = 0},
           p.cycle_second_stair_count);
  v.Int({.key = "decay_step_size", .doc = "steps per decay interval (0: no decay)", .min = 0}, p.decay_step_size);
  v.Bool({.key = "cycle_momentum", .doc = "cycle beta1 inversely to the lr (forces beta2 0.99)"}, p.cycle_momentum);
  v.Float({.key = "cycle_min_mom", .doc = "momentum at the cycle peak", .min = 0, .max = 1}, p.cycle_min_mom);
  v.Float({.key = "cycle_max_mom", .doc = "momentum at the cycle ends", .min = 0, .max = 1}, p.cycle_max_mom);
  v.Float({.key = "decay_mom_rate", .doc = "momentum decay rate after the cycle", .min = 0}, p.decay_mom_rate);
  VisitLastIter(v, p.last_batch_iteration);
}
void VisitLRRangeTest(ConfigVisitor& v, LRRangeTestParams& p) {
  v.Float({.key = "lr_range_test_min_lr", .doc = "starting lr", .min = 0}, p.lr_range_test_min_lr);
  v.Int({.key = "lr_range_test_step_size", .doc = "steps per interval", .min = 0, .min_exclusive = true},
        p.lr_range_test_step_size);
  v.Float({.key = "lr_range_test_step_rate", .doc = "lr increase per interval", .min = 0}, p.lr_range_test_step_rate);
  v.Bool({.key = "lr_range_test_staircase", .doc = "hold the lr within an interval"}, p.lr_range_test_staircase);
  VisitLastIter(v, p.last_batch_iteration);
}

void VisitScheduler(ConfigVisitor& v, SchedulerConfig& s) {
  std::optional<SchedulerKind> type;
  if (s.type != SchedulerKind::kNone) type = s.type;
  VisitOptEnum(v, {.key = "type", .doc = "LR schedule (case-sensitive); null: none"}, type, SchedulerEnum());
  s.type = type.value_or(SchedulerKind::kNone);
  const Field params{.key = "params", .doc = "arguments of the schedule"};
  auto visit_params = [&](SchedulerKind t) {
    switch (t) {
      case SchedulerKind::kWarmupLR: VisitSection(v, params, s.warmup_lr, VisitWarmupLR); break;
      case SchedulerKind::kWarmupDecayLR: VisitSection(v, params, s.warmup_decay_lr, VisitWarmupDecayLR); break;
      case SchedulerKind::kWarmupCosineLR: VisitSection(v, params, s.warmup_cosine_lr, VisitWarmupCosineLR); break;
      case SchedulerKind::kOneCycle: VisitSection(v, params, s.one_cycle, VisitOneCycle); break;
      case SchedulerKind::kLRRangeTest: VisitSection(v, params, s.lr_range_test, VisitLRRangeTest); break;
      case SchedulerKind::kNone:
        if (v.Present("params") && !v.Present("type")) v.Error("params", "given without scheduler.type");
        v.Skip("params");  // with an invalid type the type's error says it all
        break;
    }
  };
  if (v.Describing()) {
    for (const auto& [name, t] : SchedulerEnum().names) {
      v.SetVariant(name);
      visit_params(static_cast<SchedulerKind>(t));
    }
    v.SetVariant("");
  } else {
    visit_params(s.type);
  }
}

void VisitFp16(ConfigVisitor& v, Fp16Config& f) {
  v.Bool({.key = "enabled", .doc = "train in fp16 with loss scaling"}, f.enabled);
  v.Bool({.key = "auto_cast", .doc = "cast floating-point forward inputs to fp16"}, f.auto_cast);
  v.Float({.key = "loss_scale", .doc = "0: dynamic scaling; > 0: static scale", .min = 0, .string_number = true},
          f.loss_scale);
  v.Int({.key = "initial_scale_power", .doc = "dynamic: initial scale is 2^power", .min = 0, .max = 126},
        f.initial_scale_power);
  v.Int({.key = "loss_scale_window", .doc = "clean steps between scale doublings (> 0 when dynamic)"},
        f.loss_scale_window);
  v.Int({.key = "hysteresis", .doc = "overflows tolerated before the scale is halved", .min = 0}, f.hysteresis);
  v.Bool({.key = "consecutive_hysteresis", .doc = "refill hysteresis on every clean step"}, f.consecutive_hysteresis);
  v.Int({.key = "min_loss_scale", .doc = "lowest dynamic scale (> 0 when dynamic)"}, f.min_loss_scale);
  v.Bool({.key = "fp16_master_weights_and_grads", .doc = "keep master weights and grads in fp16 (ZeRO only)"},
         f.fp16_master_weights_and_grads);
}
void VisitBf16(ConfigVisitor& v, Bf16Config& b) {
  v.Bool({.key = "enabled", .doc = "train in bf16 (no loss scaling)"}, b.enabled);
  v.Bool({.key = "immediate_grad_update", .doc = "BF16_Optimizer: apply grads as they arrive"},
         b.immediate_grad_update);
  v.Bool({.key = "check_grad_overflow", .doc = "ZeRO-1/2: skip steps whose gradients are not finite"},
         b.check_grad_overflow);
  v.Bool({.key = "bf16_master_weights_and_grads", .doc = "keep master weights and grads in bf16 (ZeRO only)"},
         b.bf16_master_weights_and_grads);
  v.Bool({.key = "bf16_optimizer_states", .doc = "keep optimizer states in bf16 (needs bf16 master weights)"},
         b.bf16_optimizer_states);
}
void VisitDataTypes(ConfigVisitor& v, DataTypesConfig& d) {
  VisitOptEnum(v, {.key = "grad_accum_dtype", .doc = "gradient accumulation dtype; null: the model dtype"},
               d.grad_accum_dtype, DTypeEnum());
  VisitOptEnum(v, {.key = "param_dtype", .doc = "if set, must equal the fp16/bf16/fp32 mode"}, d.param_dtype,
               DTypeEnum());
  VisitOptEnum(v, {.key = "buffer_dtype", .doc = "dtype of module buffers; null: unchanged"}, d.buffer_dtype,
               DTypeEnum());
}

}  // namespace

void VisitTraining(ConfigVisitor& v, ConfigBody& c) {
  BatchConfig& b = c.batch;
  v.OptInt({.key = "train_batch_size", .doc = "global samples per optimizer step (micro × accumulation × world)",
            .auto_ok = true, .default_text = "derived"},
           b.train_batch_size);
  v.OptInt({.key = "train_micro_batch_size_per_gpu", .doc = "samples per rank per micro-step", .auto_ok = true,
            .default_text = "derived"},
           b.train_micro_batch_size_per_gpu);
  v.OptInt({.key = "gradient_accumulation_steps", .doc = "micro-steps per optimizer step", .auto_ok = true,
            .default_text = "derived"},
           b.gradient_accumulation_steps);
  v.Bool({.key = "managed_gradient_accumulation", .doc = "false: every step() is an accumulation boundary"},
         b.managed_gradient_accumulation);
  v.Bool({.key = "dataloader_drop_last", .doc = "drop the last incomplete batch"}, b.dataloader_drop_last);

  VisitSection(v, {.key = "optimizer", .doc = "optimizer built from the config"}, c.optimizer, VisitOptimizer);
  VisitSection(v, {.key = "scheduler", .doc = "learning-rate schedule"}, c.scheduler, VisitScheduler);
  VisitSection(v, {.key = "fp16", .doc = "fp16 mixed precision", .lenient = true}, c.fp16, VisitFp16);
  VisitSection(v, {.key = "bf16", .doc = "bf16 mixed precision", .alias = "bfloat16", .lenient = true}, c.bf16,
               VisitBf16);
  VisitSection(v, {.key = "amp", .doc = "apex AMP: refused when enabled"}, c.amp, [](ConfigVisitor& v, AmpConfig& a) {
    v.Bool({.key = "enabled", .doc = "apex AMP (not supported by zerorun: use fp16 or bf16)"}, a.enabled);
    v.AcceptRest("other keys are forwarded to apex.amp.initialize by DeepSpeed");
  });
  VisitSection(v, {.key = "torch_autocast", .doc = "torch autocast", .lenient = true}, c.switches,
               [](ConfigVisitor& v, FeatureSwitches& s) {
                 v.Bool({.key = "enabled", .doc = "16-bit compute of an fp32 model"}, s.torch_autocast);
                 v.AcceptRest("dtype and lower_precision_safe_modules follow enabled");
               });
  VisitSection(v, {.key = "data_types", .doc = "dtypes of gradient accumulation, params and buffers"}, c.data_types,
               VisitDataTypes);

  v.Float({.key = "gradient_clipping", .doc = "clip the global gradient norm to this (0: off)", .min = 0},
          c.gradient_clipping);
  v.Bool({.key = "prescale_gradients", .doc = "divide gradients before the all-reduce"}, c.prescale_gradients);
  v.Float({.key = "gradient_predivide_factor", .doc = "pre-divide gradients by this before reducing", .min = 0,
           .min_exclusive = true},
          c.gradient_predivide_factor);
  VisitEnum(v, {.key = "gradient_allreduce_op", .doc = "gradient reduction: mean or sum"}, c.gradient_allreduce_op,
            AllReduceOpEnum());
  VisitOptEnum(v, {.key = "communication_data_type", .doc = "dtype gradients are reduced in; null: model dtype"},
               c.communication_data_type, CommDTypeEnum());
  int seq = static_cast<int>(c.seq_parallel_communication_data_type);
  v.Enum({.key = "seq_parallel_communication_data_type", .doc = "Ulysses sequence parallel only"},
         seq, CommDTypeEnum());
  c.seq_parallel_communication_data_type = static_cast<DType>(seq);
  v.Bool({.key = "sparse_gradients", .doc = "send embedding gradients sparse"},
         c.sparse_gradients);
  v.Bool({.key = "disable_allgather", .doc = "legacy; unused by ZeRO"}, c.disable_allgather);
  v.Bool({.key = "zero_allow_untested_optimizer", .doc = "allow client optimizers ZeRO was not tested with"},
         c.zero_allow_untested_optimizer);
  v.Bool({.key = "zero_force_ds_cpu_optimizer", .doc = "offload requires the CPU Adam/Lion optimizer"},
         c.zero_force_ds_cpu_optimizer);
  v.OptInt({.key = "steps_per_print", .doc = "progress line every N steps; null: never", .min = 0,
            .min_exclusive = true},
           c.steps_per_print);
  v.Bool({.key = "wall_clock_breakdown", .doc = "time forward/backward/step phases"}, c.wall_clock_breakdown);
  v.Bool({.key = "memory_breakdown", .doc = "log memory use"}, c.memory_breakdown);
  v.Bool({.key = "dump_state", .doc = "print the engine state at init (rank 0)"}, c.dump_state);
  v.OptInt({.key = "vocabulary_size", .doc = "warning if not a multiple of 8", .min = 0}, c.vocabulary_size);
  v.Bool({.key = "graph_harvesting", .doc = "CUDA graph harvesting"},
         c.graph_harvesting);
  v.OptString({.key = "log_level", .doc = "log level of the training processes"}, c.log_level);
  v.Bool({.key = "use_data_before_expert_parallelism", .doc = "MoE data ordering"},
         c.use_data_before_expert_parallelism);
  VisitSection(v, {.key = "timers", .doc = "timer switches"}, c, [](ConfigVisitor& v, ConfigBody& c) {
    VisitSection(v, {.key = "throughput", .doc = "throughput timer", .lenient = true}, c, [](ConfigVisitor& v,
                                                                                              ConfigBody& c) {
      v.Bool({.key = "enabled", .doc = "measure samples/s"}, c.timers_throughput_enabled);
      v.Bool({.key = "synchronized", .doc = "synchronise the device around timing"}, c.timers_throughput_synchronized);
    });
  });
}

void VisitConfig(ConfigVisitor& v, ConfigBody& c) {
  VisitTraining(v, c);
  // zero_optimization: the legacy boolean form means stage 1 (true) / 0 (false), with the bucket size
  // from the top-level allgather_size.
  std::optional<int64_t> allgather_size;
  v.OptInt({.key = "allgather_size", .doc = "legacy: allgather bucket size with boolean zero_optimization",
            .min = 0, .status = FieldStatus::kDeprecated},
           allgather_size);
  const std::optional<bool> legacy = v.PeekBool("zero_optimization");
  if (legacy) {
    (void)v.DeprecatedBool({.key = "zero_optimization"}, "zero_optimization.stage");
  } else if (allgather_size) {
    v.Warn("allgather_size", "only used with the boolean form of zero_optimization; ignored");
  }
  // (the reader treats a translated boolean section as absent: every field keeps its default)
  VisitSection(v, {.key = "zero_optimization", .doc = "ZeRO stage and its options", .lenient = true},
               c.zero_optimization, VisitZero);
  if (legacy) {
    c.zero_optimization.stage = *legacy ? ZeroStage::kOptimizerStates : ZeroStage::kDisabled;
    v.SetProvenance("zero_optimization.stage", {Provenance::Kind::kDeprecated, "zero_optimization: bool"});
    if (allgather_size) {
      c.zero_optimization.allgather_bucket_size = *allgather_size;
      v.SetProvenance("zero_optimization.allgather_bucket_size", {Provenance::Kind::kDeprecated, "allgather_size"});
    }
  }
  VisitOtherSections(v, c);
}

}  // namespace zerorun::runtime::config_detail

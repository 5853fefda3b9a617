// The typed config as the objects the engine drives: optimizer, scheduler, loss scaler, ZeRO strategy options.
#include <algorithm>

#include "zerorun/core/error.h"
#include "zerorun/runtime/engine_internal.h"
#include "zerorun/runtime/offload_store.h"

namespace zerorun::runtime {

LossScaler MakeLossScaler(const Config& config) {
  if (!config.fp16.enabled) return LossScaler::Static(1.0);
  if (!config.fp16.DynamicLossScale()) return LossScaler::Static(config.fp16.loss_scale);
  LossScalerOptions o;
  o.dynamic = true;
  o.initial_scale_power = static_cast<int>(config.fp16.initial_scale_power);
  o.scale_window = config.fp16.loss_scale_window;
  o.hysteresis = static_cast<int>(config.fp16.hysteresis);
  o.consecutive_hysteresis = config.fp16.consecutive_hysteresis;
  o.min_scale = static_cast<double>(config.fp16.min_loss_scale);
  return LossScaler(o);
}

namespace {
void Betas(const std::vector<double>& betas, OptimizerHyper* h) {
  if (betas.size() >= 1) h->beta1 = betas[0];
  if (betas.size() >= 2) h->beta2 = betas[1];
}
}  // namespace

OptimizerHyper OptimizerHyperFromConfig(const OptimizerConfig& c, OptimizerType* type) {
  OptimizerHyper h;
  switch (c.type) {
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      *type = OptimizerType::kAdam;
      h.lr = c.adam.lr;
      Betas(c.adam.betas, &h);
      h.eps = c.adam.eps;
      h.weight_decay = c.adam.weight_decay;
      h.bias_correction = c.adam.bias_correction;
      h.adam_w_mode = c.AdamWMode();
      return h;
    case OptimizerKind::kLamb:
      *type = OptimizerType::kLamb;
      h.lr = c.lamb.lr;
      Betas(c.lamb.betas, &h);
      h.eps = c.lamb.eps;
      h.weight_decay = c.lamb.weight_decay;
      h.bias_correction = c.lamb.bias_correction;
      h.eps_inside_sqrt = c.lamb.eps_inside_sqrt;
      h.max_coeff = c.lamb.max_coeff;
      h.min_coeff = c.lamb.min_coeff;
      return h;
    case OptimizerKind::kLion:
      *type = OptimizerType::kLion;
      h.lr = c.lion.lr;
      Betas(c.lion.betas, &h);
      h.weight_decay = c.lion.weight_decay;
      return h;
    case OptimizerKind::kSgd:
      *type = OptimizerType::kSgd;
      h.lr = c.sgd.lr;
      h.momentum = c.sgd.momentum;
      h.dampening = c.sgd.dampening;
      h.weight_decay = c.sgd.weight_decay;
      h.nesterov = c.sgd.nesterov;
      return h;
    case OptimizerKind::kAdagrad:
      *type = OptimizerType::kAdagrad;
      h.lr = c.adagrad.lr;
      h.lr_decay = c.adagrad.lr_decay;
      h.weight_decay = c.adagrad.weight_decay;
      h.initial_accumulator_value = c.adagrad.initial_accumulator_value;
      h.eps = c.adagrad.eps;
      return h;
    case OptimizerKind::kNone:
      break;
  }
  ZR_THROW(ConfigError, "optimizer: the config has no optimizer section; training needs one "
           "(e.g. \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4}})");
}

namespace {
const char* WarmupTypeText(WarmupType t) { return t == WarmupType::kLinear ? "linear" : "log"; }
}  // namespace

std::unique_ptr<LrScheduler> MakeSchedulerFromConfig(const SchedulerConfig& c, HyperTarget& target) {
  LrScheduleOptions o;
  switch (c.type) {
    case SchedulerKind::kNone:
      return nullptr;
    case SchedulerKind::kWarmupLR: {
      const auto& p = c.warmup_lr;
      o.type = "WarmupLR";
      o.warmup_min_lr = {p.warmup_min_lr};
      if (p.warmup_max_lr) o.warmup_max_lr = {*p.warmup_max_lr};
      o.warmup_num_steps = p.warmup_num_steps;
      o.warmup_type = WarmupTypeText(p.warmup_type);
      o.last_batch_iteration = p.last_batch_iteration;
      break;
    }
    case SchedulerKind::kWarmupDecayLR: {
      const auto& p = c.warmup_decay_lr;
      o.type = "WarmupDecayLR";
      o.total_num_steps = p.total_num_steps.value_or(-1);
      o.warmup_min_lr = {p.warmup_min_lr};
      o.warmup_max_lr = {p.warmup_max_lr};
      o.warmup_num_steps = p.warmup_num_steps;
      o.warmup_type = WarmupTypeText(p.warmup_type);
      o.last_batch_iteration = p.last_batch_iteration;
      break;
    }
    case SchedulerKind::kWarmupCosineLR: {
      const auto& p = c.warmup_cosine_lr;
      o.type = "WarmupCosineLR";
      o.total_num_steps = p.total_num_steps.value_or(-1);
      o.warmup_min_ratio = p.warmup_min_ratio;
      o.warmup_num_steps = p.warmup_num_steps;
      o.cos_min_ratio = p.cos_min_ratio;
      o.warmup_type = WarmupTypeText(p.warmup_type);
      o.last_batch_iteration = p.last_batch_iteration;
      break;
    }
    case SchedulerKind::kOneCycle: {
      const auto& p = c.one_cycle;
      o.type = "OneCycle";
      o.cycle_min_lr = p.cycle_min_lr.value_or(-1);
      o.cycle_max_lr = p.cycle_max_lr.value_or(-1);
      o.decay_lr_rate = p.decay_lr_rate;
      o.cycle_first_step_size = p.cycle_first_step_size;
      o.cycle_second_step_size = p.cycle_second_step_size.value_or(-1);
      o.cycle_first_stair_count = p.cycle_first_stair_count;
      o.cycle_second_stair_count = p.cycle_second_stair_count.value_or(-1);
      o.decay_step_size = p.decay_step_size;
      o.cycle_momentum = p.cycle_momentum;
      o.cycle_min_mom = p.cycle_min_mom;
      o.cycle_max_mom = p.cycle_max_mom;
      o.decay_mom_rate = p.decay_mom_rate;
      o.last_batch_iteration = p.last_batch_iteration;
      break;
    }
    case SchedulerKind::kLRRangeTest: {
      const auto& p = c.lr_range_test;
      o.type = "LRRangeTest";
      o.lr_range_test_min_lr = p.lr_range_test_min_lr;
      o.lr_range_test_step_size = p.lr_range_test_step_size;
      o.lr_range_test_step_rate = p.lr_range_test_step_rate;
      o.lr_range_test_staircase = p.lr_range_test_staircase;
      o.last_batch_iteration = p.last_batch_iteration;
      break;
    }
  }
  try {
    return MakeLrScheduler(o, target);
  } catch (const InvalidArgument& e) {
    ZR_THROW(ConfigError, "scheduler.params: {}", e.what());
  }
}

zero::StrategyOptions StrategyOptionsFromConfig(const Config& c, Device device, int rank) {
  const ZeroConfig& z = c.zero_optimization;
  zero::StrategyOptions o;
  o.stage = z.StageNumber();
  o.param_dtype = c.ModelDType();
  o.grad_dtype = c.GradAccumDType();
  o.comm_dtype = c.CommDType();
  o.device = device;
  o.average = c.gradient_allreduce_op == AllReduceOp::kMean;
  o.prescale = c.prescale_gradients;
  o.predivide = c.gradient_predivide_factor;
  // Collectives run on the communicator's own thread, so buckets travel during backward, unless the
  // config says "overlap_comm": false: then each bucket is reduced and waited for when it is ready.
  o.synchronous = c.OverlapCommDisabled();
  // reduce_bucket_size at every stage (DeepSpeed's stage 0 uses a fixed 5e8, the same as the default).
  o.reduce_bucket_numel = std::max<int64_t>(1, z.reduce_bucket_size);
  o.allgather_bucket_numel = z.allgather_bucket_size;
  o.round_robin = z.round_robin_gradients;
  o.sub_group_size = z.sub_group_size;
  o.stage3.prefetch_numel = z.prefetch_bucket_size;
  o.stage3.max_live_numel = z.max_live_parameters;
  o.stage3.persistence_threshold = z.param_persistence_threshold;
  o.stage3.max_reuse_distance = z.max_reuse_distance;
  o.stage3.sanity_checks = z.enable_sanity_checks;
  o.state_store = OptimizerStateStoreFromConfig(c, rank);  // offload_optimizer (runtime/offload_store.h)
  o.offload_optimizer = o.state_store != nullptr;
  o.shard_store = ParamShardStoreFromConfig(c, rank);  // offload_param (stage 3)
  return o;
}

}  // namespace zerorun::runtime

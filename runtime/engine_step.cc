// The accumulation-boundary step: wait for reductions, agree overflow across ranks, update the loss
// scale, global norm from partition sums of squares, one combined unscale+clip factor applied inside
// the optimizer's pass over this rank's partition, 16-bit copy, all-gather (stages 1/2), LR schedule,
// counters, progress line and monitor events.
#include <cmath>
#include <cstdio>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/kernels/ops.h"
#include "zerorun/runtime/clip.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/engine_internal.h"

namespace zerorun::runtime {

bool Engine::CheckOverflow(std::vector<std::string>* bad_params) {
  int32_t local_bad = 0;
  for (auto& g : impl_->groups) {
    if (!kernels::AllFinite(g.own_grads.data(), g.own_grads.numel(), g.own_grads.dtype())) local_bad = 1;
  }
  int32_t any_bad = local_bad;
  if (world_size() > 1) comm_->AllReduce(&any_bad, 1, DType::kI32, comm::ReduceOp::kMax).Wait();
  if (any_bad && local_bad && bad_params != nullptr) {
    // Name the first parameters (in flat order) whose gradients on this rank are not finite.
    for (size_t gi = 0; gi < impl_->groups.size() && bad_params->size() < 8; ++gi) {
      auto& g = impl_->groups[gi];
      for (const zero::ParamSlice& s : g.own_slices) {
        const char* base = static_cast<const char*>(g.own_grads.data()) +
                           static_cast<size_t>(s.flat_offset) * DTypeSize(g.own_grads.dtype());
        if (!kernels::AllFinite(base, s.numel, g.own_grads.dtype())) {
          bad_params->push_back(groups_[gi].params[static_cast<size_t>(s.param)]->name());
          if (bad_params->size() >= 8) break;
        }
      }
    }
  }
  return any_bad != 0;
}

StepResult Engine::BoundaryStep() {
  StepResult r;
  r.boundary = true;
  {
    ScopedTimer timer(timers_, "backward_allreduce");
    if (zero_stage() < 2) {
      for (auto& g : impl_->groups) g.reducer->Finish();
    }
  }
  const bool fp16 = config_.fp16.enabled;
  const bool check = fp16 || (config_.bf16.enabled && config_.bf16.check_grad_overflow);
  r.loss_scale = impl_->scaler.scale();
  r.overflow = check && CheckOverflow(&r.nonfinite_params);
  bool skip = r.overflow;
  if (fp16) skip = impl_->scaler.Update(r.overflow);  // throws LossScaleError at the minimum scale
  if (skip) {
    ++skipped_steps_;
    if (rank() == 0) {
      std::string names;
      for (const auto& n : r.nonfinite_params) names += (names.empty() ? "" : ", ") + n;
      ZR_WARN("step {}: gradients not finite{}{}; skipping the update{}", global_steps_ + 1,
              names.empty() ? "" : " (first: ", names.empty() ? "" : names + ")",
              fp16 ? Format(", loss scale {} -> {}", r.loss_scale, impl_->scaler.scale()) : std::string());
    }
  } else {
    // Global norm: every rank sums the squares of its own range; ranks own disjoint ranges except at
    // stage 0, where every rank holds (and sums) the whole gradient.
    std::vector<double> sums;
    for (auto& g : impl_->groups) sums.push_back(kernels::SumSquares(g.own_grads.data(), g.own_grads.numel(),
                                                                     g.own_grads.dtype()));
    if (zero_stage() >= 1 && world_size() > 1) {
      comm_->AllReduce(sums.data(), sums.size(), DType::kF64, comm::ReduceOp::kSum).Wait();
    }
    UnscaleClip uc = ComputeUnscaleClip(GlobalNormFromSumSquares(sums), r.loss_scale, config_.gradient_clipping);
    r.grad_norm = uc.unscaled_norm;
    last_grad_norm_ = uc.unscaled_norm;
    Optimizer& opt = *impl_->optimizer;
    opt.BeginStep();
    for (size_t gi = 0; gi < impl_->groups.size(); ++gi) {
      GroupState& g = impl_->groups[gi];
      kernels::OptimSpan span;
      span.params = g.master.data_as<float>();
      span.grads = g.own_grads.data();
      span.grad_dtype = g.own_grads.dtype();
      span.grad_scale = uc.grad_scale;
      span.n = g.own.size();
      if (model_dtype_ != DType::kF32) {
        span.param_copy = g.own_params.data();
        span.copy_dtype = model_dtype_;
      }
      opt.Step(static_cast<int>(gi), span);
    }
    if (zero_stage() == 3) {
      ScopedTimer timer(timers_, "allgather");
      impl_->coord->RefreshPersistent();  // the others are gathered by the next forward
    } else if (zero_stage() >= 1 && world_size() > 1) {
      ScopedTimer timer(timers_, "allgather");
      std::vector<comm::Work> works;
      for (auto& g : impl_->groups) {
        works.push_back(comm_->AllGather(g.own_params.data(), g.flat_params.data(),
                                         static_cast<size_t>(g.layout.partition_numel), model_dtype_));
      }
      for (auto& w : works) w.Wait();
    }
    if (impl_->scheduler) impl_->scheduler->Step();
    r.applied = true;
  }
  ZeroGrad();
  ++global_steps_;
  global_samples_ += config_.train_batch_size();
  if (impl_->monitor) {
    std::vector<MonitorEvent> events = {{"Train/Samples/lr", GetLr().empty() ? 0.0 : GetLr()[0], global_samples_}};
    if (fp16) events.push_back({"Train/Samples/loss_scale", impl_->scaler.scale(), global_samples_});
    events.push_back({"Train/Samples/train_loss", last_loss_, global_samples_});
    if (config_.wall_clock_breakdown) {
      for (const char* t : {"forward", "backward", "backward_allreduce", "step"}) {
        events.push_back({Format("Train/Samples/elapsed_time_ms_{}", t), timers_.Get(t).total_ms, global_samples_});
      }
    }
    impl_->monitor->Write(events);
    impl_->monitor->Flush();
  }
  LogProgress();
  return r;
}

void Engine::LogProgress() {
  if (!options_.log_progress || rank() != 0 || !config_.steps_per_print) return;
  int64_t every = *config_.steps_per_print;
  if (every <= 0 || global_steps_ % every != 0) return;
  std::string lrs, moms;
  for (double lr : GetLr()) lrs += (lrs.empty() ? "" : ", ") + Format("{}", lr);
  for (auto [a, b] : GetMomentum()) moms += (moms.empty() ? "" : ", ") + Format("({}, {})", a, b);
  ZR_INFO("[Rank 0] step={}, skipped={}, lr=[{}], mom=[{}]", global_steps_, skipped_steps_, lrs, moms);
  // Throughput since the previous progress line (DeepSpeed's throughput timer line).
  const double now = NowSeconds();
  if (impl_->last_print_time > 0 && now > impl_->last_print_time) {
    const double seconds = now - impl_->last_print_time;
    const double samples = static_cast<double>(global_samples_ - impl_->last_print_samples);
    char buf[160];
    std::snprintf(buf, sizeof buf, "samples/s=%.1f, tokens/s=%.0f", samples / seconds,
                  samples * static_cast<double>(impl_->tokens_per_sample) / seconds);
    ZR_INFO("[Rank 0] global_step={}, {}", global_steps_, buf);
  }
  impl_->last_print_time = now;
  impl_->last_print_samples = global_samples_;
  if (config_.wall_clock_breakdown) {
    ZR_INFO("time (ms) | {}", timers_.Format({"forward", "backward", "backward_allreduce", "step", "allgather"}));
    timers_.Reset();
  }
}

}  // namespace zerorun::runtime

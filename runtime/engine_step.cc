// The accumulation-boundary step: wait for reductions, agree overflow across ranks, update the loss
// scale, global norm from partition sums of squares, one combined unscale+clip factor applied inside
// the optimizer's pass over this rank's partition, 16-bit copy, all-gather (stages 1/2, in chunks of
// allgather_bucket_size pipelined with the optimizer), LR schedule, counters, progress line and
// monitor events.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"
#include "zerorun/kernels/ops.h"
#include "zerorun/runtime/clip.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/engine_internal.h"

namespace zerorun::runtime {

namespace {

// Stage 1/2 parameter gather in chunks (allgather_bucket_size smaller than a partition). Partitions
// are equal on every rank, so chunk [offset, offset + count) of rank r's partition lands at flat offset
// r·P + offset: the W pieces of one chunk are not contiguous in the flat buffer. Each chunk is gathered
// into a staging buffer of W·count elements (MemCategory::kBuckets) and copied into place once it has
// arrived. Two staging buffers alternate, so at most two chunks travel while the optimizer updates the
// next one; the buffers live as long as this object (one step).
class ChunkedGather {
 public:
  ChunkedGather(comm::Communicator& comm, DType dtype, int64_t bucket_numel)
      : comm_(comm), dtype_(dtype), elem_bytes_(DTypeSize(dtype)), bucket_numel_(bucket_numel) {}
  ChunkedGather(const ChunkedGather&) = delete;
  ChunkedGather& operator=(const ChunkedGather&) = delete;
  // A failed op aborts the communicator, which fails every later one at once: waiting here is bounded,
  // and no gather still writes into a staging buffer when it is freed.
  ~ChunkedGather() {
    for (Slot& s : slots_) {
      if (!s.busy) continue;
      try {
        s.work.Wait();
      } catch (...) {
      }
    }
  }

  // Submits the gather of elements [offset, offset + count) of every rank's partition of `flat`
  // (partitions of `partition_numel` elements); this rank's chunk must already hold its new values.
  // REQUIRES: 0 < count <= bucket_numel.
  void Submit(void* flat, int64_t partition_numel, int64_t offset, int64_t count) {
    ZR_CHECK(count > 0 && count <= bucket_numel_, "gather chunk of {} elements (bucket {})", count, bucket_numel_);
    Slot& s = slots_[next_];
    next_ ^= 1;
    if (s.busy) Land(s);
    if (!s.staging.defined()) {
      s.staging = Tensor::Empty({comm_.size() * bucket_numel_}, dtype_, Device::CPU(), MemCategory::kBuckets);
    }
    s.flat = static_cast<char*>(flat);
    s.partition_numel = partition_numel;
    s.offset = offset;
    s.count = count;
    const char* mine = s.flat + static_cast<size_t>(comm_.rank() * partition_numel + offset) * elem_bytes_;
    s.work = comm_.AllGather(mine, s.staging.data(), static_cast<size_t>(count), dtype_);
    s.busy = true;
  }

  // Waits for every chunk still travelling and copies it into place.
  void Finish() {
    // The older of the two first (submission order).
    for (int i = 0; i < 2; ++i) {
      Slot& s = slots_[(next_ + i) % 2];
      if (s.busy) Land(s);
    }
  }

  double wait_ms() const { return wait_ms_; }

 private:
  struct Slot {
    Tensor staging;  // (W · bucket) model dtype
    comm::Work work;
    bool busy = false;
    char* flat = nullptr;
    int64_t partition_numel = 0, offset = 0, count = 0;
  };

  void Land(Slot& s) {
    Stopwatch watch;
    s.busy = false;
    s.work.Wait();
    const size_t bytes = static_cast<size_t>(s.count) * elem_bytes_;
    const char* staging = static_cast<const char*>(s.staging.data());
    for (int r = 0; r < comm_.size(); ++r) {
      if (r == comm_.rank()) continue;  // this rank's chunk is already in place
      std::memcpy(s.flat + static_cast<size_t>(r * s.partition_numel + s.offset) * elem_bytes_,
                  staging + static_cast<size_t>(r) * bytes, bytes);
    }
    wait_ms_ += watch.ElapsedMs();
  }

  comm::Communicator& comm_;
  DType dtype_;
  size_t elem_bytes_;
  int64_t bucket_numel_;
  Slot slots_[2];
  int next_ = 0;
  double wait_ms_ = 0;
};

// `span` advanced to element `offset` of the range it covers, `count` elements long.
kernels::OptimSpan SubSpan(const kernels::OptimSpan& span, int64_t offset, int64_t count) {
  kernels::OptimSpan s = span;
  s.n = count;
  s.params = span.params + offset;
  s.grads = static_cast<const char*>(span.grads) + static_cast<size_t>(offset) * DTypeSize(span.grad_dtype);
  if (span.param_copy != nullptr) {
    s.param_copy = static_cast<char*>(span.param_copy) + static_cast<size_t>(offset) * DTypeSize(span.copy_dtype);
  }
  return s;
}

}  // namespace

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
    // Every group's step count goes up once per boundary; the StepRange calls below (one per chunk)
    // all use it, so a chunked pass is the same arithmetic as a single one, element by element.
    opt.BeginStep();
    // Stages 1/2 with W > 1 all-gather each group's updated 16-bit partition into its flat buffer. A
    // partition larger than allgather_bucket_size (0: no limit) is updated and gathered in chunks of
    // that size (even, so every chunk starts 4-byte aligned in 16 bits, as DeepSpeed's shards): chunk
    // k travels while the optimizer updates chunk k+1. A partition that fits is gathered in place, in
    // one op, after its pass. Lamb needs per-tensor norms over the whole partition before it updates
    // anything, so it always steps a group in one pass; only its gather is chunked.
    const bool gather = (zero_stage() == 1 || zero_stage() == 2) && world_size() > 1;
    const int64_t bucket = config_.zero_optimization.allgather_bucket_size;
    std::optional<ChunkedGather> chunked;
    std::vector<comm::Work> whole;
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
      const int64_t part = g.layout.partition_numel;
      if (!gather || bucket <= 0 || part <= bucket) {
        opt.Step(static_cast<int>(gi), span);
        if (gather) {
          whole.push_back(comm_->AllGather(g.own_params.data(), g.flat_params.data(), static_cast<size_t>(part),
                                           model_dtype_));
        }
        continue;
      }
      if (bucket % 2 != 0) {  // the config loader refuses it at stages 1/2; a hand-made Config may not
        ZR_THROW(ConfigError, "zero_optimization.allgather_bucket_size must be a multiple of "
                 "nccl_start_alignment_factor (2); found {}", bucket);
      }
      if (!chunked) chunked.emplace(*comm_, model_dtype_, bucket);
      const bool whole_pass = opt.type() == OptimizerType::kLamb;
      if (whole_pass) opt.Step(static_cast<int>(gi), span);
      for (int64_t off = 0; off < part; off += bucket) {
        const int64_t count = std::min(bucket, part - off);
        if (!whole_pass) opt.StepRange(static_cast<int>(gi), off, SubSpan(span, off, count));
        chunked->Submit(g.flat_params.data(), part, off, count);
      }
    }
    if (zero_stage() == 3) {
      ScopedTimer timer(timers_, "allgather");
      impl_->coord->RefreshPersistent();  // the others are gathered by the next forward
    } else if (gather) {
      // "allgather" times only the waits for (and copies of) gathers, not the optimizer they overlap.
      Stopwatch watch;
      for (auto& w : whole) w.Wait();
      double gather_ms = watch.ElapsedMs();
      if (chunked) {
        chunked->Finish();
        gather_ms += chunked->wait_ms();
        chunked.reset();  // the staging buffers go back now
      }
      timers_.Add("allgather", gather_ms);
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
  if (config_.timers_throughput_enabled && impl_->last_print_time > 0 && now > impl_->last_print_time) {
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

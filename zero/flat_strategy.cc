// The flat strategy (ZeRO stages 0-2): one flat buffer per parameter group, cut into gradient buckets
// (partition.h). Every parameter's data is a view of its group's buffer; at stages 0/1 its gradient is
// a view of the group's full gradient buffer, at stage 2 of a transient bucket buffer bound for the
// module's backward. Each bucket leaves through the gradient-bucket path (grad_buckets.h) once all of
// its parameters' gradients are final: stage 0 all-reduces it (boundary micro-step only), stage 1
// reduce-scatters it in place in the full gradient buffer (boundary only), stage 2 reduce-scatters it
// every micro-step and adds this rank's slice into the partition accumulator. On the boundary this
// rank's partition — its slice of every bucket (all of it at stage 0) — is stepped, and at stages
// 1/2 each bucket is all-gathered in place as soon as its slice is updated (while the optimizer goes
// on with the next), in allgather_bucket_size chunks through staging buffers when a slice is larger.
#include <algorithm>
#include <optional>

#include "zerorun/core/error.h"
#include "zerorun/core/timer.h"
#include "zerorun/zero/grad_buckets.h"
#include "zerorun/zero/strategy_common.h"

namespace zerorun::zero {

namespace {

// A bucket slice larger than allgather_bucket_size is gathered in chunks. Chunk [offset, offset +
// count) of rank r's slice of a bucket starting at flat offset `begin` with slices of S elements lies
// at begin + r·S + offset: the W pieces of a chunk are not contiguous, so a chunk is gathered into a
// staging buffer of W·count elements (MemCategory::kBuckets) and copied into place once it arrived.
// Two staging buffers alternate (at most two chunks in flight while the optimizer updates the next);
// they live as long as this object (one step).
class ChunkedGather {
 public:
  ChunkedGather(comm::Communicator& comm, DType dtype, Device device, int64_t chunk_numel)
      : comm_(comm), dtype_(dtype), device_(device), chunk_numel_(chunk_numel) {}
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

  // Submits the gather of elements [offset, offset + count) of every rank's slice of the bucket at
  // `begin` of `flat` (the group's parameters); this rank's chunk already holds its new values.
  // REQUIRES: 0 < count <= chunk_numel.
  void Submit(const Tensor& flat, int64_t begin, int64_t slice_numel, int64_t offset, int64_t count) {
    ZR_CHECK(count > 0 && count <= chunk_numel_, "gather chunk of {} elements (bucket {})", count, chunk_numel_);
    Slot& s = slots_[next_];
    next_ ^= 1;
    if (s.busy) Land(s);
    if (!s.staging.defined()) {
      s.staging = Tensor::Empty({comm_.size() * chunk_numel_}, dtype_, device_, MemCategory::kBuckets);
    }
    s.flat = flat;
    s.begin = begin;
    s.slice_numel = slice_numel;
    s.offset = offset;
    s.count = count;
    const Tensor mine = flat.View(begin + comm_.rank() * slice_numel + offset, {count});
    s.work = comm_.AllGather(mine.data(), s.staging.data(), static_cast<size_t>(count), dtype_);
    s.busy = true;
  }

  // Waits for every chunk still travelling and copies it into place (the older first).
  void Finish() {
    for (int i = 0; i < 2; ++i) {
      Slot& s = slots_[(next_ + i) % 2];
      if (s.busy) Land(s);
    }
  }

  // Milliseconds spent waiting for (and copying) chunks, also while the optimizer still ran.
  double wait_ms() const { return wait_ms_; }

 private:
  struct Slot {
    Tensor staging;  // (W · chunk) model dtype
    comm::Work work;
    bool busy = false;
    Tensor flat;
    int64_t begin = 0, slice_numel = 0, offset = 0, count = 0;
  };

  void Land(Slot& s) {
    Stopwatch watch;
    s.busy = false;
    s.work.Wait();
    for (int r = 0; r < comm_.size(); ++r) {
      if (r == comm_.rank()) continue;  // this rank's chunk is already in place
      s.flat.View(s.begin + r * s.slice_numel + s.offset, {s.count}).CopyFrom(s.staging.View(r * s.count, {s.count}));
    }
    wait_ms_ += watch.ElapsedMs();
  }

  comm::Communicator& comm_;
  DType dtype_;
  Device device_;
  int64_t chunk_numel_;
  Slot slots_[2];
  int next_ = 0;
  double wait_ms_ = 0;
};

class FlatStrategy final : public PartitionedStrategy {
 public:
  FlatStrategy(const StrategyOptions& options, std::vector<ParamSpec> params, ParamHost& host, UpdateRule& rule,
               comm::Communicator& comm, Timers& timers);
  ~FlatStrategy() override { queue_.Reset(); }

  void BeginForward(bool boundary) override { reducing_ = opt_.stage >= 2 || boundary; }
  void EndForward() override {}
  void PreForward(int, const std::vector<int>&) override {}
  void PostForward(int, const std::vector<int>&) override {}
  void PreBackward(int module, const std::vector<int>& ids) override;
  void PostBackward(int, const std::vector<int>&) override {}
  void GradsReady(const std::vector<int>& ids) override;
  void EndBackward() override;
  void AbortBackward() noexcept override;
  void FinishReductions() override;
  void Step(float grad_scale) override;
  void ZeroGrads() override;
  bool ShardsParameters() const override { return false; }
  Tensor AcquireFull(int id, ParamCoordinator::Purpose) override { return host_.Value(id); }
  void ReleaseFull(int) override {}
  Tensor LocalParameter(int id, Range* elements) override {
    *elements = LocalRange(id);
    return host_.Value(id);
  }
  Tensor DirectLocalParameter(int id) override { return host_.Value(id); }
  Range LocalRange(int id) const override { return {0, params_[static_cast<size_t>(id)].numel}; }
  void ParametersChanged() override {}

 private:
  struct Group {
    FlatGroupLayout layout;
    Tensor flat_params;  // (padded) model dtype: every parameter of the group is a view of it
    Tensor flat_grads;   // stages 0/1: (padded) gradient dtype, the parameters' gradients are views of it
    // Stage 2: (partition) this rank's reduced gradients; stage 1 with optimizer offload: the host copy
    // of its slices of flat_grads (PartitionGradBuffer: pinned host memory with offload).
    Tensor part_grads;
    std::unique_ptr<FlatGradBuckets> buckets;
  };
  // Stage 2 binds each parameter's gradient to its transient bucket for the backward.
  bool transient_grads() const { return opt_.stage == 2; }
  bool gathers() const { return opt_.stage >= 1 && comm_.size() > 1; }
  // Every gradient reduction is waited for in EndBackward (stage 2) rather than in the step.
  bool reduces_every_micro_step() const { return opt_.stage >= 2; }
  void FinishAll();

  std::vector<Group> groups_;
  bool reducing_ = false;
};

FlatStrategy::FlatStrategy(const StrategyOptions& options, std::vector<ParamSpec> params, ParamHost& host,
                           UpdateRule& rule, comm::Communicator& comm, Timers& timers)
    : PartitionedStrategy(options, std::move(params), host, rule, comm, timers) {
  const int world = comm_.size();
  const int rank = comm_.rank();
  const int stage = opt_.stage;
  const FlatGradBuckets::Target target = stage == 0   ? FlatGradBuckets::Target::kAllReduce
                                         : stage == 1 ? FlatGradBuckets::Target::kOwnSlice
                                                      : FlatGradBuckets::Target::kAccumulateSlice;
  const size_t psize = DTypeSize(opt_.param_dtype), gsize = DTypeSize(opt_.grad_dtype);
  std::vector<PartitionGroupSpec> specs;
  for (size_t g = 0; g < group_ids_.size(); ++g) {
    const std::vector<int>& ids = group_ids_[g];
    Group gs;
    std::vector<int64_t> numels;
    for (int id : ids) numels.push_back(params_[static_cast<size_t>(id)].numel);
    // Stage 0 all-reduces its buckets: they need no even split, only the buffer is padded (to 2W, so
    // that its partitions are DeepSpeed's). Stages 1/2 pad each bucket to W slices.
    gs.layout = LayoutFlatGroup(numels, world, 2, stage >= 1 && opt_.round_robin, opt_.reduce_bucket_numel,
                                stage == 0 ? FlatBucketing::kWhole : FlatBucketing::kSplit);
    const FlatGroupLayout& l = gs.layout;
    gs.flat_params = Tensor::Zeros({l.padded_numel}, opt_.param_dtype, opt_.device, MemCategory::kParams);
    for (size_t i = 0; i < ids.size(); ++i) {
      Tensor view = gs.flat_params.View(l.offsets[i], {l.numels[i]});
      host_.ReadInitial(ids[i], 0, view);
      host_.BindData(ids[i], view);
    }
    if (stage <= 1) {
      // Full gradients accumulate locally over micro-steps and are reduced on the boundary.
      gs.flat_grads = Tensor::Zeros({l.padded_numel}, opt_.grad_dtype, opt_.device, MemCategory::kGrads);
      for (size_t i = 0; i < ids.size(); ++i) host_.BindGrad(ids[i], gs.flat_grads.View(l.offsets[i], {l.numels[i]}));
      // Optimizer offload (stages 1-3; stage 0 refuses it): the host optimizer reads a copy that each
      // bucket's landing writes.
      if (opt_.offload_optimizer) gs.part_grads = PartitionGradBuffer(l.partition_numel);
    } else {
      gs.part_grads = PartitionGradBuffer(l.partition_numel);
    }
    gs.buckets = std::make_unique<FlatGradBuckets>(l, opt_.grad_dtype, target, queue_, gs.flat_grads, gs.part_grads);

    // This rank's partition for the optimizer: the whole buffer (stage 0) or its slice of every bucket.
    PartitionGroupSpec spec;
    char* params = static_cast<char*>(gs.flat_params.data());
    auto append = [&](int64_t offset, int64_t numel, const char* grads, char* p) {
      if (!spec.segments.empty()) {
        PartitionSegment& last = spec.segments.back();
        if (static_cast<const char*>(last.grads) + static_cast<size_t>(last.numel) * gsize == grads &&
            static_cast<char*>(last.params) + static_cast<size_t>(last.numel) * psize == p) {
          last.numel += numel;  // contiguous in both (one rank): one segment
          return;
        }
      }
      spec.segments.push_back({offset, numel, grads, p});
      // Stage 1's host copy (offload) is contiguous where its device slices are not: the checks keep the
      // device's runs, so that sums of squares add in the same order as without offload.
      spec.segments.back().new_grad_run = stage == 1 && gs.part_grads.defined();
    };
    if (stage == 0) {
      spec.numel = l.padded_numel;
      append(0, l.padded_numel, static_cast<const char*>(gs.flat_grads.data()), params);
      for (const FlatBucket& b : l.buckets) spec.units.push_back(b.range.size());
      for (const ParamSlice& s : ParamsIn(l, {0, l.padded_numel})) {
        spec.tensors.push_back({s.flat_offset, s.numel, s.param});
        extents_.push_back({ids[static_cast<size_t>(s.param)], s.param_offset, static_cast<int>(g), s.flat_offset, s.numel});
      }
    } else {
      spec.numel = l.partition_numel;
      const int64_t chunk = opt_.allgather_bucket_numel;
      for (const FlatBucket& b : l.buckets) {
        const Range slice = b.Slice(rank);
        const char* grads = !gs.part_grads.defined() ? static_cast<const char*>(gs.flat_grads.data()) +
                                                            static_cast<size_t>(slice.begin) * gsize
                                                      : static_cast<const char*>(gs.part_grads.data()) +
                                                            static_cast<size_t>(b.partition_offset) * gsize;
        append(b.partition_offset, b.slice_numel, grads, params + static_cast<size_t>(slice.begin) * psize);
        spec.units.push_back(b.slice_numel);
        if (chunk > 0) {
          for (int64_t off = chunk; off < b.slice_numel; off += chunk) spec.progress_points.push_back(b.partition_offset + off);
        }
        spec.progress_points.push_back(b.partition_offset + b.slice_numel);
      }
      for (const ParamSlice& s : ParamsInPartition(l, rank)) {
        spec.tensors.push_back({s.partition_offset, s.numel, s.param});
        extents_.push_back({ids[static_cast<size_t>(s.param)], s.param_offset, static_cast<int>(g), s.partition_offset,
                            s.numel});
      }
    }
    spec.num_tensors = static_cast<int64_t>(ids.size());
    specs.push_back(std::move(spec));
    groups_.push_back(std::move(gs));
  }
  // Frozen parameters are in no group: they keep (or, built from recipes, get) their full value.
  for (size_t id = 0; id < params_.size(); ++id) {
    const ParamSpec& p = params_[id];
    if (p.trainable() || host_.HasValue(static_cast<int>(id))) continue;
    Tensor value = Tensor::Empty({p.numel}, opt_.param_dtype, opt_.device, MemCategory::kParams);
    host_.ReadInitial(static_cast<int>(id), 0, value);
    host_.BindData(static_cast<int>(id), value);
  }
  BuildOptimizer(std::move(specs), /*partitioned=*/stage >= 1 && world > 1);
}

void FlatStrategy::PreBackward(int, const std::vector<int>& ids) {
  if (!transient_grads()) return;
  // Stage 2: gradients live in transient bucket buffers; bind them before the layer adds into them.
  for (int id : ids) {
    const ParamSpec& p = params_[static_cast<size_t>(id)];
    if (!p.trainable()) continue;
    host_.BindGrad(id, groups_[static_cast<size_t>(p.group)].buckets->GradView(p.index));
  }
}

void FlatStrategy::GradsReady(const std::vector<int>& ids) {
  if (!reducing_) return;
  for (int id : ids) {
    const ParamSpec& p = params_[static_cast<size_t>(id)];
    if (!p.trainable()) continue;
    groups_[static_cast<size_t>(p.group)].buckets->MarkReady(p.index);
    // The gradient is final: drop the view so the bucket's memory goes back when it has been reduced.
    if (transient_grads()) host_.ReleaseGrad(id);
  }
}

void FlatStrategy::FinishAll() {
  ScopedTimer timer(timers_, "backward_allreduce");
  for (Group& g : groups_) g.buckets->SubmitRest();
  queue_.Drain();
}

void FlatStrategy::EndBackward() {
  // overlap_comm false (and waits for a free bucket slot): time backward spent reducing.
  timers_.Add("reduce_wait", queue_.TakeWaitMs());
  if (!reduces_every_micro_step()) return;
  FinishAll();
  for (const auto& ids : group_ids_) {
    for (int id : ids) host_.ReleaseGrad(id);
  }
}

void FlatStrategy::AbortBackward() noexcept {
  queue_.Reset();
  for (Group& g : groups_) g.buckets->Reset();
}

void FlatStrategy::FinishReductions() {
  if (reduces_every_micro_step()) {
    ScopedTimer timer(timers_, "backward_allreduce");  // nothing left: reduced in EndBackward
    return;
  }
  FinishAll();
}

void FlatStrategy::ZeroGrads() {
  for (Group& g : groups_) {
    if (g.flat_grads.defined()) g.flat_grads.Zero();
    // Stage 1's host copy is overwritten whole by the next boundary's landings.
    if (g.part_grads.defined() && opt_.stage == 2) g.part_grads.Zero();
  }
}

void FlatStrategy::Step(float grad_scale) {
  if (!gathers()) {
    optimizer_->Step(grad_scale, nullptr);
    return;
  }
  // Each bucket is all-gathered once this rank's slice of it is updated, while the optimizer goes on:
  // in place in one op when the slice fits allgather_bucket_size (0: no limit), else chunk by chunk.
  const int64_t chunk = opt_.allgather_bucket_numel;
  const size_t psize = DTypeSize(opt_.param_dtype);
  std::optional<ChunkedGather> chunked;
  std::vector<comm::Work> whole;
  struct Cursor {
    size_t bucket = 0;
    int64_t offset = 0;  // inside the bucket's slice: the next chunk to gather
  };
  std::vector<Cursor> cursors(groups_.size());
  auto progress = [&](int g, int64_t end) {
    Group& gs = groups_[static_cast<size_t>(g)];
    Cursor& c = cursors[static_cast<size_t>(g)];
    char* flat = static_cast<char*>(gs.flat_params.data());
    while (c.bucket < gs.layout.buckets.size()) {
      const FlatBucket& b = gs.layout.buckets[c.bucket];
      const bool whole_slice = chunk <= 0 || b.slice_numel <= chunk;
      const int64_t count = whole_slice ? b.slice_numel : std::min(chunk, b.slice_numel - c.offset);
      if (b.partition_offset + c.offset + count > end) return;  // not updated yet
      if (whole_slice) {
        whole.push_back(comm_.AllGather(flat + static_cast<size_t>(b.Slice(comm_.rank()).begin) * psize,
                                        flat + static_cast<size_t>(b.range.begin) * psize,
                                        static_cast<size_t>(b.slice_numel), opt_.param_dtype));
      } else {
        if (!chunked) chunked.emplace(comm_, opt_.param_dtype, opt_.device, chunk);
        chunked->Submit(gs.flat_params, b.range.begin, b.slice_numel, c.offset, count);
      }
      c.offset += count;
      if (c.offset >= b.slice_numel) {
        ++c.bucket;
        c.offset = 0;
      }
    }
  };
  optimizer_->Step(grad_scale, progress);
  for (size_t g = 0; g < groups_.size(); ++g) progress(static_cast<int>(g), groups_[g].layout.partition_numel);
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

}  // namespace

std::unique_ptr<Strategy> MakeFlatStrategy(const StrategyOptions& options, std::vector<ParamSpec> params,
                                           ParamHost& host, UpdateRule& rule, comm::Communicator& comm, Timers& timers) {
  return std::make_unique<FlatStrategy>(options, std::move(params), host, rule, comm, timers);
}

}  // namespace zerorun::zero

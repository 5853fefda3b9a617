// The gradient-bucket path: the queue (backpressure, one collective per bucket, synchronous mode)
// and its two packing policies (flat buckets for stages 0-2, coalesced shards for stage 3).
#include "zerorun/zero/grad_buckets.h"

#include <algorithm>
#include <optional>

#include "zerorun/core/error.h"
#include "zerorun/core/timer.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::zero {

ReduceScaling ScalingFor(bool average, bool prescale, double predivide, int world) {
  ReduceScaling s;
  if (!average || world <= 1) return s;
  if (prescale) {
    s.pre = 1.0 / world;
  } else if (predivide != 1.0) {
    s.pre = 1.0 / predivide;
    s.post = predivide / world;
  } else {
    s.op = comm::ReduceOp::kAvg;
  }
  return s;
}

namespace {

// Where a landing reads its reduced slice: `received` itself when it lives where `dst` does, else
// (gradients landing in pinned host memory from a device: optimizer offload) a host copy of it, with
// the landing's kernels run on the host while `*on_host` lives. On the CPU device both are host memory.
Tensor LandingSource(const Tensor& dst, const Tensor& received, std::optional<kernels::KernelDeviceScope>* on_host) {
  if (dst.device() == received.device()) return received;
  ZR_CHECK(dst.device().is_cpu(), "gradients landing on {} from {}", dst.device().ToString(),
           received.device().ToString());
  Tensor host = Tensor::Empty(received.shape(), received.dtype(), Device::CPU(), MemCategory::kBuckets);
  CopyBytes(host.data(), Device::CPU(), received.data(), received.device(), received.nbytes());
  on_host->emplace(Device::CPU());
  return host;
}

}  // namespace

// ---- GradBucketQueue ----------------------------------------------------------------------------

GradBucketQueue::GradBucketQueue(comm::Communicator& comm, const GradBucketOptions& options)
    : comm_(comm), opt_(options), scaling_(ScalingFor(options.average, options.prescale, options.predivide, comm.size())) {
  ZR_CHECK(opt_.max_in_flight >= 1, "max_in_flight {}", opt_.max_in_flight);
}

GradBucketQueue::~GradBucketQueue() { Reset(); }

void GradBucketQueue::Land(Pending& p) {
  p.work.Wait();
  PackedBucket b = std::move(p.bucket);
  p.bucket = PackedBucket();
  if (b.land) b.land(b.received, scaling_.post);
}

void GradBucketQueue::Submit(const std::function<PackedBucket()>& pack) {
  LandCompleted();
  if (static_cast<int>(pending_.size()) >= opt_.max_in_flight) {
    Stopwatch watch;
    while (static_cast<int>(pending_.size()) >= opt_.max_in_flight) {
      Land(pending_.front());
      pending_.pop_front();
    }
    wait_ms_ += watch.ElapsedMs();
  }
  PackedBucket b = pack();
  ++submitted_;
  if (comm_.size() == 1) {
    if (b.land) b.land(b.received, scaling_.post);
    return;
  }
  Pending p;
  if (b.collective == PackedBucket::Collective::kAllReduce) {
    p.work = comm_.AllReduce(b.wire.data(), static_cast<size_t>(b.wire.numel()), b.wire.dtype(), scaling_.op);
  } else {
    ZR_CHECK(b.wire.numel() == b.received.numel() * comm_.size(), "reduce-scatter of {} elements into {} per rank",
             b.wire.numel(), b.received.numel());
    p.work = comm_.ReduceScatter(b.wire.data(), b.received.data(), static_cast<size_t>(b.received.numel()),
                                 b.wire.dtype(), scaling_.op);
  }
  p.bucket = std::move(b);
  pending_.push_back(std::move(p));
  if (opt_.synchronous) {
    Stopwatch watch;
    Land(pending_.back());
    pending_.pop_back();
    wait_ms_ += watch.ElapsedMs();
  }
}

void GradBucketQueue::LandCompleted() {
  while (!pending_.empty() && pending_.front().work.IsCompleted()) {
    Land(pending_.front());
    pending_.pop_front();
  }
}

void GradBucketQueue::Drain() {
  while (!pending_.empty()) {
    Land(pending_.front());
    pending_.pop_front();
  }
}

void GradBucketQueue::Reset() noexcept {
  // A failed op aborts the communicator, which fails every later one at once: these waits are bounded,
  // and no collective still writes into a buffer when it is dropped.
  for (Pending& p : pending_) {
    try {
      p.work.Wait();
    } catch (...) {
    }
  }
  pending_.clear();
}

// ---- FlatGradBuckets (stages 0-2) ---------------------------------------------------------------

struct FlatGradBuckets::Bucket {
  int params_total = 0;
  int params_ready = 0;
  bool submitted = false;
  Tensor buffer;  // kAccumulateSlice: (range.size()) the transient gradients, grad dtype
};

FlatGradBuckets::FlatGradBuckets(const FlatGroupLayout& layout, DType grad_dtype, Target target,
                                 GradBucketQueue& queue, Tensor full_grads, Tensor partition_grads)
    : layout_(layout),
      grad_dtype_(grad_dtype),
      target_(target),
      queue_(queue),
      full_grads_(std::move(full_grads)),
      partition_grads_(std::move(partition_grads)) {
  ZR_CHECK(queue.comm().size() == layout.world_size, "communicator of {} ranks for a layout of {}",
           queue.comm().size(), layout.world_size);
  if (target_ == Target::kAccumulateSlice || partition_grads_.defined()) {
    ZR_CHECK(partition_grads_.defined() && partition_grads_.numel() == layout.partition_numel,
             "partition gradient buffer");
    ZR_CHECK(target_ != Target::kAllReduce, "an all-reduce lands in the full gradients only");
  }
  if (target_ != Target::kAccumulateSlice) {
    ZR_CHECK(full_grads_.defined() && full_grads_.numel() == layout.padded_numel, "full gradient buffer");
  }
  for (size_t b = 0; b < layout_.buckets.size(); ++b) buckets_.push_back(std::make_unique<Bucket>());
  for (int b : layout_.bucket_of_param) {
    if (b >= 0) buckets_[static_cast<size_t>(b)]->params_total++;
  }
}

FlatGradBuckets::~FlatGradBuckets() { Reset(); }

Tensor FlatGradBuckets::GradView(int param) {
  const int bi = layout_.bucket_of_param.at(static_cast<size_t>(param));
  const Range pr = layout_.ParamRange(param);
  if (target_ != Target::kAccumulateSlice) return full_grads_.View(pr.begin, {pr.size()});
  if (bi < 0) return Tensor::Zeros({0}, grad_dtype_, queue_.comm().device(), MemCategory::kBuckets);
  Bucket& b = *buckets_[static_cast<size_t>(bi)];
  ZR_CHECK(!b.submitted, "gradient of parameter {} requested after its bucket was reduced", param);
  const FlatBucket& fb = layout_.buckets[static_cast<size_t>(bi)];
  if (!b.buffer.defined()) {
    b.buffer = Tensor::Zeros({fb.range.size()}, grad_dtype_, queue_.comm().device(), MemCategory::kBuckets);
    live_bucket_bytes_ += static_cast<int64_t>(b.buffer.nbytes());
  }
  return b.buffer.View(pr.begin - fb.range.begin, {pr.size()});
}

void FlatGradBuckets::MarkReady(int param) {
  const int bi = layout_.bucket_of_param.at(static_cast<size_t>(param));
  if (bi >= 0) {
    Bucket& b = *buckets_[static_cast<size_t>(bi)];
    ZR_CHECK(!b.submitted && b.params_ready < b.params_total, "parameter {} marked ready twice in one backward", param);
    if (++b.params_ready == b.params_total) Submit(bi);
  }
  queue_.LandCompleted();
}

void FlatGradBuckets::Submit(int bi) {
  buckets_[static_cast<size_t>(bi)]->submitted = true;
  queue_.Submit([this, bi] { return Pack(bi); });
}

PackedBucket FlatGradBuckets::Pack(int bi) {
  Bucket& b = *buckets_[static_cast<size_t>(bi)];
  const FlatBucket& fb = layout_.buckets[static_cast<size_t>(bi)];
  comm::Communicator& comm = queue_.comm();
  const int world = comm.size();
  const DType wire_dtype = world > 1 ? queue_.options().comm_dtype : grad_dtype_;
  const double pre = queue_.scaling().pre;
  const bool all_reduce = target_ == Target::kAllReduce;
  // The gradients: the bucket's range of the full buffer, or its transient buffer (zeroed: a bucket
  // whose parameters got no gradient reduces zeros).
  Tensor grads;
  if (target_ == Target::kAccumulateSlice) {
    if (!b.buffer.defined()) {
      b.buffer = Tensor::Zeros({fb.range.size()}, grad_dtype_, comm.device(), MemCategory::kBuckets);
      live_bucket_bytes_ += static_cast<int64_t>(b.buffer.nbytes());
    }
    grads = b.buffer;
  } else {
    grads = full_grads_.View(fb.range.begin, {fb.range.size()});
  }
  // An all-reduce moves only the data (the padding is zero everywhere); a reduce-scatter moves the
  // whole padded bucket so that it splits into W equal slices.
  const int64_t n = all_reduce ? fb.data_numel : fb.range.size();
  Tensor src = grads.View(0, {n});
  PackedBucket p;
  p.collective = all_reduce ? PackedBucket::Collective::kAllReduce : PackedBucket::Collective::kReduceScatter;
  const bool staged = wire_dtype != grad_dtype_;
  if (staged) {
    // Pre-scaled while converting (y = 0 + pre·x rounds once).
    p.wire = Tensor::Zeros({n}, wire_dtype, comm.device(), MemCategory::kBuckets);
    kernels::Axpy(p.wire.data(), wire_dtype, src.data(), grad_dtype_, static_cast<float>(pre), n);
  } else {
    if (pre != 1.0) kernels::Scale(src.data(), src.data(), static_cast<float>(pre), n, grad_dtype_);
    p.wire = src;
  }
  p.received = all_reduce ? p.wire : p.wire.View(comm.rank() * fb.slice_numel, {fb.slice_numel});
  switch (target_) {
    case Target::kAllReduce:
      p.land = [src, staged, this](const Tensor& received, double post) {
        if (staged) kernels::Copy(src.data(), grad_dtype_, received.data(), received.dtype(), src.numel());
        if (post != 1.0) kernels::Scale(src.data(), src.data(), static_cast<float>(post), src.numel(), grad_dtype_);
      };
      break;
    case Target::kOwnSlice: {
      Tensor dst = full_grads_.View(fb.Slice(comm.rank()).begin, {fb.slice_numel});
      Tensor host = partition_grads_.defined() ? partition_grads_.View(fb.partition_offset, {fb.slice_numel}) : Tensor();
      p.land = [dst, host, this](const Tensor& received, double post) {
        if (received.data() != dst.data() || received.dtype() != dst.dtype()) {
          kernels::Copy(dst.data(), grad_dtype_, received.data(), received.dtype(), dst.numel());
        }
        if (post != 1.0) kernels::Scale(dst.data(), dst.data(), static_cast<float>(post), dst.numel(), grad_dtype_);
        // Optimizer offload: the reduced slice goes to the host's copy of the partition at once.
        if (host.defined()) CopyBytes(host.data(), Device::CPU(), dst.data(), dst.device(), dst.nbytes());
      };
      break;
    }
    case Target::kAccumulateSlice: {
      Tensor dst = partition_grads_.View(fb.partition_offset, {fb.slice_numel});
      p.land = [dst, bi, this](const Tensor& received, double post) {
        std::optional<kernels::KernelDeviceScope> on_host;
        const Tensor src = LandingSource(dst, received, &on_host);
        kernels::Axpy(dst.data(), dst.dtype(), src.data(), src.dtype(), static_cast<float>(post), dst.numel());
        Bucket& bk = *buckets_[static_cast<size_t>(bi)];
        if (bk.buffer.defined()) live_bucket_bytes_ -= static_cast<int64_t>(bk.buffer.nbytes());
        bk.buffer = Tensor();
      };
      break;
    }
  }
  return p;
}

void FlatGradBuckets::SubmitRest() {
  // Fill order (the last bucket first), the same on every rank.
  for (size_t i = buckets_.size(); i-- > 0;) {
    if (!buckets_[i]->submitted) Submit(static_cast<int>(i));
  }
  for (auto& b : buckets_) {
    b->submitted = false;
    b->params_ready = 0;
  }
}

void FlatGradBuckets::Reset() noexcept {
  for (auto& b : buckets_) {
    b->submitted = false;
    b->params_ready = 0;
    if (b->buffer.defined()) live_bucket_bytes_ -= static_cast<int64_t>(b->buffer.nbytes());
    b->buffer = Tensor();
  }
}

// ---- ShardGradBuckets (stage 3) -----------------------------------------------------------------

ShardGradBuckets::ShardGradBuckets(std::vector<int64_t> numels, std::vector<Tensor> grad_shards,
                                   int64_t bucket_numel, GradBucketQueue& queue)
    : numels_(std::move(numels)), grad_shards_(std::move(grad_shards)), bucket_numel_(bucket_numel), queue_(queue) {
  ZR_CHECK(numels_.size() == grad_shards_.size(), "{} numels for {} gradient shards", numels_.size(),
           grad_shards_.size());
  const int world = queue_.comm().size();
  for (size_t i = 0; i < numels_.size(); ++i) {
    ZR_CHECK(!grad_shards_[i].defined() || grad_shards_[i].numel() == CeilDiv(numels_[i], world),
             "gradient shard of parameter {} has {} elements, expected {}", i, grad_shards_[i].numel(),
             CeilDiv(numels_[i], world));
  }
}

ShardGradBuckets::~ShardGradBuckets() { Reset(); }

void ShardGradBuckets::Add(int id, Tensor full_grad) {
  queue_.LandCompleted();
  const size_t i = static_cast<size_t>(id);
  ZR_CHECK(i < numels_.size() && grad_shards_[i].defined(), "gradient handed over for parameter {}, which takes none",
           id);
  ZR_CHECK(full_grad.numel() == numels_[i], "gradient of parameter {} has {} elements, expected {}", id,
           full_grad.numel(), numels_[i]);
  open_ids_.push_back(id);
  open_fulls_.push_back(std::move(full_grad));
  open_shard_numel_ += grad_shards_[i].numel();
  if (open_shard_numel_ * queue_.comm().size() >= bucket_numel_) SubmitOpen();
}

void ShardGradBuckets::SubmitOpen() {
  if (open_ids_.empty()) return;
  struct Open {
    std::vector<int> ids;
    std::vector<Tensor> fulls;
    int64_t shard_numel = 0;
  };
  auto open = std::make_shared<Open>();
  open->ids = std::move(open_ids_);
  open->fulls = std::move(open_fulls_);
  open->shard_numel = open_shard_numel_;
  open_ids_.clear();
  open_fulls_.clear();
  open_shard_numel_ = 0;
  queue_.Submit([this, open] {
    comm::Communicator& comm = queue_.comm();
    const int world = comm.size();
    // The wire dtype even on one rank: the gradients round through it as they would on many.
    const DType wire = queue_.options().comm_dtype;
    const size_t esize = DTypeSize(wire);
    const float pre = static_cast<float>(queue_.scaling().pre);
    // Packed rank by rank in the wire dtype, pre-scaled in the same pass (y = 0 + pre·x rounds once);
    // the padding past each parameter's last element stays zero and reduces to zero.
    PackedBucket p;
    p.wire = Tensor::Zeros({open->shard_numel * world}, wire, comm.device(), MemCategory::kBuckets);
    char* packed = static_cast<char*>(p.wire.data());
    std::vector<int64_t> offsets;  // each parameter's shard in a rank's block
    int64_t off = 0;
    for (size_t k = 0; k < open->ids.size(); ++k) {
      const size_t i = static_cast<size_t>(open->ids[k]);
      const int64_t numel = numels_[i];
      const int64_t shard = grad_shards_[i].numel();
      const Tensor& full = open->fulls[k];
      const size_t fsize = DTypeSize(full.dtype());
      for (int r = 0; r < world; ++r) {
        const int64_t begin = std::min(numel, r * shard);
        const int64_t n = std::min(numel, begin + shard) - begin;
        if (n <= 0) continue;
        kernels::Axpy(packed + static_cast<size_t>(r * open->shard_numel + off) * esize, wire,
                      static_cast<const char*>(full.data()) + static_cast<size_t>(begin) * fsize, full.dtype(), pre, n);
      }
      offsets.push_back(off);
      off += shard;
    }
    open->fulls.clear();  // the full gradients are returned as soon as they are packed
    // In place: this rank's block of the packed buffer receives its reduced shards.
    p.received = p.wire.View(comm.rank() * open->shard_numel, {open->shard_numel});
    p.land = [this, open, offsets](const Tensor& received, double post) {
      std::optional<kernels::KernelDeviceScope> on_host;
      const Tensor src = LandingSource(grad_shards_[static_cast<size_t>(open->ids.front())], received, &on_host);
      const char* base = static_cast<const char*>(src.data());
      const size_t es = DTypeSize(src.dtype());
      for (size_t k = 0; k < open->ids.size(); ++k) {
        const Tensor& dst = grad_shards_[static_cast<size_t>(open->ids[k])];
        kernels::Axpy(dst.data(), dst.dtype(), base + static_cast<size_t>(offsets[k]) * es, src.dtype(),
                      static_cast<float>(post), dst.numel());
      }
    };
    return p;
  });
}

void ShardGradBuckets::Reset() noexcept {
  open_ids_.clear();
  open_fulls_.clear();
  open_shard_numel_ = 0;
}

}  // namespace zerorun::zero

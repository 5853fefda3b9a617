// GradientReducer: bucket bookkeeping, collective submission and post-processing.
#include "zerorun/zero/gradient_reducer.h"

#include <algorithm>

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

struct GradientReducer::Bucket {
  Range range;
  int params_total = 0;
  int params_ready = 0;
  bool submitted = false;
  bool completed = false;  // reduced and post-processed (its transient memory returned)
  Tensor buffer;      // grad dtype: a view of full_grads (kAllReduce) or a transient buffer (kScatter)
  Tensor staging;     // comm dtype, when it differs from the grad dtype
  Tensor received;    // kScatter: this rank's reduced piece (comm dtype)
  Range owned_piece;  // kScatter: bucket ∩ own partition (flat)
  std::vector<comm::Work> works;
};

GradientReducer::GradientReducer(const FlatGroupLayout& layout, DType grad_dtype, comm::Communicator& comm,
                                 const GradReduceOptions& options, Tensor full_grads, Tensor partition_grads)
    : layout_(layout),
      grad_dtype_(grad_dtype),
      comm_(comm),
      opt_(options),
      full_grads_(std::move(full_grads)),
      partition_grads_(std::move(partition_grads)) {
  ZR_CHECK(comm.size() == layout.world_size, "communicator of {} ranks for a layout of {}", comm.size(),
           layout.world_size);
  if (opt_.mode == GradReduceOptions::Mode::kAllReduce) {
    ZR_CHECK(full_grads_.defined() && full_grads_.numel() == layout.padded_numel, "full gradient buffer");
  } else {
    ZR_CHECK(partition_grads_.defined() && partition_grads_.numel() == layout.partition_numel,
             "partition gradient buffer");
  }
  buckets_ = BackwardBuckets(layout_, opt_.bucket_numel);
  bucket_of_param_.assign(layout_.numels.size(), -1);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto st = std::make_unique<Bucket>();
    st->range = buckets_[b];
    for (const ParamSlice& s : ParamsIn(layout_, buckets_[b])) {
      bucket_of_param_[static_cast<size_t>(s.param)] = static_cast<int>(b);
      st->params_total++;
    }
    if (full_grads_.defined()) st->buffer = full_grads_.View(st->range.begin, {st->range.size()});
    state_.push_back(std::move(st));
  }
}

GradientReducer::~GradientReducer() {
  try {
    Reset();
  } catch (...) {
  }
}

Tensor GradientReducer::BucketBuffer(Bucket& b) {
  if (!b.buffer.defined()) {
    b.buffer = Tensor::Zeros({b.range.size()}, grad_dtype_, comm_.device(), MemCategory::kBuckets);
    live_bucket_bytes_ += static_cast<int64_t>(b.buffer.nbytes());
  }
  return b.buffer;
}

Tensor GradientReducer::GradView(int param, const Shape& shape) {
  int bi = bucket_of_param_.at(static_cast<size_t>(param));
  Range pr = layout_.ParamRange(param);
  if (bi < 0) return full_grads_.defined() ? full_grads_.View(pr.begin, shape) : Tensor::Zeros(shape, grad_dtype_);
  Bucket& b = *state_[static_cast<size_t>(bi)];
  ZR_CHECK(!b.submitted, "gradient of parameter {} requested after its bucket was reduced", param);
  return BucketBuffer(b).View(pr.begin - b.range.begin, shape);
}

void GradientReducer::MarkReady(int param) {
  int bi = bucket_of_param_.at(static_cast<size_t>(param));
  if (bi < 0) return;
  Bucket& b = *state_[static_cast<size_t>(bi)];
  ZR_CHECK(!b.submitted, "parameter {} marked ready twice in one backward", param);
  if (++b.params_ready == b.params_total) {
    Submit(b);
    if (opt_.synchronous) {
      Stopwatch watch;
      Complete(b);
      sync_wait_ms_ += watch.ElapsedMs();
    }
  }
  CompleteFinished();
}

void GradientReducer::CompleteFinished() {
  // Buckets whose collectives are done are post-processed now, so their transient buffers are
  // returned during backward instead of all at its end.
  for (auto& b : state_) {
    if (!b->submitted || b->completed) continue;
    bool done = true;
    for (const auto& w : b->works) done = done && w.IsCompleted();
    if (done) Complete(*b);
  }
}

void GradientReducer::Submit(Bucket& b) {
  b.submitted = true;
  const int world = comm_.size();
  Tensor buf = BucketBuffer(b);
  const int64_t n = b.range.size();
  // Pre-scaling on the gradient dtype.
  const ReduceScaling sc = ScalingFor(opt_.average, opt_.prescale, opt_.predivide, world);
  const double pre = sc.pre;
  const comm::ReduceOp op = sc.op;
  if (pre != 1.0) kernels::Scale(buf.data(), buf.data(), static_cast<float>(pre), n, grad_dtype_);
  Tensor wire = buf;
  if (opt_.comm_dtype != grad_dtype_ && world > 1) {
    if (!b.staging.defined()) b.staging = Tensor::Empty({n}, opt_.comm_dtype, comm_.device(), MemCategory::kBuckets);
    kernels::Copy(b.staging.data(), opt_.comm_dtype, buf.data(), grad_dtype_, n);
    wire = b.staging;
  }
  const size_t esize = DTypeSize(opt_.comm_dtype);
  if (world == 1) return;  // nothing to exchange: Complete() moves the bucket into place
  if (opt_.mode == GradReduceOptions::Mode::kAllReduce) {
    b.works.push_back(comm_.AllReduce(wire.data(), static_cast<size_t>(n), opt_.comm_dtype, op));
    return;
  }
  // kScatter: one Reduce per owner whose partition meets the bucket, in rank order on every rank.
  for (int r = 0; r < world; ++r) {
    Range piece = Intersect(b.range, layout_.Partition(r));
    if (piece.empty()) continue;
    const char* send = static_cast<const char*>(wire.data()) + static_cast<size_t>(piece.begin - b.range.begin) * esize;
    void* recv = nullptr;
    if (r == comm_.rank()) {
      b.received = Tensor::Empty({piece.size()}, opt_.comm_dtype, comm_.device(), MemCategory::kBuckets);
      b.owned_piece = piece;
      recv = b.received.data();
    }
    b.works.push_back(comm_.Reduce(send, recv, static_cast<size_t>(piece.size()), opt_.comm_dtype, op, r));
  }
}

void GradientReducer::Complete(Bucket& b) {
  if (b.completed) return;
  b.completed = true;
  for (auto& w : b.works) w.Wait();
  b.works.clear();
  const int world = comm_.size();
  const double post = ScalingFor(opt_.average, opt_.prescale, opt_.predivide, world).post;
  if (world == 1 && opt_.mode == GradReduceOptions::Mode::kScatter) {
    // The only rank owns everything: the bucket is its reduced piece.
    b.received = b.buffer;
    b.owned_piece = b.range;
  }
  if (opt_.mode == GradReduceOptions::Mode::kAllReduce) {
    if (world == 1) return;
    const int64_t n = b.range.size();
    if (b.staging.defined()) kernels::Copy(b.buffer.data(), grad_dtype_, b.staging.data(), opt_.comm_dtype, n);
    if (post != 1.0) kernels::Scale(b.buffer.data(), b.buffer.data(), static_cast<float>(post), n, grad_dtype_);
    b.staging = Tensor();
    return;
  }
  if (b.received.defined()) {
    Tensor dst = partition_grads_.View(b.owned_piece.begin - layout_.Partition(comm_.rank()).begin,
                                       {b.owned_piece.size()});
    const DType src_type = b.received.dtype();
    if (opt_.accumulate_partition) {
      kernels::Axpy(dst.data(), dst.dtype(), b.received.data(), src_type, static_cast<float>(post),
                    b.owned_piece.size());
    } else if (dst.data() != b.received.data() || dst.dtype() != src_type) {
      kernels::Copy(dst.data(), dst.dtype(), b.received.data(), src_type, b.owned_piece.size());
      if (post != 1.0) kernels::Scale(dst.data(), dst.data(), static_cast<float>(post), b.owned_piece.size(), dst.dtype());
    }
    b.received = Tensor();
  }
  if (!full_grads_.defined()) {
    if (b.buffer.defined()) live_bucket_bytes_ -= static_cast<int64_t>(b.buffer.nbytes());
    b.buffer = Tensor();
  }
  b.staging = Tensor();
}

void GradientReducer::Finish() {
  // Unsubmitted buckets go in bucket order, which is the same on every rank.
  for (auto& b : state_) {
    if (!b->submitted) Submit(*b);
  }
  for (auto& b : state_) Complete(*b);
  for (auto& b : state_) {
    b->submitted = false;
    b->completed = false;
    b->params_ready = 0;
  }
}

void GradientReducer::Reset() {
  for (auto& b : state_) {
    for (auto& w : b->works) {
      try {
        w.Wait();
      } catch (...) {
      }
    }
    b->works.clear();
    b->submitted = false;
    b->completed = false;
    b->params_ready = 0;
    b->received = Tensor();
    if (!full_grads_.defined()) {
      if (b->buffer.defined()) live_bucket_bytes_ -= static_cast<int64_t>(b->buffer.nbytes());
      b->buffer = Tensor();
    }
    b->staging = Tensor();
  }
}

}  // namespace zerorun::zero

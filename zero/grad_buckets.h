// The gradient-bucket path of every ZeRO stage: gradients are packed into buckets by a packing policy
// and each bucket leaves as ONE collective through a GradBucketQueue, asynchronously, while backward
// goes on (overlap), with at most `max_in_flight` buckets travelling at once (backpressure).
//
// Vocabulary. A *packing policy* decides what a bucket holds and where its result lands:
//  - FlatGradBuckets (stages 0-2): the static buckets of a group's flat layout (partition.h), each
//    submitted when every parameter in it has reported its gradient final. Stage 0 all-reduces the
//    bucket's data in place; stages 1/2 reduce-scatter the whole padded bucket, so every rank receives
//    its slice (stage 1 in place inside the full gradient buffer; stage 2 from a transient bucket
//    buffer, added into the rank's partition accumulator).
//  - ShardGradBuckets (stage 3): full gradients of whole parameters, in the order backward finishes
//    them, collected until the open bucket holds `bucket_numel` padded elements, then packed rank by
//    rank ([rank 0's shard of each | rank 1's ...]) and reduce-scattered in place, each rank's block
//    added into its gradient shards.
// *Scaling* (reference §5.3) is ScalingFor's, applied by the queue's packers and landings alike:
// "mean" with gradient_predivide_factor 1 averages inside the collective in fp32 (kAvg); with a factor
// f: ×1/f, sum, ×f/W; prescale_gradients: ×1/W, sum; "sum": nothing. A communication dtype different
// from the gradient dtype stages the bucket through a buffer of that dtype.
//
// Ownership and threads: a queue and its policies are driven by one thread (the rank's backward);
// collectives run on the communicator's thread. Buffers handed to a collective stay alive until the
// bucket is landed (LandCompleted, Drain, or the backpressure wait in Submit). Errors of a collective
// surface from the call that waits for it; Reset() after an error drops everything in flight.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/tensor.h"
#include "zerorun/zero/partition.h"

namespace zerorun::zero {

// How a reduction averages: multiply by `pre` before the collective (on the data as it is sent),
// reduce with `op`, multiply by `post` after. A single rank has nothing to average.
struct ReduceScaling {
  double pre = 1.0;
  comm::ReduceOp op = comm::ReduceOp::kSum;
  double post = 1.0;
};
ReduceScaling ScalingFor(bool average, bool prescale, double predivide, int world);

struct GradBucketOptions {
  DType comm_dtype = DType::kF32;  // dtype on the wire
  bool average = true;             // "mean" (false: "sum")
  bool prescale = false;           // prescale_gradients
  double predivide = 1.0;          // gradient_predivide_factor
  // overlap_comm false: a submitted bucket is waited for and landed at once, on the caller's thread.
  bool synchronous = false;
  // Buckets travelling at once; submitting one more first waits for (and lands) the oldest. Bounds
  // transient gradient memory by the bucket size rather than by the model (DeepSpeed double-buffers).
  int max_in_flight = 2;
};

// One bucket as it leaves: the collective's buffers and what to do with the result.
struct PackedBucket {
  enum class Collective { kAllReduce, kReduceScatter };
  Collective collective = Collective::kReduceScatter;
  // All-reduce: (n) reduced in place. Reduce-scatter: (W · n) the send buffer; `received` (n) is
  // where this rank's reduced slice arrives (in place when it is wire's slice `rank`).
  Tensor wire;
  Tensor received;
  // Called once on the driving thread after the collective completed, with `post` (the scaling's
  // post factor) still to be applied to `received`. Drops whatever the bucket holds when it returns.
  std::function<void(const Tensor& received, double post)> land;
};

class GradBucketQueue {
 public:
  // The communicator must outlive the queue; its device is where wire buffers live.
  GradBucketQueue(comm::Communicator& comm, const GradBucketOptions& options);
  ~GradBucketQueue();
  GradBucketQueue(const GradBucketQueue&) = delete;
  GradBucketQueue& operator=(const GradBucketQueue&) = delete;

  comm::Communicator& comm() const { return comm_; }
  const GradBucketOptions& options() const { return opt_; }
  const ReduceScaling& scaling() const { return scaling_; }

  // Waits until fewer than max_in_flight buckets travel (landing the oldest), then calls `pack` (so
  // the bucket's buffers are allocated only once there is room for it) and issues ONE collective for
  // the result. One rank: no collective, the bucket is landed at once. synchronous: waited for and
  // landed before returning.
  void Submit(const std::function<PackedBucket()>& pack);
  // Lands every bucket whose collective has completed (returns their buffers during backward).
  void LandCompleted();
  // Waits for and lands every bucket; afterwards nothing is in flight.
  void Drain();
  // After an error: waits for what can be waited for, drops every bucket unlanded.
  void Reset() noexcept;

  int in_flight() const { return static_cast<int>(pending_.size()); }
  int64_t submitted() const { return submitted_; }  // buckets since construction
  // Milliseconds Submit spent waiting (backpressure and synchronous mode) since the last call.
  double TakeWaitMs() { return std::exchange(wait_ms_, 0.0); }

 private:
  struct Pending {
    PackedBucket bucket;
    comm::Work work;
  };
  void Land(Pending& p);

  comm::Communicator& comm_;
  GradBucketOptions opt_;
  ReduceScaling scaling_;
  std::deque<Pending> pending_;  // submission order
  int64_t submitted_ = 0;
  double wait_ms_ = 0;
};

// Stages 0-2: the buckets of one parameter group's flat layout.
class FlatGradBuckets {
 public:
  enum class Target {
    kAllReduce,        // stage 0: every rank ends with the whole averaged gradient in `full_grads`
    kOwnSlice,         // stage 1: this rank's slice of each bucket of `full_grads` is overwritten (and copied)
    kAccumulateSlice,  // stage 2: transient buckets; this rank's slice is added into `partition_grads`
  };
  // full_grads (layout.padded_numel, grad dtype) for kAllReduce/kOwnSlice; partition_grads
  // (layout.partition_numel) for kAccumulateSlice, and optionally for kOwnSlice: a copy of this rank's
  // slices, written as each bucket lands. partition_grads may be host memory while the communicator's
  // device is not (optimizer offload): a landing copies its slice to the host and adds it there. The
  // layout's world size is the queue's.
  FlatGradBuckets(const FlatGroupLayout& layout, DType grad_dtype, Target target, GradBucketQueue& queue,
                  Tensor full_grads, Tensor partition_grads);
  ~FlatGradBuckets();
  FlatGradBuckets(const FlatGradBuckets&) = delete;
  FlatGradBuckets& operator=(const FlatGradBuckets&) = delete;

  // The (numel) gradient of input parameter `param`: a view of full_grads, or (kAccumulateSlice) of
  // its bucket's transient buffer, allocated zeroed on first use in a backward.
  Tensor GradView(int param);
  // `param`'s gradient is final for this backward; its bucket is submitted once all of its are.
  // REQUIRES: at most once per parameter between Finish() calls.
  void MarkReady(int param);
  // Submits every bucket not yet submitted, in bucket fill order (parameters that got no gradient
  // count as zero), and re-arms the buckets for the next backward. Landing is the queue's Drain().
  void SubmitRest();
  // Drops transient state after an error (call the queue's Reset() first).
  void Reset() noexcept;

  const FlatGroupLayout& layout() const { return layout_; }
  // Transient bucket bytes currently held (kAccumulateSlice).
  int64_t live_bucket_bytes() const { return live_bucket_bytes_; }

 private:
  struct Bucket;
  void Submit(int b);
  PackedBucket Pack(int b);

  FlatGroupLayout layout_;
  DType grad_dtype_;
  Target target_;
  GradBucketQueue& queue_;
  Tensor full_grads_;
  Tensor partition_grads_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  int64_t live_bucket_bytes_ = 0;
};

// Stage 3: full gradients of whole parameters, coalesced into reduce-scatters of their shards.
class ShardGradBuckets {
 public:
  // grad_shards[id]: (ceil(numel/W)) this rank's gradient accumulator of parameter id (undefined for
  // a parameter that takes no gradients); numels[id] its full size. bucket_numel: padded elements per
  // bucket (reduce_bucket_size; a larger parameter goes alone).
  ShardGradBuckets(std::vector<int64_t> numels, std::vector<Tensor> grad_shards, int64_t bucket_numel,
                   GradBucketQueue& queue);
  ~ShardGradBuckets();
  ShardGradBuckets(const ShardGradBuckets&) = delete;
  ShardGradBuckets& operator=(const ShardGradBuckets&) = delete;

  // Hands over parameter id's full gradient (numel elements, any floating dtype); it joins the open
  // bucket, which is submitted once it holds bucket_numel padded elements. Held until packed.
  void Add(int id, Tensor full_grad);
  // Submits the open bucket (the end of backward).
  void SubmitOpen();
  void Reset() noexcept;

 private:
  std::vector<int64_t> numels_;
  std::vector<Tensor> grad_shards_;
  int64_t bucket_numel_;
  GradBucketQueue& queue_;
  std::vector<int> open_ids_;
  std::vector<Tensor> open_fulls_;
  int64_t open_shard_numel_ = 0;  // one rank's block of the open bucket
};

}  // namespace zerorun::zero

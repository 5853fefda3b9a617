// GradientReducer: data-parallel gradient reduction for one parameter group, overlapped with
// backward. The group's flat layout (partition.h) is cut into static buckets — contiguous flat ranges
// that fill back to front as backward runs (BackwardBuckets). The engine reports each parameter whose
// gradient became final (MarkReady); when every parameter of a bucket is ready the bucket's collective
// is submitted at once, asynchronously, so it travels while backward computes the next layers.
//
// Two modes:
//  - kAllReduce (stages 0/1): the buckets are views of the group's full flat gradient buffer and are
//    all-reduced in place; afterwards every rank holds the averaged full gradient.
//  - kScatter (stages 2/3-like): each bucket is reduced only to the ranks owning its elements — for each
//    rank r the part of the bucket inside r's partition is reduced to r (Reduce with root r), so every
//    rank sends each gradient element it does not own exactly once (the reduce-scatter volume of the
//    ZeRO paper, Ψ(N−1)/N per rank) — and the owner adds it into its partition accumulator. Bucket
//    memory is transient: a bucket's buffer exists from the first GradView of one of its parameters
//    until its reduction completed.
//
// Averaging follows DeepSpeed (reference §5.3): "mean" postscale (default) uses an fp32 average in the
// reduction when gradient_predivide_factor is 1, otherwise ×1/predivide, sum, ×predivide/W;
// prescale_gradients multiplies by 1/W before a sum. A communication dtype different from the
// gradient dtype stages the bucket through a buffer of that dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/tensor.h"
#include "zerorun/zero/partition.h"

namespace zerorun::zero {

// How a reduction averages (reference §5.3): multiply by `pre` before the collective (on the data as
// it is sent), reduce with `op`, multiply by `post` after. "mean" with predivide 1 lets the
// collective average in fp32 (kAvg); with a predivide factor f: ×1/f, sum, ×f/W; prescale_gradients:
// ×1/W, sum. A single rank has nothing to average.
struct ReduceScaling {
  double pre = 1.0;
  comm::ReduceOp op = comm::ReduceOp::kSum;
  double post = 1.0;
};
ReduceScaling ScalingFor(bool average, bool prescale, double predivide, int world);

struct GradReduceOptions {
  enum class Mode { kAllReduce, kScatter };
  Mode mode = Mode::kAllReduce;
  int64_t bucket_numel = 500'000'000;  // elements per bucket
  DType comm_dtype = DType::kF32;      // dtype on the wire (set to the grad dtype for no conversion)
  bool average = true;                 // "mean" (false: "sum")
  bool prescale = false;               // prescale_gradients
  double predivide = 1.0;              // gradient_predivide_factor
  // overlap_comm false: a ready bucket's reduction is submitted and waited for at once, on the caller's
  // (backward's) thread, so nothing travels while backward computes (DeepSpeed without overlap_comm).
  bool synchronous = false;
  // kScatter: add the reduced piece into the partition (true: stage 2 accumulates over micro-steps)
  // or overwrite it (false: stage 1, whose partition is a view of the full gradient buffer).
  bool accumulate_partition = true;
};

class GradientReducer {
 public:
  // kAllReduce: `full_grads` is the group's flat gradient buffer (layout.padded_numel elements).
  // kScatter: `partition_grads` (layout.partition_numel elements) receives this rank's reduced piece
  // of every bucket (added or overwritten, see accumulate_partition); buckets are views of
  // `full_grads` when it is given (stage 1), transient buffers otherwise (stage 2).
  // The communicator's size must equal layout.world_size.
  GradientReducer(const FlatGroupLayout& layout, DType grad_dtype, comm::Communicator& comm,
                  const GradReduceOptions& options, Tensor full_grads, Tensor partition_grads);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // kScatter: the (numel) gradient view for input parameter `param`, inside its bucket's transient
  // buffer (allocated and zeroed on first use in this backward). kAllReduce: the view into full_grads.
  Tensor GradView(int param, const Shape& shape);
  // Marks `param`'s gradient final for this backward; submits its bucket when complete.
  void MarkReady(int param);
  // Submits every bucket not yet submitted (parameters that got no gradient count as zero), waits for
  // all reductions, applies post-scaling and (kScatter) accumulates into the partition. After it, a
  // new backward may begin.
  void Finish();
  // Drops in-flight state after an error (waits what can be waited, releases buffers).
  void Reset();

  const std::vector<Range>& buckets() const { return buckets_; }
  // Transient bucket bytes currently held (kScatter), for accounting tests.
  int64_t live_bucket_bytes() const { return live_bucket_bytes_; }
  // synchronous: milliseconds MarkReady spent reducing and waiting since the last call; resets it.
  double TakeSyncWaitMs() { return std::exchange(sync_wait_ms_, 0.0); }

 private:
  struct Bucket;
  void Submit(Bucket& b);
  void Complete(Bucket& b);
  void CompleteFinished();
  Tensor BucketBuffer(Bucket& b);

  FlatGroupLayout layout_;
  DType grad_dtype_;
  comm::Communicator& comm_;
  GradReduceOptions opt_;
  Tensor full_grads_;
  Tensor partition_grads_;
  std::vector<Range> buckets_;
  std::vector<std::unique_ptr<Bucket>> state_;
  std::vector<int> bucket_of_param_;  // input param index -> bucket index (-1: empty parameter)
  int64_t live_bucket_bytes_ = 0;
  double sync_wait_ms_ = 0;
};

}  // namespace zerorun::zero

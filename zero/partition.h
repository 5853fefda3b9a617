// ZeRO partition math: pure functions, no memory, no communication. Everything ZeRO does with
// memory and traffic is derived from these layouts, so they are exhaustively unit-tested.
//
// Stages 0-2 (one flat buffer per parameter group, Megatron-Core's distributed-optimizer layout): the
// group's trainable parameters are concatenated (optionally reordered round-robin: parameter i goes to
// slot i % W and the flat order is slot 0's parameters, then slot 1's, ...) and cut into gradient
// buckets of whole parameters, filled back to front as backward runs: consecutive parameters (in
// reverse flat order) join a bucket until the next would take it past `bucket_numel`; a parameter
// larger than that is a bucket of its own. Each bucket is zero-padded at its end to a multiple of
// alignment × W elements, so it splits into W equal slices; rank r owns slice r of every bucket. A
// rank's partition is its slices, bucket by bucket: contiguous in the rank's optimizer state (fp32
// master, moments, stage-2 gradient accumulator), not in the flat buffer. One bucket is then one
// reduce-scatter of its gradients and one all-gather of its updated parameters. With one bucket (the
// default bucket_numel) this is DeepSpeed's layout: rank r owns [r·P, (r+1)·P) (reference §5.4).
// Stage 0 all-reduces its buckets, which need no even split: its buckets are not padded, and the
// buffer is padded once at its end (FlatBucketing::kWhole), so its layout is DeepSpeed's whatever the
// bucket size.
//
// Stage 3 (per parameter): a parameter of n elements is padded to a multiple of W and rank r holds
// elements [r·s, (r+1)·s) of it, s = ceil(n / W). A rank's flat partition is the concatenation of its
// shards in parameter order, cut into sub-groups of about `sub_group_size` elements.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace zerorun::zero {

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t AlignUp(int64_t x, int64_t a) { return CeilDiv(x, a) * a; }

// [begin, end) in elements.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  friend bool operator==(const Range&, const Range&) = default;
};
// The overlap of two ranges (empty when they do not meet).
Range Intersect(Range a, Range b);

// One gradient bucket of a flat group: whole parameters, then padding to W equal slices.
struct FlatBucket {
  Range range;                   // flat [begin, end); end - begin = W · slice_numel
  int64_t data_numel = 0;        // its parameters' elements; the rest of the range is padding
  int64_t slice_numel = 0;       // each rank's slice
  int64_t partition_offset = 0;  // where the slices start in every rank's partition
  Range Data() const { return {range.begin, range.begin + data_numel}; }
  Range Slice(int rank) const { return {range.begin + rank * slice_numel, range.begin + (rank + 1) * slice_numel}; }
};

inline constexpr int64_t kOneBucket = std::numeric_limits<int64_t>::max();

enum class FlatBucketing {
  kSplit,  // every bucket padded to W equal slices; a rank's partition is its slice of every bucket
  kWhole,  // buckets unpadded, the buffer padded at its end; rank r's partition is [r·P, (r+1)·P)
};

struct FlatGroupLayout {
  int world_size = 1;
  int64_t alignment_elems = 2;          // per-rank alignment (DeepSpeed's nccl_start_alignment_factor)
  FlatBucketing bucketing = FlatBucketing::kSplit;
  std::vector<int> order;               // order[k]: input index of the k-th parameter in the flat buffer
  std::vector<int64_t> numels;          // numels[i]: elements of input parameter i
  std::vector<int64_t> offsets;         // offsets[i]: flat offset of input parameter i
  // In flat order (backward fills the last one first). kWhole: slice_numel and partition_offset are
  // 0, and the buffer's end padding is in the last bucket's range (not its data).
  std::vector<FlatBucket> buckets;
  std::vector<int> bucket_of_param;     // bucket_of_param[i]: bucket of input parameter i (-1: no elements)
  int64_t data_numel = 0;               // sum of numels
  int64_t padded_numel = 0;             // sum of the buckets' padded sizes
  int64_t partition_numel = 0;          // padded_numel / world: every rank's partition

  Range ParamRange(int i) const { return {offsets[i], offsets[i] + numels[i]}; }
  // Pad elements inside rank's partition.
  int64_t PaddingIn(int rank) const;
  // The flat offset of element `offset` of rank's partition (REQUIRES: 0 <= offset < partition_numel).
  int64_t FlatOffset(int rank, int64_t offset) const;
};

// REQUIRES: world_size >= 1, alignment_elems >= 1, every numel >= 0, bucket_numel >= 1.
FlatGroupLayout LayoutFlatGroup(const std::vector<int64_t>& numels, int world_size, int64_t alignment_elems = 2,
                                bool round_robin = false, int64_t bucket_numel = kOneBucket,
                                FlatBucketing bucketing = FlatBucketing::kSplit);

// The part of input parameter `param` that lies in a flat range.
struct ParamSlice {
  int param = 0;               // input index
  int64_t param_offset = 0;    // first element within the parameter
  int64_t flat_offset = 0;     // the same element's offset in the flat buffer
  int64_t numel = 0;
  int64_t partition_offset = -1;  // ParamsInPartition: the element's offset in the rank's partition
};
// Parameters intersecting `range`, in flat order.
std::vector<ParamSlice> ParamsIn(const FlatGroupLayout& layout, Range range);
// The pieces of parameters in rank's partition (its slice of every bucket), in partition order.
std::vector<ParamSlice> ParamsInPartition(const FlatGroupLayout& layout, int rank);

// Stage 3.
struct Stage3Shard {
  int64_t shard_numel = 0;   // ceil(numel / W): every rank's shard size
  int64_t padded_numel = 0;  // shard_numel × W
  Range real;                // the real (unpadded) elements of the parameter this rank holds
};
Stage3Shard ShardParamStage3(int64_t numel, int world_size, int rank);

// Sub-groups over a sequence of per-parameter partition sizes: parameters are appended to the current
// sub-group until its size reaches `sub_group_size`, then a new one starts. Returns [first, last)
// parameter index ranges, covering all parameters (an empty input gives no sub-groups).
std::vector<Range> SubGroups(const std::vector<int64_t>& partition_numels, int64_t sub_group_size);

}  // namespace zerorun::zero

// ZeRO partition math: pure functions, no memory, no communication. Everything ZeRO does with
// memory and traffic is derived from these layouts, so they are exhaustively unit-tested.
//
// Stage 1/2 (one flat buffer per parameter group, DeepSpeed §5.4): the group's trainable parameters
// are concatenated (optionally reordered round-robin: parameter i goes to bucket i % W and the flat
// order is bucket 0's parameters, then bucket 1's, ...), zero-padded at the end to a multiple of
// alignment × W elements, and split into W equal contiguous partitions; rank r owns partition r.
// Parameters may straddle partition boundaries; all padding sits at the end.
//
// Stage 3 (per parameter): a parameter of n elements is padded to a multiple of W and rank r holds
// elements [r·s, (r+1)·s) of it, s = ceil(n / W). A rank's flat partition is the concatenation of its
// shards in parameter order, cut into sub-groups of about `sub_group_size` elements.
#pragma once

#include <cstdint>
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

struct FlatGroupLayout {
  int world_size = 1;
  int64_t alignment_elems = 2;          // per-rank alignment (DeepSpeed's nccl_start_alignment_factor)
  std::vector<int> order;               // order[k]: input index of the k-th parameter in the flat buffer
  std::vector<int64_t> numels;          // numels[i]: elements of input parameter i
  std::vector<int64_t> offsets;         // offsets[i]: flat offset of input parameter i
  int64_t data_numel = 0;               // sum of numels
  int64_t padded_numel = 0;             // multiple of alignment × world
  int64_t partition_numel = 0;          // padded_numel / world

  Range ParamRange(int i) const { return {offsets[i], offsets[i] + numels[i]}; }
  Range Partition(int rank) const { return {rank * partition_numel, (rank + 1) * partition_numel}; }
  // Pad elements inside rank's partition (its whole size when it lies entirely past the data).
  int64_t PaddingIn(int rank) const;
};

// REQUIRES: world_size >= 1, alignment_elems >= 1, every numel >= 0.
FlatGroupLayout LayoutFlatGroup(const std::vector<int64_t>& numels, int world_size, int64_t alignment_elems = 2,
                                bool round_robin = false);

// The part of input parameter `param` that lies in a flat range.
struct ParamSlice {
  int param = 0;               // input index
  int64_t param_offset = 0;    // first element within the parameter
  int64_t flat_offset = 0;     // the same element's offset in the flat buffer
  int64_t numel = 0;
};
// Parameters intersecting `range`, in flat order.
std::vector<ParamSlice> ParamsIn(const FlatGroupLayout& layout, Range range);

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

// Gradient buckets over a flat buffer filled back to front (backward runs in reverse of the layout
// order): consecutive parameters (in reverse flat order) are grouped until adding the next would
// exceed `bucket_numel`; a parameter larger than a bucket forms a bucket of its own. Each bucket is a
// contiguous flat range; buckets are returned in the order they fill (the last parameters first).
std::vector<Range> BackwardBuckets(const FlatGroupLayout& layout, int64_t bucket_numel);

}  // namespace zerorun::zero

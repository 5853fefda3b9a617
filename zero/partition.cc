// Implementation of the partition math declared in partition.h.
#include "zerorun/zero/partition.h"

#include <algorithm>

#include "zerorun/core/error.h"

namespace zerorun::zero {

Range Intersect(Range a, Range b) {
  Range r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

int64_t FlatGroupLayout::PaddingIn(int rank) const {
  Range p = Partition(rank);
  Range data = Intersect(p, Range{0, data_numel});
  return p.size() - data.size();
}

FlatGroupLayout LayoutFlatGroup(const std::vector<int64_t>& numels, int world_size, int64_t alignment_elems,
                                bool round_robin) {
  ZR_CHECK(world_size >= 1, "world_size {}", world_size);
  ZR_CHECK(alignment_elems >= 1, "alignment {}", alignment_elems);
  FlatGroupLayout l;
  l.world_size = world_size;
  l.alignment_elems = alignment_elems;
  l.numels = numels;
  const int n = static_cast<int>(numels.size());
  if (round_robin) {
    for (int bucket = 0; bucket < world_size; ++bucket) {
      for (int i = bucket; i < n; i += world_size) l.order.push_back(i);
    }
  } else {
    for (int i = 0; i < n; ++i) l.order.push_back(i);
  }
  l.offsets.assign(static_cast<size_t>(n), 0);
  int64_t off = 0;
  for (int i : l.order) {
    ZR_CHECK(numels[i] >= 0, "negative numel for parameter {}", i);
    l.offsets[i] = off;
    off += numels[i];
  }
  l.data_numel = off;
  l.padded_numel = AlignUp(off, alignment_elems * world_size);
  l.partition_numel = l.padded_numel / world_size;
  return l;
}

std::vector<ParamSlice> ParamsIn(const FlatGroupLayout& layout, Range range) {
  std::vector<ParamSlice> out;
  for (int i : layout.order) {
    Range pr = layout.ParamRange(i);
    Range x = Intersect(pr, range);
    if (x.empty()) continue;
    out.push_back({i, x.begin - pr.begin, x.begin, x.size()});
  }
  return out;
}

Stage3Shard ShardParamStage3(int64_t numel, int world_size, int rank) {
  ZR_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank {} of {}", rank, world_size);
  Stage3Shard s;
  s.shard_numel = CeilDiv(numel, world_size);
  s.padded_numel = s.shard_numel * world_size;
  s.real = Range{std::min(numel, rank * s.shard_numel), std::min(numel, (rank + 1) * s.shard_numel)};
  return s;
}

std::vector<Range> SubGroups(const std::vector<int64_t>& partition_numels, int64_t sub_group_size) {
  std::vector<Range> groups;
  const int64_t n = static_cast<int64_t>(partition_numels.size());
  int64_t first = 0, acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc += partition_numels[static_cast<size_t>(i)];
    if (acc >= sub_group_size || i == n - 1) {
      groups.push_back({first, i + 1});
      first = i + 1;
      acc = 0;
    }
  }
  return groups;
}

std::vector<Range> BackwardBuckets(const FlatGroupLayout& layout, int64_t bucket_numel) {
  ZR_CHECK(bucket_numel >= 1, "bucket size {}", bucket_numel);
  std::vector<Range> buckets;
  Range cur{-1, -1};
  for (auto it = layout.order.rbegin(); it != layout.order.rend(); ++it) {
    Range pr = layout.ParamRange(*it);
    if (pr.empty()) continue;
    if (cur.begin < 0) {
      cur = pr;
    } else if (cur.end - pr.begin <= bucket_numel) {
      cur.begin = pr.begin;  // extends the bucket backwards (pr ends where cur begins)
    } else {
      buckets.push_back(cur);
      cur = pr;
    }
  }
  if (cur.begin >= 0) buckets.push_back(cur);
  return buckets;
}

}  // namespace zerorun::zero

// Implementation of the partition math declared in partition.h.
#include "zerorun/zero/partition.h"

#include <algorithm>
#include <iterator>

#include "zerorun/core/error.h"

namespace zerorun::zero {

Range Intersect(Range a, Range b) {
  Range r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

int64_t FlatGroupLayout::PaddingIn(int rank) const {
  if (bucketing == FlatBucketing::kWhole) {
    const Range p{rank * partition_numel, (rank + 1) * partition_numel};
    return p.size() - Intersect(p, Range{0, data_numel}).size();
  }
  int64_t pad = 0;
  for (const FlatBucket& b : buckets) pad += b.slice_numel - Intersect(b.Slice(rank), b.Data()).size();
  return pad;
}

int64_t FlatGroupLayout::FlatOffset(int rank, int64_t offset) const {
  ZR_CHECK(offset >= 0 && offset < partition_numel, "partition offset {} outside [0, {})", offset, partition_numel);
  if (bucketing == FlatBucketing::kWhole) return rank * partition_numel + offset;
  // The last bucket whose slices start at or before `offset`.
  auto it = std::upper_bound(buckets.begin(), buckets.end(), offset,
                             [](int64_t o, const FlatBucket& b) { return o < b.partition_offset; });
  const FlatBucket& b = *std::prev(it);
  return b.Slice(rank).begin + (offset - b.partition_offset);
}

FlatGroupLayout LayoutFlatGroup(const std::vector<int64_t>& numels, int world_size, int64_t alignment_elems,
                                bool round_robin, int64_t bucket_numel, FlatBucketing bucketing) {
  ZR_CHECK(world_size >= 1, "world_size {}", world_size);
  ZR_CHECK(alignment_elems >= 1, "alignment {}", alignment_elems);
  ZR_CHECK(bucket_numel >= 1, "bucket size {}", bucket_numel);
  FlatGroupLayout l;
  l.world_size = world_size;
  l.alignment_elems = alignment_elems;
  l.bucketing = bucketing;
  l.numels = numels;
  const bool split = bucketing == FlatBucketing::kSplit;
  const int n = static_cast<int>(numels.size());
  if (round_robin) {
    for (int slot = 0; slot < world_size; ++slot) {
      for (int i = slot; i < n; i += world_size) l.order.push_back(i);
    }
  } else {
    for (int i = 0; i < n; ++i) l.order.push_back(i);
  }
  for (int64_t numel : numels) ZR_CHECK(numel >= 0, "negative numel {}", numel);
  // Buckets are cut back to front (the order backward produces gradients in): position k of the flat
  // order starts a new bucket when adding it would take the bucket past bucket_numel.
  std::vector<std::vector<int>> cut;  // parameters of each bucket, in reverse flat order
  int64_t size = 0;
  for (auto it = l.order.rbegin(); it != l.order.rend(); ++it) {
    const int64_t numel = numels[static_cast<size_t>(*it)];
    if (numel == 0) continue;
    if (cut.empty() || size + numel > bucket_numel) {
      cut.emplace_back();
      size = 0;
    }
    cut.back().push_back(*it);
    size += numel;
  }
  // Flat offsets: bucket by bucket in flat order, each padded to W slices of `alignment` multiples.
  l.offsets.assign(static_cast<size_t>(n), 0);
  l.bucket_of_param.assign(static_cast<size_t>(n), -1);
  int64_t off = 0, part = 0;
  for (auto b = cut.rbegin(); b != cut.rend(); ++b) {
    FlatBucket fb;
    fb.range.begin = off;
    for (auto p = b->rbegin(); p != b->rend(); ++p) {
      l.offsets[static_cast<size_t>(*p)] = off;
      l.bucket_of_param[static_cast<size_t>(*p)] = static_cast<int>(l.buckets.size());
      off += numels[static_cast<size_t>(*p)];
    }
    fb.data_numel = off - fb.range.begin;
    if (split) {
      off = fb.range.begin + AlignUp(fb.data_numel, alignment_elems * world_size);
      fb.slice_numel = (off - fb.range.begin) / world_size;
      fb.partition_offset = part;
      part += fb.slice_numel;
    }
    fb.range.end = off;
    l.data_numel += fb.data_numel;
    l.buckets.push_back(fb);
  }
  if (!split) {
    off = AlignUp(off, alignment_elems * world_size);
    if (!l.buckets.empty()) l.buckets.back().range.end = off;
    part = off / world_size;
  }
  // Parameters without elements sit where the flat order puts them (between their neighbours).
  int64_t at = 0;
  for (int i : l.order) {
    if (numels[static_cast<size_t>(i)] == 0) {
      l.offsets[static_cast<size_t>(i)] = at;
    } else {
      at = l.offsets[static_cast<size_t>(i)] + numels[static_cast<size_t>(i)];
    }
  }
  l.padded_numel = off;
  l.partition_numel = part;
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

std::vector<ParamSlice> ParamsInPartition(const FlatGroupLayout& layout, int rank) {
  std::vector<ParamSlice> out;
  if (layout.bucketing == FlatBucketing::kWhole) {
    const Range p{rank * layout.partition_numel, (rank + 1) * layout.partition_numel};
    for (ParamSlice s : ParamsIn(layout, p)) {
      s.partition_offset = s.flat_offset - p.begin;
      out.push_back(s);
    }
    return out;
  }
  for (const FlatBucket& b : layout.buckets) {
    const Range slice = b.Slice(rank);
    for (ParamSlice s : ParamsIn(layout, Intersect(slice, b.Data()))) {
      s.partition_offset = b.partition_offset + (s.flat_offset - slice.begin);
      out.push_back(s);
    }
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

}  // namespace zerorun::zero

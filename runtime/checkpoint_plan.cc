// The reshard planner: intersect each want with the chunks of its tensor (sorted by offset, found by
// binary search), and translate each intersection into a byte range and its checksum blocks.
#include "zerorun/runtime/checkpoint_plan.h"

#include <algorithm>
#include <tuple>

#include "zerorun/core/error.h"

namespace zerorun::runtime {

namespace {

// Indices of t.chunks sorted by (offset, numel), empty chunks dropped.
std::vector<size_t> SortedChunks(const PlanTensor& t) {
  std::vector<size_t> order;
  order.reserve(t.chunks.size());
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    if (t.chunks[i].numel > 0) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(t.chunks[a].offset, t.chunks[a].numel, t.chunks[a].rank) <
           std::tie(t.chunks[b].offset, t.chunks[b].numel, t.chunks[b].rank);
  });
  return order;
}

}  // namespace

std::string CheckChunkCoverage(const PlanTensor& t) {
  for (const PlanChunk& c : t.chunks) {
    if (c.offset < 0 || c.numel < 0 || c.offset > t.numel || c.numel > t.numel - c.offset) {
      return Format("{}: a chunk of rank {} covers elements [{}, {}), outside the tensor's {} elements", t.name, c.rank,
                    c.offset, c.offset + c.numel, t.numel);
    }
  }
  std::vector<size_t> order = SortedChunks(t);
  int64_t at = 0;
  int last_rank = -1;
  for (size_t i : order) {
    const PlanChunk& c = t.chunks[i];
    if (c.offset > at) return Format("{}: elements [{}, {}) are saved by no rank", t.name, at, c.offset);
    if (c.offset < at) {
      return Format("{}: elements [{}, {}) are saved twice (ranks {} and {})", t.name, c.offset,
                    std::min(at, c.offset + c.numel), last_rank, c.rank);
    }
    at = c.offset + c.numel;
    last_rank = c.rank;
  }
  if (at != t.numel) return Format("{}: elements [{}, {}) are saved by no rank", t.name, at, t.numel);
  return "";
}

std::vector<PlanRead> PlanReads(const std::vector<PlanTensor>& tensors, const std::vector<PlanWant>& wants,
                                uint64_t block_bytes) {
  ZR_CHECK(block_bytes > 0);
  std::vector<std::vector<size_t>> sorted(tensors.size());
  std::vector<bool> sorted_done(tensors.size(), false);
  std::vector<PlanRead> reads;
  for (size_t w = 0; w < wants.size(); ++w) {
    const PlanWant& want = wants[w];
    if (want.tensor >= tensors.size()) {
      ZR_THROW(InvalidArgument, "reshard plan: want {} names tensor {} of {}", w, want.tensor, tensors.size());
    }
    const PlanTensor& t = tensors[want.tensor];
    ZR_CHECK(t.elem_bytes > 0 && block_bytes % t.elem_bytes == 0, "block size {} vs element size {}", block_bytes,
             t.elem_bytes);
    if (want.offset < 0 || want.numel < 0 || want.offset > t.numel || want.numel > t.numel - want.offset ||
        want.dst_offset < 0) {
      ZR_THROW(InvalidArgument, "reshard plan: {}: wanted elements [{}, {}) are outside its {} elements", t.name,
               want.offset, want.offset + want.numel, t.numel);
    }
    if (want.numel == 0) continue;
    if (!sorted_done[want.tensor]) {
      sorted[want.tensor] = SortedChunks(t);
      sorted_done[want.tensor] = true;
    }
    const std::vector<size_t>& order = sorted[want.tensor];
    // The first chunk that ends after want.offset.
    auto it = std::upper_bound(order.begin(), order.end(), want.offset, [&](int64_t x, size_t i) {
      return x < t.chunks[i].offset + t.chunks[i].numel;
    });
    int64_t at = want.offset;
    const int64_t end = want.offset + want.numel;
    for (; it != order.end() && at < end; ++it) {
      const PlanChunk& c = t.chunks[*it];
      if (c.offset > at) break;  // a hole
      const int64_t stop = std::min(end, c.offset + c.numel);
      if (stop <= at) continue;  // a chunk overlapping its predecessor (CheckChunkCoverage reports these)
      PlanRead r;
      r.want = w;
      r.tensor = want.tensor;
      r.chunk = *it;
      r.rank = c.rank;
      r.offset = at;
      r.numel = stop - at;
      r.dst_offset = want.dst_offset + (at - want.offset);
      const uint64_t rel = static_cast<uint64_t>(at - c.offset) * t.elem_bytes;
      r.bytes = static_cast<uint64_t>(r.numel) * t.elem_bytes;
      r.file_offset = c.file_offset + rel;
      r.block_begin = rel / block_bytes;
      r.block_end = (rel + r.bytes + block_bytes - 1) / block_bytes;
      reads.push_back(r);
      at = stop;
    }
    if (at < end) {
      int64_t hole_end = end;
      if (it != order.end()) hole_end = std::min(end, t.chunks[*it].offset);
      ZR_THROW(CheckpointError, "{}: elements [{}, {}) are wanted but saved by no rank", t.name, at, hole_end);
    }
  }
  std::stable_sort(reads.begin(), reads.end(), [](const PlanRead& a, const PlanRead& b) {
    return std::tie(a.rank, a.file_offset) < std::tie(b.rank, b.file_offset);
  });
  return reads;
}

}  // namespace zerorun::runtime

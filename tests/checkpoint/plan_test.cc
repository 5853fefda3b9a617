// The reshard planner, exhaustively: every way to cut small tensors into chunks (all compositions),
// every wanted range, checked by executing the plan against a simulated shard whose bytes are the
// element ids; then every saved layout (ZeRO stage 0/1-2/3, Megatron buckets) at world sizes 1..5 read
// into every other layout at 1..5; then the errors.
#include <doctest/doctest.h>

#include <numeric>
#include <set>

#include "ckpt_test_util.h"
#include "zerorun/runtime/checkpoint_plan.h"

using namespace ckpttest;

namespace {

// A simulated world: rank r's shard holds, for each of its chunks, the element ids as int32 (or
// as int16 when elem_bytes is 2), at the chunk's file offset.
struct SimShards {
  std::map<int, std::vector<uint8_t>> bytes;
};

// Lays out chunks of `t` into shards (file offsets assigned per rank, after a 24-byte header) and
// writes each element's id.
void Place(PlanTensor& t, SimShards& sim, std::map<int, uint64_t>& next) {
  for (PlanChunk& c : t.chunks) {
    uint64_t& at = next.try_emplace(c.rank, 24).first->second;
    c.file_offset = at;
    std::vector<uint8_t>& b = sim.bytes[c.rank];
    b.resize(at + static_cast<uint64_t>(c.numel) * t.elem_bytes, 0xEE);
    for (int64_t i = 0; i < c.numel; ++i) {
      const uint32_t id = static_cast<uint32_t>(c.offset + i) * 2654435761u ^ static_cast<uint32_t>(t.numel);
      std::memcpy(&b[at + static_cast<uint64_t>(i) * t.elem_bytes], &id, t.elem_bytes);
    }
    at += static_cast<uint64_t>(c.numel) * t.elem_bytes;
  }
}

uint32_t ExpectedId(const PlanTensor& t, int64_t i, uint64_t elem_bytes) {
  uint32_t id = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(t.numel);
  if (elem_bytes == 2) id &= 0xffffu;
  return id;
}

// Executes `reads` for `wants` into per-want buffers and checks every element, that each element was
// written once, that the bytes lie inside the chunk, and that the block range covers exactly the
// bytes. Failures are counted and the first one described (millions of elements: one CHECK each
// would dominate the run time, under sanitizers most of all).
void CheckPlan(const std::vector<PlanTensor>& tensors, const std::vector<PlanWant>& wants,
               const std::vector<PlanRead>& reads, const SimShards& sim, uint64_t block) {
  std::string first;
  int64_t bad = 0;
  auto expect = [&](bool ok, auto&& what) {
    if (ok) return;
    if (bad++ == 0) first = what();
  };
  std::vector<std::vector<int>> written(wants.size());
  std::vector<std::vector<uint32_t>> dst(wants.size());
  for (size_t w = 0; w < wants.size(); ++w) {
    written[w].assign(static_cast<size_t>(wants[w].numel), 0);
    dst[w].assign(static_cast<size_t>(wants[w].numel), 0);
  }
  for (size_t k = 0; k < reads.size(); ++k) {
    const PlanRead& r = reads[k];
    auto at = [&](const char* what) { return Format("read {} (want {}, chunk {}): {}", k, r.want, r.chunk, what); };
    if (k > 0) {
      const PlanRead& p = reads[k - 1];
      expect(p.rank < r.rank || (p.rank == r.rank && p.file_offset <= r.file_offset), [&] { return at("not sorted"); });
    }
    if (r.want >= wants.size() || r.tensor != wants[r.want].tensor || r.chunk >= tensors[r.tensor].chunks.size()) {
      expect(false, [&] { return at("names no want, tensor or chunk"); });
      continue;
    }
    const PlanWant& want = wants[r.want];
    const PlanTensor& t = tensors[r.tensor];
    const PlanChunk& c = t.chunks[r.chunk];
    expect(r.rank == c.rank && r.numel > 0, [&] { return at("rank or size"); });
    expect(r.offset >= c.offset && r.offset + r.numel <= c.offset + c.numel, [&] { return at("outside the chunk"); });
    expect(r.offset >= want.offset && r.offset + r.numel <= want.offset + want.numel, [&] { return at("outside the want"); });
    expect(r.dst_offset == want.dst_offset + (r.offset - want.offset), [&] { return at("destination"); });
    expect(r.bytes == static_cast<uint64_t>(r.numel) * t.elem_bytes, [&] { return at("bytes"); });
    const uint64_t rel = r.file_offset - c.file_offset;
    expect(r.block_begin == rel / block && r.block_end == (rel + r.bytes + block - 1) / block, [&] { return at("blocks"); });
    const std::vector<uint8_t>& b = sim.bytes.at(r.rank);
    if (r.file_offset + r.bytes > b.size()) {
      expect(false, [&] { return at("past the shard's end"); });
      continue;
    }
    for (int64_t i = 0; i < r.numel; ++i) {
      uint32_t v = 0;
      std::memcpy(&v, &b[r.file_offset + static_cast<uint64_t>(i) * t.elem_bytes], t.elem_bytes);
      const int64_t pos = r.dst_offset - want.dst_offset + i;
      if (pos < 0 || pos >= want.numel) {
        expect(false, [&] { return at("destination out of range"); });
        continue;
      }
      dst[r.want][static_cast<size_t>(pos)] = v;
      written[r.want][static_cast<size_t>(pos)]++;
    }
  }
  for (size_t w = 0; w < wants.size(); ++w) {
    const PlanTensor& t = tensors[wants[w].tensor];
    for (int64_t i = 0; i < wants[w].numel; ++i) {
      expect(written[w][static_cast<size_t>(i)] == 1, [&] { return Format("want {} element {} written {} times", w, i, written[w][static_cast<size_t>(i)]); });
      expect(dst[w][static_cast<size_t>(i)] == ExpectedId(t, wants[w].offset + i, t.elem_bytes),
             [&] { return Format("want {} element {} has the wrong value", w, i); });
    }
  }
  CAPTURE(first);
  CHECK(bad == 0);
}

// Every composition of n into parts (as cut points), each part owned by rank (index % ranks).
std::vector<std::vector<int64_t>> Compositions(int64_t n) {
  std::vector<std::vector<int64_t>> out;
  const int64_t cuts = n > 0 ? n - 1 : 0;
  for (uint64_t mask = 0; mask < (uint64_t{1} << cuts); ++mask) {
    std::vector<int64_t> parts;
    int64_t last = 0;
    for (int64_t i = 1; i < n; ++i) {
      if (mask & (uint64_t{1} << (i - 1))) {
        parts.push_back(i - last);
        last = i;
      }
    }
    parts.push_back(n - last);
    out.push_back(parts);
  }
  return out;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("reshard plan: every chunking of tensors up to 8 elements, every wanted range, executed and checked") {
  int64_t plans = 0;
  for (uint64_t elem : {2u, 4u}) {
    for (uint64_t block : {elem, elem * 2, uint64_t{12}, uint64_t{64}}) {
      if (block % elem != 0) continue;
      for (int64_t n = 0; n <= 8; ++n) {
        for (const std::vector<int64_t>& parts : Compositions(n)) {
          for (int ranks : {1, 3}) {
            PlanTensor t{"t", n, elem, {}};
            int64_t at = 0;
            for (size_t i = 0; i < parts.size(); ++i) {
              if (n == 0) break;
              t.chunks.push_back({static_cast<int>(i) % ranks, at, parts[i], 0});
              at += parts[i];
            }
            // An empty chunk in the middle is allowed and never read.
            t.chunks.push_back({ranks - 1, n / 2, 0, 0});
            std::reverse(t.chunks.begin(), t.chunks.end());  // order must not matter
            SimShards sim;
            std::map<int, uint64_t> next;
            Place(t, sim, next);
            std::vector<PlanTensor> tensors{t};
            REQUIRE(CheckChunkCoverage(t).empty());
            for (int64_t a = 0; a <= n; ++a) {
              for (int64_t b = a; b <= n; ++b) {
                std::vector<PlanWant> wants{{0, a, b - a, 3}, {0, 0, n, 0}};
                std::vector<PlanRead> reads = PlanReads(tensors, wants, block);
                CheckPlan(tensors, wants, reads, sim, block);
                ++plans;
              }
            }
          }
        }
      }
    }
  }
  CHECK(plans > 10000);
}

TEST_CASE("reshard plan: every saved layout at world 1..5 into every wanted layout at world 1..5") {
  const CheckpointManifest m = SyntheticManifest(DType::kF32, 3);
  const uint64_t block = 64;
  int64_t combos = 0;
  for (Layout saved : kAllLayouts) {
    for (int n = 1; n <= 5; ++n) {
      // The saved chunks of every rank, one PlanTensor per tensor (slot "param").
      std::vector<PlanTensor> tensors;
      for (const CheckpointTensor& t : m.tensors) tensors.push_back({t.name, t.numel(), 4, {}});
      for (int r = 0; r < n; ++r) {
        for (const CheckpointChunkSpec& c : LayoutChunks(m, saved, n, r)) {
          if (c.slot != kSlotParam) continue;
          for (size_t i = 0; i < m.tensors.size(); ++i) {
            if (m.tensors[i].name == c.tensor) tensors[i].chunks.push_back({r, c.offset, c.numel, 0});
          }
        }
      }
      SimShards sim;
      std::map<int, uint64_t> next;
      for (PlanTensor& t : tensors) {
        CAPTURE(t.name);
        Place(t, sim, next);
        REQUIRE(CheckChunkCoverage(t).empty());
      }
      for (Layout wanted : kAllLayouts) {
        for (int k = 1; k <= 5; ++k) {
          CAPTURE(LayoutName(saved));
          CAPTURE(n);
          CAPTURE(LayoutName(wanted));
          CAPTURE(k);
          uint64_t read_bytes = 0, wanted_bytes = 0;
          for (int r = 0; r < k; ++r) {
            // What rank r of the new layout holds: its pieces, packed into one destination.
            std::vector<PlanWant> wants;
            int64_t dst = 0;
            for (const CheckpointChunkSpec& c : LayoutChunks(m, wanted, k, r)) {
              if (c.slot != kSlotParam) continue;
              for (size_t i = 0; i < m.tensors.size(); ++i) {
                if (m.tensors[i].name == c.tensor) wants.push_back({i, c.offset, c.numel, dst});
              }
              dst += c.numel;
              wanted_bytes += static_cast<uint64_t>(c.numel) * 4;
            }
            std::vector<PlanRead> reads = PlanReads(tensors, wants, block);
            CheckPlan(tensors, wants, reads, sim, block);
            for (const PlanRead& rd : reads) read_bytes += rd.bytes;
          }
          // Each element wanted once is read once: no rank reads bytes it does not need.
          CHECK(read_bytes == wanted_bytes);
          ++combos;
        }
      }
    }
  }
  CHECK(combos == 5 * 5 * 5 * 5);
}

TEST_CASE("reshard plan: coverage errors name the tensor, the elements and the ranks") {
  PlanTensor hole{"'w' (fp32)", 10, 4, {{0, 0, 4, 0}, {1, 6, 4, 0}}};
  CHECK(CheckChunkCoverage(hole) == "'w' (fp32): elements [4, 6) are saved by no rank");
  PlanTensor twice{"'w' (fp32)", 10, 4, {{0, 0, 6, 0}, {2, 4, 6, 0}}};
  CHECK(CheckChunkCoverage(twice) == "'w' (fp32): elements [4, 6) are saved twice (ranks 0 and 2)");
  PlanTensor past{"'w' (fp32)", 10, 4, {{0, 0, 10, 0}, {3, 8, 4, 0}}};
  CHECK(Contains(CheckChunkCoverage(past), "a chunk of rank 3 covers elements [8, 12), outside the tensor's 10"));
  PlanTensor tail{"'w' (fp32)", 10, 4, {{0, 0, 9, 0}}};
  CHECK(CheckChunkCoverage(tail) == "'w' (fp32): elements [9, 10) are saved by no rank");
  CHECK(CheckChunkCoverage(PlanTensor{"e", 0, 4, {}}).empty());

  std::string err = ErrorOf<CheckpointError>([&] { PlanReads({hole}, {{0, 2, 6, 0}}, 8); });
  CHECK(err == "'w' (fp32): elements [4, 6) are wanted but saved by no rank");
  err = ErrorOf<CheckpointError>([&] { PlanReads({tail}, {{0, 5, 5, 0}}, 8); });
  CHECK(err == "'w' (fp32): elements [9, 10) are wanted but saved by no rank");
  err = ErrorOf<InvalidArgument>([&] { PlanReads({tail}, {{0, 5, 6, 0}}, 8); });
  CHECK(Contains(err, "wanted elements [5, 11) are outside its 10 elements"));
  err = ErrorOf<InvalidArgument>([&] { PlanReads({tail}, {{1, 0, 1, 0}}, 8); });
  CHECK(Contains(err, "names tensor 1 of 1"));
  // A hole outside the wanted range does not matter.
  CHECK(PlanReads({hole}, {{0, 6, 4, 0}}, 8).size() == 1);
}

}  // TEST_SUITE

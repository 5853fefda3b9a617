// ZeRO partition math against DeepSpeed's layout rules (reference §5.4) and invariants checked over
// many random parameter lists, world sizes and bucket sizes: full coverage, no overlap, equal
// partitions, buckets of whole parameters padded to W equal slices (stages 1/2) or unpadded with the
// padding at the end (stage 0), stage-3 shards that tile each padded parameter.
#include <doctest/doctest.h>

#include <numeric>
#include <random>

#include "zerorun/zero/partition.h"

namespace z = zerorun::zero;

TEST_SUITE("unit") {

TEST_CASE("stage 1/2 layout, one bucket: padding to 2W, equal partitions, straddling parameters") {
  // Three parameters of 5, 3 and 4 elements (12), W = 4: alignment 2*4 = 8 → padded to 16.
  for (z::FlatBucketing bucketing : {z::FlatBucketing::kSplit, z::FlatBucketing::kWhole}) {
    z::FlatGroupLayout l = z::LayoutFlatGroup({5, 3, 4}, 4, 2, false, z::kOneBucket, bucketing);
    CHECK(l.data_numel == 12);
    CHECK(l.padded_numel == 16);
    CHECK(l.partition_numel == 4);
    CHECK(l.offsets == std::vector<int64_t>{0, 5, 8});
    REQUIRE(l.buckets.size() == 1);
    CHECK(l.buckets[0].range == z::Range{0, 16});
    CHECK(l.FlatOffset(1, 0) == 4);
    CHECK(l.PaddingIn(0) == 0);
    CHECK(l.PaddingIn(2) == 0);
    CHECK(l.PaddingIn(3) == 4);  // partition 3 lies entirely past the data
    // Partition 1 = [4, 8): the last element of p0 and all of p1.
    auto in1 = z::ParamsInPartition(l, 1);
    REQUIRE(in1.size() == 2);
    CHECK(in1[0].param == 0);
    CHECK(in1[0].param_offset == 4);
    CHECK(in1[0].numel == 1);
    CHECK(in1[0].partition_offset == 0);
    CHECK(in1[1].param == 1);
    CHECK(in1[1].param_offset == 0);
    CHECK(in1[1].numel == 3);
    CHECK(in1[1].partition_offset == 1);
    CHECK(z::ParamsInPartition(l, 3).empty());
  }
}

TEST_CASE("stage 1/2 layout, several buckets: each bucket padded to W slices, a partition is a slice of each") {
  // p0 = 5, p1 = 3, p2 = 4, bucket size 6, W = 2 (slices of multiples of 2): backward fills p2 first;
  // p2 + p1 = 7 > 6, so the buckets are [p0], [p1], [p2] in flat order, padded to 8, 4, 4.
  z::FlatGroupLayout l = z::LayoutFlatGroup({5, 3, 4}, 2, 2, false, 6);
  REQUIRE(l.buckets.size() == 3);
  CHECK(l.offsets == std::vector<int64_t>{0, 8, 12});
  CHECK(l.bucket_of_param == std::vector<int>{0, 1, 2});
  CHECK(l.buckets[0].range == z::Range{0, 8});
  CHECK(l.buckets[0].data_numel == 5);
  CHECK(l.buckets[1].range == z::Range{8, 12});
  CHECK(l.buckets[2].range == z::Range{12, 16});
  CHECK(l.padded_numel == 16);
  CHECK(l.partition_numel == 8);
  CHECK(l.buckets[1].partition_offset == 4);
  CHECK(l.buckets[1].Slice(1) == z::Range{10, 12});
  // Rank 1 owns p0[4], p1[2] and p2[2..4): partition offsets 0, 4, 6.
  auto in1 = z::ParamsInPartition(l, 1);
  REQUIRE(in1.size() == 3);
  CHECK(in1[0].param == 0);
  CHECK(in1[0].param_offset == 4);
  CHECK(in1[0].numel == 1);
  CHECK(in1[0].partition_offset == 0);
  CHECK(in1[1].param == 1);
  CHECK(in1[1].param_offset == 2);
  CHECK(in1[1].partition_offset == 4);
  CHECK(in1[2].param == 2);
  CHECK(in1[2].param_offset == 2);
  CHECK(in1[2].numel == 2);
  CHECK(in1[2].partition_offset == 6);
  CHECK(l.FlatOffset(1, 6) == 14);
  CHECK(l.PaddingIn(1) == 3 + 1);  // [5, 8) of bucket 0 and [11, 12) of bucket 1
  // Stage 0 (kWhole): the same buckets, unpadded, the buffer padded at its end to 2W.
  z::FlatGroupLayout w = z::LayoutFlatGroup({5, 3, 4}, 2, 2, false, 6, z::FlatBucketing::kWhole);
  CHECK(w.offsets == std::vector<int64_t>{0, 5, 8});
  REQUIRE(w.buckets.size() == 3);
  CHECK(w.buckets[1].range == z::Range{5, 8});
  CHECK(w.buckets[2].range == z::Range{8, 12});
  CHECK(w.buckets[2].data_numel == 4);
  CHECK(w.padded_numel == 12);
}

TEST_CASE("round-robin order: parameter i goes to bucket i % W") {
  z::FlatGroupLayout l = z::LayoutFlatGroup({1, 2, 3, 4, 5}, 2, 2, /*round_robin=*/true);
  CHECK(l.order == std::vector<int>{0, 2, 4, 1, 3});
  CHECK(l.offsets[0] == 0);
  CHECK(l.offsets[2] == 1);
  CHECK(l.offsets[4] == 4);
  CHECK(l.offsets[1] == 9);
  CHECK(l.offsets[3] == 11);
  CHECK(l.padded_numel == 16);
}

TEST_CASE("layout invariants hold for random parameter lists, bucket sizes and W = 1..8") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    int n = static_cast<int>(rng() % 12);
    std::vector<int64_t> numels;
    for (int i = 0; i < n; ++i) numels.push_back(rng() % 3 == 0 ? 0 : static_cast<int64_t>(rng() % 1000));
    int w = 1 + static_cast<int>(rng() % 8);
    bool rr = rng() % 2;
    const int64_t bucket = rng() % 3 == 0 ? z::kOneBucket : 1 + static_cast<int64_t>(rng() % 1500);
    const z::FlatBucketing bucketing = rng() % 2 ? z::FlatBucketing::kSplit : z::FlatBucketing::kWhole;
    const bool split = bucketing == z::FlatBucketing::kSplit;
    CAPTURE(trial);
    z::FlatGroupLayout l = z::LayoutFlatGroup(numels, w, 2, rr, bucket, bucketing);
    int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
    REQUIRE(l.data_numel == total);
    REQUIRE(l.partition_numel * w == l.padded_numel);
    // Buckets tile [0, padded) in flat order; each holds whole parameters, within the size unless it
    // is one parameter; split buckets are padded to 2W-aligned slices, whole ones not (only the end).
    int64_t at = 0, data = 0, part = 0;
    for (size_t b = 0; b < l.buckets.size(); ++b) {
      const z::FlatBucket& fb = l.buckets[b];
      REQUIRE(fb.range.begin == at);
      REQUIRE(fb.data_numel > 0);
      auto in = z::ParamsIn(l, fb.Data());
      REQUIRE((fb.data_numel <= bucket || in.size() == 1));
      for (const auto& s : in) REQUIRE(s.numel == numels[s.param]);  // whole parameters only
      if (split) {
        REQUIRE(fb.range.size() % (2 * w) == 0);
        REQUIRE(fb.range.size() - fb.data_numel < 2 * w);
        REQUIRE(fb.slice_numel * w == fb.range.size());
        REQUIRE(fb.partition_offset == part);
        part += fb.slice_numel;
      } else if (b + 1 < l.buckets.size()) {
        REQUIRE(fb.range.size() == fb.data_numel);
      }
      at = fb.range.end;
      data += fb.data_numel;
    }
    REQUIRE(at == l.padded_numel);
    REQUIRE(data == total);
    if (!split || l.buckets.size() <= 1) {
      REQUIRE(l.padded_numel == z::AlignUp(total, 2 * w));
    }
    // Parameters keep the flat order and never overlap; empty ones own no bucket.
    int64_t last_end = 0;
    for (int i : l.order) {
      REQUIRE(l.offsets[i] >= last_end);
      last_end = l.offsets[i] + numels[i];
      REQUIRE((l.bucket_of_param[i] < 0) == (numels[i] == 0));
    }
    // Every element of every parameter belongs to exactly one partition, at the offset FlatOffset maps.
    int64_t covered = 0, padding = 0;
    for (int r = 0; r < w; ++r) {
      int64_t prev = -1;
      for (const auto& s : z::ParamsInPartition(l, r)) {
        REQUIRE(s.numel > 0);
        REQUIRE(s.param_offset + s.numel <= numels[s.param]);
        REQUIRE(s.flat_offset == l.offsets[s.param] + s.param_offset);
        REQUIRE(s.partition_offset > prev);
        REQUIRE(s.partition_offset + s.numel <= l.partition_numel);
        REQUIRE(l.FlatOffset(r, s.partition_offset) == s.flat_offset);
        REQUIRE(l.FlatOffset(r, s.partition_offset + s.numel - 1) == s.flat_offset + s.numel - 1);
        prev = s.partition_offset;
        covered += s.numel;
      }
      padding += l.PaddingIn(r);
    }
    REQUIRE(covered == total);
    REQUIRE(padding == l.padded_numel - total);
  }
}

TEST_CASE("stage 3 shards tile each padded parameter") {
  for (int64_t numel : {0, 1, 7, 8, 4099}) {
    for (int w = 1; w <= 8; ++w) {
      int64_t real = 0;
      for (int r = 0; r < w; ++r) {
        z::Stage3Shard s = z::ShardParamStage3(numel, w, r);
        REQUIRE(s.shard_numel == (numel + w - 1) / w);
        REQUIRE(s.padded_numel == s.shard_numel * w);
        REQUIRE(s.padded_numel - numel < w);
        REQUIRE(s.real.begin == std::min(numel, r * s.shard_numel));
        real += s.real.size();
      }
      REQUIRE(real == numel);
    }
  }
  // DeepSpeed's example: 10 elements over 4 ranks → shards of 3, the last holds 1 real + 2 pad.
  CHECK(z::ShardParamStage3(10, 4, 3).real == z::Range{9, 10});
}

TEST_CASE("sub-groups close when their size reaches sub_group_size") {
  auto g = z::SubGroups({4, 4, 4, 10, 1}, 8);
  REQUIRE(g.size() == 3);
  CHECK(g[0] == z::Range{0, 2});
  CHECK(g[1] == z::Range{2, 4});
  CHECK(g[2] == z::Range{4, 5});
  CHECK(z::SubGroups({}, 8).empty());
  CHECK(z::SubGroups({100}, 1000000000).size() == 1);
}

TEST_CASE("buckets fill from the end and respect the size") {
  // Reverse order: p4 [2], p3 [2] → 4 elems; p2 (10) alone; p1 + p0 = 6 > 5 → separate.
  z::FlatGroupLayout l = z::LayoutFlatGroup({3, 3, 10, 2, 2}, 1, 2, false, 5, z::FlatBucketing::kWhole);
  REQUIRE(l.buckets.size() == 4);
  CHECK(l.buckets[0].Data() == z::Range{0, 3});
  CHECK(l.buckets[1].Data() == z::Range{3, 6});
  CHECK(l.buckets[2].Data() == z::Range{6, 16});
  CHECK(l.buckets[3].Data() == z::Range{16, 20});
  // Split (W = 1, slices of multiples of 2): each odd-sized bucket gets one pad element.
  z::FlatGroupLayout s = z::LayoutFlatGroup({3, 3, 10, 2, 2}, 1, 2, false, 5);
  CHECK(s.offsets == std::vector<int64_t>{0, 4, 8, 18, 20});
  CHECK(s.padded_numel == 22);
}

}  // TEST_SUITE

// ZeRO partition math against DeepSpeed's layout rules (reference §5.4) and invariants checked over
// many random parameter lists and world sizes: full coverage, no overlap, equal partitions, padding
// only at the end, stage-3 shards that tile each padded parameter.
#include <doctest/doctest.h>

#include <numeric>
#include <random>

#include "zerorun/zero/partition.h"

namespace z = zerorun::zero;

TEST_SUITE("unit") {

TEST_CASE("stage 1/2 layout: padding to 2W, equal partitions, straddling parameters") {
  // Three parameters of 5, 3 and 4 elements (12), W = 4: alignment 2*4 = 8 → padded to 16.
  z::FlatGroupLayout l = z::LayoutFlatGroup({5, 3, 4}, 4);
  CHECK(l.data_numel == 12);
  CHECK(l.padded_numel == 16);
  CHECK(l.partition_numel == 4);
  CHECK(l.offsets == std::vector<int64_t>{0, 5, 8});
  CHECK(l.Partition(1) == z::Range{4, 8});
  CHECK(l.PaddingIn(0) == 0);
  CHECK(l.PaddingIn(2) == 0);
  CHECK(l.PaddingIn(3) == 4);  // partition 3 lies entirely past the data
  // Partition 1 = [4, 8): the last element of p0 and all of p1.
  auto in1 = z::ParamsIn(l, l.Partition(1));
  REQUIRE(in1.size() == 2);
  CHECK(in1[0].param == 0);
  CHECK(in1[0].param_offset == 4);
  CHECK(in1[0].numel == 1);
  CHECK(in1[1].param == 1);
  CHECK(in1[1].param_offset == 0);
  CHECK(in1[1].numel == 3);
  CHECK(z::ParamsIn(l, l.Partition(3)).empty());
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

TEST_CASE("layout invariants hold for random parameter lists and W = 1..8") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    int n = static_cast<int>(rng() % 12);
    std::vector<int64_t> numels;
    for (int i = 0; i < n; ++i) numels.push_back(rng() % 3 == 0 ? 0 : static_cast<int64_t>(rng() % 1000));
    int w = 1 + static_cast<int>(rng() % 8);
    bool rr = rng() % 2;
    z::FlatGroupLayout l = z::LayoutFlatGroup(numels, w, 2, rr);
    int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
    REQUIRE(l.data_numel == total);
    REQUIRE(l.padded_numel % (2 * w) == 0);
    REQUIRE(l.padded_numel - total < 2 * w);
    REQUIRE(l.partition_numel * w == l.padded_numel);
    // Parameters tile [0, total) without gaps or overlaps in flat order.
    int64_t expect = 0;
    for (int i : l.order) {
      REQUIRE(l.offsets[i] == expect);
      expect += numels[i];
    }
    // Every element of every parameter belongs to exactly one partition.
    int64_t covered = 0, padding = 0;
    for (int r = 0; r < w; ++r) {
      for (const auto& s : z::ParamsIn(l, l.Partition(r))) {
        REQUIRE(s.numel > 0);
        REQUIRE(s.param_offset + s.numel <= numels[s.param]);
        REQUIRE(s.flat_offset == l.offsets[s.param] + s.param_offset);
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

TEST_CASE("backward buckets fill from the end, respect the size, and tile the data") {
  z::FlatGroupLayout l = z::LayoutFlatGroup({3, 3, 10, 2, 2}, 1);
  auto b = z::BackwardBuckets(l, 5);
  // Reverse order: p4 [18,20), p3 [16,18) → 4 elems; p2 (10) alone; p1 + p0 = 6 > 5 → separate.
  REQUIRE(b.size() == 4);
  CHECK(b[0] == z::Range{16, 20});
  CHECK(b[1] == z::Range{6, 16});
  CHECK(b[2] == z::Range{3, 6});
  CHECK(b[3] == z::Range{0, 3});
  std::mt19937 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<int64_t> numels;
    for (int i = 0; i < 20; ++i) numels.push_back(static_cast<int64_t>(rng() % 50));
    z::FlatGroupLayout lr = z::LayoutFlatGroup(numels, 3);
    int64_t cap = 1 + static_cast<int64_t>(rng() % 100);
    auto bs = z::BackwardBuckets(lr, cap);
    int64_t end = lr.data_numel;
    for (const auto& r : bs) {
      REQUIRE(r.end == end);  // contiguous, back to front
      REQUIRE(r.size() > 0);
      end = r.begin;
      // Either within the cap, or a single parameter larger than it.
      if (r.size() > cap) REQUIRE(z::ParamsIn(lr, r).size() == 1);
    }
    REQUIRE(end == 0);
  }
}

}  // TEST_SUITE

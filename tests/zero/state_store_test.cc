// The state store: sub-groups cut at unit boundaries by sub_group_size (DeepSpeed's rule), the
// resident store's buffers and memory accounting, and range reads/writes through any store crossing
// sub-group boundaries (what checkpoints use).
#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "zerorun/core/memory.h"
#include "zerorun/zero/state_store.h"

namespace z = zerorun::zero;
using zerorun::MemCategory;

TEST_SUITE("unit") {

TEST_CASE("state store layout: sub-groups close at unit ends once they reach sub_group_size") {
  z::StateStoreLayout l = z::MakeStateStoreLayout({{"master", MemCategory::kMaster}, {"exp_avg"}},
                                                  {{4, 4, 4, 10, 1}, {}, {3}}, 8);
  CHECK(l.group_numels == std::vector<int64_t>{23, 0, 3});
  REQUIRE(l.num_sub_groups() == 4);  // group 1 has no elements, no sub-group
  CHECK(l.sub_groups[0].group == 0);
  CHECK(l.sub_groups[0].range == z::Range{0, 8});
  CHECK(l.sub_groups[1].range == z::Range{8, 22});  // 4 + 10: a unit is never cut
  CHECK(l.sub_groups[2].range == z::Range{22, 23});
  CHECK(l.sub_groups[3].group == 2);
  CHECK(l.sub_groups[3].range == z::Range{0, 3});
  CHECK(l.LargestSubGroupNumel() == 14);
  CHECK(l.SubGroupBytes(1) == 14 * 2 * 4);
  CHECK(l.SlotIndex("exp_avg") == 1);
  CHECK(l.SlotIndex("exp_avg_sq") == -1);
  // sub_group_size 0: every unit alone; a huge size: one sub-group per group.
  CHECK(z::MakeStateStoreLayout({{"m"}}, {{4, 4, 4}}, 0).num_sub_groups() == 3);
  CHECK(z::MakeStateStoreLayout({{"m"}}, {{4, 4, 4}, {5}}, 1'000'000'000).num_sub_groups() == 2);
}

TEST_CASE("resident state store: zeroed buffers per sub-group, charged by slot category") {
  zerorun::MemoryAccount account("state-store-test");
  {
    zerorun::ScopedMemoryAccount scope(&account);
    auto store = z::MakeResidentStateStore(
        z::MakeStateStoreLayout({{"master", MemCategory::kMaster}, {"exp_avg"}, {"exp_avg_sq"}}, {{7, 9}, {4099}}, 5),
        zerorun::Device::CPU());
    CHECK(account.Current(MemCategory::kMaster) == 4 * (16 + 4099));
    CHECK(account.Current(MemCategory::kOptimizer) == 2 * 4 * (16 + 4099));
    CHECK(store->resident_bytes() == 3 * 4 * (16 + 4099));
    CHECK(store->placement() == "resident (cpu)");
    REQUIRE(store->layout().num_sub_groups() == 3);
    z::SubGroupState s = store->Acquire(1, z::StateAccess::kReadWrite);
    CHECK(s.numel == 9);
    REQUIRE(s.slots.size() == 3);
    for (float* p : s.slots) {
      CHECK(reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(store->alignment_bytes()) == 0);
      for (int64_t i = 0; i < s.numel; ++i) CHECK(p[i] == 0.0f);
    }
    s.slots[2][8] = 3.5f;
    store->Release(1);
    store->Flush();
    // Element 15 of group 0's partition is element 8 of sub-group 1.
    float v = 0;
    z::ReadState(*store, 2, 0, {15, 16}, &v);
    CHECK(v == 3.5f);
  }
  CHECK(account.Current(MemCategory::kMaster) == 0);
  CHECK(account.Current(MemCategory::kOptimizer) == 0);
}

TEST_CASE("state store: ranges read and written through the store across sub-group boundaries") {
  auto store = z::MakeResidentStateStore(z::MakeStateStoreLayout({{"master", MemCategory::kMaster}, {"m"}},
                                                                 {{5, 5, 5, 5}, {1, 2}}, 6),
                                         zerorun::Device::CPU());
  REQUIRE(store->layout().num_sub_groups() == 3);  // [0, 10), [10, 20) of group 0; [0, 3) of group 1
  std::vector<float> in(13);
  std::iota(in.begin(), in.end(), 1.0f);
  z::WriteState(*store, 1, 0, {3, 16}, in.data());
  std::vector<float> out(20, -1.0f);
  z::ReadState(*store, 1, 0, {0, 20}, out.data());
  for (int i = 0; i < 20; ++i) CHECK(out[static_cast<size_t>(i)] == (i >= 3 && i < 16 ? static_cast<float>(i - 2) : 0.0f));
  // The other slot and the other group are untouched; an empty range reads nothing.
  z::ReadState(*store, 0, 0, {0, 20}, out.data());
  for (float x : out) CHECK(x == 0.0f);
  z::ReadState(*store, 1, 1, {0, 3}, out.data());
  CHECK(out[0] == 0.0f);
  z::ReadState(*store, 1, 1, {2, 2}, nullptr);
}

}  // TEST_SUITE

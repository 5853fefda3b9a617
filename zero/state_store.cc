// The state-store layout (sub-groups), the resident store, and range copies through any store.
#include "zerorun/zero/state_store.h"

#include <algorithm>
#include <cstring>

#include "zerorun/core/error.h"
#include "zerorun/core/tensor.h"

namespace zerorun::zero {

int64_t StateStoreLayout::LargestSubGroupNumel() const {
  int64_t m = 0;
  for (const StateSubGroup& s : sub_groups) m = std::max(m, s.range.size());
  return m;
}

int StateStoreLayout::SlotIndex(std::string_view name) const {
  for (size_t k = 0; k < slots.size(); ++k) {
    if (slots[k].name == name) return static_cast<int>(k);
  }
  return -1;
}

StateStoreLayout MakeStateStoreLayout(std::vector<StateSlot> slots,
                                      const std::vector<std::vector<int64_t>>& group_units, int64_t sub_group_size) {
  StateStoreLayout l;
  l.slots = std::move(slots);
  for (size_t g = 0; g < group_units.size(); ++g) {
    const std::vector<int64_t>& units = group_units[g];
    std::vector<int64_t> offsets(units.size() + 1, 0);
    for (size_t u = 0; u < units.size(); ++u) {
      ZR_CHECK(units[u] >= 0, "negative unit size {}", units[u]);
      offsets[u + 1] = offsets[u] + units[u];
    }
    l.group_numels.push_back(offsets.back());
    for (const Range& r : SubGroups(units, sub_group_size)) {
      const Range range{offsets[static_cast<size_t>(r.begin)], offsets[static_cast<size_t>(r.end)]};
      if (!range.empty()) l.sub_groups.push_back({static_cast<int>(g), range});
    }
  }
  return l;
}

namespace {

class ResidentStateStore final : public StateStore {
 public:
  ResidentStateStore(StateStoreLayout layout, Device device) : layout_(std::move(layout)), device_(device) {
    for (size_t g = 0; g < layout_.group_numels.size(); ++g) {
      std::vector<Tensor> per_slot;
      for (const StateSlot& slot : layout_.slots) {
        per_slot.push_back(Tensor::Zeros({layout_.group_numels[g]}, DType::kF32, device_, slot.category));
        bytes_ += static_cast<int64_t>(per_slot.back().nbytes());
      }
      buffers_.push_back(std::move(per_slot));
    }
    acquired_.assign(layout_.sub_groups.size(), false);
  }

  const StateStoreLayout& layout() const override { return layout_; }
  std::string placement() const override { return "resident (" + device_.ToString() + ")"; }
  Device device() const override { return device_; }
  int64_t alignment_bytes() const override { return 4; }
  void Prefetch(int, StateAccess) override {}
  SubGroupState Acquire(int i, StateAccess) override {
    ZR_CHECK(i >= 0 && i < layout_.num_sub_groups(), "sub-group {} of {}", i, layout_.num_sub_groups());
    ZR_CHECK(!acquired_[static_cast<size_t>(i)], "sub-group {} acquired twice", i);
    acquired_[static_cast<size_t>(i)] = true;
    const StateSubGroup& sg = layout_.sub_groups[static_cast<size_t>(i)];
    SubGroupState s;
    s.index = i;
    s.numel = sg.range.size();
    for (const Tensor& t : buffers_[static_cast<size_t>(sg.group)]) s.slots.push_back(t.data_as<float>() + sg.range.begin);
    return s;
  }
  void Release(int i) override {
    ZR_CHECK(i >= 0 && i < layout_.num_sub_groups() && acquired_[static_cast<size_t>(i)],
             "sub-group {} released without being acquired", i);
    acquired_[static_cast<size_t>(i)] = false;
  }
  void Flush() override {}
  int64_t resident_bytes() const override { return bytes_; }

 private:
  StateStoreLayout layout_;
  Device device_;
  std::vector<std::vector<Tensor>> buffers_;  // [group][slot] (group numel) fp32
  std::vector<bool> acquired_;
  int64_t bytes_ = 0;
};

// Calls fn(sub-group index, piece of `range` in it, offset of the piece in the sub-group).
template <typename Fn>
void ForEachSubGroupIn(const StateStoreLayout& l, int group, Range range, Fn fn) {
  ZR_CHECK(group >= 0 && group < static_cast<int>(l.group_numels.size()), "group {} of {}", group,
           l.group_numels.size());
  ZR_CHECK(range.begin >= 0 && range.end <= l.group_numels[static_cast<size_t>(group)] && !(range.end < range.begin),
           "range [{}, {}) outside group {}'s partition of {} elements", range.begin, range.end, group,
           l.group_numels[static_cast<size_t>(group)]);
  for (int i = 0; i < l.num_sub_groups(); ++i) {
    const StateSubGroup& sg = l.sub_groups[static_cast<size_t>(i)];
    if (sg.group != group) continue;
    const Range piece = Intersect(sg.range, range);
    if (!piece.empty()) fn(i, piece, piece.begin - sg.range.begin);
  }
}

// Copies n fp32 values between host memory and a store buffer on `device`.
void CopyF32(float* dst, Device dst_device, const float* src, Device src_device, int64_t n) {
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  Tensor d = Tensor::FromStorage(Storage::Wrap(dst, bytes, dst_device), 0, {n}, DType::kF32);
  Tensor s = Tensor::FromStorage(Storage::Wrap(const_cast<float*>(src), bytes, src_device), 0, {n}, DType::kF32);
  d.CopyFrom(s);
}

}  // namespace

std::unique_ptr<StateStore> MakeResidentStateStore(StateStoreLayout layout, Device device) {
  return std::make_unique<ResidentStateStore>(std::move(layout), device);
}

void ReadState(StateStore& store, int slot, int group, Range range, float* out) {
  const StateStoreLayout& l = store.layout();
  ZR_CHECK(slot >= 0 && slot < static_cast<int>(l.slots.size()), "state slot {} of {}", slot, l.slots.size());
  ForEachSubGroupIn(l, group, range, [&](int i, Range piece, int64_t at) {
    SubGroupState s = store.Acquire(i, StateAccess::kRead);
    CopyF32(out + (piece.begin - range.begin), Device::CPU(), s.slots[static_cast<size_t>(slot)] + at, store.device(),
            piece.size());
    store.Release(i);
  });
}

void WriteState(StateStore& store, int slot, int group, Range range, const float* in) {
  const StateStoreLayout& l = store.layout();
  ZR_CHECK(slot >= 0 && slot < static_cast<int>(l.slots.size()), "state slot {} of {}", slot, l.slots.size());
  ForEachSubGroupIn(l, group, range, [&](int i, Range piece, int64_t at) {
    SubGroupState s = store.Acquire(i, StateAccess::kReadWrite);
    CopyF32(s.slots[static_cast<size_t>(slot)] + at, store.device(), in + (piece.begin - range.begin), Device::CPU(),
            piece.size());
    store.Release(i);
  });
  store.Flush();
}

}  // namespace zerorun::zero

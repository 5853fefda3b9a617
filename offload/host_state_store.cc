// The CPU-offload state store: one host buffer per (group, slot).
#include "zerorun/offload/host_state_store.h"

#include <cstring>

#include "zerorun/core/error.h"
#include "zerorun/core/tensor.h"
#include "zerorun/offload/pinned_pool.h"

namespace zerorun::offload {
namespace {

class HostStateStore final : public zero::StateStore {
 public:
  HostStateStore(zero::StateStoreLayout layout, const HostStateStoreOptions& o) : layout_(std::move(layout)), opt_(o) {
    for (size_t g = 0; g < layout_.group_numels.size(); ++g) {
      std::vector<float*> per_slot;
      for (const zero::StateSlot& slot : layout_.slots) {
        const int64_t bytes = layout_.group_numels[g] * 4;
        if (bytes == 0) {
          per_slot.push_back(nullptr);
          continue;
        }
        if (opt_.pin_memory) {
          pinned_.emplace_back(bytes, opt_.huge_pages);  // zeroed, charged to kPinned
          per_slot.push_back(pinned_.back().as<float>());
          bytes_ += pinned_.back().size();
        } else {
          pageable_.push_back(Tensor::Zeros({layout_.group_numels[g]}, DType::kF32, Device::CPU(), slot.category));
          per_slot.push_back(pageable_.back().data_as<float>());
          bytes_ += static_cast<int64_t>(pageable_.back().nbytes());
        }
      }
      buffers_.push_back(std::move(per_slot));
    }
    acquired_.assign(layout_.sub_groups.size(), false);
  }

  const zero::StateStoreLayout& layout() const override { return layout_; }
  std::string placement() const override {
    return opt_.pin_memory ? "cpu (pinned host memory)" : "cpu (pageable host memory)";
  }
  Device device() const override { return Device::CPU(); }
  int64_t alignment_bytes() const override { return 64; }
  bool offloaded() const override { return true; }
  void Prefetch(int, zero::StateAccess) override {}
  zero::SubGroupState Acquire(int i, zero::StateAccess) override {
    ZR_CHECK(i >= 0 && i < layout_.num_sub_groups(), "sub-group {} of {}", i, layout_.num_sub_groups());
    ZR_CHECK(!acquired_[static_cast<size_t>(i)], "sub-group {} acquired twice", i);
    acquired_[static_cast<size_t>(i)] = true;
    const zero::StateSubGroup& sg = layout_.sub_groups[static_cast<size_t>(i)];
    zero::SubGroupState s;
    s.index = i;
    s.numel = sg.range.size();
    for (float* base : buffers_[static_cast<size_t>(sg.group)]) s.slots.push_back(base + sg.range.begin);
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
  zero::StateStoreLayout layout_;
  HostStateStoreOptions opt_;
  std::vector<PinnedBuffer> pinned_;
  std::vector<Tensor> pageable_;
  std::vector<std::vector<float*>> buffers_;  // [group][slot]
  std::vector<bool> acquired_;
  int64_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<zero::StateStore> MakeHostStateStore(zero::StateStoreLayout layout, const HostStateStoreOptions& o) {
  return std::make_unique<HostStateStore>(std::move(layout), o);
}

}  // namespace zerorun::offload

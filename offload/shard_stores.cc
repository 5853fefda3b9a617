// The host and NVMe shard stores (parameter offload).
#include "zerorun/offload/shard_stores.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/core/log.h"
#include "zerorun/core/tensor.h"
#include "zerorun/offload/pinned_pool.h"
#include "zerorun/offload/swap_buffers.h"

namespace zerorun::offload {
namespace {

constexpr int64_t kUnitAlign = 64;  // bytes: every host unit starts on a cache line

int64_t RoundUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

class HostShardStore final : public zero::ShardStore {
 public:
  HostShardStore(zero::ShardStoreLayout layout, const HostShardStoreOptions& o) : layout_(std::move(layout)), opt_(o) {
    int64_t at = 0;
    for (int u = 0; u < layout_.num_units(); ++u) {
      offsets_.push_back(at);
      at += RoundUp(layout_.UnitBytes(u), kUnitAlign);
    }
    const int64_t bytes = std::max<int64_t>(at, kUnitAlign);
    if (opt_.pin_memory) {
      pinned_ = PinnedBuffer(bytes, opt_.huge_pages);  // zeroed, charged to kPinned
      base_ = pinned_.as<char>();
      bytes_ = pinned_.size();
    } else {
      pageable_ = Tensor::Zeros({bytes}, DType::kU8, Device::CPU(), MemCategory::kParams);
      base_ = static_cast<char*>(pageable_.data());
      bytes_ = bytes;
    }
    acquired_.assign(offsets_.size(), false);
  }

  const zero::ShardStoreLayout& layout() const override { return layout_; }
  std::string placement() const override {
    return opt_.pin_memory ? "cpu (pinned host memory)" : "cpu (pageable host memory)";
  }
  Device device() const override { return Device::CPU(); }
  void Prefetch(int) override {}
  void* Acquire(int u, zero::StateAccess) override {
    ZR_CHECK(u >= 0 && u < layout_.num_units(), "shard {} of {}", u, layout_.num_units());
    ZR_CHECK(!acquired_[static_cast<size_t>(u)], "shard {} acquired twice", u);
    acquired_[static_cast<size_t>(u)] = true;
    return base_ + offsets_[static_cast<size_t>(u)];
  }
  void Release(int u) override {
    ZR_CHECK(u >= 0 && u < layout_.num_units() && acquired_[static_cast<size_t>(u)],
             "shard {} released without being acquired", u);
    acquired_[static_cast<size_t>(u)] = false;
  }
  void Flush() override {}
  int64_t resident_bytes() const override { return bytes_; }

 private:
  zero::ShardStoreLayout layout_;
  HostShardStoreOptions opt_;
  std::vector<int64_t> offsets_;
  PinnedBuffer pinned_;
  Tensor pageable_;
  char* base_ = nullptr;
  int64_t bytes_ = 0;
  std::vector<bool> acquired_;
};

int64_t NvmeBufferBytes(const zero::ShardStoreLayout& l) {
  return SwapFile::AlignedBytes(std::max<int64_t>(1, l.LargestUnitNumel() * static_cast<int64_t>(DTypeSize(l.dtype))));
}

int NvmeBuffers(const zero::ShardStoreLayout& l, int buffer_count) {
  return std::min(std::max(buffer_count, 1), std::max(l.num_units(), 1));  // more than one per shard is never used
}

class NvmeStore final : public NvmeShardStore {
 public:
  NvmeStore(zero::ShardStoreLayout layout, const NvmeShardStoreOptions& o)
      : layout_(std::move(layout)), opt_(o), buffer_bytes_(NvmeBufferBytes(layout_)) {
    if (opt_.buffer_count < 1) {
      ZR_THROW(ConfigError, "zero_optimization.offload_param.buffer_count must be >= 1 for NVMe offload, got {}",
               opt_.buffer_count);
    }
    for (int u = 0; u < layout_.num_units(); ++u) {
      if (layout_.unit_numels[static_cast<size_t>(u)] > opt_.buffer_size) {
        ZR_THROW(ConfigError, "zero_optimization.offload_param.buffer_size: {}'s shard has {} elements, more than "
                 "buffer_size {}; raise buffer_size to at least {} (the largest shard on rank {})",
                 layout_.UnitName(u), layout_.unit_numels[static_cast<size_t>(u)], opt_.buffer_size,
                 layout_.LargestUnitNumel(), opt_.dir.rank);
      }
    }
    std::vector<int64_t> slot_bytes;
    for (int u = 0; u < layout_.num_units(); ++u) slot_bytes.push_back(layout_.UnitBytes(u));
    space_ = std::make_unique<SwapSpace>(opt_.dir, opt_.io, "params", slot_bytes, NvmeBuffers(layout_, opt_.buffer_count),
                                         buffer_bytes_, layout_.num_units(), opt_.huge_pages, "NVMe parameter store");
    file_ = space_->file.get();
    bufs_ = space_->buffers.get();
    units_.resize(static_cast<size_t>(layout_.num_units()));
  }

  const zero::ShardStoreLayout& layout() const override { return layout_; }
  std::string placement() const override { return space_->Placement(); }
  Device device() const override { return Device::CPU(); }
  int64_t resident_bytes() const override { return bufs_->host_bytes(); }

  void Prefetch(int u) override {
    CheckIndex(u);
    const Unit& s = units_[static_cast<size_t>(u)];
    if (bufs_->BufferOf(u) >= 0 || s.generation == 0) return;
    const int b = bufs_->TakeBuffer(/*blocking=*/false, acquired_);
    if (b < 0) return;
    bufs_->Attach(b, u);
    bufs_->read(b) = file_->SubmitRead(u, bufs_->Data(b), layout_.UnitBytes(u), s.generation);
    bufs_->Touch(b);  // the newest: later hints do not take it back before it is used
    ++stats_.prefetches;
    ++stats_.swap_ins;
  }

  void* Acquire(int u, zero::StateAccess access) override {
    CheckIndex(u);
    Unit& s = units_[static_cast<size_t>(u)];
    ZR_CHECK(!s.acquired, "shard {} acquired twice", u);
    bool hit = false;
    const int b = bufs_->Load(u, access != zero::StateAccess::kRead, &hit, acquired_, [&](char* data) {
      if (access == zero::StateAccess::kOverwrite) return;
      if (s.generation == 0) {
        std::memset(data, 0, static_cast<size_t>(layout_.UnitBytes(u)));
        return;
      }
      file_->Read(u, data, layout_.UnitBytes(u), s.generation);
      ++stats_.swap_ins;
    }, /*keep_failed=*/true, FailureSuffix());
    stats_.hits += hit;
    s.acquired = true;
    s.access = access;
    return bufs_->Data(b);
  }

  void Release(int u) override {
    CheckIndex(u);
    Unit& s = units_[static_cast<size_t>(u)];
    ZR_CHECK(s.acquired, "shard {} released without being acquired", u);
    s.acquired = false;
    if (s.access == zero::StateAccess::kRead) return;
    const int b = bufs_->BufferOf(u);
    ++s.generation;
    bufs_->write(b) = file_->SubmitWrite(u, bufs_->Data(b), layout_.UnitBytes(u), s.generation);
    ++stats_.swap_outs;
  }

  void Flush() override {
    bufs_->WaitAllWrites();
    if (bufs_->failed()) ZR_THROW(IoError, "{}{}", bufs_->TakeError(), FailureSuffix());
  }

  NvmeShardStoreStats stats() const override {
    NvmeShardStoreStats st = stats_;
    st.buffers = bufs_->count();
    st.buffer_bytes = buffer_bytes_;
    st.file_bytes = file_->file_bytes();
    st.file = file_->path();
    return st;
  }

 private:
  struct Unit {
    uint64_t generation = 0;  // of its newest record (0: never written, the shard is zeros)
    bool acquired = false;
    zero::StateAccess access = zero::StateAccess::kRead;
  };

  void CheckIndex(int u) const { ZR_CHECK(u >= 0 && u < layout_.num_units(), "shard {} of {}", u, layout_.num_units()); }
  std::string FailureSuffix() const {
    return Format(" (rank {}: writing a parameter shard back to NVMe failed)", opt_.dir.rank);
  }

  zero::ShardStoreLayout layout_;
  NvmeShardStoreOptions opt_;
  int64_t buffer_bytes_;
  std::unique_ptr<SwapSpace> space_;
  SwapFile* file_ = nullptr;     // space_'s
  SwapBuffers* bufs_ = nullptr;  // space_'s
  std::vector<Unit> units_;
  std::function<bool(int)> acquired_ = [this](int u) { return units_[static_cast<size_t>(u)].acquired; };
  NvmeShardStoreStats stats_;
};

}  // namespace

std::unique_ptr<zero::ShardStore> MakeHostShardStore(zero::ShardStoreLayout layout, const HostShardStoreOptions& o) {
  return std::make_unique<HostShardStore>(std::move(layout), o);
}

std::unique_ptr<NvmeShardStore> MakeNvmeShardStore(zero::ShardStoreLayout layout, const NvmeShardStoreOptions& o) {
  return std::make_unique<NvmeStore>(std::move(layout), o);
}

int64_t NvmeShardStoreHostBytes(const zero::ShardStoreLayout& layout, int buffer_count, bool huge_pages) {
  const int64_t bytes = NvmeBufferBytes(layout) * NvmeBuffers(layout, buffer_count);
  const int64_t a = huge_pages && bytes >= (int64_t{4} << 20) ? (int64_t{2} << 20) : 4096;
  return RoundUp(bytes, a);
}

}  // namespace zerorun::offload

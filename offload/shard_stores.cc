// The host and NVMe shard stores (parameter offload).
#include "zerorun/offload/shard_stores.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/core/log.h"
#include "zerorun/core/tensor.h"
#include "zerorun/offload/pinned_pool.h"

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
    int64_t file_bytes = kDirectIoAlignment;
    for (int u = 0; u < layout_.num_units(); ++u) {
      slot_bytes.push_back(layout_.UnitBytes(u));
      file_bytes += kDirectIoAlignment + SwapFile::AlignedBytes(layout_.UnitBytes(u));
    }
    SwapDirOptions d = opt_.dir;
    d.required_bytes = file_bytes;
    dir_ = std::make_unique<SwapDir>(d);
    IoEngineOptions io = opt_.io;
    io.rank = opt_.dir.rank;
    if (io.env == nullptr) io.env = opt_.dir.env;
    engine_ = CreateIoEngine(io);
    const int buffers = NvmeBuffers(layout_, opt_.buffer_count);
    memory_ = PinnedBuffer(buffer_bytes_ * buffers, opt_.huge_pages);
    std::vector<IoRegion> regions;
    for (int b = 0; b < buffers; ++b) regions.push_back({Data(b), buffer_bytes_});
    (void)engine_->RegisterBuffers(regions);
    file_ = std::make_unique<SwapFile>(*dir_, "params", slot_bytes, *engine_);
    bufs_.resize(static_cast<size_t>(buffers));
    units_.resize(static_cast<size_t>(layout_.num_units()));
  }

  ~NvmeStore() override {
    for (Buf& b : bufs_) {
      for (SwapWork* w : {&b.read, &b.write}) {
        try {
          w->Wait();
        } catch (const Error& e) {
          ZR_WARN("NVMe parameter store: a transfer failed while closing: {}", e.what());
        }
      }
    }
  }

  const zero::ShardStoreLayout& layout() const override { return layout_; }
  std::string placement() const override {
    return Format("nvme {} ({} buffers of {} in pinned host memory{})", file_->path(), bufs_.size(),
                  FormatBytes(static_cast<double>(buffer_bytes_)), dir_->direct_io() ? "" : "; buffered I/O");
  }
  Device device() const override { return Device::CPU(); }
  int64_t resident_bytes() const override { return memory_.size(); }

  void Prefetch(int u) override {
    CheckIndex(u);
    Unit& s = units_[static_cast<size_t>(u)];
    if (s.buffer >= 0 || s.generation == 0) return;
    const int b = TakeBuffer(/*blocking=*/false);
    if (b < 0) return;
    Attach(b, u);
    bufs_[static_cast<size_t>(b)].read = file_->SubmitRead(u, Data(b), layout_.UnitBytes(u), s.generation);
    ++stats_.prefetches;
    ++stats_.swap_ins;
  }

  void* Acquire(int u, zero::StateAccess access) override {
    CheckIndex(u);
    Unit& s = units_[static_cast<size_t>(u)];
    ZR_CHECK(!s.acquired, "shard {} acquired twice", u);
    if (s.buffer >= 0) {
      Buf& b = bufs_[static_cast<size_t>(s.buffer)];
      if (b.read.pending()) {
        try {
          b.read.Wait();
        } catch (...) {
          Detach(s.buffer);
          throw;
        }
      } else {
        ++stats_.hits;
      }
      if (access != zero::StateAccess::kRead) WaitWrite(s.buffer);  // it is about to change
    } else {
      const int b = TakeBuffer(/*blocking=*/true);
      Attach(b, u);
      const int64_t bytes = layout_.UnitBytes(u);
      if (access != zero::StateAccess::kOverwrite) {
        if (s.generation == 0) {
          std::memset(Data(b), 0, static_cast<size_t>(bytes));
        } else {
          try {
            file_->Read(u, Data(b), bytes, s.generation);
          } catch (...) {
            Detach(b);
            throw;
          }
          ++stats_.swap_ins;
        }
      }
    }
    s.acquired = true;
    s.access = access;
    bufs_[static_cast<size_t>(s.buffer)].last_use = ++clock_;
    return Data(s.buffer);
  }

  void Release(int u) override {
    CheckIndex(u);
    Unit& s = units_[static_cast<size_t>(u)];
    ZR_CHECK(s.acquired, "shard {} released without being acquired", u);
    s.acquired = false;
    if (s.access == zero::StateAccess::kRead) return;
    const int b = s.buffer;
    ++s.generation;
    bufs_[static_cast<size_t>(b)].write = file_->SubmitWrite(u, Data(b), layout_.UnitBytes(u), s.generation);
    ++stats_.swap_outs;
  }

  void Flush() override {
    for (size_t b = 0; b < bufs_.size(); ++b) WaitWrite(static_cast<int>(b));
    if (error_.empty()) return;
    const std::string e = std::exchange(error_, std::string());
    ZR_THROW(IoError, "{} (rank {}: writing a parameter shard back to NVMe failed)", e, opt_.dir.rank);
  }

  NvmeShardStoreStats stats() const override {
    NvmeShardStoreStats st = stats_;
    st.buffers = static_cast<int>(bufs_.size());
    st.buffer_bytes = buffer_bytes_;
    st.file_bytes = file_->file_bytes();
    st.file = file_->path();
    return st;
  }

 private:
  struct Unit {
    int buffer = -1;          // the buffer holding (or reading) it
    uint64_t generation = 0;  // of its newest record (0: never written, the shard is zeros)
    bool acquired = false;
    zero::StateAccess access = zero::StateAccess::kRead;
  };
  struct Buf {
    int unit = -1;
    SwapWork read;
    SwapWork write;
    uint64_t last_use = 0;
  };

  void CheckIndex(int u) const { ZR_CHECK(u >= 0 && u < layout_.num_units(), "shard {} of {}", u, layout_.num_units()); }
  char* Data(int b) const { return memory_.as<char>() + static_cast<int64_t>(b) * buffer_bytes_; }

  // Waits for buffer b's write; a failure is kept for Flush (the values are still in the buffer, and it
  // stays attached so the next Acquire sees them).
  void WaitWrite(int b) {
    try {
      bufs_[static_cast<size_t>(b)].write.Wait();
    } catch (const IoError& e) {
      if (error_.empty()) error_ = e.what();
      failed_ = true;
    }
  }

  void Attach(int b, int u) {
    bufs_[static_cast<size_t>(b)].unit = u;
    units_[static_cast<size_t>(u)].buffer = b;
  }
  void Detach(int b) {
    Buf& buf = bufs_[static_cast<size_t>(b)];
    if (buf.unit >= 0) units_[static_cast<size_t>(buf.unit)].buffer = -1;
    buf.unit = -1;
  }

  // A free buffer, else the least recently used one whose shard is not acquired; its read (a prefetch
  // nobody used yet) and its write are waited for. Non-blocking: -1 rather than wait for either.
  int TakeBuffer(bool blocking) {
    int best = -1;
    uint64_t best_use = std::numeric_limits<uint64_t>::max();
    for (size_t b = 0; b < bufs_.size(); ++b) {
      const Buf& buf = bufs_[b];
      if (buf.unit < 0) {
        best = static_cast<int>(b);
        break;
      }
      const Unit& s = units_[static_cast<size_t>(buf.unit)];
      if (s.acquired) continue;
      if (!blocking && (buf.read.pending() || !buf.write.Done())) continue;
      if (buf.last_use < best_use) {
        best = static_cast<int>(b);
        best_use = buf.last_use;
      }
    }
    if (best < 0) {
      ZR_CHECK(!blocking, "NVMe parameter store: all {} buffers are in use", bufs_.size());
      return -1;
    }
    try {
      bufs_[static_cast<size_t>(best)].read.Wait();  // a prefetch nobody used: its data is dropped
    } catch (const IoError&) {
    }
    WaitWrite(best);
    if (failed_) {
      // Evicting a shard whose write failed would lose it: report the failure now.
      failed_ = false;
      const std::string e = std::exchange(error_, std::string());
      ZR_THROW(IoError, "{} (rank {}: writing a parameter shard back to NVMe failed)", e, opt_.dir.rank);
    }
    Detach(best);
    return best;
  }

  zero::ShardStoreLayout layout_;
  NvmeShardStoreOptions opt_;
  int64_t buffer_bytes_;
  std::unique_ptr<SwapDir> dir_;
  std::unique_ptr<IoEngine> engine_;
  PinnedBuffer memory_;
  std::unique_ptr<SwapFile> file_;
  std::vector<Buf> bufs_;  // after file_: their transfers finish before the file closes
  std::vector<Unit> units_;
  std::string error_;  // the first failed write since the last Flush
  bool failed_ = false;
  uint64_t clock_ = 0;
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

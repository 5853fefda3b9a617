// The NVMe-offload state store: sub-group records in one swap file, buffer_count pinned buffers, the
// read-ahead / write-behind pipeline and the two-slot commit.
#include "zerorun/offload/nvme_state_store.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/core/log.h"

namespace zerorun::offload {
namespace {

int64_t BufferBytes(const zero::StateStoreLayout& l) {
  int64_t m = 0;
  for (int i = 0; i < l.num_sub_groups(); ++i) m = std::max(m, l.SubGroupBytes(i));
  return SwapFile::AlignedBytes(std::max<int64_t>(m, 1));
}

int64_t PinnedRounded(int64_t bytes, bool huge_pages) {
  const int64_t a = huge_pages && bytes >= (int64_t{4} << 20) ? (int64_t{2} << 20) : 4096;
  return (bytes + a - 1) / a * a;
}

class NvmeStore final : public NvmeStateStore {
 public:
  NvmeStore(zero::StateStoreLayout layout, const NvmeStateStoreOptions& o)
      : layout_(std::move(layout)), opt_(o), buffer_bytes_(BufferBytes(layout_)) {
    if (opt_.buffer_count < 1) {
      ZR_THROW(InvalidArgument, "zero_optimization.offload_optimizer.buffer_count must be >= 1 for NVMe offload, got {}",
               opt_.buffer_count);
    }
    const int n = layout_.num_sub_groups();
    std::vector<int64_t> slot_bytes;
    int64_t file_bytes = kDirectIoAlignment;
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < 2; ++k) {
        slot_bytes.push_back(layout_.SubGroupBytes(i));
        file_bytes += kDirectIoAlignment + SwapFile::AlignedBytes(layout_.SubGroupBytes(i));
      }
    }
    SwapDirOptions d = opt_.dir;
    d.required_bytes = file_bytes;
    dir_ = std::make_unique<SwapDir>(d);
    IoEngineOptions io = opt_.io;
    io.rank = opt_.dir.rank;
    if (io.env == nullptr) io.env = opt_.dir.env;
    engine_ = CreateIoEngine(io);
    const int buffers = std::min(opt_.buffer_count, std::max(n, 1));  // more than one per sub-group is never used
    memory_ = PinnedBuffer(buffer_bytes_ * buffers, opt_.huge_pages);
    std::vector<IoRegion> regions;
    for (int b = 0; b < buffers; ++b) regions.push_back({memory_.as<char>() + b * buffer_bytes_, buffer_bytes_});
    (void)engine_->RegisterBuffers(regions);
    file_ = std::make_unique<SwapFile>(*dir_, "optimizer", slot_bytes, *engine_);
    bufs_.resize(static_cast<size_t>(buffers));
    subs_.resize(static_cast<size_t>(n));
    initializing_ = true;
  }

  ~NvmeStore() override {
    for (Buf& b : bufs_) {
      for (SwapWork* w : {&b.read, &b.write}) {
        try {
          w->Wait();
        } catch (const Error& e) {
          ZR_WARN("NVMe state store: a transfer failed while closing: {}", e.what());
        }
      }
    }
  }

  const zero::StateStoreLayout& layout() const override { return layout_; }
  std::string placement() const override {
    return Format("nvme {} ({} buffers of {} in pinned host memory{})", file_->path(), bufs_.size(),
                  FormatBytes(static_cast<double>(buffer_bytes_)), dir_->direct_io() ? "" : "; buffered I/O");
  }
  Device device() const override { return Device::CPU(); }
  int64_t alignment_bytes() const override { return 4; }
  bool offloaded() const override { return true; }
  int64_t resident_bytes() const override { return memory_.size(); }

  void Prefetch(int i, zero::StateAccess access) override {
    CheckIndex(i);
    Sub& s = subs_[static_cast<size_t>(i)];
    if (!opt_.pipeline_read || access == zero::StateAccess::kOverwrite || s.buffer >= 0 || !s.written) return;
    const int b = TakeBuffer(/*blocking=*/false);
    if (b < 0) return;
    Attach(b, i);
    bufs_[static_cast<size_t>(b)].read =
        file_->SubmitRead(SlotOf(i, ReadGeneration(s)), Data(b), layout_.SubGroupBytes(i), ReadGeneration(s));
    ++stats_.prefetches;
    ++stats_.swap_ins;
    stats_.bytes_in += layout_.SubGroupBytes(i);
  }

  zero::SubGroupState Acquire(int i, zero::StateAccess access) override {
    CheckIndex(i);
    Sub& s = subs_[static_cast<size_t>(i)];
    ZR_CHECK(!s.acquired, "sub-group {} acquired twice", i);
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
      // The caller will change the buffer: its last write must be out first.
      if (access != zero::StateAccess::kRead) WaitWrite(s.buffer);
    } else {
      const int b = TakeBuffer(/*blocking=*/true);
      Attach(b, i);
      const int64_t bytes = layout_.SubGroupBytes(i);
      if (!s.written) {
        if (access != zero::StateAccess::kOverwrite) std::memset(Data(b), 0, static_cast<size_t>(bytes));
      } else if (access != zero::StateAccess::kOverwrite) {
        try {
          file_->Read(SlotOf(i, ReadGeneration(s)), Data(b), bytes, ReadGeneration(s));
        } catch (...) {
          Detach(b);
          throw;
        }
        ++stats_.swap_ins;
        stats_.bytes_in += bytes;
      }
    }
    s.acquired = true;
    s.access = access;
    bufs_[static_cast<size_t>(s.buffer)].last_use = ++clock_;
    zero::SubGroupState st;
    st.index = i;
    st.numel = layout_.SubGroupNumel(i);
    float* base = reinterpret_cast<float*>(Data(s.buffer));
    for (size_t k = 0; k < layout_.slots.size(); ++k) st.slots.push_back(base + static_cast<int64_t>(k) * st.numel);
    return st;
  }

  void Release(int i) override {
    CheckIndex(i);
    Sub& s = subs_[static_cast<size_t>(i)];
    ZR_CHECK(s.acquired, "sub-group {} released without being acquired", i);
    s.acquired = false;
    if (s.access == zero::StateAccess::kRead) return;
    const uint64_t gen = s.committed + 1;
    const int b = s.buffer;
    bufs_[static_cast<size_t>(b)].write = file_->SubmitWrite(SlotOf(i, gen), Data(b), layout_.SubGroupBytes(i), gen);
    s.pending = gen;
    s.written = true;
    ++stats_.swap_outs;
    stats_.bytes_out += layout_.SubGroupBytes(i);
    if (!(opt_.pipeline_write || (initializing_ && opt_.fast_init))) WaitWrite(b);
  }

  void Flush() override {
    for (size_t b = 0; b < bufs_.size(); ++b) WaitWrite(static_cast<int>(b));
    initializing_ = false;
    if (error_.empty()) {
      for (Sub& s : subs_) {
        if (s.pending != 0) s.committed = s.pending;
        s.pending = 0;
      }
      return;
    }
    // Keep the committed (previous) state: drop every buffer holding uncommitted values.
    for (size_t i = 0; i < subs_.size(); ++i) {
      Sub& s = subs_[i];
      if (s.pending == 0) continue;
      s.pending = 0;
      if (s.committed == 0) s.written = false;  // never committed: the state is the initial zeros again
      if (s.buffer >= 0) Detach(s.buffer);
    }
    const std::string e = std::exchange(error_, std::string());
    ZR_THROW(IoError, "{} (rank {}: this step's optimizer state was not committed; the previous state is kept)", e,
             opt_.dir.rank);
  }

  NvmeStateStoreStats stats() const override {
    NvmeStateStoreStats st = stats_;
    st.buffers = static_cast<int>(bufs_.size());
    st.buffer_bytes = buffer_bytes_;
    st.file_bytes = file_->file_bytes();
    st.file = file_->path();
    st.direct_io = dir_->direct_io();
    return st;
  }

 private:
  struct Sub {
    int buffer = -1;         // the buffer holding (or reading) it
    bool written = false;    // a record exists (else the state is zeros)
    bool acquired = false;
    zero::StateAccess access = zero::StateAccess::kRead;
    uint64_t committed = 0;  // the generation Flush committed
    uint64_t pending = 0;    // the generation written since (0: none)
  };
  struct Buf {
    int sub = -1;
    SwapWork read;
    SwapWork write;
    uint64_t last_use = 0;
  };

  void CheckIndex(int i) const {
    ZR_CHECK(i >= 0 && i < layout_.num_sub_groups(), "sub-group {} of {}", i, layout_.num_sub_groups());
  }
  static int SlotOf(int i, uint64_t gen) { return 2 * i + static_cast<int>(gen & 1); }
  // The newest record of a sub-group: this step's (written, not yet committed) or the committed one.
  static uint64_t ReadGeneration(const Sub& s) { return s.pending != 0 ? s.pending : s.committed; }
  char* Data(int b) const { return memory_.as<char>() + static_cast<int64_t>(b) * buffer_bytes_; }

  // Waits for buffer b's write; a failure is remembered for Flush (the values are still in the buffer).
  void WaitWrite(int b) {
    try {
      bufs_[static_cast<size_t>(b)].write.Wait();
    } catch (const IoError& e) {
      if (error_.empty()) error_ = e.what();
    }
  }

  void Attach(int b, int i) {
    bufs_[static_cast<size_t>(b)].sub = i;
    subs_[static_cast<size_t>(i)].buffer = b;
  }
  void Detach(int b) {
    Buf& buf = bufs_[static_cast<size_t>(b)];
    if (buf.sub >= 0) subs_[static_cast<size_t>(buf.sub)].buffer = -1;
    buf.sub = -1;
  }

  // A buffer for a new sub-group: a free one, else the least recently used one whose sub-group is not
  // acquired or being read (its write waited for). Non-blocking: -1 rather than wait for a write.
  int TakeBuffer(bool blocking) {
    int best = -1;
    uint64_t best_use = std::numeric_limits<uint64_t>::max();
    for (size_t b = 0; b < bufs_.size(); ++b) {
      const Buf& buf = bufs_[b];
      if (buf.sub < 0) {
        best = static_cast<int>(b);
        best_use = 0;
        break;
      }
      const Sub& s = subs_[static_cast<size_t>(buf.sub)];
      if (s.acquired || buf.read.pending()) continue;
      if (!blocking && !buf.write.Done()) continue;
      if (buf.last_use < best_use) {
        best = static_cast<int>(b);
        best_use = buf.last_use;
      }
    }
    if (best < 0) {
      ZR_CHECK(!blocking, "NVMe state store: all {} buffers are in use (buffer_count too small for the acquired "
               "sub-groups)", bufs_.size());
      return -1;
    }
    WaitWrite(best);
    Detach(best);
    return best;
  }

  zero::StateStoreLayout layout_;
  NvmeStateStoreOptions opt_;
  int64_t buffer_bytes_;
  std::unique_ptr<SwapDir> dir_;
  std::unique_ptr<IoEngine> engine_;
  PinnedBuffer memory_;
  std::unique_ptr<SwapFile> file_;
  std::vector<Buf> bufs_;  // after file_: their transfers finish before the file closes
  std::vector<Sub> subs_;
  std::string error_;      // the first failed write-back since the last Flush
  bool initializing_ = false;
  uint64_t clock_ = 0;
  NvmeStateStoreStats stats_;
};

}  // namespace

std::unique_ptr<NvmeStateStore> MakeNvmeStateStore(zero::StateStoreLayout layout, const NvmeStateStoreOptions& o) {
  return std::make_unique<NvmeStore>(std::move(layout), o);
}

int64_t NvmeStateStoreHostBytes(const zero::StateStoreLayout& layout, int buffer_count, bool huge_pages) {
  const int buffers = std::min(std::max(buffer_count, 1), std::max(layout.num_sub_groups(), 1));
  return PinnedRounded(BufferBytes(layout) * buffers, huge_pages);
}

}  // namespace zerorun::offload

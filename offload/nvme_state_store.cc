// The NVMe-offload state store: sub-group records in one swap file, buffer_count pinned buffers, the
// read-ahead / write-behind pipeline and the two-slot commit.
#include "zerorun/offload/nvme_state_store.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/core/log.h"
#include "zerorun/offload/swap_buffers.h"

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
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < 2; ++k) slot_bytes.push_back(layout_.SubGroupBytes(i));
    }
    const int buffers = std::min(opt_.buffer_count, std::max(n, 1));  // more than one per sub-group is never used
    space_ = std::make_unique<SwapSpace>(opt_.dir, opt_.io, "optimizer", slot_bytes, buffers, buffer_bytes_, n,
                                         opt_.huge_pages, "NVMe state store");
    file_ = space_->file.get();
    bufs_ = space_->buffers.get();
    subs_.resize(static_cast<size_t>(n));
    initializing_ = true;
  }

  const zero::StateStoreLayout& layout() const override { return layout_; }
  std::string placement() const override { return space_->Placement(); }
  Device device() const override { return Device::CPU(); }
  int64_t alignment_bytes() const override { return 4; }
  bool offloaded() const override { return true; }
  int64_t resident_bytes() const override { return bufs_->host_bytes(); }

  void Prefetch(int i, zero::StateAccess access) override {
    CheckIndex(i);
    Sub& s = subs_[static_cast<size_t>(i)];
    if (!opt_.pipeline_read || access == zero::StateAccess::kOverwrite || bufs_->BufferOf(i) >= 0 || !s.written) {
      return;
    }
    const int b = bufs_->TakeBuffer(/*blocking=*/false, acquired_);
    if (b < 0) return;
    bufs_->Attach(b, i);
    bufs_->read(b) =
        file_->SubmitRead(SlotOf(i, ReadGeneration(s)), bufs_->Data(b), layout_.SubGroupBytes(i), ReadGeneration(s));
    ++stats_.prefetches;
    ++stats_.swap_ins;
    stats_.bytes_in += layout_.SubGroupBytes(i);
  }

  zero::SubGroupState Acquire(int i, zero::StateAccess access) override {
    CheckIndex(i);
    Sub& s = subs_[static_cast<size_t>(i)];
    ZR_CHECK(!s.acquired, "sub-group {} acquired twice", i);
    bool hit = false;
    const int b = bufs_->Load(i, access != zero::StateAccess::kRead, &hit, acquired_, [&](char* data) {
      if (access == zero::StateAccess::kOverwrite) return;
      const int64_t bytes = layout_.SubGroupBytes(i);
      if (!s.written) {
        std::memset(data, 0, static_cast<size_t>(bytes));
        return;
      }
      file_->Read(SlotOf(i, ReadGeneration(s)), data, bytes, ReadGeneration(s));
      ++stats_.swap_ins;
      stats_.bytes_in += bytes;
    });
    stats_.hits += hit;
    s.acquired = true;
    s.access = access;
    zero::SubGroupState st;
    st.index = i;
    st.numel = layout_.SubGroupNumel(i);
    float* base = reinterpret_cast<float*>(bufs_->Data(b));
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
    const int b = bufs_->BufferOf(i);
    bufs_->write(b) = file_->SubmitWrite(SlotOf(i, gen), bufs_->Data(b), layout_.SubGroupBytes(i), gen);
    s.pending = gen;
    s.written = true;
    ++stats_.swap_outs;
    stats_.bytes_out += layout_.SubGroupBytes(i);
    if (!(opt_.pipeline_write || (initializing_ && opt_.fast_init))) bufs_->WaitWrite(b);
  }

  void Flush() override {
    bufs_->WaitAllWrites();
    initializing_ = false;
    if (!bufs_->failed()) {
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
      if (const int b = bufs_->BufferOf(static_cast<int>(i)); b >= 0) bufs_->Detach(b);
    }
    ZR_THROW(IoError, "{} (rank {}: this step's optimizer state was not committed; the previous state is kept)",
             bufs_->TakeError(), opt_.dir.rank);
  }

  NvmeStateStoreStats stats() const override {
    NvmeStateStoreStats st = stats_;
    st.buffers = bufs_->count();
    st.buffer_bytes = buffer_bytes_;
    st.file_bytes = file_->file_bytes();
    st.file = file_->path();
    st.direct_io = space_->dir->direct_io();
    return st;
  }

 private:
  struct Sub {
    bool written = false;    // a record exists (else the state is zeros)
    bool acquired = false;
    zero::StateAccess access = zero::StateAccess::kRead;
    uint64_t committed = 0;  // the generation Flush committed
    uint64_t pending = 0;    // the generation written since (0: none)
  };

  void CheckIndex(int i) const {
    ZR_CHECK(i >= 0 && i < layout_.num_sub_groups(), "sub-group {} of {}", i, layout_.num_sub_groups());
  }
  static int SlotOf(int i, uint64_t gen) { return 2 * i + static_cast<int>(gen & 1); }
  // The newest record of a sub-group: this step's (written, not yet committed) or the committed one.
  static uint64_t ReadGeneration(const Sub& s) { return s.pending != 0 ? s.pending : s.committed; }

  zero::StateStoreLayout layout_;
  NvmeStateStoreOptions opt_;
  int64_t buffer_bytes_;
  std::unique_ptr<SwapSpace> space_;
  SwapFile* file_ = nullptr;     // space_'s
  SwapBuffers* bufs_ = nullptr;  // space_'s
  std::vector<Sub> subs_;
  std::function<bool(int)> acquired_ = [this](int i) { return subs_[static_cast<size_t>(i)].acquired; };
  bool initializing_ = false;
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

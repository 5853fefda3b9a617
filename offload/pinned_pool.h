// Page-aligned, page-locked host memory for I/O. O_DIRECT needs aligned buffers; io_uring registers
// them as fixed buffers (the kernel pins them once instead of per request); a device copies from them
// without staging. Memory is locked with mlock(2) where the limit allows (CAP_IPC_LOCK or a large
// enough RLIMIT_MEMLOCK) and used unlocked otherwise, with one warning naming the limit. Every byte is
// charged to MemCategory::kPinned on the memory account current at allocation.
//
// PinnedPool is DeepSpeed's buffer_count × buffer_size: a fixed number of equal buffers carved from one
// allocation, handed out as leases that return themselves on destruction.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "zerorun/offload/file_env.h"

namespace zerorun {
class MemoryAccount;
}

namespace zerorun::offload {

// One allocation. Move-only. Contents are zero after construction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // `bytes` is rounded up to a multiple of 4 KiB; from 4 MiB on, with huge_pages, to 2 MiB, aligned
  // and advised for transparent huge pages (fewer pages for the kernel to pin and map per request).
  // Throws OutOfMemoryError naming the size.
  explicit PinnedBuffer(int64_t bytes, bool huge_pages = true);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  int64_t size() const { return bytes_; }  // the rounded size
  bool locked() const { return locked_; }
  IoRegion region() const { return {data_, bytes_}; }

 private:
  void Free();
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  bool locked_ = false;
  MemoryAccount* account_ = nullptr;
};

class PinnedPool {
 public:
  // A borrowed buffer of the pool; returns itself on destruction. Move-only.
  class Lease {
   public:
    Lease() = default;
    ~Lease() { Release(); }
    Lease(Lease&& o) noexcept;
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    explicit operator bool() const { return pool_ != nullptr; }
    void* data() const { return data_; }
    template <class T>
    T* as() const { return static_cast<T*>(data_); }
    int64_t size() const;
    int index() const { return index_; }
    void Release();

   private:
    friend class PinnedPool;
    PinnedPool* pool_ = nullptr;
    void* data_ = nullptr;
    int index_ = -1;
  };

  // `num_buffers` buffers of `buffer_bytes` each, rounded up to kDirectIoAlignment, in one PinnedBuffer.
  // REQUIRES: both > 0.
  PinnedPool(int64_t buffer_bytes, int num_buffers, bool huge_pages = true);
  // REQUIRES: every lease has been released.
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A free buffer, or an empty lease when all are out.
  Lease TryAcquire();
  // Blocks until a buffer is free (another thread releases one).
  Lease Acquire();

  int num_buffers() const { return num_buffers_; }
  int64_t buffer_bytes() const { return buffer_bytes_; }
  int num_free() const;
  bool locked() const { return memory_.locked(); }
  int64_t total_bytes() const { return memory_.size(); }
  // One region per buffer, in index order (for IoEngine::RegisterBuffers).
  std::vector<IoRegion> Regions() const;

 private:
  void Return(int index);
  int64_t buffer_bytes_;
  int num_buffers_;
  PinnedBuffer memory_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> free_;
};

}  // namespace zerorun::offload

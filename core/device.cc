// The backend registry and the CPU backend (caching, huge-page-advised host allocator).
#include "zerorun/core/device.h"

#include <sys/mman.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"

namespace zerorun {

std::string Device::ToString() const {
  return is_cpu() ? std::string("cpu") : Format("cuda:{}", index);
}

namespace {

constexpr size_t kSmallAlign = 64;
constexpr size_t kPage = 4096;
constexpr size_t kHugePage = size_t{2} << 20;
// Blocks at least this large are rounded to whole huge pages, advised MADV_HUGEPAGE and cached.
constexpr size_t kLargeBlock = size_t{4} << 20;

// Blocks at least this large (and under kLargeBlock) are rounded to a size class and cached too: the
// activations and scratch of a small model are mostly 32 KiB..4 MiB, and glibc returns such blocks to
// the kernel (heap trimming, munmap of its mmap'd chunks) once they are freed, so every step paid its
// first-touch page faults again (4.6 k faults, ~10 % of a bench_train step at 1 thread).
constexpr size_t kMidBlock = size_t{32} << 10;

// Host allocator. Small blocks come from aligned_alloc. Mid-size blocks are rounded up to a size class
// (eight per power of two) and large ones to whole 2 MiB pages; freed blocks of either stay in a
// per-size cache and are handed out again for the same rounded size, so buffers that are re-created
// every step (activations, scratch) stay faulted-in. The cache is bounded; beyond the bound blocks go
// back to the system.
class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() {
    const char* env = std::getenv("ZERORUN_HOST_CACHE_BYTES");
    if (env != nullptr && *env != '\0') {
      char* end = nullptr;
      errno = 0;
      unsigned long long v = std::strtoull(env, &end, 10);
      if (*end != '\0' || errno != 0 || env[0] == '-') {
        std::fprintf(stderr, "zerorun: ignoring ZERORUN_HOST_CACHE_BYTES='%s' (expected a byte count)\n", env);
      } else {
        cache_limit_ = v;
      }
    }
  }

  void* Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    if (bytes < kMidBlock) {
      size_t rounded = (bytes + kSmallAlign - 1) / kSmallAlign * kSmallAlign;
      void* p = std::aligned_alloc(kSmallAlign, rounded);
      if (p == nullptr) ZR_THROW(OutOfMemoryError, "host allocation of {} failed", FormatBytes(bytes));
      return p;
    }
    const size_t rounded = Round(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(rounded);
      if (it != cache_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= rounded;
        return p;
      }
    }
    const size_t align = rounded >= kLargeBlock ? kHugePage : kPage;
    void* p = std::aligned_alloc(align, rounded);
    if (p == nullptr) {
      EmptyCache();
      p = std::aligned_alloc(align, rounded);
    }
    if (p == nullptr) ZR_THROW(OutOfMemoryError, "host allocation of {} failed", FormatBytes(bytes));
    if (rounded >= kLargeBlock) madvise(p, rounded, MADV_HUGEPAGE);  // advisory: failure is harmless
    return p;
  }

  void Deallocate(void* p, size_t bytes) override {
    if (p == nullptr) return;
    if (bytes < kMidBlock) {
      std::free(p);
      return;
    }
    const size_t rounded = Round(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + rounded <= cache_limit_) {
        cache_[rounded].push_back(p);
        cached_bytes_ += rounded;
        return;
      }
    }
    std::free(p);
  }

  void EmptyCache() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : cache_) {
      for (void* p : blocks) std::free(p);
    }
    cache_.clear();
    cached_bytes_ = 0;
  }

  size_t CachedBytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_bytes_;
  }

  // The size a block of `bytes` (>= kMidBlock) is allocated and cached as: whole 2 MiB pages from
  // kLargeBlock on, below that the next of eight classes per power of two (at most 1/8 more).
  static size_t Round(size_t bytes) {
    if (bytes >= kLargeBlock) return (bytes + kHugePage - 1) / kHugePage * kHugePage;
    const size_t step = std::bit_floor(bytes) / 8;  // bytes >= kMidBlock: step >= 4 KiB
    return (bytes + step - 1) / step * step;
  }

 private:
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> cache_;
  size_t cached_bytes_ = 0;
  size_t cache_limit_ = size_t{4} << 30;
};

class CpuStream final : public Stream {
 public:
  Device device() const override { return Device::CPU(); }
  void Synchronize() override {}
};

class CpuEvent final : public Event {
 public:
  void Record(Stream&) override {}
  void Block(Stream&) override {}
  bool Query() override { return true; }
  void Synchronize() override {}
};

class CpuBackend final : public DeviceBackend {
 public:
  int DeviceCount() const override { return 1; }
  Allocator& GetAllocator(int) override { return allocator_; }
  Allocator& GetPinnedHostAllocator() override { return allocator_; }
  std::unique_ptr<Stream> CreateStream(int) override { return std::make_unique<CpuStream>(); }
  Stream& DefaultStream(int) override { return stream_; }
  std::unique_ptr<Event> CreateEvent(int) override { return std::make_unique<CpuEvent>(); }
  void Copy(void* dst, Device, const void* src, Device, size_t bytes, Stream*) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }

 private:
  CpuAllocator allocator_;
  CpuStream stream_;
};

std::array<DeviceBackend*, 2>& Registry() {
  static std::array<DeviceBackend*, 2> registry = {new CpuBackend(), nullptr};  // live until exit
  return registry;
}

}  // namespace

void RegisterDeviceBackend(DeviceType type, DeviceBackend* backend) {
  Registry()[static_cast<size_t>(type)] = backend;
}

bool HasDeviceBackend(DeviceType type) { return Registry()[static_cast<size_t>(type)] != nullptr; }

DeviceBackend& GetDeviceBackend(DeviceType type) {
  DeviceBackend* b = Registry()[static_cast<size_t>(type)];
  if (b == nullptr) {
    ZR_THROW(InvalidArgument, "no backend for device type {}: zerorun was built without CUDA "
             "(reconfigure with -DZERORUN_CUDA=ON on a machine with the CUDA toolkit)", static_cast<int>(type));
  }
  return *b;
}

Allocator& GetAllocator(Device d) { return GetDeviceBackend(d.type).GetAllocator(d.index); }
std::unique_ptr<Stream> CreateStream(Device d) { return GetDeviceBackend(d.type).CreateStream(d.index); }
Stream& DefaultStream(Device d) { return GetDeviceBackend(d.type).DefaultStream(d.index); }
std::unique_ptr<Event> CreateEvent(Device d) { return GetDeviceBackend(d.type).CreateEvent(d.index); }

void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream* stream) {
  DeviceType t = dst_device.is_cpu() ? src_device.type : dst_device.type;
  GetDeviceBackend(t).Copy(dst, dst_device, src, src_device, bytes, stream);
}

}  // namespace zerorun

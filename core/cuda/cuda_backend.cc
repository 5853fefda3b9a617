// The CUDA device backend: cudaMalloc'd device memory, cudaHostAlloc'd pinned host memory,
// non-blocking streams, timing-free events, cudaMemcpyAsync copies. Registered at load time when
// zerorun is built with CUDA; a machine without a GPU simply reports DeviceCount() == 0.
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <vector>

#include "zerorun/core/cuda/cuda_check.h"
#include "zerorun/core/device.h"
#include "zerorun/core/format.h"

namespace zerorun {
namespace {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  void* Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    ZR_CUDA_CHECK(cudaSetDevice(index_));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      ZR_THROW(OutOfMemoryError, "cudaMalloc of {} on cuda:{} failed: {}", FormatBytes(bytes), index_,
               cudaGetErrorString(err));
    }
    return p;
  }
  void Deallocate(void* p, size_t) override {
    if (p != nullptr) cudaFree(p);
  }

 private:
  int index_;
};

class PinnedAllocator final : public Allocator {
 public:
  void* Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      ZR_THROW(OutOfMemoryError, "cudaHostAlloc of {} failed: {}", FormatBytes(bytes), cudaGetErrorString(err));
    }
    return p;
  }
  void Deallocate(void* p, size_t) override {
    if (p != nullptr) cudaFreeHost(p);
  }
};

class CudaStream final : public Stream {
 public:
  CudaStream(int index, bool is_default) : index_(index) {
    if (!is_default) {
      ZR_CUDA_CHECK(cudaSetDevice(index_));
      ZR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      owned_ = true;
    }
  }
  ~CudaStream() override {
    if (owned_) cudaStreamDestroy(stream_);
  }
  Device device() const override { return Device::CUDA(index_); }
  void Synchronize() override { ZR_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void* native_handle() const override { return stream_; }

 private:
  int index_;
  cudaStream_t stream_ = nullptr;  // nullptr: the legacy default stream
  bool owned_ = false;
};

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(int index) {
    ZR_CUDA_CHECK(cudaSetDevice(index));
    ZR_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  void Record(Stream& s) override {
    ZR_CUDA_CHECK(cudaEventRecord(event_, static_cast<cudaStream_t>(s.native_handle())));
  }
  void Block(Stream& s) override {
    ZR_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.native_handle()), event_, 0));
  }
  bool Query() override {
    cudaError_t err = cudaEventQuery(event_);
    if (err == cudaErrorNotReady) return false;
    ZR_CUDA_CHECK(err);
    return true;
  }
  void Synchronize() override { ZR_CUDA_CHECK(cudaEventSynchronize(event_)); }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    count_ = n;
    for (int i = 0; i < n; ++i) {
      allocators_.push_back(std::make_unique<CudaAllocator>(i));
      default_streams_.push_back(std::make_unique<CudaStream>(i, /*is_default=*/true));
    }
  }
  int DeviceCount() const override { return count_; }
  Allocator& GetAllocator(int index) override { return *allocators_.at(Checked(index)); }
  Allocator& GetPinnedHostAllocator() override { return pinned_; }
  std::unique_ptr<Stream> CreateStream(int index) override {
    return std::make_unique<CudaStream>(static_cast<int>(Checked(index)), false);
  }
  Stream& DefaultStream(int index) override { return *default_streams_.at(Checked(index)); }
  std::unique_ptr<Event> CreateEvent(int index) override {
    return std::make_unique<CudaEvent>(static_cast<int>(Checked(index)));
  }
  void Copy(void* dst, Device, const void* src, Device, size_t bytes, Stream* stream) override {
    if (bytes == 0) return;
    if (stream == nullptr) {
      ZR_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
    } else {
      ZR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                    static_cast<cudaStream_t>(stream->native_handle())));
    }
  }

 private:
  size_t Checked(int index) const {
    if (index < 0 || index >= count_) {
      ZR_THROW(InvalidArgument, "cuda:{} requested but {} CUDA device(s) are visible", index, count_);
    }
    return static_cast<size_t>(index);
  }
  int count_ = 0;
  std::vector<std::unique_ptr<CudaAllocator>> allocators_;
  std::vector<std::unique_ptr<CudaStream>> default_streams_;
  PinnedAllocator pinned_;
};

// Registered lazily-constructed: probing devices at load time would initialise the CUDA driver in
// every process that links zerorun, so the backend is created on first use.
class LazyCudaBackend final : public DeviceBackend {
 public:
  int DeviceCount() const override { return Get().DeviceCount(); }
  Allocator& GetAllocator(int i) override { return Get().GetAllocator(i); }
  Allocator& GetPinnedHostAllocator() override { return Get().GetPinnedHostAllocator(); }
  std::unique_ptr<Stream> CreateStream(int i) override { return Get().CreateStream(i); }
  Stream& DefaultStream(int i) override { return Get().DefaultStream(i); }
  std::unique_ptr<Event> CreateEvent(int i) override { return Get().CreateEvent(i); }
  void Copy(void* d, Device dd, const void* s, Device sd, size_t n, Stream* st) override {
    Get().Copy(d, dd, s, sd, n, st);
  }

 private:
  static CudaBackend& Get() {
    static CudaBackend* backend = new CudaBackend();  // lives until exit
    return *backend;
  }
};

const bool kRegistered = [] {
  RegisterDeviceBackend(DeviceType::kCUDA, new LazyCudaBackend());
  return true;
}();

}  // namespace
}  // namespace zerorun

// Devices and their backends: Allocator (raw memory), Stream (ordered work), Event (a point in a
// stream), and copies. The CPU backend is always present: its streams run work in call order (every
// operation is complete when the call returns) and its allocator caches large blocks, aligned and
// advised for transparent huge pages, because first touch of fresh 4 KiB pages costs 1-2 GB/s here.
// The CUDA backend (core/cuda/) registers itself when zerorun is built with CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zerorun {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device CPU() { return {}; }
  static Device CUDA(int index) { return {DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string ToString() const;  // "cpu", "cuda:0"
  friend bool operator==(const Device&, const Device&) = default;
};

// Raw memory of one device. Allocate never returns nullptr for bytes > 0: it throws
// OutOfMemoryError naming the device and size. Thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // At least 64-byte aligned; 2 MiB aligned for large host blocks.
  virtual void* Allocate(size_t bytes) = 0;
  // `bytes` must be the size passed to Allocate.
  virtual void Deallocate(void* ptr, size_t bytes) = 0;
  // Returns cached blocks to the system.
  virtual void EmptyCache() {}
  // Bytes held in the cache (allocated from the system, not handed out).
  virtual size_t CachedBytes() const { return 0; }
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  // Blocks until all work enqueued so far has completed. Throws on a device error.
  virtual void Synchronize() = 0;
  // cudaStream_t for CUDA streams; nullptr for CPU.
  virtual void* native_handle() const { return nullptr; }
};

class Event {
 public:
  virtual ~Event() = default;
  // Marks the current end of `stream`.
  virtual void Record(Stream& stream) = 0;
  // Makes future work on `stream` wait for this event (without blocking the host).
  virtual void Block(Stream& stream) = 0;
  // True once the recorded work has completed.
  virtual bool Query() = 0;
  // Blocks the host until the recorded work has completed.
  virtual void Synchronize() = 0;
};

// What a device type provides. Backends are registered once, at load time.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual int DeviceCount() const = 0;
  virtual Allocator& GetAllocator(int index) = 0;
  // Host memory the device can DMA from/to (cudaHostAlloc for CUDA).
  virtual Allocator& GetPinnedHostAllocator() = 0;
  virtual std::unique_ptr<Stream> CreateStream(int index) = 0;
  virtual Stream& DefaultStream(int index) = 0;
  virtual std::unique_ptr<Event> CreateEvent(int index) = 0;
  // Copies `bytes` between any two devices of this backend or the host; asynchronous on `stream`
  // where the backend allows (nullptr: the default stream, synchronous with the host).
  virtual void Copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                    Stream* stream) = 0;
};

// Throws InvalidArgument when the type has no backend (e.g. CUDA in a build without CUDA).
DeviceBackend& GetDeviceBackend(DeviceType type);
bool HasDeviceBackend(DeviceType type);
void RegisterDeviceBackend(DeviceType type, DeviceBackend* backend);

// Shorthands.
Allocator& GetAllocator(Device device);
std::unique_ptr<Stream> CreateStream(Device device);
Stream& DefaultStream(Device device);
std::unique_ptr<Event> CreateEvent(Device device);
// Copies between devices; uses the non-CPU device's backend (CPU<->CPU is memcpy).
void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
               Stream* stream = nullptr);

}  // namespace zerorun

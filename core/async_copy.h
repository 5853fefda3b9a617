// Copies between a device and host memory on a stream of their own: each copy is ordered after the
// work its source's producer stream had enqueued when it was asked for, and hands back a ticket (an
// event) that a device consumer waits for on its stream, or a host consumer blocks on. This is the
// copy scheduling of CPU offload on a device (DeepSpeed's ZeRO-Offload): reduced gradient slices go
// device -> pinned host while backward goes on, updated 16-bit parameters come back host -> device
// before the next forward reads them. On the CPU device every copy is complete when it returns.
#pragma once

#include <cstddef>
#include <memory>

#include "zerorun/core/device.h"
#include "zerorun/core/tensor.h"

namespace zerorun {

// A host tensor the device can DMA from and to (the device backend's pinned allocator: cudaHostAlloc
// for CUDA; ordinary host memory for the CPU), charged to MemCategory::kPinned.
Tensor PinnedHostTensor(const Shape& shape, DType dtype, Device device);

class AsyncCopier {
 public:
  struct Ticket {
    std::shared_ptr<Event> done;  // null: nothing to wait for
  };

  // `device`: the device side of every copy (the CPU too: its copies are complete when they return).
  explicit AsyncCopier(Device device);
  AsyncCopier(const AsyncCopier&) = delete;
  AsyncCopier& operator=(const AsyncCopier&) = delete;

  // dst <- src (`bytes`), one side on device(), the other on the host (pinned memory for a truly
  // asynchronous copy), after what `producer` (nullptr: the device's default stream) holds now.
  Ticket Copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
              Stream* producer = nullptr);
  // Same for tensors of equal bytes.
  Ticket Copy(const Tensor& dst, const Tensor& src, Stream* producer = nullptr);

  // Work enqueued on `consumer` from now on runs after the copy (the host does not block).
  static void WaitOn(const Ticket& t, Stream& consumer);
  // Blocks the host until the copy completed (before the host reads or rewrites its buffer).
  static void Wait(const Ticket& t);

  Device device() const { return device_; }
  Stream& stream() { return *stream_; }
  int64_t copies() const { return copies_; }

 private:
  Device device_;
  std::unique_ptr<Stream> stream_;
  int64_t copies_ = 0;
};

}  // namespace zerorun

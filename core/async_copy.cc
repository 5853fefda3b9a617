// AsyncCopier and pinned host tensors (core/async_copy.h).
#include "zerorun/core/async_copy.h"

#include "zerorun/core/error.h"

namespace zerorun {

Tensor PinnedHostTensor(const Shape& shape, DType dtype, Device device) {
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  Allocator& pinned = GetDeviceBackend(device.type).GetPinnedHostAllocator();
  return Tensor::FromStorage(Storage::AllocateWith(pinned, bytes, Device::CPU(), MemCategory::kPinned), 0, shape,
                             dtype);
}

AsyncCopier::AsyncCopier(Device device) : device_(device), stream_(CreateStream(device)) {}

AsyncCopier::Ticket AsyncCopier::Copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                                      Stream* producer) {
  if (!(dst_device == device_ || src_device == device_) || !(dst_device.is_cpu() || src_device.is_cpu())) {
    ZR_THROW(InvalidArgument, "AsyncCopier on {}: a copy {} -> {} is not between {} and the host",
             device_.ToString(), src_device.ToString(), dst_device.ToString(), device_.ToString());
  }
  if (producer != nullptr && !(producer->device() == device_)) {
    ZR_THROW(InvalidArgument, "AsyncCopier on {}: the producer stream belongs to {}", device_.ToString(),
             producer->device().ToString());
  }
  Ticket t;
  if (bytes == 0) return t;
  Stream& from = producer != nullptr ? *producer : DefaultStream(device_);
  std::unique_ptr<Event> ready = CreateEvent(device_);
  ready->Record(from);
  ready->Block(*stream_);
  CopyBytes(dst, dst_device, src, src_device, bytes, stream_.get());
  t.done = std::shared_ptr<Event>(CreateEvent(device_));
  t.done->Record(*stream_);
  ++copies_;
  return t;
}

AsyncCopier::Ticket AsyncCopier::Copy(const Tensor& dst, const Tensor& src, Stream* producer) {
  if (dst.nbytes() != src.nbytes()) {
    ZR_THROW(InvalidArgument, "AsyncCopier: {} into {} (sizes differ)", src.ToString(), dst.ToString());
  }
  return Copy(dst.data(), dst.device(), src.data(), src.device(), dst.nbytes(), producer);
}

void AsyncCopier::WaitOn(const Ticket& t, Stream& consumer) {
  if (t.done) t.done->Block(consumer);
}

void AsyncCopier::Wait(const Ticket& t) {
  if (t.done) t.done->Synchronize();
}

}  // namespace zerorun

// Host buffers staged through device memory for device communicators (comm/device_staging.h).
#include "zerorun/comm/device_staging.h"

#include <algorithm>

#include "zerorun/core/error.h"

namespace zerorun::comm {

size_t SendBytes(const OpDesc& op, int world, int rank) {
  const size_t n = op.count * DTypeSize(op.dtype), w = static_cast<size_t>(world);
  switch (op.op) {
    case OpType::kAllReduce:
    case OpType::kAllGather:
    case OpType::kSend:
      return n;
    case OpType::kReduce:
      return n;
    case OpType::kReduceScatter:
      return n * w;
    case OpType::kBroadcast:
      return op.root == rank ? n : 0;
    case OpType::kBarrier:
    case OpType::kRecv:
      return 0;
  }
  return 0;
}

size_t RecvBytes(const OpDesc& op, int world, int rank) {
  const size_t n = op.count * DTypeSize(op.dtype), w = static_cast<size_t>(world);
  switch (op.op) {
    case OpType::kAllReduce:
    case OpType::kReduceScatter:
    case OpType::kRecv:
    case OpType::kBroadcast:
      return n;
    case OpType::kAllGather:
      return n * w;
    case OpType::kReduce:
      return op.root == rank ? n : 0;
    case OpType::kBarrier:
    case OpType::kSend:
      return 0;
  }
  return 0;
}

void* HostStaging::Scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    const size_t size = std::max<size_t>(bytes, 4096);
    Allocator& a = GetAllocator(device_);
    void* p = a.Allocate(size);
    scratch_ = std::shared_ptr<void>(p, [&a, size](void* q) { a.Deallocate(q, size); });
    scratch_bytes_ = size;
  }
  return scratch_.get();
}

void HostStaging::StageImpl(OpDesc& op, int world, int rank, Stream& stream, bool send_host, bool recv_host) {
  const size_t sb = SendBytes(op, world, rank), rb = RecvBytes(op, world, rank);
  const auto* s = static_cast<const char*>(op.send);
  auto* r = static_cast<char*>(op.recv);
  host_send_ = send_host ? op.send : nullptr;
  host_recv_ = recv_host ? op.recv : nullptr;
  recv_bytes_ = recv_host ? rb : 0;
  // One scratch holding both buffers, keeping an in-place relation between them.
  const bool send_in_recv = send_host && recv_host && s >= r && s + sb <= r + rb;
  const bool recv_in_send = send_host && recv_host && !send_in_recv && r >= s && r + rb <= s + sb;
  size_t send_at = 0, recv_at = 0, total = 0;
  if (send_in_recv) {
    recv_at = 0, send_at = static_cast<size_t>(s - r), total = rb;
  } else if (recv_in_send) {
    send_at = 0, recv_at = static_cast<size_t>(r - s), total = sb;
  } else {
    const size_t a = send_host ? (sb + 255) / 256 * 256 : 0;
    send_at = 0, recv_at = a, total = a + (recv_host ? rb : 0);
  }
  char* base = static_cast<char*>(Scratch(std::max<size_t>(total, 1)));
  if (send_host) {
    if (sb > 0) CopyBytes(base + send_at, device_, s, Device::CPU(), sb, &stream);
    op.send = base + send_at;
  }
  if (recv_host) {
    // A recv the op reads too (in place, or broadcast from the root) already holds its data.
    if (!send_in_recv && !recv_in_send && (op.send == nullptr || !send_host) && rb > 0 &&
        (op.op == OpType::kBroadcast || s == r)) {
      CopyBytes(base + recv_at, device_, r, Device::CPU(), rb, &stream);
    }
    op.recv = base + recv_at;
  }
  if (send_host && recv_host && s == r) op.recv = base + send_at;
  ++staged_ops_;
}

void HostStaging::Unstage(OpDesc& op, Stream& stream) {
  if (host_recv_ != nullptr && recv_bytes_ > 0) {
    CopyBytes(host_recv_, Device::CPU(), op.recv, device_, recv_bytes_, &stream);
    stream.Synchronize();
  }
  if (host_send_ != nullptr) op.send = host_send_;
  if (host_recv_ != nullptr) op.recv = host_recv_;
  host_send_ = nullptr;
  host_recv_ = nullptr;
  recv_bytes_ = 0;
}

}  // namespace zerorun::comm

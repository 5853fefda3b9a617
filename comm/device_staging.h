// Host buffers on a device-memory communicator (NCCL takes device pointers only). The engine and
// zero/ agree small host values across ranks (the overflow flag, sums of squares, Lamb's norms,
// stage-3 gather signatures, checkpoint and save agreement); a device backend stages such buffers
// through device scratch memory: the host send data is copied in on the communicator's stream before
// the op, the op runs on the scratch, and the result is copied back, the host waiting for it (as the
// op's completion already makes it wait). In-place layouts (all-gather's send inside recv,
// reduce-scatter's recv inside send, send == recv) keep their offsets in the scratch.
#pragma once

#include <memory>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/device.h"

namespace zerorun::comm {

// Bytes `op` reads from `send` and writes to `recv` in a group of `world` ranks (0 when unused).
size_t SendBytes(const OpDesc& op, int world, int rank);
size_t RecvBytes(const OpDesc& op, int world, int rank);

class HostStaging {
 public:
  explicit HostStaging(Device device) : device_(device) {}

  // Redirects op's send/recv that `is_host` says are host memory to device scratch, copying the
  // host send data in on `stream`. Returns false (op unchanged) when nothing is on the host.
  template <typename IsHost>
  bool Stage(OpDesc& op, int world, int rank, Stream& stream, IsHost is_host) {
    const bool s = op.send != nullptr && is_host(op.send), r = op.recv != nullptr && is_host(op.recv);
    if (!s && !r) return false;
    StageImpl(op, world, rank, stream, s, r);
    return true;
  }
  // After the op was enqueued on `stream`: copies a staged recv back to its host buffer, waits for
  // it, and restores op's pointers.
  void Unstage(OpDesc& op, Stream& stream);

  int64_t staged_ops() const { return staged_ops_; }

 private:
  void StageImpl(OpDesc& op, int world, int rank, Stream& stream, bool send_host, bool recv_host);
  void* Scratch(size_t bytes);

  Device device_;
  std::shared_ptr<void> scratch_;
  size_t scratch_bytes_ = 0;
  const void* host_send_ = nullptr;
  void* host_recv_ = nullptr;
  size_t recv_bytes_ = 0;
  int64_t staged_ops_ = 0;
};

}  // namespace zerorun::comm

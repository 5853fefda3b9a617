// A recording fake of a CUDA device for CPU tests (tests/device): registered as DeviceType::kCUDA for
// the lifetime of a FakeCudaDevice, it lets the module graph, the engine and zero/ run on
// Device::CUDA(0) in a build without a GPU, through the same core/ and kernels/ seams a GPU uses.
//
// - Memory: host memory handed out as *tagged* addresses (bit 62 set: non-canonical on x86-64), so
//   any host dereference of "device" memory outside the device abstraction faults at once. The
//   kernel table, the optimizer table, copies and the fake communicator untag before touching data.
// - Work runs synchronously on the host (results are those of the CPU kernels), and every kernel,
//   copy and collective is recorded with the byte ranges it reads and writes and the stream it was
//   issued on. An ordering checker keeps vector clocks per stream (events carry a clock; Block merges
//   it; host synchronisation publishes a stream's clock to the host, and work enqueued afterwards
//   is ordered after it) and reports every access that conflicts with an earlier access on another
//   stream not ordered before it: what a real asynchronous device would race on.
// Limits: one host clock for all host threads (a host wait on any thread orders later work on all
// threads), which can hide a missing wait but never invents a race; kernels of the CPU table that
// return host values (CrossEntropy, SumSquares, AllFinite) count as a synchronisation of their stream,
// as on the CUDA table.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/device.h"

namespace zrtest::fake {

using namespace zerorun;

inline constexpr uintptr_t kTag = uintptr_t{1} << 62;
inline bool IsTagged(const void* p) { return (reinterpret_cast<uintptr_t>(p) & kTag) != 0; }
// The host address behind a fake device address (others unchanged).
inline void* Untag(const void* p) {
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<void*>((u & kTag) ? u - kTag : u);
}

struct Counts {
  int64_t kernels = 0;
  int64_t copies = 0;
  int64_t collectives = 0;
  int64_t events_recorded = 0;
  int64_t stream_waits = 0;
  int64_t host_syncs = 0;
  int64_t device_bytes_allocated = 0;  // current
};

// Installs the fake as the CUDA device backend, kernel table and optimizer table until destroyed
// (restoring what was registered before: the real CUDA ones in CUDA builds). One at a time.
class FakeCudaDevice {
 public:
  FakeCudaDevice();
  ~FakeCudaDevice();
  FakeCudaDevice(const FakeCudaDevice&) = delete;
  FakeCudaDevice& operator=(const FakeCudaDevice&) = delete;

  static Device device() { return Device::CUDA(0); }
  Counts counts() const;
  // Ordering violations found so far (each names both accesses), at most 64 kept.
  std::vector<std::string> violations() const;
  int64_t violation_count() const;
  // Records an access by name, for tests of the checker itself and for fake collectives.
  void Access(const char* what, Stream* stream, const void* p, size_t bytes, bool write);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A communicator over `inner` (a `local` backend rank) whose buffers are fake device memory: each op
// is ordered as a device backend orders it (an event recorded on the submitting thread's kernel stream
// at submission, which the communicator's own stream waits for before the op; the op's accesses on
// that stream; the host waits for its completion event before the Work completes), then carried out
// by `inner` on the untagged host buffers.
std::unique_ptr<comm::Communicator> MakeFakeDeviceComm(comm::Communicator& inner);

}  // namespace zrtest::fake

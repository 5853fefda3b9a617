// The offload I/O engine: moves bytes between host buffers and files, asynchronously, the way
// DeepSpeed's aio handle does (deepspeed.md §9.2) but on io_uring. A transfer is split into
// `intra_op_parallelism` contiguous parts, one per worker; each worker owns an io_uring ring and keeps
// up to `queue_depth` requests of `block_size` bytes in flight on it. The pread engine runs the same
// split with one synchronous pread/pwrite per worker at a time: it is the oracle in tests and the
// fallback where io_uring cannot be set up.
//
// Contract (both engines):
//  - Submit returns at once; the transfer's outcome is collected with IoWork::Wait.
//  - Every system call's result is checked. A short read or write is retried for the remainder; a
//    request that keeps making no progress (max_retries) fails. EINTR/EAGAIN are retried.
//  - Failures are IoError naming the rank (when known), the operation, the file, the offset and the
//    errno text; ENOSPC/EDQUOT add the free space left; reading past the end of the file is an IoError
//    ("unexpected end of file") with the file's size, never zero-filled data.
//  - Bad arguments (misaligned O_DIRECT buffer, offset or length; a read-only file for a write) are
//    InvalidArgument from Submit itself, before anything is queued.
//  - Thread safety: Submit, Read, Write and Stats may be called from several threads at once;
//    RegisterBuffers waits until no work is in flight.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zerorun/offload/file_env.h"

namespace zerorun::offload {

enum class IoEngineKind : uint8_t {
  kAuto = 0,   // io_uring; the pread engine with a warning when the ring cannot be set up
  kUring = 1,  // io_uring (liburing); IoError when the ring cannot be set up
  kPread = 2,  // pread/pwrite
};
const char* IoEngineKindName(IoEngineKind k);  // "auto", "io_uring", "pread"
// "auto", "io_uring" (or "uring"), "pread"; throws InvalidArgument naming the choices.
IoEngineKind ParseIoEngineKind(std::string_view name);

// The `aio` config section (docs/offload.md) plus what the engine needs besides.
struct IoEngineOptions {
  int64_t block_size = 1 << 20;   // aio.block_size: bytes per request; a multiple of kDirectIoAlignment, <= 1 GiB
  int queue_depth = 8;            // aio.queue_depth: requests in flight per worker (io_uring only)
  int intra_op_parallelism = 1;   // aio.intra_op_parallelism: workers that split every transfer
  bool single_submit = false;     // aio.single_submit: one io_uring_submit per request, not per batch
  bool overlap_events = true;     // aio.overlap_events: refill as completions arrive (false: submit a
                                  // batch of queue_depth, wait for all of it, then the next batch)
  IoEngineKind kind = IoEngineKind::kAuto;
  int rank = -1;                  // named in error messages (-1: none)
  FileEnv* env = nullptr;         // nullptr: FileEnv::Default()
  int max_retries = 8;            // consecutive retries of a request without progress before IoError
  double stall_warning_s = 60;    // an io_uring worker waiting this long for a completion logs a warning
                                  // (repeatedly; in-flight buffers cannot be abandoned, so it keeps waiting)
};
// Throws InvalidArgument naming the aio key when a value is out of range.
void ValidateIoEngineOptions(const IoEngineOptions& o);

// What an engine has done (cumulative; for tests, benchmarks and diagnostics).
struct IoStats {
  int64_t requests = 0;         // requests completed, a retried remainder counting again
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t fixed_requests = 0;   // io_uring requests that used a registered buffer
  int64_t submit_calls = 0;     // io_uring_submit calls (pread engine: one per request)
  int64_t short_transfers = 0;  // completions with fewer bytes than asked (the rest was retried)
  int64_t retries = 0;          // EINTR/EAGAIN resubmissions
  int max_in_flight = 0;        // the most requests one worker had in flight at once
  std::vector<int64_t> worker_bytes;  // bytes moved by each worker
};

namespace detail {
struct IoWorkState;
}

// The handle of one Submit. Move-only. Destroying an un-waited handle waits (buffers must outlive the
// transfer) and logs an error it did not get to throw.
class IoWork {
 public:
  IoWork() = default;  // complete, no error
  explicit IoWork(std::shared_ptr<detail::IoWorkState> state) : state_(std::move(state)) {}
  ~IoWork();
  IoWork(IoWork&&) noexcept = default;
  IoWork& operator=(IoWork&& o) noexcept;
  IoWork(const IoWork&) = delete;
  IoWork& operator=(const IoWork&) = delete;

  // Blocks until the transfer is complete; throws IoError for the first request that failed. A second
  // Wait returns at once (and does not throw again).
  void Wait();
  bool Done() const;

 private:
  std::shared_ptr<detail::IoWorkState> state_;
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;  // implementations finish all submitted work first

  // Starts moving `bytes` between `buf` and [offset, offset + bytes) of `file`.
  // REQUIRES: `file` and `buf` stay valid until the work is complete.
  // Throws InvalidArgument for: a closed file; a write to a read-only file; offset or bytes < 0; an
  // O_DIRECT file with buf, offset or bytes not a multiple of file.alignment().
  virtual IoWork Submit(IoOp op, const IoFile& file, int64_t offset, void* buf, int64_t bytes) = 0;
  IoWork SubmitRead(const IoFile& file, int64_t offset, void* buf, int64_t bytes) {
    return Submit(IoOp::kRead, file, offset, buf, bytes);
  }
  IoWork SubmitWrite(const IoFile& file, int64_t offset, const void* buf, int64_t bytes) {
    return Submit(IoOp::kWrite, file, offset, const_cast<void*>(buf), bytes);
  }
  void Read(const IoFile& file, int64_t offset, void* buf, int64_t bytes) { SubmitRead(file, offset, buf, bytes).Wait(); }
  void Write(const IoFile& file, int64_t offset, const void* buf, int64_t bytes) {
    SubmitWrite(file, offset, buf, bytes).Wait();
  }

  // Registers `regions` as fixed buffers (io_uring_register_buffers on every worker ring), replacing
  // earlier ones: a request lying wholly inside one region then uses READ_FIXED/WRITE_FIXED. Waits
  // until no work is in flight. Returns false, with a warning naming the reason (RLIMIT_MEMLOCK, ...),
  // when the kernel refuses; requests then use the buffers unregistered. The pread engine has nothing
  // to register and returns false. REQUIRES: regions stay mapped while registered.
  virtual bool RegisterBuffers(const std::vector<IoRegion>& regions) = 0;

  virtual IoEngineKind kind() const = 0;
  const char* name() const { return IoEngineKindName(kind()); }
  virtual const IoEngineOptions& options() const = 0;
  virtual IoStats Stats() const = 0;
};

// An engine of options.kind. kAuto: io_uring, or — when io_uring_queue_init fails — the pread engine,
// with a warning naming the reason. Throws InvalidArgument for bad options, IoError when kUring is
// asked for and the ring cannot be set up.
std::unique_ptr<IoEngine> CreateIoEngine(const IoEngineOptions& options);

}  // namespace zerorun::offload

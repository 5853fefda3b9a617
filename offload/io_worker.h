// Internal: what the io_uring and pread engines share — splitting a transfer into one part per worker,
// the worker threads and their queues, completion of IoWork handles, statistics, and error messages.
// A backend implements Serve(worker): take parts with PopPart, move their bytes, call FinishPart.
// Not part of the public API.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zerorun/offload/io_engine.h"

namespace zerorun::offload {

namespace detail {
// Shared by an IoWork and the parts of its transfer.
struct IoWorkState {
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;     // parts not finished
  std::string error;   // the first part's failure ("" : none)
  bool collected = false;  // Wait has returned (or thrown) once
};
}  // namespace detail

// A worker's share of one transfer: [offset, offset + bytes) of the file, to or from buf.
struct IoPart {
  IoOp op = IoOp::kRead;
  const IoFile* file = nullptr;
  char* buf = nullptr;
  int64_t offset = 0;
  int64_t bytes = 0;
  std::shared_ptr<detail::IoWorkState> work;
};

class WorkerEngine : public IoEngine {
 public:
  IoWork Submit(IoOp op, const IoFile& file, int64_t offset, void* buf, int64_t bytes) override;
  const IoEngineOptions& options() const override { return options_; }
  IoStats Stats() const override;

 protected:
  // Validates the options; threads start with StartWorkers (after the backend is set up).
  explicit WorkerEngine(const IoEngineOptions& options);
  // Backends call this first in their destructor: finishes queued work, joins the workers.
  void StopWorkers();
  void StartWorkers();

  // Worker w's next part. block: wait until one arrives; returns false when stopping and none is left.
  bool PopPart(int w, IoPart* part, bool block);
  // Completes a part (error "" : success) and, with it, its IoWork once every part is done.
  void FinishPart(IoPart& part, const std::string& error);
  // Blocks until no part is queued or in flight; the caller holds submit_mu_ so none is added.
  void WaitIdle(std::unique_lock<std::mutex>& submit_lock);

  // "rank 2: io_uring write of 1.00 MiB at offset 4096 of /x/y failed: No space left on device (...)".
  std::string Failure(IoOp op, const IoFile& file, int64_t offset, int64_t bytes, int err) const;
  // The end of file came before the transfer's end.
  std::string EndOfFile(const IoFile& file, int64_t offset, int64_t bytes) const;
  // Whether `offset` is at or past the file's end (after a short read).
  bool AtEndOfFile(const IoFile& file, int64_t offset) const;
  // A request made no progress max_retries times in a row.
  std::string NoProgress(IoOp op, const IoFile& file, int64_t offset, int64_t bytes) const;

  void CountRequest(IoOp op, int w, int64_t bytes, bool fixed);
  void CountInFlight(int n);

  virtual void Serve(int w) = 0;

  IoEngineOptions options_;
  FileEnv& env_;
  std::mutex submit_mu_;  // Submit vs RegisterBuffers
  std::atomic<int64_t> submit_calls_{0};
  std::atomic<int64_t> short_transfers_{0};
  std::atomic<int64_t> retries_{0};

 private:
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<IoPart> parts;
  };
  std::vector<std::unique_ptr<Queue>> queues_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::mutex idle_mu_;
  std::condition_variable idle_cv_;
  int64_t outstanding_ = 0;  // parts submitted and not finished (idle_mu_)
  std::atomic<uint32_t> rotor_{0};  // the worker that takes the next transfer's first part

  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> bytes_read_{0};
  std::atomic<int64_t> bytes_written_{0};
  std::atomic<int64_t> fixed_requests_{0};
  std::atomic<int> max_in_flight_{0};
  std::unique_ptr<std::atomic<int64_t>[]> worker_bytes_;
};

// Backend factories (io_engine_pread.cc, io_engine_uring.cc). CreateUringEngine throws IoError when
// the ring cannot be set up.
std::unique_ptr<IoEngine> CreatePreadEngine(const IoEngineOptions& options);
std::unique_ptr<IoEngine> CreateUringEngine(const IoEngineOptions& options);

}  // namespace zerorun::offload

// The pread/pwrite engine: each worker moves its part with one synchronous system call per block.
// Simple enough to be the oracle the io_uring engine is tested against, and the fallback where
// io_uring cannot be set up. queue_depth, single_submit and overlap_events have no meaning here.
#include <cerrno>

#include "zerorun/offload/io_worker.h"

namespace zerorun::offload {
namespace {

class PreadEngine final : public WorkerEngine {
 public:
  explicit PreadEngine(const IoEngineOptions& options) : WorkerEngine(options) { StartWorkers(); }
  ~PreadEngine() override { StopWorkers(); }

  bool RegisterBuffers(const std::vector<IoRegion>&) override { return false; }
  IoEngineKind kind() const override { return IoEngineKind::kPread; }

 private:
  void Serve(int w) override {
    IoPart part;
    while (PopPart(w, &part, /*block=*/true)) FinishPart(part, Transfer(w, part));
  }

  // Moves one part; returns "" or the error message.
  std::string Transfer(int w, const IoPart& part) {
    const IoFile& file = *part.file;
    int64_t done = 0;
    while (done < part.bytes) {
      // One block; a short transfer continues with the rest of the same block.
      const int64_t block_end = std::min(part.bytes, (done / options_.block_size + 1) * options_.block_size);
      int no_progress = 0;
      while (done < block_end) {
        char* p = part.buf + done;
        const int64_t off = part.offset + done;
        const int64_t len = block_end - done;
        CountInFlight(1);
        submit_calls_.fetch_add(1, std::memory_order_relaxed);
        const int64_t r = part.op == IoOp::kRead ? env_.Pread(file.fd(), p, len, off) : env_.Pwrite(file.fd(), p, len, off);
        if (r == -EINTR || r == -EAGAIN || r == 0) {
          if (r == 0 && part.op == IoOp::kRead) return EndOfFile(file, off, len);
          retries_.fetch_add(1, std::memory_order_relaxed);
          if (++no_progress >= options_.max_retries) return NoProgress(part.op, file, off, len);
          continue;
        }
        if (r < 0) return Failure(part.op, file, off, len, static_cast<int>(-r));
        no_progress = 0;
        CountRequest(part.op, w, r, /*fixed=*/false);
        done += r;
        if (r < len) {
          short_transfers_.fetch_add(1, std::memory_order_relaxed);
          if (part.op == IoOp::kRead && AtEndOfFile(file, off + r)) return EndOfFile(file, off + r, len - r);
        }
      }
    }
    return "";
  }
};

}  // namespace

std::unique_ptr<IoEngine> CreatePreadEngine(const IoEngineOptions& options) {
  return std::make_unique<PreadEngine>(options);
}

}  // namespace zerorun::offload

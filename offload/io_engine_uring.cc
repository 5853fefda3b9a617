// The io_uring engine (liburing). Each worker owns one ring and keeps it full, the way
// liburing's examples/io_uring-cp.c does:
//
//   fill:  while fewer than queue_depth requests are in flight and a part has blocks left, prepare the
//          next block (READ_FIXED/WRITE_FIXED when it lies in a registered buffer); submit once per
//          batch, or once per request with single_submit.
//   reap:  wait for one completion, then take every completion that is ready. A short transfer is
//          resubmitted for its remainder, EINTR/EAGAIN for the whole request; anything else fails the
//          part (its other requests are still reaped: their buffers are the caller's until then).
//   overlap_events false: fill only when nothing is in flight, and reap until nothing is — a batch of
//          queue_depth requests at a time, as DeepSpeed's aio does with it off.
//
// Every completion's result passes through FileEnv::UringCompleted, where tests inject faults.
#include <liburing.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <list>
#include <thread>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/offload/io_worker.h"

namespace zerorun::offload {
namespace {

// The kernel's limit for one registered buffer.
constexpr int64_t kMaxFixedBufferBytes = int64_t{1} << 30;

// An io_uring instance, set up through the FileEnv seam. Move-less; owned by its worker.
class Ring {
 public:
  Ring(FileEnv& env, unsigned entries, int rank) {
    // COOP_TASKRUN: completions are processed when the worker enters the kernel to wait anyway, not by
    // interrupting it (Linux 5.19+; older kernels refuse the flag with EINVAL and get a plain ring).
    int r = env.UringQueueInit(entries, &ring_, IORING_SETUP_COOP_TASKRUN);
    if (r == -EINVAL) r = env.UringQueueInit(entries, &ring_, 0);
    if (r < 0) {
      throw IoError(ErrnoMessage(Format("{}io_uring is unavailable: io_uring_queue_init({} entries) failed",
                                        rank >= 0 ? Format("rank {}: ", rank) : "", entries),
                                 -r));
    }
  }
  ~Ring() { io_uring_queue_exit(&ring_); }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  io_uring* get() { return &ring_; }
  bool buffers_registered = false;

 private:
  io_uring ring_{};
};

class UringEngine final : public WorkerEngine {
 public:
  explicit UringEngine(const IoEngineOptions& options) : WorkerEngine(options) {
    // Rings are set up here, on the caller's thread, so a failing io_uring_queue_init is an error of
    // the constructor (and CreateIoEngine can fall back) rather than of some later transfer.
    for (int w = 0; w < options_.intra_op_parallelism; ++w) {
      rings_.push_back(std::make_unique<Ring>(env_, static_cast<unsigned>(options_.queue_depth), options_.rank));
    }
    StartWorkers();
  }
  ~UringEngine() override { StopWorkers(); }

  IoEngineKind kind() const override { return IoEngineKind::kUring; }

  bool RegisterBuffers(const std::vector<IoRegion>& regions) override {
    std::unique_lock<std::mutex> submit_lock(submit_mu_);
    WaitIdle(submit_lock);
    UnregisterAll();
    std::vector<IoRegion> sorted;
    for (const IoRegion& r : regions) {
      for (int64_t off = 0; off < r.bytes; off += kMaxFixedBufferBytes) {
        sorted.push_back({static_cast<char*>(r.data) + off, std::min(kMaxFixedBufferBytes, r.bytes - off)});
      }
    }
    std::sort(sorted.begin(), sorted.end(), [](const IoRegion& a, const IoRegion& b) { return a.data < b.data; });
    if (sorted.empty()) return true;
    std::vector<iovec> iov;
    for (const IoRegion& r : sorted) iov.push_back({r.data, static_cast<size_t>(r.bytes)});
    for (auto& ring : rings_) {
      const int r = env_.UringRegisterBuffers(ring->get(), iov.data(), static_cast<unsigned>(iov.size()));
      if (r < 0) {
        UnregisterAll();
        ZR_WARN("{}io_uring_register_buffers of {} buffer(s) failed ({}): I/O continues with unregistered buffers "
                "(the kernel pins pages per request). Raise RLIMIT_MEMLOCK (ulimit -l) to register them",
                options_.rank >= 0 ? Format("rank {}: ", options_.rank) : "", iov.size(), ErrnoMessage("errno", -r));
        return false;
      }
      ring->buffers_registered = true;
    }
    fixed_ = std::move(sorted);
    return true;
  }

 private:
  struct Active {  // a part being worked on
    IoPart part;
    int64_t next = 0;  // bytes handed to requests so far
    int in_flight = 0;
    std::string error;
  };
  struct Request {  // one SQE's worth
    Active* owner = nullptr;
    char* buf = nullptr;
    int64_t offset = 0;
    int64_t len = 0;
    int fixed = -1;        // registered buffer index, -1: none
    int no_progress = 0;   // consecutive attempts that moved nothing
  };

  void UnregisterAll() {
    for (auto& ring : rings_) {
      if (ring->buffers_registered) io_uring_unregister_buffers(ring->get());
      ring->buffers_registered = false;
    }
    fixed_.clear();
  }

  // The registered buffer holding [p, p + len), or -1.
  int FixedIndex(const char* p, int64_t len) const {
    auto it = std::upper_bound(fixed_.begin(), fixed_.end(), p,
                               [](const char* x, const IoRegion& r) { return x < static_cast<const char*>(r.data); });
    if (it == fixed_.begin()) return -1;
    --it;
    const char* begin = static_cast<const char*>(it->data);
    return p + len <= begin + it->bytes ? static_cast<int>(it - fixed_.begin()) : -1;
  }

  std::string Where(int w) const {
    return Format("{}io_uring worker {}", options_.rank >= 0 ? Format("rank {}: ", options_.rank) : "", w);
  }

  void Serve(int w) override {
    io_uring* ring = rings_[static_cast<size_t>(w)]->get();
    const int depth = options_.queue_depth;
    std::vector<Request> requests(static_cast<size_t>(depth));
    std::vector<int> free_slots;
    for (int i = depth - 1; i >= 0; --i) free_slots.push_back(i);
    std::list<Active> active;
    std::vector<int> resubmit;
    int in_flight = 0;
    std::string broken;  // set when the ring cannot be used any more; every later part fails with it

    // Submits everything prepared. A failure other than a transient one breaks the worker.
    auto submit = [&] {
      int transient = 0;
      while (broken.empty() && io_uring_sq_ready(ring) > 0) {
        const int r = io_uring_submit(ring);
        submit_calls_.fetch_add(1, std::memory_order_relaxed);
        if (r > 0) continue;
        if ((r == -EINTR || r == -EAGAIN || r == -EBUSY || r == 0) && ++transient < 1000) {
          retries_.fetch_add(1, std::memory_order_relaxed);
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          continue;
        }
        broken = ErrnoMessage(Format("{}: io_uring_submit failed", Where(w)), r < 0 ? -r : EIO);
      }
    };
    auto prep = [&](int slot) {
      Request& r = requests[static_cast<size_t>(slot)];
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      ZR_CHECK(sqe != nullptr, "io_uring SQ full with {} of {} requests in flight", in_flight, depth);
      const int fd = r.owner->part.file->fd();
      const auto len = static_cast<unsigned>(r.len);
      const auto off = static_cast<uint64_t>(r.offset);
      if (r.owner->part.op == IoOp::kRead) {
        if (r.fixed >= 0) io_uring_prep_read_fixed(sqe, fd, r.buf, len, off, r.fixed);
        else io_uring_prep_read(sqe, fd, r.buf, len, off);
      } else {
        if (r.fixed >= 0) io_uring_prep_write_fixed(sqe, fd, r.buf, len, off, r.fixed);
        else io_uring_prep_write(sqe, fd, r.buf, len, off);
      }
      io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
      if (options_.single_submit) submit();
    };
    auto fail = [&](Active& a, std::string msg) {
      if (a.error.empty()) a.error = std::move(msg);
    };
    auto release = [&](int slot) {
      requests[static_cast<size_t>(slot)].owner->in_flight--;
      requests[static_cast<size_t>(slot)] = Request{};
      free_slots.push_back(slot);
      --in_flight;
    };
    auto complete = [&](int slot, int64_t res) {
      Request& r = requests[static_cast<size_t>(slot)];
      Active& a = *r.owner;
      const IoFile& file = *a.part.file;
      const IoOp op = a.part.op;
      if (res == r.len) {
        CountRequest(op, w, res, r.fixed >= 0);
        release(slot);
      } else if (res == -EINTR || res == -EAGAIN || (res == 0 && op == IoOp::kWrite)) {
        retries_.fetch_add(1, std::memory_order_relaxed);
        if (++r.no_progress >= options_.max_retries) {
          fail(a, NoProgress(op, file, r.offset, r.len));
          release(slot);
        } else {
          resubmit.push_back(slot);
        }
      } else if (res == 0) {
        fail(a, EndOfFile(file, r.offset, r.len));
        release(slot);
      } else if (res < 0) {
        fail(a, Failure(op, file, r.offset, r.len, static_cast<int>(-res)));
        release(slot);
      } else {  // short: resubmit the remainder
        CountRequest(op, w, res, r.fixed >= 0);
        short_transfers_.fetch_add(1, std::memory_order_relaxed);
        if (op == IoOp::kRead && AtEndOfFile(file, r.offset + res)) {
          fail(a, EndOfFile(file, r.offset + res, r.len - res));
          release(slot);
        } else if (!a.error.empty()) {
          release(slot);
        } else {
          r.buf += res;
          r.offset += res;
          r.len -= res;
          r.no_progress = 0;
          resubmit.push_back(slot);
        }
      }
    };

    for (;;) {
      // Take new parts: wait for one only when there is nothing else to do.
      IoPart part;
      if (active.empty() && in_flight == 0) {
        if (!PopPart(w, &part, /*block=*/true)) return;
        active.emplace_back().part = std::move(part);
      }
      while (PopPart(w, &part, /*block=*/false)) active.emplace_back().part = std::move(part);
      if (!broken.empty()) {
        for (Active& a : active) fail(a, broken);
      }

      // Fill.
      if (broken.empty() && (options_.overlap_events || in_flight == 0)) {
        for (Active& a : active) {
          while (in_flight < depth && a.error.empty() && a.next < a.part.bytes) {
            const int slot = free_slots.back();
            free_slots.pop_back();
            Request& r = requests[static_cast<size_t>(slot)];
            r.owner = &a;
            r.buf = a.part.buf + a.next;
            r.offset = a.part.offset + a.next;
            r.len = std::min(options_.block_size, a.part.bytes - a.next);
            r.fixed = FixedIndex(r.buf, r.len);
            a.next += r.len;
            a.in_flight++;
            ++in_flight;
            prep(slot);
          }
          if (in_flight == depth) break;
        }
        CountInFlight(in_flight);
        submit();
      }

      // Reap: at least one completion (overlap_events), or all of them.
      const int submitted = in_flight - static_cast<int>(io_uring_sq_ready(ring));
      if (submitted > 0) {
        do {
          io_uring_cqe* cqe = nullptr;
          __kernel_timespec ts{};
          ts.tv_sec = static_cast<int64_t>(options_.stall_warning_s);
          ts.tv_nsec = static_cast<long long>((options_.stall_warning_s - static_cast<double>(ts.tv_sec)) * 1e9);
          const int r = io_uring_wait_cqe_timeout(ring, &cqe, &ts);
          if (r == -ETIME) {
            ZR_WARN("{} has waited {} s for {} request(s) to complete (a hung disk?); still waiting", Where(w),
                    options_.stall_warning_s, in_flight);
            continue;
          }
          if (r == -EINTR || r == -EAGAIN) continue;
          // Waiting itself failing breaks the kernel's contract: the requests in flight may still write
          // into the caller's buffers, so no error can be returned safely.
          ZR_CHECK(r == 0, "{}: {} with {} request(s) in flight", Where(w),
                   ErrnoMessage("io_uring_wait_cqe failed", -r), in_flight);
          unsigned head;
          unsigned seen = 0;
          io_uring_for_each_cqe(ring, head, cqe) {
            const auto slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
            const Request& q = requests[static_cast<size_t>(slot)];
            const int64_t res = env_.UringCompleted(q.owner->part.op, q.owner->part.file->fd(), q.offset, q.len,
                                                    cqe->res);
            complete(slot, res);
            ++seen;
          }
          io_uring_cq_advance(ring, seen);
          for (int slot : resubmit) prep(slot);
          resubmit.clear();
          submit();
        } while (!options_.overlap_events && in_flight - static_cast<int>(io_uring_sq_ready(ring)) > 0);
      } else if (in_flight > 0) {
        // Prepared but never submitted: only once the ring broke. The kernel never saw them; drop them.
        for (size_t s = 0; s < requests.size(); ++s) {
          if (requests[s].owner != nullptr) {
            fail(*requests[s].owner, broken);
            release(static_cast<int>(s));
          }
        }
      }

      // Finish parts with nothing left to do.
      for (auto it = active.begin(); it != active.end();) {
        const bool done = it->in_flight == 0 && (it->next == it->part.bytes || !it->error.empty());
        if (!done) {
          ++it;
          continue;
        }
        FinishPart(it->part, it->error);
        it = active.erase(it);
      }
    }
  }

  std::vector<std::unique_ptr<Ring>> rings_;
  std::vector<IoRegion> fixed_;  // registered buffers, by address (changed only while idle)
};

}  // namespace

std::unique_ptr<IoEngine> CreateUringEngine(const IoEngineOptions& options) {
  return std::make_unique<UringEngine>(options);
}

}  // namespace zerorun::offload

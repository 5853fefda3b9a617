// IoWork, option checks, the engine factory with its pread fallback, and WorkerEngine: the split of a
// transfer into one part per worker, queues, completion and statistics shared by both backends.
#include "zerorun/offload/io_worker.h"

#include <algorithm>
#include <cerrno>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"

namespace zerorun::offload {

const char* IoEngineKindName(IoEngineKind k) {
  switch (k) {
    case IoEngineKind::kAuto: return "auto";
    case IoEngineKind::kUring: return "io_uring";
    case IoEngineKind::kPread: return "pread";
  }
  return "?";
}

IoEngineKind ParseIoEngineKind(std::string_view name) {
  if (name == "auto") return IoEngineKind::kAuto;
  if (name == "io_uring" || name == "uring") return IoEngineKind::kUring;
  if (name == "pread") return IoEngineKind::kPread;
  ZR_THROW(InvalidArgument, "unknown I/O engine '{}': expected auto, io_uring or pread", std::string(name));
}

void ValidateIoEngineOptions(const IoEngineOptions& o) {
  if (o.block_size <= 0 || o.block_size % kDirectIoAlignment != 0) {
    ZR_THROW(InvalidArgument, "aio.block_size must be a positive multiple of {} (the O_DIRECT alignment); found {}",
             kDirectIoAlignment, o.block_size);
  }
  if (o.block_size > (int64_t{1} << 30)) {
    ZR_THROW(InvalidArgument, "aio.block_size must be at most 1 GiB (one request); found {}", o.block_size);
  }
  if (o.queue_depth < 1 || o.queue_depth > 4096) {
    ZR_THROW(InvalidArgument, "aio.queue_depth must be in [1, 4096]; found {}", o.queue_depth);
  }
  if (o.intra_op_parallelism < 1 || o.intra_op_parallelism > 256) {
    ZR_THROW(InvalidArgument, "aio.intra_op_parallelism must be in [1, 256]; found {}", o.intra_op_parallelism);
  }
  if (o.max_retries < 1) ZR_THROW(InvalidArgument, "IoEngineOptions::max_retries must be >= 1; found {}", o.max_retries);
  if (!(o.stall_warning_s > 0)) {
    ZR_THROW(InvalidArgument, "IoEngineOptions::stall_warning_s must be > 0; found {}", o.stall_warning_s);
  }
}

std::unique_ptr<IoEngine> CreateIoEngine(const IoEngineOptions& options) {
  ValidateIoEngineOptions(options);
  switch (options.kind) {
    case IoEngineKind::kPread: return CreatePreadEngine(options);
    case IoEngineKind::kUring: return CreateUringEngine(options);
    case IoEngineKind::kAuto: break;
  }
  try {
    return CreateUringEngine(options);
  } catch (const IoError& e) {
    ZR_WARN("{}; using the pread engine instead (synchronous pread/pwrite, {} worker(s), queue_depth has no effect)",
            e.what(), options.intra_op_parallelism);
    return CreatePreadEngine(options);
  }
}

// ---- IoWork ----------------------------------------------------------------------------------------

IoWork::~IoWork() {
  if (!state_) return;
  try {
    Wait();
  } catch (const Error& e) {
    ZR_ERROR("an I/O transfer failed and nobody waited for it: {}", e.what());
  }
}

IoWork& IoWork::operator=(IoWork&& o) noexcept {
  if (this != &o) {
    IoWork old(std::move(*this));  // waits for (and logs) the work this handle held
    state_ = std::move(o.state_);
  }
  return *this;
}

void IoWork::Wait() {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->pending == 0; });
  if (state_->collected) return;
  state_->collected = true;
  if (!state_->error.empty()) throw IoError(state_->error);
}

bool IoWork::Done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->pending == 0;
}

// ---- WorkerEngine ----------------------------------------------------------------------------------

WorkerEngine::WorkerEngine(const IoEngineOptions& options)
    : options_(options), env_(options.env ? *options.env : FileEnv::Default()) {
  ValidateIoEngineOptions(options_);
  worker_bytes_ = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(options_.intra_op_parallelism));
  for (int w = 0; w < options_.intra_op_parallelism; ++w) {
    worker_bytes_[static_cast<size_t>(w)] = 0;
    queues_.push_back(std::make_unique<Queue>());
  }
}

void WorkerEngine::StartWorkers() {
  for (int w = 0; w < options_.intra_op_parallelism; ++w) threads_.emplace_back([this, w] { Serve(w); });
}

void WorkerEngine::StopWorkers() {
  stop_ = true;
  for (auto& q : queues_) {
    std::lock_guard<std::mutex> lock(q->mu);
    q->cv.notify_all();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

IoWork WorkerEngine::Submit(IoOp op, const IoFile& file, int64_t offset, void* buf, int64_t bytes) {
  auto where = [&] {
    return Format("{}{} {} of {} bytes at offset {} of {}", options_.rank >= 0 ? Format("rank {}: ", options_.rank) : "",
                  name(), IoOpName(op), bytes, offset, file.is_open() ? file.path() : std::string("(closed file)"));
  };
  if (!file.is_open()) ZR_THROW(InvalidArgument, "{}: the file is not open", where());
  if (op == IoOp::kWrite && !file.writable()) ZR_THROW(InvalidArgument, "{}: the file is open read-only", where());
  if (offset < 0 || bytes < 0) ZR_THROW(InvalidArgument, "{}: negative offset or length", where());
  if (bytes > 0 && buf == nullptr) ZR_THROW(InvalidArgument, "{}: null buffer", where());
  const int64_t align = file.alignment();
  if (align > 1) {
    const char* what = reinterpret_cast<uintptr_t>(buf) % static_cast<uintptr_t>(align) != 0 ? "buffer address"
                       : offset % align != 0                                                ? "offset"
                       : bytes % align != 0                                                 ? "length"
                                                                                            : nullptr;
    if (what) {
      ZR_THROW(InvalidArgument, "{}: the file is open with O_DIRECT and the {} is not a multiple of {} bytes", where(),
               what, align);
    }
  }
  if (bytes == 0) return IoWork();

  // Contiguous parts of whole blocks, at most one per worker, handed out starting at a rotating worker
  // so that many small transfers spread over all of them.
  const int64_t block = options_.block_size;
  const int64_t nblocks = (bytes + block - 1) / block;
  const int64_t workers = options_.intra_op_parallelism;
  const int64_t blocks_per_part = (nblocks + std::min(nblocks, workers) - 1) / std::min(nblocks, workers);
  const int64_t nparts = (nblocks + blocks_per_part - 1) / blocks_per_part;
  auto state = std::make_shared<detail::IoWorkState>();
  state->pending = static_cast<int>(nparts);
  std::lock_guard<std::mutex> submit_lock(submit_mu_);
  {
    std::lock_guard<std::mutex> lock(idle_mu_);
    outstanding_ += nparts;
  }
  const auto first = static_cast<int64_t>(rotor_.fetch_add(1, std::memory_order_relaxed) % static_cast<uint32_t>(workers));
  for (int64_t i = 0; i < nparts; ++i) {
    const int64_t begin = i * blocks_per_part * block;
    const int64_t end = std::min(bytes, (i + 1) * blocks_per_part * block);
    IoPart part{op, &file, static_cast<char*>(buf) + begin, offset + begin, end - begin, state};
    Queue& q = *queues_[static_cast<size_t>((first + i) % workers)];
    {
      std::lock_guard<std::mutex> lock(q.mu);
      q.parts.push_back(std::move(part));
    }
    q.cv.notify_one();
  }
  return IoWork(std::move(state));
}

bool WorkerEngine::PopPart(int w, IoPart* part, bool block) {
  Queue& q = *queues_[static_cast<size_t>(w)];
  std::unique_lock<std::mutex> lock(q.mu);
  if (block) q.cv.wait(lock, [&] { return !q.parts.empty() || stop_; });
  if (q.parts.empty()) return false;
  *part = std::move(q.parts.front());
  q.parts.pop_front();
  return true;
}

void WorkerEngine::FinishPart(IoPart& part, const std::string& error) {
  {
    std::lock_guard<std::mutex> lock(part.work->mu);
    if (!error.empty() && part.work->error.empty()) part.work->error = error;
    if (--part.work->pending == 0) part.work->cv.notify_all();
  }
  part.work.reset();
  std::lock_guard<std::mutex> lock(idle_mu_);
  if (--outstanding_ == 0) idle_cv_.notify_all();
}

void WorkerEngine::WaitIdle(std::unique_lock<std::mutex>& submit_lock) {
  ZR_CHECK(submit_lock.owns_lock() && submit_lock.mutex() == &submit_mu_);
  std::unique_lock<std::mutex> lock(idle_mu_);
  idle_cv_.wait(lock, [&] { return outstanding_ == 0; });
}

std::string WorkerEngine::Failure(IoOp op, const IoFile& file, int64_t offset, int64_t bytes, int err) const {
  std::string msg = ErrnoMessage(Format("{}{} {} of {} bytes at offset {} of {} failed",
                                        options_.rank >= 0 ? Format("rank {}: ", options_.rank) : "", name(),
                                        IoOpName(op), bytes, offset, file.path()),
                                 err);
  if (err == ENOSPC || err == EDQUOT) {
    const int64_t free_bytes = FreeBytes(env_, file.path());
    msg += Format(" (the {} file system holding it has {} left)", FileSystemName(env_, file.path()),
                  free_bytes < 0 ? std::string("unknown space") : FormatBytes(static_cast<double>(free_bytes)));
  } else if (err == EINVAL && file.direct()) {
    msg += " (O_DIRECT: does the file system support direct I/O at this alignment?)";
  }
  return msg;
}

std::string WorkerEngine::EndOfFile(const IoFile& file, int64_t offset, int64_t bytes) const {
  struct stat st {};
  const std::string size = env_.Fstat(file.fd(), &st) == 0 ? Format("{} bytes", static_cast<int64_t>(st.st_size))
                                                            : std::string("of unknown size");
  return Format("{}{} read of {} bytes at offset {} of {}: unexpected end of file (the file is {}; truncated?)",
                options_.rank >= 0 ? Format("rank {}: ", options_.rank) : "", name(), bytes, offset, file.path(), size);
}

bool WorkerEngine::AtEndOfFile(const IoFile& file, int64_t offset) const {
  struct stat st {};
  return env_.Fstat(file.fd(), &st) == 0 && offset >= static_cast<int64_t>(st.st_size);
}

std::string WorkerEngine::NoProgress(IoOp op, const IoFile& file, int64_t offset, int64_t bytes) const {
  return Format("{}{} {} of {} bytes at offset {} of {} made no progress after {} attempts",
                options_.rank >= 0 ? Format("rank {}: ", options_.rank) : "", name(), IoOpName(op), bytes, offset,
                file.path(), options_.max_retries);
}

void WorkerEngine::CountRequest(IoOp op, int w, int64_t bytes, bool fixed) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  (op == IoOp::kRead ? bytes_read_ : bytes_written_).fetch_add(bytes, std::memory_order_relaxed);
  worker_bytes_[static_cast<size_t>(w)].fetch_add(bytes, std::memory_order_relaxed);
  if (fixed) fixed_requests_.fetch_add(1, std::memory_order_relaxed);
}

void WorkerEngine::CountInFlight(int n) {
  int seen = max_in_flight_.load(std::memory_order_relaxed);
  while (n > seen && !max_in_flight_.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
}

IoStats WorkerEngine::Stats() const {
  IoStats s;
  s.requests = requests_.load();
  s.bytes_read = bytes_read_.load();
  s.bytes_written = bytes_written_.load();
  s.fixed_requests = fixed_requests_.load();
  s.submit_calls = submit_calls_.load();
  s.short_transfers = short_transfers_.load();
  s.retries = retries_.load();
  s.max_in_flight = max_in_flight_.load();
  for (int w = 0; w < options_.intra_op_parallelism; ++w) s.worker_bytes.push_back(worker_bytes_[static_cast<size_t>(w)].load());
  return s;
}

}  // namespace zerorun::offload

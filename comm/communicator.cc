// The collective funnel (argument checks, sequence numbers, accounting, comms_logger) and the
// per-group executor thread that runs backends' Execute in submission order.
#include "zerorun/comm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/tensor.h"
#include "zerorun/core/timer.h"
#include "zerorun/core/trace.h"

namespace zerorun::comm {

namespace detail {
struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::atomic<bool> done_flag{false};  // mirrors `done` for the lock-free spin in Wait
  std::atomic<bool> waited{false};     // Work::Wait waits for it while another thread runs it
  std::exception_ptr error;
  std::weak_ptr<std::atomic<Communicator*>> owner;
  // For messages, formatted only when needed: the op and its group.
  OpDesc desc;
  int rank = 0;
  int size = 0;
  std::shared_ptr<const std::string> group;
  std::string what() const { return desc.Describe(rank, size, group ? *group : std::string("?")); }
};
}  // namespace detail

namespace {

constexpr size_t kMaxRecords = 100000;
// A caller that submits and then waits runs its ops inline (Work::Wait). Waking the executor for each
// of them costs a futex wake-up and puts a second thread of this rank on a core the peers need. So
// while ops are being waited for (the last op to
// finish had a caller waiting for it, whoever ran it) Submit does not wake the executor: the next op is
// left to the caller's Wait. The executor polls every kDeferGrace instead, for kInlineWindow after the
// last waited op finished, and runs an op that has stayed unclaimed that long, so an op nobody waits for
// still starts; after the window it sleeps and Submit wakes it again. Wait with a timeout and
// IsCompleted wake it at once.
// The price is that an op submitted right after a waited one (a stage-3 prefetch, a gradient bucket)
// starts up to kDeferGrace late unless polled. With a core per rank the wake-up costs no measurable time
// (2 ranks on 2 cores: the same 4 B-64 KiB times either way), so this is only done where ranks on the
// host outnumber its CPUs (4 ranks on 2 cores: 5.5-21 us against 21-75 us for 4-64 KiB all-reduces).
// ZERORUN_COMM_DEFER=1 or 0 forces it on or off.
constexpr double kInlineWindow = 2e-3;
constexpr double kDeferGrace = 1e-3;

bool DeferToWaiters(int size) {
  const char* e = std::getenv("ZERORUN_COMM_DEFER");
  if (e != nullptr && *e != '\0') {
    if (std::string(e) == "1") return true;
    if (std::string(e) == "0") return false;
    ZR_WARN("ignoring ZERORUN_COMM_DEFER='{}' (expected 0 or 1); deciding by ranks per CPU", e);
  }
  // Ranks on this host: LOCAL_SIZE from the launcher; the group itself for the local backend (threads).
  long ranks = size;
  if (const char* l = std::getenv("LOCAL_SIZE"); l != nullptr && std::atol(l) > 0) ranks = std::atol(l);
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  return cpus > 0 && ranks > cpus;
}
// How long Work::Wait and an idle executor spin before sleeping (ZERORUN_COMM_SPIN_US, default 20).
double SpinSeconds() {
  static const double s = [] {
    const char* e = std::getenv("ZERORUN_COMM_SPIN_US");
    if (!e || !*e) return 20e-6;
    char* end = nullptr;
    double us = std::strtod(e, &end);
    if (end == e || *end != '\0' || !(us >= 0 && us <= 1e6)) {
      ZR_WARN("ignoring ZERORUN_COMM_SPIN_US='{}' (expected microseconds in [0, 1000000]); using 20", e);
      return 20e-6;
    }
    return us * 1e-6;
  }();
  return s;
}

bool Reducible(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF64 || t == DType::kI32 ||
         t == DType::kI64;
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

std::shared_ptr<detail::WorkState> FailedWork(const std::string& reason) {
  auto w = std::make_shared<detail::WorkState>();
  w->done = true;
  w->done_flag = true;
  w->error = std::make_exception_ptr(CommError(reason));
  return w;
}

double UnixMs() {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count());
}

}  // namespace

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

const char* OpTypeName(OpType op) {
  switch (op) {
    case OpType::kAllReduce: return "all_reduce";
    case OpType::kReduceScatter: return "reduce_scatter";
    case OpType::kAllGather: return "all_gather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kReduce: return "reduce";
    case OpType::kBarrier: return "barrier";
    case OpType::kSend: return "send";
    case OpType::kRecv: return "recv";
  }
  return "?";
}

double BusBandwidthFactor(OpType op, int n) {
  if (n <= 1) return op == OpType::kAllReduce || op == OpType::kReduceScatter || op == OpType::kAllGather ? 0.0 : 1.0;
  switch (op) {
    case OpType::kAllReduce: return 2.0 * (n - 1) / n;
    case OpType::kReduceScatter:
    case OpType::kAllGather: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

OpStats CommStats::Total() const {
  OpStats t;
  for (const auto& s : by_op) {
    t.calls += s.calls;
    t.bytes_sent += s.bytes_sent;
    t.bytes_received += s.bytes_received;
    t.payload_bytes += s.payload_bytes;
    t.total_time_s += s.total_time_s;
  }
  return t;
}

Millis DefaultCommTimeout() {
  const char* e = std::getenv("ZERORUN_COMM_TIMEOUT");
  if (!e || !*e) return Millis(600'000);
  char* end = nullptr;
  double s = std::strtod(e, &end);
  if (end == e || *end != '\0' || !(s >= 0.001 && s <= 1e7)) {
    ZR_THROW(InvalidArgument, "ZERORUN_COMM_TIMEOUT='{}': expected a number of seconds in [0.001, 10000000]", e);
  }
  return Millis(static_cast<int64_t>(s * 1000.0));
}

std::string OpDesc::Describe(int rank, int size, const std::string& group) const {
  std::string what = Format("{} #{} ({} x {}", OpTypeName(op), seq, count, DTypeName(dtype));
  if (op == OpType::kAllReduce || op == OpType::kReduceScatter || op == OpType::kReduce) {
    what += Format(", {}", ReduceOpName(reduce));
  }
  if (op == OpType::kBroadcast || op == OpType::kReduce) what += Format(", root {}", root);
  if (op == OpType::kSend) what += Format(", to rank {} tag {}", root, tag);
  if (op == OpType::kRecv) what += Format(", from rank {} tag {}", root, tag);
  return what + Format(") on group '{}' rank {}/{}", group, rank, size);
}

// ---- Work ------------------------------------------------------------------------------------------

bool Work::IsCompleted() const {
  if (!state_) return true;
  if (state_->done_flag.load(std::memory_order_acquire)) return true;
  WakeOwner();  // whoever polls wants it run: a deferred op (see Submit) starts now
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

void Work::WakeOwner() const {
  if (auto owner = state_->owner.lock()) {
    if (Communicator* c = owner->load()) c->WakeExecutor();
  }
}

// Small ops finish within microseconds; a short spin before sleeping on the condition variable saves
// the wake-up latency of a thread hand-off (it dominated 4 KiB all-reduce time).
static void SpinBriefly(const std::atomic<bool>& flag) {
  if (flag.load(std::memory_order_acquire)) return;
  const double until = NowSeconds() + SpinSeconds();
  for (int i = 0; !flag.load(std::memory_order_acquire); ++i) {
    if ((i & 63) == 63) {
      if (NowSeconds() > until) return;
      std::this_thread::yield();
    }
  }
}

void Work::Wait() const {
  if (!state_) return;
  // The common synchronous pattern (submit, then wait at once) runs the op on this thread when the
  // executor is idle: no thread hand-off at all.
  if (!state_->done_flag.load(std::memory_order_acquire)) {
    if (auto owner = state_->owner.lock()) {
      if (Communicator* c = owner->load()) {
        if (!c->TryRunInline(state_.get())) {
          state_->waited.store(true, std::memory_order_relaxed);
          c->WakeExecutor();
        }
      }
    }
  }
  SpinBriefly(state_->done_flag);
  // `error` is written before done_flag is released (Finish): once it reads true, no lock is needed.
  if (!state_->done_flag.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->done; });
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

void Work::Wait(Millis timeout) const {
  if (!state_) return;
  if (!state_->done_flag.load(std::memory_order_acquire)) WakeOwner();
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) {
    std::string msg = Format("{}: Work::Wait gave up after {} ms; the communicator is aborted", state_->what(),
                             timeout.count());
    auto owner = state_->owner.lock();
    lock.unlock();
    if (owner) {
      if (Communicator* c = owner->load()) c->Abort(msg);
    }
    throw TimeoutError(msg);
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

// ---- Communicator ----------------------------------------------------------------------------------


Communicator::Communicator(std::string backend_name, std::string name, int rank, int size,
                           const CommOptions& options)
    : backend_name_(std::move(backend_name)),
      name_(std::move(name)),
      rank_(rank),
      size_(size),
      timeout_ms_((options.timeout.count() > 0 ? options.timeout : DefaultCommTimeout()).count()),
      logger_(options.logger) {
  if (size < 1 || rank < 0 || rank >= size) {
    ZR_THROW(InvalidArgument, "communicator '{}': rank {} is outside world size {}", name_, rank, size);
  }
  hosts_.assign(static_cast<size_t>(size), "?");
  self_ = std::make_shared<std::atomic<Communicator*>>(this);
  name_ptr_ = std::make_shared<const std::string>(name_);
  defer_to_waiters_ = DeferToWaiters(size);
  executor_ = std::thread([this] { ExecutorLoop(); });
}

Communicator::~Communicator() { StopExecutor(); }

void Communicator::StopExecutor() {
  self_->store(nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    if (!queue_.empty() || running_ > 0) {
      if (!aborted_.load()) {
        aborted_ = true;
        abort_reason_ = Format("communicator '{}' rank {} was destroyed with ops in flight", name_, rank_);
      }
    }
    stop_ = true;
  }
  cv_.notify_all();
  if (executor_.joinable()) executor_.join();
}

std::string Communicator::PeerName(int peer) const {
  if (peer < 0 || peer >= size_) return Format("rank {}", peer);
  return Format("rank {} (host {})", peer, hosts_[static_cast<size_t>(peer)]);
}

void Communicator::Abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_ = true;
  }
  ZR_DEBUG("communicator '{}' rank {} aborted: {}", name_, rank_, reason);
  cv_.notify_all();
}

std::string Communicator::abort_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abort_reason_;
}

[[noreturn]] void Communicator::ThrowAborted() {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reason = abort_reason_;
  }
  throw CommError(reason);
}

void Communicator::set_timeout(Millis timeout) {
  if (timeout.count() <= 0) ZR_THROW(InvalidArgument, "group '{}': a communicator timeout must be positive, got {} ms", name_, timeout.count());
  timeout_ms_.store(timeout.count(), std::memory_order_relaxed);
}

void Communicator::CheckAlive(const OpDesc& op) {
  if (aborted_.load(std::memory_order_relaxed)) ThrowAborted();
  if (NowSeconds() > op.deadline) ThrowTimeout(op, DescribeStall(op));
}

[[noreturn]] void Communicator::ThrowTimeout(const OpDesc& op, const std::string& detail) {
  std::string msg = Format("{} ({} backend) timed out after {} s", op.Describe(rank_, size_, name_), backend_name_,
                           static_cast<double>(timeout().count()) / 1e3);
  if (!detail.empty()) msg += "; " + detail;
  throw TimeoutError(msg);
}

std::string Communicator::HeartbeatValue() const {
  return Format("{} {} {}", seq_.load(), OpTypeName(static_cast<OpType>(last_op_.load())),
                static_cast<int64_t>(UnixMs()));
}

std::vector<Communicator::PendingP2P> Communicator::PendingP2POps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_p2p_;
}

std::string Communicator::DescribeStall(const OpDesc& op) {
  if (!heartbeat_store_) return "";
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) keys.push_back(Format("hb/{}", r));
  }
  std::map<std::string, std::string> beats;
  try {  // bounded: a frozen store host must not hold this report for another timeout
    beats = heartbeat_store_->GetExisting(keys, Millis(2000));
  } catch (const StoreUnresponsiveError&) {
    return Format("the rendezvous store did not answer within 2 s: the job's rank 0{}, which hosts it, is FROZEN or "
                  "unreachable (stopped, in a debugger, swapping, or its host is cut off)",
                  name_ == "world" ? Format(" (host {})", hosts_[0]) : std::string());
  } catch (const Error& e) {
    return Format("could not read heartbeats: {}", e.what());
  }
  std::vector<std::string> missing, stalled;
  bool any_frozen = false;
  const double now = UnixMs();
  // Heartbeats come every 0.5 s; a rank is FROZEN after a few missed ones (but within the timeout).
  const double stale_ms = std::clamp(static_cast<double>(timeout().count()) / 2, 1500.0, 5000.0);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto it = beats.find(Format("hb/{}", r));
    if (it == beats.end()) {
      missing.push_back(Format("{} (no heartbeat at all: it never joined group '{}')", PeerName(r), name_));
      continue;
    }
    std::istringstream is(it->second);
    uint64_t seq = 0;
    std::string opname, tag;
    double ms = 0;
    is >> seq >> opname >> ms >> tag;
    if (tag == "left") {  // its communicator was destroyed cleanly (Monitor::Unregister)
      missing.push_back(Format("{} (left the job: it finished cleanly after {} #{})", PeerName(r), opname, seq));
      continue;
    }
    const double age_s = (now - ms) / 1e3;
    const bool frozen = now - ms > stale_ms;
    any_frozen = any_frozen || frozen;
    const std::string state = frozen ? Format("FROZEN: no heartbeat for {} s", static_cast<int64_t>(age_s))
                                     : std::string("alive");
    if (seq < op.seq) {
      missing.push_back(seq == 0 ? Format("{} ({}; reported no collective yet)", PeerName(r), state)
                                 : Format("{} ({}; last reported {} #{})", PeerName(r), state, opname, seq));
    } else if (frozen) {
      stalled.push_back(Format("{} ({})", PeerName(r), state));
    }
  }
  std::string out;
  if (!missing.empty()) {
    out += "ranks that did not arrive: ";
    for (size_t i = 0; i < missing.size(); ++i) out += (i ? ", " : "") + missing[i];
  }
  if (!stalled.empty()) {
    out += std::string(out.empty() ? "" : "; ") + "ranks that arrived but stopped responding: ";
    for (size_t i = 0; i < stalled.size(); ++i) out += (i ? ", " : "") + stalled[i];
  }
  if (any_frozen) {
    out += ". FROZEN: its store connection is open, so the process exists but does not run (stopped by SIGSTOP or "
           "a suspended job, in a debugger, swapping, or a paused VM)";
  }
  if (out.empty()) out = "every rank arrived and is alive (slow transport or a stuck peer thread)";
  return out;
}

Work Communicator::Submit(OpDesc op) {
  // Argument checks (before the sequence number is consumed, so a bad call changes nothing).
  auto where = [&] { return Format("{} on group '{}' rank {}", OpTypeName(op.op), name_, rank_); };
  const bool reduces = op.op == OpType::kAllReduce || op.op == OpType::kReduceScatter || op.op == OpType::kReduce;
  if (reduces && !Reducible(op.dtype)) {
    ZR_THROW(InvalidArgument, "{}: dtype {} cannot be reduced (fp32, fp16, bf16, fp64, int32, int64)", where(),
             DTypeName(op.dtype));
  }
  const size_t es = DTypeSize(op.dtype);
  const size_t n = static_cast<size_t>(size_);
  if (op.count > (size_t{1} << 50) / es) ZR_THROW(InvalidArgument, "{}: count {} is too large", where(), op.count);
  if (op.op == OpType::kBroadcast || op.op == OpType::kReduce) {
    if (op.root < 0 || op.root >= size_) ZR_THROW(InvalidArgument, "{}: root {} outside [0, {})", where(), op.root, size_);
  }
  if (op.op == OpType::kSend || op.op == OpType::kRecv) {
    if (op.root < 0 || op.root >= size_ || op.root == rank_) {
      ZR_THROW(InvalidArgument, "{}: peer {} must be another rank in [0, {})", where(), op.root, size_);
    }
    if (op.tag < 0 || op.tag >= (1 << 20)) ZR_THROW(InvalidArgument, "{}: tag {} outside [0, 2^20)", where(), op.tag);
  }
  if (op.count > 0) {
    bool need_send = op.op != OpType::kRecv && op.op != OpType::kBarrier && op.op != OpType::kBroadcast;
    bool need_recv = op.op != OpType::kSend && op.op != OpType::kBarrier &&
                     !(op.op == OpType::kReduce && op.root != rank_);
    if (op.op == OpType::kBroadcast) need_recv = true;
    if ((need_send && !op.send) || (need_recv && !op.recv)) ZR_THROW(InvalidArgument, "{}: null buffer for {} elements", where(), op.count);
    if (device().is_cpu() && op.send && op.recv && op.send != op.recv) {
      size_t bytes = op.count * es;
      if (op.op == OpType::kAllReduce || op.op == OpType::kReduce) {
        if (Overlap(op.send, bytes, op.recv, bytes)) ZR_THROW(InvalidArgument, "{}: send and recv overlap but differ", where());
      } else if (op.op == OpType::kReduceScatter) {
        if (op.recv != static_cast<const char*>(op.send) + rank_ * bytes && Overlap(op.send, bytes * n, op.recv, bytes)) {
          ZR_THROW(InvalidArgument, "{}: recv overlaps send but is not send + rank*recv_count", where());
        }
      } else if (op.op == OpType::kAllGather) {
        if (op.send != static_cast<char*>(op.recv) + rank_ * bytes && Overlap(op.send, bytes, op.recv, bytes * n)) {
          ZR_THROW(InvalidArgument, "{}: send overlaps recv but is not recv + rank*send_count", where());
        }
      }
    }
  }
  auto work = std::make_shared<detail::WorkState>();
  work->owner = self_;
  work->rank = rank_;
  work->size = size_;
  work->group = name_ptr_;
  std::lock_guard<std::mutex> lock(mu_);
  op.seq = ++seq_;
  last_op_ = static_cast<int>(op.op);
  if (!aborted_.load() && !stop_) {
    try {
      OnSubmit(op);
    } catch (...) {
      --seq_;
      throw;
    }
  }
  work->desc = op;
  if (aborted_.load()) {
    work->done = true;
    work->done_flag = true;
    work->error = std::make_exception_ptr(CommError(Format("{}: communicator aborted earlier: {}", work->what(), abort_reason_)));
    return Work(work);
  }
  if (stop_) return Work(FailedWork(work->what() + ": communicator is shutting down"));
  const bool p2p = op.op == OpType::kSend || op.op == OpType::kRecv;
  const bool defer = defer_to_waiters_ && !p2p && !executor_asleep_ && last_waited_;
  queue_.push_back({std::move(op), work, 0.0, defer});
  queued_flag_.store(true, std::memory_order_release);
  ++running_;
  if (!defer) cv_.notify_all();
  return Work(std::move(work));
}

void Communicator::Finish(const std::shared_ptr<detail::WorkState>& w, OpDesc& op, double start,
                          std::exception_ptr err, bool inline_run) {
  const double end = NowSeconds();
  const double secs = end - start;
  const int64_t n = size_;
  const int64_t es = static_cast<int64_t>(DTypeSize(op.dtype));
  int64_t payload = static_cast<int64_t>(op.count) * es;
  if (op.op == OpType::kReduceScatter || op.op == OpType::kAllGather) payload *= n;
  if (!err) {
    if (op.bytes_sent == 0 && op.bytes_received == 0 && n > 1) {  // the ring volume
      int64_t v = 0;
      switch (op.op) {
        case OpType::kAllReduce: v = 2 * (n - 1) * payload / n; break;
        case OpType::kReduceScatter:
        case OpType::kAllGather: v = (n - 1) * payload / n; break;
        default: break;
      }
      op.bytes_sent = op.bytes_received = v;
      if (op.op == OpType::kBroadcast) (rank_ == op.root ? op.bytes_sent : op.bytes_received) = payload;
      if (op.op == OpType::kReduce) (rank_ == op.root ? op.bytes_received : op.bytes_sent) = payload;
      if (op.op == OpType::kSend) op.bytes_sent = payload;
      if (op.op == OpType::kRecv) op.bytes_received = payload;
    }
    std::lock_guard<std::mutex> lock(stats_mu_);
    OpStats& s = stats_.by_op[static_cast<int>(op.op)];
    ++s.calls;
    s.bytes_sent += op.bytes_sent;
    s.bytes_received += op.bytes_received;
    s.payload_bytes += payload;
    s.total_time_s += secs;
    if (tracer_ != nullptr) {
      tracer_->Complete(OpTypeName(op.op), "comm", start, start + secs, trace_track_,
                        Format("\"bytes\": {}, \"seq\": {}, \"dtype\": \"{}\", \"count\": {}", payload, op.seq,
                               DTypeName(op.dtype), op.count));
    }
    const bool profiled = logger_.enabled && (logger_.prof_all || std::find(logger_.prof_ops.begin(), logger_.prof_ops.end(),
                                                                            OpTypeName(op.op)) != logger_.prof_ops.end());
    if (profiled) {
      CommRecord rec;
      rec.op = op.op;
      rec.seq = op.seq;
      rec.size_bytes = static_cast<size_t>(payload);
      rec.latency_ms = secs * 1e3;
      rec.algbw_gbps = secs > 0 ? static_cast<double>(payload) / secs / 1e9 : 0;
      rec.busbw_gbps = rec.algbw_gbps * BusBandwidthFactor(op.op, size_);
      if (records_.size() >= kMaxRecords) records_.erase(records_.begin(), records_.begin() + kMaxRecords / 2);
      records_.push_back(rec);
      if (logger_.verbose) {
        ZR_INFO("comm op: {}{} | time (ms): {} | msg size: {} | algbw (Gbps): {} | busbw (Gbps): {}",
                OpTypeName(op.op), logger_.debug ? Format(" #{}", op.seq) : std::string(), rec.latency_ms,
                FormatBytes(static_cast<double>(payload)), rec.algbw_gbps * 8, rec.busbw_gbps * 8);
      }
    }
  }
  bool wake_executor = false;
  {  // before the Work completes, so a caller that saw it complete never finds the op running
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
    last_waited_ = w->waited.load(std::memory_order_relaxed);
    if (last_waited_) waited_end_ = end;
    if (inline_run) {  // TryRunInline's bookkeeping, in the same critical section
      executing_ = false;
      // An executor asleep without a timeout moves to polling (Submit stops waking it); one that waits
      // for an op it was woken for takes it now.
      wake_executor = executor_asleep_ || (!queue_.empty() && !queue_.front().deferred);
    }
  }
  if (wake_executor) cv_.notify_all();
  drain_cv_.notify_all();
  {
    std::lock_guard<std::mutex> lock(w->mu);
    w->done = true;
    w->error = err;
    w->done_flag.store(true, std::memory_order_release);
  }
  w->cv.notify_all();
}

// Runs one queued op on the calling thread (the executor, or a thread stealing it in Work::Wait).
// Returns true when the op left completion to a poll (p2p); the caller then owns `q` as pending.
bool Communicator::RunQueued(Queued& q, double* start_out, bool inline_run) {
  OpDesc& op = q.op;
  double start = NowSeconds();
  *start_out = start;
  op.deadline = start + static_cast<double>(timeout().count()) / 1e3;
  std::exception_ptr err;
  try {
    if (aborted_.load()) ThrowAborted();
    if (stop_) throw CommError(Format("{}: communicator is shutting down", q.work->what()));
    Execute(op);
  } catch (const std::exception& e) {
    err = std::current_exception();
    if (!aborted_.load()) ZR_ERROR("{}", e.what());
    const std::string what = q.work->what();
    Abort(std::string(e.what()).rfind(what, 0) == 0 ? std::string(e.what()) : Format("{} failed: {}", what, e.what()));
  }
  if (!err && op.poll) return true;
  Finish(q.work, op, start, err, inline_run);
  return false;
}

bool Communicator::TryRunInline(const detail::WorkState* w) {
  bool ran_own = false;
  while (!ran_own) {
    std::optional<Queued> q;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (executing_ || pending_count_ > 0 || queue_.empty()) break;
      // Ops ahead of w's run first (submission order); a p2p op leaves completion to a poll, which
      // only the executor does.
      const bool queued = std::any_of(queue_.begin(), queue_.end(), [w](const Queued& x) { return x.work.get() == w; });
      const OpType t = queue_.front().op.op;
      if (!queued || t == OpType::kSend || t == OpType::kRecv) break;
      q = std::move(queue_.front());
      queue_.pop_front();
      queued_flag_.store(!queue_.empty(), std::memory_order_release);
      executing_ = true;
    }
    ran_own = q->work.get() == w;
    q->work->waited.store(true, std::memory_order_relaxed);  // this caller waits for it (see Finish)
    double start = 0;
    bool left_pending = RunQueued(*q, &start, /*inline_run=*/true);  // Finish clears executing_
    ZR_CHECK(!left_pending, "a collective left completion to a poll");
  }
  return ran_own;
}

void Communicator::WakeExecutor() {
  if (!defer_to_waiters_) return;  // nothing is ever deferred: no lock on IsCompleted's polls
  {
    std::lock_guard<std::mutex> lock(mu_);
    bool any = false;
    for (Queued& q : queue_) {
      any |= q.deferred;
      q.deferred = false;
    }
    if (!any) return;
  }
  cv_.notify_all();
}

double Communicator::GraceLeft(Queued& q) {
  if (!q.deferred || aborted_.load()) return 0;
  if (q.queued_at == 0) q.queued_at = NowSeconds();  // Submit reads no clock: the grace runs from here
  return q.queued_at + kDeferGrace - NowSeconds();
}

void Communicator::WaitForWork(std::unique_lock<std::mutex>& lock) {
  for (;;) {
    if (stop_) return;
    if (!queue_.empty() && !executing_) {
      const double left = GraceLeft(queue_.front());
      if (left <= 0) return;
      cv_.wait_for(lock, std::chrono::duration<double>(left));
      continue;
    }
    if (NowSeconds() - waited_end_ < kInlineWindow) {  // ops are being waited for: poll for deferred ones
      cv_.wait_for(lock, std::chrono::duration<double>(kDeferGrace));
      continue;
    }
    executor_asleep_ = true;
    cv_.wait(lock);
    executor_asleep_ = false;
  }
}

void Communicator::ExecutorLoop() {
  SetThreadLogRank(rank_);
  struct Pending {
    OpDesc op;
    std::shared_ptr<detail::WorkState> work;
    double start;
  };
  std::vector<Pending> pending;
  int idle_spins = 0;
  for (;;) {
    std::optional<Queued> next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (pending.empty() && queue_.empty() && !stop_) {
        // Spin a little for the next op before sleeping (see SpinBriefly).
        lock.unlock();
        SpinBriefly(queued_flag_);
        lock.lock();
      }
      if (pending.empty()) WaitForWork(lock);
      if (stop_ && queue_.empty() && pending.empty() && !executing_) break;
      // With p2p ops pending, Work::Wait cannot run a deferred op inline: take it at once.
      if (!queue_.empty() && !executing_ && (!pending.empty() || stop_ || GraceLeft(queue_.front()) <= 0)) {
        next = std::move(queue_.front());
        queue_.pop_front();
        queued_flag_.store(!queue_.empty(), std::memory_order_release);
        executing_ = true;
      }
    }
    if (next) {
      double start = 0;
      bool left_pending = RunQueued(*next, &start);
      {
        std::lock_guard<std::mutex> lock(mu_);
        executing_ = false;
        if (left_pending) {
          ++pending_count_;
          pending_p2p_.push_back({next->op.op, next->op.seq, next->op.root});
        }
      }
      if (left_pending) pending.push_back({std::move(next->op), next->work, start});
      idle_spins = 0;
    }
    if (!pending.empty()) {
      Progress();
      bool progressed = false;
      for (size_t i = 0; i < pending.size();) {
        Pending& p = pending[i];
        std::exception_ptr err;
        bool done = false;
        try {
          if (aborted_.load()) ThrowAborted();
          if (NowSeconds() > p.op.deadline) ThrowTimeout(p.op, DescribeStall(p.op));
          done = p.op.poll();
        } catch (const std::exception& e) {
          err = std::current_exception();
          const std::string what = p.work->what();
          Abort(std::string(e.what()).rfind(what, 0) == 0 ? std::string(e.what()) : Format("{} failed: {}", what, e.what()));
          done = true;
        }
        if (done) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            --pending_count_;
            const uint64_t seq = p.op.seq;
            std::erase_if(pending_p2p_, [seq](const PendingP2P& x) { return x.seq == seq; });
          }
          Finish(p.work, p.op, p.start, err);
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          progressed = true;
        } else {
          ++i;
        }
      }
      if (!progressed && ++idle_spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (progressed) idle_spins = 0;
    }
  }
}

void Communicator::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  drain_cv_.wait(lock, [&] { return running_ == 0; });
}

CommStats Communicator::Stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void Communicator::ResetStats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = CommStats{};
  records_.clear();
}

void Communicator::SetTracer(Tracer* tracer) {
  const int track = tracer != nullptr ? tracer->Track("comm " + name_) : 0;
  std::lock_guard<std::mutex> lock(stats_mu_);
  tracer_ = tracer;
  trace_track_ = track;
}

void Communicator::SetCommsLogger(const CommsLoggerOptions& options) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  logger_ = options;
}

std::vector<CommRecord> Communicator::Records() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return records_;
}

std::string Communicator::LogSummary() const {
  struct Agg {
    int64_t count = 0;
    double lat = 0, alg = 0, bus = 0;
  };
  std::map<std::pair<int, size_t>, Agg> agg;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    for (const auto& r : records_) {
      Agg& a = agg[{static_cast<int>(r.op), r.size_bytes}];
      ++a.count;
      a.lat += r.latency_ms;
      a.alg += r.algbw_gbps;
      a.bus += r.busbw_gbps;
    }
  }
  std::ostringstream os;
  os << "Comm. Op            Message Size        Count    Total Latency(ms)  Avg Latency(ms)  tput_avg (Gbps)  busbw_avg (Gbps)\n";
  int last_op = -1;
  char line[256];
  for (const auto& [k, a] : agg) {
    const char* name = k.first != last_op ? OpTypeName(static_cast<OpType>(k.first)) : "";
    last_op = k.first;
    std::snprintf(line, sizeof(line), "%-19s %-19s %-8lld %-18.3f %-16.3f %-16.2f %-16.2f\n", name,
                  FormatBytes(static_cast<double>(k.second)).c_str(), static_cast<long long>(a.count), a.lat,
                  a.lat / a.count, a.alg / a.count * 8, a.bus / a.count * 8);
    os << line;
  }
  return os.str();
}

// ---- public collectives: every one is a Submit -----------------------------------------------------

Work Communicator::AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
  OpDesc d;
  d.op = OpType::kAllReduce;
  d.send = send;
  d.recv = recv;
  d.count = count;
  d.dtype = dtype;
  d.reduce = op;
  return Submit(std::move(d));
}

Work Communicator::ReduceScatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op) {
  OpDesc d;
  d.op = OpType::kReduceScatter;
  d.send = send;
  d.recv = recv;
  d.count = recv_count;
  d.dtype = dtype;
  d.reduce = op;
  return Submit(std::move(d));
}

Work Communicator::AllGather(const void* send, void* recv, size_t send_count, DType dtype) {
  OpDesc d;
  d.op = OpType::kAllGather;
  d.send = send;
  d.recv = recv;
  d.count = send_count;
  d.dtype = dtype;
  return Submit(std::move(d));
}

Work Communicator::Broadcast(void* buf, size_t count, DType dtype, int root) {
  OpDesc d;
  d.op = OpType::kBroadcast;
  d.send = buf;
  d.recv = buf;
  d.count = count;
  d.dtype = dtype;
  d.root = root;
  return Submit(std::move(d));
}

Work Communicator::Reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root) {
  OpDesc d;
  d.op = OpType::kReduce;
  d.send = send;
  d.recv = rank_ == root ? recv : nullptr;
  d.count = count;
  d.dtype = dtype;
  d.reduce = op;
  d.root = root;
  return Submit(std::move(d));
}

Work Communicator::Barrier() {
  OpDesc d;
  d.op = OpType::kBarrier;
  d.dtype = DType::kI32;
  return Submit(std::move(d));
}

Work Communicator::Send(const void* buf, size_t count, DType dtype, int peer, int tag) {
  OpDesc d;
  d.op = OpType::kSend;
  d.send = buf;
  d.count = count;
  d.dtype = dtype;
  d.root = peer;
  d.tag = tag;
  return Submit(std::move(d));
}

Work Communicator::Recv(void* buf, size_t count, DType dtype, int peer, int tag) {
  OpDesc d;
  d.op = OpType::kRecv;
  d.recv = buf;
  d.count = count;
  d.dtype = dtype;
  d.root = peer;
  d.tag = tag;
  return Submit(std::move(d));
}

namespace {
void CheckTensor(const Tensor& t, Device dev, const char* what) {
  if (!t.defined()) ZR_THROW(InvalidArgument, "{}: undefined tensor", what);
  if (!(t.device() == dev)) {
    ZR_THROW(InvalidArgument, "{}: tensor on {} but the communicator works on {}", what, t.device().ToString(),
             dev.ToString());
  }
}
}  // namespace

Work Communicator::AllReduce(const Tensor& t, ReduceOp op) {
  CheckTensor(t, device(), "AllReduce");
  return AllReduce(t.data(), t.data(), static_cast<size_t>(t.numel()), t.dtype(), op);
}

Work Communicator::ReduceScatter(const Tensor& in, const Tensor& out, ReduceOp op) {
  CheckTensor(in, device(), "ReduceScatter");
  CheckTensor(out, device(), "ReduceScatter");
  if (in.dtype() != out.dtype() || in.numel() != out.numel() * size_) {
    ZR_THROW(InvalidArgument, "ReduceScatter: input {} must hold size ({}) x output {}", in.ToString(), size_,
             out.ToString());
  }
  return ReduceScatter(in.data(), out.data(), static_cast<size_t>(out.numel()), out.dtype(), op);
}

Work Communicator::AllGather(const Tensor& in, const Tensor& out) {
  CheckTensor(in, device(), "AllGather");
  CheckTensor(out, device(), "AllGather");
  if (in.dtype() != out.dtype() || out.numel() != in.numel() * size_) {
    ZR_THROW(InvalidArgument, "AllGather: output {} must hold size ({}) x input {}", out.ToString(), size_,
             in.ToString());
  }
  return AllGather(in.data(), out.data(), static_cast<size_t>(in.numel()), in.dtype());
}

Work Communicator::Broadcast(const Tensor& t, int root) {
  CheckTensor(t, device(), "Broadcast");
  return Broadcast(t.data(), static_cast<size_t>(t.numel()), t.dtype(), root);
}

std::vector<int64_t> Communicator::AllGatherHost(const std::vector<int64_t>& mine, int split_id) {
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(size_));
  AllGather(mine.data(), all.data(), mine.size(), DType::kI64).Wait();
  return all;
}

std::unique_ptr<Communicator> Communicator::Split(int color, int key) {
  // Everyone shares (color, key); members of one color are ordered by (key, old rank).
  int split_id = ++split_count_;
  std::vector<int64_t> all = AllGatherHost({color, key}, split_id);
  if (color < 0) return nullptr;
  std::vector<std::pair<int64_t, int>> order;
  for (int r = 0; r < size_; ++r) {
    if (all[2 * static_cast<size_t>(r)] == color) order.emplace_back(all[2 * static_cast<size_t>(r) + 1], r);
  }
  std::sort(order.begin(), order.end());
  std::vector<int> members;
  int new_rank = -1;
  for (const auto& [k, r] : order) {
    if (r == rank_) new_rank = static_cast<int>(members.size());
    members.push_back(r);
  }
  ZR_CHECK(new_rank >= 0);
  std::string new_name = Format("{}/s{}c{}", name_, split_id, color);
  auto sub = CreateSubgroup(new_name, members, new_rank);
  std::vector<std::string> hosts;
  for (int r : members) hosts.push_back(hosts_[static_cast<size_t>(r)]);
  sub->set_hosts(std::move(hosts));
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    sub->logger_ = logger_;
  }
  return sub;
}

}  // namespace zerorun::comm

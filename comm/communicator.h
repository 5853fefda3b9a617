// Communicator: a group of ranks and the collectives among them, with asynchronous Work handles.
//
// Every public collective goes through one funnel (Communicator::Submit, as NCCL's enqueue): argument
// checks, the group's sequence number, byte and time accounting per op type, the comms_logger record,
// then the backend's Execute on the group's executor thread. Ops run in submission order, one at a
// time, which is the order every rank must issue them in (as with NCCL and MPI).
//
// Backends: `local` (ranks are threads of one process, comm/local/local_comm.h), `ucx` (host memory
// across processes and nodes, comm/ucx/ucx_comm.h), `nccl` (device memory, comm/nccl/, CUDA builds).
// comm/init.h builds the world communicator from the launcher's environment.
//
// Failure contract: an op waits at most its timeout (CommOptions::timeout; default 600 s, env
// ZERORUN_COMM_TIMEOUT in seconds overrides) and then fails with TimeoutError naming the op, its
// sequence number and the ranks that did not arrive. A dead peer fails every rank's pending op with
// CommError naming that peer's rank and host. After any failure the communicator is aborted: every
// queued and later op fails at once with the first error (as ncclCommAbort; create a new one).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zerorun/comm/store.h"
#include "zerorun/core/device.h"
#include "zerorun/core/dtype.h"

namespace zerorun {
class Tensor;
class Tracer;
}

namespace zerorun::comm {

enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin };
const char* ReduceOpName(ReduceOp op);  // "sum", "avg", "max", "min"

enum class OpType : uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kBarrier, kSend, kRecv };
inline constexpr int kNumOpTypes = 8;
// DeepSpeed comms_logger names: "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
// "barrier", "send", "recv".
const char* OpTypeName(OpType op);

// Accumulated per op type on one rank. bytes_sent/received are what this rank's transport actually
// moved (a ring all-reduce of S bytes on n ranks sends 2(n-1)/n·S; the `local` backend reports the same
// ring volume, so ZeRO's 2Ψ/3Ψ formulas can be checked on it). payload_bytes sums each call's size
// as nccl-tests counts it (all-reduce: the buffer; all-gather/reduce-scatter: the full output/input).
struct OpStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t payload_bytes = 0;
  double total_time_s = 0;  // execution time (start of the backend's work to completion)
};

struct CommStats {
  std::array<OpStats, kNumOpTypes> by_op{};
  const OpStats& operator[](OpType op) const { return by_op[static_cast<int>(op)]; }
  OpStats Total() const;
};

// DeepSpeed's `comms_logger` section (same keys and defaults).
struct CommsLoggerOptions {
  bool enabled = false;  // keep per-(op, size) records
  bool verbose = false;  // also log one line per op as it completes
  bool prof_all = true;  // record every op type ...
  std::vector<std::string> prof_ops;  // ... or only these names (when prof_all is false)
  bool debug = false;    // accepted for compatibility; adds the sequence number to verbose lines
};

// One comms_logger line's worth, as nccl-tests define the bandwidths: algbw = size / time;
// busbw = algbw · factor with all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n, others 1.
struct CommRecord {
  OpType op = OpType::kAllReduce;
  uint64_t seq = 0;
  size_t size_bytes = 0;
  double latency_ms = 0;
  double algbw_gbps = 0;  // GB/s (1e9 bytes per second)
  double busbw_gbps = 0;
};
double BusBandwidthFactor(OpType op, int world_size);

struct CommOptions {
  // Longest any op may take from the start of its execution; 0 means "from the environment":
  // ZERORUN_COMM_TIMEOUT (seconds, fractional allowed) or 600 s.
  Millis timeout{0};
  CommsLoggerOptions logger;
};
// The timeout CommOptions{} resolves to (reads ZERORUN_COMM_TIMEOUT; InvalidArgument if malformed).
Millis DefaultCommTimeout();

namespace detail {
struct WorkState;
}

// A handle to one submitted op. Cheap to copy; all copies see the same completion.
class Work {
 public:
  Work() = default;  // an op that is already complete (e.g. zero-size)
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}
  // True once the op finished, successfully or not (never blocks, never throws).
  bool IsCompleted() const;
  // Blocks until the op finishes (its own timeout bounds this); rethrows its error.
  void Wait() const;
  // As Wait(), but at most `timeout`: if that expires first the communicator is aborted (the op can
  // no longer complete consistently on every rank) and TimeoutError is thrown.
  void Wait(Millis timeout) const;

 private:
  void WakeOwner() const;  // asks the communicator's executor to run the op if it was deferred
  std::shared_ptr<detail::WorkState> state_;
};

// What the funnel hands a backend: one op, fully checked.
struct OpDesc {
  OpType op = OpType::kAllReduce;
  uint64_t seq = 0;       // per group, starts at 1, identical on every rank for the same call
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;       // elements; see each collective for which buffer it counts
  DType dtype = DType::kF32;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;           // broadcast/reduce root; send/recv peer
  int tag = 0;            // send/recv tag
  double deadline = 0;    // NowSeconds() after which the op times out (set when execution starts)
  // Filled in by the backend (the funnel falls back to the ring volume when both stay 0).
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  // A p2p op may leave completion for later: the backend sets `poll`, which returns true once done
  // (and throws on failure); the executor calls it between ops.
  std::function<bool()> poll;
  // What a device backend's OnSubmit leaves for its Execute (e.g. the event that orders the op after
  // the work the submitting thread had enqueued).
  std::shared_ptr<void> backend_state;
  std::string Describe(int rank, int size, const std::string& group) const;
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "world", or the split path ("world/s3c1": the split with sequence 3, color 1).
  const std::string& name() const { return name_; }
  const std::string& backend_name() const { return backend_name_; }
  // Where buffers must live: CPU for local and ucx, CUDA(i) for nccl.
  virtual Device device() const { return Device::CPU(); }
  // Host of each rank of this group (for messages).
  const std::vector<std::string>& hosts() const { return hosts_; }
  Millis timeout() const { return Millis(timeout_ms_.load(std::memory_order_relaxed)); }
  // The timeout of ops that start after this call (a long one while a job sets up or loads a
  // checkpoint, a short one while it trains, as torch's process groups take one at creation); ops
  // already running keep their deadline. Splits made later inherit it. InvalidArgument unless > 0.
  void set_timeout(Millis timeout);

  // ---- collectives (raw buffers on device(); counts in elements of `dtype`) ----------------------
  // Reductions support fp32, fp16, bf16, fp64, int32, int64. fp16/bf16 are converted to fp32, reduced
  // in fp32 and rounded back (see docs/comm.md for where each backend rounds). kAvg on integers
  // truncates toward zero. Data-movement ops accept every dtype.

  // recv[i] = op over ranks of send[i], i < count. In place when send == recv.
  Work AllReduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
  Work AllReduce(void* buf, size_t count, DType dtype, ReduceOp op) { return AllReduce(buf, buf, count, dtype, op); }
  // send holds size()·recv_count elements; recv[i] = op over ranks of send[rank·recv_count + i].
  // In place when recv == send + rank·recv_count.
  Work ReduceScatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op);
  // recv holds size()·send_count elements; recv[r·send_count + i] = send of rank r [i].
  // In place when send == recv + rank·send_count.
  Work AllGather(const void* send, void* recv, size_t send_count, DType dtype);
  // buf on every rank becomes root's buf.
  Work Broadcast(void* buf, size_t count, DType dtype, int root);
  // recv on root = op over ranks of send (recv ignored elsewhere; may be null there).
  Work Reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root);
  Work Barrier();
  // Point to point; a Send matches the Recv with the same (peer, tag) in issue order. A Send may
  // complete before the Recv is posted (the data is buffered or in flight).
  Work Send(const void* buf, size_t count, DType dtype, int peer, int tag = 0);
  Work Recv(void* buf, size_t count, DType dtype, int peer, int tag = 0);

  // Tensor conveniences (contiguous tensors on device(); dtype and counts from the tensors).
  Work AllReduce(const Tensor& t, ReduceOp op);
  Work ReduceScatter(const Tensor& in, const Tensor& out, ReduceOp op);  // in: (size·n) out: (n)
  Work AllGather(const Tensor& in, const Tensor& out);                   // in: (n) out: (size·n)
  Work Broadcast(const Tensor& t, int root);

  // Collective over this group: ranks with the same `color` form a new group, ordered by (key, old
  // rank). color < 0 (kNoColor): this rank joins none and gets nullptr. The new group shares this
  // group's transport context and rendezvous store (under a prefix); it has its own sequence numbers,
  // stats and executor.
  static constexpr int kNoColor = -1;
  std::unique_ptr<Communicator> Split(int color, int key);

  // Fails every queued and future op with CommError(reason) and wakes every waiter. Idempotent; the
  // first reason wins. Safe from any thread.
  void Abort(const std::string& reason);
  bool aborted() const { return aborted_.load(); }
  std::string abort_reason() const;  // the first reason ("" while not aborted)
  // Blocks until every op submitted so far has finished (errors stay in their Work).
  void Drain();

  CommStats Stats() const;
  void ResetStats();
  void SetCommsLogger(const CommsLoggerOptions& options);
  std::vector<CommRecord> Records() const;  // per-op records (comms_logger enabled), oldest first
  // DeepSpeed-style summary table: per op and message size, count, mean latency, algbw, busbw.
  std::string LogSummary() const;
  uint64_t last_seq() const { return seq_.load(); }
  // Timeline (core/trace.h): every op of this group that completes from now on is a span on `tracer`'s
  // track "comm <name>" (execution start to completion; args: bytes as nccl-tests count them, seq,
  // dtype, elements), recorded before the op's Work completes. nullptr stops it. Not owned: the caller
  // keeps it alive until it is set to nullptr (or this communicator is gone).
  void SetTracer(Tracer* tracer);

 protected:
  Communicator(std::string backend_name, std::string name, int rank, int size, const CommOptions& options);

  // Runs on the executor thread, in submission order; throws CommError/TimeoutError on failure.
  // Must return or throw by op.deadline and promptly after Abort (poll aborted()).
  virtual void Execute(OpDesc& op) = 0;
  // Runs on the submitting thread once the op is checked, before it is queued (the op's seq is set):
  // a device-memory backend records here where the submitting thread's stream stands, so the op is
  // ordered after the kernels that produced its inputs and before nothing else. Throwing fails the
  // call (nothing is queued). Default: nothing.
  virtual void OnSubmit(OpDesc& op) { (void)op; }
  // Creates this backend's communicator for the members of one Split color (called on every member,
  // in rank order of the new group; `new_name` is unique per split and color).
  virtual std::unique_ptr<Communicator> CreateSubgroup(const std::string& new_name,
                                                       const std::vector<int>& members, int new_rank) = 0;
  // Split's membership exchange: every rank's `mine` concatenated in rank order. The default runs
  // AllGather on host memory; device-memory backends override it (e.g. through the store).
  virtual std::vector<int64_t> AllGatherHost(const std::vector<int64_t>& mine, int split_id);
  // Lets the backend drive its transport while p2p ops are pending and nothing else runs.
  virtual void Progress() {}
  // Text appended to a timeout message (e.g. "waiting for rank 3 (host h); ranks that did not
  // arrive: ..."); the default reads the heartbeat keys from heartbeat_store_ (see comm/monitor.h).
  virtual std::string DescribeStall(const OpDesc& op);

  // Throws TimeoutError for `op` (with DescribeStall) when its deadline passed, CommError when aborted.
  void CheckAlive(const OpDesc& op);
  [[noreturn]] void ThrowTimeout(const OpDesc& op, const std::string& detail);
  [[noreturn]] void ThrowAborted();

  // Must be called by the backend's destructor before its own members go away.
  void StopExecutor();
  void set_hosts(std::vector<std::string> hosts) { hosts_ = std::move(hosts); }
  std::string PeerName(int peer) const;  // "rank 3 (host h)"
  // Heartbeats: the store view of this group (may be null) where "hb/<rank>" values are published.
  void set_heartbeat_store(std::shared_ptr<Store> s) { heartbeat_store_ = std::move(s); }
  const std::shared_ptr<Store>& heartbeat_store() const { return heartbeat_store_; }

 public:
  // For the monitor: the last sequence number this rank submitted, and the op's name.
  std::string HeartbeatValue() const;
  // For the monitor: the send/recv ops this rank has started and that wait for their peer (in this
  // group's ranks), oldest first. A peer that left the job never completes them.
  struct PendingP2P {
    OpType op;
    uint64_t seq;
    int peer;
  };
  std::vector<PendingP2P> PendingP2POps() const;
  // Keeps `resource` alive as long as this communicator, released after the backend is torn down
  // (InitFromEnv attaches the store server, store client and monitor to the world communicator).
  void AttachResource(std::shared_ptr<void> resource) { resources_.push_back(std::move(resource)); }

 private:
  friend class Work;
  struct Queued {
    OpDesc op;
    std::shared_ptr<detail::WorkState> work;
    double queued_at = 0;   // deferred: when the executor first saw it (0: not yet; Submit reads no clock)
    bool deferred = false;  // the executor was not woken for it (see Submit)
  };
  Work Submit(OpDesc op);
  void ExecutorLoop();
  bool RunQueued(Queued& q, double* start_out, bool inline_run = false);
  // Work::Wait's fast path: runs the queued collectives up to and including the op of `w` here, in
  // order, when nothing else runs; false when it could not (an op runs elsewhere, a p2p op is queued).
  bool TryRunInline(const detail::WorkState* w);
  // Wakes the executor for deferred ops (a waiter that cannot run them inline needs them run).
  void WakeExecutor();
  // Seconds until the executor may take `q` (mu_ held): 0 unless it is deferred and within its grace
  // (kDeferGrace from when the executor first saw it; none once the communicator is aborted).
  double GraceLeft(Queued& q);
  // The executor's wait (mu_ held): returns when the queue's front op is its to run (not deferred,
  // or unclaimed for kDeferGrace) or on stop.
  void WaitForWork(std::unique_lock<std::mutex>& lock);
  // inline_run: called from TryRunInline, which leaves clearing executing_ (and waking the executor) to it.
  void Finish(const std::shared_ptr<detail::WorkState>& w, OpDesc& op, double start, std::exception_ptr err,
              bool inline_run = false);

  std::string backend_name_;
  std::string name_;
  int rank_;
  int size_;
  std::atomic<int64_t> timeout_ms_;  // read by the executor thread
  std::shared_ptr<std::atomic<Communicator*>> self_;  // Work's way back; null once stopping
  std::shared_ptr<const std::string> name_ptr_;        // shared with Work for lazy messages
  std::vector<std::shared_ptr<void>> resources_;  // outlives the backend (members die after ~Derived)
  std::vector<std::string> hosts_;
  std::shared_ptr<Store> heartbeat_store_;

  std::atomic<uint64_t> seq_{0};
  std::atomic<int> last_op_{0};
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // guarded by mu_
  int split_count_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;        // the executor waits on it for work
  std::condition_variable drain_cv_;  // Drain waits on it for running_ == 0
  double waited_end_ = -1e30;         // when the last op a caller waited for finished (see Submit)
  bool last_waited_ = false;          // the last op to finish was waited for (Submit defers the next)
  bool defer_to_waiters_ = false;     // Submit may leave ops to waiters (ranks outnumber CPUs; see Submit)
  bool executor_asleep_ = false;      // the executor waits on cv_ without a timeout
  std::deque<Queued> queue_;
  std::atomic<bool> queued_flag_{false};  // !queue_.empty(), readable without mu_
  int64_t running_ = 0;  // queued or executing or pending p2p
  bool executing_ = false;    // an op is running (on the executor or inline in Work::Wait)
  int64_t pending_count_ = 0;  // p2p ops waiting for their poll
  std::vector<PendingP2P> pending_p2p_;  // the same ops, for the monitor
  bool stop_ = false;
  std::thread executor_;

  mutable std::mutex stats_mu_;
  CommStats stats_;
  CommsLoggerOptions logger_;
  std::vector<CommRecord> records_;
  Tracer* tracer_ = nullptr;  // guarded by stats_mu_
  int trace_track_ = 0;
};

}  // namespace zerorun::comm

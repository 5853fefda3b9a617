// The UCX transport: one UCP worker per group, endpoints to every peer, tag send/receive requests
// driven by the executor thread, point-to-point ops, and failure reporting that names the peer.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "zerorun/comm/ucx/ucx_comm_impl.h"
#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"

namespace zerorun::comm {

namespace ucx {

namespace {

std::string HostName() {
  char buf[256] = "?";
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

size_t EnvBytes(const char* name, size_t fallback) {
  const char* e = std::getenv(name);
  if (!e || !*e) return fallback;
  char* end = nullptr;
  unsigned long long v = std::strtoull(e, &end, 10);
  if (end == e || *end) ZR_THROW(InvalidArgument, "{}='{}': expected a byte count", name, e);
  return static_cast<size_t>(v);
}

std::mutex g_context_mu;
std::weak_ptr<Context> g_context;

}  // namespace

Context::~Context() {
  if (handle) ucp_cleanup(handle);
}

std::shared_ptr<Context> Context::Get() {
  std::lock_guard<std::mutex> lock(g_context_mu);
  if (auto c = g_context.lock()) return c;
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);  // reads UCX_* from the environment
  if (st != UCS_OK) ZR_THROW(CommError, "ucx: reading the UCX configuration failed: {}", ucs_status_string(st));
  // Zero-copy rendezvous goes through CMA (process_vm_readv) within a node, and UCX 1.13 aborts the
  // *surviving* process when the peer dies mid-transfer (cma_ep.c: fatal error). Eager copies through
  // the shared-memory FIFOs survive a peer's death, so they are the default; UCX_RNDV_THRESH set by
  // the user wins (docs/comm.md).
  if (!std::getenv("UCX_RNDV_THRESH")) ucp_config_modify(config, "RNDV_THRESH", "inf");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG;
  params.mt_workers_shared = 1;
  auto c = std::make_shared<Context>();
  st = ucp_init(&params, config, &c->handle);
  ucp_config_release(config);
  if (st != UCS_OK) {
    c->handle = nullptr;
    ZR_THROW(CommError, "ucx: ucp_init failed: {} (check UCX_TLS / UCX_NET_DEVICES)", ucs_status_string(st));
  }
  g_context = c;
  return c;
}

UcxCommunicator::UcxCommunicator(std::shared_ptr<Context> context, std::shared_ptr<Store> gen_store, std::string name,
                                 int rank, int size, const CommOptions& options, std::shared_ptr<Monitor> monitor,
                                 const UcxOptions& ucx)
    : Communicator("ucx", name, rank, size, options),
      context_(std::move(context)),
      gen_store_(std::move(gen_store)),
      group_store_(std::make_shared<PrefixStore>(name, gen_store_)),
      monitor_(std::move(monitor)),
      options_(options),
      ucx_(ucx) {
  if (ucx_.small_bytes == 0) ucx_.small_bytes = EnvBytes("ZERORUN_UCX_SMALL_BYTES", 64 << 10);
  if (ucx_.segment_bytes == 0) ucx_.segment_bytes = std::max<size_t>(EnvBytes("ZERORUN_UCX_SEGMENT_BYTES", 256 << 10), 64);
  if (const char* m = std::getenv("ZERORUN_UCX_ERR_MODE")) ucx_.peer_error_mode = std::string(m) == "peer";
  if (const char* m = std::getenv("ZERORUN_SHM")) {
    const std::string v = m;
    if (v == "0" || v == "off") ucx_.shm = false;
    else if (v != "1" && v != "on" && !v.empty()) ZR_THROW(InvalidArgument, "ZERORUN_SHM='{}': expected 0 or 1", v);
  }
  if (const char* d = std::getenv("ZERORUN_COMM_DEBUG")) debug_ = *d && std::string(d) != "0";
  if (const char* h = std::getenv("ZERORUN_COMM_HIERARCHICAL")) ucx_.hierarchical = std::string(h) != "0";
  if (ucx_.shm_slot_bytes == 0) ucx_.shm_slot_bytes = EnvBytes("ZERORUN_SHM_SLOT_BYTES", 1 << 20);
  if (ucx_.shm_slot_bytes < 4096 || ucx_.shm_slot_bytes > (size_t{1} << 30)) {
    ZR_THROW(InvalidArgument, "ZERORUN_SHM_SLOT_BYTES={}: expected 4096 to 1073741824 bytes", ucx_.shm_slot_bytes);
  }
  options_.timeout = timeout();
  set_heartbeat_store(group_store_);
  try {
    Connect();
    SetupShm();
  } catch (...) {
    StopExecutor();
    throw;
  }
  if (monitor_) monitor_->Register(this);
}

UcxCommunicator::~UcxCommunicator() {
  if (monitor_) monitor_->Unregister(this);
  StopExecutor();
  if (monitor_ && aborted()) monitor_->NoteLocalFailure();
  // Force-close endpoints (peers may be gone); bounded wait for the close requests.
  double deadline = NowSeconds() + 2.0;
  std::vector<void*> closing;
  for (ucp_ep_h ep : eps_) {
    if (!ep) continue;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) closing.push_back(r);
  }
  while (!closing.empty() && NowSeconds() < deadline) {
    ucp_worker_progress(worker_);
    closing.erase(std::remove_if(closing.begin(), closing.end(),
                                 [](void* r) {
                                   if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
                                   ucp_request_free(r);
                                   return true;
                                 }),
                  closing.end());
  }
  if (worker_) ucp_worker_destroy(worker_);
}

void UcxCommunicator::Connect() {
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t st = ucp_worker_create(context_->handle, &wp, &worker_);
  if (st != UCS_OK) ZR_THROW(CommError, "ucx group '{}' rank {}: ucp_worker_create failed: {}", name(), rank(), ucs_status_string(st));
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  st = ucp_worker_get_address(worker_, &addr, &addr_len);
  if (st != UCS_OK) ZR_THROW(CommError, "ucx group '{}': ucp_worker_get_address failed: {}", name(), ucs_status_string(st));
  std::string host = HostName();
  std::string mine = host + '\0' + std::string(reinterpret_cast<const char*>(addr), addr_len);
  ucp_worker_release_address(worker_, addr);
  group_store_->Set(Format("ucx/{}", rank()), mine);

  std::vector<std::string> hosts(static_cast<size_t>(size()));
  eps_.assign(static_cast<size_t>(size()), nullptr);
  peer_args_.resize(static_cast<size_t>(size()));
  for (int p = 0; p < size(); ++p) {
    std::string v = p == rank() ? mine : group_store_->Get(Format("ucx/{}", p), timeout());
    size_t z = v.find('\0');
    if (z == std::string::npos) ZR_THROW(CommError, "ucx group '{}': malformed address of rank {} in {}", name(), p, group_store_->Describe());
    hosts[static_cast<size_t>(p)] = v.substr(0, z);
    if (p == rank()) continue;
    std::string peer_addr = v.substr(z + 1);
    peer_args_[static_cast<size_t>(p)] = {this, p};
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer_addr.data());
    if (ucx_.peer_error_mode) {
      ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &UcxCommunicator::EpErrorCallback;
      ep.err_handler.arg = &peer_args_[static_cast<size_t>(p)];
    }
    st = ucp_ep_create(worker_, &ep, &eps_[static_cast<size_t>(p)]);
    if (st != UCS_OK) {
      ZR_THROW(CommError, "ucx group '{}' rank {}: cannot create an endpoint to rank {} (host {}): {}", name(), rank(), p,
               hosts[static_cast<size_t>(p)], ucs_status_string(st));
    }
  }
  set_hosts(std::move(hosts));
  ZR_DEBUG("ucx group '{}' rank {}/{} connected", name(), rank(), size());
}

// This process's node for the shm decision: the host name and the network namespace (ranks in different
// namespaces of one machine are separate nodes, as scripts/netns-hosts.sh simulates them).
namespace {
std::string NodeKey() {
  if (const char* id = std::getenv("ZERORUN_NODE_ID"); id && *id) return std::string("id|") + id;
  char ns[128] = "";
  ssize_t n = ::readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  if (n > 0) ns[n] = '\0';
  return HostName() + "|" + ns;
}
}  // namespace

void UcxCommunicator::SetupShm() {
  if (size() < 2 || (!ucx_.shm && !ucx_.hierarchical)) return;
  const std::string mine = NodeKey();
  group_store_->Set(Format("node/{}", rank()), mine);
  std::vector<std::string> nodes(static_cast<size_t>(size()));
  bool one_node = true;
  for (int p = 0; p < size(); ++p) {
    nodes[static_cast<size_t>(p)] = p == rank() ? mine : group_store_->Get(Format("node/{}", p), timeout());
    one_node &= nodes[static_cast<size_t>(p)] == mine;
  }
  if (!one_node) {
    if (ucx_.hierarchical && ucx_.shm) SetupHierarchy(nodes);
    return;
  }
  if (!ucx_.shm) return;
  // The name is derived from the job token (hashed: the token authenticates the store), the restart
  // generation and the group, plus rank 0's pid.
  const char* token = std::getenv("ZERORUN_JOB_TOKEN");
  const char* restart = std::getenv("ZERORUN_RESTART");
  const std::string prefix = shm::SegmentNamePrefix(token ? token : "", restart && *restart ? restart : "0", name());
  shm::ShmOptions so;
  so.slot_bytes = ucx_.shm_slot_bytes;
  shm_ = shm::ShmGroup::Create(*group_store_, *gen_store_, prefix, rank(), size(), timeout(), so);
}

void UcxCommunicator::SetupHierarchy(const std::vector<std::string>& nodes) {
  // Nodes numbered by their lowest rank; members of a node in rank order.
  std::vector<int> first;  // lowest rank of each node
  std::vector<int> node_of(nodes.size());
  for (size_t p = 0; p < nodes.size(); ++p) {
    int k = -1;
    for (size_t j = 0; j < first.size(); ++j) {
      if (nodes[static_cast<size_t>(first[j])] == nodes[p]) k = static_cast<int>(j);
    }
    if (k < 0) {
      k = static_cast<int>(first.size());
      first.push_back(static_cast<int>(p));
    }
    node_of[p] = k;
  }
  if (first.size() == nodes.size()) return;  // one rank per node: nothing to gain
  const int me = node_of[static_cast<size_t>(rank())];
  int local_rank = 0, local_size = 0;
  for (size_t p = 0; p < nodes.size(); ++p) {
    if (node_of[p] != me) continue;
    if (static_cast<int>(p) == rank()) local_rank = local_size;
    ++local_size;
  }
  UcxOptions sub = ucx_;
  node_ = std::make_unique<UcxCommunicator>(context_, gen_store_, Format("{}/node{}", name(), me), local_rank, local_size,
                                            options_, monitor_, sub);
  if (local_rank == 0) {
    leaders_ = std::make_unique<UcxCommunicator>(context_, gen_store_, Format("{}/leaders", name()), me,
                                                 static_cast<int>(first.size()), options_, monitor_, sub);
  }
  ZR_DEBUG("ucx group '{}' rank {}: node {} of {} (local rank {}/{})", name(), rank(), me, first.size(), local_rank,
           local_size);
}

void UcxCommunicator::ExecuteHierarchical(OpDesc& op) {
  // Sum (max, min) inside the node into its first rank, across the nodes' first ranks, back inside the
  // node. Each step is a collective of a subgroup with its own deadline; a failure there fails this op.
  node_->Reduce(op.send, op.recv, op.count, op.dtype, op.reduce, 0).Wait();
  if (leaders_) leaders_->AllReduce(op.recv, op.recv, op.count, op.dtype, op.reduce).Wait();
  node_->Broadcast(op.recv, op.count, op.dtype, 0).Wait();
}

void UcxCommunicator::EpErrorCallback(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* pa = static_cast<PeerArg*>(arg);
  pa->self->OnPeerFailure(pa->peer, status);
}

void UcxCommunicator::OnPeerFailure(int peer, ucs_status_t status) {
  Abort(Format("{} failed: UCX endpoint error on group '{}': {}", PeerName(peer), name(), ucs_status_string(status)));
}

std::unique_ptr<Communicator> UcxCommunicator::CreateSubgroup(const std::string& new_name, const std::vector<int>& members,
                                                              int new_rank) {
  CommOptions o = options_;
  o.timeout = timeout();  // set_timeout may have changed it since construction
  return std::make_unique<UcxCommunicator>(context_, gen_store_, new_name, new_rank, static_cast<int>(members.size()),
                                           o, monitor_, ucx_);
}

void UcxCommunicator::Progress() { ucp_worker_progress(worker_); }

std::string UcxCommunicator::DescribeStall(const OpDesc& op) {
  std::string s = Communicator::DescribeStall(op);
  if (waiting_on_ >= 0) s = Format("this rank was waiting for data from {}; {}", PeerName(waiting_on_), s);
  return s;
}

// ---- the request engine ----------------------------------------------------------------------------

void UcxCommunicator::PostSend(int peer, const void* buf, size_t bytes, uint64_t tag, Handler done) {
  ucp_request_param_t p{};
  ucs_status_ptr_t r = ucp_tag_send_nbx(eps_[static_cast<size_t>(peer)], buf, bytes, tag, &p);
  if (UCS_PTR_IS_ERR(r)) {
    ZR_THROW(CommError, "ucx group '{}': send of {} bytes to {} failed: {}", name(), bytes, PeerName(peer),
             ucs_status_string(UCS_PTR_STATUS(r)));
  }
  if (cur_) cur_->bytes_sent += static_cast<int64_t>(bytes);
  reqs_.push_back({r, peer, false, bytes, std::move(done)});
}

void UcxCommunicator::PostRecv(int peer, void* buf, size_t bytes, uint64_t tag, Handler done) {
  ucp_request_param_t p{};
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, buf, bytes, tag, kTagMask, &p);
  if (UCS_PTR_IS_ERR(r)) {
    ZR_THROW(CommError, "ucx group '{}': receive of {} bytes from {} failed: {}", name(), bytes, PeerName(peer),
             ucs_status_string(UCS_PTR_STATUS(r)));
  }
  if (cur_) cur_->bytes_received += static_cast<int64_t>(bytes);
  reqs_.push_back({r, peer, true, bytes, std::move(done)});
}

// Cancels every outstanding request so no buffer is touched after the op returns or throws.
void UcxCommunicator::CancelAll() {
  for (auto& q : reqs_) {
    if (q.req) ucp_request_cancel(worker_, q.req);
  }
  for (int i = 0; i < 100; ++i) ucp_worker_progress(worker_);
  for (auto& q : reqs_) {
    if (q.req) ucp_request_free(q.req);
  }
  reqs_.clear();
  completed_.clear();
}

void UcxCommunicator::RunUntilDone(const OpDesc& op) {
  try {
    Drive(op);
  } catch (...) {
    CancelAll();
    throw;
  }
}

void UcxCommunicator::Drive(const OpDesc& op) {
  int idle = 0;
  while (!reqs_.empty()) {
    unsigned progressed = ucp_worker_progress(worker_);
    // Move completed requests out first: their handlers may post new ones.
    for (size_t i = 0; i < reqs_.size();) {
      Req& q = reqs_[i];
      ucs_status_t st = q.req ? ucp_request_check_status(q.req) : UCS_OK;
      if (st == UCS_INPROGRESS) {
        ++i;
        continue;
      }
      if (q.req) ucp_request_free(q.req);
      if (st != UCS_OK) {
        int peer = q.peer;
        bool recv = q.recv;
        reqs_.erase(reqs_.begin() + static_cast<std::ptrdiff_t>(i));
        CancelAll();
        if (aborted()) ThrowAborted();
        ZR_THROW(CommError, "{}: {} {} failed: {}", op.Describe(rank(), size(), name()),
                 recv ? "receive from" : "send to", PeerName(peer), ucs_status_string(st));
      }
      completed_.push_back(std::move(q));
      if (i + 1 != reqs_.size()) reqs_[i] = std::move(reqs_.back());
      reqs_.pop_back();
    }
    if (!completed_.empty()) {
      std::vector<Req> done;
      done.swap(completed_);
      for (auto& q : done) {
        if (q.done) q.done();
      }
      idle = 0;
      continue;
    }
    if (progressed) {
      idle = 0;
      continue;
    }
    if (++idle % 64 == 0) {
      waiting_on_ = -1;
      for (const auto& q : reqs_) {
        if (q.recv) {
          waiting_on_ = q.peer;
          break;
        }
      }
      if (aborted() || NowSeconds() > op.deadline) {
        CancelAll();
        CheckAlive(op);
      }
      sched_yield();  // let a peer sharing this core run (ranks are often oversubscribed)
    }
  }
  waiting_on_ = -1;
}

// ---- dispatch and point-to-point -------------------------------------------------------------------

void UcxCommunicator::Execute(OpDesc& op) {
  cur_ = &op;
  struct Reset {
    UcxCommunicator* c;
    ~Reset() { c->cur_ = nullptr; }
  } reset{this};
  if (op.op == OpType::kSend || op.op == OpType::kRecv) {
    ExecuteP2P(op);
    return;
  }
  SelectInput in;
  in.op = op.op;
  in.count = op.count;
  in.bytes = op.count * DTypeSize(op.dtype);
  in.size = size();
  in.shm = shm_ != nullptr;
  in.small_bytes = ucx_.small_bytes;
  in.reduce = op.reduce;
  in.hierarchical = node_ != nullptr;
  const Selection sel = Select(in);
  last_algorithm_.store(sel.Describe(), std::memory_order_relaxed);
  if (debug_) {
    ZR_INFO("comm debug: group '{}' rank {}/{}: {} #{} {} elements of {}: {}", name(), rank(), size(), OpTypeName(op.op),
            op.seq, op.count, DTypeName(op.dtype), sel.Describe());
  }
  if (sel.transport == Transport::kSelf) {
    CopyLocal(op);
    return;
  }
  if (sel.transport == Transport::kShm) {
    ExecuteShm(op, sel);
    return;
  }
  if (sel.algorithm == Algorithm::kHierarchical) {
    ExecuteHierarchical(op);
    return;
  }
  if (op.op == OpType::kBarrier) {
    int32_t one = 1, out = 0;
    RecursiveDoubling(op, &one, &out, 1, DType::kI32, ReduceOp::kSum);
    return;
  }
  if (op.count == 0) return;
  switch (op.op) {
    case OpType::kAllReduce:
      if (sel.algorithm == Algorithm::kRecursiveDoubling) {
        RecursiveDoubling(op, op.send, op.recv, op.count, op.dtype, op.reduce);
      } else {
        Ring(op, RingMode::kAllReduce);
      }
      return;
    case OpType::kReduceScatter:
      Ring(op, RingMode::kReduceScatter);
      return;
    case OpType::kAllGather:
      Ring(op, RingMode::kAllGather);
      return;
    case OpType::kBroadcast:
      TreeBroadcast(op);
      return;
    case OpType::kReduce:
      TreeReduce(op);
      return;
    default:
      ZR_CHECK(false, "unhandled op {}", OpTypeName(op.op));
  }
}

void UcxCommunicator::ExecuteShm(OpDesc& op, const Selection& sel) {
  // Every wait polls this: the op's deadline (TimeoutError naming the peer waited for, with the
  // heartbeats' FROZEN/alive verdicts) and the communicator's abort (the monitor's death notice).
  shm::LivenessCheck live = [this, &op](int peer) {
    if (aborted() || NowSeconds() > op.deadline) {
      waiting_on_ = peer;
      CheckAlive(op);
    }
  };
  struct Clear {
    int* w;
    ~Clear() { *w = -1; }
  } clear{&waiting_on_};
  if (op.op == OpType::kBarrier) {
    shm_->Barrier(live);
    return;
  }
  if (op.count == 0) return;
  switch (op.op) {
    case OpType::kAllReduce:
      if (sel.algorithm == Algorithm::kOneShot) {
        shm_->AllReduceOneShot(op.send, op.recv, op.count, op.dtype, op.reduce, live);
      } else {
        shm_->AllReducePipelined(op.send, op.recv, op.count, op.dtype, op.reduce, live);
      }
      return;
    case OpType::kReduceScatter:
      shm_->ReduceScatter(op.send, op.recv, op.count, op.dtype, op.reduce, live);
      return;
    case OpType::kAllGather:
      shm_->AllGather(op.send, op.recv, op.count, op.dtype, live);
      return;
    case OpType::kBroadcast:
      shm_->Broadcast(op.recv, op.count, op.dtype, op.root, live);
      return;
    case OpType::kReduce:
      shm_->Reduce(op.send, op.recv, op.count, op.dtype, op.reduce, op.root, live);
      return;
    default:
      ZR_CHECK(false, "unhandled op {}", OpTypeName(op.op));
  }
}

void UcxCommunicator::ExecuteP2P(OpDesc& op) {
  const size_t bytes = op.count * DTypeSize(op.dtype);
  const int peer = op.root;
  const std::string what = op.Describe(rank(), size(), name());
  ucp_request_param_t p{};
  ucs_status_ptr_t r;
  if (op.op == OpType::kSend) {
    r = ucp_tag_send_nbx(eps_[static_cast<size_t>(peer)], op.send, bytes, P2PTag(op.tag, rank()), &p);
    op.bytes_sent = static_cast<int64_t>(bytes);
  } else {
    r = ucp_tag_recv_nbx(worker_, op.recv, bytes, P2PTag(op.tag, peer), kTagMask, &p);
    op.bytes_received = static_cast<int64_t>(bytes);
  }
  if (UCS_PTR_IS_ERR(r)) ZR_THROW(CommError, "{}: {}", what, ucs_status_string(UCS_PTR_STATUS(r)));
  if (!UCS_PTR_IS_PTR(r)) return;  // completed at once
  const bool is_recv = op.op == OpType::kRecv;
  std::string peer_name = PeerName(peer);
  op.poll = [r, is_recv, bytes, what, peer_name]() -> bool {
    ucs_status_t st;
    size_t got = bytes;
    if (is_recv) {
      ucp_tag_recv_info_t info{};
      st = ucp_tag_recv_request_test(r, &info);
      if (st != UCS_INPROGRESS) got = info.length;
    } else {
      st = ucp_request_check_status(r);
    }
    if (st == UCS_INPROGRESS) return false;
    ucp_request_free(r);
    if (st != UCS_OK) ZR_THROW(CommError, "{}: {} with {}", what, ucs_status_string(st), peer_name);
    if (got != bytes) ZR_THROW(CommError, "{}: message size mismatch: {} sent {} bytes, {} expected", what, peer_name, got, bytes);
    return true;
  };
}

}  // namespace ucx

const char* LastAlgorithm(const Communicator& comm) {
  auto* u = dynamic_cast<const ucx::UcxCommunicator*>(&comm);
  return u ? u->last_algorithm_.load(std::memory_order_relaxed) : "";
}

std::unique_ptr<Communicator> CreateUcxCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                    const CommOptions& options, std::shared_ptr<Monitor> monitor,
                                                    const UcxOptions& ucx_options) {
  return std::make_unique<ucx::UcxCommunicator>(ucx::Context::Get(), std::move(store), "world", rank, size, options,
                                                std::move(monitor), ucx_options);
}

}  // namespace zerorun::comm

// Private to comm/ucx/: the UCX communicator's class. ucx_comm.cc owns the transport (context,
// worker, endpoints, the request engine, point-to-point); ucx_algorithms.cc the collectives.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/comm/monitor.h"
#include "zerorun/comm/select.h"
#include "zerorun/comm/shm/shm_group.h"
#include "zerorun/comm/ucx/ucx_comm.h"

namespace zerorun::comm::ucx {

// The process-wide UCP context (tag feature, workers used from several threads); shared by every
// UCX communicator of the process and released with the last one.
struct Context {
  ucp_context_h handle = nullptr;
  ~Context();
  static std::shared_ptr<Context> Get();
};

// Uninitialised, grow-only scratch memory.
class Scratch {
 public:
  char* Get(size_t bytes) {
    if (bytes > cap_) {
      buf_.reset(new char[bytes]);
      cap_ = bytes;
    }
    return buf_.get();
  }

 private:
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;
};

// Tags: bit 63 set for point-to-point. Collectives: seq (23 bits) · source rank (20) · sub-step (20);
// p2p: user tag (20 bits at 40) · source rank. Every group has its own worker, so groups never match.
inline constexpr uint64_t kTagMask = ~uint64_t{0};
inline constexpr uint32_t kMaxSub = 1u << 20;
inline uint64_t CollTag(uint64_t seq, int src, uint32_t sub) {
  return ((seq & 0x7fffffu) << 40) | (static_cast<uint64_t>(src & 0xfffff) << 20) | (sub & 0xfffffu);
}
inline uint64_t P2PTag(int user_tag, int src) {
  return (uint64_t{1} << 63) | (static_cast<uint64_t>(user_tag & 0xfffff) << 40) | (static_cast<uint64_t>(src & 0xfffff) << 20);
}

class UcxCommunicator final : public Communicator {
 public:
  UcxCommunicator(std::shared_ptr<Context> context, std::shared_ptr<Store> gen_store, std::string name, int rank,
                  int size, const CommOptions& options, std::shared_ptr<Monitor> monitor, const UcxOptions& ucx);
  ~UcxCommunicator() override;

 protected:
  void Execute(OpDesc& op) override;
  std::unique_ptr<Communicator> CreateSubgroup(const std::string& new_name, const std::vector<int>& members,
                                               int new_rank) override;
  void Progress() override;
  std::string DescribeStall(const OpDesc& op) override;

 private:
  // ---- transport (ucx_comm.cc) ----
  using Handler = std::function<void()>;
  struct Req {
    void* req = nullptr;  // null: completed at post time
    int peer = -1;
    bool recv = false;
    size_t bytes = 0;
    Handler done;
  };
  void PostSend(int peer, const void* buf, size_t bytes, uint64_t tag, Handler done = {});
  void PostRecv(int peer, void* buf, size_t bytes, uint64_t tag, Handler done = {});
  // Drives the worker until every posted request completed (handlers may post more); throws on the
  // op's deadline, on abort, or when a request fails (naming the peer).
  void RunUntilDone(const OpDesc& op);
  void Drive(const OpDesc& op);
  void CancelAll();
  void OnPeerFailure(int peer, ucs_status_t status);
  static void EpErrorCallback(void* arg, ucp_ep_h ep, ucs_status_t status);
  void Connect();
  void ExecuteP2P(OpDesc& op);
  // Maps the group's shm segment when every member is on this host (after Connect).
  void SetupShm();
  void ExecuteShm(OpDesc& op, const Selection& sel);
  // Groups spanning nodes: a subgroup per node (shm) and one of the nodes' first ranks (UCX).
  void SetupHierarchy(const std::vector<std::string>& nodes);
  void ExecuteHierarchical(OpDesc& op);

  // ---- algorithms (ucx_algorithms.cc) ----
  enum class RingMode { kAllReduce, kReduceScatter, kAllGather };
  void Ring(OpDesc& op, RingMode mode);
  // recv = reduce(send) over all ranks by recursive doubling in the accumulation type.
  void RecursiveDoubling(const OpDesc& op, const void* send, void* recv, size_t count, DType dtype, ReduceOp reduce);
  void TreeBroadcast(OpDesc& op);
  void TreeReduce(OpDesc& op);
  void CopyLocal(OpDesc& op);  // the world_size == 1 case of every collective

  std::shared_ptr<Context> context_;
  std::shared_ptr<Store> gen_store_;    // the job generation's store (subgroups prefix it themselves)
  std::shared_ptr<Store> group_store_;  // gen_store_ under this group's name
  std::shared_ptr<Monitor> monitor_;
  CommOptions options_;
  UcxOptions ucx_;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  struct PeerArg {
    UcxCommunicator* self;
    int peer;
  };
  std::vector<PeerArg> peer_args_;
  std::vector<Req> reqs_;
  std::vector<Req> completed_;
  OpDesc* cur_ = nullptr;  // the op being executed (for byte accounting)
  int waiting_on_ = -1;    // peer of the oldest outstanding receive, for timeout messages
  Scratch work_, tmp_, acc_;
  std::unique_ptr<shm::ShmGroup> shm_;
  std::unique_ptr<UcxCommunicator> node_;     // this rank's node (hierarchical groups only)
  std::unique_ptr<UcxCommunicator> leaders_;  // the nodes' first ranks; set on those ranks only
  bool debug_ = false;  // ZERORUN_COMM_DEBUG

 public:
  std::atomic<const char*> last_algorithm_{""};
};

}  // namespace zerorun::comm::ucx

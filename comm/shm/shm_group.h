// Shared-memory collectives for the ranks of one group that all run on one host (comm/shm/).
//
// The segment: one POSIX shared-memory object per group, created by the group's rank 0 through the
// rendezvous store (name "/zerorun-<hash of job token, generation and group>-<pid>", published under
// the group's prefix as "shm/name"), created once every member waits to open it, unlinked by the last
// one to open it, mapped only after that, so nothing is left in /dev/shm once setup is over, whatever
// happens to the ranks afterwards. A setup that fails unlinks it too (docs/comm.md: the window left). Layout: per rank one cache line of control (a 32-bit progress counter, used
// as a futex word, and a sleeper count) and two data slots of `slot_bytes` (double buffering).
//
// Synchronisation: every rank runs the same sequence of steps for the same op sequence, and each step
// ends with the rank publishing its counter + 1. Waiting for "every peer finished step t" is waiting
// until every peer's counter reached t (spin ~50 us, or ~1 us when ranks outnumber cores, then yield
// the CPU between checks for ~2 ms, then FUTEX_WAIT with a 2 ms timeout); between
// polls the caller's liveness check runs (op deadline, communicator abort: the monitor turns a dead
// peer into an abort within ~100 ms), so every wait is bounded and names the peer it waited for.
// A slot is reused only once every peer has published the step that ended its last read of it.
//
// Algorithms (docs/comm.md, "shared memory"):
//   all-reduce, small (one-shot): each rank stages its input (in slot-sized chunks), every rank
//     reduces the whole chunk from every peer's slot in recursive-doubling order (the UCX small path's
//     order: bitwise equal to it), accumulating in fp32 for 16-bit dtypes and rounding once.
//   all-reduce, large (reduce-scatter + all-gather, pipelined): the buffer is cut into n chunks as the
//     UCX ring cuts it, each chunk into segments; column k = segment k of every chunk. Per column each
//     rank stages its column (but its own chunk's segment, which only it reads) into a slot, reduces its
//     own chunk's segment straight out of the peers' slots and its own input (order: rank r+1, r+2, ..., r: the ring's order, bitwise equal to it for 32/64-bit types;
//     16-bit accumulates in fp32 and rounds once, where the ring rounds at every hop), writes it to its
//     output and its slot, then copies the peers' reduced segments from their slots. Columns use the two
//     slots alternately, so column k+1 is staged while peers still read column k.
//   reduce-scatter: the first half of the above (own chunk into the output).
//   all-gather, broadcast: staged by the owner (root), copied by the others, slot by slot.
//   reduce: the reduce-scatter half, then the root copies every rank's reduced segment.
//   barrier: one step.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/comm/store.h"

namespace zerorun::comm::shm {

struct ShmOptions {
  size_t slot_bytes = 1 << 20;  // per slot; two slots per rank
};

// Called while a wait has not been satisfied for a while, with the peer waited for; throws to give up
// (deadline passed, communicator aborted).
using LivenessCheck = std::function<void(int peer)>;

// "zerorun-<16 hex digits>-": the start of the segment names of `group` in a job (FNV-1a of the token,
// the restart generation and the group name; the token itself is never exposed in /dev/shm).
std::string SegmentNamePrefix(const std::string& job_token, const std::string& restart, const std::string& group);

class ShmGroup {
 public:
  // Collective over the `size` ranks of a group whose store view is `group_store` (all on this host).
  // `gen_store` is the job generation's store (its "abort" key stops the setup early). Throws CommError /
  // TimeoutError (after unlinking the segment) when a member does not map it within `timeout`.
  // The segment is "/<name_prefix><pid of rank 0>".
  static std::unique_ptr<ShmGroup> Create(Store& group_store, Store& gen_store, const std::string& name_prefix, int rank,
                                          int size, Millis timeout, const ShmOptions& options);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }
  const std::string& segment_name() const { return name_; }

  // The collectives (the Communicator's argument conventions; count in elements of dtype).
  void AllReduceOneShot(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, const LivenessCheck& live);
  void AllReducePipelined(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, const LivenessCheck& live);
  void ReduceScatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op, const LivenessCheck& live);
  void AllGather(const void* send, void* recv, size_t send_count, DType dtype, const LivenessCheck& live);
  void Broadcast(void* buf, size_t count, DType dtype, int root, const LivenessCheck& live);
  void Reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root, const LivenessCheck& live);
  void Barrier(const LivenessCheck& live);

 private:
  struct Control;
  ShmGroup(int rank, int size, size_t slot_bytes, std::string name, void* base, size_t bytes);

  Control* Ctl(int r) const;
  char* Slot(int r, int s) const;
  // Publishes the end of this rank's next step; returns its number.
  uint32_t Publish();
  // Until every peer (all ranks but this one) published step `t`.
  void WaitAll(uint32_t t, const LivenessCheck& live);
  void WaitOne(int peer, uint32_t t, const LivenessCheck& live);
  // The next slot to write (alternating), after every peer released its previous use.
  int AcquireSlot(const LivenessCheck& live);
  void ReleaseSlot(int s, uint32_t step) { release_[s] = step; }
  // The reduce-scatter core of all-reduce, reduce-scatter and reduce (column by column, see above).
  enum class Mode { kAllReduce, kReduceScatter, kReduce };
  void Columns(Mode mode, const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root,
               const LivenessCheck& live);
  // dst[0, m) = op over srcs[order[0..n)] (ring fold order), divided by n for kAvg.
  void Fold(char* dst, const char* const* srcs, size_t m, DType dtype, ReduceOp op);
  // dst[0, m) = op over srcs in recursive-doubling order.
  void FoldTree(char* dst, const char* const* srcs, size_t m, DType dtype, ReduceOp op);

  int rank_, size_;
  size_t slot_bytes_;
  std::string name_;
  void* base_;
  size_t bytes_;
  uint32_t step_ = 0;          // steps this rank published
  uint32_t release_[2] = {0, 0};  // the step after which peers finished reading each slot
  int next_slot_ = 0;
  std::unique_ptr<char[]> acc_;  // accumulation blocks
  std::vector<const char*> tree_;  // FoldTree's current node per leaf
  std::vector<const char*> srcs_;  // the sources of a fold (one per rank; ops run one at a time)
  double spin_us_;             // spin this long before yielding (less when ranks outnumber cores)
};

}  // namespace zerorun::comm::shm

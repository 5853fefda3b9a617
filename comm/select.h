// The one place where a host collective's algorithm, protocol and transport are chosen.
//
// The UCX backend (comm/ucx/) asks Select() for every op and runs what it returns; nothing else
// decides. ZERORUN_COMM_DEBUG=1 logs the choice of every op, and the comms_logger's verbose lines and
// records carry it (CommRecord::algorithm). The table (docs/comm.md, "selection"):
//
//   op              ranks on one host (shm)                      otherwise (ucx)
//   all_reduce      <= small: one_shot/eager (2 ranks, sum/avg:  <= small or count < n: recursive_doubling/eager
//                     <= 16 KiB)
//                   else: rs_ag/pipelined                        else: ring/pipelined
//   reduce_scatter  rs/pipelined                                 ring/pipelined
//   all_gather      direct/pipelined                             ring/pipelined
//   broadcast       direct/pipelined                             binomial_tree/eager
//   reduce          rs_gather/pipelined                          binomial_tree/eager
//   barrier         counters/eager                               recursive_doubling/eager
//   send, recv      -                                            p2p/eager (always ucx)
// A group over several nodes with several ranks on some node (ZERORUN_COMM_HIERARCHICAL, default on):
//   all_reduce > small, sum/max/min: hierarchical/pipelined/shm+ucx; everything else as "otherwise".
//   one rank        copy/eager over "self"
// "small" is ZERORUN_UCX_SMALL_BYTES (default 64 KiB) for both transports, so the shm path reduces in the
// same order as the UCX path it replaces (docs/comm.md states where the bits still differ); with 2 ranks
// a sum has one order, so there shm switches at 16 KiB, where it measured faster.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "zerorun/comm/communicator.h"

namespace zerorun::comm {

enum class Algorithm : uint8_t {
  kCopy,               // one rank: a local copy
  kOneShot,            // shm: every rank reduces the whole (small) buffer out of every peer's slot
  kReduceScatterAllGather,  // shm: each rank reduces its chunk out of the peers' slots, then copies the others'
  kReduceScatterDirect,     // shm: the first half of the above
  kReduceScatterGather,     // shm reduce: the first half, then the root copies every chunk
  kDirect,             // shm: the owner stages, the others copy (all-gather, broadcast)
  kCounters,           // shm barrier: one step of the progress counters
  kRing,               // ucx: pipelined ring
  kRecursiveDoubling,  // ucx
  kBinomialTree,       // ucx
  kP2P,                // ucx send/recv
  kHierarchical,       // groups over several nodes: shm reduce to each node's leader, UCX all-reduce
                       // among the leaders, shm broadcast from each leader
};
enum class Protocol : uint8_t { kEager, kPipelined };
enum class Transport : uint8_t { kSelf, kShm, kUcx, kShmUcx };

const char* AlgorithmName(Algorithm a);
const char* ProtocolName(Protocol p);
const char* TransportName(Transport t);

struct Selection {
  Algorithm algorithm = Algorithm::kCopy;
  Protocol protocol = Protocol::kEager;
  Transport transport = Transport::kSelf;
  // "rs_ag/pipelined/shm": a static string (cheap to attach to every op).
  const char* Describe() const;
};

struct SelectInput {
  OpType op = OpType::kAllReduce;
  size_t count = 0;        // elements (OpDesc::count)
  size_t bytes = 0;        // count · element size
  int size = 1;            // ranks in the group
  bool shm = false;        // every rank of the group is on this host and the shm segment is mapped
  bool hierarchical = false;  // the group spans nodes and has node and leader subgroups
  size_t small_bytes = 64 << 10;
  ReduceOp reduce = ReduceOp::kSum;
};

// Over shm with 2 ranks, sum and average all-reduces up to this size run one-shot, larger ones
// reduce-scatter + all-gather (the UCX small threshold still decides for max and min).
inline constexpr size_t kShmTwoRankOneShotBytes = 16 << 10;

Selection Select(const SelectInput& in);

// The table above for a group of `size` ranks, with and without shm, at a few sizes (for
// ZERORUN_COMM_DEBUG and the docs).
std::string SelectionTable(int size, size_t small_bytes);

}  // namespace zerorun::comm

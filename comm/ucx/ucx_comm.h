// The `ucx` backend: host-memory collectives across processes and nodes over UCP tag messaging.
// UCX picks the transports (shared memory and CMA within a node, TCP or RDMA across nodes) and
// honours UCX_TLS, UCX_NET_DEVICES and friends from the environment.
//
// Each communicator (the world and every Split group) has its own UCP worker, so groups never see
// each other's messages; worker addresses are exchanged through the group's store prefix. Progress
// is made by the group's executor thread while an op runs (no extra progress thread): collectives
// spin on ucp_worker_progress, yielding the CPU when nothing moves.
//
// A node is a host name and a network namespace (ZERORUN_NODE_ID, when set, replaces both: ranks with
// different values are different nodes). Ranks of a group that all run on one node go through shared memory instead (comm/shm/shm_group.h);
// comm/select.h chooses, op by op. UCX algorithms (comm/ucx/ucx_algorithms.cc): pipelined ring reduce-scatter + all-gather for all-reduce
// above ZERORUN_UCX_SMALL_BYTES (default 64 KiB), recursive doubling below it; ring reduce-scatter and
// ring all-gather; binomial-tree broadcast and reduce. See docs/comm.md.
#pragma once

#include <memory>
#include <string>

#include "zerorun/comm/communicator.h"
#include "zerorun/comm/monitor.h"
#include "zerorun/comm/store.h"

namespace zerorun::comm {

struct UcxOptions {
  // All-reduce messages up to this many bytes use recursive doubling (latency), larger ones the
  // pipelined ring (bandwidth). 0: ZERORUN_UCX_SMALL_BYTES or 64 KiB.
  size_t small_bytes = 0;
  // Ring segment: the unit that is sent, received and reduced while the next one is in flight.
  // 0: ZERORUN_UCX_SEGMENT_BYTES or 256 KiB.
  size_t segment_bytes = 0;
  // UCP_ERR_HANDLING_MODE_PEER on every endpoint (transport-level peer-failure callbacks). Off by
  // default because it makes UCX 1.13 drop its shared-memory transports (the store's liveness keys
  // detect dead peers for every backend); ZERORUN_UCX_ERR_MODE=peer turns it on.
  bool peer_error_mode = false;
  // Groups whose ranks all run on one host use the shared-memory transport (comm/shm/) for every
  // collective (point-to-point stays on UCX). ZERORUN_SHM=0 turns it off.
  bool shm = true;
  // Bytes per shm slot (two per rank). 0: ZERORUN_SHM_SLOT_BYTES or 1 MiB; every rank must agree.
  size_t shm_slot_bytes = 0;
  // Groups over several nodes with several ranks on a node run large all-reduces hierarchically
  // (comm/select.h). ZERORUN_COMM_HIERARCHICAL=0 turns it off.
  bool hierarchical = true;
};

// Creates rank `rank` of a `size`-rank UCX communicator. Collective over the ranks: each publishes
// its worker address under `store` ("ucx/<rank>") and waits up to the comm timeout for the others.
// `monitor` (may be null) publishes this group's heartbeats and aborts it when a peer dies.
std::unique_ptr<Communicator> CreateUcxCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                    const CommOptions& options, std::shared_ptr<Monitor> monitor,
                                                    const UcxOptions& ucx_options = {});

// What the last op of `comm` ran ("rs_ag/pipelined/shm", comm/select.h); "" before the first op or
// when `comm` is not a ucx communicator. ZERORUN_COMM_DEBUG=1 logs it for every op.
const char* LastAlgorithm(const Communicator& comm);

}  // namespace zerorun::comm

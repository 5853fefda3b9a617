// Building the world communicator from the launcher's environment.
//
// The `zerorun` launcher (and scripts/other launchers such as torchrun, srun wrappers or the test
// harness) sets, per rank: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE, MASTER_ADDR, MASTER_PORT,
// ZERORUN_JOB_TOKEN and ZERORUN_RESTART (restart generation, 0 first). InitFromEnv then:
//   1. rank 0 starts the rendezvous StoreServer on MASTER_PORT (all interfaces, SO_REUSEADDR);
//   2. every rank (rank 0 too) connects a TcpStore to MASTER_ADDR:MASTER_PORT, retrying with backoff
//      for up to ZERORUN_STORE_CONNECT_TIMEOUT seconds (default 300), authenticating with the token;
//   3. keys live under "gen<ZERORUN_RESTART>/", so a restarted job never reads the previous
//      generation's keys from a store that survived;
//   4. a Monitor publishes heartbeats and turns any rank's death into a CommError on every rank;
//   5. the backend (argument, else ZERORUN_COMM_BACKEND=ucx|nccl|local, else ucx) builds the world.
// Without WORLD_SIZE (or WORLD_SIZE=1 and no MASTER_PORT) it returns a one-rank `local` communicator.
// Before any of it, the open-file limit is checked (raised to what the job needs when the hard limit
// allows). Destroying the world communicator is a clean exit: each rank checks out through the store
// ("left/<rank>" = its last world op, so peers still waiting for it fail at once), and rank 0 keeps
// the server up until every rank has checked out (bounded by the comm timeout). A rank whose
// communicator failed publishes its error as the job's abort reason instead.
#pragma once

#include <memory>
#include <string>

#include "zerorun/comm/communicator.h"

namespace zerorun::comm {

struct InitOptions {
  // "ucx", "nccl" or "local"; "" reads ZERORUN_COMM_BACKEND (default "ucx").
  std::string backend;
  // Collective timeout and comms_logger (timeout 0: ZERORUN_COMM_TIMEOUT or 600 s).
  CommOptions comm;
  // nccl only: the CUDA device; -1 means LOCAL_RANK.
  int device = -1;
};

// Throws InvalidArgument for malformed or missing variables (naming them), CommError when the
// rendezvous fails (naming MASTER_ADDR:MASTER_PORT).
std::unique_ptr<Communicator> InitFromEnv(const InitOptions& options = {});

// File descriptors one rank of a `world`-rank job needs at least: its own files, UCX's and the two
// store connections (24), UCX endpoints (up to 4 per peer over TCP), and for the rank that hosts the
// rendezvous store a listening socket, a wake-up pipe and two connections per rank.
int64_t RequiredOpenFiles(int world, bool hosts_store);

// Makes the soft open-file limit at least RequiredOpenFiles(world, hosts_store), raising it when the
// hard limit allows; otherwise throws CommError naming `who`, the need and the limit.
void CheckOpenFileLimit(int world, bool hosts_store, const std::string& who);

// The backend names this build supports ("local", "ucx", and "nccl" in CUDA builds).
bool BackendAvailable(const std::string& name);

}  // namespace zerorun::comm

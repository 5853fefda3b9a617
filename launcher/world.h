// The job's shape (which hosts, which slots, which global ranks) and the environment contract every
// rank receives. Pure functions of their inputs, so the contract is unit-tested without processes.
//
// Ranks are numbered consecutively in node order: node 0's slots get ranks 0..s0-1, and so on.
// LOCAL_RANK is the index of the slot on its node (DeepSpeed uses RANK mod LOCAL_SIZE, which is
// wrong when nodes have different slot counts; zerorun does not copy that).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "zerorun/launcher/hostfile.h"
#include "zerorun/launcher/options.h"
#include "zerorun/launcher/text.h"

namespace zerorun::launcher {

struct Node {
  std::string host;
  std::vector<int> slots;  // GPU ids (CUDA_VISIBLE_DEVICES) or CPU rank slots
  int first_rank = 0;      // global rank of slots[0]
};

struct World {
  std::vector<Node> nodes;
  int world_size = 0;
  bool gpu_slots = false;  // slots are GPU ids: ranks get CUDA_VISIBLE_DEVICES
};

// What the machine looks like where the launcher runs (injected for tests).
struct HostFacts {
  std::string cuda_visible_devices;  // value of CUDA_VISIBLE_DEVICES ("" if unset)
  bool cuda_visible_set = false;
  int gpu_count = 0;                 // GPUs present (0 without a driver)
  bool default_hostfile_exists = false;  // /job/hostfile
};
HostFacts DetectHostFacts();

// Resolves the world from hostfile/include/exclude/num_* (reference §7.2 rules and errors) or from
// --world_info. Throws InvalidArgument/IoError naming the option or file.
World ResolveWorld(const LaunchOptions& opts, const HostFacts& facts);

// "--world_info" encoding of a world: "gpu;host:0,1@host2:0" ("cpu;..." for CPU slots), and back.
std::string EncodeWorldInfo(const World& world);
World DecodeWorldInfo(const std::string& text);

// The rendezvous address: --master_addr, else 127.0.0.1 on one node, else the first host.
std::string DefaultMasterAddr(const LaunchOptions& opts, const World& world);

// Per-job values every rank shares.
struct JobContext {
  std::string master_addr;
  int master_port = 29500;
  std::string token;        // ZERORUN_JOB_TOKEN
  int restart_generation = 0;
};

// The variables zerorun sets for rank `local_index` of node `node_rank` (on top of the inherited
// environment): RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, LOCAL_WORLD_SIZE, CROSS_RANK, CROSS_SIZE,
// MASTER_ADDR, MASTER_PORT, ZERORUN_JOB_TOKEN, ZERORUN_RESTART and, for GPU slots,
// CUDA_VISIBLE_DEVICES (the node's slot ids, so LOCAL_RANK indexes into it).
EnvList RankEnv(const World& world, int node_rank, int local_index, const JobContext& job);

// PROGRAM's argv for one rank: PROGRAM, then --local_rank=N (unless no_local_rank), then ARGS.
std::vector<std::string> RankArgv(const LaunchOptions& opts, int local_rank);

// Variables forwarded to remote nodes: NCCL_*, UCX_*, ZERORUN_* of `environ` (without the ones
// zerorun sets per job), then the entries of the .zerorun_env files (later wins).
EnvList RemoteExports(const EnvList& environ_vars, const EnvList& env_file_entries);
// The process environment as an EnvList.
EnvList CurrentEnviron();
// Reads $ZERORUN_ENV_FILE if set, else ~/.zerorun_env then ./.zerorun_env (both if present, the
// current directory's entries win). Throws InvalidArgument for a malformed file.
EnvList LoadEnvFiles();

// 32 random bytes from /dev/urandom as 64 hex digits. Throws IoError if it cannot be read.
std::string NewJobToken();

}  // namespace zerorun::launcher

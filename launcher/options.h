// The `zerorun` command line: options (DeepSpeed's names where they exist, underscores or dashes),
// then PROGRAM and its arguments, which are passed on verbatim. See docs/launcher.md and --help.
#pragma once

#include <string>
#include <vector>

namespace zerorun::launcher {

struct LaunchOptions {
  std::string hostfile;            // -H/--hostfile; "" = /job/hostfile if it exists, else this machine only
  bool hostfile_given = false;     // set when -H was given: then a missing file is an error
  std::string include;             // -i/--include NODE_SPEC[@NODE_SPEC...]
  std::string exclude;             // -e/--exclude NODE_SPEC[@NODE_SPEC...]
  int num_nodes = -1;              // use the first N hosts (-1: all)
  int num_gpus = -1;               // GPUs per node: slots become 0..N-1 (-1: from hostfile / detection)
  int num_procs = -1;              // CPU ranks per node: slots 0..N-1, no CUDA_VISIBLE_DEVICES (-1: unset)
  std::string master_addr;         // "" = 127.0.0.1 on one node, else the first host
  int master_port = 29500;
  bool master_port_given = false;  // without it a one-node local job picks a free port
  int node_rank = -1;              // >= 0: start only this node's ranks, here (manual or agent mode)
  std::string launcher;            // local|ssh|pdsh|slurm|openmpi; "" = local for one host, ssh for more
  std::string launcher_args;       // extra arguments for ssh/pdsh/srun/mpirun, split shell-style
  int ssh_port = -1;
  bool no_local_rank = false;      // do not pass --local_rank=N to PROGRAM
  bool bind_cores_to_rank = false; // split the node's physical cores among its ranks (hwloc)
  std::string bind_core_list;      // "0,2-5": the CPUs to split instead of all cores
  std::string each_rank_log_dir;   // --enable_each_rank_log DIR: rank output to DIR/rank<r>.log
  bool save_pid = false;           // write /tmp/<pid>.zerorun while running
  int max_restarts = 0;            // restart the whole job up to N times after a failure
  bool dry_run = false;            // print what would run on each node, start nothing
  bool no_ssh_check = false;       // skip the ssh preflight
  bool help = false;
  double kill_grace_s = 5.0;       // --kill_grace: SIGTERM → SIGKILL delay at teardown
  int tail_lines = 20;             // --tail_lines: lines of a failed rank's output shown

  // Internal (used between zerorun processes; documented in docs/launcher.md).
  std::string world_info;          // --world_info host:slots@host:slots (the selected resources)
  bool env_from_stdin = false;     // --env_from_stdin: read KEY=VALUE lines up to a blank line first
  std::string from_env;            // --from_env slurm|openmpi: one rank whose place comes from SLURM_*/OMPI_*
  int restart_generation = 0;      // --restart_generation (ZERORUN_RESTART for the ranks)

  std::string program;             // PROGRAM
  std::vector<std::string> program_args;  // everything after PROGRAM, verbatim
};

// Upper bounds of the counts a command line or hostfile may ask for (beyond them the request is a
// typo, and honouring it would exhaust memory or file descriptors before failing).
inline constexpr int kMaxSlotsPerHost = 1024;
inline constexpr int kMaxWorldSize = 1 << 20;

// Parses argv (argv[0] excluded). Throws InvalidArgument naming the option for an unknown option,
// a missing or malformed value, or a missing PROGRAM (unless --help).
LaunchOptions ParseArgs(const std::vector<std::string>& args);

// The --help text.
std::string HelpText();

}  // namespace zerorun::launcher

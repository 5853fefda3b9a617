// Command-line parsing for `zerorun`. Options stop at the first argument that is not an option
// (PROGRAM) or at "--"; everything after PROGRAM is the program's, untouched.
#include "zerorun/launcher/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>

#include "zerorun/core/error.h"
#include "zerorun/launcher/text.h"

namespace zerorun::launcher {
namespace {

// An integer option's value within [lo, hi]; `what` says what the number means in the error.
int ToInt(const std::string& name, const std::string& value, long lo, long hi, const char* what) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || (errno != 0 && errno != ERANGE)) {
    ZR_THROW(InvalidArgument, "--{}: '{}' is not an integer", name, value);
  }
  if (errno == ERANGE || v < lo || v > hi) {
    ZR_THROW(InvalidArgument, "--{} {}: {} must be in [{}, {}]", name, value, what, lo, hi);
  }
  return static_cast<int>(v);
}

double ToDouble(const std::string& name, const std::string& value, double hi) {
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(v >= 0 && v <= hi)) {
    ZR_THROW(InvalidArgument, "--{}: '{}' is not a number of seconds in [0, {}]", name, value, hi);
  }
  return v;
}

}  // namespace

LaunchOptions ParseArgs(const std::vector<std::string>& args) {
  LaunchOptions o;
  // Options that take a value, by canonical (underscore) name.
  std::map<std::string, std::function<void(const std::string&)>> valued = {
      {"hostfile", [&](const std::string& v) { o.hostfile = v; o.hostfile_given = true; }},
      {"include", [&](const std::string& v) { o.include = v; }},
      {"exclude", [&](const std::string& v) { o.exclude = v; }},
      {"num_nodes", [&](const std::string& v) { o.num_nodes = ToInt("num_nodes", v, 1, kMaxWorldSize, "the host count"); }},
      {"num_gpus", [&](const std::string& v) { o.num_gpus = ToInt("num_gpus", v, 1, kMaxSlotsPerHost, "GPUs per node"); }},
      {"num_accelerators", [&](const std::string& v) {
         o.num_gpus = ToInt("num_accelerators", v, 1, kMaxSlotsPerHost, "accelerators per node");
       }},
      {"num_procs", [&](const std::string& v) { o.num_procs = ToInt("num_procs", v, 1, kMaxSlotsPerHost, "ranks per node"); }},
      {"master_addr", [&](const std::string& v) { o.master_addr = v; }},
      {"master_port", [&](const std::string& v) {
         o.master_port = ToInt("master_port", v, 1, 65535, "a TCP port");
         o.master_port_given = true;
       }},
      {"node_rank", [&](const std::string& v) { o.node_rank = ToInt("node_rank", v, 0, kMaxWorldSize - 1, "the node index"); }},
      {"launcher", [&](const std::string& v) {
         o.launcher = v;
         std::transform(o.launcher.begin(), o.launcher.end(), o.launcher.begin(), ::tolower);
       }},
      {"launcher_args", [&](const std::string& v) { o.launcher_args = v; }},
      {"ssh_port", [&](const std::string& v) { o.ssh_port = ToInt("ssh_port", v, 1, 65535, "a TCP port"); }},
      {"bind_core_list", [&](const std::string& v) { o.bind_core_list = v; }},
      {"enable_each_rank_log", [&](const std::string& v) { o.each_rank_log_dir = v; }},
      {"max_restarts", [&](const std::string& v) { o.max_restarts = ToInt("max_restarts", v, 0, 1000, "the restart count"); }},
      {"kill_grace", [&](const std::string& v) { o.kill_grace_s = ToDouble("kill_grace", v, 3600); }},
      {"tail_lines", [&](const std::string& v) { o.tail_lines = ToInt("tail_lines", v, 0, 100000, "the line count"); }},
      {"log_level", [&](const std::string& v) { setenv("ZERORUN_LOG_LEVEL", v.c_str(), 1); }},
      {"world_info", [&](const std::string& v) { o.world_info = v; }},
      {"from_env", [&](const std::string& v) { o.from_env = v; }},
      {"restart_generation", [&](const std::string& v) {
         o.restart_generation = ToInt("restart_generation", v, 0, 1 << 30, "the generation");
       }},
  };
  std::map<std::string, std::function<void()>> flags = {
      {"help", [&] { o.help = true; }},
      {"no_local_rank", [&] { o.no_local_rank = true; }},
      {"bind_cores_to_rank", [&] { o.bind_cores_to_rank = true; }},
      {"save_pid", [&] { o.save_pid = true; }},
      {"dry_run", [&] { o.dry_run = true; }},
      {"no_ssh_check", [&] { o.no_ssh_check = true; }},
      {"env_from_stdin", [&] { o.env_from_stdin = true; }},
      {"quiet", [&] { setenv("ZERORUN_LOG_LEVEL", "error", 1); }},
      // Accepted for DeepSpeed command lines; they change nothing here (PROGRAM is run directly,
      // --node_rank alone means "no ssh", one host is always a local launch).
      {"no_python", [] {}},
      {"no_ssh", [] {}},
      {"force_multi", [] {}},
  };
  const std::map<std::string, std::string> shorts = {{"-H", "hostfile"}, {"-i", "include"}, {"-e", "exclude"},
                                                     {"-h", "help"},     {"-q", "quiet"}};

  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;  // PROGRAM
    std::string name;
    std::string value;
    bool has_value = false;
    if (a[1] != '-') {  // short: -H file, -Hfile, -h
      auto it = shorts.find(a.substr(0, 2));
      if (it == shorts.end()) ZR_THROW(InvalidArgument, "unknown option '{}' (see zerorun --help)", a);
      name = it->second;
      if (a.size() > 2) {
        value = a.substr(a[2] == '=' ? 3 : 2);
        has_value = true;
      }
    } else {
      std::string body = a.substr(2);
      size_t eq = body.find('=');
      name = body.substr(0, eq);
      if (eq != std::string::npos) {
        value = body.substr(eq + 1);
        has_value = true;
      }
      std::replace(name.begin(), name.end(), '-', '_');
    }
    if (auto f = flags.find(name); f != flags.end()) {
      if (has_value) ZR_THROW(InvalidArgument, "option '{}' takes no value", a);
      f->second();
    } else if (auto v = valued.find(name); v != valued.end()) {
      if (!has_value) {
        if (i + 1 >= args.size()) ZR_THROW(InvalidArgument, "option '{}' needs a value", a);
        value = args[++i];
      }
      v->second(value);
    } else {
      ZR_THROW(InvalidArgument, "unknown option '{}' (see zerorun --help)", a);
    }
  }
  if (i < args.size()) {
    o.program = args[i];
    o.program_args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  }
  if (o.help) return o;
  if (o.program.empty()) ZR_THROW(InvalidArgument, "no PROGRAM given (usage: zerorun [options] PROGRAM [ARGS...]; see zerorun --help)");
  static const char* kLaunchers[] = {"", "local", "ssh", "pdsh", "slurm", "openmpi"};
  if (std::find(std::begin(kLaunchers), std::end(kLaunchers), o.launcher) == std::end(kLaunchers)) {
    ZR_THROW(InvalidArgument, "--launcher '{}' is not supported (choose local, ssh, pdsh, slurm or openmpi)", o.launcher);
  }
  if (!o.from_env.empty() && o.from_env != "slurm" && o.from_env != "openmpi") {
    ZR_THROW(InvalidArgument, "--from_env '{}': expected slurm or openmpi", o.from_env);
  }
  if (o.num_gpus > 0 && o.num_procs > 0) ZR_THROW(InvalidArgument, "give --num_gpus or --num_procs, not both");
  return o;
}

std::string HelpText() {
  return R"(usage: zerorun [options] PROGRAM [ARGS...]
       zerorun sweep SPEC [...]   (hyper-parameter sweeps: zerorun-sweep --help, docs/experiments.md)

Starts PROGRAM once per rank, on this machine or on many, with the rank environment set:
RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE (= LOCAL_WORLD_SIZE), CROSS_RANK (node index),
CROSS_SIZE (node count), MASTER_ADDR, MASTER_PORT, ZERORUN_JOB_TOKEN, ZERORUN_RESTART and,
for GPU slots, CUDA_VISIBLE_DEVICES. PROGRAM gets --local_rank=N as its first argument
(unless --no_local_rank); ARGS follow verbatim. If any rank fails, the whole job is stopped
on every node and zerorun exits with that rank's exit code.

Examples
  zerorun --num_procs 4 ./train --config ds.json         4 CPU ranks on this machine
  zerorun --num_gpus 2 zerorun-train ds.json            2 GPU ranks here
  zerorun -H hosts --num_procs 2 ./train                 every host of 'hosts', over ssh
  zerorun -H hosts -i node1:0,1@node2 ./train            some slots of some hosts
  zerorun -H hosts --node_rank 1 --master_addr node0 ./train   start node 1 by hand
  salloc -N2 zerorun --launcher slurm --num_procs 2 ./train     through srun

Where ranks run
  -H, --hostfile FILE     lines 'HOST slots=N' ('#' comments). Default /job/hostfile if it
                          exists, else this machine only
  -i, --include SPEC      use only these: host[:slot,slot...][@host...]
  -e, --exclude SPEC      use all but these (same syntax; not with --include)
  --num_nodes N           the first N hosts of the hostfile
  --num_gpus N            N GPU ranks per node (slots 0..N-1)
  --num_procs N           N CPU ranks per node (no CUDA_VISIBLE_DEVICES)
                          With neither, one rank per visible GPU, or one CPU rank.
How they are started
  --launcher NAME         local (one host), ssh (default for several hosts), pdsh,
                          slurm (srun), openmpi (mpirun)
  --launcher_args ARGS    extra arguments for ssh/pdsh/srun/mpirun (shell-style)
  --ssh_port N            port for ssh and pdsh
  --no_ssh_check          skip the ssh preflight of every host
  --node_rank K           start only node K's ranks, here (run it on every node yourself;
                          export the same ZERORUN_JOB_TOKEN on all of them)
  --master_addr ADDR      rank 0's address (default: 127.0.0.1 on one node, else first host)
  --master_port PORT      rendezvous port (default: a free port on a one-node local job,
                          else 29500)
Each rank
  --no_local_rank         do not pass --local_rank=N to PROGRAM
  --bind_cores_to_rank    split this node's physical cores evenly among its ranks (NUMA
                          order) and set OMP_NUM_THREADS
  --bind_core_list LIST   split these CPUs instead, e.g. 0-7,16-23
  --enable_each_rank_log DIR   write rank r's output to DIR/rank<r>.log instead of the
                          terminal (otherwise lines are shown with a '[rank r]' prefix)
Failures
  --max_restarts N        restart the whole job up to N times after a failure
                          (ZERORUN_RESTART counts the generation, 0 first)
  --kill_grace SEC        seconds between SIGTERM and SIGKILL at teardown (default 5)
  --tail_lines N          lines of a failed rank's output to show (default 20)
Other
  --dry_run               print what would run on each node and stop
  --save_pid              write /tmp/<pid>.zerorun while running
  --log_level LEVEL, -q   launcher verbosity (debug, info, warning, error)
  -h, --help              this text

Options accept dashes or underscores (--num-procs = --num_procs) and --opt=value.
Remote nodes also receive NCCL_*, UCX_*, ZERORUN_* variables and the KEY=VALUE lines of
./.zerorun_env or ~/.zerorun_env. Full guide: docs/launcher.md.
)";
}

}  // namespace zerorun::launcher

// Launcher modes (driver, node, step) and the restart loop; command lines live in commands.cc.
#include "zerorun/launcher/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "zerorun/comm/init.h"
#include "zerorun/core/error.h"
#include "zerorun/core/limits.h"
#include "zerorun/core/log.h"
#include "zerorun/launcher/binding.h"
#include "zerorun/launcher/commands.h"
#include "zerorun/launcher/preflight.h"
#include "zerorun/launcher/supervisor.h"

namespace zerorun::launcher {
namespace {

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

bool IsLocalName(const std::string& host) {
  return host == "localhost" || StartsWith(host, "127.") || host == "::1" || host == Hostname();
}

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

void PrintReport(const JobOutcome& outcome) {
  if (!outcome.report.empty()) std::fprintf(stderr, "%s\n", outcome.report.c_str());
  std::fflush(stderr);
}

void PrepareLogDir(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
    ZR_THROW(InvalidArgument, "--enable_each_rank_log {}: exists and is not a directory", dir);
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) ZR_THROW(IoError, "--enable_each_rank_log {}: cannot create it: {}", dir, ec.message());
}

// Binding plan for `ranks` ranks on this node (empty when not asked for), logged.
std::vector<CoreBinding> Binding(const LaunchOptions& opts, int ranks, int first_rank) {
  if (!opts.bind_cores_to_rank && opts.bind_core_list.empty()) return {};
  std::vector<CoreBinding> plan = PlanBinding(opts.bind_core_list, ranks);
  for (size_t i = 0; i < plan.size(); ++i) {
    ZR_INFO("binding rank {} to CPUs {} (OMP_NUM_THREADS={})", first_rank + static_cast<int>(i),
            FormatRangeList(plan[i].cpus), plan[i].threads);
  }
  return plan;
}

std::string MaskToken(const std::string& key, const std::string& value) {
  return key == "ZERORUN_JOB_TOKEN" || key == "LC_ZERORUN_JOB_TOKEN" ? "<hidden>" : value;
}

void PrintDry(const std::string& title, const EnvList& env, const std::vector<std::string>& argv) {
  std::string line = title + ":";
  for (const auto& [k, v] : env) line += " " + k + "=" + ShellQuote(MaskToken(k, v));
  line += " " + ShellJoin(argv);
  std::printf("%s\n", line.c_str());
}

// Ranks inherit this process's open-file limit: make it enough for the rank that needs most here
// (rank 0 hosts the rendezvous store) and for this launcher's pipes, or refuse before starting any.
void CheckFileLimits(const World& world, int ranks_here, bool hosts_rank0) {
  comm::CheckOpenFileLimit(world.world_size, hosts_rank0, hosts_rank0 ? "rank 0" : "each rank");
  const int64_t launcher_need = 16 + 3 * static_cast<int64_t>(ranks_here);
  if (!RaiseOpenFileLimit(static_cast<uint64_t>(launcher_need))) {
    ZR_THROW(InvalidArgument, "zerorun needs at least {} open files to supervise {} rank(s) here; {}: raise it (ulimit -n)",
             launcher_need, ranks_here, OpenFileLimitText());
  }
}

// A free TCP port on this machine, bound the way the rendezvous server binds (all interfaces).
int PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) ZR_THROW(IoError, "{}", ErrnoMessage("socket (picking a free port)", errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    int err = errno;
    close(fd);
    ZR_THROW(IoError, "{}", ErrnoMessage("picking a free port", err));
  }
  close(fd);
  return ntohs(a.sin_port);
}

// Whether rank 0's store could listen on `port` here now (same flags as the server).
bool PortFree(int port, int* err) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // cannot tell; rank 0 reports it
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(fd, 1) == 0;
  *err = errno;
  close(fd);
  return ok;
}

// UCX's shared-memory transport backs each segment with a file in /dev/shm that it unlinks once
// created; a rank killed or stopped between the two (the fault suite caught one, frozen in its
// rendezvous) leaves that file behind for good. The ranks of a node therefore get their own directory
// (UCX_POSIX_DIR, unless the user set it), which the node's launcher removes when they have ended.
class NodeShmDir {
 public:
  NodeShmDir(const EnvList& env, int generation) {
    if (!Getenv("UCX_POSIX_DIR").empty()) return;
    for (const auto& kv : env) {
      if (kv.first == "UCX_POSIX_DIR") return;
    }
    std::string dir = Format("/dev/shm/zerorun-{}-g{}", getpid(), generation);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      ZR_WARN("{}: {}; UCX keeps its shared memory in /dev/shm", dir, ErrnoMessage("mkdir", errno));
      return;
    }
    dir_ = dir;
  }
  ~NodeShmDir() {
    if (dir_.empty()) return;
    std::error_code ec;
    size_t left = 0;
    for (auto it = std::filesystem::directory_iterator(dir_, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      ++left;
    }
    std::filesystem::remove_all(dir_, ec);
    if (left > 0) {
      ZR_WARN("removed {} shared-memory file(s) the ranks left in {} (a rank killed or stopped while it set up UCX)",
              left, dir_);
    }
    if (ec) ZR_WARN("could not remove {}: {}", dir_, ec.message());
  }
  NodeShmDir(const NodeShmDir&) = delete;
  NodeShmDir& operator=(const NodeShmDir&) = delete;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// Runs node `k`'s ranks in this process's children.
JobOutcome RunNodeHere(const LaunchOptions& opts, const World& world, int k, const JobContext& job, int watch_fd) {
  const Node& node = world.nodes[static_cast<size_t>(k)];
  std::string host = node.host == "localhost" ? Hostname() : node.host;
  int n = static_cast<int>(node.slots.size());
  if (!opts.dry_run) CheckFileLimits(world, n, node.first_rank == 0);
  std::vector<CoreBinding> plan = Binding(opts, n, node.first_rank);
  if (!opts.dry_run) PrepareLogDir(opts.each_rank_log_dir);
  std::vector<ChildSpec> specs;
  for (int i = 0; i < n; ++i) {
    int rank = node.first_rank + i;
    ChildSpec spec;
    spec.name = Format("rank {} on {}", rank, host);
    spec.argv = RankArgv(opts, i);
    spec.env_set = RankEnv(world, k, i, job);
    if (!plan.empty()) {
      spec.cpus = plan[static_cast<size_t>(i)].cpus;
      EnvSet(&spec.env_set, "OMP_NUM_THREADS", std::to_string(plan[static_cast<size_t>(i)].threads));
    }
    spec.line_prefix = Format("[rank {}] ", rank);
    if (!opts.each_rank_log_dir.empty()) spec.log_path = Format("{}/rank{}.log", opts.each_rank_log_dir, rank);
    specs.push_back(std::move(spec));
  }
  if (opts.dry_run) {
    for (const ChildSpec& s : specs) {
      PrintDry(Format("node {} ({}) {}", k, host, s.name.substr(0, s.name.find(" on "))), s.env_set, s.argv);
    }
    return {};
  }
  NodeShmDir shm(specs.empty() ? EnvList{} : specs.front().env_set, job.restart_generation);
  if (!shm.dir().empty()) {
    for (ChildSpec& s : specs) EnvSet(&s.env_set, "UCX_POSIX_DIR", shm.dir());
  }
  SupervisorOptions so;
  so.kill_grace_s = opts.kill_grace_s;
  so.tail_lines = opts.tail_lines;
  so.watch_fd = watch_fd;
  ZR_INFO("starting {} rank(s) on {} (ranks {}..{} of {}, generation {})", n, host, node.first_rank,
          node.first_rank + n - 1, world.world_size, job.restart_generation);
  return RunChildren(specs, so);
}

// Reads the --env_from_stdin preamble (up to a blank line) and exports it into this process.
void ReadEnvPreamble() {
  std::string text;
  char c;
  while (true) {
    ssize_t n = read(0, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text += c;
    if (text == "\n" || (text.size() >= 2 && text.compare(text.size() - 2, 2, "\n\n") == 0)) break;
  }
  for (const auto& [k, v] : DecodeEnvPreamble(text)) setenv(k.c_str(), v.c_str(), 1);
}

// One job generation through the chosen runner. Returns the exit code.
int RunGeneration(const LaunchOptions& opts, const std::string& runner, const World* world, int generation,
                  const std::string& token) {
  std::string self = SelfExecutable();
  EnvList exports = RemoteExports(CurrentEnviron(), LoadEnvFiles());
  SupervisorOptions so;
  so.kill_grace_s = opts.kill_grace_s + 5;  // agents need their own grace to stop their ranks
  so.tail_lines = 2 * opts.tail_lines + 10;  // room for the agent's whole failure report
  so.what = "node";
  so.stop_by_closing_stdin = runner == "ssh";

  if (runner == "local") {
    if (world->nodes.size() > 1) {
      ZR_THROW(InvalidArgument, "--launcher local runs on this machine only, but {} hosts are selected: use "
                                "--launcher ssh (or pdsh, slurm, openmpi), or --num_nodes 1", world->nodes.size());
    }
    JobContext job{DefaultMasterAddr(opts, *world), opts.master_port, token, generation};
    // .zerorun_env applies to local ranks too (one rule for every runner).
    for (const auto& [k, v] : LoadEnvFiles()) setenv(k.c_str(), v.c_str(), 1);
    JobOutcome out = RunNodeHere(opts, *world, 0, job, -1);
    PrintReport(out);
    return out.exit_code;
  }

  std::vector<ChildSpec> specs;
  if (runner == "ssh" || runner == "pdsh") {
    std::string master = DefaultMasterAddr(opts, *world);
    if (generation == 0 && !opts.no_ssh_check && !opts.dry_run) {
      std::string first_addr = SshPreflight(opts, *world, self);
      if (opts.master_addr.empty() && IsLocalName(master) && !first_addr.empty()) master = first_addr;
    }
    std::string cwd = std::filesystem::current_path().string();
    if (runner == "ssh") {
      for (size_t k = 0; k < world->nodes.size(); ++k) {
        std::vector<std::string> agent = AgentArgv(opts, *world, static_cast<int>(k), master, generation, self);
        agent.insert(agent.begin() + 1, "--env_from_stdin");
        ChildSpec spec;
        spec.name = Format("node {} ({})", k, world->nodes[k].host);
        spec.argv = SshArgv(opts, world->nodes[k].host, RemoteCommand(cwd, agent));
        EnvList preamble = {{"ZERORUN_JOB_TOKEN", token}};
        for (const auto& kv : exports) preamble.push_back(kv);
        spec.stdin_data = EncodeEnvPreamble(preamble);
        spec.keep_stdin_open = true;
        if (opts.dry_run) {
          PrintDry(Format("node {} ({}) via ssh, stdin carries ZERORUN_JOB_TOKEN and {} exported variable(s)", k,
                          world->nodes[k].host, exports.size()),
                   {}, spec.argv);
        }
        specs.push_back(std::move(spec));
      }
    } else {
      std::vector<std::string> agent = AgentArgv(opts, *world, -1, master, generation, self);
      std::vector<std::string> remote = {"env"};
      for (const auto& [k, v] : exports) remote.push_back(k + "=" + v);
      remote.insert(remote.end(), agent.begin(), agent.end());
      ChildSpec spec;
      spec.name = "pdsh";
      spec.failure_marker = "ssh exited with exit code ";
      spec.argv = PdshArgv(opts, *world, RemoteCommand(cwd, remote));
      spec.env_set = {{"PDSH_RCMD_TYPE", "ssh"}, {"LC_ZERORUN_JOB_TOKEN", token}};
      std::string append = Getenv("PDSH_SSH_ARGS_APPEND");
      append += " -o SendEnv=LC_ZERORUN_JOB_TOKEN -o BatchMode=yes";
      if (opts.ssh_port > 0) append += Format(" -p {}", opts.ssh_port);
      spec.env_set.emplace_back("PDSH_SSH_ARGS_APPEND", Trim(append));
      if (opts.dry_run) PrintDry("all nodes via pdsh", spec.env_set, spec.argv);
      specs.push_back(std::move(spec));
    }
  } else if (runner == "slurm") {
    ChildSpec spec;
    spec.name = "srun";
    spec.failure_marker = ": Exited with exit code ";  // srun's report of the first failed task
    spec.argv = SrunArgv(opts, world, self, generation);
    spec.env_set = exports;
    spec.env_set.emplace_back("ZERORUN_JOB_TOKEN", token);
    if (opts.dry_run) PrintDry("all nodes via srun", spec.env_set, spec.argv);
    specs.push_back(std::move(spec));
  } else if (runner == "openmpi") {
    std::string hostfile;
    if (world->nodes.size() > 1 || !IsLocalName(world->nodes[0].host)) {
      hostfile = Format("/tmp/zerorun-{}-mpi-hostfile", getpid());
      std::ofstream out(hostfile);
      for (const Node& n : world->nodes) out << n.host << " slots=" << n.slots.size() << "\n";
      if (!out) ZR_THROW(IoError, "cannot write {}", hostfile);
    }
    ChildSpec spec;
    spec.name = "mpirun";
    spec.argv = MpirunArgv(opts, *world, self, generation, exports, hostfile);
    spec.env_set = exports;
    spec.env_set.emplace_back("ZERORUN_JOB_TOKEN", token);
    if (opts.dry_run) PrintDry("all nodes via mpirun", spec.env_set, spec.argv);
    specs.push_back(std::move(spec));
  }
  if (opts.dry_run) return 0;
  JobOutcome out = RunChildren(specs, so);
  if (out.failed_child >= 0) {
    // The agent's own report (which rank, which code, its last lines) came through its output.
    const ChildResult& r = out.children[static_cast<size_t>(out.failed_child)];
    std::string status = out.marker_exit_code > 0 ? Format("exit code {}", out.marker_exit_code) : DescribeStatus(r);
    std::fprintf(stderr, "zerorun: %s ended with %s; the job was stopped on every node\n",
                 specs[static_cast<size_t>(out.failed_child)].name.c_str(), status.c_str());
    // Repeat the failed rank's report (sent by the agent or step process) so it is the last thing shown.
    std::vector<std::string> tail(r.tail.begin(), r.tail.end());
    for (size_t i = tail.size(); i-- > 0;) {
      if (tail[i].find("zerorun: job failed:") == std::string::npos) continue;
      for (size_t j = i; j < tail.size(); ++j) {
        bool part = j == i || tail[j].find("zerorun: last ") != std::string::npos || tail[j].find("  | ") != std::string::npos;
        if (part) std::fprintf(stderr, "%s\n", tail[j].c_str());
      }
      break;
    }
    if (r.exit_code == 255 && (runner == "ssh" || runner == "pdsh")) {
      std::fprintf(stderr, "zerorun: exit code 255 is ssh's own failure (connection lost or refused); last lines:\n");
      for (const std::string& l : r.tail) std::fprintf(stderr, "  | %s\n", l.c_str());
    }
  } else {
    PrintReport(out);
  }
  return out.exit_code;
}

// --from_env: one rank placed by srun or mpirun.
int RunStep(const LaunchOptions& opts) {
  EnvList env = CurrentEnviron();
  StepPlace p = opts.from_env == "slurm" ? PlaceFromSlurm(env) : PlaceFromOpenmpi(env);
  std::string master = !opts.master_addr.empty() ? opts.master_addr : (!p.first_host.empty() ? p.first_host : "127.0.0.1");
  std::string token = Getenv("ZERORUN_JOB_TOKEN");
  if (token.empty()) {
    ZR_WARN("ZERORUN_JOB_TOKEN is not set: started by {} directly? Export the same token on every node first "
            "(see docs/launcher.md); ranks run without one", opts.from_env);
  }
  ChildSpec spec;
  spec.name = Format("rank {} on {}", p.rank, Hostname());
  spec.argv = RankArgv(opts, p.local_rank);
  spec.env_set = {
      {"RANK", std::to_string(p.rank)},          {"LOCAL_RANK", std::to_string(p.local_rank)},
      {"WORLD_SIZE", std::to_string(p.world_size)}, {"LOCAL_SIZE", std::to_string(p.local_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(p.local_size)}, {"CROSS_RANK", std::to_string(p.node_rank)},
      {"CROSS_SIZE", std::to_string(p.num_nodes)}, {"MASTER_ADDR", master},
      {"MASTER_PORT", std::to_string(opts.master_port)}, {"ZERORUN_RESTART", std::to_string(opts.restart_generation)},
  };
  if (!opts.bind_cores_to_rank && opts.bind_core_list.empty()) {
  } else {
    std::vector<CoreBinding> plan = PlanBinding(opts.bind_core_list, p.local_size);
    const CoreBinding& b = plan[static_cast<size_t>(p.local_rank)];
    spec.cpus = b.cpus;
    EnvSet(&spec.env_set, "OMP_NUM_THREADS", std::to_string(b.threads));
    ZR_INFO("binding rank {} to CPUs {} (OMP_NUM_THREADS={})", p.rank, FormatRangeList(b.cpus), b.threads);
  }
  spec.line_prefix = Format("[rank {}] ", p.rank);
  PrepareLogDir(opts.each_rank_log_dir);
  if (!opts.each_rank_log_dir.empty()) spec.log_path = Format("{}/rank{}.log", opts.each_rank_log_dir, p.rank);
  if (opts.dry_run) {
    PrintDry(spec.name, spec.env_set, spec.argv);
    return 0;
  }
  comm::CheckOpenFileLimit(p.world_size, p.rank == 0, Format("rank {}", p.rank));
  SupervisorOptions so;
  so.kill_grace_s = opts.kill_grace_s;
  so.tail_lines = opts.tail_lines;
  JobOutcome out = RunChildren({spec}, so);
  PrintReport(out);
  return out.exit_code;
}

}  // namespace

namespace {
pid_t g_startup_parent = getppid();  // before main: the parent that exec'd us
}  // namespace

pid_t StartupParent() { return g_startup_parent; }

std::string SelfExecutable() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("zerorun") : p.string();
}

int Launch(const LaunchOptions& in) {
  LaunchOptions opts = in;
  // Inside an srun step or an mpirun job with several tasks, and nothing else asked for: be one rank.
  if (opts.from_env.empty() && opts.launcher.empty() && opts.node_rank < 0 && !opts.hostfile_given) {
    // (A batch script has SLURM_NTASKS and SLURM_PROCID but no SLURM_STEP_ID: it stays a driver.)
    std::string step_tasks = Getenv("SLURM_STEP_NUM_TASKS").empty() ? Getenv("SLURM_NTASKS") : Getenv("SLURM_STEP_NUM_TASKS");
    if (!Getenv("SLURM_STEP_ID").empty() && !Getenv("SLURM_PROCID").empty() && std::atoi(step_tasks.c_str()) > 1) {
      opts.from_env = "slurm";
    } else if (std::atoi(Getenv("OMPI_COMM_WORLD_SIZE").c_str()) > 1) {
      opts.from_env = "openmpi";
    }
  }
  if (!opts.from_env.empty()) return RunStep(opts);
  // pdsh agents receive the token as LC_ZERORUN_JOB_TOKEN (sshd's usual AcceptEnv LC_*).
  if (std::string lc = Getenv("LC_ZERORUN_JOB_TOKEN"); !lc.empty()) {
    setenv("ZERORUN_JOB_TOKEN", lc.c_str(), 1);
    unsetenv("LC_ZERORUN_JOB_TOKEN");
  }

  bool no_hostfile = !opts.hostfile_given && !DetectHostFacts().default_hostfile_exists;
  bool batch = opts.launcher == "slurm" || opts.launcher == "openmpi";
  World world;
  if (!(batch && no_hostfile && opts.launcher == "slurm")) world = ResolveWorld(opts, DetectHostFacts());

  if (opts.node_rank >= 0) {  // node mode: this node's ranks, here
    // Stop when the ssh session (or shell) that started us goes away. It may already be gone (a fast
    // failure elsewhere stopped the job while we were starting): then start nothing.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    bool orphaned = getppid() != StartupParent() || (StartupParent() == 1 && !opts.world_info.empty());
    if (orphaned) {
      ZR_WARN("the process that started this node's launcher is gone; not starting node {}", opts.node_rank);
      return 128 + SIGTERM;
    }
    if (opts.env_from_stdin) {
      ReadEnvPreamble();
      pollfd p{0, POLLIN, 0};  // stopped already (another node failed while we were connecting)?
      char c;
      if (poll(&p, 1, 0) == 1 && read(0, &c, 1) == 0) {
        ZR_WARN("the launcher stopped the job before node {} started; not starting it", opts.node_rank);
        return 128 + SIGTERM;
      }
    }
    if (opts.node_rank >= static_cast<int>(world.nodes.size())) {
      ZR_THROW(InvalidArgument, "--node_rank {} is out of range: the job has {} node(s)", opts.node_rank, world.nodes.size());
    }
    if (opts.max_restarts > 0) ZR_WARN("--max_restarts is ignored with --node_rank (restart every node together)");
    std::string token = Getenv("ZERORUN_JOB_TOKEN");
    if (token.empty()) {
      if (world.nodes.size() > 1) {
        ZR_THROW(InvalidArgument, "--node_rank {} of a {}-node job: every node needs the same ZERORUN_JOB_TOKEN. "
                                  "Create one (e.g. export ZERORUN_JOB_TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \\n')) "
                                  "and export it on every node before starting zerorun",
                 opts.node_rank, world.nodes.size());
      }
      token = NewJobToken();
    }
    JobContext job{DefaultMasterAddr(opts, world), opts.master_port, token, opts.restart_generation};
    JobOutcome out = RunNodeHere(opts, world, opts.node_rank, job, opts.env_from_stdin ? 0 : -1);
    PrintReport(out);
    return out.exit_code;
  }

  std::string runner = opts.launcher;
  if (runner.empty()) {
    bool remote = world.nodes.size() > 1 || !IsLocalName(world.nodes[0].host);
    runner = remote ? "ssh" : "local";
  }
  if (runner == "local") {
    if (!opts.master_port_given) {
      // One node and no --master_port: a free port (torchrun --standalone), so two jobs never meet
      // on 29500. Restarts keep it.
      opts.master_port = PickFreePort();
      ZR_INFO("rendezvous on free port {} (no --master_port given)", opts.master_port);
    } else if (int err = 0; !opts.dry_run && !PortFree(opts.master_port, &err)) {
      ZR_THROW(InvalidArgument, "--master_port {}: {}; {}: choose another port, or leave --master_port out to get a "
               "free one", opts.master_port, ErrnoMessage("rank 0 could not host the rendezvous store", err),
               err == EADDRINUSE ? "another job or program listens there"
               : err == EACCES   ? "ports below 1024 need privileges"
                                 : "this machine refuses it");
    }
  }
  std::string pid_file;
  if (opts.save_pid && !opts.dry_run) {
    pid_file = Format("/tmp/{}.zerorun", getpid());
    std::ofstream(pid_file) << getpid() << "\n";
  }
  int code = 0;
  for (int generation = 0; generation <= opts.max_restarts; ++generation) {
    code = RunGeneration(opts, runner, world.nodes.empty() ? nullptr : &world, generation, NewJobToken());
    if (code == 0 || opts.dry_run || PendingStopSignal() != 0) break;
    if (generation < opts.max_restarts) {
      ZR_WARN("job failed with exit code {}; restarting it (restart {} of {}, ZERORUN_RESTART={})", code,
              generation + 1, opts.max_restarts, generation + 1);
    } else if (opts.max_restarts > 0) {
      ZR_ERROR("job failed with exit code {} after {} restart(s); giving up", code, opts.max_restarts);
    }
  }
  if (!pid_file.empty()) unlink(pid_file.c_str());
  return code;
}

}  // namespace zerorun::launcher

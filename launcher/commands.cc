// Command lines of the runners (ssh, pdsh, srun, mpirun), the agents' stdin preamble, and rank
// placement from Slurm/OpenMPI variables. Pure functions of their inputs, unit-tested.
#include "zerorun/launcher/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "zerorun/core/error.h"

namespace zerorun::launcher {
namespace {

int ParseIntVar(const EnvList& env, const char* name, bool required, int fallback) {
  const std::string* v = EnvGet(env, name);
  if (v == nullptr || v->empty()) {
    if (required) ZR_THROW(InvalidArgument, "{} is not set (needed to place this rank)", name);
    return fallback;
  }
  char* end = nullptr;
  long n = std::strtol(v->c_str(), &end, 10);
  if (*end != '\0' && *end != '(') ZR_THROW(InvalidArgument, "{}='{}' is not an integer", name, *v);
  return static_cast<int>(n);
}

// Flags an agent or step process inherits from the driver.
void AppendRankFlags(const LaunchOptions& opts, std::vector<std::string>* argv) {
  if (opts.no_local_rank) argv->push_back("--no_local_rank");
  if (opts.bind_cores_to_rank) argv->push_back("--bind_cores_to_rank");
  if (!opts.bind_core_list.empty()) argv->insert(argv->end(), {"--bind_core_list", opts.bind_core_list});
  if (!opts.each_rank_log_dir.empty()) {
    argv->insert(argv->end(), {"--enable_each_rank_log", std::filesystem::absolute(opts.each_rank_log_dir).string()});
  }
  argv->insert(argv->end(), {"--kill_grace", Format("{}", opts.kill_grace_s), "--tail_lines", std::to_string(opts.tail_lines)});
}

void AppendProgram(const LaunchOptions& opts, std::vector<std::string>* argv) {
  argv->push_back("--");
  argv->push_back(opts.program);
  argv->insert(argv->end(), opts.program_args.begin(), opts.program_args.end());
}

}  // namespace

std::vector<std::string> AgentArgv(const LaunchOptions& opts, const World& world, int node_rank,
                                   const std::string& master_addr, int generation, const std::string& self) {
  std::vector<std::string> argv = {self, "--node_rank", node_rank >= 0 ? std::to_string(node_rank) : "%n",
                                   "--world_info", EncodeWorldInfo(world), "--master_addr", master_addr,
                                   "--master_port", std::to_string(opts.master_port), "--restart_generation",
                                   std::to_string(generation)};
  AppendRankFlags(opts, &argv);
  AppendProgram(opts, &argv);
  return argv;
}

std::vector<std::string> SshArgv(const LaunchOptions& opts, const std::string& host, const std::string& remote_command) {
  std::vector<std::string> argv = {"ssh", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"};
  if (opts.ssh_port > 0) argv.insert(argv.end(), {"-p", std::to_string(opts.ssh_port)});
  for (const std::string& a : ShellSplit(opts.launcher_args)) argv.push_back(a);
  argv.push_back(host);
  argv.push_back(remote_command);
  return argv;
}

std::string RemoteCommand(const std::string& cwd, const std::vector<std::string>& agent_argv) {
  return "cd " + ShellQuote(cwd) + " && exec " + ShellJoin(agent_argv);
}

std::vector<std::string> PdshArgv(const LaunchOptions& opts, const World& world, const std::string& remote_command) {
  std::string hosts;
  for (const Node& n : world.nodes) hosts += (hosts.empty() ? "" : ",") + n.host;
  std::vector<std::string> argv = {"pdsh", "-S", "-f", "1024", "-w", hosts};
  for (const std::string& a : ShellSplit(opts.launcher_args)) argv.push_back(a);
  argv.push_back(remote_command);
  return argv;
}

std::vector<std::string> SrunArgv(const LaunchOptions& opts, const World* world, const std::string& self, int generation) {
  std::vector<std::string> argv = {"srun"};
  if (world != nullptr && opts.hostfile_given) {
    std::string hosts;
    size_t per = world->nodes[0].slots.size();
    for (const Node& n : world->nodes) {
      hosts += (hosts.empty() ? "" : ",") + n.host;
      if (n.slots.size() != per) {
        ZR_THROW(InvalidArgument, "--launcher slurm needs the same number of slots on every host ({} has {}, {} has {})",
                 world->nodes[0].host, per, n.host, n.slots.size());
      }
    }
    argv.insert(argv.end(), {"-n", std::to_string(world->world_size), "--nodes", std::to_string(world->nodes.size()),
                             "--ntasks-per-node", std::to_string(per), "--nodelist", hosts});
  } else {
    int nodes = std::max(1, opts.num_nodes);
    int per = opts.num_procs > 0 ? opts.num_procs : (opts.num_gpus > 0 ? opts.num_gpus : 1);
    argv.insert(argv.end(), {"-n", std::to_string(nodes * per), "--nodes", std::to_string(nodes),
                             "--ntasks-per-node", std::to_string(per)});
  }
  argv.push_back("--kill-on-bad-exit=1");
  for (const std::string& a : ShellSplit(opts.launcher_args)) argv.push_back(a);
  argv.push_back("--export=ALL");
  argv.insert(argv.end(), {self, "--from_env", "slurm", "--master_port", std::to_string(opts.master_port),
                           "--restart_generation", std::to_string(generation)});
  if (!opts.master_addr.empty()) argv.insert(argv.end(), {"--master_addr", opts.master_addr});
  AppendRankFlags(opts, &argv);
  AppendProgram(opts, &argv);
  return argv;
}

std::vector<std::string> MpirunArgv(const LaunchOptions& opts, const World& world, const std::string& self,
                                    int generation, const EnvList& exports, const std::string& hostfile_path) {
  std::vector<std::string> argv = {"mpirun", "-n", std::to_string(world.world_size)};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  if (!hostfile_path.empty()) {
    argv.insert(argv.end(), {"-hostfile", hostfile_path});
  } else {
    argv.push_back("--oversubscribe");
  }
  for (const std::string& a : ShellSplit(opts.launcher_args)) argv.push_back(a);
  // Values travel through mpirun's environment: "-x NAME" exports NAME's current value.
  argv.insert(argv.end(), {"-x", "ZERORUN_JOB_TOKEN"});
  for (const auto& kv : exports) argv.insert(argv.end(), {"-x", kv.first});
  argv.insert(argv.end(), {self, "--from_env", "openmpi", "--master_addr", DefaultMasterAddr(opts, world),
                           "--master_port", std::to_string(opts.master_port), "--restart_generation",
                           std::to_string(generation)});
  AppendRankFlags(opts, &argv);
  AppendProgram(opts, &argv);
  return argv;
}

std::string EncodeEnvPreamble(const EnvList& env) {
  std::string out;
  for (const auto& [k, v] : env) {
    out += k + "=";
    for (char c : v) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += '\n';
  }
  return out + "\n";
}

EnvList DecodeEnvPreamble(const std::string& text) {
  EnvList out;
  for (const std::string& line : Split(text, '\n')) {
    if (line.empty()) continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) ZR_THROW(InvalidArgument, "bad environment line from the launcher: '{}'", line);
    std::string value;
    for (size_t i = eq + 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        value += line[i + 1] == 'n' ? '\n' : line[i + 1];
        ++i;
      } else {
        value += line[i];
      }
    }
    EnvSet(&out, line.substr(0, eq), value);
  }
  return out;
}

std::vector<int> ExpandTaskCounts(const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : Split(text, ',')) {
    if (Trim(item).empty()) continue;
    int count = std::atoi(item.c_str());
    int repeat = 1;
    if (size_t x = item.find("(x"); x != std::string::npos) repeat = std::atoi(item.c_str() + x + 2);
    for (int i = 0; i < repeat; ++i) out.push_back(count);
  }
  return out;
}

std::vector<std::string> ExpandHostlist(const std::string& text) {
  std::vector<std::string> terms;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      terms.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) terms.push_back(cur);
  std::vector<std::string> out;
  for (const std::string& term : terms) {
    size_t open = term.find('[');
    size_t close = term.find(']', open);
    if (open == std::string::npos || close == std::string::npos) {
      out.push_back(term);
      continue;
    }
    std::string prefix = term.substr(0, open);
    for (const std::string& rest : ExpandHostlist(term.substr(close + 1)).empty() ? std::vector<std::string>{""}
                                                                                   : ExpandHostlist(term.substr(close + 1))) {
      for (const std::string& range : Split(term.substr(open + 1, close - open - 1), ',')) {
        size_t dash = range.find('-');
        std::string lo = range.substr(0, dash);
        std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
        for (long v = std::atol(lo.c_str()); v <= std::atol(hi.c_str()); ++v) {
          std::string num = std::to_string(v);
          if (num.size() < lo.size()) num = std::string(lo.size() - num.size(), '0') + num;
          out.push_back(prefix + num + rest);
        }
      }
    }
  }
  return out;
}

StepPlace PlaceFromSlurm(const EnvList& env) {
  StepPlace p;
  p.rank = ParseIntVar(env, "SLURM_PROCID", true, 0);
  // The step's size (an srun inside a larger allocation may use fewer tasks than SLURM_NTASKS says).
  const char* size_var = EnvGet(env, "SLURM_STEP_NUM_TASKS") != nullptr ? "SLURM_STEP_NUM_TASKS"
                         : EnvGet(env, "SLURM_NTASKS") != nullptr       ? "SLURM_NTASKS"
                                                                        : "SLURM_NPROCS";
  p.world_size = ParseIntVar(env, size_var, true, 1);
  p.local_rank = ParseIntVar(env, "SLURM_LOCALID", true, 0);
  p.node_rank = ParseIntVar(env, "SLURM_NODEID", true, 0);
  p.num_nodes = ParseIntVar(env, "SLURM_STEP_NUM_NODES", false, ParseIntVar(env, "SLURM_NNODES", false, 1));
  const std::string* per_node = EnvGet(env, "SLURM_STEP_TASKS_PER_NODE");
  if (per_node == nullptr) per_node = EnvGet(env, "SLURM_TASKS_PER_NODE");
  p.local_size = 1;
  if (per_node != nullptr) {
    std::vector<int> counts = ExpandTaskCounts(*per_node);
    if (p.node_rank < static_cast<int>(counts.size())) p.local_size = counts[static_cast<size_t>(p.node_rank)];
  }
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (const std::string* list = EnvGet(env, name); list != nullptr && !list->empty()) {
      std::vector<std::string> hosts = ExpandHostlist(*list);
      if (!hosts.empty()) p.first_host = hosts[0];
      break;
    }
  }
  return p;
}

StepPlace PlaceFromOpenmpi(const EnvList& env) {
  StepPlace p;
  p.rank = ParseIntVar(env, "OMPI_COMM_WORLD_RANK", true, 0);
  p.world_size = ParseIntVar(env, "OMPI_COMM_WORLD_SIZE", true, 1);
  p.local_rank = ParseIntVar(env, "OMPI_COMM_WORLD_LOCAL_RANK", true, 0);
  p.local_size = ParseIntVar(env, "OMPI_COMM_WORLD_LOCAL_SIZE", true, 1);
  // mpirun's default by-slot mapping fills node after node, so with equal counts per node:
  p.node_rank = p.rank / std::max(1, p.local_size);
  p.num_nodes = (p.world_size + p.local_size - 1) / std::max(1, p.local_size);
  return p;
}

}  // namespace zerorun::launcher

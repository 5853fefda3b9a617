// Command lines of the runners and the small protocols between zerorun processes: the per-node
// agent command (ssh, pdsh), srun and mpirun command lines, the agents' stdin preamble (job token
// and exported variables), and rank placement from the variables srun and mpirun set.
#pragma once

#include <string>
#include <vector>

#include "zerorun/launcher/options.h"
#include "zerorun/launcher/text.h"
#include "zerorun/launcher/world.h"

namespace zerorun::launcher {

// The per-node agent command line (argv of `zerorun` on node `node_rank`).
std::vector<std::string> AgentArgv(const LaunchOptions& opts, const World& world, int node_rank,
                                   const std::string& master_addr, int generation, const std::string& self);
// ssh argv that runs the agent of `node_rank` ("cd CWD && exec AGENT...").
std::vector<std::string> SshArgv(const LaunchOptions& opts, const std::string& host, const std::string& remote_command);
// The remote shell command for an agent: cd to `cwd`, then exec the quoted argv.
std::string RemoteCommand(const std::string& cwd, const std::vector<std::string>& agent_argv);
// pdsh argv for all nodes (the agent command with --node_rank %n).
std::vector<std::string> PdshArgv(const LaunchOptions& opts, const World& world, const std::string& remote_command);
// srun / mpirun argv running `zerorun --from_env ...` once per rank.
std::vector<std::string> SrunArgv(const LaunchOptions& opts, const World* world, const std::string& self, int generation);
std::vector<std::string> MpirunArgv(const LaunchOptions& opts, const World& world, const std::string& self,
                                    int generation, const EnvList& exports, const std::string& hostfile_path);

// The stdin preamble an agent reads (--env_from_stdin): "KEY=VALUE\n" lines (value escaped: \\ and
// \n), ended by a blank line. Carries the job token and the exported variables.
std::string EncodeEnvPreamble(const EnvList& env);
EnvList DecodeEnvPreamble(const std::string& text);

// Rank placement inside an srun step or mpirun job, from the variables they set. Throws
// InvalidArgument naming the missing variable.
struct StepPlace {
  int rank = 0, world_size = 1, local_rank = 0, local_size = 1, node_rank = 0, num_nodes = 1;
  std::string first_host;  // "" when unknown
};
StepPlace PlaceFromSlurm(const EnvList& env);
StepPlace PlaceFromOpenmpi(const EnvList& env);
// Slurm hostlist expansion: "n[01-03,7],m" -> {n01,n02,n03,n7,m}.
std::vector<std::string> ExpandHostlist(const std::string& text);
// Slurm task-count lists: "2(x3),1" -> {2,2,2,1}.
std::vector<int> ExpandTaskCounts(const std::string& text);

}  // namespace zerorun::launcher

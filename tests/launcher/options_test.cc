// CLI parsing, world resolution and the per-rank environment contract (pure functions).
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "zerorun/core/error.h"
#include "zerorun/launcher/binding.h"
#include "zerorun/launcher/commands.h"
#include "zerorun/launcher/options.h"
#include "zerorun/launcher/text.h"
#include "zerorun/launcher/world.h"

using namespace zerorun::launcher;
using zerorun::InvalidArgument;

namespace {
std::string TempHostfile(const std::string& text) {
  std::string path = "/tmp/zr_launcher_hf_" + std::to_string(getpid());
  std::ofstream(path) << text;
  return path;
}
std::string Env(const EnvList& env, const std::string& key) {
  const std::string* v = EnvGet(env, key);
  return v ? *v : "<unset>";
}
}  // namespace

TEST_SUITE("unit") {
TEST_CASE("options: DeepSpeed spellings, dashes, = forms; PROGRAM args verbatim") {
  LaunchOptions o = ParseArgs({"-H", "hf", "--num-gpus=2", "--master_port", "1234", "--no-local-rank",
                               "--launcher=SSH", "--max_restarts", "3", "prog", "--num_gpus", "7", "-H", "x y", "'q'"});
  CHECK(o.hostfile == "hf");
  CHECK(o.hostfile_given);
  CHECK(o.num_gpus == 2);
  CHECK(o.master_port == 1234);
  CHECK(o.no_local_rank);
  CHECK(o.launcher == "ssh");
  CHECK(o.max_restarts == 3);
  CHECK(o.program == "prog");
  CHECK(o.program_args == std::vector<std::string>{"--num_gpus", "7", "-H", "x y", "'q'"});
  LaunchOptions d = ParseArgs({"-i", "w0:1", "--", "-prog-with-dash", "a"});
  CHECK(d.include == "w0:1");
  CHECK(d.program == "-prog-with-dash");
  CHECK(ParseArgs({"-Hfile", "p"}).hostfile == "file");
  CHECK(ParseArgs({"--help"}).help);
  CHECK(HelpText().find("--num_procs") != std::string::npos);
}

TEST_CASE("options: errors name the option") {
  CHECK_THROWS_WITH_AS(ParseArgs({"--bogus", "p"}), doctest::Contains("unknown option '--bogus'"), InvalidArgument);
  CHECK_THROWS_WITH_AS(ParseArgs({"--num_gpus", "two", "p"}), doctest::Contains("--num_gpus: 'two'"), InvalidArgument);
  CHECK_THROWS_WITH_AS(ParseArgs({"--num_gpus"}), doctest::Contains("needs a value"), InvalidArgument);
  CHECK_THROWS_WITH_AS(ParseArgs({"--num_procs", "2"}), doctest::Contains("no PROGRAM"), InvalidArgument);
  CHECK_THROWS_WITH_AS(ParseArgs({"--launcher", "mvapich", "p"}), doctest::Contains("mvapich"), InvalidArgument);
  CHECK_THROWS_AS(ParseArgs({"--master_port", "70000", "p"}), InvalidArgument);
  CHECK_THROWS_AS(ParseArgs({"--dry_run=1", "p"}), InvalidArgument);
}

TEST_CASE("options: counts, ports and durations are bounded and name the option (issue 13 item 4)") {
  auto error = [](std::vector<std::string> args) -> std::string {
    args.push_back("prog");
    try {
      ParseArgs(args);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  // once accepted silently (running one rank)
  CHECK(error({"--num_procs", "0"}) == "--num_procs 0: ranks per node must be in [1, 1024]");
  CHECK(error({"--num_procs", "-7"}) == "--num_procs -7: ranks per node must be in [1, 1024]");
  CHECK(error({"--num_gpus", "-3"}) == "--num_gpus -3: GPUs per node must be in [1, 1024]");
  CHECK(error({"--num-gpus=0"}).find("--num_gpus 0:") == 0);
  CHECK(error({"--num_procs", "99999999999"}).find("must be in [1, 1024]") != std::string::npos);
  CHECK(error({"--num_nodes", "0"}).find("--num_nodes 0:") == 0);
  CHECK(error({"--node_rank", "-3"}).find("--node_rank -3:") == 0);
  CHECK(error({"--master_port", "0"}) == "--master_port 0: a TCP port must be in [1, 65535]");
  CHECK(error({"--master_port", "65536"}).find("[1, 65535]") != std::string::npos);
  CHECK(error({"--ssh_port", "-22"}).find("--ssh_port -22:") == 0);
  CHECK(error({"--max_restarts", "-1"}).find("--max_restarts -1:") == 0);
  CHECK(error({"--tail_lines", "-5"}).find("--tail_lines -5:") == 0);
  CHECK(error({"--restart_generation", "-1"}).find("--restart_generation -1:") == 0);
  for (const char* g : {"inf", "nan", "-1", "1e9", "x"}) {
    INFO(g);
    CHECK(error({"--kill_grace", g}).find("--kill_grace: '") == 0);
  }
  CHECK(error({"--num_procs", "1024"}).empty());
  CHECK(error({"--kill_grace", "0.5"}).empty());
  LaunchOptions o = ParseArgs({"p"});
  CHECK_FALSE(o.master_port_given);  // a one-node job then picks a free port
  CHECK(ParseArgs({"--master_port", "29500", "p"}).master_port_given);
}

TEST_CASE("world: counts with include/exclude are refused (case 57)") {
  HostFacts none;
  for (auto args : std::vector<std::vector<std::string>>{{"--num_nodes", "1", "-i", "localhost", "foo"},
                                                         {"--num_nodes", "1", "-e", "localhost", "foo"},
                                                         {"--num_gpus", "1", "-i", "localhost", "foo"},
                                                         {"--num_gpus", "1", "-e", "localhost", "foo"},
                                                         {"--num_nodes", "1", "--num_gpus", "1", "-i", "localhost", "foo"},
                                                         {"--num_nodes", "1", "--num_gpus", "1", "-e", "localhost", "foo"}}) {
    CHECK_THROWS_WITH_AS(ResolveWorld(ParseArgs(args), none), doctest::Contains("cannot combine"), InvalidArgument);
  }
  CHECK_THROWS_WITH_AS(ResolveWorld(ParseArgs({"--num_nodes", "2", "p"}), none), doctest::Contains("needs a hostfile"),
                       InvalidArgument);
}

TEST_CASE("world: local defaults from GPUs and CUDA_VISIBLE_DEVICES") {
  HostFacts none;
  World w = ResolveWorld(ParseArgs({"p"}), none);
  CHECK(w.world_size == 1);
  CHECK_FALSE(w.gpu_slots);
  HostFacts gpus;
  gpus.gpu_count = 3;
  CHECK(ResolveWorld(ParseArgs({"p"}), gpus).world_size == 3);
  CHECK(ResolveWorld(ParseArgs({"p"}), gpus).gpu_slots);
  HostFacts cvd;
  cvd.cuda_visible_set = true;
  cvd.cuda_visible_devices = "2,5";
  World c = ResolveWorld(ParseArgs({"p"}), cvd);
  CHECK(c.nodes[0].slots == std::vector<int>{2, 5});
  CHECK(ResolveWorld(ParseArgs({"-i", "localhost:5", "p"}), cvd).nodes[0].slots == std::vector<int>{5});
  CHECK(ResolveWorld(ParseArgs({"--num_procs", "4", "p"}), cvd).world_size == 4);
  CHECK_FALSE(ResolveWorld(ParseArgs({"--num_procs", "4", "p"}), cvd).gpu_slots);
  cvd.cuda_visible_devices = "GPU-abc";
  CHECK_THROWS_WITH_AS(ResolveWorld(ParseArgs({"p"}), cvd), doctest::Contains("CUDA_VISIBLE_DEVICES"), InvalidArgument);
}

TEST_CASE("world and env: heterogeneous slots give LOCAL_RANK = index on the node") {
  std::string hf = TempHostfile("a slots=3\nb slots=1\nc slots=2\n");
  World w = ResolveWorld(ParseArgs({"-H", hf, "p"}), HostFacts{});
  std::remove(hf.c_str());
  REQUIRE(w.nodes.size() == 3);
  CHECK(w.world_size == 6);
  JobContext job{"a", 29500, "tok", 2};
  // node c: ranks 4 and 5. DeepSpeed would give LOCAL_RANK = RANK % LOCAL_SIZE = 0, 1 here by luck;
  // node b (rank 3, LOCAL_SIZE 1) and node a check the index explicitly.
  EnvList e = RankEnv(w, 2, 1, job);
  CHECK(Env(e, "RANK") == "5");
  CHECK(Env(e, "LOCAL_RANK") == "1");
  CHECK(Env(e, "LOCAL_SIZE") == "2");
  CHECK(Env(e, "LOCAL_WORLD_SIZE") == "2");
  CHECK(Env(e, "WORLD_SIZE") == "6");
  CHECK(Env(e, "CROSS_RANK") == "2");
  CHECK(Env(e, "CROSS_SIZE") == "3");
  CHECK(Env(e, "MASTER_ADDR") == "a");
  CHECK(Env(e, "MASTER_PORT") == "29500");
  CHECK(Env(e, "ZERORUN_JOB_TOKEN") == "tok");
  CHECK(Env(e, "ZERORUN_RESTART") == "2");
  CHECK(Env(e, "CUDA_VISIBLE_DEVICES") == "0,1");
  EnvList b = RankEnv(w, 1, 0, job);
  CHECK(Env(b, "RANK") == "3");
  CHECK(Env(b, "LOCAL_RANK") == "0");  // DeepSpeed: 3 % 1 = 0 too; node a rank 2: 2 % 3 = 2 = index
  // a layout where the modulo rule is wrong: slots 1 then 2 -> rank 2 is index 1 on node 1, 2 % 2 = 0
  std::string hf2 = TempHostfile("x slots=1\ny slots=2\n");
  World w2 = ResolveWorld(ParseArgs({"-H", hf2, "p"}), HostFacts{});
  std::remove(hf2.c_str());
  EnvList y1 = RankEnv(w2, 1, 1, job);
  CHECK(Env(y1, "RANK") == "2");
  CHECK(Env(y1, "LOCAL_RANK") == "1");
}

TEST_CASE("world: hostfile with num_nodes/num_gpus/num_procs and include") {
  std::string hf = TempHostfile("a slots=4\nb slots=4\n");
  CHECK(ResolveWorld(ParseArgs({"-H", hf, "--num_nodes", "1", "p"}), {}).nodes.size() == 1);
  World g = ResolveWorld(ParseArgs({"-H", hf, "--num_gpus", "2", "p"}), {});
  CHECK(g.world_size == 4);
  CHECK(g.gpu_slots);
  World c = ResolveWorld(ParseArgs({"-H", hf, "--num_procs", "3", "p"}), {});
  CHECK(c.world_size == 6);
  CHECK_FALSE(c.gpu_slots);
  CHECK(Env(RankEnv(c, 0, 0, {}), "CUDA_VISIBLE_DEVICES") == "<unset>");
  World i = ResolveWorld(ParseArgs({"-H", hf, "-i", "b:1,3", "p"}), {});
  REQUIRE(i.nodes.size() == 1);
  CHECK(i.nodes[0].host == "b");
  CHECK(Env(RankEnv(i, 0, 1, {}), "CUDA_VISIBLE_DEVICES") == "1,3");
  CHECK(Env(RankEnv(i, 0, 1, {}), "RANK") == "1");
  CHECK_THROWS_WITH_AS(ResolveWorld(ParseArgs({"-H", hf, "--num_nodes", "3", "p"}), {}), doctest::Contains("only 2"),
                       InvalidArgument);
  CHECK(DefaultMasterAddr(ParseArgs({"-H", hf, "p"}), ResolveWorld(ParseArgs({"-H", hf, "p"}), {})) == "a");
  CHECK(DefaultMasterAddr(ParseArgs({"p"}), ResolveWorld(ParseArgs({"p"}), {})) == "127.0.0.1");
  std::remove(hf.c_str());
  CHECK_THROWS_AS(ResolveWorld(ParseArgs({"-H", hf, "p"}), {}), zerorun::IoError);
}

TEST_CASE("world_info round trip") {
  World w;
  w.gpu_slots = true;
  w.nodes = {{"10.0.0.1", {0, 2}, 0}, {"h2", {1}, 2}};
  w.world_size = 3;
  World back = DecodeWorldInfo(EncodeWorldInfo(w));
  CHECK(EncodeWorldInfo(w) == "gpu;10.0.0.1:0,2@h2:1");
  REQUIRE(back.nodes.size() == 2);
  CHECK(back.nodes[1].host == "h2");
  CHECK(back.nodes[1].first_rank == 2);
  CHECK(back.world_size == 3);
  CHECK(back.gpu_slots);
  CHECK_THROWS_AS(DecodeWorldInfo("h:0"), InvalidArgument);
}

TEST_CASE("rank argv: --local_rank first, then ARGS verbatim; --no_local_rank drops it") {
  LaunchOptions o = ParseArgs({"prog", "a b", "--", "c"});
  CHECK(RankArgv(o, 3) == std::vector<std::string>{"prog", "--local_rank=3", "a b", "--", "c"});
  o.no_local_rank = true;
  CHECK(RankArgv(o, 3) == std::vector<std::string>{"prog", "a b", "--", "c"});
}

TEST_CASE("shell quoting round-trips through a POSIX shell split (case 61)") {
  std::vector<std::string> args = {"--prompt", "I am 6' tall", "", "a\"b", "$HOME", "x;y", "tab\there", "plain"};
  CHECK(ShellSplit(ShellJoin(args)) == args);
  CHECK(ShellQuote("plain-1.2:/x") == "plain-1.2:/x");
  CHECK(ShellQuote("64(x2)") == "'64(x2)'");
  CHECK(ShellSplit("-mca btl_tcp_if_include \"eth 1\" 'a b'") ==
        std::vector<std::string>{"-mca", "btl_tcp_if_include", "eth 1", "a b"});
  CHECK_THROWS_AS(ShellSplit("'open"), InvalidArgument);
}

TEST_CASE(".zerorun_env: comments, blanks, quotes; bad lines name file:line") {
  EnvList e = ParseEnvFile("# comment\n\nNCCL_DEBUG=INFO\n export UCX_TLS = tcp \nX=\"a b\"\nNCCL_DEBUG=WARN\n", "f");
  CHECK(e == EnvList{{"NCCL_DEBUG", "WARN"}, {"UCX_TLS", "tcp"}, {"X", "a b"}});
  CHECK_THROWS_WITH_AS(ParseEnvFile("A=1\nnoequals\n", "f"), doctest::Contains("f:2:"), InvalidArgument);
  CHECK_THROWS_WITH_AS(ParseEnvFile("1A=1\n", "f"), doctest::Contains("f:1:"), InvalidArgument);
}

TEST_CASE("remote exports: NCCL_/UCX_/ZERORUN_ prefixes, never the per-job token") {
  EnvList env = {{"NCCL_DEBUG", "INFO"}, {"UCX_TLS", "tcp"}, {"ZERORUN_LOG_LEVEL", "debug"},
                 {"ZERORUN_JOB_TOKEN", "secret"}, {"ZERORUN_RESTART", "3"}, {"HOME", "/root"}, {"NCCLX", "no"}};
  EnvList out = RemoteExports(env, {{"UCX_TLS", "sm"}, {"FOO", "1"}});
  CHECK(out == EnvList{{"NCCL_DEBUG", "INFO"}, {"UCX_TLS", "sm"}, {"ZERORUN_LOG_LEVEL", "debug"}, {"FOO", "1"}});
}

TEST_CASE("env preamble round trip (values with newlines and backslashes)") {
  EnvList env = {{"ZERORUN_JOB_TOKEN", "abc"}, {"X", "a\nb\\c=d"}, {"EMPTY", ""}};
  std::string text = EncodeEnvPreamble(env);
  CHECK(text.substr(text.size() - 2) == "\n\n");
  CHECK(DecodeEnvPreamble(text) == env);
}

TEST_CASE("job token: 64 hex digits, fresh each time") {
  std::string a = NewJobToken();
  std::string b = NewJobToken();
  CHECK(a.size() == 64);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
}

TEST_CASE("command builders: ssh, pdsh, srun, mpirun (case 59)") {
  LaunchOptions o = ParseArgs({"--ssh_port", "2222", "--launcher_args", "-F '/tmp/my cfg'", "prog", "x y"});
  World w;
  w.nodes = {{"h0", {0, 1}, 0}, {"h1", {0, 1}, 2}};
  w.world_size = 4;
  std::vector<std::string> agent = AgentArgv(o, w, 1, "h0", 2, "/opt/zr/bin/zerorun");
  std::string remote = RemoteCommand("/work dir", agent);
  CHECK(remote.find("cd '/work dir' && exec /opt/zr/bin/zerorun --node_rank 1 --world_info 'cpu;h0:0,1@h1:0,1'") == 0);
  CHECK(remote.find("--restart_generation 2") != std::string::npos);
  CHECK(remote.find("-- prog 'x y'") != std::string::npos);
  std::vector<std::string> ssh = SshArgv(o, "h1", remote);
  CHECK(ssh.front() == "ssh");
  CHECK(ssh.back() == remote);
  CHECK(ssh[ssh.size() - 2] == "h1");
  CHECK(std::find(ssh.begin(), ssh.end(), "/tmp/my cfg") != ssh.end());
  CHECK(std::find(ssh.begin(), ssh.end(), "2222") != ssh.end());
  // The shell on the remote side sees exactly the agent's argv.
  std::vector<std::string> split = ShellSplit(remote.substr(remote.find("exec ") + 5));
  CHECK(split == agent);
  CHECK(PdshArgv(o, w, remote).front() == "pdsh");
  CHECK(SrunArgv(o, &w, "/zr", 0).front() == "srun");
  std::vector<std::string> mpi = MpirunArgv(o, w, "/zr", 0, {{"NCCL_DEBUG", "INFO"}}, "/tmp/hf");
  CHECK(mpi.front() == "mpirun");
  std::string joined = ShellJoin(mpi);
  CHECK(joined.find("-x ZERORUN_JOB_TOKEN") != std::string::npos);
  CHECK(joined.find("-x NCCL_DEBUG") != std::string::npos);
  CHECK(joined.find("INFO") == std::string::npos);  // values travel in the environment, not argv
  for (const std::string& a : agent) CHECK(a.find("ZERORUN_JOB_TOKEN") == std::string::npos);
}

TEST_CASE("slurm and openmpi placement from their variables") {
  CHECK(ExpandHostlist("n[01-03,7],m") == std::vector<std::string>{"n01", "n02", "n03", "n7", "m"});
  CHECK(ExpandHostlist("node1") == std::vector<std::string>{"node1"});
  CHECK(ExpandTaskCounts("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  EnvList slurm = {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"},
                   {"SLURM_STEP_NUM_NODES", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"},
                   {"SLURM_STEP_NODELIST", "gpu[07-10]"}};
  StepPlace p = PlaceFromSlurm(slurm);
  CHECK(p.rank == 5);
  CHECK(p.world_size == 7);
  CHECK(p.local_rank == 1);
  CHECK(p.local_size == 2);
  CHECK(p.node_rank == 2);
  CHECK(p.num_nodes == 4);
  CHECK(p.first_host == "gpu07");
  CHECK_THROWS_WITH_AS(PlaceFromSlurm({}), doctest::Contains("SLURM_PROCID"), InvalidArgument);
  slurm.emplace_back("SLURM_STEP_NUM_TASKS", "6");  // a step smaller than the allocation
  CHECK(PlaceFromSlurm(slurm).world_size == 6);
  StepPlace m = PlaceFromOpenmpi({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  CHECK(m.node_rank == 1);
  CHECK(m.num_nodes == 2);
  CHECK(m.local_rank == 1);
}

TEST_CASE("core binding: even split of physical cores, hyperthreads stay with their core") {
  std::vector<std::vector<int>> cores = {{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}};
  std::vector<CoreBinding> b = SplitCores(cores, 2);
  REQUIRE(b.size() == 2);
  CHECK(b[0].cpus == std::vector<int>{0, 8, 1, 9});
  CHECK(b[1].cpus == std::vector<int>{2, 10, 3, 11});
  CHECK(b[0].threads == 2);
  CHECK_THROWS_WITH_AS(SplitCores(cores, 6), doctest::Contains("cannot bind 6 ranks to 5"), InvalidArgument);
  std::vector<CoreBinding> l = PlanBinding("1,3-5,7", 2);
  CHECK(l[0].cpus == std::vector<int>{1, 3});
  CHECK(l[1].cpus == std::vector<int>{4, 5});
  CHECK(!DetectCores().empty());
}
}

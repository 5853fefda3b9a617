// Multi-node on one machine: network namespaces joined by a bridge act as hosts, each with its own
// sshd (scripts/netns-hosts.sh). A 2-node x 2-rank job runs through `--launcher ssh`; a failing rank
// on node 1 and SIGTERM to the launcher must stop everything on both nodes. Skipped, with the reason,
// where namespaces or sshd are unavailable (not root, no iproute2/openssh-server).
// A real zr_comm_probe job and a real zerorun-train job run across the namespaces too; pdsh has its
// own test case. Each case sets up its own hosts.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "launcher_test_util.h"
#include "tests/common/skip.h"

using namespace zrtest;

namespace {

std::string Shell(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[512];
  while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  int status = p ? pclose(p) : -1;
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// Brings the fake hosts up for the lifetime of the object; `why` says what is missing if not.
struct FakeHosts {
  std::string tag = "t" + std::to_string(getpid() % 1000000);
  std::string dir = "/tmp/zr_netns_" + std::to_string(getpid());
  std::string script = std::string(ZR_SOURCE_DIR) + "/scripts/netns-hosts.sh";
  bool ok = false;
  std::string why;
  FakeHosts() {
    if (geteuid() != 0) {
      why = "not root (network namespaces need CAP_NET_ADMIN)";
      return;
    }
    int rc = 0;
    std::string out = Shell(script + " up " + tag + " 2 " + dir, &rc);
    ok = rc == 0;
    if (!ok) why = "scripts/netns-hosts.sh failed (exit " + std::to_string(rc) + "): " + out;
  }
  ~FakeHosts() {
    int rc = 0;
    Shell(script + " down " + tag + " " + dir, &rc);
    std::filesystem::remove_all(dir);
  }
  std::vector<std::string> Args(const std::vector<std::string>& extra) const {
    std::vector<std::string> a = {"-H", dir + "/hostfile", "--launcher", "ssh", "--launcher_args", "-F " + dir + "/ssh_config"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

}  // namespace

TEST_SUITE("multiproc") {
TEST_CASE("multi-node over ssh in network namespaces: env contract, real jobs, failure teardown, SIGTERM") {
  FakeHosts hosts;
  if (!hosts.ok) ZR_TEST_SKIP_UNLESS_CI(hosts.why);
  std::ifstream hf(hosts.dir + "/hostfile");
  std::string first_host;
  hf >> first_host;
  std::string self_netns = ReadRecord("/nonexistent", 0).netns;
  {
    char buf[128] = {0};
    REQUIRE(readlink("/proc/self/ns/net", buf, sizeof buf - 1) > 0);
    self_netns = buf;
  }

  // 1. A clean 2 x 2 job: every variable, on the right host.
  std::string out = hosts.dir + "/out";
  std::filesystem::create_directories(out);
  RunResult r = Run(hosts.Args({"--num_procs", "2", "--master_port", "29612", Probe(), "--out", out, "it's a b"}), 60,
                    {"NCCL_DEBUG=INFO"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::string token = ReadRecord(out, 0).env["ZERORUN_JOB_TOKEN"];
  CHECK(token.size() == 64);
  for (int rank = 0; rank < 4; ++rank) {
    Record rec = ReadRecord(out, rank);
    REQUIRE(rec.found);
    CHECK(rec.env["RANK"] == std::to_string(rank));
    CHECK(rec.env["LOCAL_RANK"] == std::to_string(rank % 2));
    CHECK(rec.env["WORLD_SIZE"] == "4");
    CHECK(rec.env["LOCAL_SIZE"] == "2");
    CHECK(rec.env["CROSS_RANK"] == std::to_string(rank / 2));
    CHECK(rec.env["CROSS_SIZE"] == "2");
    CHECK(rec.env["MASTER_ADDR"] == first_host);
    CHECK(rec.env["MASTER_PORT"] == "29612");
    CHECK(rec.env["ZERORUN_JOB_TOKEN"] == token);
    CHECK(rec.env["NCCL_DEBUG"] == "INFO");  // exported to remote nodes
    CHECK(rec.argv.back() == "it's a b");
    CHECK(rec.netns != self_netns);  // ran "remotely"
  }
  CHECK(ReadRecord(out, 0).netns == ReadRecord(out, 1).netns);
  CHECK(ReadRecord(out, 0).netns != ReadRecord(out, 2).netns);
  CHECK(r.output.find(token) == std::string::npos);

  // 1b. A real distributed job: rendezvous through rank 0's store at MASTER_ADDR:MASTER_PORT with the
  // job token, then all-reduces over UCX between the namespaces (zr_comm_probe; later zerorun-train).
  std::string comm_out = hosts.dir + "/comm";
  std::filesystem::create_directories(comm_out);
  RunResult c = Run(hosts.Args({"--num_procs", "2", "--master_port", "29615", BinDir() + "/zr_comm_probe", "--out", comm_out}), 120);
  INFO(c.output);
  CHECK(c.exit_code == 0);
  for (int rank = 0; rank < 4; ++rank) {
    std::ifstream in(comm_out + "/comm" + std::to_string(rank) + ".gen0.txt");
    std::string line;
    std::getline(in, line);
    CHECK(line == "ok 4 10");
  }

  // 2. Rank 3 (node 1) fails: exit code propagated, node 0's ranks stopped too, nothing left.
  std::string out2 = hosts.dir + "/out2";
  std::filesystem::create_directories(out2);
  RunResult f = Run(hosts.Args({"--num_procs", "2", "--kill_grace", "1", Probe(), "--out", out2, "--exit", "9", "--on_rank",
                                "3", "--sleep", "60", "--ignore_term", "--spawn_sleeper"}),
                    60);
  INFO(f.output);
  CHECK(f.exit_code == 9);
  CHECK(f.seconds < 40);
  CHECK(f.output.find("rank 3 on " ) != std::string::npos);
  CHECK(f.output.find("exit code 9") != std::string::npos);
  // the report is repeated at the end: the last lines name the rank and show its output
  CHECK(f.output.rfind("zerorun: job failed: rank 3 on") > f.output.rfind("the job was stopped on every node"));
  CHECK(ProcessesMatching(out2).empty());

  // 3. SIGTERM to the launcher while all four ranks run.
  std::string out3 = hosts.dir + "/out3";
  std::filesystem::create_directories(out3);
  Running run = Start(hosts.Args({"--num_procs", "2", "--kill_grace", "1", Probe(), "--out", out3, "--sleep", "60",
                                  "--spawn_sleeper"}));
  bool all = true;
  for (int rank = 0; rank < 4; ++rank) all = all && WaitForFile(out3 + "/rank" + std::to_string(rank) + ".gen0.txt", 30);
  CHECK(all);
  kill(run.pid, SIGTERM);
  RunResult t = Finish(run, 60);
  INFO(t.output);
  CHECK(t.exit_code == 143);
  CHECK(ProcessesMatching(out3).empty());

  // 4. The preflight names the host that cannot be reached.
  std::ofstream(hosts.dir + "/badhosts") << first_host << " slots=1\nno-such-host.invalid slots=1\n";
  RunResult p = Run({"-H", hosts.dir + "/badhosts", "--launcher_args", "-F " + hosts.dir + "/ssh_config", Probe()}, 60);
  CHECK(p.exit_code == 2);
  CHECK(p.output.find("host 'no-such-host.invalid' (node 1)") != std::string::npos);
  CHECK(p.output.find("host '" + first_host + "'") == std::string::npos);
}

TEST_CASE("multi-node over ssh in network namespaces: zerorun-train, 2 nodes x 2 ranks") {
  // The trainer itself: a 2-node x 2-rank data-parallel zerorun-train job over ssh; every rank
  // finishes the same number of steps with the same (globally averaged) final loss.
  std::string train = BinDir() + "/zerorun-train";
  if (!std::filesystem::exists(train)) ZR_TEST_SKIP_UNLESS_CI(train << " is not built");
  FakeHosts hosts;
  if (!hosts.ok) ZR_TEST_SKIP_UNLESS_CI(hosts.why);
  {
    std::string sums = hosts.dir + "/train";
    std::filesystem::create_directories(sums);
    RunResult t = Run(hosts.Args({"--num_procs", "2", "--master_port", "29617", train, "--steps", "5", "--n_layer", "1",
                                  "--d_model", "32", "--n_head", "2", "--seq_len", "16", "--summary", sums + "/s{rank}.json"}),
                      180);
    INFO(t.output);
    CHECK(t.exit_code == 0);
    std::string loss0 = JsonField(sums + "/s0.json", "final_loss");
    CHECK(!loss0.empty());
    for (int rank = 0; rank < 4; ++rank) {
      std::string s = sums + "/s" + std::to_string(rank) + ".json";
      CHECK(JsonField(s, "world_size") == "4");
      CHECK(JsonField(s, "steps") == "5");
      CHECK(JsonField(s, "final_loss") == loss0);
    }
  }
}

TEST_CASE("multi-node through pdsh in network namespaces: env contract and a failing rank") {
  // The same job through pdsh, and a failure. The token travels as LC_ZERORUN_JOB_TOKEN
  // (the fake sshds AcceptEnv LC_*). pdsh cannot close a remote agent's stdin, so remote ranks stop
  // through the agents' parent-death signal, shortly after the launcher returns: poll for that.
  int rc = 0;
  Shell("command -v pdsh", &rc);
  if (rc != 0) ZR_TEST_SKIP_UNLESS_CI("pdsh is not installed (Debian package pdsh)");
  FakeHosts hosts;
  if (!hosts.ok) ZR_TEST_SKIP_UNLESS_CI(hosts.why);
  {
    std::string pd = hosts.dir + "/pdsh";
    std::filesystem::create_directories(pd);
    std::vector<std::string> env = {"PDSH_SSH_ARGS_APPEND=-F " + hosts.dir + "/ssh_config"};
    RunResult ok = Run({"-H", hosts.dir + "/hostfile", "--launcher", "pdsh", "--num_procs", "2", Probe(), "--out", pd}, 60, env);
    INFO(ok.output);
    CHECK(ok.exit_code == 0);
    for (int rank = 0; rank < 4; ++rank) {
      Record rec = ReadRecord(pd, rank);
      CHECK(rec.env["RANK"] == std::to_string(rank));
      CHECK(rec.env["CROSS_RANK"] == std::to_string(rank / 2));
      CHECK(rec.env["ZERORUN_JOB_TOKEN"].size() == 64);
      CHECK(rec.env.count("LC_ZERORUN_JOB_TOKEN") == 0);
    }
    RunResult bad = Run({"-H", hosts.dir + "/hostfile", "--launcher", "pdsh", "--num_procs", "2", "--kill_grace", "1", Probe(),
                         "--out", pd, "--exit", "6", "--on_rank", "2", "--sleep", "60"},
                        60, env);
    INFO(bad.output);
    CHECK(bad.exit_code == 6);
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
      gone = ProcessesMatching(pd).empty();
      if (!gone) usleep(100000);
    }
    CHECK(gone);
  }
}
}

// End-to-end tests of the `zerorun` executable on this machine with the zr_env_probe rank program:
// the environment contract, failure propagation and teardown, signals, restarts, logs, binding.
// zerorun-train itself runs here too (3 ranks); the probe cases keep checking the contract.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <thread>

#include "tests/common/skip.h"
#include "launcher_test_util.h"

using namespace zrtest;

TEST_SUITE("multiproc") {
TEST_CASE("local job: every rank gets the whole environment contract and its arguments verbatim") {
  std::string dir = TempDir("env");
  RunResult r = Run({"--num_procs", "3", "--master_port", "29611", Probe(), "--out", dir, "--print", "2", "it's \"quoted\"",
                     "a  b", "", "--", "--local_rank=99"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::set<std::string> tokens;
  for (int rank = 0; rank < 3; ++rank) {
    Record rec = ReadRecord(dir, rank);
    REQUIRE(rec.found);
    CHECK(rec.env["RANK"] == std::to_string(rank));
    CHECK(rec.env["LOCAL_RANK"] == std::to_string(rank));
    CHECK(rec.env["WORLD_SIZE"] == "3");
    CHECK(rec.env["LOCAL_SIZE"] == "3");
    CHECK(rec.env["LOCAL_WORLD_SIZE"] == "3");
    CHECK(rec.env["CROSS_RANK"] == "0");
    CHECK(rec.env["CROSS_SIZE"] == "1");
    CHECK(rec.env["MASTER_ADDR"] == "127.0.0.1");
    CHECK(rec.env["MASTER_PORT"] == "29611");
    CHECK(rec.env["ZERORUN_RESTART"] == "0");
    CHECK(rec.env["ZERORUN_JOB_TOKEN"].size() == 64);
    CHECK(rec.env.count("CUDA_VISIBLE_DEVICES") == 0);  // CPU ranks (unless the caller had it set)
    tokens.insert(rec.env["ZERORUN_JOB_TOKEN"]);
    std::vector<std::string> want = {Probe(), "--local_rank=" + std::to_string(rank), "--out", dir, "--print", "2",
                                     "it's \"quoted\"", "a  b", "", "--", "--local_rank=99"};
    CHECK(rec.argv == want);
    for (const std::string& a : rec.argv) CHECK(a.find(rec.env["ZERORUN_JOB_TOKEN"]) == std::string::npos);
    CHECK(r.output.find("[rank " + std::to_string(rank) + "] probe rank " + std::to_string(rank) + " line 1") != std::string::npos);
  }
  CHECK(tokens.size() == 1);  // one token per job...
  std::string dir2 = TempDir("env2");
  REQUIRE(Run({"--num_procs", "1", Probe(), "--out", dir2}).exit_code == 0);
  CHECK(ReadRecord(dir2, 0).env["ZERORUN_JOB_TOKEN"] != *tokens.begin());  // ...fresh for every job
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir2);
}

TEST_CASE("local job: a real rendezvous and all-reduce through the environment the launcher sets") {
  std::string dir = TempDir("comm");
  std::string port = std::to_string(30000 + getpid() % 20000);  // rank 0 listens here: avoid fixed ports
  RunResult r = Run({"--num_procs", "3", "--master_port", port, BinDir() + "/zr_comm_probe", "--out", dir}, 120);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream in(dir + "/comm" + std::to_string(rank) + ".gen0.txt");
    std::string line;
    std::getline(in, line);
    CHECK(line == "ok 3 6");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("restart of a real job: a rank dies mid-job, the next generation rendezvouses again and finishes") {
  std::string dir = TempDir("commrestart");
  std::string port = std::to_string(30000 + (getpid() + 7) % 20000);
  RunResult r = Run({"--num_procs", "3", "--master_port", port, "--max_restarts", "1", "--kill_grace", "2",
                     BinDir() + "/zr_comm_probe", "--out", dir, "--die_rank", "1", "--die_generation", "0"},
                    120);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("rank 1 on") != std::string::npos);
  CHECK(r.output.find("exit code 7") != std::string::npos);
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream in(dir + "/comm" + std::to_string(rank) + ".gen1.txt");
    std::string line;
    std::getline(in, line);
    CHECK(line == "ok 3 6");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("local job: zerorun-train on 3 ranks through the launcher (--local_rank=N accepted)") {
  std::string train = BinDir() + "/zerorun-train";
  if (!std::filesystem::exists(train)) ZR_TEST_SKIP_UNLESS_CI(train << " is not built");
  std::string dir = TempDir("train");
  std::string port = std::to_string(30000 + (getpid() + 13) % 20000);
  RunResult r = Run({"--num_procs", "3", "--master_port", port, train, "--steps", "4", "--n_layer", "1", "--d_model", "32",
                     "--n_head", "2", "--seq_len", "16", "--summary", dir + "/s{rank}.json"},
                    180);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  // Every rank's summary: its rank, the world, the steps, and the same globally averaged final loss,
  // which training brought below log(vocab) (4.16 for the default 64 tokens).
  const std::string loss0 = JsonField(dir + "/s0.json", "final_loss");
  REQUIRE_FALSE(loss0.empty());
  CHECK(std::stod(loss0) > 0);
  CHECK(std::stod(loss0) < 4.16);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string s = dir + "/s" + std::to_string(rank) + ".json";
    INFO(s);
    CHECK(JsonField(s, "rank") == std::to_string(rank));
    CHECK(JsonField(s, "world_size") == "3");
    CHECK(JsonField(s, "steps") == "4");
    CHECK(JsonField(s, "skipped_steps") == "0");
    CHECK(JsonField(s, "final_loss") == loss0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("local job: GPU slots set CUDA_VISIBLE_DEVICES, --no_local_rank, .zerorun_env entries") {
  std::string dir = TempDir("gpu");
  std::string env_file = dir + "/envfile";
  std::ofstream(env_file) << "# comment\n\nZR_TEST_FROM_FILE=\"hello world\"\n";
  RunResult r = Run({"--num_gpus", "2", "--no_local_rank", Probe(), "--out", dir}, 60, {"ZERORUN_ENV_FILE=" + env_file});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    Record rec = ReadRecord(dir, rank);
    CHECK(rec.env["CUDA_VISIBLE_DEVICES"] == "0,1");
    CHECK(rec.env["ZR_TEST_FROM_FILE"] == "hello world");
    CHECK(rec.argv == std::vector<std::string>{Probe(), "--out", dir});
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("failing rank: its exit code is the job's, the others are stopped, nothing is left behind") {
  std::string dir = TempDir("fail");
  // rank 1 fails once every rank has written its record; the others ignore SIGTERM and would sleep 60 s.
  RunResult r = Run({"--num_procs", "3", "--kill_grace", "1", Probe(), "--out", dir, "--exit", "7", "--on_rank", "1",
                     "--sleep", "60", "--ignore_term", "--spawn_sleeper", "--print", "3"},
                    40);
  INFO(r.output);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 7);
  CHECK(r.seconds < 30);  // bounded teardown (generous for a loaded CI machine; the ranks would sleep 60 s)
  CHECK(r.output.find("rank 1 on") != std::string::npos);
  CHECK(r.output.find("exit code 7") != std::string::npos);
  CHECK(r.output.find("  | probe rank 1 failing with exit code 7") != std::string::npos);
  for (int rank = 0; rank < 3; ++rank) {
    Record rec = ReadRecord(dir, rank);
    if (!rec.found) continue;  // a rank may have been stopped before it wrote its record
    CHECK_FALSE(Alive(rec.pid));
    CHECK_FALSE(Alive(rec.sleeper));
  }
  CHECK(ProcessesMatching(dir).empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("UCX's shared-memory files live in a per-node directory the launcher removes, even after kill -9") {
  // Each rank leaves a file where UCX would put its segments and dies by SIGKILL before it could unlink it.
  const std::string rank_cmd = "echo \"shm dir=$UCX_POSIX_DIR\"; : > \"$UCX_POSIX_DIR/ucx_shm_posix_$RANK\"; "
                               "kill -9 $$";
  RunResult r = Run({"--num_procs", "2", "--no_local_rank", "/bin/sh", "-c", rank_cmd}, 40);
  INFO(r.output);
  CHECK(r.exit_code == 137);
  const size_t at = r.output.find("shm dir=/dev/shm/zerorun-");
  REQUIRE(at != std::string::npos);
  const std::string dir = r.output.substr(at + 8, r.output.find('\n', at) - at - 8);
  CHECK_FALSE(std::filesystem::exists(dir));
  CHECK(r.output.find(" shared-memory file(s) the ranks left in " + dir) != std::string::npos);  // 1 or 2: the
  // first death stops the other rank, perhaps before it wrote its file
  // A directory the user chose is theirs: passed through, never removed.
  std::string mine = TempDir("ucxdir");
  RunResult u = Run({"--num_procs", "1", "--no_local_rank", "/bin/sh", "-c", "echo \"shm dir=$UCX_POSIX_DIR\""}, 40,
                    {"UCX_POSIX_DIR=" + mine});
  INFO(u.output);
  CHECK(u.exit_code == 0);
  CHECK(u.output.find("shm dir=" + mine) != std::string::npos);
  CHECK(std::filesystem::is_directory(mine));
  std::filesystem::remove_all(mine);
}

TEST_CASE("rank killed by a signal: reported with the signal, exit code 128+signal") {
  std::string dir = TempDir("sig");
  RunResult r = Run({"--num_procs", "2", "--kill_grace", "1", Probe(), "--out", dir, "--signal", "9", "--on_rank", "0",
                     "--sleep", "60"},
                    40);
  INFO(r.output);
  CHECK(r.exit_code == 137);
  CHECK(r.output.find("signal 9 (SIGKILL)") != std::string::npos);
  CHECK(ProcessesMatching(dir).empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("SIGTERM to the launcher: forwarded, every rank and helper gone, exit 143") {
  std::string dir = TempDir("term");
  Running run = Start({"--num_procs", "3", "--kill_grace", "1", "--save_pid", Probe(), "--out", dir, "--sleep", "60",
                       "--spawn_sleeper"});
  std::string pid_file = "/tmp/" + std::to_string(run.pid) + ".zerorun";
  bool all = true;
  for (int rank = 0; rank < 3; ++rank) all = all && WaitForFile(dir + "/rank" + std::to_string(rank) + ".gen0.txt", 20);
  REQUIRE(all);
  std::vector<int> pids;
  for (int rank = 0; rank < 3; ++rank) {
    Record rec = ReadRecord(dir, rank);
    pids.push_back(rec.pid);
    pids.push_back(rec.sleeper);
    CHECK(Alive(rec.pid));
  }
  CHECK(std::filesystem::exists(pid_file));  // --save_pid
  kill(run.pid, SIGTERM);
  RunResult r = Finish(run, 30);
  INFO(r.output);
  CHECK(r.exit_code == 143);
  CHECK_FALSE(std::filesystem::exists(pid_file));
  CHECK(r.output.find("SIGTERM") != std::string::npos);
  for (int pid : pids) CHECK_FALSE(Alive(pid));
  CHECK(ProcessesMatching(dir).empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("--max_restarts: a failed generation is restarted with ZERORUN_RESTART+1 and a new token") {
  std::string dir = TempDir("restart");
  RunResult r = Run({"--num_procs", "2", "--max_restarts", "2", "--kill_grace", "1", Probe(), "--out", dir, "--exit", "3",
                     "--on_rank", "1", "--on_generation", "0"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  Record g0 = ReadRecord(dir, 0, 0);
  Record g1 = ReadRecord(dir, 0, 1);
  REQUIRE(g1.found);
  CHECK(g1.env["ZERORUN_RESTART"] == "1");
  CHECK(ReadRecord(dir, 1, 1).found);
  CHECK_FALSE(ReadRecord(dir, 0, 2).found);  // success ends the loop
  if (g0.found) CHECK(g0.env["ZERORUN_JOB_TOKEN"] != g1.env["ZERORUN_JOB_TOKEN"]);
  CHECK(r.output.find("restart 1 of 2") != std::string::npos);

  std::string dir2 = TempDir("restart2");
  RunResult always = Run({"--num_procs", "1", "--max_restarts", "1", Probe(), "--out", dir2, "--exit", "5"});
  CHECK(always.exit_code == 5);
  CHECK(ReadRecord(dir2, 0, 0).found);
  CHECK(ReadRecord(dir2, 0, 1).found);
  CHECK(always.output.find("giving up") != std::string::npos);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir2);
}

TEST_CASE("--enable_each_rank_log: output goes to DIR/rank<r>.log; a failure shows the file and its tail") {
  std::string dir = TempDir("logs");
  RunResult r = Run({"--num_procs", "2", "--enable_each_rank_log", dir + "/logs", Probe(), "--print", "2", "--exit", "4",
                     "--on_rank", "1"});
  INFO(r.output);
  CHECK(r.exit_code == 4);
  std::ifstream log1(dir + "/logs/rank1.log");
  std::string content((std::istreambuf_iterator<char>(log1)), std::istreambuf_iterator<char>());
  CHECK(content.find("probe rank 1 line 1") != std::string::npos);
  CHECK(r.output.find("[rank 1] probe") == std::string::npos);  // not on the terminal
  CHECK(r.output.find(dir + "/logs/rank1.log") != std::string::npos);
  CHECK(r.output.find("  | probe rank 1 failing with exit code 4") != std::string::npos);
  std::ofstream(dir + "/file") << "x";
  RunResult bad = Run({"--enable_each_rank_log", dir + "/file", Probe()});
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("not a directory") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("--bind_core_list: disjoint CPU sets and OMP_NUM_THREADS per rank") {
  if (std::thread::hardware_concurrency() < 2) ZR_TEST_SKIP_UNLESS_CI("needs 2 CPUs");
  std::string dir = TempDir("bind");
  RunResult r = Run({"--num_procs", "2", "--bind_core_list", "0-1", Probe(), "--out", dir}, 60, {"ZERORUN_LOG_LEVEL=info"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(ReadRecord(dir, 0).cpus == "0");
  CHECK(ReadRecord(dir, 1).cpus == "1");
  CHECK(ReadRecord(dir, 0).env["OMP_NUM_THREADS"] == "1");
  CHECK(r.output.find("binding rank 1 to CPUs 1") != std::string::npos);
  RunResult auto_bind = Run({"--num_procs", "2", "--bind_cores_to_rank", Probe(), "--out", dir});
  CHECK(auto_bind.exit_code == 0);
  CHECK(ReadRecord(dir, 0).cpus != ReadRecord(dir, 1).cpus);
  RunResult too_many = Run({"--num_procs", "3", "--bind_core_list", "0-1", Probe()});
  CHECK(too_many.exit_code == 2);
  CHECK(too_many.output.find("cannot bind 3 ranks to 2 core(s)") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("bad input fails fast with a message naming the place; a missing program is exit 127") {
  std::string dir = TempDir("bad");
  std::ofstream(dir + "/hf") << "good slots=2\nthis is bad slots=1\n";
  RunResult hf = Run({"-H", dir + "/hf", Probe()});
  CHECK(hf.exit_code == 2);
  CHECK(hf.output.find(dir + "/hf:2: bad hostfile line") != std::string::npos);
  RunResult missing = Run({"--num_procs", "2", dir + "/no-such-program"});
  CHECK(missing.exit_code == 127);
  CHECK(missing.output.find("cannot execute") != std::string::npos);
  RunResult help = Run({"--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.output.find("usage: zerorun") != std::string::npos);
  RunResult dry = Run({"--num_procs", "2", "--dry_run", Probe(), "x"});
  CHECK(dry.exit_code == 0);
  CHECK(dry.output.find("ZERORUN_JOB_TOKEN='<hidden>'") != std::string::npos);
  CHECK(dry.output.find("RANK=1") != std::string::npos);
  std::filesystem::remove_all(dir);
}
TEST_CASE("no --master_port on one node: a free port, printed; two such jobs at once both rendezvous (issue 13 item 7)") {
  std::string dir = TempDir("freeport");
  std::string a = dir + "/a", b = dir + "/b";
  std::filesystem::create_directories(a);
  std::filesystem::create_directories(b);
  const std::vector<std::string> info = {"ZERORUN_LOG_LEVEL=info"};  // the port line is an info line
  Running ja = Start({"--num_procs", "2", BinDir() + "/zr_comm_probe", "--out", a}, info);
  Running jb = Start({"--num_procs", "2", BinDir() + "/zr_comm_probe", "--out", b}, info);
  RunResult ra = Finish(ja, 120), rb = Finish(jb, 120);
  INFO(ra.output);
  INFO(rb.output);
  CHECK(ra.exit_code == 0);
  CHECK(rb.exit_code == 0);
  for (const std::string& d : {a, b}) {
    for (int rank = 0; rank < 2; ++rank) {
      std::ifstream in(d + "/comm" + std::to_string(rank) + ".gen0.txt");
      std::string line;
      std::getline(in, line);
      CHECK(line == "ok 2 3");
    }
  }
  auto port_of = [](const std::string& out) {
    size_t at = out.find("rendezvous on free port ");
    return at == std::string::npos ? std::string() : out.substr(at + 24, out.find(' ', at + 24) - at - 24);
  };
  CHECK_FALSE(port_of(ra.output).empty());
  CHECK(port_of(ra.output) != port_of(rb.output));
  CHECK(port_of(ra.output) != "29500");
  // the ranks got the port that was printed
  std::string pd = dir + "/probe";
  std::filesystem::create_directories(pd);
  RunResult p = Run({"--num_procs", "1", Probe(), "--out", pd}, 60, info);
  CHECK(ReadRecord(pd, 0).env["MASTER_PORT"] == port_of(p.output));
  std::filesystem::remove_all(dir);
}

TEST_CASE("--master_port already in use: refused before any rank starts, naming the port") {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(fd, 4) == 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  std::string dir = TempDir("busyport");
  RunResult r = Run({"--num_procs", "2", "--master_port", port, BinDir() + "/zr_comm_probe", "--out", dir}, 60);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--master_port " + port + ": rank 0 could not host the rendezvous store") != std::string::npos);
  CHECK(r.output.find("Address already in use") != std::string::npos);
  CHECK(r.output.find("[rank") == std::string::npos);  // nothing started
  close(fd);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a low open-file limit: a clear error naming the need and the limit, or raised when the hard limit allows") {
  std::string dir = TempDir("nofile");
  auto sh = [&](const std::string& ulimit) {
    std::string cmd = ulimit + " && exec " + Zerorun() + " --num_procs 4 " + BinDir() + "/zr_comm_probe --out " + dir;
    return RunShell(cmd, 60);
  };
  RunResult hard = sh("ulimit -n 20");  // soft and hard: cannot be raised
  INFO(hard.output);
  CHECK(hard.exit_code == 2);
  CHECK(hard.output.find("rank 0 needs at least 47 open files for a 4-rank job") != std::string::npos);
  CHECK(hard.output.find("ulimit -n is 20 (hard limit 20)") != std::string::npos);
  CHECK(hard.output.find("[rank") == std::string::npos);
  RunResult soft = sh("ulimit -Sn 16");  // the hard limit allows more: raised, and the job runs
  INFO(soft.output);
  CHECK(soft.exit_code == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a stopped rank is woken for the teardown (SIGCONT) and named in the report") {
  std::string dir = TempDir("stopped");
  // rank 1 stops itself (SIGSTOP); rank 0 fails a second later
  RunResult r = Run({"--num_procs", "2", "--kill_grace", "20", Probe(), "--out", dir, "--stop_rank", "1", "--exit", "3",
                     "--on_rank", "0", "--exit_after", "1"},
                    60);
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK(r.output.find("zerorun: rank 1 on") != std::string::npos);
  CHECK(r.output.find("was stopped (SIGSTOP, job control or a debugger) when the job failed") != std::string::npos);
  CHECK(r.output.find("sending SIGKILL") == std::string::npos);  // SIGTERM reached it: no 20 s grace spent
  CHECK_FALSE(Alive(ReadRecord(dir, 1).pid));
  std::filesystem::remove_all(dir);
}
}

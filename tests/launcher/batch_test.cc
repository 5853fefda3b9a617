// Runners that hand the job to a resource manager: mpirun (OpenMPI) and srun (Slurm, through
// scripts/slurm-local.sh), plus the manual --node_rank mode. Parts whose tools are missing are
// skipped with a message naming the Debian package.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>

#include "tests/common/skip.h"
#include "launcher_test_util.h"

using namespace zrtest;

namespace {
bool Have(const std::string& tool) { return std::system(("command -v " + tool + " >/dev/null 2>&1").c_str()) == 0; }
}  // namespace

TEST_SUITE("multiproc") {
TEST_CASE("openmpi runner: ranks placed from OMPI_COMM_WORLD_*, failures propagate") {
  if (!Have("mpirun")) ZR_TEST_SKIP_UNLESS_CI("mpirun not installed (Debian package openmpi-bin)");
  std::string dir = TempDir("mpi");
  RunResult r = Run({"--launcher", "openmpi", "--num_procs", "2", "--master_port", "29614", Probe(), "--out", dir, "x y"}, 60);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    Record rec = ReadRecord(dir, rank);
    REQUIRE(rec.found);
    CHECK(rec.env["RANK"] == std::to_string(rank));
    CHECK(rec.env["LOCAL_RANK"] == std::to_string(rank));
    CHECK(rec.env["WORLD_SIZE"] == "2");
    CHECK(rec.env["LOCAL_SIZE"] == "2");
    CHECK(rec.env["CROSS_SIZE"] == "1");
    CHECK(rec.env["MASTER_ADDR"] == "127.0.0.1");
    CHECK(rec.env["MASTER_PORT"] == "29614");
    CHECK(rec.env["ZERORUN_JOB_TOKEN"].size() == 64);
    CHECK(rec.argv.back() == "x y");
  }
  CHECK(ReadRecord(dir, 0).env["ZERORUN_JOB_TOKEN"] == ReadRecord(dir, 1).env["ZERORUN_JOB_TOKEN"]);
  RunResult bad = Run({"--launcher", "openmpi", "--num_procs", "2", "--kill_grace", "1", Probe(), "--out", dir, "--exit", "5",
                       "--on_rank", "1", "--sleep", "60"},
                      60);
  INFO(bad.output);
  CHECK(bad.exit_code == 5);
  CHECK(ProcessesMatching(dir).empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("manual --node_rank: each node started by hand shares the token the user exported") {
  std::string dir = TempDir("manual");
  std::ofstream(dir + "/hf") << "nodeA slots=2\nnodeB slots=1\n";
  RunResult no_token = Run({"-H", dir + "/hf", "--node_rank", "1", Probe()});
  CHECK(no_token.exit_code == 2);
  CHECK(no_token.output.find("same ZERORUN_JOB_TOKEN") != std::string::npos);
  std::string token = "ZERORUN_JOB_TOKEN=0123456789abcdef0123456789abcdef";
  RunResult n1 = Run({"-H", dir + "/hf", "--node_rank", "1", Probe(), "--out", dir}, 60, {token});
  INFO(n1.output);
  REQUIRE(n1.exit_code == 0);
  Record rec = ReadRecord(dir, 2);  // node B's only slot is global rank 2
  REQUIRE(rec.found);
  CHECK(rec.env["LOCAL_RANK"] == "0");
  CHECK(rec.env["CROSS_RANK"] == "1");
  CHECK(rec.env["CROSS_SIZE"] == "2");
  CHECK(rec.env["WORLD_SIZE"] == "3");
  CHECK(rec.env["CUDA_VISIBLE_DEVICES"] == "0");  // hostfile slots are GPU ids
  CHECK(rec.env["MASTER_ADDR"] == "nodeA");
  CHECK(rec.env["ZERORUN_JOB_TOKEN"] == "0123456789abcdef0123456789abcdef");
  RunResult out_of_range = Run({"-H", dir + "/hf", "--node_rank", "2", Probe()}, 60, {token});
  CHECK(out_of_range.exit_code == 2);
  CHECK(out_of_range.output.find("--node_rank 2 is out of range") != std::string::npos);
  std::filesystem::remove_all(dir);
}
}

TEST_SUITE("slow") {
TEST_CASE("slurm runner: a private one-node Slurm cluster (scripts/slurm-local.sh)") {
  if (geteuid() != 0 || !Have("slurmctld") || !Have("munged") || !Have("srun")) {
    ZR_TEST_SKIP_UNLESS_CI("needs root and the Debian packages slurm-wlm and munge (run scripts/slurm-local.sh by hand)");
  }
  std::string cmd = std::string(ZR_SOURCE_DIR) + "/scripts/slurm-local.sh " + BinDir() + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512];
  while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  int status = p ? pclose(p) : -1;
  INFO(out);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(out.find("slurm-local: OK") != std::string::npos);
}
}

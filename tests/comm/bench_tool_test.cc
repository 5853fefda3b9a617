// zerorun-bench as a tool: it starts its own ranks (--nprocs), checks results (--check) and prints one
// JSON object per message size with the fields the benchmark scripts read. No timing is asserted.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/common/skip.h"

namespace {

// Runs `cmd` through the shell: its exit status and its output, line by line.
int RunCommand(const std::string& cmd, std::vector<std::string>* lines) {
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p)) lines->emplace_back(buf);
  return ::pclose(p);
}

}  // namespace

TEST_SUITE("multiproc") {

TEST_CASE("bench tool: zerorun-bench runs its own ranks and prints nccl-tests fields as JSON") {
  const char* dir = std::getenv("ZERORUN_TEST_BINARY_DIR");
  if (!dir) ZR_TEST_SKIP("ZERORUN_TEST_BINARY_DIR is not set (run it through ctest)");
  // "all_gather --in-place": each rank's input is its block of the output; --check then verifies the
  // gathered blocks as for the out-of-place form.
  for (const std::string op : {"allreduce", "reduce_scatter", "all_gather", "all_gather --in-place"}) {
    for (const std::string backend : {"ucx", "local"}) {
      std::string cmd = std::string(dir) + "/bin/zerorun-bench " + op + " --backend " + backend +
                        " --nprocs 3 --min-bytes 1K --max-bytes 256K --factor 16 --iters 3 --check --json 2>&1";
      std::vector<std::string> lines;
      const int status = RunCommand(cmd, &lines);
      INFO(cmd);
      CHECK(status == 0);
      int objects = 0;
      for (const auto& l : lines) {
        if (l.rfind("{", 0) != 0) continue;
        ++objects;
        for (const char* field : {"\"op\"", "\"ranks\": 3", "\"dtype\": \"fp32\"", "\"size_bytes\"", "\"time_us\"",
                                  "\"algbw_gbps\"", "\"busbw_gbps\"", "\"check\": true"}) {
          INFO(l);
          CHECK(l.find(field) != std::string::npos);
        }
      }
      CHECK(objects == 3);  // 1K, 16K, 256K
      const bool in_place = op.find("--in-place") != std::string::npos;
      for (const auto& l : lines) {
        if (l.rfind("{", 0) == 0) CHECK((l.find("\"in_place\": true") != std::string::npos) == in_place);
      }
    }
  }
  // --in-place is refused for the other collectives, by name.
  std::vector<std::string> lines;
  const int status = RunCommand(std::string(dir) + "/bin/zerorun-bench allreduce --in-place --nprocs 2 2>&1", &lines);
  std::string out;
  for (const auto& l : lines) out += l;
  INFO(out);
  CHECK(status != 0);
  CHECK(out.find("--in-place is for all_gather only") != std::string::npos);
}

TEST_CASE("bench tool: zerorun-bench runs as the ranks of a job the zerorun launcher started") {
  const char* dir = std::getenv("ZERORUN_TEST_BINARY_DIR");
  if (!dir) ZR_TEST_SKIP("ZERORUN_TEST_BINARY_DIR is not set (run it through ctest)");
  // The launcher puts --local_rank=N before the program's own arguments (DeepSpeed's convention).
  const std::string cmd = std::string(dir) + "/bin/zerorun --num_procs 2 " + dir +
                          "/bin/zerorun-bench all_reduce --min-bytes 4K --max-bytes 64K --factor 16 --iters 3 --check --json 2>&1";
  std::vector<std::string> lines;
  const int status = RunCommand(cmd, &lines);
  std::string out;
  for (const auto& l : lines) out += l;
  INFO(cmd);
  INFO(out);
  CHECK(status == 0);
  int objects = 0;
  for (const auto& l : lines) {
    const size_t json = l.find("{\"op\": \"all_reduce\"");
    if (json == std::string::npos) continue;
    ++objects;
    CHECK(l.find("\"ranks\": 2", json) != std::string::npos);
    CHECK(l.find("\"check\": true", json) != std::string::npos);
  }
  CHECK(objects == 2);  // 4K, 64K, from rank 0 only
  CHECK(out.find("unknown") == std::string::npos);
}

}  // TEST_SUITE

// `zerorun-bench io` and the IoBench behind it: a pass moves exactly the file's bytes with the settings
// given, the sweep's choice minimises write + read time, and the tool's flags, --config and errors.
// No timing is asserted.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>

#include "offload_test_util.h"
#include "zerorun/offload/io_bench.h"

using namespace zr_offload_test;

namespace {

struct ToolRun {
  int status = -1;
  std::string output;
};

ToolRun RunTool(const std::string& args) {
  const char* bin = std::getenv("ZERORUN_TEST_BINARY_DIR");
  ToolRun r;
  const std::string cmd = std::string(bin ? bin : ".") + "/bin/zerorun-bench io " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) r.output += buf;
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::vector<std::string> JsonLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (line.rfind("{", 0) == 0) lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("io bench: a pass moves the whole file with the given settings; the scratch file is removed") {
    TempDir dir;
    if (!SupportsDirectIo(dir.path())) ZR_TEST_SKIP(dir.path() + " does not support O_DIRECT");
    std::string path;
    {
      IoBenchOptions o;
      o.path = dir.path();
      o.file_bytes = 8 << 20;
      o.transfer_bytes = 3 << 20;  // 3 MiB, 3 MiB, 2 MiB
      IoBench bench(o);
      path = bench.file_path();
      CHECK(fs::file_size(path) == static_cast<uintmax_t>(o.file_bytes));
      IoEngineOptions eo;
      eo.block_size = 512 << 10;
      eo.kind = IoEngineKind::kAuto;
      IoStats stats;
      std::string name;
      CHECK(bench.Pass(IoOp::kWrite, eo, &stats, &name) > 0);
      CHECK(stats.bytes_written == o.file_bytes);
      CHECK(stats.requests == 6 + 6 + 4);  // 512 KiB requests of the three transfers
      if (name == "io_uring") CHECK(stats.fixed_requests == stats.requests);  // registered buffers
      // What was written is the buffers' content, transfer by transfer.
      auto pread = MakeEngine(IoEngineKind::kPread);
      IoFile f = IoFile::Open(path, {.write = false, .direct = true});
      PinnedBuffer back(3 << 20);
      pread->Read(f, 6 << 20, back.data(), 2 << 20);  // the third transfer came from buffer 0
      bool same = true;
      for (int64_t i = 0; i < (2 << 20); ++i) same &= back.as<uint8_t>()[i] == static_cast<uint8_t>(i * 131 + 7);
      CHECK(same);
      const IoBenchResult r = bench.Run(eo, 2, true, true);
      CHECK(r.write_gbps.size() == 2);
      CHECK(r.read_gbps.size() == 2);
      CHECK(r.stats.bytes_read == o.file_bytes);
    }
    CHECK_FALSE(fs::exists(path));
    CHECK_THROWS_AS((IoBench(IoBenchOptions{.path = dir.path(), .file_bytes = 1000})), InvalidArgument);
  }

  TEST_CASE("io bench: the suggestion minimises the time to write and read the same bytes") {
    std::vector<IoBenchResult> rs(3);
    rs[0].write_gbps = {4, 4, 4};
    rs[0].read_gbps = {1, 1, 1};  // 1/4 + 1 = 1.25
    rs[1].write_gbps = {2, 2, 9};
    rs[1].read_gbps = {2, 2, 1};  // medians 2 and 2: 1.0
    rs[2].write_gbps = {8};
    rs[2].read_gbps = {1.5};  // 0.125 + 0.667 = 0.79
    rs[2].engine.queue_depth = 32;
    CHECK(BestForSwapping(rs).engine.queue_depth == 32);
    rs[2].read_gbps = {0.5};
    CHECK(&BestForSwapping(rs) == &rs[1]);
    CHECK(Median({3, 1, 2}) == 2);
    CHECK(Median({4, 1, 2, 3}) == 2.5);
  }
}

TEST_SUITE("multiproc") {
  TEST_CASE("io bench tool: zerorun-bench io prints GB/s as JSON, sweeps and suggests an aio section") {
    if (!std::getenv("ZERORUN_TEST_BINARY_DIR")) ZR_TEST_SKIP("ZERORUN_TEST_BINARY_DIR not set (run through ctest)");
    TempDir dir;
    if (!SupportsDirectIo(dir.path())) ZR_TEST_SKIP(dir.path() + " does not support O_DIRECT");
    ToolRun r = RunTool("--path " + dir.path() + " --size 8M --io-size 2M --block-size 256K --queue-depth 4 --reps 2 --json");
    INFO(r.output);
    REQUIRE(r.status == 0);
    std::vector<std::string> lines = JsonLines(r.output);
    REQUIRE(lines.size() == 1);
    for (const char* field : {"\"engine\": \"io_uring\"", "\"fs\": \"", "\"direct\": true", "\"size_bytes\": 8388608",
                              "\"block_size\": 262144", "\"queue_depth\": 4", "\"write_gbps\": [", "\"read_gbps\": ["}) {
      CHECK(lines[0].find(field) != std::string::npos);
    }

    // --config reads the aio section; flags after it win.
    { std::ofstream(dir.File("ds.json")) << R"({"train_batch_size": 8, "aio": {"block_size": 131072, "thread_count": 2}})"; }
    r = RunTool("--path " + dir.path() + " --size 4M --io-size 1M --config " + dir.File("ds.json") +
                " --queue-depth 2 --reps 1 --read --engine pread --json");
    REQUIRE(r.status == 0);
    lines = JsonLines(r.output);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("\"engine\": \"pread\"") != std::string::npos);
    CHECK(lines[0].find("\"block_size\": 131072, \"queue_depth\": 2, \"intra_op_parallelism\": 2") != std::string::npos);
    CHECK(lines[0].find("\"write_gbps\": []") != std::string::npos);

    r = RunTool("--path " + dir.path() + " --size 4M --io-size 1M --sweep --block-sizes 128K,512K --queue-depths 2,8 "
                "--parallelism 1 --reps 1");
    REQUIRE(r.status == 0);
    CHECK(r.output.find("# cpu: ") != std::string::npos);
    CHECK(r.output.find("# suggested") != std::string::npos);
    CHECK(r.output.find("\"aio\": {\"block_size\": ") != std::string::npos);
    int rows = 0;
    for (size_t p = r.output.find("  io_uring "); p != std::string::npos; p = r.output.find("  io_uring ", p + 1)) ++rows;
    CHECK(rows == 4);

    // Bad input: usage errors name the flag; I/O errors name the path.
    r = RunTool("--size 4M");
    CHECK(r.status == 2);
    CHECK(r.output.find("--path is required") != std::string::npos);
    r = RunTool("--path " + dir.path() + " --block-size 1000");
    CHECK(r.status == 2);
    CHECK(r.output.find("aio.block_size must be a positive multiple of 4096") != std::string::npos);
    r = RunTool("--path " + dir.path() + " --config " + dir.File("missing.json"));
    CHECK(r.status == 2);
    CHECK(r.output.find("missing.json") != std::string::npos);
    r = RunTool("--path " + dir.File("no/such/dir/file") + " --size 4M");
    CHECK(r.status == 1);
    CHECK(r.output.find(dir.File("no/such/dir/file")) != std::string::npos);
  }
}

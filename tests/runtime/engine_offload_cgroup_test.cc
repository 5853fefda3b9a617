// NVMe optimizer offload under a real memory limit: a job whose optimizer state (~300 MB: 25M
// parameters x fp32 master + two Adam moments) does not fit a 256 MiB cgroup-v1 memory group is killed
// there without offload, trains there with NVMe offload (2 buffers of one ~1M-element sub-group), and
// its losses are bitwise those of an unlimited run without offload. Each run is a forked child; the
// group is created under /sys/fs/cgroup/memory (root) and removed; the test skips when it cannot.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine_test_util.h"
#include "tests/common/skip.h"
#include "zerorun/zero/strategy.h"

using namespace zrtest;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kLimit = int64_t{256} << 20;
const char* kCgroupRoot = "/sys/fs/cgroup/memory";

bool WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.flush();
  return static_cast<bool>(f);
}

gpt::GptConfig Model() {
  gpt::GptConfig c;
  c.n_layer = 8;
  c.n_head = 8;
  c.d_model = 512;  // 8 x 12 x 512^2 = 25.2M parameters
  c.vocab_size = 64;
  c.seq_len = 16;
  c.dtype = DType::kBF16;
  return c;
}

std::string ConfigText(const std::string& nvme_path) {
  std::string offload;
  if (!nvme_path.empty()) {
    offload = Format(R"(, "offload_optimizer": {{"device": "nvme", "nvme_path": "{}", "buffer_count": 2,
        "pipeline_read": true, "pipeline_write": true}})", nvme_path);
  }
  return Format(R"({{"train_micro_batch_size_per_gpu": 1, "bf16": {{"enabled": true}},
      "optimizer": {{"type": "AdamW", "params": {{"lr": 0.001}}}},
      "zero_optimization": {{"stage": 1, "reduce_bucket_size": 1000000, "sub_group_size": 1000000 {}}}}})",
                offload);
}

struct ChildResult {
  bool exited = false;
  int status = 0;         // exit code, or the signal
  std::string losses;     // what the child printed: "<loss as hex float> ..." per step
  int64_t state_bytes = 0;
};

// Trains 2 steps in a forked child, in cgroup `group` when not empty. Bounded: 240 s.
ChildResult RunChild(const std::string& group, const std::string& nvme_path) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    if (!group.empty() && !WriteText(group + "/cgroup.procs", std::to_string(::getpid()))) ::_exit(90);
    try {
      runtime::LoadOptions lo;
      lo.log_warnings = false;
      runtime::Config cfg = runtime::LoadConfigString(ConfigText(nvme_path), lo);
      std::ostringstream out;
      comm::RunLocalRanks(1, [&](comm::Communicator& c) {
        gpt::Gpt model(Model());
        model.Initialize(5);
        runtime::Engine engine(model, cfg, c);
        for (int step = 0; step < 2; ++step) {
          auto [x, y] = MicroBatch(step, 0, 0, 1, 1, 1, 16, 64);
          const double loss = engine.Forward(x, y);
          engine.Backward();
          engine.Step();
          char buf[64];
          std::snprintf(buf, sizeof buf, "%a ", loss);
          out << buf;
        }
        out << "| " << engine.zero_strategy().state_store().resident_bytes();
      });
      const std::string s = out.str();
      if (::write(fds[1], s.data(), s.size()) != static_cast<ssize_t>(s.size())) ::_exit(91);
      ::_exit(0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      ::_exit(92);
    }
  }
  ::close(fds[1]);
  ChildResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  int status = 0;
  while (true) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ::close(fds[0]);
      FAIL("the training child did not finish within 240 s");
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) r.losses.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  r.exited = WIFEXITED(status);
  r.status = r.exited ? WEXITSTATUS(status) : WTERMSIG(status);
  const size_t bar = r.losses.find("| ");
  if (bar != std::string::npos) {
    r.state_bytes = std::stoll(r.losses.substr(bar + 2));
    r.losses.resize(bar);
  }
  return r;
}

}  // namespace

TEST_SUITE("slow") {

TEST_CASE("nvme offload under a 256 MiB cgroup-v1 memory limit: ~300 MB of optimizer state trains, equal losses") {
  if (::geteuid() != 0) ZR_TEST_SKIP("needs root to create a cgroup-v1 memory group");
  if (!fs::exists(std::string(kCgroupRoot) + "/memory.limit_in_bytes")) {
    ZR_TEST_SKIP("no cgroup-v1 memory controller at /sys/fs/cgroup/memory");
  }
  const std::string group = std::string(kCgroupRoot) + "/zerorun-offload-test-" + std::to_string(::getpid());
  if (::mkdir(group.c_str(), 0755) != 0) ZR_TEST_SKIP("cannot create " << group << ": " << std::strerror(errno));
  struct Cleanup {
    std::string g;
    ~Cleanup() { ::rmdir(g.c_str()); }
  } cleanup{group};
  REQUIRE(WriteText(group + "/memory.limit_in_bytes", std::to_string(kLimit)));
  if (fs::exists(group + "/memory.memsw.limit_in_bytes")) {
    REQUIRE(WriteText(group + "/memory.memsw.limit_in_bytes", std::to_string(kLimit)));  // no swapping out of it
  }
  const char* t = std::getenv("TMPDIR");
  std::string tmpl = std::string(t && *t ? t : "/tmp") + "/zerorun-cgroup-nvme-XXXXXX";
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  struct RemoveDir {
    std::string d;
    ~RemoveDir() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } remove_dir{tmpl};

  const ChildResult unlimited = RunChild("", "");
  REQUIRE(unlimited.exited);
  REQUIRE(unlimited.status == 0);
  CHECK(unlimited.state_bytes > 300'000'000);  // fp32 master + 2 moments of 25M parameters
  const ChildResult limited = RunChild(group, "");
  CHECK_FALSE((limited.exited && limited.status == 0));  // killed (or failed) by the limit
  if (!limited.exited) CHECK(limited.status == SIGKILL);
  const ChildResult offloaded = RunChild(group, tmpl);
  REQUIRE(offloaded.exited);
  CHECK(offloaded.status == 0);
  CHECK(offloaded.losses == unlimited.losses);
  CHECK(offloaded.state_bytes < 64'000'000);  // 2 buffers of one sub-group in host memory
  MESSAGE("unlimited: losses " << unlimited.losses << ", state " << unlimited.state_bytes
                               << " B; 256 MiB: no offload " << std::string(limited.exited ? "exit " : "signal ") << limited.status
                               << ", NVMe losses " << offloaded.losses << ", state buffers " << offloaded.state_bytes
                               << " B");
}

}  // TEST_SUITE

// NVMe offload under a real memory limit, two jobs:
//  - optimizer offload (stage 2): a job whose optimizer state (~300 MB: 25M parameters x fp32 master +
//    two Adam moments) does not fit a 256 MiB cgroup-v1 memory group is killed there without offload, trains
//    there with NVMe offload (2 buffers of one ~1M-element sub-group);
//  - ZeRO-Infinity: a 49.5M-parameter stage-3 job (~600 MB of optimizer state) with its optimizer state
//    on NVMe is still killed in that group — 16-bit parameters, gradients and the state's buffers are
//    ~240 MB on top of the process — and trains there with the parameter shards on NVMe too (3 buffers
//    of the largest shard in host memory); its parameters are initialised shard by shard
//    (EngineOptions::init_seed), never whole.
// In both the losses are bitwise those of an unlimited run without offload. Each run is a forked child;
// the group is created under /sys/fs/cgroup/memory (root) and removed; the test skips when it cannot.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
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

// 49M parameters: 10 layers x 12 x 640^2 + embeddings; the largest tensor 4 x 640^2 = 1.6M elements.
gpt::GptConfig InfinityModel() {
  gpt::GptConfig c = Model();
  c.n_layer = 10;
  c.n_head = 10;
  c.d_model = 640;
  c.vocab_size = 512;
  return c;
}

std::string ConfigText(const std::string& nvme_path, int stage = 1, bool offload_params = false) {
  std::string offload;
  if (!nvme_path.empty()) {
    offload = Format(R"(, "offload_optimizer": {{"device": "nvme", "nvme_path": "{}", "buffer_count": 2,
        "pipeline_read": true, "pipeline_write": true}})", nvme_path);
  }
  if (offload_params) {
    offload += Format(R"(, "offload_param": {{"device": "nvme", "nvme_path": "{}", "buffer_count": 3,
        "buffer_size": 2000000}})", nvme_path);
  }
  // Stage 3: gather one parameter at a time, keep nothing gathered past its use, and step the
  // optimizer one parameter shard at a time.
  const char* stage3 = R"(, "stage3_prefetch_bucket_size": 0, "stage3_max_live_parameters": 2000000,
      "stage3_max_reuse_distance": 0, "stage3_param_persistence_threshold": 0, "sub_group_size": 1)";
  return Format(R"({{"train_micro_batch_size_per_gpu": 1, "bf16": {{"enabled": true}},
      "optimizer": {{"type": "AdamW", "params": {{"lr": 0.001}}}},
      "zero_optimization": {{"stage": {}, "reduce_bucket_size": 1000000 {}{}}}}})",
                stage, stage == 3 ? stage3 : R"(, "sub_group_size": 1000000)", offload);
}

struct Job {
  std::string config;
  gpt::GptConfig model = Model();
  bool init_seed = false;  // initialise through EngineOptions::init_seed instead of model.Initialize
};

struct ChildResult {
  bool exited = false;
  int status = 0;         // exit code, or the signal
  std::string losses;     // what the child printed: "<loss as hex float> ..." per step
  int64_t state_bytes = 0;
  int64_t max_rss_kib = 0;
};

// Trains 2 steps in a forked child, in cgroup `group` when not empty. Bounded: 240 s.
ChildResult RunChild(const std::string& group, const Job& job) {
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
      runtime::Config cfg = runtime::LoadConfigString(job.config, lo);
      std::ostringstream out;
      comm::RunLocalRanks(1, [&](comm::Communicator& c) {
        gpt::Gpt model(job.model);
        runtime::EngineOptions eo;
        if (job.init_seed) {
          eo.init_seed = 5;
        } else {
          model.Initialize(5);
        }
        runtime::Engine engine(model, cfg, c, eo);
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
        struct rusage ru {};
        ::getrusage(RUSAGE_SELF, &ru);
        out << " " << ru.ru_maxrss;  // KiB
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
    std::istringstream tail(r.losses.substr(bar + 2));
    tail >> r.state_bytes >> r.max_rss_kib;
    r.losses.resize(bar);
  }
  return r;
}

// A 256 MiB cgroup-v1 memory group (and a swap directory), removed on destruction; `why` says why
// there is none (not root, no controller, mkdir failed).
struct LimitedGroup {
  std::string group, swap, why;
  LimitedGroup() {
    if (::geteuid() != 0) {
      why = "needs root to create a cgroup-v1 memory group";
      return;
    }
    if (!fs::exists(std::string(kCgroupRoot) + "/memory.limit_in_bytes")) {
      why = "no cgroup-v1 memory controller at /sys/fs/cgroup/memory";
      return;
    }
    const std::string g = std::string(kCgroupRoot) + "/zerorun-offload-test-" + std::to_string(::getpid());
    if (::mkdir(g.c_str(), 0755) != 0) {
      why = "cannot create " + g + ": " + std::strerror(errno);
      return;
    }
    group = g;
    REQUIRE(WriteText(group + "/memory.limit_in_bytes", std::to_string(kLimit)));
    if (fs::exists(group + "/memory.memsw.limit_in_bytes")) {
      REQUIRE(WriteText(group + "/memory.memsw.limit_in_bytes", std::to_string(kLimit)));  // no swapping out of it
    }
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/zerorun-cgroup-nvme-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    swap = tmpl;
  }
  ~LimitedGroup() {
    if (!group.empty()) ::rmdir(group.c_str());
    std::error_code ec;
    if (!swap.empty()) fs::remove_all(swap, ec);
  }
};

}  // namespace

TEST_SUITE("slow") {

TEST_CASE("nvme offload under a 256 MiB cgroup-v1 memory limit: ~300 MB of optimizer state trains, equal losses") {
  LimitedGroup g;
  if (g.group.empty()) ZR_TEST_SKIP(g.why);
  // Stage 2: its partition's gradients are one buffer, on the host with offload. (Stage 1 keeps the
  // full gradients on the device and, offloaded, a host copy of its partition: at one rank 50 MB more.)
  const ChildResult unlimited = RunChild("", {ConfigText("", 2)});
  REQUIRE(unlimited.exited);
  REQUIRE(unlimited.status == 0);
  CHECK(unlimited.state_bytes > 300'000'000);  // fp32 master + 2 moments of 25M parameters
  const ChildResult limited = RunChild(g.group, {ConfigText("", 2)});
  CHECK_FALSE((limited.exited && limited.status == 0));  // killed (or failed) by the limit
  if (!limited.exited) CHECK(limited.status == SIGKILL);
  const ChildResult offloaded = RunChild(g.group, {ConfigText(g.swap, 2)});
  REQUIRE(offloaded.exited);
  CHECK(offloaded.status == 0);
  CHECK(offloaded.losses == unlimited.losses);
  CHECK(offloaded.state_bytes < 64'000'000);  // 2 buffers of one sub-group in host memory
  MESSAGE("unlimited: losses " << unlimited.losses << ", state " << unlimited.state_bytes
                               << " B; 256 MiB: no offload " << std::string(limited.exited ? "exit " : "signal ") << limited.status
                               << ", NVMe losses " << offloaded.losses << ", state buffers " << offloaded.state_bytes
                               << " B");
}

TEST_CASE("ZeRO-Infinity under a 256 MiB cgroup-v1 memory limit: 49M parameters train with their shards on NVMe") {
  LimitedGroup g;
  if (g.group.empty()) ZR_TEST_SKIP(g.why);
  const ChildResult unlimited = RunChild("", {ConfigText("", 3), InfinityModel(), true});
  REQUIRE(unlimited.exited);
  REQUIRE(unlimited.status == 0);
  CHECK(unlimited.state_bytes > 590'000'000);  // fp32 master + 2 moments of 49.5M parameters
  // The optimizer state on NVMe is not enough: 16-bit parameters + gradients are ~200 MB.
  const ChildResult optimizer_only = RunChild(g.group, {ConfigText(g.swap, 3), InfinityModel(), true});
  CHECK_FALSE((optimizer_only.exited && optimizer_only.status == 0));
  if (!optimizer_only.exited) CHECK(optimizer_only.status == SIGKILL);
  WriteText(g.group + "/memory.max_usage_in_bytes", "0");  // the group's peak from here on
  const ChildResult infinity = RunChild(g.group, {ConfigText(g.swap, 3, true), InfinityModel(), true});
  int64_t group_peak = -1;
  std::ifstream(g.group + "/memory.max_usage_in_bytes") >> group_peak;
  REQUIRE(infinity.exited);
  CHECK(infinity.status == 0);
  CHECK(infinity.losses == unlimited.losses);
  MESSAGE("unlimited: losses " << unlimited.losses << "; 256 MiB: optimizer on NVMe only "
                               << std::string(optimizer_only.exited ? "exit " : "signal ") << optimizer_only.status
                               << ", parameters on NVMe too: losses " << infinity.losses << ", the group's peak "
                               << group_peak << " B, peak RSS " << infinity.max_rss_kib
                               << " KiB (unlimited, no offload: " << unlimited.max_rss_kib << " KiB)");
}

}  // TEST_SUITE

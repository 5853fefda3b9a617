// Thread pool, RNG (Philox known answers, position stability), formatting, logging, ZR_CHECK.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/core/log.h"
#include "zerorun/core/rng.h"
#include "zerorun/core/thread_pool.h"
#include "zerorun/core/timer.h"

namespace zr = zerorun;

TEST_SUITE("unit") {

TEST_CASE("ParallelFor visits every index exactly once, for any size and grain") {
  zr::ThreadPool pool(3);
  for (int64_t n : {0, 1, 7, 4099, 100000}) {
    for (int64_t grain : {1, 16, 5000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.ParallelFor(0, n, grain, [&](int64_t b, int64_t e) {
        CHECK(e - b >= 1);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (auto& h : hits) REQUIRE(h.load() == 1);
    }
  }
}

TEST_CASE("ParallelFor from several threads at once, nested, and with exceptions") {
  zr::ThreadPool pool(2);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) {
        pool.ParallelFor(0, 1000, 10, [&](int64_t b, int64_t e) {
          // A nested call runs inline and must not deadlock.
          pool.ParallelFor(b, e, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
        });
      }
    });
  }
  for (auto& c : callers) c.join();
  CHECK(total.load() == 4 * 50 * 1000);
  CHECK_THROWS_AS(pool.ParallelFor(0, 100, 1,
                                   [](int64_t b, int64_t) {
                                     if (b >= 50) throw std::runtime_error("chunk failed");
                                   }),
                  std::runtime_error);
  // The pool still works after an exception.
  std::atomic<int> n{0};
  pool.ParallelFor(0, 10, 1, [&](int64_t b, int64_t e) { n += static_cast<int>(e - b); });
  CHECK(n == 10);
}

TEST_CASE("ParallelFor with idle workers polling or asleep: every job runs, none waits for a lost wake-up") {
  // Workers poll for ZERORUN_POOL_SPIN_US after a job, then sleep. Short gaps catch them polling,
  // longer ones asleep; the last job's two chunks wait for each other, so it ends only once a worker
  // has taken the second (a lost wake-up hangs here, and ctest's timeout fails it).
  char path[] = "/tmp/zr_pool_log_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  zr::SetLogFile(path);
  for (const char* spin : {"0", "50", "100000", "soon"}) {
    CAPTURE(spin);
    setenv("ZERORUN_POOL_SPIN_US", spin, 1);
    zr::ThreadPool pool(2);
    for (int rep = 0; rep < 300; ++rep) {
      std::atomic<int64_t> total{0};
      pool.ParallelFor(0, 64, 1, [&](int64_t b, int64_t e) { total += e - b; });
      REQUIRE(total.load() == 64);
      if (rep % 10 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rep % 20 == 0 ? 300 : 20));
    }
    std::atomic<int> started{0};
    pool.ParallelFor(0, 2, 1, [&](int64_t, int64_t) {
      started++;
      while (started.load() < 2) std::this_thread::yield();
    });
    CHECK(started.load() == 2);
  }
  unsetenv("ZERORUN_POOL_SPIN_US");
  zr::SetLogFile("");
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(ss.str().find("ignoring ZERORUN_POOL_SPIN_US='soon'") != std::string::npos);
  std::remove(path);
}

TEST_CASE("Philox4x32-10 matches the published known-answer vectors") {
  auto a = zr::Philox4x32(0, 0, 0);
  CHECK(a[0] == 0x6627e8d5u);
  CHECK(a[1] == 0xe169c58du);
  CHECK(a[2] == 0xbc57ac4cu);
  CHECK(a[3] == 0x9b00dbd8u);
  auto b = zr::Philox4x32(~0ull, ~0ull, ~0ull);
  CHECK(b[0] == 0x408f276du);
  CHECK(b[1] == 0x41c83b0eu);
  CHECK(b[2] == 0xa20bc7c6u);
  CHECK(b[3] == 0x6d5451fdu);
  auto c = zr::Philox4x32((0x299f31d0ull << 32) | 0xa4093822ull, (0x03707344ull << 32) | 0x13198a2eull,
                          (0x85a308d3ull << 32) | 0x243f6a88ull);
  CHECK(c[0] == 0xd16cfe09u);
  CHECK(c[1] == 0x94fdccebu);
  CHECK(c[2] == 0x5001e420u);
  CHECK(c[3] == 0x24126ea1u);
}

TEST_CASE("random fills are position-stable and have the right moments") {
  const size_t n = 200000;
  std::vector<float> all(n), tail(n - 1000);
  zr::FillNormal(all.data(), n, 42, 7, 0, 0.0f, 1.0f);
  zr::FillNormal(tail.data(), tail.size(), 42, 7, 1000, 0.0f, 1.0f);
  for (size_t i = 0; i < tail.size(); ++i) REQUIRE(tail[i] == all[i + 1000]);
  double mean = 0, var = 0;
  for (float v : all) mean += v;
  mean /= n;
  for (float v : all) var += (v - mean) * (v - mean);
  var /= n;
  CHECK(std::fabs(mean) < 0.01);
  CHECK(std::fabs(var - 1.0) < 0.02);

  std::vector<float> u(n);
  zr::FillUniform(u.data(), n, 1, 2, 0, -1.0f, 3.0f);
  double umean = 0;
  for (float v : u) {
    REQUIRE(v >= -1.0f);
    REQUIRE(v < 3.0f);
    umean += v;
  }
  CHECK(std::fabs(umean / n - 1.0) < 0.02);
  // Different streams and seeds differ.
  std::vector<float> other(16);
  zr::FillNormal(other.data(), 16, 42, 8, 0, 0.0f, 1.0f);
  CHECK(other[0] != all[0]);

  zr::Rng rng(42, 7);
  std::vector<uint32_t> words;
  for (int i = 0; i < 9; ++i) words.push_back(rng.NextU32());
  auto block2 = zr::Philox4x32(42, 7, 2);
  CHECK(words[8] == block2[0]);
  CHECK(zr::HashName("h.3.attn.qkv.weight") == zr::HashName("h.3.attn.qkv.weight"));
  CHECK(zr::HashName("h.3.attn.qkv.weight") != zr::HashName("h.3.attn.qkv.bias"));
}

TEST_CASE("Format substitutes placeholders and keeps braces") {
  CHECK(zr::Format("a {} b {}", 1, "x") == "a 1 b x");
  CHECK(zr::Format("{{literal}} {}", 2.5) == "{literal} 2.5");
  CHECK(zr::Format("missing {} {}", 1) == "missing 1 {}");
  CHECK(zr::Format("extra", 1) == "extra 1");
  CHECK(zr::FormatBytes(1536) == "1.50 KiB");
  CHECK(zr::FormatBytes(12) == "12 B");
}

TEST_CASE("log lines carry the rank and respect the level") {
  char path[] = "/tmp/zr_log_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  zr::LogLevel saved = zr::GetLogLevel();
  zr::SetLogLevel(zr::LogLevel::kInfo);
  zr::SetLogFile(path);
  zr::SetThreadLogRank(3);
  ZR_INFO("hello {}", 42);
  ZR_DEBUG("not shown");
  zr::SetThreadLogRank(-1);
  zr::SetLogFile("");
  zr::SetLogLevel(saved);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  CHECK(text.find("[rank 3] [INFO] hello 42") != std::string::npos);
  CHECK(text.find("not shown") == std::string::npos);
  std::remove(path);
  CHECK(zr::ParseLogLevel("WARN") == zr::LogLevel::kWarning);
  CHECK_THROWS_AS(zr::ParseLogLevel("loud"), zr::InvalidArgument);
}

TEST_CASE("ZR_CHECK aborts with file and line; errors carry their message") {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGABRT, SIG_DFL);  // doctest's crash handler must not report the child's abort
    if (std::freopen("/dev/null", "w", stderr) == nullptr) _exit(3);
    ZR_CHECK(1 + 1 == 3, "math is {}", "broken");
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  try {
    ZR_THROW(zr::ConfigError, "{}: expected integer, found \"{}\"", "zero_optimization.stage", "two");
  } catch (const zr::Error& e) {
    CHECK(std::string(e.what()) == "zero_optimization.stage: expected integer, found \"two\"");
  }
  CHECK(zr::ErrnoMessage("open /x", ENOENT) == "open /x: No such file or directory");
}

TEST_CASE("timers accumulate named intervals") {
  zr::Timers timers;
  timers.Add("forward", 2.0);
  timers.Add("forward", 3.0);
  timers.Start("step");
  CHECK(timers.Stop("step") >= 0.0);
  CHECK(timers.Stop("never") == 0.0);
  CHECK(timers.Get("forward").total_ms == 5.0);
  CHECK(timers.Get("forward").count == 2);
  CHECK(timers.Format({"forward", "missing"}) == "forward: 5.00 ms");
  timers.Reset();
  CHECK(timers.All().empty());
}

}  // TEST_SUITE

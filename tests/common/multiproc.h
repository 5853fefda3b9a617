// A fork/exec harness for tests that need real processes (the `ucx` backend, the launcher, faults).
//
// Inside a doctest TEST_CASE, RunMultiproc(options, body) re-executes the test binary once per rank
// with a filter selecting this same test case and the launcher's environment (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_SIZE, MASTER_ADDR, MASTER_PORT, ZERORUN_JOB_TOKEN, ZERORUN_RESTART) plus
// ZERORUN_MP_CHILD. In a child, the same RunMultiproc call runs body(rank, world_size) and returns (the
// child's doctest checks decide its exit status; an exception escaping body fails the child). In the
// parent it waits for every child until the deadline, SIGKILLs stragglers, and returns each rank's
// exit status, so the test can assert on them (`AllSucceeded`).
//
// Rules: test case names must not contain ',', '*', '?' or '\' (doctest filter syntax); a test case
// may call RunMultiproc several times (calls are numbered, a child runs only its own call's body);
// use CHECK (not REQUIRE) inside body. Label such tests "multiproc".
#pragma once

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace zerorun::test {

struct MultiprocOptions {
  int world_size = 2;
  // Children still running after this many seconds are SIGKILLed (and reported as timed out).
  double deadline_s = 60;
  // Extra environment for every rank (e.g. UCX_TLS, ZERORUN_COMM_TIMEOUT).
  std::map<std::string, std::string> env;
  // Per-rank additions, called in the parent before each fork.
  std::function<void(int rank, std::map<std::string, std::string>& env)> rank_env;
  // When >= 0: once some rank has exited, ranks still running this many seconds later are SIGKILLed
  // (for tests that SIGSTOP a rank on purpose and only care about the others).
  double linger_s = -1;
  // MASTER_PORT; 0 picks a free port.
  int master_port = 0;
  std::string job_token = "multiproc-test-token";
};

struct RankResult {
  int rank = -1;
  pid_t pid = -1;
  int exit_code = -1;     // valid when exited
  int term_signal = 0;    // the signal that ended it, 0 if it exited
  bool exited = false;
  bool timed_out = false;  // killed by the harness at the deadline
  std::string Describe() const {
    if (timed_out) return "rank " + std::to_string(rank) + " timed out (killed by the harness)";
    if (exited) return "rank " + std::to_string(rank) + " exited with " + std::to_string(exit_code);
    return "rank " + std::to_string(rank) + " killed by signal " + std::to_string(term_signal);
  }
};

inline bool IsMultiprocChild() { return std::getenv("ZERORUN_MP_CHILD") != nullptr; }

// A TCP port that was free a moment ago (bind to 0, read it, close).
inline int PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

namespace detail {
inline int& MultiprocCallCounter() {
  static int counter = 0;
  static const void* test = nullptr;
  const void* current = doctest::getContextOptions()->currentTest;
  if (current != test) {  // a new test case: number its calls from 0
    test = current;
    counter = 0;
  }
  return counter;
}
}  // namespace detail

inline std::vector<RankResult> RunMultiproc(const MultiprocOptions& options,
                                            const std::function<void(int rank, int world_size)>& body) {
  const int call = detail::MultiprocCallCounter()++;
  if (IsMultiprocChild()) {
    const char* c = std::getenv("ZERORUN_MP_CALL");
    if (!c || std::atoi(c) != call) return {};
    int rank = std::atoi(std::getenv("RANK"));
    int world = std::atoi(std::getenv("WORLD_SIZE"));
    try {
      body(rank, world);
    } catch (const std::exception& e) {
      FAIL_CHECK("rank " << rank << ": uncaught exception: " << std::string(e.what()));
    }
    return {};
  }
  const char* name = doctest::getContextOptions()->currentTest->m_name;
  const int port = options.master_port ? options.master_port : PickFreePort();
  std::vector<RankResult> results(static_cast<size_t>(options.world_size));
  char exe[4096];
  ssize_t exe_len = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (exe_len <= 0) {
    FAIL("multiproc: cannot read /proc/self/exe");
    return results;
  }
  exe[exe_len] = '\0';
  std::string filter = std::string("--test-case=") + name;
  for (int r = 0; r < options.world_size; ++r) {
    std::map<std::string, std::string> env = options.env;
    env["ZERORUN_MP_CHILD"] = "1";
    env["ZERORUN_MP_CALL"] = std::to_string(call);
    env["RANK"] = std::to_string(r);
    env["WORLD_SIZE"] = std::to_string(options.world_size);
    env["LOCAL_RANK"] = std::to_string(r);
    env["LOCAL_SIZE"] = std::to_string(options.world_size);
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = std::to_string(port);
    env["ZERORUN_JOB_TOKEN"] = options.job_token;
    env["ZERORUN_RESTART"] = "0";
    if (options.rank_env) options.rank_env(r, env);
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      ::execl(exe, exe, filter.c_str(), "--no-version=true", "--no-intro=true", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    results[static_cast<size_t>(r)].rank = r;
    results[static_cast<size_t>(r)].pid = pid;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.deadline_s);
  int remaining = options.world_size;
  auto first_exit = std::chrono::steady_clock::time_point::max();
  while (remaining > 0) {
    for (auto& res : results) {
      if (res.exited || res.term_signal || res.pid <= 0) continue;
      int status = 0;
      pid_t p = ::waitpid(res.pid, &status, WNOHANG);
      if (p == res.pid) {
        if (WIFEXITED(status)) {
          res.exited = true;
          res.exit_code = WEXITSTATUS(status);
        } else if (WIFSIGNALED(status)) {
          res.term_signal = WTERMSIG(status);
        }
        --remaining;
        first_exit = std::min(first_exit, std::chrono::steady_clock::now());
      }
    }
    if (remaining == 0) break;
    const bool lingered = options.linger_s >= 0 && first_exit != std::chrono::steady_clock::time_point::max() &&
                          std::chrono::steady_clock::now() > first_exit + std::chrono::duration<double>(options.linger_s);
    if (lingered || std::chrono::steady_clock::now() > deadline) {
      for (auto& res : results) {
        if (res.exited || res.term_signal || res.pid <= 0) continue;
        ::kill(res.pid, SIGKILL);
        int status = 0;
        ::waitpid(res.pid, &status, 0);
        res.timed_out = !lingered;
        res.term_signal = SIGKILL;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return results;
}

inline std::vector<RankResult> RunMultiproc(int world_size, const std::function<void(int, int)>& body) {
  MultiprocOptions o;
  o.world_size = world_size;
  return RunMultiproc(o, body);
}

// True (and CHECKs pass) when every rank exited 0; otherwise each failure is reported.
inline bool AllSucceeded(const std::vector<RankResult>& results) {
  if (IsMultiprocChild()) return true;
  bool ok = true;
  for (const auto& r : results) {
    if (!(r.exited && r.exit_code == 0)) {
      FAIL_CHECK(r.Describe());
      ok = false;
    }
  }
  return ok;
}

}  // namespace zerorun::test

// Helpers for the nn tests: a death-test runner (fork, expect abort, capture stderr) and finite
// differences.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace zerorun::nn::testing {

struct DeathResult {
  bool aborted = false;  // killed by SIGABRT
  std::string stderr_text;
};

// Runs `fn` in a forked child and reports whether it aborted, with what it wrote to stderr.
inline DeathResult RunExpectingAbort(const std::function<void()>& fn) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    signal(SIGABRT, SIG_DFL);
    fn();
    _exit(0);
  }
  close(fds[1]);
  DeathResult r;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) r.stderr_text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  return r;
}

}  // namespace zerorun::nn::testing

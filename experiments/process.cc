#include "zerorun/experiments/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "zerorun/core/error.h"

namespace zerorun::experiments {

pid_t SpawnToLog(const std::vector<std::string>& argv, const std::string& log_path, const EnvVars& env) {
  ZR_CHECK(!argv.empty(), "empty command");
  int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ZR_THROW(IoError, "cannot create the trial log '{}': {}", log_path, std::strerror(errno));
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(fd);
    ZR_THROW(IoError, "fork for a trial failed: {}", std::strerror(e));
  }
  if (pid == 0) {  // child: only async-signal-safe calls until exec
    ::setpgid(0, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ::execvp(args[0], args.data());
    const char* msg = "zerorun-sweep: cannot start the trial command: ";
    (void)!::write(2, msg, std::strlen(msg));
    (void)!::write(2, args[0], std::strlen(args[0]));
    (void)!::write(2, ": ", 2);
    const char* why = std::strerror(errno);
    (void)!::write(2, why, std::strlen(why));
    (void)!::write(2, "\n", 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so a stop right after the fork reaches the group
  ::close(fd);
  return pid;
}

bool PollExited(pid_t pid, std::string* how) {
  int status = 0;
  pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == 0) return false;
  if (r < 0) {
    *how = Format("lost the process: {}", std::strerror(errno));
    return true;
  }
  if (WIFEXITED(status)) {
    *how = WEXITSTATUS(status) == 0 ? "" : Format("exit status {}", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    *how = Format("killed by signal {} ({})", WTERMSIG(status), sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?");
  } else {
    *how = "ended abnormally";
  }
  return true;
}

void StopProcessGroup(pid_t pid, int grace_ms) {
  ::kill(-pid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  std::string how;
  while (std::chrono::steady_clock::now() < deadline) {
    if (PollExited(pid, &how)) {
      ::kill(-pid, SIGKILL);  // stragglers of the group
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(-pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

}  // namespace zerorun::experiments

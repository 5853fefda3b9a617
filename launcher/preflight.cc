// ssh preflight and a small parallel run-and-capture helper.
#include "zerorun/launcher/preflight.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/launcher/commands.h"

namespace zerorun::launcher {

std::vector<Captured> RunAndCapture(const std::vector<std::vector<std::string>>& commands,
                                    const std::vector<std::pair<std::string, std::string>>& extra_env, double timeout_s) {
  std::vector<Captured> out(commands.size());
  std::vector<pid_t> pids(commands.size(), -1);
  std::vector<int> fds(commands.size(), -1);
  for (size_t i = 0; i < commands.size(); ++i) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) ZR_THROW(IoError, "{}", ErrnoMessage("pipe", errno));
    std::vector<std::string> args = commands[i];
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = fork();
    if (pid < 0) ZR_THROW(IoError, "{}", ErrnoMessage("fork", errno));
    if (pid == 0) {
      setpgid(0, 0);
      for (const auto& [k, v] : extra_env) setenv(k.c_str(), v.c_str(), 1);
      int devnull = open("/dev/null", O_RDONLY);
      dup2(devnull, 0);
      dup2(p[1], 1);
      dup2(p[1], 2);
      signal(SIGPIPE, SIG_DFL);
      execvp(argv[0], argv.data());
      const char* msg = "cannot execute the command (is it installed?)\n";
      (void)!write(2, msg, strlen(msg));
      _exit(127);
    }
    close(p[1]);
    pids[i] = pid;
    fds[i] = p[0];
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  size_t open_count = commands.size();
  while (open_count > 0) {
    std::vector<pollfd> pfds;
    std::vector<size_t> who;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i] >= 0) {
        pfds.push_back({fds[i], POLLIN, 0});
        who.push_back(i);
      }
    }
    long left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    int n = poll(pfds.data(), pfds.size(), static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (size_t k = 0; k < pfds.size(); ++k) {
      if (pfds[k].revents == 0) continue;
      char buf[4096];
      ssize_t got = read(fds[who[k]], buf, sizeof buf);
      if (got > 0) {
        out[who[k]].output.append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[who[k]]);
        fds[who[k]] = -1;
        --open_count;
      }
    }
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (fds[i] >= 0) {  // timed out
      kill(-pids[i], SIGKILL);
      close(fds[i]);
    }
    int status = 0;
    waitpid(pids[i], &status, 0);
    if (fds[i] < 0 && WIFEXITED(status)) out[i].exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) out[i].exit_code = -1;
  }
  return out;
}

std::string SshPreflight(const LaunchOptions& opts, const World& world, const std::string& self) {
  bool pdsh = opts.launcher == "pdsh";
  std::string cwd = std::filesystem::current_path().string();
  std::string check = "test -x " + ShellQuote(self) + " || { echo \"zerorun-preflight: " + self +
                      " is missing or not executable on this host (zerorun must be installed at the same path "
                      "on every node)\"; exit 3; }; cd " + ShellQuote(cwd) +
                      " 2>/dev/null || { echo \"zerorun-preflight: the working directory " + cwd +
                      " does not exist on this host\"; exit 4; }; ";
  if (pdsh) {
    check += "test \"$LC_ZERORUN_JOB_TOKEN\" = preflight || { echo \"zerorun-preflight: sshd did not accept "
             "LC_ZERORUN_JOB_TOKEN (pdsh passes the job token that way): add 'AcceptEnv LC_*' to sshd_config or use "
             "--launcher ssh\"; exit 5; }; ";
  }
  check += "echo zerorun-preflight-addr $(hostname -I 2>/dev/null)";
  std::vector<std::vector<std::string>> commands;
  for (const Node& n : world.nodes) {
    std::vector<std::string> argv;
    if (pdsh) {  // pdsh's ssh takes its options from PDSH_SSH_ARGS_APPEND, not --launcher_args
      LaunchOptions ssh_opts = opts;
      const char* append = std::getenv("PDSH_SSH_ARGS_APPEND");
      ssh_opts.launcher_args = append ? append : "";
      argv = SshArgv(ssh_opts, n.host, check);
    } else {
      argv = SshArgv(opts, n.host, check);
    }
    argv.insert(argv.begin() + 1, {"-o", "ConnectTimeout=10"});
    if (pdsh) argv.insert(argv.begin() + 1, {"-o", "SendEnv=LC_ZERORUN_JOB_TOKEN"});
    commands.push_back(argv);
  }
  ZR_INFO("preflight: checking ssh to {} host(s)", world.nodes.size());
  std::vector<Captured> results =
      RunAndCapture(commands, {{"LC_ZERORUN_JOB_TOKEN", "preflight"}}, 20.0);
  std::string errors;
  std::string first_addr;
  for (size_t i = 0; i < results.size(); ++i) {
    const Captured& r = results[i];
    const std::string& host = world.nodes[i].host;
    std::string reproduce = ShellJoin(std::vector<std::string>(commands[i].begin(), commands[i].end() - 1)) + " true";
    std::string out = Trim(r.output);
    if (r.exit_code == 0) {
      size_t at = out.rfind("zerorun-preflight-addr");
      if (i == 0 && at != std::string::npos) {
        std::istringstream words(out.substr(at + 22));
        words >> first_addr;
      }
      continue;
    }
    std::string why;
    if (r.exit_code == -1) {
      why = "no answer within 20 s (host down, firewall, or ssh waiting for input)";
    } else if (r.exit_code == 255) {
      why = "ssh could not log in (exit 255). Passwordless ssh must work: try `" + reproduce + "`";
    } else if (r.exit_code == 127 && out.find("cannot execute") != std::string::npos) {
      why = "the ssh client is not installed here (Debian package openssh-client)";
    } else {
      why = Format("the check failed (exit {})", r.exit_code);
    }
    errors += Format("\n  host '{}' (node {}): {}", host, i, why);
    if (!out.empty()) errors += "\n    output: " + out;
  }
  if (!errors.empty()) {
    ZR_THROW(CommError, "ssh preflight failed for {} (skip it with --no_ssh_check):{}",
             world.nodes.size() == 1 ? "the host" : "some hosts", errors);
  }
  return first_addr;
}

}  // namespace zerorun::launcher

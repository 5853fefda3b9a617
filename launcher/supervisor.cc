// Process supervision: fork/exec into process groups, output pumping, failure detection, teardown.
// Single-threaded: one poll() loop over the children's output pipes and a self-pipe fed by the
// signal handlers (SIGCHLD wakes the loop to reap; SIGINT/SIGTERM/SIGHUP start a teardown).
#include "zerorun/launcher/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"

extern char** environ;

namespace zerorun::launcher {
namespace {

int g_sig_pipe[2] = {-1, -1};
volatile sig_atomic_t g_stop_signal = 0;

void OnSignal(int sig) {
  int saved = errno;
  if (sig != SIGCHLD && g_stop_signal == 0) g_stop_signal = sig;
  unsigned char b = static_cast<unsigned char>(sig);
  if (g_sig_pipe[1] >= 0) (void)!write(g_sig_pipe[1], &b, 1);
  errno = saved;
}

void WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 100);
    } else {
      return;  // EPIPE and friends: the reader is gone; output is best effort
    }
  }
}

using Clock = std::chrono::steady_clock;

// The state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped, 't' traced, 'Z', ...), 0 if unknown.
char ProcessState(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  std::getline(stat, content);
  size_t paren = content.rfind(')');
  return paren != std::string::npos && paren + 2 < content.size() ? content[paren + 2] : 0;
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGPIPE: return "SIGPIPE";
    default: return "signal";
  }
}

// Per-child bookkeeping of the loop.
struct Running {
  pid_t pid = -1;
  int out_fd = -1;    // read end of stdout+stderr, -1 once closed
  int in_fd = -1;     // write end of stdin (keep_stdin_open), -1 once closed
  int log_fd = -1;
  std::string partial;
};

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// environ with `set` applied and `unset` removed, as "K=V" strings.
std::vector<std::string> BuildEnv(const ChildSpec& spec) {
  std::set<std::string> drop(spec.env_unset.begin(), spec.env_unset.end());
  for (const auto& kv : spec.env_set) drop.insert(kv.first);
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv = *e;
    if (drop.count(kv.substr(0, kv.find('='))) == 0) out.push_back(kv);
  }
  for (const auto& [k, v] : spec.env_set) out.push_back(k + "=" + v);
  return out;
}

// Forks and execs one child. Returns its pid; throws IoError on pipe/fork failure.
Running Spawn(const ChildSpec& spec) {
  Running r;
  int out_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) ZR_THROW(IoError, "{}", ErrnoMessage("pipe for " + spec.name, errno));
  int in_pipe[2] = {-1, -1};
  bool want_stdin = !spec.stdin_data.empty() || spec.keep_stdin_open;
  if (want_stdin && pipe2(in_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    ZR_THROW(IoError, "{}", ErrnoMessage("pipe for " + spec.name, err));
  }
  if (!spec.log_path.empty()) {
    r.log_fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (r.log_fd < 0) {
      int err = errno;
      close(out_pipe[0]);
      close(out_pipe[1]);
      if (want_stdin) {
        close(in_pipe[0]);
        close(in_pipe[1]);
      }
      ZR_THROW(IoError, "{}", ErrnoMessage("cannot open log file " + spec.log_path + " for " + spec.name, err));
    }
  }
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env_strings = BuildEnv(spec);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : spec.cpus) CPU_SET(c, &cpus);
  std::string exec_error = "zerorun: cannot execute '" + spec.argv[0] + "': ";
  pid_t parent = getpid();

  pid_t pid = fork();
  if (pid < 0) ZR_THROW(IoError, "{}", ErrnoMessage("fork for " + spec.name, errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(125);  // the launcher died before prctl took effect
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(want_stdin ? in_pipe[0] : devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(out_pipe[1], 2);
    if (!spec.cpus.empty()) sched_setaffinity(0, sizeof cpus, &cpus);
    execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    (void)!write(2, exec_error.data(), exec_error.size());
    const char* msg = strerror(err);
    (void)!write(2, msg, strlen(msg));
    (void)!write(2, "\n", 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also done by the child; whichever runs first wins, both are fine
  close(out_pipe[1]);
  r.pid = pid;
  r.out_fd = out_pipe[0];
  fcntl(r.out_fd, F_SETFL, fcntl(r.out_fd, F_GETFL) | O_NONBLOCK);
  if (want_stdin) {
    close(in_pipe[0]);
    WriteAll(in_pipe[1], spec.stdin_data);
    if (spec.keep_stdin_open) {
      r.in_fd = in_pipe[1];
    } else {
      close(in_pipe[1]);
    }
  }
  return r;
}

}  // namespace

void InstallSignalHandlers() {
  if (g_sig_pipe[0] >= 0) return;
  if (pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) ZR_THROW(IoError, "{}", ErrnoMessage("signal pipe", errno));
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int PendingStopSignal() { return g_stop_signal; }

std::string DescribeStatus(const ChildResult& r) {
  if (r.term_signal != 0) return Format("signal {} ({})", r.term_signal, SignalName(r.term_signal));
  return Format("exit code {}", r.exit_code);
}

JobOutcome RunChildren(const std::vector<ChildSpec>& specs, const SupervisorOptions& opts) {
  InstallSignalHandlers();
  JobOutcome outcome;
  outcome.children.resize(specs.size());
  std::vector<Running> run(specs.size());

  bool teardown = false;
  bool killed = false;
  Clock::time_point kill_deadline{};
  auto start_teardown = [&](int sig) {
    if (teardown) return;
    teardown = true;
    kill_deadline = Clock::now() + std::chrono::milliseconds(static_cast<long>(opts.kill_grace_s * 1000));
    for (size_t i = 0; i < run.size(); ++i) {
      CloseFd(&run[i].in_fd);
      if (run[i].pid > 0 && !outcome.children[i].exited && !opts.stop_by_closing_stdin) {
        kill(-run[i].pid, sig);
        kill(run[i].pid, sig);
        kill(-run[i].pid, SIGCONT);  // a stopped (SIGSTOPped, suspended) rank handles it now, not at SIGKILL
      }
    }
  };

  try {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (g_stop_signal != 0) break;
      run[i] = Spawn(specs[i]);
      outcome.children[i].pid = run[i].pid;
    }
  } catch (const Error&) {
    for (size_t i = 0; i < run.size(); ++i) {
      if (run[i].pid <= 0) continue;
      kill(-run[i].pid, SIGKILL);
      kill(run[i].pid, SIGKILL);
      waitpid(run[i].pid, nullptr, 0);
      CloseFd(&run[i].in_fd);
      CloseFd(&run[i].out_fd);
      CloseFd(&run[i].log_fd);
    }
    throw;
  }
  for (size_t i = 0; i < run.size(); ++i) {
    if (run[i].pid < 0) outcome.children[i].exited = true;  // never started (stopped early)
  }

  auto emit_line = [&](size_t i, const std::string& line) {
    ChildResult& res = outcome.children[i];
    const std::string& marker = specs[i].failure_marker;
    if (!marker.empty() && !teardown && line.find(marker) != std::string::npos) {
      outcome.failed_child = static_cast<int>(i);
      outcome.marker_exit_code = std::atoi(line.c_str() + line.find(marker) + marker.size());
      if (outcome.marker_exit_code == 0) outcome.marker_exit_code = 1;
      ZR_ERROR("{} reported a failure ({}); stopping the job", specs[i].name, line);
      start_teardown(SIGTERM);
    }
    res.tail.push_back(line.size() > 2000 ? line.substr(0, 2000) + "..." : line);
    while (static_cast<int>(res.tail.size()) > opts.tail_lines) res.tail.pop_front();
    if (run[i].log_fd >= 0) {
      WriteAll(run[i].log_fd, line + "\n");
    } else {
      WriteAll(specs[i].forward_to_stderr ? 2 : 1, specs[i].line_prefix + line + "\n");
    }
  };
  auto pump = [&](size_t i) {  // reads what is there; closes on EOF
    char buf[65536];
    while (run[i].out_fd >= 0) {
      ssize_t n = read(run[i].out_fd, buf, sizeof buf);
      if (n > 0) {
        run[i].partial.append(buf, static_cast<size_t>(n));
        size_t pos;
        while ((pos = run[i].partial.find('\n')) != std::string::npos) {
          emit_line(i, run[i].partial.substr(0, pos));
          run[i].partial.erase(0, pos + 1);
        }
        if (run[i].partial.size() > 65536) {
          emit_line(i, run[i].partial);
          run[i].partial.clear();
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (!run[i].partial.empty()) emit_line(i, run[i].partial);
      run[i].partial.clear();
      CloseFd(&run[i].out_fd);
    }
  };
  std::vector<std::string> stopped_notes;  // children found stopped when the job failed
  auto reap = [&] {
    // Children that ended since the last pass; when several did, a death by a signal is the cause
    // and an exit code the consequence (ranks exit 1 after noticing a peer died).
    int first_failed = -1;
    for (size_t i = 0; i < run.size(); ++i) {
      ChildResult& res = outcome.children[i];
      if (res.exited) continue;
      int status = 0;
      pid_t got = waitpid(run[i].pid, &status, WNOHANG);
      if (got != run[i].pid) continue;
      res.exited = true;
      if (WIFSIGNALED(status)) {
        res.term_signal = WTERMSIG(status);
      } else {
        res.exit_code = WEXITSTATUS(status);
      }
      bool failed = res.term_signal != 0 || res.exit_code != 0;
      if (failed && (first_failed < 0 || (res.term_signal != 0 && outcome.children[first_failed].term_signal == 0))) {
        first_failed = static_cast<int>(i);
      }
    }
    if (first_failed >= 0 && !teardown) {
      outcome.failed_child = first_failed;
      ZR_ERROR("{} failed with {}; stopping the job", specs[first_failed].name,
               DescribeStatus(outcome.children[first_failed]));
      for (size_t i = 0; i < run.size(); ++i) {
        if (outcome.children[i].exited || run[i].pid <= 0) continue;
        char state = ProcessState(run[i].pid);
        if (state == 'T' || state == 't') {
          stopped_notes.push_back(Format("zerorun: {} (pid {}) was stopped (SIGSTOP, job control or a debugger) when "
                                         "the job failed", specs[i].name, run[i].pid));
        }
      }
      start_teardown(SIGTERM);
    }
  };
  auto all_exited = [&] {
    for (const ChildResult& r : outcome.children) {
      if (!r.exited) return false;
    }
    return true;
  };

  int watch_fd = opts.watch_fd;
  bool swept = false;
  Clock::time_point drain_deadline{};
  while (true) {
    if (g_stop_signal != 0 && !teardown) {
      outcome.stop_signal = g_stop_signal;
      ZR_WARN("received {}; stopping the job", SignalName(g_stop_signal));
      start_teardown(g_stop_signal == SIGHUP ? SIGTERM : g_stop_signal);
    }
    reap();
    if (teardown && !killed && Clock::now() >= kill_deadline) {
      killed = true;
      for (size_t i = 0; i < run.size(); ++i) {
        if (!outcome.children[i].exited) {
          ZR_WARN("{} did not stop within {} s of SIGTERM; sending SIGKILL", specs[i].name, opts.kill_grace_s);
          kill(-run[i].pid, SIGKILL);
          kill(run[i].pid, SIGKILL);
        }
      }
    }
    if (all_exited()) {
      if (!swept) {  // leftovers in the ranks' process groups go with them
        swept = true;
        for (size_t i = 0; i < run.size(); ++i) {
          if (run[i].pid > 0) kill(-run[i].pid, SIGKILL);
          CloseFd(&run[i].in_fd);
        }
        drain_deadline = Clock::now() + std::chrono::seconds(2);
      }
      bool open_fds = false;
      for (const Running& r : run) open_fds = open_fds || r.out_fd >= 0;
      if (!open_fds || Clock::now() >= drain_deadline) break;
    }

    std::vector<pollfd> fds;
    std::vector<int> owner;  // index into run, -1 signal pipe, -2 watch fd
    fds.push_back({g_sig_pipe[0], POLLIN, 0});
    owner.push_back(-1);
    if (watch_fd >= 0 && !teardown) {
      fds.push_back({watch_fd, POLLIN, 0});
      owner.push_back(-2);
    }
    for (size_t i = 0; i < run.size(); ++i) {
      if (run[i].out_fd >= 0) {
        fds.push_back({run[i].out_fd, POLLIN, 0});
        owner.push_back(static_cast<int>(i));
      }
    }
    int timeout_ms = -1;
    auto until = [&](Clock::time_point t) {
      long ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count() + 1;
      ms = std::max(0L, ms);
      timeout_ms = timeout_ms < 0 ? static_cast<int>(ms) : std::min(timeout_ms, static_cast<int>(ms));
    };
    if (teardown && !killed) until(kill_deadline);
    if (swept) until(drain_deadline);
    if (teardown) until(Clock::now() + std::chrono::milliseconds(200));  // reap even if SIGCHLD raced
    int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) ZR_THROW(IoError, "{}", ErrnoMessage("poll in the launcher", errno));
    if (n <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      if (owner[k] == -1) {
        unsigned char drain[64];
        while (read(g_sig_pipe[0], drain, sizeof drain) > 0) {
        }
      } else if (owner[k] == -2) {
        char buf[256];
        ssize_t got = read(watch_fd, buf, sizeof buf);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
          ZR_WARN("the launcher that started this node closed the connection; stopping this node's ranks");
          outcome.stopped_by_watch = true;
          watch_fd = -1;
          start_teardown(SIGTERM);
        }
      } else {
        pump(static_cast<size_t>(owner[k]));
      }
    }
  }
  for (Running& r : run) {
    CloseFd(&r.out_fd);
    CloseFd(&r.in_fd);
    CloseFd(&r.log_fd);
  }

  if (outcome.failed_child >= 0) {
    const ChildResult& res = outcome.children[static_cast<size_t>(outcome.failed_child)];
    const ChildSpec& spec = specs[static_cast<size_t>(outcome.failed_child)];
    outcome.exit_code = res.term_signal != 0 ? 128 + res.term_signal : res.exit_code;
    if (outcome.marker_exit_code > 0) outcome.exit_code = outcome.marker_exit_code;
    std::string report = Format("zerorun: job failed: {} (pid {}) ended with {}", spec.name, res.pid, DescribeStatus(res));
    if (!spec.log_path.empty()) report += Format("; full output in {}", spec.log_path);
    if (!res.tail.empty()) {
      report += Format("\nzerorun: last {} line(s) of {}:", res.tail.size(), spec.name);
      for (const std::string& line : res.tail) report += "\n  | " + line;
    }
    for (const std::string& note : stopped_notes) report += "\n" + note;
    outcome.report = report;
  } else if (outcome.stop_signal != 0) {
    outcome.exit_code = 128 + outcome.stop_signal;
    outcome.report = Format("zerorun: job stopped by {}", SignalName(outcome.stop_signal));
  } else if (outcome.stopped_by_watch) {
    outcome.exit_code = 128 + SIGTERM;
    outcome.report = "zerorun: this node's ranks were stopped at the launcher's request (connection closed)";
  }
  return outcome;
}

int KillStrayChildren() {
  int killed = 0;
  pid_t self = getpid();
  for (int round = 0; round < 3; ++round) {
    std::vector<pid_t> strays;
    DIR* d = opendir("/proc");
    if (d == nullptr) return killed;
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      long pid = std::strtol(e->d_name, &end, 10);
      if (*end != '\0' || pid <= 0) continue;
      std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
      std::string content;
      std::getline(stat, content);
      size_t paren = content.rfind(')');
      if (paren == std::string::npos) continue;
      char state = 0;
      long ppid = 0;
      if (std::sscanf(content.c_str() + paren + 1, " %c %ld", &state, &ppid) != 2) continue;
      if (ppid != self) continue;
      if (state == 'Z') {
        waitpid(static_cast<pid_t>(pid), nullptr, WNOHANG);  // already dead: just reap
      } else {
        strays.push_back(static_cast<pid_t>(pid));
      }
    }
    closedir(d);
    if (strays.empty()) break;
    for (pid_t p : strays) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
      ++killed;
    }
  }
  return killed;
}

}  // namespace zerorun::launcher

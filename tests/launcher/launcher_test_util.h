// Helpers for the launcher tests that run the real `zerorun` executable: run it with a timeout and
// capture its output, read the probe's records, and inspect the process table.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace zrtest {

inline std::string BinDir() {
  const char* dir = std::getenv("ZERORUN_TEST_BINARY_DIR");
  return std::string(dir ? dir : ".") + "/bin";
}
inline std::string Zerorun() { return BinDir() + "/zerorun"; }
inline std::string Probe() { return BinDir() + "/zr_env_probe"; }

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal or timed out
  bool timed_out = false;
  std::string output;  // stdout + stderr
  double seconds = 0;
};

// A started zerorun process whose output is being collected.
struct Running {
  pid_t pid = -1;
  int fd = -1;
  std::chrono::steady_clock::time_point start;
};

// Starts `argv` (argv[0] a path) with `env` added, its stdout and stderr going to a pipe.
inline Running StartArgv(std::vector<std::string> all, const std::vector<std::string>& env = {}) {
  int p[2];
  if (pipe(p) != 0) std::abort();
  Running r;
  r.start = std::chrono::steady_clock::now();
  r.pid = fork();
  if (r.pid == 0) {
    for (const std::string& kv : env) putenv(const_cast<char*>(kv.c_str()));
    dup2(p[1], 1);
    dup2(p[1], 2);
    close(p[0]);
    close(p[1]);
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(p[1]);
  r.fd = p[0];
  return r;
}

// Starts the zerorun launcher with `args`.
inline Running Start(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  std::vector<std::string> all = {Zerorun()};
  all.insert(all.end(), args.begin(), args.end());
  return StartArgv(std::move(all), env);
}

// Collects output until the process exits (or `timeout_s`, then SIGKILL).
inline RunResult Finish(Running r, double timeout_s = 60) {
  RunResult out;
  auto deadline = r.start + std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  char buf[4096];
  while (true) {
    long left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      out.timed_out = true;
      kill(r.pid, SIGKILL);
      break;
    }
    pollfd pfd{r.fd, POLLIN, 0};
    int n = poll(&pfd, 1, static_cast<int>(left));
    if (n <= 0) continue;
    ssize_t got = read(r.fd, buf, sizeof buf);
    if (got <= 0) break;
    out.output.append(buf, static_cast<size_t>(got));
  }
  close(r.fd);
  int status = 0;
  waitpid(r.pid, &status, 0);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
  if (WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
  return out;
}

inline RunResult Run(const std::vector<std::string>& args, double timeout_s = 60, const std::vector<std::string>& env = {}) {
  return Finish(Start(args, env), timeout_s);
}

// Runs `/bin/sh -c cmd` (e.g. "ulimit -n 20 && exec zerorun ...") the same way.
inline RunResult RunShell(const std::string& cmd, double timeout_s = 60) {
  return Finish(StartArgv({"/bin/sh", "-c", cmd}), timeout_s);
}

// A fresh empty directory under /tmp.
inline std::string TempDir(const std::string& tag) {
  std::string dir = "/tmp/zr_launcher_" + tag + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A probe record: argv, env, cpus, pid.
struct Record {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cpus;
  std::string netns;  // e.g. "net:[4026531992]"
  int pid = -1;
  int sleeper = -1;
  bool found = false;
};

inline Record ReadRecord(const std::string& dir, int rank, int generation = 0) {
  Record rec;
  std::ifstream in(dir + "/rank" + std::to_string(rank) + ".gen" + std::to_string(generation) + ".txt");
  if (!in) return rec;
  rec.found = true;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("arg ", 0) == 0) {
      size_t sp = line.find(' ', 4);
      rec.argv.push_back(line.substr(sp + 1));
    } else if (line.rfind("env ", 0) == 0) {
      size_t eq = line.find('=');
      rec.env[line.substr(4, eq - 4)] = line.substr(eq + 1);
    } else if (line.rfind("cpus ", 0) == 0) {
      rec.cpus = line.substr(5);
    } else if (line.rfind("netns ", 0) == 0) {
      rec.netns = line.substr(6);
    } else if (line.rfind("pid ", 0) == 0) {
      rec.pid = std::atoi(line.c_str() + 4);
    } else if (line.rfind("sleeper ", 0) == 0) {
      rec.sleeper = std::atoi(line.c_str() + 8);
    }
  }
  return rec;
}

// True if `pid` is a live (non-zombie) process.
inline bool Alive(int pid) {
  if (pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!std::getline(stat, content)) return false;
  size_t paren = content.rfind(')');
  return paren != std::string::npos && paren + 2 < content.size() && content[paren + 2] != 'Z';
}

// Live processes whose command line contains `needle` (the process table check for orphans).
inline std::vector<int> ProcessesMatching(const std::string& needle) {
  std::vector<int> out;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    int pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    // read(2), not a stream: a process that exits meanwhile fails the read with ESRCH, which
    // libstdc++'s filebuf turns into an exception.
    std::string cmd;
    int fd = ::open(("/proc/" + std::string(e->d_name) + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) cmd.append(buf, static_cast<size_t>(n));
    ::close(fd);
    for (char& c : cmd) c = c == '\0' ? ' ' : c;
    if (cmd.find(needle) != std::string::npos && Alive(pid)) out.push_back(pid);
  }
  closedir(d);
  return out;
}

// The text of a JSON number field ("final_loss": 4.11 -> "4.11"), "" if absent. Enough for the
// trainer's summary files without a JSON parser.
inline std::string JsonField(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = text.find("\"" + key + "\":");
  if (at == std::string::npos) return "";
  size_t start = text.find_first_not_of(" ", at + key.size() + 3);
  size_t end = text.find_first_of(",\n}", start);
  return text.substr(start, end - start);
}

// Waits until `path` exists (up to timeout_s).
inline bool WaitForFile(const std::string& path, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(path)) return true;
    usleep(20000);
  }
  return false;
}

}  // namespace zrtest

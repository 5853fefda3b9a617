// zr_env_probe: a stand-in rank program for the launcher tests. It records what it was given
// (argv, environment, CPU affinity) and then misbehaves on request, so tests can check the
// environment contract, failure propagation, teardown and restarts without the real trainer.
//
//   zr_env_probe [--local_rank=N] [--out DIR] [--exit CODE] [--on_rank R] [--on_generation G]
//                [--sleep SEC] [--ignore_term] [--spawn_sleeper] [--signal SIG] [--print N]
//                [--stop_rank R] [--exit_after SEC] [anything]
// --out DIR: writes DIR/rank<RANK>.gen<ZERORUN_RESTART>.txt ("arg <i> <value>" and "env K=V" lines,
//   "cpus <list>" and "pid <pid>"), written atomically (temp file + rename).
// --exit/--signal apply to rank R (--on_rank, default every rank) in generation G (default every).
// --sleep SEC happens before exiting (and after misbehaving ranks are chosen); --ignore_term ignores
// SIGTERM; --spawn_sleeper forks a grandchild that sleeps 300 s (its pid goes into the record).
// --stop_rank R: rank R stops itself (SIGSTOP) after writing its record; --exit_after SEC: the chosen
// rank waits SEC before failing with --exit.
// Unknown arguments are ignored (and recorded), so arbitrary user arguments can be passed through.
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern char** environ;

int main(int argc, char** argv) {
  std::string out_dir;
  int exit_code = 0;
  int on_rank = -1;
  int on_generation = -1;
  double sleep_s = 0;
  bool ignore_term = false;
  bool spawn_sleeper = false;
  int self_signal = 0;
  int print_lines = 0;
  int stop_rank = -1;
  double exit_after_s = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--out") out_dir = next();
    else if (a == "--exit") exit_code = std::atoi(next().c_str());
    else if (a == "--on_rank") on_rank = std::atoi(next().c_str());
    else if (a == "--on_generation") on_generation = std::atoi(next().c_str());
    else if (a == "--sleep") sleep_s = std::atof(next().c_str());
    else if (a == "--ignore_term") ignore_term = true;
    else if (a == "--spawn_sleeper") spawn_sleeper = true;
    else if (a == "--signal") self_signal = std::atoi(next().c_str());
    else if (a == "--print") print_lines = std::atoi(next().c_str());
    else if (a == "--stop_rank") stop_rank = std::atoi(next().c_str());
    else if (a == "--exit_after") exit_after_s = std::atof(next().c_str());
  }
  const char* rank_s = std::getenv("RANK");
  const char* gen_s = std::getenv("ZERORUN_RESTART");
  int rank = rank_s ? std::atoi(rank_s) : -1;
  int generation = gen_s ? std::atoi(gen_s) : -1;
  if (ignore_term) signal(SIGTERM, SIG_IGN);
  pid_t sleeper = -1;
  if (spawn_sleeper) {
    sleeper = fork();
    if (sleeper == 0) {
      execlp("sleep", "sleep", "300", static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  for (int i = 0; i < print_lines; ++i) std::printf("probe rank %d line %d\n", rank, i);
  std::fflush(stdout);
  if (!out_dir.empty()) {
    std::string path = out_dir + "/rank" + std::to_string(rank) + ".gen" + std::to_string(generation) + ".txt";
    std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
      std::perror(tmp.c_str());
      return 99;
    }
    for (int i = 0; i < argc; ++i) std::fprintf(f, "arg %d %s\n", i, argv[i]);
    for (char** e = environ; *e; ++e) std::fprintf(f, "env %s\n", *e);
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof set, &set);
    std::string cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
    }
    char netns[128] = {0};
    if (readlink("/proc/self/ns/net", netns, sizeof netns - 1) < 0) netns[0] = '?';
    std::fprintf(f, "netns %s\n", netns);
    std::fprintf(f, "cpus %s\npid %d\nsleeper %d\n", cpus.c_str(), static_cast<int>(getpid()), static_cast<int>(sleeper));
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
  if (rank == stop_rank) raise(SIGSTOP);
  bool chosen = (on_rank < 0 || on_rank == rank) && (on_generation < 0 || on_generation == generation);
  if (chosen && self_signal > 0) {
    std::fprintf(stderr, "probe rank %d raising signal %d\n", rank, self_signal);
    raise(self_signal);
  }
  if (chosen && exit_code != 0) {
    if (exit_after_s > 0) usleep(static_cast<useconds_t>(exit_after_s * 1e6));
    std::fprintf(stderr, "probe rank %d failing with exit code %d\n", rank, exit_code);
    return exit_code;
  }
  if (sleep_s > 0) usleep(static_cast<useconds_t>(sleep_s * 1e6));
  return 0;
}

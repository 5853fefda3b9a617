// Runs a set of child processes as one job and stops all of them when one fails.
//
// Each child runs in its own process group (so a rank's helpers are stopped with it) and dies with
// the supervisor (PR_SET_PDEATHSIG). Its stdout+stderr go through a pipe: forwarded line by line with
// a prefix, or written to a log file; the last lines are kept either way for the failure report.
// The first child to exit non-zero or by a signal is "the failure": every other group gets SIGTERM,
// then SIGKILL after a grace period. SIGINT/SIGTERM/SIGHUP to the supervisor are forwarded the same
// way. Used for a node's ranks and, one level up, for the per-node agents (ssh/pdsh).
#pragma once

#include <sys/types.h>

#include <deque>
#include <string>
#include <vector>

#include "zerorun/launcher/text.h"

namespace zerorun::launcher {

struct ChildSpec {
  std::string name;                     // "rank 3 on node1": used in reports
  std::vector<std::string> argv;        // argv[0] is looked up in PATH
  EnvList env_set;                      // set on top of the inherited environment
  std::vector<std::string> env_unset;   // removed from it
  std::string line_prefix;              // prefix of forwarded lines ("[rank 3] "); "" forwards verbatim
  std::string log_path;                 // non-empty: append output here instead of forwarding
  std::string stdin_data;               // written to the child's stdin ("" and !keep_stdin_open: /dev/null)
  bool keep_stdin_open = false;         // keep stdin open after stdin_data; closing it tells the child to stop
  std::vector<int> cpus;                // CPU affinity (OS indices); empty: inherited
  bool forward_to_stderr = false;       // forward to stderr instead of stdout
  // A line containing this marks the child failed even while it runs (pdsh reports a node's failure
  // as "...: ssh exited with exit code N" and keeps waiting for the others); N becomes the exit code.
  std::string failure_marker;
};

struct SupervisorOptions {
  double kill_grace_s = 5.0;  // SIGTERM → SIGKILL
  int tail_lines = 20;        // lines kept per child for the report
  int watch_fd = -1;          // optional: EOF/hang-up here stops the job (an agent's stdin)
  std::string what = "rank";  // noun used in messages ("rank", "node")
  // Stop children by closing their stdin only (agents then stop their own ranks and exit); SIGKILL
  // follows after kill_grace_s. Without it, children get SIGTERM (or the signal received).
  bool stop_by_closing_stdin = false;
};

struct ChildResult {
  pid_t pid = -1;
  bool exited = false;         // reaped
  int exit_code = 0;           // when exited normally
  int term_signal = 0;         // when killed by a signal
  std::deque<std::string> tail;
};

struct JobOutcome {
  int exit_code = 0;        // what the launcher should exit with
  int failed_child = -1;    // index of the first failing child, -1 if none
  int marker_exit_code = -1;  // exit code read from a failure_marker line, -1 if none
  int stop_signal = 0;      // a signal that stopped the job from outside (SIGINT/SIGTERM/SIGHUP), 0 if none
  bool stopped_by_watch = false;  // watch_fd closed
  std::vector<ChildResult> children;
  std::string report;       // human-readable failure report ("" on success)
};

// Installs the SIGINT/SIGTERM/SIGHUP/SIGCHLD handlers the supervisor relies on. Call once, early, in
// the launcher process (RunChildren also calls it). Returns the pending external signal, 0 if none.
void InstallSignalHandlers();
int PendingStopSignal();

// Starts every child and supervises them until all have exited. Never throws for child failures
// (they are the outcome); throws IoError if a child cannot be started (then all started ones are
// stopped first).
JobOutcome RunChildren(const std::vector<ChildSpec>& children, const SupervisorOptions& opts);

// "exit code 3" / "signal 9 (SIGKILL)".
std::string DescribeStatus(const ChildResult& r);

// Kills (SIGKILL) and reaps every remaining child process of the caller that is not in `keep`:
// with PR_SET_CHILD_SUBREAPER set, orphaned grandchildren end up here. Returns how many were killed.
int KillStrayChildren();

}  // namespace zerorun::launcher

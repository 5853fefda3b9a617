// Trial processes: started in their own process group with stdout and stderr going to a log file,
// polled without blocking, and stopped as a group (the trainer may be a launcher with rank children).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace zerorun::experiments {

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// Starts argv[0] (looked up in PATH when it has no '/') with `env` added to this process's
// environment. A program that cannot be started exits 127 with the reason in the log.
// Throws IoError when the log cannot be created or fork fails.
pid_t SpawnToLog(const std::vector<std::string>& argv, const std::string& log_path, const EnvVars& env);

// true when the process has exited; *how describes it ("" for exit status 0, else "exit status N" or
// "killed by signal N (SIGxxx)").
bool PollExited(pid_t pid, std::string* how);

// SIGTERM to the process group, SIGKILL after grace_ms if it is still alive; reaps the process.
void StopProcessGroup(pid_t pid, int grace_ms);

}  // namespace zerorun::experiments

// The ssh preflight: before a multi-node job starts, every host is reached once (in parallel) and
// checked for what the agent needs: passwordless ssh, this zerorun executable at the same path, the
// working directory, and for pdsh that the job token can travel as LC_ZERORUN_JOB_TOKEN. A failure
// names the host, what failed, ssh's own message, and the command to reproduce it.
#pragma once

#include <string>
#include <vector>

#include "zerorun/launcher/options.h"
#include "zerorun/launcher/world.h"

namespace zerorun::launcher {

// Throws CommError describing every host that failed. Returns the first address `hostname -I`
// printed on node 0 ("" if none), used as MASTER_ADDR when the first host is named "localhost".
std::string SshPreflight(const LaunchOptions& opts, const World& world, const std::string& self);

// Runs the commands in parallel and returns (exit status or -1 on timeout, combined output) each.
struct Captured {
  int exit_code = -1;  // -1: timed out (killed)
  std::string output;
};
std::vector<Captured> RunAndCapture(const std::vector<std::vector<std::string>>& commands,
                                    const std::vector<std::pair<std::string, std::string>>& extra_env, double timeout_s);

}  // namespace zerorun::launcher

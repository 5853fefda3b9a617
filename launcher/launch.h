// The launcher's top level: picks the mode from the options and runs the job, with restarts.
//
// Modes: driver (resolve the world; run node 0 here with `local`, or one agent per node through
// ssh/pdsh, or the whole job through srun/mpirun), node (--node_rank K: this node's ranks, here;
// what an agent runs), step (--from_env slurm|openmpi: one rank whose place comes from SLURM_* or
// OMPI_COMM_WORLD_*, inside an srun step or an mpirun job).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "zerorun/launcher/options.h"

namespace zerorun::launcher {

// Runs the job described by `opts`; returns the exit code for the launcher process. Throws
// zerorun::Error for bad input (hostfile, flags) before anything is started.
int Launch(const LaunchOptions& opts);

// The parent process id when this process started (static initialisation time).
pid_t StartupParent();

// The program the agents run remotely: this executable's absolute path.
std::string SelfExecutable();

}  // namespace zerorun::launcher

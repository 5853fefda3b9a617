// Core binding for --bind_cores_to_rank / --bind_core_list. The node's physical cores (hwloc, in
// hwloc's logical order, which keeps NUMA nodes and packages contiguous) are split into equal
// consecutive chunks, one per rank, so ranks do not straddle NUMA nodes when the counts divide.
// A rank's CPU set is every hardware thread of its cores; OMP_NUM_THREADS = cores per rank.
#pragma once

#include <string>
#include <vector>

namespace zerorun::launcher {

struct CoreBinding {
  std::vector<int> cpus;  // OS CPU indices the rank may run on
  int threads = 0;        // OMP_NUM_THREADS (cores per rank)
};

// cores[i] = OS CPU indices of physical core i (all its hardware threads), in binding order.
// Splits them among `ranks`. Throws InvalidArgument if there are fewer cores than ranks.
std::vector<CoreBinding> SplitCores(const std::vector<std::vector<int>>& cores, int ranks);

// This machine's physical cores via hwloc (NUMA order), restricted to the process's allowed CPUs.
std::vector<std::vector<int>> DetectCores();

// The binding for `ranks` ranks: from --bind_core_list (CPU ids, one "core" each) if given,
// else DetectCores(). Throws InvalidArgument for a bad list or too few cores.
std::vector<CoreBinding> PlanBinding(const std::string& bind_core_list, int ranks);

}  // namespace zerorun::launcher

// hwloc-based core discovery and the even split of cores among a node's ranks.
#include "zerorun/launcher/binding.h"

#include <hwloc.h>
#include <sched.h>

#include "zerorun/core/error.h"
#include "zerorun/launcher/hostfile.h"

namespace zerorun::launcher {

std::vector<CoreBinding> SplitCores(const std::vector<std::vector<int>>& cores, int ranks) {
  if (ranks <= 0) return {};
  int n = static_cast<int>(cores.size());
  if (n < ranks) {
    ZR_THROW(InvalidArgument, "cannot bind {} ranks to {} core(s): each rank needs at least one core "
                              "(use fewer ranks, a longer --bind_core_list, or no binding)", ranks, n);
  }
  int per_rank = n / ranks;  // leftover cores (n % ranks) stay unused, as with DeepSpeed
  std::vector<CoreBinding> out(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    out[static_cast<size_t>(r)].threads = per_rank;
    for (int c = r * per_rank; c < (r + 1) * per_rank; ++c) {
      const std::vector<int>& pus = cores[static_cast<size_t>(c)];
      out[static_cast<size_t>(r)].cpus.insert(out[static_cast<size_t>(r)].cpus.end(), pus.begin(), pus.end());
    }
  }
  return out;
}

std::vector<std::vector<int>> DetectCores() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  bool have_mask = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
    ZR_THROW(InvalidArgument, "hwloc could not load this machine's topology (needed for --bind_cores_to_rank)");
  }
  std::vector<std::vector<int>> cores;
  int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
    std::vector<int> pus;
    unsigned id;
    hwloc_bitmap_foreach_begin(id, core->cpuset) {
      if (!have_mask || CPU_ISSET(id, &allowed)) pus.push_back(static_cast<int>(id));
    }
    hwloc_bitmap_foreach_end();
    if (!pus.empty()) cores.push_back(pus);
  }
  hwloc_topology_destroy(topo);
  return cores;
}

std::vector<CoreBinding> PlanBinding(const std::string& bind_core_list, int ranks) {
  std::vector<std::vector<int>> cores;
  if (!bind_core_list.empty()) {
    for (int cpu : ParseRangeList(bind_core_list)) {
      if (cpu >= CPU_SETSIZE) ZR_THROW(InvalidArgument, "--bind_core_list: CPU {} is out of range", cpu);
      cores.push_back({cpu});
    }
  } else {
    cores = DetectCores();
  }
  return SplitCores(cores, ranks);
}

}  // namespace zerorun::launcher

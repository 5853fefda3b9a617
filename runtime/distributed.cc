// InitFromEnvironment: comm::InitFromEnv, rank-tagged logs, config for the world size.
#include "zerorun/runtime/distributed.h"

#include "zerorun/core/log.h"

namespace zerorun::runtime {

DistributedSetup InitFromEnvironment(const std::string& config_path, const std::string& config_json,
                                     LoadOptions load, const comm::InitOptions& init) {
  DistributedSetup s;
  s.comm = comm::InitFromEnv(init);
  if (s.comm->size() > 1) SetLogRank(s.comm->rank());
  load.world_size = s.comm->size();
  if (s.comm->rank() != 0) load.log_warnings = false;
  s.config = config_path.empty() ? LoadConfigString(config_json, load) : LoadConfigFile(config_path, load);
  return s;
}

}  // namespace zerorun::runtime

// Joining a job from the environment the `zerorun` launcher (or srun/mpirun/torchrun-style tooling)
// sets: the world communicator from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ZERORUN_JOB_TOKEN, ...
// (comm/init.h) and the DeepSpeed config resolved for that world size. Then build the model in
// setup.config.ModelDType() and create the Engine from setup.config and setup.comm.
#pragma once

#include <memory>
#include <string>

#include "zerorun/comm/communicator.h"
#include "zerorun/comm/init.h"
#include "zerorun/runtime/config/config.h"

namespace zerorun::runtime {

struct DistributedSetup {
  std::shared_ptr<comm::Communicator> comm;
  Config config;
};

// Starts (or joins) the rendezvous, builds the world communicator, tags log lines with the rank, and
// loads `config_path` (or `config_json` when config_path is empty) for the communicator's size.
// Throws what comm::InitFromEnv and LoadConfigFile throw (CommError, ConfigLoadError, IoError).
DistributedSetup InitFromEnvironment(const std::string& config_path, const std::string& config_json = "",
                                     LoadOptions load = {}, const comm::InitOptions& init = {});

}  // namespace zerorun::runtime

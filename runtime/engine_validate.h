// Every check the Engine makes of a config alone, as one function that the engine's constructor and
// `zerorun-config check` both call: a config that `check` passes for a world size is one the engine
// accepts for that world size (the model's own checks — parameter dtypes, values — come on top).
#pragma once

#include <vector>

#include "zerorun/runtime/config/config.h"

namespace zerorun::runtime {

// The problems, each with its JSON path: a config resolved for another world size, data_parallel_size
// different from it, no optimizer (zerorun takes no client optimizer), every refused key set to a value
// zerorun cannot honour (UnsupportedKeys: offload, 16-bit master weights, unmanaged accumulation, ...),
// and a scheduler the LR schedules cannot build. Empty when the engine accepts the config.
std::vector<ConfigIssue> EngineConfigProblems(const Config& config, int world_size);

// Throws ConfigLoadError (a ConfigError) listing EngineConfigProblems when there are any.
void ValidateForEngine(const Config& config, int world_size);

}  // namespace zerorun::runtime

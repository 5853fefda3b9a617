// The config's settings that reach beyond the training step, applied by the engine: the process log
// level (log_level), the communicator's comms logger (comms_logger), fp16.auto_cast of the model's
// inputs, and dump_state's description of the engine. One call each from the engine.
#pragma once

#include <string>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/tensor.h"
#include "zerorun/runtime/config/config.h"

namespace zerorun::runtime {

class Engine;

// log_level (DeepSpeed's names: debug, info, warning, error, critical/fatal → error) unless the
// environment sets ZERORUN_LOG_LEVEL, which wins; and the comms_logger section onto `comm` when the
// file writes any of its keys (otherwise the communicator keeps what it was created with).
void ApplyProcessSettings(const Config& config, comm::Communicator& comm);

// fp16.auto_cast with fp16 training: a floating-point input (fp32, bf16) becomes a new fp16 tensor;
// anything else (token ids, fp16 already, auto_cast off) is returned as is.
Tensor AutoCastInput(const Config& config, const Tensor& input);

// dump_state: the effective config (ExplainConfig) and the engine's layout — parameters, groups, this
// rank's partition and memory by category.
std::string EngineStateText(Engine& engine);

}  // namespace zerorun::runtime

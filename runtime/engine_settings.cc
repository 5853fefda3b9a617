// log_level, comms_logger, fp16.auto_cast and dump_state (see engine_settings.h).
#include "zerorun/runtime/engine_settings.h"

#include <cstdlib>

#include "zerorun/core/log.h"
#include "zerorun/runtime/engine.h"

namespace zerorun::runtime {

void ApplyProcessSettings(const Config& config, comm::Communicator& comm) {
  if (config.log_level && std::getenv("ZERORUN_LOG_LEVEL") == nullptr) {
    std::string l = *config.log_level;
    for (char& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    SetLogLevel(l == "critical" || l == "fatal" ? LogLevel::kError : ParseLogLevel(l));
  }
  bool written = false;
  for (const char* key : {"enabled", "verbose", "prof_all", "debug", "prof_ops"}) {
    const Provenance* p = config.ProvenanceOf(std::string("comms_logger.") + key);
    written = written || (p != nullptr && p->kind == Provenance::Kind::kFile);
  }
  if (written) {
    comm::CommsLoggerOptions o;
    o.enabled = config.comms_logger.enabled;
    o.verbose = config.comms_logger.verbose;
    o.prof_all = config.comms_logger.prof_all;
    o.prof_ops = config.comms_logger.prof_ops;
    o.debug = config.comms_logger.debug;
    comm.SetCommsLogger(o);
  }
}

Tensor AutoCastInput(const Config& config, const Tensor& input) {
  if (!config.fp16.enabled || !config.fp16.auto_cast || !input.defined()) return input;
  const DType t = input.dtype();
  if (t != DType::kF32 && t != DType::kBF16) return input;
  return input.To(DType::kF16, MemCategory::kActivations);
}

std::string EngineStateText(Engine& e) {
  std::string out = Format("engine state (dump_state): rank {} of {}, ZeRO stage {}, {}, {} parameters\n", e.rank(),
                           e.world_size(), e.zero_stage(), DTypeName(e.model_dtype()), e.num_parameters());
  for (const ParamGroup& g : e.param_groups()) {
    int64_t numel = 0;
    for (const nn::Parameter* p : g.params) numel += p->numel();
    out += Format("  group {}: {} tensors, {} elements\n", g.Describe(), g.params.size(), numel);
  }
  out += "  memory: " + e.memory().Summary() + "\n\n";
  return out + ExplainConfig(e.config());
}

}  // namespace zerorun::runtime

// offload_optimizer -> a state-store factory.
#include "zerorun/runtime/offload_store.h"

#include "zerorun/core/error.h"
#include "zerorun/offload/host_state_store.h"

namespace zerorun::runtime {

zero::StateStoreFactory OptimizerStateStoreFromConfig(const Config& config, int rank) {
  (void)rank;
  const ZeroConfig& z = config.zero_optimization;
  switch (z.OptimizerOffload()) {
    case OffloadDevice::kNone: return nullptr;
    case OffloadDevice::kCpu: {
      offload::HostStateStoreOptions o;
      o.pin_memory = z.offload_optimizer->pin_memory;
      return [o](zero::StateStoreLayout layout) { return offload::MakeHostStateStore(std::move(layout), o); };
    }
    case OffloadDevice::kNvme: break;
  }
  ZR_THROW(ConfigError, "zero_optimization.offload_optimizer.device: nvme is not implemented yet (issue #14)");
}

}  // namespace zerorun::runtime

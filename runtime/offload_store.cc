// offload_optimizer -> a state-store factory.
#include "zerorun/runtime/offload_store.h"

#include <algorithm>
#include <filesystem>

#include "zerorun/core/error.h"
#include "zerorun/offload/host_state_store.h"
#include "zerorun/offload/nvme_state_store.h"
#include "zerorun/runtime/aio_options.h"

namespace zerorun::runtime {

offload::NvmeStateStoreOptions NvmeStoreOptionsFromConfig(const Config& config, int rank) {
  const OffloadOptimizerConfig& oc = *config.zero_optimization.offload_optimizer;
  offload::NvmeStateStoreOptions o;
  o.dir.nvme_path = oc.nvme_path.value_or("");
  o.dir.config_key = "zero_optimization.offload_optimizer.nvme_path";
  o.dir.rank = rank;
  o.io = IoEngineOptionsFromConfig(config.aio, rank);
  o.buffer_count = static_cast<int>(std::min<int64_t>(oc.buffer_count, 1 << 20));
  o.pipeline_read = oc.pipeline_read;
  o.pipeline_write = oc.pipeline_write;
  o.fast_init = oc.fast_init;
  return o;
}

namespace {

// The preflight of nvme_path runs when the factory is made, before the engine has partitioned
// anything: a bad path is an IoError naming the key while nothing is charged to the engine's memory
// account yet. (Writability, O_DIRECT and the swap directories are checked by the store's SwapDir.)
void CheckNvmePath(const offload::SwapDirOptions& d) {
  std::error_code ec;
  if (!std::filesystem::is_directory(d.nvme_path, ec)) {
    const bool exists = std::filesystem::exists(d.nvme_path, ec);
    ZR_THROW(IoError, "{}: '{}' {}", d.config_key, d.nvme_path,
             exists ? "is not a directory" : "does not exist (create it, or point nvme_path at a directory)");
  }
}

}  // namespace

zero::StateStoreFactory OptimizerStateStoreFromConfig(const Config& config, int rank) {
  const ZeroConfig& z = config.zero_optimization;
  switch (z.OptimizerOffload()) {
    case OffloadDevice::kNone: return nullptr;
    case OffloadDevice::kCpu: {
      offload::HostStateStoreOptions o;
      o.pin_memory = z.offload_optimizer->pin_memory;
      return [o](zero::StateStoreLayout layout) { return offload::MakeHostStateStore(std::move(layout), o); };
    }
    case OffloadDevice::kNvme: {
      const offload::NvmeStateStoreOptions o = NvmeStoreOptionsFromConfig(config, rank);
      CheckNvmePath(o.dir);
      return [o](zero::StateStoreLayout layout) -> std::unique_ptr<zero::StateStore> {
        return offload::MakeNvmeStateStore(std::move(layout), o);
      };
    }
  }
  ZR_THROW(ConfigError, "zero_optimization.offload_optimizer.device: unknown device");
}

offload::NvmeShardStoreOptions NvmeShardStoreOptionsFromConfig(const Config& config, int rank) {
  const OffloadParamConfig& pc = *config.zero_optimization.offload_param;
  offload::NvmeShardStoreOptions o;
  o.dir.nvme_path = pc.nvme_path.value_or("");
  o.dir.config_key = "zero_optimization.offload_param.nvme_path";
  // Its own job directory: the optimizer's swap files may share nvme_path, and each store locks its
  // rank directory.
  o.dir.job_id = offload::DefaultSwapJobId() + ".params";
  o.dir.rank = rank;
  o.io = IoEngineOptionsFromConfig(config.aio, rank);
  o.buffer_count = static_cast<int>(std::min<int64_t>(pc.buffer_count, 1 << 20));
  o.buffer_size = pc.buffer_size;
  return o;
}

zero::ShardStoreFactory ParamShardStoreFromConfig(const Config& config, int rank) {
  const ZeroConfig& z = config.zero_optimization;
  if (z.StageNumber() != 3) return nullptr;
  switch (z.ParamOffload()) {
    case OffloadDevice::kNone: return nullptr;
    case OffloadDevice::kCpu: {
      offload::HostShardStoreOptions o;
      o.pin_memory = z.offload_param->pin_memory;
      return [o](zero::ShardStoreLayout layout) { return offload::MakeHostShardStore(std::move(layout), o); };
    }
    case OffloadDevice::kNvme: {
      const offload::NvmeShardStoreOptions o = NvmeShardStoreOptionsFromConfig(config, rank);
      CheckNvmePath(o.dir);
      return [o](zero::ShardStoreLayout layout) -> std::unique_ptr<zero::ShardStore> {
        return offload::MakeNvmeShardStore(std::move(layout), o);
      };
    }
  }
  ZR_THROW(ConfigError, "zero_optimization.offload_param.device: unknown device");
}

}  // namespace zerorun::runtime

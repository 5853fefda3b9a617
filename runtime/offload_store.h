// The config's offload_optimizer section as the ZeRO strategy's state store (zero/state_store.h):
// none -> null (resident in device memory), cpu -> offload/host_state_store.h, nvme ->
// offload/nvme_state_store.h (nvme_path, buffer_count, pipeline_read/write, fast_init, the aio section).
// The offload_param section (stage 3) as the strategy's shard store (zero/shard_store.h): none -> null
// (shards resident in device memory), cpu / nvme -> offload/shard_stores.h (nvme_path, buffer_count,
// buffer_size, the aio section). One place, so the engine and the tools read the keys the same way.
#pragma once

#include "zerorun/offload/nvme_state_store.h"
#include "zerorun/offload/shard_stores.h"
#include "zerorun/runtime/config/config.h"
#include "zerorun/zero/state_store.h"

namespace zerorun::runtime {

// REQUIRES: an offload_optimizer section.
offload::NvmeStateStoreOptions NvmeStoreOptionsFromConfig(const Config& config, int rank);

// Null for offload_optimizer.device none.
zero::StateStoreFactory OptimizerStateStoreFromConfig(const Config& config, int rank);

// REQUIRES: an offload_param section.
offload::NvmeShardStoreOptions NvmeShardStoreOptionsFromConfig(const Config& config, int rank);

// Null without parameter offload (no section, device none, or a stage other than 3).
zero::ShardStoreFactory ParamShardStoreFromConfig(const Config& config, int rank);

}  // namespace zerorun::runtime

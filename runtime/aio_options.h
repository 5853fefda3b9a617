// The config's `aio` section as the offload I/O engine's options (offload/io_engine.h). One place, so
// the NVMe offload and `zerorun-bench io --config` read the keys the same way.
#pragma once

#include "zerorun/offload/io_engine.h"
#include "zerorun/runtime/config/config.h"

namespace zerorun::runtime {

// block_size, queue_depth, intra_op_parallelism, single_submit and overlap_events; `rank` is named in
// the engine's errors. (use_gds is refused when the config loads.)
offload::IoEngineOptions IoEngineOptionsFromConfig(const AioConfig& aio, int rank = -1);

}  // namespace zerorun::runtime

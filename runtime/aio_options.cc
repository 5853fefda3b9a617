// AioConfig -> offload::IoEngineOptions.
#include "zerorun/runtime/aio_options.h"

namespace zerorun::runtime {

offload::IoEngineOptions IoEngineOptionsFromConfig(const AioConfig& aio, int rank) {
  offload::IoEngineOptions o;
  o.block_size = aio.block_size;
  o.queue_depth = static_cast<int>(aio.queue_depth);
  o.intra_op_parallelism = static_cast<int>(aio.intra_op_parallelism);
  o.single_submit = aio.single_submit;
  o.overlap_events = aio.overlap_events;
  o.rank = rank;
  return o;
}

}  // namespace zerorun::runtime

// The `nccl` backend (CUDA builds only): collectives on device memory through NCCL.
//
// Rank 0 of each group creates the NCCL unique id and publishes it in the group's store prefix
// ("nccl/id"); the others read it. Communicators are created non-blocking so that a rank that never
// joins cannot hang initialisation past the timeout. Every op runs on the group's dedicated CUDA
// stream: when the op is submitted an event is recorded on the submitting thread's kernel stream
// (KernelDeviceScope, else the default stream: the kernels that produced the data), the stream waits
// for it, then the NCCL call is enqueued and a completion event recorded; the
// executor polls that event and ncclCommGetAsyncError. On the op's timeout, or when the communicator
// is aborted (a peer died, Work::Wait gave up), ncclCommAbort unblocks the GPU and the op fails.
//
// Numerics: NCCL reduces fp16/bf16 in their own precision per hop (unlike ucx/local, which
// accumulate in fp32); kAvg uses ncclAvg and is refused for integer dtypes.
#pragma once

#include <memory>

#include "zerorun/comm/communicator.h"
#include "zerorun/comm/monitor.h"
#include "zerorun/comm/store.h"

namespace zerorun::comm {

// Collective over `size` ranks: rank `rank` of a NCCL communicator on CUDA device `device`, with
// rendezvous under `store` (the job generation's store; the group uses the "world" prefix).
std::unique_ptr<Communicator> CreateNcclCommunicator(std::shared_ptr<Store> store, int rank, int size, int device,
                                                     const CommOptions& options, std::shared_ptr<Monitor> monitor);

}  // namespace zerorun::comm

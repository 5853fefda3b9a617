// The `local` backend: N ranks as threads of one process sharing memory. Same semantics as the real
// backends (ordering, timeouts naming the ranks that did not arrive, a rank whose communicator is
// destroyed counts as dead), so everything above comm/ can be tested with real numerics on one CPU.
//
// Algorithm: every collective is a rendezvous of all ranks' buffer pointers; each rank then reads
// the others' inputs directly, reduces in rank order 0..n-1 in the accumulation type (fp32 for 16-bit
// types) and rounds once, so every rank's result is identical and independent of thread timing.
// Byte accounting reports the ring volume (Communicator's default), which is what a real ring moves.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "zerorun/comm/communicator.h"

namespace zerorun::comm {

// Creates world_size communicators sharing one group; element r is rank r. Each must be used by one
// thread at a time (typically thread r). Destroy them after their threads have joined.
std::vector<std::unique_ptr<Communicator>> CreateLocalCommunicators(int world_size,
                                                                    const CommOptions& options = {});

// Runs fn(comm) on world_size threads (thread log rank set to the rank) and joins them; then
// rethrows the exception of the lowest rank that threw, if any. A rank that throws destroys its
// communicator, so the others fail promptly instead of waiting for the timeout.
void RunLocalRanks(int world_size, const std::function<void(Communicator&)>& fn, const CommOptions& options = {});

}  // namespace zerorun::comm

// The CPU-offload state store (offload_optimizer.device: cpu, ZeRO-Offload): a rank's fp32 master
// weights and optimizer state held in host buffers apart from the compute device — page-locked
// PinnedBuffers (MemCategory::kPinned) with pin_memory, else pageable host memory (kMaster /
// kOptimizer, as without offload). offloaded() is true, so the PartitionOptimizer copies each span's
// gradients to host staging, steps the fused optimizer kernel on the host and copies the 16-bit (or
// fp32) results back through the core/ device abstraction; on the CPU device those copies are
// host-to-host. Everything else is the resident store's contract (zero/state_store.h).
#pragma once

#include <memory>

#include "zerorun/zero/state_store.h"

namespace zerorun::offload {

struct HostStateStoreOptions {
  bool pin_memory = true;  // offload_optimizer.pin_memory
  bool huge_pages = true;  // pinned buffers from 4 MiB on use transparent huge pages
};

std::unique_ptr<zero::StateStore> MakeHostStateStore(zero::StateStoreLayout layout, const HostStateStoreOptions& o);

}  // namespace zerorun::offload

// The NVMe-offload state store (offload_optimizer.device: nvme, ZeRO-Infinity): every sub-group's fp32
// master weights and optimizer state (all slots, one record) live in a per-job, per-rank swap file
// under nvme_path (swap_file.h) and come into one of `buffer_count` pinned host buffers, each the size
// of the largest sub-group, only while the optimizer works on them. Host memory for the state is
// therefore buffer_count x (largest sub-group's bytes), whatever the model size.
//
// The pipeline (zero/partition_optimizer.h drives it): Prefetch(k+1) starts reading k+1 into a free
// buffer (pipeline_read), Release(k) starts writing k back (pipeline_write; otherwise it waits for the
// write), so k+1 is read and k-1 written while k is updated; Acquire is the only blocking point. A
// buffer keeps its sub-group after the write (a later Acquire of it reads nothing) until it is needed
// for another one.
//
// Atomic steps: every sub-group has two slots in the file and a step's records are written as the next
// generation into the slot the committed generation does not use; Flush commits them only when every
// write of the step succeeded. A failed write-back (ENOSPC, EIO, a deleted or truncated file) makes
// Flush throw IoError naming the file, slot and rank, and leaves the previous step's state committed:
// buffers holding the uncommitted state are dropped, so the next Acquire reads the previous state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "zerorun/offload/io_engine.h"
#include "zerorun/offload/swap_file.h"
#include "zerorun/zero/state_store.h"

namespace zerorun::offload {

struct NvmeStateStoreOptions {
  SwapDirOptions dir;        // nvme_path, the config key named in errors, job id, rank, file env
  IoEngineOptions io;        // the aio section
  int buffer_count = 4;      // offload_optimizer.buffer_count: sub-group buffers in host memory (>= 1)
  bool pipeline_read = false;   // Prefetch starts reads ahead
  bool pipeline_write = false;  // Release does not wait for its write
  bool fast_init = false;       // the initial swap-out of every sub-group is not waited for one by one
  bool huge_pages = true;
};

// What the store has moved (cumulative).
struct NvmeStateStoreStats {
  int64_t swap_ins = 0;       // records read
  int64_t swap_outs = 0;      // records written
  int64_t bytes_in = 0;
  int64_t bytes_out = 0;
  int64_t hits = 0;           // Acquires served by a buffer that still held the sub-group
  int64_t prefetches = 0;     // reads started by Prefetch
  int buffers = 0;            // buffer_count
  int64_t buffer_bytes = 0;   // bytes of one buffer
  int64_t file_bytes = 0;     // the swap file's size
  std::string file;           // its path
  bool direct_io = false;
};

class NvmeStateStore : public zero::StateStore {
 public:
  virtual NvmeStateStoreStats stats() const = 0;
};

// Throws IoError (starting with o.dir.config_key) when nvme_path fails the preflight, or the swap file
// cannot be created; InvalidArgument for bad options.
std::unique_ptr<NvmeStateStore> MakeNvmeStateStore(zero::StateStoreLayout layout, const NvmeStateStoreOptions& o);

// Host bytes of the buffers MakeNvmeStateStore allocates for `layout` (the estimator's figure).
int64_t NvmeStateStoreHostBytes(const zero::StateStoreLayout& layout, int buffer_count, bool huge_pages = true);

}  // namespace zerorun::offload

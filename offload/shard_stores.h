// Parameter offload (offload_param, ZeRO stage 3): the two shard stores of zero/shard_store.h.
//
// Host (offload_param.device "cpu"): every 16-bit shard in one host allocation apart from the compute
// device — page-locked (PinnedBuffer, MemCategory::kPinned) with pin_memory, else pageable (kParams).
//
// NVMe (offload_param.device "nvme", ZeRO-Infinity): every shard is one record of a per-job, per-rank
// swap file under nvme_path (swap_file.h: checksummed, generation-tagged records, blocks allocated up
// front so a full disk shows at construction). Shards come into one of `buffer_count` page-locked
// buffers, each the size of the largest shard, only while they are used; a released buffer keeps its
// shard (a later Acquire of it reads nothing) until another shard needs the buffer. Host memory for
// parameters is therefore buffer_count x the largest shard, whatever the model size. Prefetch(u)
// starts reading u into a free buffer; a written shard is written back at Release without waiting,
// and Flush (or reusing its buffer) waits for it. A failed write is an IoError naming the file, the
// shard and the rank from Flush.
#pragma once

#include <cstdint>
#include <memory>

#include "zerorun/offload/io_engine.h"
#include "zerorun/offload/swap_file.h"
#include "zerorun/zero/shard_store.h"

namespace zerorun::offload {

struct HostShardStoreOptions {
  bool pin_memory = true;  // offload_param.pin_memory
  bool huge_pages = true;
};

std::unique_ptr<zero::ShardStore> MakeHostShardStore(zero::ShardStoreLayout layout, const HostShardStoreOptions& o);

struct NvmeShardStoreOptions {
  SwapDirOptions dir;               // nvme_path, the config key named in errors, job id, rank, file env
  IoEngineOptions io;               // the aio section
  int buffer_count = 5;             // offload_param.buffer_count (>= 1)
  int64_t buffer_size = 100'000'000;  // offload_param.buffer_size: elements; the largest shard must fit
  bool huge_pages = true;
};

struct NvmeShardStoreStats {
  int64_t swap_ins = 0;   // shards read from the file
  int64_t swap_outs = 0;  // shards written
  int64_t hits = 0;       // Acquires served by a buffer that still held the shard
  int64_t prefetches = 0;
  int buffers = 0;
  int64_t buffer_bytes = 0;
  int64_t file_bytes = 0;
  std::string file;
};

class NvmeShardStore : public zero::ShardStore {
 public:
  virtual NvmeShardStoreStats stats() const = 0;
};

// Throws IoError (starting with o.dir.config_key) when nvme_path fails the preflight or the swap file
// cannot be created; ConfigError naming offload_param.buffer_size / buffer_count when a shard does not
// fit a buffer or buffer_count < 1.
std::unique_ptr<NvmeShardStore> MakeNvmeShardStore(zero::ShardStoreLayout layout, const NvmeShardStoreOptions& o);

// Host bytes of the buffers MakeNvmeShardStore allocates (the estimator's figure).
int64_t NvmeShardStoreHostBytes(const zero::ShardStoreLayout& layout, int buffer_count, bool huge_pages = true);

}  // namespace zerorun::offload

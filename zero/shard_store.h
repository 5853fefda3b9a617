// ShardStore: where ZeRO stage 3's 16-bit (model dtype) parameter shards live when they are not in
// device memory — host memory (offload_param.device "cpu") or swap files (offload_param.device
// "nvme", ZeRO-Infinity). Without a shard store the sharded strategy keeps every shard in device
// memory, as views into its partitions; with one, the shards are units of the store:
//
//   - the parameter coordinator (param_coordinator.h) acquires a shard for reading, copies it into a
//     device staging buffer through the core/ device abstraction (CopyBytes: host-to-host on the CPU
//     device, H2D on an accelerator), releases it and all-gathers from the staging buffer;
//   - the partition optimizer (partition_optimizer.h) acquires a shard for writing while it updates the
//     sub-group holding it, writes the 16-bit result there and releases it (the store writes it back);
//   - checkpoints read and write shards through the strategy (LocalParameter / WriteLocalParameter).
//
// Units are dense ids (the strategy uses parameter ids); unit u holds unit_numel(u) elements of
// dtype(). Contract for every implementation:
//  - A new store's units hold zeros.
//  - Acquire(u, access) returns a pointer to unit_numel(u) elements in device() memory, valid until
//    Release(u); a unit is acquired at most once at a time (the strategy holds one unit at a time).
//    kRead: the caller writes nothing; kOverwrite: the caller writes every element before Release.
//  - Release(u) after kReadWrite/kOverwrite makes the values the next Acquire(u) sees; a store that
//    writes back asynchronously keeps the data until written and reports a failed write from Flush()
//    (or the next Acquire of u) as IoError naming the unit and the file.
//  - Prefetch(u) is a hint and must not block on I/O for long.
//  - One thread drives a store; implementations may use their own I/O threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/core/device.h"
#include "zerorun/core/dtype.h"
#include "zerorun/zero/state_store.h"

namespace zerorun::zero {

struct ShardStoreLayout {
  DType dtype = DType::kF32;
  std::vector<int64_t> unit_numels;  // elements of each unit (a parameter's stage-3 shard, padding included)
  // Optional names for messages ("parameter 'h.0.attn.qkv.weight'"); empty: "unit <u>".
  std::vector<std::string> unit_names;

  int num_units() const { return static_cast<int>(unit_numels.size()); }
  int64_t UnitBytes(int u) const {
    return unit_numels.at(static_cast<size_t>(u)) * static_cast<int64_t>(DTypeSize(dtype));
  }
  int64_t LargestUnitNumel() const;
  int64_t TotalNumel() const;
  std::string UnitName(int u) const;
};

class ShardStore {
 public:
  virtual ~ShardStore() = default;
  virtual const ShardStoreLayout& layout() const = 0;
  // For messages, the log and `zerorun-config explain`: "cpu (pinned host memory)", "nvme <file> ...".
  virtual std::string placement() const = 0;
  // Where acquired shards live (always the host for the stores offload/ builds).
  virtual Device device() const = 0;
  virtual void Prefetch(int unit) = 0;
  virtual void* Acquire(int unit, StateAccess access) = 0;
  virtual void Release(int unit) = 0;
  virtual void Flush() = 0;
  // Host bytes the store holds for shards right now (its buffers; charged to MemCategory kPinned, or
  // kParams for pageable ones).
  virtual int64_t resident_bytes() const = 0;
};

// Builds the store once the strategy knows every shard's size.
using ShardStoreFactory = std::function<std::unique_ptr<ShardStore>(ShardStoreLayout layout)>;

}  // namespace zerorun::zero

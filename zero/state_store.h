// StateStore: the one place where a rank's fp32 master weights and optimizer state live. The state of
// every parameter group's partition is held sub-group by sub-group (zero_optimization.sub_group_size,
// DeepSpeed's unit of optimizer work and of swapping); the optimizer steps one sub-group at a time:
//
//     store.Prefetch(k + 1);              // may start I/O for the next sub-group and return at once
//     SubGroupState s = store.Acquire(k); // blocks until k's buffers are resident
//     ... update s.slots[...] ...
//     store.Release(k);                   // k may be written back (asynchronously) and evicted
//     ...
//     store.Flush();                      // every write-back done; errors surface here
//
// This file is where a new kind of placement goes: implement StateStore (e.g. pinned host memory for
// CPU offload, NVMe through offload/'s io_uring swapper, CUDA device memory) and hand its factory to
// the strategy (StrategyOptions::state_store). MakeResidentStateStore is the implementation used
// today: everything stays resident in `device` memory, Prefetch/Release/Flush do nothing.
//
// Contract for every implementation:
//  - Layout: slot k of sub-group i is layout().SubGroupNumel(i) contiguous fp32 values; slots are named
//    (StateSlot::name: "master", then the optimizer's state names). A new store holds zeros.
//  - Acquire(i, access) returns buffers valid until Release(i); a sub-group is acquired at most once
//    at a time (ZR_CHECK). kRead: the caller does not modify them (Release writes nothing back);
//    kOverwrite: the caller writes every value of every slot before Release (the store need not read
//    the old values). Buffers start at a multiple of alignment_bytes().
//  - Prefetch(i) is a hint: it may do nothing, and must not block on I/O for long.
//  - Release(i) after kReadWrite/kOverwrite makes the values the next Acquire(i) sees; a store that
//    writes back asynchronously must keep the data until written, and report a failed write from
//    Flush() (or the next Acquire of i) as IoError naming the sub-group and the file. Nothing written
//    before a failed write-back is lost.
//  - Errors (out of memory, I/O) are thrown as zerorun::Error subclasses naming the sub-group.
//  - Thread safety: one thread drives a store (the rank's step); an implementation may use its own
//    I/O threads internally.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zerorun/core/device.h"
#include "zerorun/core/memory.h"
#include "zerorun/zero/partition.h"

namespace zerorun::zero {

struct StateSlot {
  std::string name;                              // "master", "exp_avg", "exp_avg_sq", ...
  MemCategory category = MemCategory::kOptimizer;  // kMaster for the fp32 master weights
};

// One sub-group: a contiguous range of one parameter group's partition.
struct StateSubGroup {
  int group = 0;
  Range range;  // elements of that group's partition
};

struct StateStoreLayout {
  std::vector<StateSlot> slots;
  std::vector<int64_t> group_numels;     // elements of each group's partition
  std::vector<StateSubGroup> sub_groups;  // group by group, in partition order, tiling every partition

  int num_sub_groups() const { return static_cast<int>(sub_groups.size()); }
  int64_t SubGroupNumel(int i) const { return sub_groups.at(static_cast<size_t>(i)).range.size(); }
  // Bytes one sub-group's buffers take (all slots): what a swapping store moves per sub-group.
  int64_t SubGroupBytes(int i) const { return SubGroupNumel(i) * static_cast<int64_t>(slots.size()) * 4; }
  int64_t LargestSubGroupNumel() const;
  // Index of the slot called `name`, or -1.
  int SlotIndex(std::string_view name) const;
};

// Cuts each group's partition into sub-groups: `group_units[g]` lists consecutive unit sizes tiling
// group g's partition (stage 3: the parameters' shards; stages 0-2: the buckets' slices); units join
// the current sub-group until it reaches `sub_group_size` elements (DeepSpeed's rule, SubGroups in
// partition.h), so a sub-group is never cut inside a unit. A group with no elements gets none.
StateStoreLayout MakeStateStoreLayout(std::vector<StateSlot> slots,
                                      const std::vector<std::vector<int64_t>>& group_units, int64_t sub_group_size);

// The buffers of one acquired sub-group.
struct SubGroupState {
  int index = -1;
  int64_t numel = 0;
  std::vector<float*> slots;  // slots[k]: `numel` fp32 values of slot k (layout order)
};

enum class StateAccess {
  kReadWrite,  // read, modify, keep
  kOverwrite,  // every value of every slot is written before Release: nothing needs to be read
  kRead,       // read only: Release writes nothing back
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  virtual const StateStoreLayout& layout() const = 0;
  // For messages and the docs: "resident (cpu)", "nvme /local/swap", ...
  virtual std::string placement() const = 0;
  // Where acquired buffers live (the optimizer kernels run there).
  virtual Device device() const = 0;
  virtual int64_t alignment_bytes() const = 0;
  virtual void Prefetch(int sub_group, StateAccess access) = 0;
  virtual SubGroupState Acquire(int sub_group, StateAccess access) = 0;
  virtual void Release(int sub_group) = 0;
  virtual void Flush() = 0;
  // Bytes of state this store holds in `device()` memory right now (charged to MemCategory kMaster /
  // kOptimizer of the account current at construction; an offloading store: to kPinned).
  virtual int64_t resident_bytes() const = 0;
  // True when the buffers live in host memory apart from the compute device (CPU / NVMe offload): the
  // optimizer then copies each span's gradients into a host staging buffer and its 16-bit (or fp32)
  // results back to the device, through the core/ device abstraction (CopyBytes), so the same code
  // path serves the CPU device (host-to-host copies) and an accelerator.
  virtual bool offloaded() const { return false; }
};

// Builds a store for a layout; the strategy calls it once at construction.
using StateStoreFactory = std::function<std::unique_ptr<StateStore>(StateStoreLayout layout)>;

// Everything resident in `device` memory, one allocation per (group, slot), zeroed.
std::unique_ptr<StateStore> MakeResidentStateStore(StateStoreLayout layout, Device device);

// Copies elements `range` of slot `slot` of group `group`'s partition out of / into the store,
// acquiring each sub-group the range meets (kRead / kReadWrite) in turn: how checkpoints read and
// write optimizer state, whatever the placement. out/in hold range.size() fp32 values on the host.
void ReadState(StateStore& store, int slot, int group, Range range, float* out);
void WriteState(StateStore& store, int slot, int group, Range range, const float* in);

}  // namespace zerorun::zero

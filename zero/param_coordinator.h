// ZeRO stage 3: the parameter coordinator. Each rank keeps only a shard of every parameter (see
// ShardParamStage3 in partition.h); the coordinator gathers a parameter's full value when a module
// needs it, frees it when no module does, and prefetches along the order in which modules ran in the
// previous pass. It only fetches, prefetches and releases: gradients leave through the gradient-bucket
// path (grad_buckets.h, ShardGradBuckets).
//
// Parameters are identified by dense ids. It knows nothing of modules' types: the engine reports
// "module M is entering its forward/backward with parameters P..." (Enter) and the coordinator keeps
// the trace of those calls; from the second pass on, entering trace position k submits the gathers of
// position k's own parameters, then those of positions k+1, k+2, ... until `prefetch_numel` elements
// gathered for later positions are in flight or resident without a user (position k's own do not
// count), bounded by `max_live_numel` elements resident in total. A pass that departs from the
// trace (a different module, e.g. data-dependent control flow) drops the rest of the trace and
// re-records. Parameters with at most `persistence_threshold` elements stay resident (DeepSpeed's
// param_persistence_threshold); RefreshPersistent re-gathers them after the optimizer updated shards.
// A released parameter whose next use in the trace is within `max_reuse_distance` fetched elements
// stays resident too (DeepSpeed's max_reuse_distance), as long as `max_live_numel` allows.
//
// Every collective is submitted in the same order on every rank because every rank runs the same
// module sequence. A rank that does not (rank-conditional model code: a save or a generate step on
// rank 0 only) is caught by the ranks comparing what they gather and why — at the first gather of each
// pass and after each change of purpose, or before every gather with sanity_checks — and fails at once
// naming each rank's parameter and purpose; what slips through that (the same gathers for the same
// purpose) still ends in the communicator's timeout, which names the op and the missing ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/tensor.h"
#include "zerorun/zero/shard_store.h"

namespace zerorun::zero {

struct Stage3Options {
  int64_t prefetch_numel = 50'000'000;       // stage3_prefetch_bucket_size
  int64_t max_live_numel = 1'000'000'000;    // stage3_max_live_parameters
  int64_t persistence_threshold = 100'000;   // stage3_param_persistence_threshold
  // stage3_max_reuse_distance: a parameter whose next use (in the recorded order) comes before this many
  // parameter elements have been fetched is kept resident instead of released (bounded by max_live).
  int64_t max_reuse_distance = 1'000'000'000;
  // zero_optimization.enable_sanity_checks: before every gather the ranks compare what they are about
  // to gather and why (one small all-gather), so a collective issued by only some ranks (rank-
  // conditional model code, a save on rank 0 only) fails at once with a CommError naming each rank's
  // parameter and purpose, instead of pairing with an unrelated collective or waiting for the timeout.
  // Without it the same comparison runs, as one 16-byte all-reduce, only at the first gather of every
  // pass and after every change of purpose (forward, backward, GatherParameters, save): that catches a
  // save or gather run on some ranks only while the others train, at a cost of a few tiny collectives
  // per step.
  bool sanity_checks = false;
};

class ParamCoordinator {
 public:
  struct Param {
    int64_t numel = 0;
    Tensor shard;   // (shard_numel) this rank's shard, in the model dtype (a view into its partition)
    int unit = -1;  // >= 0 instead of `shard`: the shard is unit `unit` of the shard store
  };

  // `shards` (not owned; may be null when no parameter names a unit) holds the offloaded shards: each
  // gather copies the shard into a device staging buffer (core/ CopyBytes) and gathers from there.
  ParamCoordinator(std::vector<Param> params, comm::Communicator& comm, const Stage3Options& options,
                   ShardStore* shards = nullptr);
  ~ParamCoordinator();
  ParamCoordinator(const ParamCoordinator&) = delete;
  ParamCoordinator& operator=(const ParamCoordinator&) = delete;

  int num_params() const { return static_cast<int>(params_.size()); }
  // What the following gathers are for (compared across ranks with sanity_checks, and named in errors).
  enum class Purpose : int64_t { kForward = 1, kBackward = 2, kGatherParameters = 3, kInit = 4, kSave = 5 };
  // A change of purpose (and every BeginPass) makes the next gather start with a divergence check.
  void set_purpose(Purpose p) {
    if (p != purpose_) check_pending_ = true;
    purpose_ = p;
  }
  // Names parameters in error messages (default: "parameter <id>").
  void set_namer(std::function<std::string(int)> namer) { namer_ = std::move(namer); }
  bool persistent(int id) const;
  // The module with id `module` is entering a forward or backward that uses `param_ids`: record it
  // (first pass) or follow the trace and prefetch ahead (later passes).
  void Enter(int module, const std::vector<int>& param_ids);
  // Blocks until parameter `id` is resident; returns its full value (numel elements). Each Acquire
  // must be matched by a Release.
  Tensor Acquire(int id);
  // The caller no longer needs `id`; its full buffer is freed when no one holds it (persistent ones stay).
  // Returns true when the full value is still resident.
  bool Release(int id);
  // After the optimizer updated the shards: re-gathers the persistent parameters in place and drops
  // every other resident full value (it is stale now).
  void RefreshPersistent();
  // Starts a new pass: the trace cursor goes back to its start.
  void BeginPass();
  // Drops in-flight work (after an error).
  void Reset();

  int64_t resident_numel() const { return resident_numel_; }
  int64_t gathers() const { return gathers_; }
  int64_t prefetch_hits() const { return prefetch_hits_; }
  // Milliseconds spent blocked on parameter gathers since the last call (gathers not hidden behind
  // computation); resets the count.
  double TakeWaitMs() { return std::exchange(wait_ms_, 0.0); }

 private:
  enum class State { kReleased, kInFlight, kResident };
  struct Slot;
  void Submit(int id);
  // Where parameter id's gather reads its shard: the shard itself, or (a unit) the slot's device
  // staging buffer, filled from the shard store.
  const void* GatherSource(int id, Slot& s);
  void Wait(Slot& s);
  void Free(Slot& s);
  void PrefetchFrom(size_t position);
  // sanity_checks: every rank must be gathering parameter `id` for the same purpose.
  void CheckSameOnAllRanks(int id);
  // The light form (see Stage3Options::sanity_checks): one all-reduce of (id, purpose); only on a
  // mismatch the ranks exchange what each is gathering (CheckSameOnAllRanks) to name it.
  void CheckSignature(int id);
  // True when `id` is used again within max_reuse_distance fetched elements after the cursor.
  bool ReusedSoon(int id) const;

  comm::Communicator& comm_;
  Stage3Options opt_;
  ShardStore* shards_ = nullptr;
  Purpose purpose_ = Purpose::kInit;
  bool check_pending_ = true;  // the next Submit runs CheckSignature
  std::function<std::string(int)> namer_;
  std::vector<Param> params_;
  std::vector<Slot> slots_;
  struct TraceEntry {
    int module;
    std::vector<int> params;
  };
  std::vector<TraceEntry> trace_;
  bool recording_ = true;
  size_t cursor_ = 0;
  int64_t resident_numel_ = 0;
  int64_t gathers_ = 0;
  int64_t prefetch_hits_ = 0;
  double wait_ms_ = 0;
};

}  // namespace zerorun::zero

// Strategy: one ZeRO stage's layout of parameters, gradients and optimizer state, and everything that
// depends on it — the gradient path, parameter gathers, overflow and global-norm agreement across
// ranks, the optimizer step over this rank's partition and the refresh after it. The engine drives a
// Strategy without knowing the stage (runtime/engine*.cc holds no stage branches):
//
//     BeginForward(boundary) · PreForward/PostForward(module, params) ...         forward
//     PreBackward/PostBackward(module, params) · GradsReady(params) ... EndBackward  backward
//     FinishReductions · GroupSumSquares · AnyNonFinite · Step(grad_scale) · ZeroGrads  boundary step
//     (GradStatistics, and ReportNonFinite after an overflow: the numerics monitor)
//
// Two implementations (MakeStrategy picks by stage):
//  - flat (stages 0-2, flat_strategy.cc): each parameter group is one flat buffer cut into gradient
//    buckets (partition.h); every parameter's data (and, stages 0/1, gradient) is a view of it. Stage 0
//    all-reduces each bucket and every rank steps everything; stages 1/2 reduce-scatter each bucket
//    (stage 1 on the accumulation boundary into the full gradient buffer, stage 2 every micro-step
//    from transient buckets into a partition accumulator), step their slice of every bucket and
//    all-gather each bucket after its slice is updated (in allgather_bucket_size chunks).
//  - sharded (stage 3, sharded_strategy.cc): every parameter is sharded (ShardParamStage3); a
//    ParamCoordinator gathers a module's parameters for its forward and backward windows; full
//    gradients are coalesced into reduce-scatters of their shards; after the step persistent
//    parameters are re-gathered.
// Both keep master weights and optimizer state in a StateStore (state_store.h) and step it with a
// PartitionOptimizer (partition_optimizer.h) through the caller's UpdateRule.
//
// Parameters are known by dense ids: trainable ones first, group by group in group order (id order
// inside a group is the group's order), then frozen ones. zero/ never sees nn::Parameter: it re-points
// the model's parameters through ParamHost, which the engine implements.
//
// Threads: one thread drives a strategy (the rank's training loop). Collective methods (marked) must
// be called by every rank in the same order. Errors from collectives propagate as CommError /
// TimeoutError; after one thrown out of a backward hook, AbortBackward() drops what is in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/tensor.h"
#include "zerorun/core/timer.h"
#include "zerorun/zero/grad_stats.h"
#include "zerorun/zero/param_coordinator.h"
#include "zerorun/zero/shard_store.h"
#include "zerorun/zero/state_store.h"
#include "zerorun/zero/update_rule.h"

namespace zerorun::zero {

// What zero/ knows of one model parameter.
struct ParamSpec {
  std::string name;
  int64_t numel = 0;
  int group = -1;  // trainable: its parameter group (0-based); frozen: -1
  int index = -1;  // trainable: its position inside the group
  bool trainable() const { return group >= 0; }
};

// The engine's side of the parameters: how zero/ reads initial values and re-points data and grads.
// Tensors handed over are flat (numel elements); the host gives them the parameter's shape.
class ParamHost {
 public:
  virtual ~ParamHost() = default;
  // Writes elements [offset, offset + out.numel()) of parameter id's initial value into `out` (any
  // floating dtype): from its init recipe and seed, or from the value the model holds.
  virtual void ReadInitial(int id, int64_t offset, const Tensor& out) = 0;
  // True when the parameter holds a value of its own (the model was initialised).
  virtual bool HasValue(int id) const = 0;
  // The parameter's current full value (flat); undefined when released.
  virtual Tensor Value(int id) const = 0;
  // Re-points the parameter's data at `value` and marks it available / drops it and marks it released.
  virtual void BindData(int id, const Tensor& value) = 0;
  virtual void ReleaseData(int id) = 0;
  virtual void BindGrad(int id, const Tensor& grad) = 0;
  virtual void ReleaseGrad(int id) = 0;
};

struct StrategyOptions {
  int stage = 0;                       // zero_optimization.stage, 0-3
  DType param_dtype = DType::kF32;     // the model's dtype (working parameters)
  DType grad_dtype = DType::kF32;      // gradient accumulation dtype
  DType comm_dtype = DType::kF32;      // gradient reduction dtype on the wire
  Device device = Device::CPU();       // where parameters, gradients and buckets live
  // Gradient reduction (reference §5.3): "mean" (false: "sum"), prescale_gradients,
  // gradient_predivide_factor; overlap_comm false: each bucket is reduced synchronously.
  bool average = true;
  bool prescale = false;
  double predivide = 1.0;
  bool synchronous = false;
  int64_t reduce_bucket_numel = 500'000'000;     // reduce_bucket_size (>= 1)
  int64_t allgather_bucket_numel = 500'000'000;  // allgather_bucket_size (stages 1/2; <= 0: no limit; even)
  bool round_robin = false;                      // round_robin_gradients (stages 1/2)
  int64_t sub_group_size = 1'000'000'000;        // sub_group_size: the optimizer's unit of work
  Stage3Options stage3;                          // prefetch, live, persistence, reuse, sanity checks
  // Builds the state store (null: resident in `device` memory). Offload plugs in here.
  StateStoreFactory state_store;
  // The store is an offloading one (StateStore::offloaded): fp32 training keeps fp32 master weights
  // in it too, apart from the parameters on `device` (as DeepSpeed's ZeRO-Offload does).
  bool offload_optimizer = false;
  // Stage 3 only: builds the store of the 16-bit parameter shards (null: resident in `device` memory,
  // views into the partitions). Parameter offload (offload_param) plugs in here; fp32 training then
  // keeps fp32 master weights in the state store, as with optimizer offload.
  ShardStoreFactory shard_store;
};

// Where one piece of this rank's optimizer state belongs: elements [param_offset, +numel) of
// parameter `param` are elements [partition_offset, +numel) of group `group`'s partition in the
// store. Checkpoints use these to write and reshard state (ReadState/WriteState in state_store.h).
struct StateExtent {
  int param = 0;
  int64_t param_offset = 0;
  int group = 0;
  int64_t partition_offset = 0;
  int64_t numel = 0;
};

// Which parameters have non-finite gradients on which ranks (Strategy::ReportNonFinite).
struct NonFiniteParam {
  int id = 0;              // parameter id
  std::vector<int> ranks;  // the ranks whose reduced gradients hold non-finite elements of it, ascending
};
struct NonFiniteReport {
  // The union of every rank's first kMaxNonFiniteReported parameters by priority, ordered by
  // (priority, id): the first entry is the first over all ranks.
  std::vector<NonFiniteParam> params;
  std::vector<int> ranks;              // every rank holding a non-finite gradient element, ascending
  std::vector<int64_t> count_by_rank;  // per rank: its parameters with non-finite elements (uncapped)
};
inline constexpr int kMaxNonFiniteReported = 16;  // per rank

class Strategy {
 public:
  virtual ~Strategy() = default;

  // ---- a micro-step ---------------------------------------------------------------------------
  // A forward pass begins; `boundary`: this micro-step ends an accumulation window.
  virtual void BeginForward(bool boundary) = 0;
  virtual void EndForward() = 0;
  // A module enters / leaves its forward or backward window using parameters `ids` (its own, direct
  // ones). `module` is a dense id of the module, the same on every rank. May be collective (stage 3).
  virtual void PreForward(int module, const std::vector<int>& ids) = 0;
  virtual void PostForward(int module, const std::vector<int>& ids) = 0;
  virtual void PreBackward(int module, const std::vector<int>& ids) = 0;
  virtual void PostBackward(int module, const std::vector<int>& ids) = 0;
  // The gradients of `ids` are final for this backward (each trainable id at most once).
  virtual void GradsReady(const std::vector<int>& ids) = 0;
  // After the model's backward: what this stage reduces every micro-step has been reduced. Collective.
  virtual void EndBackward() = 0;
  // After an exception in a backward: drops in-flight reductions and gathers.
  virtual void AbortBackward() noexcept = 0;

  // ---- the accumulation boundary --------------------------------------------------------------
  // Waits for the reductions still travelling (stages 0/1 reduce on the boundary). Collective.
  virtual void FinishReductions() = 0;
  // True when any rank has a non-finite gradient (agreed by all ranks; collective). Which ones, on
  // which ranks: ReportNonFinite. `scan` false: this rank knows its gradients are finite (its share of
  // a finite GroupSumSquares) and only takes part in the agreement, without reading them.
  virtual bool AnyNonFinite(bool scan) = 0;
  // Each group's sum of squares of the (reduced, still scaled) gradients over all ranks. Collective.
  virtual std::vector<double> GroupSumSquares() = 0;
  // Each group's statistics of the reduced, still scaled gradients over all ranks (grad_stats.h):
  // every element counted once — partitions (stages 1-3) are summed and max-reduced across ranks,
  // stage 0's identical full gradients are not. Collective.
  virtual std::vector<GradStats> GradStatistics() = 0;
  // Meant for after AnyNonFinite returned true (so a clean step pays nothing): which parameters have
  // non-finite reduced gradients, on which ranks. `priority` (one entry per parameter id; lower
  // first, e.g. the module's position in backward order) decides which kMaxNonFiniteReported
  // parameters each rank sends (one all-gather of a fixed-size record per rank). Collective.
  virtual NonFiniteReport ReportNonFinite(const std::vector<int64_t>& priority) = 0;
  // The optimizer step on this rank's partition with gradients × grad_scale (the caller advanced the
  // rule's step counts), then the post-step refresh of the parameters. Collective.
  virtual void Step(float grad_scale) = 0;
  virtual void ZeroGrads() = 0;

  // ---- parameters -----------------------------------------------------------------------------
  // True when no rank holds full parameters between windows (stage 3): a save must gather.
  virtual bool ShardsParameters() const = 0;
  // The full value of parameter id for `purpose` until ReleaseFull(id): at stage 3 a gather (every
  // rank must make the same calls), otherwise the parameter's own value.
  virtual Tensor AcquireFull(int id, ParamCoordinator::Purpose purpose) = 0;
  virtual void ReleaseFull(int id) = 0;
  // This rank's own copy of parameter id in the model dtype, flat, and which elements of the flattened
  // parameter it holds (*elements): the whole value at stages 0-2, its stage-3 shard (padding left
  // out) at stage 3. Not a collective. Checkpoints read and write parameters here; after writing, call
  // ParametersChanged().
  virtual Tensor LocalParameter(int id, Range* elements) = 0;
  // Just the elements LocalParameter would return (no copy: with parameter offload it would read the
  // shard).
  virtual Range LocalRange(int id) const = 0;
  // Writes `src` into this rank's copy of parameter id from element `offset` of LocalParameter's
  // range on (a checkpoint load; then ParametersChanged()). With parameter offload the copy is not in
  // memory, so writes go through here rather than into LocalParameter's tensor.
  virtual void WriteLocalParameter(int id, int64_t offset, const Tensor& src) {
    Range r;
    LocalParameter(id, &r).View(offset, {src.numel()}).CopyFrom(src);
  }
  // LocalParameter's tensor where it is the copy itself, so a load may write into it in place (then
  // ParametersChanged()); an undefined tensor (the default) where writes must go through
  // WriteLocalParameter, e.g. where LocalParameter returns a copy (parameter offload).
  virtual Tensor DirectLocalParameter(int /*id*/) { return Tensor(); }
  // After LocalParameter writes (a checkpoint load): refreshes what the strategy keeps gathered
  // (stage 3's persistent parameters; other gathered values are dropped). Collective.
  virtual void ParametersChanged() = 0;

  // ---- state ----------------------------------------------------------------------------------
  virtual StateStore& state_store() = 0;
  // Where stage 3's parameter shards live with parameter offload; null without it.
  virtual ShardStore* shard_store() { return nullptr; }
  virtual std::vector<StateExtent> StateExtents() const = 0;
};

// Builds the strategy for options.stage over `params` (ids = positions; see above). Fills master
// weights and state; binds every parameter's data (and gradients where they are persistent) through
// `host`. `rule`, `host`, `comm` and `timers` must outlive the strategy. `timers` receives
// backward_allreduce, reduce_wait, allgather and gather_wait (see Engine::timers()).
std::unique_ptr<Strategy> MakeStrategy(const StrategyOptions& options, std::vector<ParamSpec> params,
                                       ParamHost& host, UpdateRule& rule, comm::Communicator& comm, Timers& timers);

}  // namespace zerorun::zero

// PartitionOptimizer: steps this rank's partition of every parameter group, sub-group by sub-group,
// through a StateStore (state_store.h) with an UpdateRule (update_rule.h). Both ZeRO strategies use
// it; they describe where each run of a partition keeps its reduced gradients and its working
// (16-bit, or fp32) parameters (PartitionSegment), and it does the rest: the local finite check and
// sums of squares of the gradients, the master-weight initialisation, and the step — acquire a
// sub-group (prefetching the next), update each span of it with one combined unscale+clip factor,
// write the working copy, release it — with Lamb's two passes and its per-tensor norms agreed across
// ranks.
//
// Vocabulary: a group's *partition* is the range [0, numel) of its state (master, moments); a
// *segment* is a run of it whose gradients and parameters are contiguous in memory; a *span* is what
// one kernel call updates: a sub-group ∩ segment (∩ tensor piece for Lamb, ∩ progress point).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/tensor.h"
#include "zerorun/zero/grad_stats.h"
#include "zerorun/zero/shard_store.h"
#include "zerorun/zero/state_store.h"
#include "zerorun/zero/update_rule.h"

namespace zerorun::zero {

// A run [offset, offset + numel) of a group's partition with contiguous gradients and parameters.
struct PartitionSegment {
  int64_t offset = 0;
  int64_t numel = 0;
  const void* grads = nullptr;  // (numel) reduced gradients, grad dtype
  void* params = nullptr;       // (numel) working parameters, param dtype (null when `unit` >= 0)
  // >= 0: the working parameters are unit `unit` of the shard store (PartitionOptimizerOptions::
  // shard_store, parameter offload), numel elements, acquired only while a span uses them.
  int unit = -1;
  // The checks (finite, sums of squares) start a new run of gradients here even where they continue
  // the previous segment's in memory: a run is one kernel call, whose order of addition the bits of a
  // sum depend on.
  bool new_grad_run = false;
};

// A piece of one model tensor inside a group's partition (Lamb's trust ratios are per tensor).
struct TensorPiece {
  int64_t offset = 0;     // in the partition
  int64_t count = 0;
  int64_t tensor_id = 0;  // the same on every rank for the same tensor; 0 <= id < num_tensors
};

struct PartitionGroupSpec {
  int64_t numel = 0;
  std::vector<PartitionSegment> segments;  // tile [0, numel) in order
  std::vector<int64_t> units;              // consecutive sizes tiling [0, numel): sub-groups close at their ends
  // Offsets (ascending) at which a span must end, so that Step's progress callback can fire there
  // (the ends of stage 1/2's all-gather chunks).
  std::vector<int64_t> progress_points;
  std::vector<TensorPiece> tensors;  // every piece of every tensor in the partition (Lamb)
  int64_t num_tensors = 0;
};

struct PartitionOptimizerOptions {
  DType grad_dtype = DType::kF32;
  DType param_dtype = DType::kF32;
  // false (fp32 training): the working parameters are the master weights; the store holds no master.
  bool master_copy = true;
  int64_t sub_group_size = 1'000'000'000;  // zero_optimization.sub_group_size
  // Lamb: tensors are split across ranks, so the per-tensor sums are all-reduced over this (null: this
  // rank holds whole tensors).
  comm::Communicator* norm_comm = nullptr;
  Device device = Device::CPU();    // where working parameters (and gradients, see below) live
  // The segments' gradients are host memory (pinned through `device`'s backend), not `device`'s: the
  // strategy lands them there as the buckets are reduced (CPU optimizer offload) and the step reads
  // them in place. REQUIRED with an offloaded store, whose update runs on the host.
  bool grads_on_host = false;
  StateStoreFactory store_factory;  // null: MakeResidentStateStore on `device`
  // Where segments with a `unit` keep their working parameters (parameter offload; not owned). Its
  // shards are host memory: the kernels write them directly. REQUIRES master_copy.
  ShardStore* shard_store = nullptr;
};

class PartitionOptimizer {
 public:
  // REQUIRES: one spec per parameter group of `rule`; the rule outlives this object.
  PartitionOptimizer(std::vector<PartitionGroupSpec> groups, UpdateRule& rule, const PartitionOptimizerOptions& o);

  // Fills the master weights from the working parameters and the state with its initial values.
  void Initialize();

  // This rank's gradients, each group on its own: all finite / the sum of squares (fp64).
  bool LocalAllFinite() const;
  std::vector<double> LocalSumSquares() const;
  // The tensors (group, tensor id), in partition order, with a non-finite gradient on this rank; at
  // most `max` of them.
  std::vector<std::pair<int, int64_t>> NonFiniteTensors(size_t max) const;
  // Each group's statistics of this rank's gradients (grad_stats.h) over its tensors' pieces (padding
  // left out). Gradients on a device are copied to the host in chunks first.
  std::vector<GradStats> LocalGradStats() const;

  // One optimizer step of every group's partition with gradients multiplied by grad_scale. After each
  // span, progress(group, end) says elements [0, end) of that group's partition are final (their
  // working parameters written); may be null. With an offloaded store, an IoError from the store (a
  // failed write-back: the store keeps the previous state) first puts the previous step's working
  // parameters back from the store's master weights: the step is applied whole or not at all.
  void Step(float grad_scale, const std::function<void(int group, int64_t end)>& progress);

  StateStore& store() { return *store_; }
  const StateStore& store() const { return *store_; }
  const std::vector<PartitionGroupSpec>& groups() const { return groups_; }

 private:
  struct Span {
    int64_t offset, numel;  // in the partition
    size_t segment;
    int64_t tensor = -1;    // Lamb
  };
  // The spans of sub-group i, in partition order.
  std::vector<Span> SpansOf(int i, bool by_tensor) const;
  void StepPasses(float grad_scale, const std::function<void(int group, int64_t end)>& progress);
  void RestoreParams();
  kernels::OptimSpan KernelSpan(int group, const Span& s, const SubGroupState& st, float grad_scale,
                                void* params) const;
  // The working parameters of segment `seg` from element `at` of the partition on: its own pointer, or
  // its shard store unit acquired with `access` (ReleaseParams gives it back).
  void* AcquireParams(const PartitionSegment& seg, int64_t at, StateAccess access);
  void ReleaseParams(const PartitionSegment& seg);
  // Where a segment's working parameters live (the shard store's device for units).
  Device ParamsDevice(const PartitionSegment& seg) const {
    return seg.unit >= 0 ? opt_.shard_store->device() : opt_.device;
  }
  // The span's working parameters in the span loop: acquire for `access`, or kOverwrite when the span
  // covers its whole unit and the caller writes it all.
  void* SpanParams(int group, const Span& s, bool writes_all);
  void SpanDone(int group, const Span& s);
  void StatePointers(const SubGroupState& st, const Span& s, int64_t sub_begin, std::vector<float*>* out) const;
  // Where the segments' gradients live (grads_on_host: the host).
  Device GradsDevice() const { return opt_.grads_on_host ? Device::CPU() : opt_.device; }
  // Offloaded store: param_copy points at host staging (the gradients are on the host already:
  // grads_on_host); WriteBack copies the results to the device parameters.
  // params_on_host: the span's working parameters are a shard-store unit (host memory): the kernel
  // writes them in place, nothing is staged or copied back.
  void StageIn(kernels::OptimSpan* k, bool params_on_host);
  void WriteBack(const kernels::OptimSpan& k, void* device_params, bool params_on_host) const;
  bool ParamsOnHost(int group, const Span& s) const {
    return groups_[static_cast<size_t>(group)].segments[s.segment].unit >= 0;
  }

  std::vector<PartitionGroupSpec> groups_;
  UpdateRule& rule_;
  PartitionOptimizerOptions opt_;
  std::unique_ptr<StateStore> store_;
  int master_slot_ = -1;  // -1: no master copy
  // Host staging of one span's working parameters (offloaded stores only): charged to
  // MemCategory::kPinned, sized by the largest sub-group.
  Tensor param_stage_;
  // Runs of gradients contiguous in memory (merged segments), per group: for the checks.
  struct GradRun {
    const void* grads;
    int64_t numel;
    int64_t offset;
  };
  std::vector<std::vector<GradRun>> grad_runs_;
};

}  // namespace zerorun::zero

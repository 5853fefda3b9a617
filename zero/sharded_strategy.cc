// The sharded strategy (ZeRO stage 3): every parameter is sharded (partition.h ShardParamStage3); this
// rank's shards of a group are concatenated into its partition (16-bit working copy, gradient
// accumulator; fp32 master and optimizer state in the state store), frozen parameters' shards into
// one 16-bit buffer, and the model's parameters are released until a module's window gathers them
// (param_coordinator.h). In backward each parameter's full gradient lives in a transient buffer until
// it is final, then joins the gradient-bucket path (ShardGradBuckets: coalesced reduce-scatters into
// the shards). After the step the persistent parameters are re-gathered; the others are gathered by
// the next forward. With parameter offload (StrategyOptions::shard_store) the 16-bit shards are not in
// device memory at all: each is a unit of the shard store (shard_store.h), the optimizer's segments
// are one per parameter naming its unit, and the coordinator copies a shard to the device to gather it.
#include <algorithm>

#include "zerorun/core/error.h"
#include "zerorun/core/timer.h"
#include "zerorun/zero/grad_buckets.h"
#include "zerorun/zero/strategy_common.h"

namespace zerorun::zero {

namespace {

class ShardedStrategy final : public PartitionedStrategy {
 public:
  ShardedStrategy(const StrategyOptions& options, std::vector<ParamSpec> params, ParamHost& host, UpdateRule& rule,
                  comm::Communicator& comm, Timers& timers);
  ~ShardedStrategy() override {
    queue_.Reset();
    if (coord_) coord_->Reset();
  }

  void BeginForward(bool) override {
    coord_->BeginPass();
    coord_->TakeWaitMs();  // waits outside forward/backward (GatherParameters) are not counted
  }
  void EndForward() override { timers_.Add("gather_wait", coord_->TakeWaitMs()); }
  void PreForward(int module, const std::vector<int>& ids) override { Gather(module, ids, false); }
  void PostForward(int, const std::vector<int>& ids) override { Release(ids); }
  void PreBackward(int module, const std::vector<int>& ids) override { Gather(module, ids, true); }
  void PostBackward(int, const std::vector<int>& ids) override { Release(ids); }
  void GradsReady(const std::vector<int>& ids) override;
  void EndBackward() override;
  void AbortBackward() noexcept override;
  void FinishReductions() override { ScopedTimer timer(timers_, "backward_allreduce"); }  // reduced in EndBackward
  void Step(float grad_scale) override;
  void ZeroGrads() override {
    for (Tensor& g : grad_parts_) g.Zero();
  }
  bool ShardsParameters() const override { return true; }
  Tensor AcquireFull(int id, ParamCoordinator::Purpose purpose) override {
    coord_->set_purpose(purpose);
    return coord_->Acquire(id);
  }
  void ReleaseFull(int id) override { coord_->Release(id); }
  Range LocalRange(int id) const override {
    return ShardParamStage3(params_[static_cast<size_t>(id)].numel, comm_.size(), comm_.rank()).real;
  }
  Tensor LocalParameter(int id, Range* elements) override {
    *elements = LocalRange(id);
    if (!shard_store_) return shards_[static_cast<size_t>(id)].View(0, {elements->size()});
    // Offloaded: a copy (what the store holds is only borrowed while acquired).
    Tensor copy = Tensor::Empty({elements->size()}, opt_.param_dtype, Device::CPU(), MemCategory::kOther);
    void* p = shard_store_->Acquire(id, StateAccess::kRead);
    copy.CopyFrom(UnitTensor(p, elements->size()));
    shard_store_->Release(id);
    return copy;
  }
  Tensor DirectLocalParameter(int id) override {
    if (shard_store_) return Tensor();
    return shards_[static_cast<size_t>(id)].View(0, {LocalRange(id).size()});
  }
  void WriteLocalParameter(int id, int64_t offset, const Tensor& src) override {
    if (!shard_store_) {
      shards_[static_cast<size_t>(id)].View(offset, {src.numel()}).CopyFrom(src);
      return;
    }
    const int64_t n = ShardParamStage3(params_[static_cast<size_t>(id)].numel, comm_.size(), comm_.rank()).shard_numel;
    ZR_CHECK(offset >= 0 && offset + src.numel() <= n, "write of {} elements at {} into a shard of {}", src.numel(),
             offset, n);
    void* p = shard_store_->Acquire(id, StateAccess::kReadWrite);
    UnitTensor(p, n).View(offset, {src.numel()}).CopyFrom(src);
    shard_store_->Release(id);
  }
  ShardStore* shard_store() override { return shard_store_.get(); }
  void ParametersChanged() override {
    if (shard_store_) shard_store_->Flush();
    coord_->RefreshPersistent();
  }

 private:
  void Gather(int module, const std::vector<int>& ids, bool backward);
  void Release(const std::vector<int>& ids);
  // This rank's shard of parameter id's initial value (the shard's padding stays zero).
  void FillShard(int id, const Tensor& shard);
  // n elements of the model dtype at p (a shard store unit's host memory) as a tensor.
  Tensor UnitTensor(void* p, int64_t n) const {
    const size_t bytes = static_cast<size_t>(n) * DTypeSize(opt_.param_dtype);
    return Tensor::FromStorage(Storage::Wrap(p, bytes, shard_store_->device()), 0, {n}, opt_.param_dtype);
  }
  // Parameter offload: a store with one unit per parameter (its shard), filled with the initial values.
  void BuildShardStore();

  std::vector<Tensor> param_parts_;  // per group: (partition) this rank's shards, model dtype
  std::vector<Tensor> grad_parts_;   // per group: (partition) their gradient accumulators
  Tensor frozen_shards_;             // this rank's shards of the frozen parameters
  std::vector<Tensor> shards_;       // per id: its shard (a view of param_parts_ or frozen_shards_; none
                                     // with a shard store)
  std::unique_ptr<ShardStore> shard_store_;  // parameter offload: every shard (before coord_: outlives it)
  std::vector<Tensor> full_grads_;   // per id: the full gradient during backward (kBuckets)
  std::unique_ptr<ParamCoordinator> coord_;
  std::unique_ptr<ShardGradBuckets> grads_;
};

void ShardedStrategy::FillShard(int id, const Tensor& shard) {
  const Stage3Shard sh = ShardParamStage3(params_[static_cast<size_t>(id)].numel, comm_.size(), comm_.rank());
  if (!sh.real.empty()) host_.ReadInitial(id, sh.real.begin, shard.View(0, {sh.real.size()}));
}

void ShardedStrategy::BuildShardStore() {
  ShardStoreLayout layout;
  layout.dtype = opt_.param_dtype;
  for (const ParamSpec& p : params_) {
    layout.unit_numels.push_back(ShardParamStage3(p.numel, comm_.size(), comm_.rank()).shard_numel);
    layout.unit_names.push_back(p.name);
  }
  shard_store_ = opt_.shard_store(std::move(layout));
  ZR_CHECK(shard_store_ != nullptr, "the shard store factory returned no store");
  for (size_t id = 0; id < params_.size(); ++id) {
    const int u = static_cast<int>(id);
    Tensor shard = UnitTensor(shard_store_->Acquire(u, StateAccess::kOverwrite),
                              shard_store_->layout().unit_numels[id]);
    shard.Zero();  // the padding
    FillShard(u, shard);
    shard_store_->Release(u);
  }
  shard_store_->Flush();
}

ShardedStrategy::ShardedStrategy(const StrategyOptions& options, std::vector<ParamSpec> params, ParamHost& host,
                                 UpdateRule& rule, comm::Communicator& comm, Timers& timers)
    : PartitionedStrategy(options, std::move(params), host, rule, comm, timers) {
  const int world = comm_.size();
  const int rank = comm_.rank();
  const bool offload = opt_.shard_store != nullptr;
  if (offload) BuildShardStore();
  std::vector<ParamCoordinator::Param> coord_params(params_.size());
  std::vector<int64_t> numels(params_.size());
  std::vector<Tensor> grad_shards(params_.size());
  shards_.resize(params_.size());
  std::vector<PartitionGroupSpec> specs;
  for (size_t g = 0; g < group_ids_.size(); ++g) {
    const std::vector<int>& ids = group_ids_[g];
    std::vector<int64_t> offsets;
    int64_t part = 0;
    for (int id : ids) {
      offsets.push_back(part);
      part += ShardParamStage3(params_[static_cast<size_t>(id)].numel, world, rank).shard_numel;
    }
    Tensor shards = offload ? Tensor() : Tensor::Zeros({part}, opt_.param_dtype, opt_.device, MemCategory::kParams);
    Tensor grads = PartitionGradBuffer(part);  // with optimizer offload: pinned host memory
    PartitionGroupSpec spec;
    spec.numel = part;
    if (!offload) spec.segments.push_back({0, part, grads.data(), shards.data()});
    spec.num_tensors = static_cast<int64_t>(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const int id = ids[i];
      const ParamSpec& p = params_[static_cast<size_t>(id)];
      const Stage3Shard sh = ShardParamStage3(p.numel, world, rank);
      grad_shards[static_cast<size_t>(id)] = grads.View(offsets[i], {sh.shard_numel});
      if (offload) {  // one segment per shard: its working parameters are the store's unit `id`
        spec.segments.push_back({offsets[i], sh.shard_numel, grad_shards[static_cast<size_t>(id)].data(), nullptr, id});
        coord_params[static_cast<size_t>(id)] = {p.numel, Tensor(), id};
      } else {
        Tensor shard = shards.View(offsets[i], {sh.shard_numel});
        FillShard(id, shard);
        coord_params[static_cast<size_t>(id)] = {p.numel, shard};
        shards_[static_cast<size_t>(id)] = shard;
      }
      numels[static_cast<size_t>(id)] = p.numel;
      spec.units.push_back(sh.shard_numel);
      if (!sh.real.empty()) {
        spec.tensors.push_back({offsets[i], sh.real.size(), static_cast<int64_t>(i)});
        extents_.push_back({id, sh.real.begin, static_cast<int>(g), offsets[i], sh.real.size()});
      }
    }
    param_parts_.push_back(shards);
    grad_parts_.push_back(grads);
    specs.push_back(std::move(spec));
  }
  // Frozen parameters are sharded the same way (16-bit shards only: no gradient, master or state).
  int64_t frozen_numel = 0;
  for (const ParamSpec& p : params_) {
    if (!p.trainable() && !offload) frozen_numel += ShardParamStage3(p.numel, world, rank).shard_numel;
  }
  frozen_shards_ = Tensor::Zeros({frozen_numel}, opt_.param_dtype, opt_.device, MemCategory::kParams);
  int64_t offset = 0;
  for (size_t id = 0; id < params_.size(); ++id) {
    const ParamSpec& p = params_[id];
    if (p.trainable()) continue;
    numels[id] = p.numel;
    if (offload) {
      coord_params[id] = {p.numel, Tensor(), static_cast<int>(id)};
      continue;
    }
    const int64_t n = ShardParamStage3(p.numel, world, rank).shard_numel;
    Tensor shard = frozen_shards_.View(offset, {n});
    offset += n;
    FillShard(static_cast<int>(id), shard);
    coord_params[id] = {p.numel, shard};
    shards_[id] = shard;
  }
  // The full values are dropped: from now on they exist only while a module's window holds them.
  for (size_t id = 0; id < params_.size(); ++id) {
    host_.ReleaseData(static_cast<int>(id));
    host_.ReleaseGrad(static_cast<int>(id));
  }
  full_grads_.resize(params_.size());
  BuildOptimizer(std::move(specs), /*partitioned=*/world > 1, shard_store_.get());
  grads_ = std::make_unique<ShardGradBuckets>(std::move(numels), std::move(grad_shards), opt_.reduce_bucket_numel, queue_);
  coord_ = std::make_unique<ParamCoordinator>(std::move(coord_params), comm_, opt_.stage3, shard_store_.get());
  std::vector<std::string> names;
  for (const ParamSpec& p : params_) names.push_back(p.name);
  coord_->set_namer([names](int id) { return names.at(static_cast<size_t>(id)); });
  // Persistent parameters are resident from the start: bind them for good.
  for (size_t id = 0; id < params_.size(); ++id) {
    if (coord_->persistent(static_cast<int>(id))) host_.BindData(static_cast<int>(id), coord_->Acquire(static_cast<int>(id)));
  }
}

void ShardedStrategy::Gather(int module, const std::vector<int>& ids, bool backward) {
  coord_->set_purpose(backward ? ParamCoordinator::Purpose::kBackward : ParamCoordinator::Purpose::kForward);
  coord_->Enter(module * 2 + (backward ? 1 : 0), ids);
  for (int id : ids) {
    host_.BindData(id, coord_->Acquire(id));
    const ParamSpec& p = params_[static_cast<size_t>(id)];
    if (backward && p.trainable()) {
      Tensor& full = full_grads_[static_cast<size_t>(id)];
      if (!full.defined()) {  // a tied parameter keeps its gradient across its modules' backwards
        full = Tensor::Zeros({p.numel}, opt_.grad_dtype, opt_.device, MemCategory::kBuckets);
      }
      host_.BindGrad(id, full);
    }
  }
}

void ShardedStrategy::Release(const std::vector<int>& ids) {
  for (int id : ids) {
    if (!coord_->Release(id)) host_.ReleaseData(id);
  }
}

void ShardedStrategy::GradsReady(const std::vector<int>& ids) {
  for (int id : ids) {
    if (!params_[static_cast<size_t>(id)].trainable()) continue;
    Tensor& full = full_grads_[static_cast<size_t>(id)];
    grads_->Add(id, full);
    full = Tensor();
    host_.ReleaseGrad(id);
  }
}

void ShardedStrategy::EndBackward() {
  timers_.Add("reduce_wait", queue_.TakeWaitMs());       // overlap_comm false, or waiting for a slot
  timers_.Add("gather_wait", coord_->TakeWaitMs());      // inside "backward"
  ScopedTimer timer(timers_, "backward_allreduce");
  grads_->SubmitOpen();
  queue_.Drain();
}

void ShardedStrategy::AbortBackward() noexcept {
  queue_.Reset();
  grads_->Reset();
  for (Tensor& t : full_grads_) t = Tensor();
  coord_->Reset();
}

void ShardedStrategy::Step(float grad_scale) {
  optimizer_->Step(grad_scale, nullptr);
  if (shard_store_) shard_store_->Flush();  // every shard written back before anything gathers it
  ScopedTimer timer(timers_, "allgather");
  coord_->RefreshPersistent();  // the others are gathered by the next forward
}

}  // namespace

std::unique_ptr<Strategy> MakeShardedStrategy(const StrategyOptions& options, std::vector<ParamSpec> params,
                                              ParamHost& host, UpdateRule& rule, comm::Communicator& comm,
                                              Timers& timers) {
  return std::make_unique<ShardedStrategy>(options, std::move(params), host, rule, comm, timers);
}

}  // namespace zerorun::zero

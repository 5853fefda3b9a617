// ZeRO stage 3 layout: every parameter is sharded (partition.h ShardParamStage3); this
// rank's shards of a group are concatenated into its partition (16-bit working copy, fp32 master,
// optimizer state, gradient accumulator), frozen parameters' shards into one 16-bit buffer, and the
// model's parameters are released until a module's window gathers them (the observer in engine.cc,
// zero/param_coordinator.h).
#include <algorithm>

#include "zerorun/core/error.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/engine_internal.h"
#include "zerorun/runtime/nn/init.h"

namespace zerorun::runtime {

namespace {

// This rank's shard of p's initial value: computed from p's recipe (init_seed) or cut from its value.
void FillShard(const nn::Parameter& p, const std::optional<uint64_t>& init_seed, int world, int rank, Tensor& shard) {
  const zero::Stage3Shard sh = zero::ShardParamStage3(p.numel(), world, rank);
  if (sh.real.empty()) return;
  Tensor dst = shard.View(0, {sh.real.size()});
  if (init_seed) {
    // Only this rank's elements of the parameter are ever computed.
    std::vector<float> values(static_cast<size_t>(sh.real.size()));
    nn::FillInit(p.init(), p.shape(), *init_seed, p.name(), sh.real.begin, values.data(), sh.real.size());
    Convert(values.data(), DType::kF32, dst.data(), dst.dtype(), values.size());
  } else {
    dst.CopyFrom(p.engine_data().Flatten().View(sh.real.begin, {sh.real.size()}));
  }
}

}  // namespace

void Engine::BuildGroupsStage3() {
  const int world = comm_->size();
  const int rank = comm_->rank();
  const DType grad_dtype = config_.GradAccumDType();
  std::vector<zero::ParamCoordinator::Param> coord_params;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& pg = groups_[gi];
    GroupState gs;
    int64_t part = 0;
    for (nn::Parameter* p : pg.params) {
      gs.shard_offsets.push_back(part);
      part += zero::ShardParamStage3(p->numel(), world, rank).shard_numel;
    }
    // The partition: the concatenated shards (a layout with one "parameter" per rank, for the parts of
    // the engine that speak FlatGroupLayout: own range, norms, overflow attribution).
    gs.layout = zero::LayoutFlatGroup({part * world}, world, 1);
    gs.own = gs.layout.Partition(rank);
    gs.flat_params = Tensor::Zeros({part}, model_dtype_, Device::CPU(), MemCategory::kParams);
    gs.part_grads = Tensor::Zeros({part}, grad_dtype, Device::CPU(), MemCategory::kGrads);
    gs.own_params = gs.flat_params;
    gs.own_grads = gs.part_grads;
    for (size_t i = 0; i < pg.params.size(); ++i) {
      nn::Parameter* p = pg.params[i];
      zero::Stage3Shard sh = zero::ShardParamStage3(p->numel(), world, rank);
      Tensor shard = gs.flat_params.View(gs.shard_offsets[i], {sh.shard_numel});
      FillShard(*p, options_.init_seed, world, rank, shard);
      if (!sh.real.empty()) {
        gs.own_slices.push_back({static_cast<int>(i), sh.real.begin, gs.shard_offsets[i], sh.real.size()});
      }
      impl_->param_id[p] = static_cast<int>(coord_params.size());
      impl_->where[p] = {static_cast<int>(gi), static_cast<int>(i)};
      coord_params.push_back({p->numel(), shard, gs.part_grads.View(gs.shard_offsets[i], {sh.shard_numel})});
    }
    if (model_dtype_ != DType::kF32) {
      gs.master = Tensor::Empty({part}, DType::kF32, Device::CPU(), MemCategory::kMaster);
      gs.master.CopyFrom(gs.flat_params);
    } else {
      gs.master = gs.flat_params;
    }
    impl_->groups.push_back(std::move(gs));
  }
  // Frozen parameters are sharded the same way (16-bit shards only: no gradient, master or state).
  std::vector<nn::Parameter*> frozen;
  int64_t frozen_numel = 0;
  for (nn::Parameter* p : model_.Parameters()) {
    if (p->requires_grad()) continue;
    frozen.push_back(p);
    frozen_numel += zero::ShardParamStage3(p->numel(), world, rank).shard_numel;
  }
  impl_->frozen_shards = Tensor::Zeros({frozen_numel}, model_dtype_, Device::CPU(), MemCategory::kParams);
  int64_t offset = 0;
  for (nn::Parameter* p : frozen) {
    const int64_t n = zero::ShardParamStage3(p->numel(), world, rank).shard_numel;
    Tensor shard = impl_->frozen_shards.View(offset, {n});
    offset += n;
    FillShard(*p, options_.init_seed, world, rank, shard);
    impl_->param_id[p] = static_cast<int>(coord_params.size());
    coord_params.push_back({p->numel(), shard, Tensor()});
  }
  // The full values are dropped: from now on they exist only while a module's window holds them.
  for (auto& [p, id] : impl_->param_id) {
    p->ReleaseData();
    p->ReleaseGrad();
    p->SetAvailable(false);
  }
  impl_->full_grads.resize(coord_params.size());
  zero::Stage3Options so;
  so.prefetch_numel = config_.zero_optimization.prefetch_bucket_size;
  so.max_live_numel = config_.zero_optimization.max_live_parameters;
  so.persistence_threshold = config_.zero_optimization.param_persistence_threshold;
  so.max_reuse_distance = config_.zero_optimization.max_reuse_distance;
  so.sanity_checks = config_.zero_optimization.enable_sanity_checks;
  so.comm_dtype = config_.CommDType();
  so.reduce_bucket_numel = std::max<int64_t>(1, config_.zero_optimization.reduce_bucket_size);
  so.average = config_.gradient_allreduce_op == AllReduceOp::kMean;
  so.prescale = config_.prescale_gradients;
  so.predivide = config_.gradient_predivide_factor;
  so.synchronous_grads = config_.OverlapCommDisabled();
  impl_->coord = std::make_unique<zero::ParamCoordinator>(std::move(coord_params), *comm_, so);
  std::vector<std::string> names(impl_->param_id.size());
  for (const auto& [p, id] : impl_->param_id) names[static_cast<size_t>(id)] = p->name();
  impl_->coord->set_namer([names](int id) { return names.at(static_cast<size_t>(id)); });
  // Persistent parameters are resident from the start: bind them for good.
  for (auto& [p, id] : impl_->param_id) {
    if (impl_->coord->persistent(id)) {
      p->BindData(impl_->coord->Acquire(id).Reshape(p->shape()));
      p->SetAvailable(true);
    }
  }
}

}  // namespace zerorun::runtime

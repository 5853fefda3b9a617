// ZeRO stage 3 layout: every trainable parameter is sharded (partition.h ShardParamStage3); this
// rank's shards of a group are concatenated into its partition (16-bit working copy, fp32 master,
// optimizer state, gradient accumulator), and the model's parameters are released until a module's
// window gathers them (the observer in engine.cc, zero/param_coordinator.h).
#include "zerorun/core/error.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/engine_internal.h"
#include "zerorun/runtime/nn/init.h"

namespace zerorun::runtime {

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
      if (!sh.real.empty()) {
        Tensor dst = shard.View(0, {sh.real.size()});
        if (options_.init_seed) {
          // Only this rank's elements of the parameter are ever computed.
          std::vector<float> values(static_cast<size_t>(sh.real.size()));
          nn::FillInit(p->init(), p->shape(), *options_.init_seed, p->name(), sh.real.begin, values.data(),
                       sh.real.size());
          Convert(values.data(), DType::kF32, dst.data(), dst.dtype(), values.size());
        } else {
          dst.CopyFrom(p->engine_data().Flatten().View(sh.real.begin, {sh.real.size()}));
        }
        gs.own_slices.push_back({static_cast<int>(i), sh.real.begin, gs.shard_offsets[i], sh.real.size()});
      }
      impl_->param_id[p] = static_cast<int>(coord_params.size());
      impl_->where[p] = {static_cast<int>(gi), static_cast<int>(i)};
      coord_params.push_back({p->numel(), shard, gs.part_grads.View(gs.shard_offsets[i], {sh.shard_numel})});
      // The full value is dropped: from now on it exists only while a module's window holds it.
      p->ReleaseData();
      p->ReleaseGrad();
      p->SetAvailable(false);
    }
    if (model_dtype_ != DType::kF32) {
      gs.master = Tensor::Empty({part}, DType::kF32, Device::CPU(), MemCategory::kMaster);
      gs.master.CopyFrom(gs.flat_params);
    } else {
      gs.master = gs.flat_params;
    }
    impl_->groups.push_back(std::move(gs));
  }
  impl_->full_grads.resize(coord_params.size());
  zero::Stage3Options so;
  so.prefetch_numel = config_.zero_optimization.prefetch_bucket_size;
  so.max_live_numel = config_.zero_optimization.max_live_parameters;
  so.persistence_threshold = config_.zero_optimization.param_persistence_threshold;
  so.max_reuse_distance = config_.zero_optimization.max_reuse_distance;
  so.sanity_checks = config_.zero_optimization.enable_sanity_checks;
  so.comm_dtype = config_.CommDType();
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

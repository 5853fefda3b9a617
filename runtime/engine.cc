// Engine construction, the observer that streams gradients into reduction buckets, forward/backward
// and the counters. The boundary step (overflow, norm, clip, update, gather) is in engine_step.cc.
#include "zerorun/runtime/engine.h"

#include <algorithm>
#include <unordered_map>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/runtime/engine_internal.h"
#include "zerorun/runtime/engine_settings.h"
#include "zerorun/runtime/engine_validate.h"
#include "zerorun/runtime/nn/init.h"

namespace zerorun::runtime {

// The engine's side of the model's windows: reports final gradients to the reducers while this
// backward reduces (boundary micro-steps for stages 0/1, every micro-step for stages 2/3), binds stage
// 2's transient gradient buffers, and at stage 3 gathers each module's parameters for its window and
// releases them after.
class Engine::Observer final : public nn::ModuleObserver {
 public:
  explicit Observer(Engine& e) : e_(e) {}

  // ---- stage 3: gather a module's parameters around its windows, release after ---------------
  void PreForward(nn::Module& m, bool) override {
    if (e_.zero_stage() == 3) Gather(m, /*backward=*/false);
  }
  void PostForward(nn::Module& m, bool) override {
    if (e_.zero_stage() == 3) Release(m);
  }
  void PostBackward(nn::Module& m) override {
    if (e_.zero_stage() == 3) Release(m);
  }

  void PreBackward(nn::Module& m) override {
    if (e_.zero_stage() == 3) {
      Gather(m, /*backward=*/true);
      return;
    }
    if (e_.zero_stage() < 2) return;
    // Stage 2: gradients live in transient bucket buffers; bind them before the layer adds into them.
    for (nn::Parameter* p : m.DirectParameters()) {
      auto it = e_.impl_->where.find(p);
      if (it == e_.impl_->where.end()) continue;
      auto& g = e_.impl_->groups[static_cast<size_t>(it->second.first)];
      p->BindGrad(g.reducer->GradView(it->second.second, p->shape()));
    }
  }
  void GradsReady(nn::Module&, const std::vector<nn::Parameter*>& params) override {
    for (nn::Parameter* p : params) e_.impl_->grads_seen.insert(p);
    if (e_.zero_stage() == 3) {
      for (nn::Parameter* p : params) {
        auto it = e_.impl_->param_id.find(p);
        if (it == e_.impl_->param_id.end() || !p->requires_grad()) continue;
        Tensor& full = e_.impl_->full_grads[static_cast<size_t>(it->second)];
        e_.impl_->coord->ReduceGrad(it->second, full);
        full = Tensor();
        p->ReleaseGrad();
      }
      return;
    }
    if (!e_.impl_->reducing) return;
    for (nn::Parameter* p : params) {
      auto it = e_.impl_->where.find(p);
      if (it == e_.impl_->where.end()) continue;
      e_.impl_->groups[static_cast<size_t>(it->second.first)].reducer->MarkReady(it->second.second);
    }
  }

 private:
  void Gather(nn::Module& m, bool backward) {
    Impl& im = *e_.impl_;
    std::vector<std::pair<nn::Parameter*, int>> owned;
    std::vector<int> ids;
    for (nn::Parameter* p : m.DirectParameters()) {
      auto it = im.param_id.find(p);
      if (it == im.param_id.end()) continue;
      owned.emplace_back(p, it->second);
      ids.push_back(it->second);
    }
    if (ids.empty()) return;
    auto [mit, inserted] = im.module_id.try_emplace(&m, static_cast<int>(im.module_id.size()));
    im.coord->set_purpose(backward ? zero::ParamCoordinator::Purpose::kBackward
                                   : zero::ParamCoordinator::Purpose::kForward);
    im.coord->Enter(mit->second * 2 + (backward ? 1 : 0), ids);
    for (auto [p, id] : owned) {
      p->BindData(im.coord->Acquire(id).Reshape(p->shape()));
      p->SetAvailable(true);
      if (backward && p->requires_grad()) {
        Tensor& full = im.full_grads[static_cast<size_t>(id)];
        if (!full.defined()) {  // a tied parameter keeps its gradient across its modules' backwards
          full = Tensor::Zeros(p->shape(), e_.config_.GradAccumDType(), Device::CPU(), MemCategory::kBuckets);
        }
        p->BindGrad(full);
      }
    }
  }
  void Release(nn::Module& m) {
    Impl& im = *e_.impl_;
    for (nn::Parameter* p : m.DirectParameters()) {
      auto it = im.param_id.find(p);
      if (it == im.param_id.end()) continue;
      if (!im.coord->Release(it->second)) {
        p->ReleaseData();
        p->SetAvailable(false);
      }
    }
  }

  Engine& e_;
};

Engine::Engine(nn::LossModule& model, Config config, std::shared_ptr<comm::Communicator> comm, EngineOptions options)
    : model_(model),
      config_(std::move(config)),
      comm_owner_(std::move(comm)),
      comm_(comm_owner_.get()),
      options_(std::move(options)),
      account_(options_.name) {
  Init();
}

Engine::Engine(nn::LossModule& model, Config config, comm::Communicator& comm, EngineOptions options)
    : model_(model), config_(std::move(config)), comm_(&comm), options_(std::move(options)), account_(options_.name) {
  Init();
}

Engine::~Engine() {
  model_.SetObserver(nullptr);
  if (impl_) {
    for (auto& g : impl_->groups) {
      if (g.reducer) g.reducer->Reset();
    }
    if (impl_->coord) impl_->coord->Reset();
  }
}

void Engine::Init() {
  ZR_CHECK(comm_ != nullptr, "Engine needs a communicator");
  ScopedMemoryAccount scope(&account_);
  impl_ = std::make_unique<Impl>();
  ValidateForEngine(config_, comm_->size());  // the checks `zerorun-config check` runs too
  ApplyProcessSettings(config_, *comm_);       // log_level, comms_logger
  const int stage = zero_stage();
  model_dtype_ = config_.ModelDType();
  std::vector<nn::Parameter*> params = model_.Parameters();
  for (nn::Parameter* p : params) {
    num_parameters_ += p->numel();
    if (p->dtype() != model_dtype_) {
      ZR_THROW(ConfigError, "the config trains in {} ({}), but parameter {} is {}: build the model with dtype {}",
               DTypeName(model_dtype_), model_dtype_ == DType::kF32 ? "neither fp16 nor bf16 enabled"
               : model_dtype_ == DType::kBF16 ? "bf16.enabled" : "fp16.enabled", p->name(), DTypeName(p->dtype()),
               DTypeName(model_dtype_));
    }
    if (!p->engine_data().defined() && !options_.init_seed) {
      ZR_THROW(InvalidArgument, "parameter {} has no value: call model.Initialize(seed) before creating the engine, "
               "or set EngineOptions::init_seed", p->name());
    }
  }
  if (options_.init_seed) {
    model_.SetRngSeed(*options_.init_seed);
    // Frozen parameters are not partitioned at stages 0-2: they get their full value here (stage 3
    // shards them like the others).
    for (nn::Parameter* p : params) {
      if (p->requires_grad() || stage == 3) continue;
      p->AllocateData();
      nn::FillInitTensor(p->init(), *options_.init_seed, p->name(), p->engine_data());
    }
  }
  groups_ = BuildParamGroups(params, options_.groups);
  if (groups_.empty()) ZR_THROW(InvalidArgument, "the model has no trainable parameters");
  for (const ParamGroup& pg : groups_) impl_->trainable_params += static_cast<int64_t>(pg.params.size());
  BuildGroups();
  BuildOptimizer();
  impl_->scaler = MakeLossScaler(config_);
  impl_->observer = std::make_unique<Observer>(*this);
  model_.SetObserver(impl_->observer.get());
  const auto checkpointing = options_.activation_checkpointing ? options_.activation_checkpointing
                                                               : ActivationCheckpointingOptions::FromConfig(config_);
  if (checkpointing && checkpointing->enabled) {
    checkpointer_ = std::make_unique<ActivationCheckpointer>(model_, *checkpointing, rank() == 0);
  }
  if (config_.csv_monitor.enabled && rank() == 0) {
    impl_->monitor = std::make_unique<CsvMonitor>(config_.csv_monitor.output_path, config_.csv_monitor.job_name);
  }
  if (rank() == 0) {
    ZR_INFO("engine: ZeRO stage {}, {} on {} rank(s), {} parameters in {} group(s), micro batch {} x accumulation {} "
            "x world {} = batch {}", stage, DTypeName(model_dtype_), world_size(), num_parameters_, groups_.size(),
            config_.micro_batch_per_gpu(), config_.gradient_accumulation_steps(), world_size(),
            config_.train_batch_size());
  }
  if (config_.dump_state && rank() == 0) ZR_INFO("{}", EngineStateText(*this));
}

void Engine::BuildGroups() {
  if (zero_stage() == 3) return BuildGroupsStage3();
  const int world = comm_->size();
  const int rank = comm_->rank();
  const int stage = zero_stage();
  const DType grad_dtype = config_.GradAccumDType();
  const bool master_copy = model_dtype_ != DType::kF32;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& pg = groups_[gi];
    GroupState gs;
    std::vector<int64_t> numels;
    for (nn::Parameter* p : pg.params) numels.push_back(p->numel());
    // Stage 0 still pads to 2W so the same layout (and checkpoint geometry) serves every stage.
    gs.layout = zero::LayoutFlatGroup(numels, world, 2, stage >= 1 && config_.zero_optimization.round_robin_gradients);
    gs.own = stage == 0 ? zero::Range{0, gs.layout.padded_numel} : gs.layout.Partition(rank);
    gs.flat_params = Tensor::Zeros({gs.layout.padded_numel}, model_dtype_, Device::CPU(), MemCategory::kParams);
    for (size_t i = 0; i < pg.params.size(); ++i) {
      nn::Parameter* p = pg.params[i];
      Tensor view = gs.flat_params.View(gs.layout.offsets[i], p->shape());
      if (options_.init_seed) {
        nn::FillInitTensor(p->init(), *options_.init_seed, p->name(), view);
      } else {
        view.CopyFrom(p->engine_data());
      }
      p->BindData(view);
      impl_->where[p] = {static_cast<int>(gi), static_cast<int>(i)};
    }
    zero::GradReduceOptions ro;
    // reduce_bucket_size at every stage (DeepSpeed's stage 0 uses a fixed 5e8, the same as the default).
    ro.bucket_numel = std::max<int64_t>(1, config_.zero_optimization.reduce_bucket_size);
    ro.comm_dtype = config_.CommDType();
    ro.average = config_.gradient_allreduce_op == AllReduceOp::kMean;
    ro.prescale = config_.prescale_gradients;
    ro.predivide = config_.gradient_predivide_factor;
    // Collectives run on the communicator's own thread, so buckets travel during backward, unless the
    // config says "overlap_comm": false: then each bucket is reduced and waited for when it is ready.
    ro.synchronous = config_.OverlapCommDisabled();
    if (stage <= 1) {
      // Full gradients accumulate locally over micro-steps. Stage 0 all-reduces them; stage 1 reduces
      // each bucket only to the owners of its elements (reduce-scatter volume), into the owner's
      // partition of this same buffer.
      gs.flat_grads = Tensor::Zeros({gs.layout.padded_numel}, grad_dtype, Device::CPU(), MemCategory::kGrads);
      for (size_t i = 0; i < pg.params.size(); ++i) {
        pg.params[i]->BindGrad(gs.flat_grads.View(gs.layout.offsets[i], pg.params[i]->shape()));
      }
      gs.own_grads = gs.flat_grads.View(gs.own.begin, {gs.own.size()});
      if (stage == 0) {
        ro.mode = zero::GradReduceOptions::Mode::kAllReduce;
      } else {
        ro.mode = zero::GradReduceOptions::Mode::kScatter;
        ro.accumulate_partition = false;
        gs.part_grads = gs.own_grads;
      }
    } else {
      ro.mode = zero::GradReduceOptions::Mode::kScatter;
      gs.part_grads = Tensor::Zeros({gs.layout.partition_numel}, grad_dtype, Device::CPU(), MemCategory::kGrads);
      gs.own_grads = gs.part_grads;
    }
    gs.reducer = std::make_unique<zero::GradientReducer>(gs.layout, grad_dtype, *comm_, ro, gs.flat_grads,
                                                         gs.part_grads);
    gs.own_params = gs.flat_params.View(gs.own.begin, {gs.own.size()});
    for (zero::ParamSlice sl : zero::ParamsIn(gs.layout, gs.own)) {
      sl.flat_offset -= gs.own.begin;
      gs.own_slices.push_back(sl);
    }
    if (master_copy) {
      gs.master = Tensor::Empty({gs.own.size()}, DType::kF32, Device::CPU(), MemCategory::kMaster);
      gs.master.CopyFrom(gs.own_params);
    } else {
      gs.master = gs.own_params;  // fp32 training: the parameters are their own master weights
    }
    impl_->groups.push_back(std::move(gs));
  }
}

void Engine::BuildOptimizer() {
  std::vector<ParamGroupSpec> specs;
  OptimizerOptions oo;
  OptimizerHyper base = OptimizerHyperFromConfig(config_.optimizer, &oo.type);
  oo.account = &account_;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& pg = groups_[gi];
    const GroupState& gs = impl_->groups[gi];
    ParamGroupSpec spec;
    spec.name = pg.Describe();
    spec.numel = gs.own.size();
    spec.hyper = base;
    spec.hyper.lr = pg.lr.value_or(base.lr) * pg.lr_scale;
    spec.hyper.weight_decay = pg.weight_decay ? pg.weight_decay_value.value_or(base.weight_decay) : 0.0;
    if (oo.type == OptimizerType::kLamb) {
      // Per-tensor pieces of this rank's range (tensor id = index in the group).
      for (const zero::ParamSlice& s : gs.own_slices) spec.pieces.push_back({s.flat_offset, s.numel, s.param});
      spec.num_tensors = static_cast<int64_t>(pg.params.size());
    }
    specs.push_back(std::move(spec));
  }
  impl_->optimizer = std::make_unique<Optimizer>(oo, std::move(specs));
  if (oo.type == OptimizerType::kLamb && zero_stage() >= 1 && world_size() > 1) {
    impl_->optimizer->set_norm_reducer([this](std::vector<double>& sums) {
      comm_->AllReduce(sums.data(), sums.size(), DType::kF64, comm::ReduceOp::kSum).Wait();
    });
  }
  impl_->scheduler = MakeSchedulerFromConfig(config_.scheduler, *impl_->optimizer);
}

bool Engine::IsGradientAccumulationBoundary() const {
  int64_t gas = std::max<int64_t>(1, config_.gradient_accumulation_steps());
  return (micro_steps_ + 1) % gas == 0;
}

float Engine::Forward(const Tensor& inputs, const Tensor& targets) {
  ScopedMemoryAccount scope(&account_);
  ScopedTimer timer(timers_, "forward");
  model_.Train();
  impl_->reducing = zero_stage() >= 2 || IsGradientAccumulationBoundary();
  impl_->grads_seen.clear();
  if (impl_->coord) {
    impl_->coord->BeginPass();
    impl_->coord->TakeWaitMs();  // waits outside forward/backward (GatherParameters) are not counted
  }
  if (inputs.ndim() >= 1 && inputs.size(0) > 0) impl_->tokens_per_sample = inputs.numel() / inputs.size(0);
  last_loss_ = model_.ForwardLoss(AutoCastInput(config_, inputs), targets);
  if (impl_->coord) timers_.Add("gather_wait", impl_->coord->TakeWaitMs());  // stage 3: inside "forward"
  forward_pending_ = true;
  return last_loss_;
}

void Engine::Backward() {
  if (!forward_pending_) ZR_THROW(InvalidArgument, "Engine::Backward without a preceding Forward");
  ScopedMemoryAccount scope(&account_);
  ScopedTimer timer(timers_, "backward");
  forward_pending_ = false;
  const double gas = static_cast<double>(std::max<int64_t>(1, config_.gradient_accumulation_steps()));
  try {
    model_.BackwardLoss(static_cast<float>(impl_->scaler.scale() / gas));
    // overlap_comm false: the time backward spent reducing buckets synchronously (inside "backward").
    double reduce_wait_ms = impl_->coord ? impl_->coord->TakeReduceWaitMs() : 0.0;
    for (auto& g : impl_->groups) reduce_wait_ms += g.reducer ? g.reducer->TakeSyncWaitMs() : 0.0;
    timers_.Add("reduce_wait", reduce_wait_ms);
    if (zero_stage() == 3) {
      timers_.Add("gather_wait", impl_->coord->TakeWaitMs());  // inside "backward"
      ScopedTimer reduce_timer(timers_, "backward_allreduce");
      impl_->coord->FinishGrads();
    } else if (zero_stage() == 2) {
      // Stage 2 reduces every micro-step into the partition accumulators.
      ScopedTimer reduce_timer(timers_, "backward_allreduce");
      for (auto& g : impl_->groups) g.reducer->Finish();
      // Drop the views into the (now reduced) transient buckets so their memory is returned.
      for (auto& pg : groups_) {
        for (nn::Parameter* p : pg.params) p->ReleaseGrad();
      }
    }
    if (static_cast<int64_t>(impl_->grads_seen.size()) < impl_->trainable_params) CheckUnusedParameters();
  } catch (...) {
    for (auto& g : impl_->groups) {
      if (g.reducer) g.reducer->Reset();
    }
    if (impl_->coord) impl_->coord->Reset();
    throw;
  }
}

void Engine::CheckUnusedParameters() {
  // Which trainable parameters got no gradient in this backward: the ones whose module did not run
  // forward, or whose output did not reach the loss. Their gradients count as zero.
  std::vector<std::string> names;
  const int64_t unused = impl_->trainable_params - static_cast<int64_t>(impl_->grads_seen.size());
  for (const ParamGroup& pg : groups_) {
    for (nn::Parameter* p : pg.params) {
      if (!impl_->grads_seen.count(p) && names.size() < 8) names.push_back(p->name());
    }
  }
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  if (!config_.zero_optimization.ignore_unused_parameters) {
    ZR_THROW(InvalidArgument, "{} trainable parameter(s) got no gradient in this backward (zero_optimization."
             "ignore_unused_parameters is false): {}{}. Make every trainable parameter contribute to the loss, "
             "freeze the unused ones (requires_grad false), or set ignore_unused_parameters to true", unused,
             list, unused > static_cast<int64_t>(names.size()) ? ", ..." : "");
  }
  if (!impl_->unused_reported && rank() == 0) {
    ZR_INFO("{} trainable parameter(s) got no gradient in a backward and count as zero (ignore_unused_parameters): "
            "{}{}", unused, list, unused > static_cast<int64_t>(names.size()) ? ", ..." : "");
  }
  impl_->unused_reported = true;
}

void Engine::ZeroGrad() {
  for (auto& g : impl_->groups) {
    if (g.flat_grads.defined()) g.flat_grads.Zero();
    if (g.part_grads.defined()) g.part_grads.Zero();
  }
}

StepResult Engine::Step() {
  ScopedMemoryAccount scope(&account_);
  StepResult r;
  if (IsGradientAccumulationBoundary()) {
    ScopedTimer timer(timers_, "step");
    r = BoundaryStep();
  }
  ++micro_steps_;
  last_step_ = r;
  return r;
}

std::vector<double> Engine::GetLr() const {
  std::vector<double> lrs;
  for (int g = 0; g < impl_->optimizer->NumGroups(); ++g) lrs.push_back(impl_->optimizer->GetLr(g));
  return lrs;
}

std::vector<std::pair<double, double>> Engine::GetMomentum() const {
  std::vector<std::pair<double, double>> out;
  for (int g = 0; g < impl_->optimizer->NumGroups(); ++g) {
    std::vector<double> m = impl_->optimizer->Momentum(g);
    out.emplace_back(m.empty() ? 0.0 : m[0], m.size() > 1 ? m[1] : 0.0);
  }
  return out;
}

void Engine::Impl::VisitFullParameters(zero::ParamCoordinator::Purpose purpose,
                                       const std::vector<nn::Parameter*>& params,
                                       const std::function<void(nn::Parameter*, const Tensor&)>& fn) {
  if (coord) coord->set_purpose(purpose);
  for (nn::Parameter* p : params) {
    auto it = param_id.find(p);
    if (it == param_id.end()) {
      fn(p, p->engine_data());
      continue;
    }
    fn(p, coord->Acquire(it->second).Reshape(p->shape()));
    coord->Release(it->second);
  }
}

std::vector<Tensor> Engine::GatherParameters() {
  ScopedMemoryAccount scope(&account_);
  std::vector<Tensor> out;
  impl_->VisitFullParameters(zero::ParamCoordinator::Purpose::kGatherParameters, model_.Parameters(),
                             [&](nn::Parameter*, const Tensor& value) {
                               out.push_back(value.Clone(MemCategory::kOther));
                             });
  return out;
}

const Optimizer& Engine::optimizer() const { return *impl_->optimizer; }

double Engine::loss_scale() const { return impl_->scaler.scale(); }

}  // namespace zerorun::runtime

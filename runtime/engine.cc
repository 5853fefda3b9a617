// Engine construction, the observer that hands the model's windows to the ZeRO strategy,
// forward/backward and the counters. The boundary step (overflow, norm, clip, update) is in
// engine_step.cc; everything that depends on the ZeRO stage is in zero/ (zero/strategy.h).
#include "zerorun/runtime/engine.h"

#include <algorithm>
#include <climits>
#include <unordered_map>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/trace.h"
#include "zerorun/kernels/ops.h"
#include "zerorun/runtime/engine_internal.h"
#include "zerorun/runtime/engine_settings.h"
#include "zerorun/runtime/engine_validate.h"
#include "zerorun/runtime/nn/init.h"

namespace zerorun::runtime {

// ---- the model's parameters as zero/ sees them ---------------------------------------------------

namespace {
// out <- src, converting the dtype on the host when they are on different devices (a copy between
// devices moves bytes only).
void CopyConverting(const Tensor& out, const Tensor& src) {
  if (out.device() == src.device() || out.dtype() == src.dtype()) {
    out.CopyFrom(src);
  } else {
    out.CopyFrom(src.To(out.dtype()));
  }
}
}  // namespace

void EngineParamHost::ReadInitial(int id, int64_t offset, const Tensor& out) {
  const nn::Parameter& p = P(id);
  const int64_t n = out.numel();
  ZR_CHECK(offset >= 0 && offset + n <= p.numel(), "elements [{}, {}) of {} ({} elements)", offset, offset + n,
           p.name(), p.numel());
  if (!init_seed_) {
    CopyConverting(out, p.engine_data().Flatten().View(offset, {n}));
    return;
  }
  // From the recipe: only these elements are ever computed (position-stable in seed, name, index).
  Tensor values = out.dtype() == DType::kF32 && out.device().is_cpu()
                      ? out
                      : Tensor::Empty({n}, DType::kF32, Device::CPU(), MemCategory::kOther);
  nn::FillInit(p.init(), p.shape(), *init_seed_, p.name(), offset, values.data_as<float>(), n);
  if (values.data() != out.data()) CopyConverting(out, values);
}

Tensor EngineParamHost::Value(int id) const {
  const Tensor& t = P(id).engine_data();
  return t.defined() ? t.Flatten() : Tensor();
}

void EngineParamHost::BindData(int id, const Tensor& value) {
  nn::Parameter& p = P(id);
  p.BindData(value.Reshape(p.shape()));
  p.SetAvailable(true);
}

void EngineParamHost::ReleaseData(int id) {
  nn::Parameter& p = P(id);
  p.ReleaseData();
  p.SetAvailable(false);
}

void EngineParamHost::BindGrad(int id, const Tensor& grad) {
  nn::Parameter& p = P(id);
  p.BindGrad(grad.Reshape(p.shape()));
}

// The engine's side of the model's windows: each module's window, with the ids of its own
// parameters, goes to the strategy (which gathers and releases them at stage 3, binds transient
// gradient buffers at stage 2, and streams final gradients into reduction buckets).
class Engine::Observer final : public nn::ModuleObserver {
 public:
  explicit Observer(Engine& e) : e_(e) {}

  void PreForward(nn::Module& m, bool recompute) override {
    if (TraceSpan::Active()) starts_.push_back(NowSeconds());
    if (Ids(m)) e_.impl_->strategy->PreForward(module_, ids_);
    if (FlopsProfiler* p = e_.impl_->profiler.get()) p->PreForward(m, recompute);
  }
  void PostForward(nn::Module& m, bool recompute) override {
    if (FlopsProfiler* p = e_.impl_->profiler.get()) p->PostForward(m, recompute);
    if (Ids(m)) e_.impl_->strategy->PostForward(module_, ids_);
    EndSpan(m, recompute ? "recompute" : "forward");
  }
  void PreBackward(nn::Module& m) override {
    if (TraceSpan::Active()) starts_.push_back(NowSeconds());
    if (Ids(m)) e_.impl_->strategy->PreBackward(module_, ids_);
  }
  void PostBackward(nn::Module& m) override {
    if (Ids(m)) {
      e_.impl_->strategy->PostBackward(module_, ids_);
      NoteBackwardOrder(m);
    }
    EndSpan(m, "backward");
  }
  void ForwardOutput(nn::Module& m, const Tensor& y) override {
    Impl& im = *e_.impl_;
    if (!e_.config_.numerics.check_activations || im.first_bad_output != nullptr || !y.defined() ||
        !IsFloating(y.dtype())) {
      return;
    }
    if (!kernels::AllFinite(y.data(), y.numel(), y.dtype())) {
      im.first_bad_output = &m;
      im.first_bad_output_name = m.Describe();
    }
  }
  void GradsReady(nn::Module&, const std::vector<nn::Parameter*>& params) override {
    Impl& im = *e_.impl_;
    ids_.clear();
    for (nn::Parameter* p : params) {
      im.grads_seen.insert(p);
      auto it = im.param_id.find(p);
      if (it != im.param_id.end()) ids_.push_back(it->second);
    }
    if (!ids_.empty()) im.strategy->GradsReady(ids_);
  }

 private:
  // The ids of m's own parameters into ids_ and m's id into module_; false when it has none.
  bool Ids(nn::Module& m) {
    Impl& im = *e_.impl_;
    ids_.clear();
    for (nn::Parameter* p : m.DirectParameters()) {
      auto it = im.param_id.find(p);
      if (it != im.param_id.end()) ids_.push_back(it->second);
    }
    if (ids_.empty()) return false;
    module_ = im.module_id.try_emplace(&m, static_cast<int>(im.module_id.size())).first->second;
    return true;
  }

  // Backward order (for naming non-finite gradients): the first module of this backward to end with
  // each of its direct parameters (ids_).
  void NoteBackwardOrder(nn::Module& m) {
    Impl& im = *e_.impl_;
    const int64_t pos = im.backward_count++;
    for (int id : ids_) {
      if (im.backward_pos[static_cast<size_t>(id)] <= pos) continue;
      im.backward_pos[static_cast<size_t>(id)] = pos;
      im.backward_module[static_cast<size_t>(id)] = &m;
    }
  }

  // The timeline's span of m's window (core/trace.h), opened in Pre*.
  void EndSpan(nn::Module& m, const char* category) {
    Tracer* t = Tracer::Current();
    if (t == nullptr || starts_.empty()) return;
    const double start = starts_.back();
    starts_.pop_back();
    t->Complete(m.path().empty() ? m.type_name() : m.path(), category, start, NowSeconds(), Tracer::CurrentTrack(),
                "\"type\": " + JsonQuote(m.type_name()));
  }

  Engine& e_;
  std::vector<int> ids_;
  int module_ = 0;
  std::vector<double> starts_;  // open module spans (nested windows)
};

Engine::Engine(nn::LossModule& model, Config config, std::shared_ptr<comm::Communicator> comm, EngineOptions options)
    : model_(model),
      config_(std::move(config)),
      comm_owner_(std::move(comm)),
      comm_(comm_owner_.get()),
      options_(std::move(options)),
      account_(std::make_shared<MemoryAccount>(options_.name)) {
  InitOrUndo();
}

Engine::Engine(nn::LossModule& model, Config config, comm::Communicator& comm, EngineOptions options)
    : model_(model),
      config_(std::move(config)),
      comm_(&comm),
      options_(std::move(options)),
      account_(std::make_shared<MemoryAccount>(options_.name)) {
  InitOrUndo();
}

// A constructor that throws runs no destructor: whatever Init() did to the model (its observer, its
// parameters re-bound into the strategy's buffers or released at stage 3, gradients bound into
// buckets) would point into this engine's freed members. Undo it: the strategy goes first (it waits
// for what is in flight), then every parameter gets back the storage it had before, with the values
// it had (the engine copies them into its own buffers), or none if it had none (EngineOptions::init_seed).
void Engine::InitOrUndo() {
  std::vector<std::pair<nn::Parameter*, Tensor>> before;
  for (nn::Parameter* p : model_.Parameters()) before.emplace_back(p, p->engine_data());
  try {
    Init();
  } catch (...) {
    model_.SetObserver(nullptr);
    if (impl_ && impl_->tracer) comm_->SetTracer(nullptr);
    if (impl_) impl_->strategy.reset();
    checkpointer_.reset();
    for (auto& [p, data] : before) {
      if (data.defined()) {
        p->BindData(data);
      } else {
        p->ReleaseData();
      }
      p->ReleaseGrad();
      p->SetAvailable(true);
    }
    impl_.reset();
    throw;
  }
}

Engine::~Engine() {
  model_.SetObserver(nullptr);
  if (impl_ && impl_->pending_save) {
    try {
      FinishPendingSave(*comm_, impl_->pending_save);
    } catch (const std::exception& e) {
      ZR_ERROR("the asynchronous checkpoint save failed: {}", e.what());
    }
  }
  if (impl_) impl_->strategy.reset();  // waits for what is in flight before the buffers go
  if (impl_ && impl_->tracer) {
    comm_->SetTracer(nullptr);
    if (!impl_->trace_written) {
      try {
        WriteTrace();
      } catch (const std::exception& e) {
        ZR_WARN("{}", e.what());
      }
    }
  }
}

void Engine::Init() {
  ZR_CHECK(comm_ != nullptr, "Engine needs a communicator");
  ScopedMemoryAccount scope(account_.get());
  impl_ = std::make_unique<Impl>();
  impl_->device = comm_->device();
  kernels::KernelDeviceScope kernel_scope(impl_->device);
  if (!options_.trace_file.empty()) {
    impl_->tracer = std::make_unique<Tracer>(comm_->rank(), Format("rank {}", comm_->rank()));
    comm_->SetTracer(impl_->tracer.get());
  }
  ScopedTrace trace(impl_->tracer.get());
  TraceSpan span("phase", "engine init");
  ValidateForEngine(config_, comm_->size());  // the checks `zerorun-config check` runs too
  ApplyProcessSettings(config_, *comm_);       // log_level, comms_logger
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
  if (options_.init_seed) model_.SetRngSeed(*options_.init_seed);
  groups_ = BuildParamGroups(params, options_.groups);
  if (groups_.empty()) ZR_THROW(InvalidArgument, "the model has no trainable parameters");
  BuildOptimizer();
  BuildStrategy(params);
  impl_->scaler = MakeLossScaler(config_);
  impl_->observer = std::make_unique<Observer>(*this);
  model_.SetObserver(impl_->observer.get());
  const auto checkpointing = options_.activation_checkpointing ? options_.activation_checkpointing
                                                               : ActivationCheckpointingOptions::FromConfig(config_);
  if (checkpointing && checkpointing->enabled) {
    checkpointer_ = std::make_unique<ActivationCheckpointer>(model_, *checkpointing, rank() == 0);
  }
  InitMonitors();
  InitFlopsProfiler();
  if (config_.checkpoint.writer && config_.checkpoint.writer->decoupled) ReserveSaveArena();
  if (rank() == 0) {
    ZR_INFO("engine: ZeRO stage {}, {} on {} rank(s), {} parameters in {} group(s), micro batch {} x accumulation {} "
            "x world {} = batch {}", zero_stage(), DTypeName(model_dtype_), world_size(), num_parameters_,
            groups_.size(), config_.micro_batch_per_gpu(), config_.gradient_accumulation_steps(), world_size(),
            config_.train_batch_size());
    zero::Strategy& z = zero_strategy();
    if (z.state_store().offloaded()) ZR_INFO("offload: optimizer state in {}", z.state_store().placement());
    if (z.shard_store() != nullptr) ZR_INFO("offload: parameter shards in {}", z.shard_store()->placement());
  }
  if (config_.dump_state && rank() == 0) ZR_INFO("{}", EngineStateText(*this));
}

void Engine::BuildStrategy(const std::vector<nn::Parameter*>& model_params) {
  // zero/'s ids: the trainable parameters group by group, then the frozen ones in model order.
  std::vector<nn::Parameter*> by_id;
  std::vector<zero::ParamSpec> specs;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (size_t i = 0; i < groups_[gi].params.size(); ++i) {
      nn::Parameter* p = groups_[gi].params[i];
      by_id.push_back(p);
      specs.push_back({p->name(), p->numel(), static_cast<int>(gi), static_cast<int>(i)});
    }
  }
  impl_->trainable_params = static_cast<int64_t>(by_id.size());
  for (nn::Parameter* p : model_params) {
    if (p->requires_grad()) continue;
    by_id.push_back(p);
    specs.push_back({p->name(), p->numel(), -1, -1});
  }
  for (size_t id = 0; id < by_id.size(); ++id) impl_->param_id[by_id[id]] = static_cast<int>(id);
  impl_->backward_pos.assign(by_id.size(), INT64_MAX);
  impl_->backward_module.assign(by_id.size(), nullptr);
  impl_->host = std::make_unique<EngineParamHost>(by_id, options_.init_seed);
  impl_->strategy = zero::MakeStrategy(StrategyOptionsFromConfig(config_, comm_->device(), comm_->rank()),
                                       std::move(specs), *impl_->host, *impl_->optimizer, *comm_, timers_);
}

void Engine::BuildOptimizer() {
  std::vector<ParamGroupSpec> specs;
  OptimizerOptions oo;
  OptimizerHyper base = OptimizerHyperFromConfig(config_.optimizer, &oo.type);
  for (const ParamGroup& pg : groups_) {
    ParamGroupSpec spec;
    spec.name = pg.Describe();
    spec.hyper = base;
    spec.hyper.lr = pg.lr.value_or(base.lr) * pg.lr_scale;
    spec.hyper.weight_decay = pg.weight_decay ? pg.weight_decay_value.value_or(base.weight_decay) : 0.0;
    specs.push_back(std::move(spec));
  }
  impl_->optimizer = std::make_unique<Optimizer>(oo, std::move(specs));
  impl_->scheduler = MakeSchedulerFromConfig(config_.scheduler, *impl_->optimizer);
}

bool Engine::IsGradientAccumulationBoundary() const {
  int64_t gas = std::max<int64_t>(1, config_.gradient_accumulation_steps());
  return (micro_steps_ + 1) % gas == 0;
}

Tensor OnDevice(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return t;
  Tensor d = Tensor::Empty(t.shape(), t.dtype(), device, MemCategory::kActivations);
  d.CopyFrom(t);
  return d;
}

float Engine::Forward(const Tensor& inputs, const Tensor& targets) {
  ScopedMemoryAccount scope(account_.get());
  kernels::KernelDeviceScope kernel_scope(impl_->device);
  ScopedTimer timer(timers_, "forward");
  ScopedTrace trace(ActiveTracer());
  if (micro_steps_ % std::max<int64_t>(1, config_.gradient_accumulation_steps()) == 0) {
    impl_->window_start = NowSeconds();
    MaybeStartFlopsProfile();
  }
  TraceSpan span("phase", "forward");
  model_.Train();
  impl_->grads_seen.clear();
  impl_->strategy->BeginForward(IsGradientAccumulationBoundary());
  if (inputs.ndim() >= 1 && inputs.size(0) > 0) impl_->tokens_per_sample = inputs.numel() / inputs.size(0);
  Stopwatch watch;
  impl_->first_bad_output = nullptr;
  impl_->first_bad_output_name.clear();
  last_loss_ = model_.ForwardLoss(OnDevice(AutoCastInput(config_, inputs), impl_->device), OnDevice(targets, impl_->device));
  impl_->strategy->EndForward();
  CheckLoss();
  if (impl_->profiler) impl_->profiler->profile().fwd_ms += watch.ElapsedMs();
  forward_pending_ = true;
  NoteMemory("forward");
  return last_loss_;
}

void Engine::Backward() {
  if (!forward_pending_) ZR_THROW(InvalidArgument, "Engine::Backward without a preceding Forward");
  ScopedMemoryAccount scope(account_.get());
  kernels::KernelDeviceScope kernel_scope(impl_->device);
  ScopedTimer timer(timers_, "backward");
  ScopedTrace trace(ActiveTracer());
  TraceSpan span("phase", "backward");
  forward_pending_ = false;
  const double gas = static_cast<double>(std::max<int64_t>(1, config_.gradient_accumulation_steps()));
  Stopwatch watch;
  std::fill(impl_->backward_pos.begin(), impl_->backward_pos.end(), INT64_MAX);
  impl_->backward_count = 0;
  try {
    model_.BackwardLoss(static_cast<float>(impl_->scaler.scale() / gas));
    impl_->strategy->EndBackward();
    if (impl_->profiler) impl_->profiler->profile().bwd_ms += watch.ElapsedMs();
    if (static_cast<int64_t>(impl_->grads_seen.size()) < impl_->trainable_params) CheckUnusedParameters();
  } catch (...) {
    impl_->strategy->AbortBackward();
    throw;
  }
  NoteMemory("backward");
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
  kernels::KernelDeviceScope kernel_scope(impl_->device);
  impl_->strategy->ZeroGrads();
}

StepResult Engine::Step() {
  ScopedMemoryAccount scope(account_.get());
  kernels::KernelDeviceScope kernel_scope(impl_->device);
  StepResult r;
  if (IsGradientAccumulationBoundary()) {
    {
      ScopedTimer timer(timers_, "step");
      ScopedTrace trace(ActiveTracer());
      TraceSpan span("phase", "optimizer step");
      Stopwatch watch;
      r = BoundaryStep();
      if (impl_->profiler) impl_->profiler->profile().step_ms += watch.ElapsedMs();
    }
    TraceStepEnd();
    FinishFlopsProfile();
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
  for (nn::Parameter* p : params) {
    const int id = param_id.at(p);
    fn(p, strategy->AcquireFull(id, purpose).Reshape(p->shape()));
    strategy->ReleaseFull(id);
  }
}

std::vector<Tensor> Engine::GatherParameters() {
  ScopedMemoryAccount scope(account_.get());
  kernels::KernelDeviceScope kernel_scope(impl_->device);
  std::vector<Tensor> out;
  impl_->VisitFullParameters(zero::ParamCoordinator::Purpose::kGatherParameters, model_.Parameters(),
                             [&](nn::Parameter*, const Tensor& value) {
                               out.push_back(value.Clone(MemCategory::kOther));
                             });
  return out;
}

const Optimizer& Engine::optimizer() const { return *impl_->optimizer; }

zero::Strategy& Engine::zero_strategy() { return *impl_->strategy; }

double Engine::loss_scale() const { return impl_->scaler.scale(); }

}  // namespace zerorun::runtime

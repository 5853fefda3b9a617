// Module tree bookkeeping, the forward/backward windows and the observer calls around them.
#include "zerorun/runtime/nn/module.h"

#include <exception>
#include <unordered_set>

#include "zerorun/core/format.h"
#include "zerorun/core/rng.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::nn {

namespace {
thread_local bool t_recomputing = false;
thread_local int t_forward_depth = 0;  // nested ForwardScopes on this thread
}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}
Module::~Module() = default;

std::string Module::Describe() const {
  return Format("{} ({})", path_.empty() ? std::string("<root>") : path_, type_name_);
}

std::vector<Module*> Module::Modules() {
  std::vector<Module*> out;
  std::vector<Module*> stack{this};
  while (!stack.empty()) {
    Module* m = stack.back();
    stack.pop_back();
    out.push_back(m);
    for (auto it = m->child_list_.rbegin(); it != m->child_list_.rend(); ++it) stack.push_back(it->second);
  }
  return out;
}

std::vector<Parameter*> Module::Parameters() const {
  std::vector<Parameter*> out;
  std::unordered_set<const Parameter*> seen;
  for (Module* m : const_cast<Module*>(this)->Modules()) {
    for (Parameter* p : m->direct_params_) {
      if (seen.insert(p).second) out.push_back(p);
    }
  }
  return out;
}

Parameter* Module::FindParameter(std::string_view name) const {
  for (Parameter* p : Parameters()) {
    if (p->name() == name) return p;
  }
  return nullptr;
}

int64_t Module::NumParameterElements() const {
  int64_t n = 0;
  for (Parameter* p : Parameters()) n += p->numel();
  return n;
}

void Module::Initialize(uint64_t seed, Device device) {
  for (Parameter* p : Parameters()) {
    p->AllocateData(device);
    FillInitTensor(p->init(), seed, p->name(), p->engine_data());
    if (p->requires_grad()) p->AllocateGrad(device);
  }
  SetRngSeed(seed);
}

void Module::ZeroGrad() {
  for (Parameter* p : Parameters()) {
    if (p->requires_grad() && p->engine_grad().defined()) p->engine_grad().Zero();
  }
}

void Module::SetRngSeed(uint64_t seed) {
  for (Module* m : Modules()) m->rng_seed_ = seed;
}

void Module::Train(bool on) {
  for (Module* m : Modules()) m->training_ = on;
}

void Module::SetObserver(ModuleObserver* observer) {
  for (Module* m : Modules()) m->observer_ = observer;
}

void Module::ReleaseActivations() {
  for (Module* m : Modules()) {
    m->OnReleaseActivations();
    if (m->checkpoint_) m->checkpoint_->Drop();
  }
}

void Module::SetActivationCheckpointing(bool on) {
  if (checkpoint_) checkpoint_->Detach();
  if (on) CheckpointSegment::Attach(std::make_shared<CheckpointSegment>(std::vector<Module*>{this}, 0, nullptr));
}

void Module::ResetPass() {
  for (Module* m : Modules()) {
    m->pending_backward_ = 0;
    for (Parameter* p : m->direct_params_) p->pending_uses_ = 0;
  }
}

Tensor Module::Forward(const Tensor& x) {
  if (!checkpoint_ || !training_ || t_recomputing) {
    ForwardScope scope(*this);
    Tensor y = OnForward(x);
    if (observer_ != nullptr && !t_recomputing) observer_->ForwardOutput(*this, y);
    return y;
  }
  std::shared_ptr<CheckpointSegment> segment = checkpoint_;
  return segment->Forward(checkpoint_pos_, x);
}

Tensor Module::Backward(const Tensor& dy) {
  if (checkpoint_) {
    std::shared_ptr<CheckpointSegment> segment = checkpoint_;
    return segment->Backward(checkpoint_pos_, dy);
  }
  BackwardScope scope(*this);
  return OnBackward(dy);
}

Tensor Module::OnForward(const Tensor& /*x*/) {
  ZR_THROW(InvalidArgument, "module {} has no single-tensor Forward; call its own forward method", Describe());
}

Tensor Module::OnBackward(const Tensor& /*dy*/) {
  ZR_THROW(InvalidArgument, "module {} has no single-tensor Backward; call its own backward method", Describe());
}

Module::RecomputeScope::RecomputeScope() : previous_(t_recomputing) { t_recomputing = true; }
Module::RecomputeScope::~RecomputeScope() { t_recomputing = previous_; }
bool Module::recomputing() { return t_recomputing; }

void Module::CheckLocalName(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos) {
    ZR_THROW(InvalidArgument, "module {}: invalid child/parameter name '{}' (non-empty, no dots)", Describe(), name);
  }
  for (const auto& [n, m] : child_list_) {
    if (n == name) ZR_THROW(InvalidArgument, "module {}: duplicate name '{}'", Describe(), name);
  }
  for (const auto& n : direct_param_local_names_) {
    if (n == name) ZR_THROW(InvalidArgument, "module {}: duplicate name '{}'", Describe(), name);
  }
}

void Module::AdoptChild(std::string name, std::unique_ptr<Module> child) {
  ZR_CHECK(child != nullptr, "AddModule: null child");
  CheckLocalName(name);
  if (child->parent_ != nullptr) {
    ZR_THROW(InvalidArgument, "module {}: child '{}' already has a parent", Describe(), name);
  }
  Module* raw = child.get();
  raw->parent_ = this;
  raw->local_name_ = name;
  for (Module* m : raw->Modules()) {
    m->observer_ = observer_;
    m->training_ = training_;
    m->rng_seed_ = rng_seed_;
  }
  child_list_.emplace_back(std::move(name), raw);
  owned_children_.push_back(std::move(child));
  raw->UpdatePaths();
}

void Module::UpdatePaths() {
  if (parent_ == nullptr) {
    path_.clear();
  } else {
    path_ = parent_->path_.empty() ? local_name_ : parent_->path_ + "." + local_name_;
  }
  for (size_t i = 0; i < direct_params_.size(); ++i) {
    Parameter* p = direct_params_[i];
    if (p->owner_ == this) p->name_ = path_.empty() ? p->local_name_ : path_ + "." + p->local_name_;
  }
  for (auto& [n, c] : child_list_) c->UpdatePaths();
}

Module* Module::Root() {
  Module* m = this;
  while (m->parent_ != nullptr) m = m->parent_;
  return m;
}

Parameter* Module::AddParameter(std::string name, Shape shape, DType dtype, Init init, ParamOptions options) {
  CheckLocalName(name);
  auto p = std::make_shared<Parameter>(name, std::move(shape), dtype, init, std::move(options));
  p->owner_ = this;
  p->name_ = path_.empty() ? name : path_ + "." + name;
  direct_param_local_names_.push_back(std::move(name));
  direct_params_.push_back(p.get());
  direct_param_handles_.push_back(std::move(p));
  return direct_params_.back();
}

Parameter* Module::AddParameter(std::string name, ParameterPtr shared) {
  ZR_CHECK(shared != nullptr, "AddParameter: null parameter");
  CheckLocalName(name);
  for (Parameter* q : direct_params_) {
    if (q == shared.get()) {
      ZR_THROW(InvalidArgument, "module {}: parameter '{}' registered twice", Describe(), shared->name());
    }
  }
  if (shared->owner_ == nullptr) {
    shared->owner_ = this;
    shared->name_ = path_.empty() ? name : path_ + "." + name;
  }
  direct_param_local_names_.push_back(std::move(name));
  direct_params_.push_back(shared.get());
  direct_param_handles_.push_back(std::move(shared));
  return direct_params_.back();
}

ParameterPtr Module::SharedParameter(const Parameter* p) const {
  for (const ParameterPtr& h : direct_param_handles_) {
    if (h.get() == p) return h;
  }
  ZR_THROW(InvalidArgument, "module {}: '{}' is not one of its parameters", Describe(), p ? p->name() : "null");
}

Tensor Module::NewActivation(const Shape& shape, DType dtype) {
  return Tensor::Empty(shape, dtype, kernels::KernelDevice(), MemCategory::kActivations);
}

Tensor Module::NewActivationZeros(const Shape& shape, DType dtype) {
  return Tensor::Zeros(shape, dtype, kernels::KernelDevice(), MemCategory::kActivations);
}

uint64_t Module::rng_stream() const { return HashName(path_); }

// ---- windows -----------------------------------------------------------------------------------

Module::ForwardScope::ForwardScope(Module& m)
    : m_(m), recompute_(t_recomputing), exceptions_(std::uncaught_exceptions()) {
  // The outermost forward of a training pass starts a new pass: uses left over from a forward whose
  // backward never ran (an evaluation in train mode, an exception) are forgotten.
  if (t_forward_depth == 0 && !recompute_ && m_.training_) m_.Root()->ResetPass();
  if (m_.observer_ != nullptr) m_.observer_->PreForward(m_, recompute_);
  for (Parameter* p : m_.direct_params_) ++p->window_depth_;
  ++t_forward_depth;
}

Module::ForwardScope::~ForwardScope() noexcept(false) {
  --t_forward_depth;
  for (Parameter* p : m_.direct_params_) --p->window_depth_;
  const bool failed = std::uncaught_exceptions() > exceptions_;
  if (!failed && m_.training_ && !recompute_) {
    ++m_.pending_backward_;
    for (Parameter* p : m_.direct_params_) {
      if (p->requires_grad_) ++p->pending_uses_;
    }
  }
  if (m_.observer_ == nullptr) return;
  if (failed) {
    try {
      m_.observer_->PostForward(m_, recompute_);
    } catch (...) {  // already unwinding: the first error wins
    }
  } else {
    m_.observer_->PostForward(m_, recompute_);
  }
}

Module::BackwardScope::BackwardScope(Module& m) : m_(m), exceptions_(std::uncaught_exceptions()) {
  if (!m_.training_) ZR_THROW(InvalidArgument, "module {}: Backward in eval mode", m_.Describe());
  if (m_.pending_backward_ <= 0) {
    ZR_THROW(InvalidArgument, "module {}: Backward without a matching training-mode Forward", m_.Describe());
  }
  if (m_.observer_ != nullptr) m_.observer_->PreBackward(m_);
  for (Parameter* p : m_.direct_params_) ++p->window_depth_;
}

Module::BackwardScope::~BackwardScope() noexcept(false) {
  for (Parameter* p : m_.direct_params_) --p->window_depth_;
  const bool failed = std::uncaught_exceptions() > exceptions_;
  if (failed) {
    if (m_.observer_ != nullptr) {
      try {
        m_.observer_->PostBackward(m_);
      } catch (...) {
      }
    }
    return;
  }
  --m_.pending_backward_;
  std::vector<Parameter*> ready;
  for (Parameter* p : m_.direct_params_) {
    if (p->requires_grad_ && p->pending_uses_ > 0 && --p->pending_uses_ == 0) ready.push_back(p);
  }
  if (m_.observer_ == nullptr) return;
  if (!ready.empty()) m_.observer_->GradsReady(m_, ready);
  m_.observer_->PostBackward(m_);
}

}  // namespace zerorun::nn

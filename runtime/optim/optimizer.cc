// Optimizer bookkeeping around the fused CPU kernels; see optimizer.h.
#include "zerorun/runtime/optim/optimizer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "zerorun/core/error.h"
#include "zerorun/kernels/optim_ops.h"

namespace zerorun::runtime {

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string> StateNamesFor(OptimizerType t, const OptimizerHyper& h) {
  switch (t) {
    case OptimizerType::kAdam:
    case OptimizerType::kLamb: return {"exp_avg", "exp_avg_sq"};
    case OptimizerType::kLion: return {"exp_avg"};
    case OptimizerType::kSgd: return h.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
    case OptimizerType::kAdagrad: return {"sum"};
  }
  return {};
}

void Validate(OptimizerType t, const ParamGroupSpec& g, int index) {
  const OptimizerHyper& h = g.hyper;
  const std::string where = Format("{} optimizer, parameter group {}{}{}", OptimizerTypeName(t), index,
                                   g.name.empty() ? "" : " ", g.name.empty() ? "" : "'" + g.name + "'");
  if (!(h.lr >= 0.0) || !std::isfinite(h.lr)) ZR_THROW(InvalidArgument, "{}: lr must be >= 0, got {}", where, h.lr);
  if (!(h.weight_decay >= 0.0)) ZR_THROW(InvalidArgument, "{}: weight_decay must be >= 0, got {}", where, h.weight_decay);
  if (!(h.eps >= 0.0)) ZR_THROW(InvalidArgument, "{}: eps must be >= 0, got {}", where, h.eps);
  if (t == OptimizerType::kAdam || t == OptimizerType::kLion || t == OptimizerType::kLamb) {
    if (!(h.beta1 >= 0.0 && h.beta1 < 1.0)) ZR_THROW(InvalidArgument, "{}: betas[0] must be in [0, 1), got {}", where, h.beta1);
    if (!(h.beta2 >= 0.0 && h.beta2 < 1.0)) ZR_THROW(InvalidArgument, "{}: betas[1] must be in [0, 1), got {}", where, h.beta2);
  }
  if (t == OptimizerType::kSgd) {
    if (!(h.momentum >= 0.0)) ZR_THROW(InvalidArgument, "{}: momentum must be >= 0, got {}", where, h.momentum);
    if (h.nesterov && (h.momentum <= 0.0 || h.dampening != 0.0)) {
      ZR_THROW(InvalidArgument, "{}: nesterov needs momentum > 0 and dampening 0 (got momentum {}, dampening {})",
               where, h.momentum, h.dampening);
    }
  }
  if (t == OptimizerType::kAdagrad) {
    if (!(h.lr_decay >= 0.0)) ZR_THROW(InvalidArgument, "{}: lr_decay must be >= 0, got {}", where, h.lr_decay);
    if (!(h.initial_accumulator_value >= 0.0)) {
      ZR_THROW(InvalidArgument, "{}: initial_accumulator_value must be >= 0, got {}", where, h.initial_accumulator_value);
    }
  }
  if (t == OptimizerType::kLamb) {
    if (!(h.min_coeff > 0.0 && h.min_coeff <= h.max_coeff)) {
      ZR_THROW(InvalidArgument, "{}: need 0 < min_coeff <= max_coeff, got {} and {}", where, h.min_coeff, h.max_coeff);
    }
  }
}

}  // namespace

OptimizerType ParseOptimizerType(std::string_view name, bool* is_adamw) {
  if (is_adamw) *is_adamw = false;
  const std::string l = Lower(name);
  if (l == "adam") return OptimizerType::kAdam;
  if (l == "adamw") {
    if (is_adamw) *is_adamw = true;
    return OptimizerType::kAdam;
  }
  if (l == "lion") return OptimizerType::kLion;
  if (l == "lamb") return OptimizerType::kLamb;
  if (l == "adagrad") return OptimizerType::kAdagrad;
  if (name == "SGD") return OptimizerType::kSgd;
  ZR_THROW(InvalidArgument,
           "optimizer type '{}' is not supported (supported: Adam, AdamW, Lion, Lamb, Adagrad, SGD){}", name,
           l == "sgd" ? " - torch optimizer names are case-sensitive: use \"SGD\"" : "");
}

const char* OptimizerTypeName(OptimizerType t) {
  switch (t) {
    case OptimizerType::kAdam: return "Adam";
    case OptimizerType::kLion: return "Lion";
    case OptimizerType::kSgd: return "SGD";
    case OptimizerType::kAdagrad: return "Adagrad";
    case OptimizerType::kLamb: return "Lamb";
  }
  return "?";
}

Optimizer::Optimizer(const OptimizerOptions& options, std::vector<ParamGroupSpec> specs) : options_(options) {
  for (size_t i = 0; i < specs.size(); ++i) Validate(options_.type, specs[i], static_cast<int>(i));
  for (ParamGroupSpec& spec : specs) groups_.push_back({std::move(spec), 0});
}

void Optimizer::BeginStep() {
  for (Group& g : groups_) ++g.step;
}

const Optimizer::Group& Optimizer::Checked(int index) const {
  ZR_CHECK(index >= 0 && index < NumGroups(), "optimizer group {} out of range ({} groups)", index, NumGroups());
  const Group& g = groups_[static_cast<size_t>(index)];
  ZR_CHECK(g.step >= 1, "optimizer stepped before BeginStep()");
  return g;
}

std::vector<std::string> Optimizer::StateNames() const {
  return groups_.empty() ? std::vector<std::string>{} : StateNamesFor(options_.type, groups_[0].spec.hyper);
}

float Optimizer::InitialState(int group, int slot) const {
  const OptimizerHyper& h = groups_.at(static_cast<size_t>(group)).spec.hyper;
  const std::vector<std::string> names = StateNames();
  if (slot >= 0 && static_cast<size_t>(slot) < names.size() && names[static_cast<size_t>(slot)] == "sum") {
    return static_cast<float>(h.initial_accumulator_value);
  }
  return 0.0f;
}

void Optimizer::Update(int index, const kernels::OptimSpan& span, float* const* state) {
  const Group& g = Checked(index);
  const OptimizerHyper& h = g.spec.hyper;
  ThreadPool* pool = options_.pool;
  switch (options_.type) {
    case OptimizerType::kAdam: {
      kernels::AdamHyper k;
      k.lr = static_cast<float>(h.lr);
      k.beta1 = static_cast<float>(h.beta1);
      k.beta2 = static_cast<float>(h.beta2);
      k.eps = static_cast<float>(h.eps);
      k.weight_decay = static_cast<float>(h.weight_decay);
      k.adam_w_mode = h.adam_w_mode;
      k.bias_correction = h.bias_correction;
      k.step = g.step;
      kernels::AdamStepOnDevice(k, span, state[0], state[1], pool);
      return;
    }
    case OptimizerType::kLion: {
      kernels::LionHyper k;
      k.lr = static_cast<float>(h.lr);
      k.beta1 = static_cast<float>(h.beta1);
      k.beta2 = static_cast<float>(h.beta2);
      k.weight_decay = static_cast<float>(h.weight_decay);
      k.step = g.step;
      kernels::LionStepOnDevice(k, span, state[0], pool);
      return;
    }
    case OptimizerType::kSgd: {
      kernels::SgdHyper k;
      k.lr = static_cast<float>(h.lr);
      k.momentum = static_cast<float>(h.momentum);
      k.dampening = static_cast<float>(h.dampening);
      k.weight_decay = static_cast<float>(h.weight_decay);
      k.nesterov = h.nesterov;
      k.step = g.step;
      kernels::SgdStepOnDevice(k, span, StateNames().empty() ? nullptr : state[0], pool);
      return;
    }
    case OptimizerType::kAdagrad: {
      kernels::AdagradHyper k;
      k.lr = static_cast<float>(h.lr);
      k.lr_decay = static_cast<float>(h.lr_decay);
      k.eps = static_cast<float>(h.eps);
      k.weight_decay = static_cast<float>(h.weight_decay);
      k.step = g.step;
      kernels::AdagradStepOnDevice(k, span, state[0], pool);
      return;
    }
    case OptimizerType::kLamb:
      break;
  }
  ZR_CHECK(false, "Lamb updates in two passes (Moments, Apply), not Update");
}

kernels::LambHyper Optimizer::LambHyperOf(const Group& g) const {
  const OptimizerHyper& h = g.spec.hyper;
  kernels::LambHyper k;
  k.lr = static_cast<float>(h.lr);
  k.beta1 = static_cast<float>(h.beta1);
  k.beta2 = static_cast<float>(h.beta2);
  k.eps = static_cast<float>(h.eps);
  k.weight_decay = static_cast<float>(h.weight_decay);
  k.bias_correction = h.bias_correction;
  k.eps_inside_sqrt = h.eps_inside_sqrt;
  k.max_coeff = static_cast<float>(h.max_coeff);
  k.min_coeff = static_cast<float>(h.min_coeff);
  k.step = g.step;
  return k;
}

kernels::LambNorms Optimizer::Moments(int index, const kernels::OptimSpan& span, float* const* state) {
  ZR_CHECK(options_.type == OptimizerType::kLamb, "{} has no tensor-norm pass", OptimizerTypeName(options_.type));
  return kernels::LambMomentsOnDevice(LambHyperOf(Checked(index)), span, state[0], state[1], options_.pool);
}

float Optimizer::TrustRatio(int index, const kernels::LambNorms& whole_tensor) const {
  return kernels::LambTrustRatio(LambHyperOf(Checked(index)), whole_tensor);
}

void Optimizer::Apply(int index, const kernels::OptimSpan& span, float* const* state, float trust) {
  ZR_CHECK(options_.type == OptimizerType::kLamb, "{} has no tensor-norm pass", OptimizerTypeName(options_.type));
  kernels::LambApplyOnDevice(LambHyperOf(Checked(index)), span, state[0], state[1], trust, options_.pool);
}

bool Optimizer::HasBetas() const {
  return options_.type == OptimizerType::kAdam || options_.type == OptimizerType::kLion ||
         options_.type == OptimizerType::kLamb;
}

std::pair<double, double> Optimizer::GetBetas(int group) const {
  const OptimizerHyper& h = groups_.at(group).spec.hyper;
  return {h.beta1, h.beta2};
}

void Optimizer::SetBetas(int group, double beta1, double beta2) {
  OptimizerHyper& h = groups_.at(group).spec.hyper;
  h.beta1 = beta1;
  h.beta2 = beta2;
}

std::vector<double> Optimizer::Momentum(int group) const {
  const OptimizerHyper& h = groups_.at(group).spec.hyper;
  if (HasBetas()) return {h.beta1, h.beta2};
  if (options_.type == OptimizerType::kSgd) return {h.momentum};
  return {0.0};
}

std::vector<std::pair<std::string, double>> Optimizer::SaveScalars() const {
  std::vector<std::pair<std::string, double>> s;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const Group& g = groups_[i];
    const std::string p = Format("group{}.", i);
    const OptimizerHyper& h = g.spec.hyper;
    s.emplace_back(p + "step", static_cast<double>(g.step));
    s.emplace_back(p + "lr", h.lr);
    s.emplace_back(p + "beta1", h.beta1);
    s.emplace_back(p + "beta2", h.beta2);
    s.emplace_back(p + "momentum", h.momentum);
    s.emplace_back(p + "weight_decay", h.weight_decay);
    s.emplace_back(p + "eps", h.eps);
  }
  return s;
}

void Optimizer::LoadScalars(const std::vector<std::pair<std::string, double>>& scalars) {
  auto find = [&](const std::string& name) -> double {
    for (const auto& [n, v] : scalars) {
      if (n == name) return v;
    }
    ZR_THROW(CheckpointError, "{} optimizer state: missing scalar '{}'", OptimizerTypeName(options_.type), name);
  };
  // Check everything first, so a bad state leaves the optimizer untouched.
  for (size_t i = 0; i < groups_.size(); ++i) {
    const std::string p = Format("group{}.", i);
    const double step = find(p + "step");
    if (!(step >= 0.0) || step != std::floor(step)) {
      ZR_THROW(CheckpointError, "{} optimizer state '{}step': invalid step count {}", OptimizerTypeName(options_.type), p, step);
    }
    for (const char* k : {"lr", "beta1", "beta2", "momentum", "weight_decay", "eps"}) find(p + k);
  }
  for (size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    const std::string p = Format("group{}.", i);
    g.step = static_cast<int64_t>(find(p + "step"));
    OptimizerHyper& h = g.spec.hyper;
    h.lr = find(p + "lr");
    h.beta1 = find(p + "beta1");
    h.beta2 = find(p + "beta2");
    h.momentum = find(p + "momentum");
    h.weight_decay = find(p + "weight_decay");
    h.eps = find(p + "eps");
  }
}

}  // namespace zerorun::runtime

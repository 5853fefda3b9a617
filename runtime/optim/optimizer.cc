// Optimizer bookkeeping around the fused CPU kernels; see optimizer.h.
#include "zerorun/runtime/optim/optimizer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "zerorun/core/error.h"
#include "zerorun/kernels/cpu/optim.h"

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
  if (g.numel < 0) ZR_THROW(InvalidArgument, "{}: negative partition size {}", where, g.numel);
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
    for (const TensorPiece& p : g.pieces) {
      if (p.offset < 0 || p.count < 0 || p.offset + p.count > g.numel || p.tensor_id < 0 ||
          (g.num_tensors > 0 && p.tensor_id >= g.num_tensors)) {
        ZR_THROW(InvalidArgument, "{}: tensor piece [{}, +{}) id {} does not fit the partition of {} elements ({} tensors)",
                 where, p.offset, p.count, p.tensor_id, g.numel, g.num_tensors);
      }
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
  ScopedMemoryAccount scope(options_.account ? options_.account : &MemoryAccount::Current());
  for (ParamGroupSpec& spec : specs) {
    Group g;
    g.spec = std::move(spec);
    for (const std::string& name : StateNamesFor(options_.type, g.spec.hyper)) {
      Tensor t = Tensor::Zeros({g.spec.numel}, DType::kF32, Device::CPU(), MemCategory::kOptimizer);
      if (name == "sum" && g.spec.hyper.initial_accumulator_value != 0.0) {
        std::fill_n(t.data_as<float>(), g.spec.numel, static_cast<float>(g.spec.hyper.initial_accumulator_value));
      }
      g.state.emplace_back(name, std::move(t));
    }
    groups_.push_back(std::move(g));
  }
}

void Optimizer::BeginStep() {
  for (Group& g : groups_) ++g.step;
}

float* Optimizer::StateData(Group& g, std::string_view name) {
  for (auto& [n, t] : g.state) {
    if (n == name) return t.data_as<float>();
  }
  return nullptr;
}

const Tensor& Optimizer::state(int group, std::string_view name) const {
  for (const auto& [n, t] : groups_.at(group).state) {
    if (n == name) return t;
  }
  ZR_THROW(InvalidArgument, "{} optimizer has no state '{}' in group {}", OptimizerTypeName(options_.type), name, group);
}

std::vector<std::string> Optimizer::StateNames() const {
  return groups_.empty() ? std::vector<std::string>{} : StateNamesFor(options_.type, groups_[0].spec.hyper);
}

int64_t Optimizer::state_bytes() const {
  int64_t b = 0;
  for (const Group& g : groups_) {
    for (const auto& st : g.state) b += static_cast<int64_t>(st.second.nbytes());
  }
  return b;
}

void Optimizer::StepRange(int index, int64_t offset, const kernels::OptimSpan& span) {
  ZR_CHECK(index >= 0 && index < NumGroups(), "optimizer group {} out of range ({} groups)", index, NumGroups());
  Group& g = groups_[static_cast<size_t>(index)];
  ZR_CHECK(offset >= 0 && span.n >= 0 && offset + span.n <= g.spec.numel,
           "optimizer range [{}, +{}) outside group {}'s partition of {} elements", offset, span.n, index, g.spec.numel);
  ZR_CHECK(g.step >= 1, "optimizer stepped before BeginStep()");
  const OptimizerHyper& h = g.spec.hyper;
  const int64_t step = g.step;
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
      k.step = step;
      kernels::cpu::AdamStep(k, span, StateData(g, "exp_avg") + offset, StateData(g, "exp_avg_sq") + offset, pool);
      break;
    }
    case OptimizerType::kLion: {
      kernels::LionHyper k;
      k.lr = static_cast<float>(h.lr);
      k.beta1 = static_cast<float>(h.beta1);
      k.beta2 = static_cast<float>(h.beta2);
      k.weight_decay = static_cast<float>(h.weight_decay);
      k.step = step;
      kernels::cpu::LionStep(k, span, StateData(g, "exp_avg") + offset, pool);
      break;
    }
    case OptimizerType::kSgd: {
      kernels::SgdHyper k;
      k.lr = static_cast<float>(h.lr);
      k.momentum = static_cast<float>(h.momentum);
      k.dampening = static_cast<float>(h.dampening);
      k.weight_decay = static_cast<float>(h.weight_decay);
      k.nesterov = h.nesterov;
      k.step = step;
      float* buf = StateData(g, "momentum_buffer");
      kernels::cpu::SgdStep(k, span, buf ? buf + offset : nullptr, pool);
      break;
    }
    case OptimizerType::kAdagrad: {
      kernels::AdagradHyper k;
      k.lr = static_cast<float>(h.lr);
      k.lr_decay = static_cast<float>(h.lr_decay);
      k.eps = static_cast<float>(h.eps);
      k.weight_decay = static_cast<float>(h.weight_decay);
      k.step = step;
      kernels::cpu::AdagradStep(k, span, StateData(g, "sum") + offset, pool);
      break;
    }
    case OptimizerType::kLamb:
      ZR_CHECK(offset == 0 && span.n == g.spec.numel,
               "Lamb steps a group's whole partition at once (got [{}, +{}) of {})", offset, span.n, g.spec.numel);
      StepLamb(index, g, span);
      break;
  }
}

void Optimizer::StepLamb(int index, Group& g, const kernels::OptimSpan& span) {
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
  std::vector<TensorPiece> pieces = g.spec.pieces;
  if (pieces.empty()) pieces.push_back({0, g.spec.numel, 0});
  int64_t num_tensors = g.spec.num_tensors;
  for (const TensorPiece& p : pieces) num_tensors = std::max(num_tensors, p.tensor_id + 1);
  float* m = StateData(g, "exp_avg");
  float* v = StateData(g, "exp_avg_sq");
  auto sub = [&](const TensorPiece& p) {
    kernels::OptimSpan s = span;
    s.n = p.count;
    s.params = span.params + p.offset;
    s.grads = static_cast<const char*>(span.grads) + p.offset * static_cast<int64_t>(DTypeSize(span.grad_dtype));
    if (span.param_copy) {
      s.param_copy = static_cast<char*>(span.param_copy) + p.offset * static_cast<int64_t>(DTypeSize(span.copy_dtype));
    }
    return s;
  };
  // Pass 1: moments and this rank's partial norms per tensor.
  std::vector<double> sums(static_cast<size_t>(2 * num_tensors), 0.0);
  for (const TensorPiece& p : pieces) {
    kernels::LambNorms n = kernels::cpu::LambMoments(k, sub(p), m + p.offset, v + p.offset, options_.pool);
    sums[static_cast<size_t>(2 * p.tensor_id)] += n.param_sq;
    sums[static_cast<size_t>(2 * p.tensor_id + 1)] += n.update_sq;
  }
  if (norm_reducer_) norm_reducer_(sums);
  // Pass 2: the update with each tensor's trust ratio.
  g.trust.assign(static_cast<size_t>(num_tensors), 1.0f);
  for (int64_t t = 0; t < num_tensors; ++t) {
    g.trust[static_cast<size_t>(t)] =
        kernels::LambTrustRatio(k, {sums[static_cast<size_t>(2 * t)], sums[static_cast<size_t>(2 * t + 1)]});
  }
  for (const TensorPiece& p : pieces) {
    kernels::cpu::LambApply(k, sub(p), m + p.offset, v + p.offset, g.trust[static_cast<size_t>(p.tensor_id)],
                            options_.pool);
  }
  (void)index;
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

Optimizer::State Optimizer::SaveState() const {
  State s;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const Group& g = groups_[i];
    const std::string p = Format("group{}.", i);
    for (const auto& [name, t] : g.state) s.tensors.emplace_back(p + name, t);
    const OptimizerHyper& h = g.spec.hyper;
    s.scalars.emplace_back(p + "step", static_cast<double>(g.step));
    s.scalars.emplace_back(p + "lr", h.lr);
    s.scalars.emplace_back(p + "beta1", h.beta1);
    s.scalars.emplace_back(p + "beta2", h.beta2);
    s.scalars.emplace_back(p + "momentum", h.momentum);
    s.scalars.emplace_back(p + "weight_decay", h.weight_decay);
    s.scalars.emplace_back(p + "eps", h.eps);
  }
  return s;
}

void Optimizer::LoadState(const State& s) {
  auto find_tensor = [&](const std::string& name) -> const Tensor& {
    for (const auto& [n, t] : s.tensors) {
      if (n == name) return t;
    }
    ZR_THROW(CheckpointError, "{} optimizer state: missing tensor '{}'", OptimizerTypeName(options_.type), name);
  };
  auto find_scalar = [&](const std::string& name) -> double {
    for (const auto& [n, v] : s.scalars) {
      if (n == name) return v;
    }
    ZR_THROW(CheckpointError, "{} optimizer state: missing scalar '{}'", OptimizerTypeName(options_.type), name);
  };
  // Check everything first, so a bad state leaves the optimizer untouched.
  for (size_t i = 0; i < groups_.size(); ++i) {
    const std::string p = Format("group{}.", i);
    for (const auto& [name, t] : groups_[i].state) {
      const Tensor& src = find_tensor(p + name);
      if (src.numel() != t.numel()) {
        ZR_THROW(CheckpointError, "{} optimizer state '{}': {} elements saved, the partition has {}",
                 OptimizerTypeName(options_.type), p + name, src.numel(), t.numel());
      }
      if (src.dtype() != DType::kF32 && !Is16Bit(src.dtype())) {
        ZR_THROW(CheckpointError, "{} optimizer state '{}': dtype {} is not a float type",
                 OptimizerTypeName(options_.type), p + name, DTypeName(src.dtype()));
      }
    }
    const double step = find_scalar(p + "step");
    if (!(step >= 0.0) || step != std::floor(step)) {
      ZR_THROW(CheckpointError, "{} optimizer state '{}step': invalid step count {}", OptimizerTypeName(options_.type), p, step);
    }
    for (const char* k : {"lr", "beta1", "beta2", "momentum", "weight_decay", "eps"}) find_scalar(p + k);
  }
  for (size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    const std::string p = Format("group{}.", i);
    for (auto& [name, t] : g.state) t.CopyFrom(find_tensor(p + name));
    g.step = static_cast<int64_t>(find_scalar(p + "step"));
    OptimizerHyper& h = g.spec.hyper;
    h.lr = find_scalar(p + "lr");
    h.beta1 = find_scalar(p + "beta1");
    h.beta2 = find_scalar(p + "beta2");
    h.momentum = find_scalar(p + "momentum");
    h.weight_decay = find_scalar(p + "weight_decay");
    h.eps = find_scalar(p + "eps");
  }
}

}  // namespace zerorun::runtime

// The engine's numerics monitoring (config section `numerics`, docs/monitoring.md):
//  - after an agreed overflow, which parameters have non-finite gradients on which ranks, and the
//    first module in backward order owning one (every rank's partition is examined: one all-gather
//    of a fixed-size record per rank, only on an overflow);
//  - every `interval` steps, per parameter group, gradient max-abs, norm, zero / non-finite fractions
//    and, for fp16, the fractions outside fp16's range at the current loss scale, agreed across ranks;
//  - with check_activations, a non-finite loss names the first module whose forward output was not
//    finite (the observer checks each output, engine.cc).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "zerorun/core/log.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/engine_internal.h"

namespace zerorun::runtime {

namespace {
std::string G(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}
}  // namespace

std::string NonFiniteText(const StepResult& r) {
  if (r.nonfinite_params.empty()) return "";
  std::string params;
  for (size_t i = 0; i < r.nonfinite_params.size(); ++i) params += (i ? ", " : "") + r.nonfinite_params[i];
  return Format(" on rank(s) {}; first module in backward order with non-finite gradients: {} (on rank(s) {}); "
                "parameters: {}", RankList(r.nonfinite_ranks),
                r.nonfinite_module.empty() ? std::string("<root>") : r.nonfinite_module,
                RankList(r.nonfinite_module_ranks), params);
}

void Engine::ReportNonFiniteGradients(StepResult* r) {
  const zero::NonFiniteReport rep = impl_->strategy->ReportNonFinite(impl_->backward_pos);
  r->nonfinite_ranks = rep.ranks;
  const nn::Module* first = nullptr;
  for (const zero::NonFiniteParam& p : rep.params) {
    const nn::Parameter& param = impl_->host->P(p.id);
    r->nonfinite_params.push_back(Format("{} (rank {})", param.name(), RankList(p.ranks)));
    const nn::Module* m = impl_->backward_module[static_cast<size_t>(p.id)];
    if (first == nullptr && m != nullptr) first = m;
    if (m == first && first != nullptr) {
      for (int rk : p.ranks) {
        if (std::find(r->nonfinite_module_ranks.begin(), r->nonfinite_module_ranks.end(), rk) ==
            r->nonfinite_module_ranks.end()) {
          r->nonfinite_module_ranks.push_back(rk);
        }
      }
    }
  }
  std::sort(r->nonfinite_module_ranks.begin(), r->nonfinite_module_ranks.end());
  if (first != nullptr) r->nonfinite_module = first->path();
  int64_t total = 0;
  for (int64_t c : rep.count_by_rank) total += c;
  if (total > static_cast<int64_t>(rep.params.size()) && rank() == 0) {
    ZR_DEBUG("non-finite gradients: {} (parameter, rank) pairs, the first {} parameters named", total,
             rep.params.size());
  }
}

void Engine::ComputeGradNumerics(StepResult* r) {
  const NumericsConfig& nc = config_.numerics;
  if (!nc.enabled || (global_steps_ + 1) % nc.interval != 0) return;
  const std::vector<zero::GradStats> stats = impl_->strategy->GradStatistics();
  const double scale = r->loss_scale > 0 ? r->loss_scale : 1.0;
  const bool fp16 = config_.fp16.enabled;
  for (size_t g = 0; g < stats.size(); ++g) {
    const zero::GradStats& s = stats[g];
    GroupNumerics n;
    n.numel = s.numel;
    n.grad_max_abs = s.max_abs / scale;
    n.grad_norm = std::sqrt(s.sum_squares) / scale;
    n.zero_fraction = s.Fraction(s.zeros);
    n.nonfinite_fraction = s.Fraction(s.nonfinite);
    if (fp16) {
      n.fp16_underflow_fraction = s.Fraction(s.fp16_underflow);
      n.fp16_overflow_fraction = s.Fraction(s.fp16_overflow);
    }
    r->numerics.push_back(n);
    if (rank() != 0) continue;
    const std::string fp16_part =
        fp16 ? Format(", fp16 at loss scale {}: underflow {}%, overflow {}%", scale,
                      G(100 * n.fp16_underflow_fraction), G(100 * n.fp16_overflow_fraction))
             : std::string();
    ZR_INFO("numerics step {} group {} ({} elements): grad max-abs {}, norm {}, zeros {}%, non-finite {}%{}",
            global_steps_ + 1, g, n.numel, G(n.grad_max_abs), G(n.grad_norm), G(100 * n.zero_fraction),
            G(100 * n.nonfinite_fraction), fp16_part);
  }
}

void Engine::CheckLoss() {
  if (std::isfinite(last_loss_)) return;
  if (!config_.numerics.check_activations) {
    ZR_WARN("rank {}: the loss is {} (micro-step {}); set \"numerics\": {{\"check_activations\": true}} to name the "
            "first module whose forward output was not finite", rank(), last_loss_, micro_steps_);
  } else if (impl_->first_bad_output != nullptr) {
    ZR_WARN("rank {}: the loss is {} (micro-step {}); the first module in forward order whose output was not "
            "finite: {}", rank(), last_loss_, micro_steps_, impl_->first_bad_output_name);
  } else {
    ZR_WARN("rank {}: the loss is {} (micro-step {}); every module's output was finite (the loss itself is not)",
            rank(), last_loss_, micro_steps_);
  }
}

const std::string& Engine::first_nonfinite_output() const { return impl_->first_bad_output_name; }

}  // namespace zerorun::runtime

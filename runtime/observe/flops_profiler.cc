// FlopsProfiler: per-module forward MACs and latency over one step, DeepSpeed's report, the GEMM probe.
#include "zerorun/runtime/observe/flops_profiler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "zerorun/core/format.h"
#include "zerorun/core/tensor.h"
#include "zerorun/core/timer.h"
#include "zerorun/kernels/ops.h"
#include "zerorun/runtime/config/config.h"
#include "zerorun/runtime/nn/flops.h"
#include "zerorun/runtime/nn/module.h"

namespace zerorun::runtime {

std::string FormatCount(double v, const char* unit) {
  const char* prefix[] = {"", " K", " M", " G", " T", " P"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  char buf[64];
  const bool bare = i == 0 && *unit != '\0';  // "0.00 MACs", not "0.00MACs"
  std::snprintf(buf, sizeof buf, "%.2f%s%s%s", v, prefix[i], bare ? " " : "", unit);
  return buf;
}

namespace {
std::string Ms(double ms) {
  char buf[32];
  if (ms < 1) {
    std::snprintf(buf, sizeof buf, "%.2f us", ms * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f ms", ms);
  }
  return buf;
}
std::string Pct(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}
std::string Flops(double flops, double ms) { return FormatCount(ms > 0 ? flops / (ms * 1e-3) : 0, "FLOPS"); }
int Depth(const nn::Module* m) {
  int d = 0;
  for (const nn::Module* p = m->parent(); p != nullptr; p = p->parent()) ++d;
  return d;
}
}  // namespace

FlopsProfiler::FlopsProfiler(nn::Module& root) : root_(root) {}

void FlopsProfiler::PreForward(nn::Module& m, bool recompute) {
  open_.push_back({&m, nn::ForwardMacsCounter(), NowSeconds(), recompute});
}

void FlopsProfiler::PostForward(nn::Module& m, bool recompute) {
  if (open_.empty() || open_.back().m != &m) return;  // not opened by this profiler (began mid-window)
  const Open o = open_.back();
  open_.pop_back();
  const int64_t macs = nn::ForwardMacsCounter() - o.macs;
  if (recompute) {
    if (open_.empty() || !open_.back().recompute) profile_.recompute_macs += macs;  // outermost replay only
    return;
  }
  ModuleProfile& p = by_module_[&m];
  p.macs += macs;
  p.fwd_ms += (NowSeconds() - o.start) * 1e3;
  ++p.calls;
}

void FlopsProfiler::Finish() {
  profile_.modules.clear();
  for (nn::Module* m : root_.Modules()) {
    auto it = by_module_.find(m);
    if (it == by_module_.end()) continue;
    ModuleProfile p = it->second;
    p.name = m->path();
    p.type = m->type_name();
    p.depth = Depth(m) - Depth(&root_);
    p.params = m->NumParameterElements();
    profile_.modules.push_back(p);
  }
  if (!profile_.modules.empty() && profile_.modules.front().depth == 0) {
    profile_.fwd_macs = profile_.modules.front().macs;
    profile_.params = profile_.modules.front().params;
  }
}

std::string FlopsProfileText(const FlopsProfile& p, const FlopsProfilerConfig& c) {
  std::string o;
  auto line = [&](const std::string& key, const std::string& value) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%-70s%s\n", (key + ":").c_str(), value.c_str());
    o += buf;
  };
  const double fwd = p.fwd_flops();
  o += "-------------------------- DeepSpeed Flops Profiler (zerorun) --------------------------\n";
  o += Format("Profile Summary at step {}:\n", p.step);
  o += "Notations: number of parameters (params), multiply-accumulate operations (MACs; matmuls only, counted by\n"
       "the layers), floating-point operations (flops = 2 MACs), flops per second (FLOPS), fwd/bwd latency, step\n"
       "(weights update latency), iter latency (sum of fwd, bwd and step latency); per rank.\n\n";
  line("world size", std::to_string(p.world_size));
  line("data parallel size", std::to_string(p.world_size));
  line("batch size per rank (samples in the step)", std::to_string(p.samples));
  line("params per rank (the model's)", FormatCount(static_cast<double>(p.params)));
  line("fwd MACs per rank", FormatCount(static_cast<double>(p.fwd_macs), "MACs"));
  line("fwd flops per rank", FormatCount(fwd));
  line("fwd latency", Ms(p.fwd_ms));
  line("fwd FLOPS per rank = fwd flops per rank / fwd latency", Flops(fwd, p.fwd_ms));
  line("bwd latency", Ms(p.bwd_ms));
  line("bwd FLOPS per rank = 2 * fwd flops per rank / bwd latency", Flops(2 * fwd, p.bwd_ms));
  line("fwd+bwd FLOPS per rank = 3 * fwd flops per rank / (fwd+bwd latency)", Flops(3 * fwd, p.fwd_ms + p.bwd_ms));
  line("step latency", Ms(p.step_ms));
  line("iter latency", Ms(p.iter_ms()));
  line("FLOPS per rank = 3 * fwd flops per rank / iter latency", FormatCount(p.model_flops_per_s(), "FLOPS"));
  line("samples/second", p.iter_ms() > 0 ? Format("{}", static_cast<double>(p.samples * p.world_size) /
                                                            (p.iter_ms() * 1e-3)) : std::string("0"));
  if (p.recompute_macs > 0) line("recomputed fwd flops (activation checkpointing)", FormatCount(2.0 * p.recompute_macs));
  line(Format("peak FLOPS per rank ({})", p.peak_source), FormatCount(p.peak_flops, "FLOPS"));
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.2f%%", 100 * p.mfu());
  line("MFU = FLOPS per rank / peak", pct);
  if (p.recompute_macs > 0) {
    std::snprintf(pct, sizeof pct, "%.2f%%", 100 * p.hfu());
    line("HFU (with the recomputed forward)", pct);
  }

  int max_depth = 0;
  for (const ModuleProfile& m : p.modules) max_depth = std::max(max_depth, m.depth);
  if (c.module_depth >= 0) max_depth = std::min<int>(max_depth, static_cast<int>(c.module_depth));
  const size_t top = static_cast<size_t>(std::max<int64_t>(1, c.top_modules));
  o += "\n----------------------------- Aggregated Profile per rank -----------------------------\n";
  o += Format("Top {} modules in terms of params, MACs or fwd latency at different model depths:\n", top);
  for (int d = 0; d <= max_depth; ++d) {
    std::map<std::string, ModuleProfile> agg;  // by type at this depth
    for (const ModuleProfile& m : p.modules) {
      if (m.depth != d) continue;
      ModuleProfile& a = agg[m.type];
      a.params += m.params;
      a.macs += m.macs;
      a.fwd_ms += m.fwd_ms;
    }
    std::vector<std::pair<std::string, ModuleProfile>> v(agg.begin(), agg.end());
    auto topk = [&](auto key, auto text) {
      std::sort(v.begin(), v.end(), [&](const auto& a, const auto& b) { return key(a.second) > key(b.second); });
      std::string s = "{";
      for (size_t i = 0; i < std::min(top, v.size()); ++i) {
        s += Format("{}'{}': '{}'", i ? ", " : "", v[i].first, text(v[i].second));
      }
      return s + "}";
    };
    o += Format("depth {}:\n", d);
    o += "    params      - " + topk([](const ModuleProfile& m) { return static_cast<double>(m.params); },
                                   [](const ModuleProfile& m) { return FormatCount(static_cast<double>(m.params)); }) + "\n";
    o += "    MACs        - " + topk([](const ModuleProfile& m) { return static_cast<double>(m.macs); },
                                   [](const ModuleProfile& m) { return FormatCount(static_cast<double>(m.macs), "MACs"); }) + "\n";
    o += "    fwd latency - " + topk([](const ModuleProfile& m) { return m.fwd_ms; },
                                   [](const ModuleProfile& m) { return Ms(m.fwd_ms); }) + "\n";
  }
  if (c.detailed) {
    o += "\n------------------------------ Detailed Profile per rank ------------------------------\n";
    o += "Each module profile is listed after its name in the following order:\n"
         "params, percentage of total params, MACs, percentage of total MACs, fwd latency, percentage of total fwd "
         "latency, fwd FLOPS\n";
    const double total_ms = p.modules.empty() ? 0 : p.modules.front().fwd_ms;
    for (const ModuleProfile& m : p.modules) {
      if (m.depth > max_depth) continue;
      o += std::string(static_cast<size_t>(2 * m.depth), ' ') +
           Format("{} ({}): {}, {} Params, {}, {} MACs, {}, {} latency, {}\n", m.name.empty() ? "<root>" : m.name,
                  m.type, FormatCount(static_cast<double>(m.params)), Pct(static_cast<double>(m.params),
                  static_cast<double>(p.params)), FormatCount(static_cast<double>(m.macs), "MACs"),
                  Pct(static_cast<double>(m.macs), static_cast<double>(p.fwd_macs)), Ms(m.fwd_ms),
                  Pct(m.fwd_ms, total_ms), Flops(2.0 * static_cast<double>(m.macs), m.fwd_ms));
    }
  }
  o += "------------------------------------------------------------------------------\n";
  return o;
}

double MeasurePeakFlops(DType dtype, int64_t size, double budget_s) {
  const int64_t n = size;
  Tensor a = Tensor::Zeros({n, n}, dtype, Device::CPU(), MemCategory::kOther);  // values do not change the time
  Tensor b = Tensor::Zeros({n, n}, dtype, Device::CPU(), MemCategory::kOther);
  Tensor c = Tensor::Empty({n, n}, dtype, Device::CPU(), MemCategory::kOther);
  double best = 0;
  const double deadline = NowSeconds() + budget_s;
  for (int rep = 0; rep < 20 && (rep < 2 || NowSeconds() < deadline); ++rep) {
    const double t0 = NowSeconds();
    kernels::Gemm(kernels::Trans::kN, kernels::Trans::kT, n, n, n, 1.0f, a.data(), dtype, n, b.data(), dtype, n, 0.0f,
                  c.data(), dtype, n);
    const double dt = NowSeconds() - t0;
    if (rep > 0 && dt > 0) best = std::max(best, 2.0 * static_cast<double>(n * n * n) / dt);  // rep 0 warms up
  }
  return best;
}

}  // namespace zerorun::runtime

// FlopsProfiler: DeepSpeed's flops_profiler for one step (`profile_step`). During that step's forward
// passes the engine's observer brackets every module's forward window; the layers count their own
// matmul MACs (runtime/nn/flops.h), so a module's MACs are the counter's growth inside its window
// (children included). The report follows DeepSpeed's print_model_profile: a summary (params, fwd
// MACs/FLOPs, fwd/bwd/step latency, FLOPS, samples/s), then MFU — model FLOPs per second (fwd + bwd =
// 3 × fwd) over the peak of this rank's device — and HFU (with the activation-checkpoint recompute),
// the aggregated profile (top `top_modules` modules by params, MACs and fwd latency at each depth up
// to `module_depth`), and with `detailed` the module tree with each module's numbers.
//
// The peak is given (EngineOptions::peak_flops, env ZERORUN_PEAK_TFLOPS) or measured at start-up by
// MeasurePeakFlops: a short GEMM probe of the model dtype through the same kernels the layers use.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "zerorun/core/dtype.h"

namespace zerorun::nn {
class Module;
}

namespace zerorun::runtime {

struct FlopsProfilerConfig;

struct ModuleProfile {
  std::string name;   // path ("" for the root)
  std::string type;
  int depth = 0;      // root 0
  int64_t params = 0;  // this module and its descendants (tied once)
  int64_t macs = 0;    // forward MACs over the profiled step (all micro-steps)
  double fwd_ms = 0;   // forward latency, summed over calls
  int64_t calls = 0;
};

struct FlopsProfile {
  int64_t step = 0;             // global step profiled (engine's global_steps when it began)
  int64_t fwd_macs = 0;         // root: forward MACs of the step (every micro-step)
  double fwd_ms = 0, bwd_ms = 0, step_ms = 0;
  int64_t recompute_macs = 0;   // forward MACs redone in backward (activation checkpointing)
  int64_t samples = 0;          // this rank's samples in the step
  int64_t params = 0;
  int world_size = 1;
  double peak_flops = 0;        // per rank
  std::string peak_source;      // "measured: ..." or "given"
  std::vector<ModuleProfile> modules;  // pre-order of the module tree (modules that ran forward)

  double fwd_flops() const { return 2.0 * static_cast<double>(fwd_macs); }
  double iter_ms() const { return fwd_ms + bwd_ms + step_ms; }
  // Model FLOPs per second of this rank: 3 × fwd FLOPs over the iteration.
  double model_flops_per_s() const { return iter_ms() > 0 ? 3.0 * fwd_flops() / (iter_ms() * 1e-3) : 0; }
  double mfu() const { return peak_flops > 0 ? model_flops_per_s() / peak_flops : 0; }
  // Hardware FLOPs: with the recomputed forward.
  double hfu() const {
    return peak_flops > 0 && iter_ms() > 0
               ? (3.0 * fwd_flops() + 2.0 * static_cast<double>(recompute_macs)) / (iter_ms() * 1e-3) / peak_flops
               : 0;
  }
};

class FlopsProfiler {
 public:
  explicit FlopsProfiler(nn::Module& root);
  // Observer hooks for the profiled step (forward windows; recompute windows count separately).
  void PreForward(nn::Module& m, bool recompute);
  void PostForward(nn::Module& m, bool recompute);
  FlopsProfile& profile() { return profile_; }
  // Fills profile().modules from what was recorded.
  void Finish();

 private:
  struct Open {
    nn::Module* m;
    int64_t macs;
    double start;
    bool recompute;
  };
  nn::Module& root_;
  std::vector<Open> open_;
  std::map<const nn::Module*, ModuleProfile> by_module_;
  FlopsProfile profile_;
};

// DeepSpeed-style text report of `p` (see the file comment).
std::string FlopsProfileText(const FlopsProfile& p, const FlopsProfilerConfig& config);

// Best-of-a-few GEMM FLOP/s (m = n = k = `size`, `dtype` operands, fp32 accumulation) on this thread
// pool's CPU kernels, in about `budget_s` seconds. Returns 0 when the budget allowed no full run.
double MeasurePeakFlops(DType dtype, int64_t size = 512, double budget_s = 0.3);

// "12.3 G" style (DeepSpeed's number_to_string with 2 decimals).
std::string FormatCount(double v, const char* unit = "");

}  // namespace zerorun::runtime

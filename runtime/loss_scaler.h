// fp16 loss scaling: DeepSpeed's ZeRO DynamicLossScaler rule exactly (reference §2.2: start at
// 2^initial_scale_power, halve on overflow once hysteresis is used up, double after `scale_window`
// clean steps, refill hysteresis on growth or — with consecutive_hysteresis — on every clean step,
// error on an overflow while already at min_scale), or a static scale. zerorun uses the ZeRO rule at
// every stage, stage 0 included; DeepSpeed's non-ZeRO fp16 wrappers (no hysteresis, clamp at the
// minimum) exist here only as the kLegacyFp16Optimizer flavour for comparisons. See docs/optim.md.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "zerorun/core/error.h"

namespace zerorun::runtime {

// Raised by Update() on an overflow while the scale already equals min_scale.
class LossScaleError : public Error {
 public:
  using Error::Error;
};

struct LossScalerOptions {
  // false: a fixed scale (`static_scale`), never changed; overflows still skip the step.
  bool dynamic = true;
  // The fixed scale when !dynamic (fp16.loss_scale > 0, or 1.0 for bf16/fp32).
  double static_scale = 1.0;
  // The dynamic scale starts at 2^initial_scale_power (fp16.initial_scale_power).
  int initial_scale_power = 16;
  // Clean steps between doublings (fp16.loss_scale_window).
  int64_t scale_window = 1000;
  // Overflows tolerated before the scale is halved (fp16.hysteresis, >= 1).
  int hysteresis = 2;
  // Refill hysteresis on every clean step, not only when the scale grows (fp16.consecutive_hysteresis).
  bool consecutive_hysteresis = false;
  // The scale never goes below this; an overflow at exactly this scale is an error (fp16.min_loss_scale).
  double min_scale = 1.0;
  // How many recent updates the history ring keeps (shown in the min-scale error).
  int history_size = 16;

  enum class Flavour {
    kZero,                // DeepSpeed's DynamicLossScaler (ZeRO 1/2/3); zerorun's rule everywhere
    kLegacyFp16Optimizer  // DeepSpeed's non-ZeRO FP16_Optimizer: no hysteresis, clamps at min, no error
  };
  Flavour flavour = Flavour::kZero;
};

class LossScaler {
 public:
  // Validates the options (InvalidArgument naming the field).
  explicit LossScaler(const LossScalerOptions& options = {});

  // A static scaler (bf16, fp32, or fp16.loss_scale = S).
  static LossScaler Static(double scale);

  // The scale to multiply the loss by in the next backward.
  double scale() const { return cur_scale_; }
  bool dynamic() const { return options_.dynamic; }

  // Records one optimizer step (one accumulation boundary) whose gradients, agreed across ranks, did or
  // did not overflow, and updates the scale. Returns true when the step must be skipped (overflow).
  // Throws LossScaleError (with the recent history, suggesting bf16) on an overflow while the scale
  // already equals min_scale (dynamic kZero flavour only). The caller unscales the gradients of this
  // step with the scale that was used in their backward (read scale() before calling Update), not
  // the updated one: see docs/optim.md on DeepSpeed's growth-step quirk.
  bool Update(bool overflow);

  // Counters of the rule (DeepSpeed names in comments).
  int64_t iteration() const { return cur_iter_; }                  // cur_iter
  int64_t last_overflow_iteration() const { return last_overflow_iter_; }  // last_overflow_iter
  int hysteresis_left() const { return cur_hysteresis_; }          // cur_hysteresis

  struct HistoryEntry {
    int64_t iteration = 0;      // cur_iter before the update
    double scale_before = 0.0;
    double scale_after = 0.0;
    bool overflow = false;
  };
  // Oldest first, at most options.history_size entries.
  std::vector<HistoryEntry> History() const { return {history_.begin(), history_.end()}; }

  // Everything needed to resume bit-exactly (the options are not included: they come from the config).
  struct State {
    double cur_scale = 0.0;
    int64_t cur_iter = 0;
    int64_t last_overflow_iter = -1;
    int cur_hysteresis = 0;
  };
  State GetState() const;
  void SetState(const State& state);

  const LossScalerOptions& options() const { return options_; }

 private:
  [[noreturn]] void ThrowAtMinimum() const;

  LossScalerOptions options_;
  double cur_scale_ = 1.0;
  int64_t cur_iter_ = 0;
  int64_t last_overflow_iter_ = -1;
  int cur_hysteresis_ = 1;
  std::deque<HistoryEntry> history_;
};

}  // namespace zerorun::runtime

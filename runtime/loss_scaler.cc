// The loss-scale update rule; see loss_scaler.h and reference §2.2.
#include "zerorun/runtime/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "zerorun/core/format.h"
#include "zerorun/core/log.h"

namespace zerorun::runtime {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) {
  if (options_.dynamic) {
    if (options_.initial_scale_power < 0 || options_.initial_scale_power > 126) {
      ZR_THROW(InvalidArgument, "loss scaler: initial_scale_power must be in [0, 126], got {}",
               options_.initial_scale_power);
    }
    if (options_.scale_window < 1) {
      ZR_THROW(InvalidArgument, "loss scaler: loss_scale_window must be >= 1, got {}", options_.scale_window);
    }
    if (options_.hysteresis < 1) {
      ZR_THROW(InvalidArgument, "loss scaler: hysteresis must be >= 1, got {}", options_.hysteresis);
    }
    if (!(options_.min_scale > 0.0) || !std::isfinite(options_.min_scale)) {
      ZR_THROW(InvalidArgument, "loss scaler: min_loss_scale must be a positive number, got {}", options_.min_scale);
    }
    cur_scale_ = std::ldexp(1.0, options_.initial_scale_power);
  } else {
    if (!(options_.static_scale > 0.0) || !std::isfinite(options_.static_scale)) {
      ZR_THROW(InvalidArgument, "loss scaler: a static loss scale must be a positive number, got {}",
               options_.static_scale);
    }
    cur_scale_ = options_.static_scale;
  }
  if (options_.history_size < 1) options_.history_size = 1;
  cur_hysteresis_ = options_.hysteresis;
}

LossScaler LossScaler::Static(double scale) {
  LossScalerOptions o;
  o.dynamic = false;
  o.static_scale = scale;
  return LossScaler(o);
}

bool LossScaler::Update(bool overflow) {
  HistoryEntry entry;
  entry.iteration = cur_iter_;
  entry.scale_before = cur_scale_;
  entry.overflow = overflow;
  auto record = [&] {
    entry.scale_after = cur_scale_;
    history_.push_back(entry);
    while (static_cast<int>(history_.size()) > options_.history_size) history_.pop_front();
  };

  if (!options_.dynamic) {
    if (overflow) ZR_WARN("fp16 gradient overflow with static loss scale {}: skipping step {}", cur_scale_, cur_iter_);
    ++cur_iter_;
    record();
    return overflow;
  }

  const bool legacy = options_.flavour == LossScalerOptions::Flavour::kLegacyFp16Optimizer;
  if (overflow) {
    if (legacy || options_.hysteresis == 1 || cur_hysteresis_ == 1) {
      if (!legacy && cur_scale_ == options_.min_scale) {
        entry.scale_after = cur_scale_;
        history_.push_back(entry);
        while (static_cast<int>(history_.size()) > options_.history_size) history_.pop_front();
        ThrowAtMinimum();
      }
      const double next = std::max(cur_scale_ / 2.0, options_.min_scale);
      ZR_INFO("OVERFLOW! Skipping step {}. Attempted loss scale: {}, reducing to {}", cur_iter_, cur_scale_, next);
      cur_scale_ = next;
    } else {
      ZR_INFO("OVERFLOW! Skipping step {}. Attempted loss scale: {}, but hysteresis is {}. Reducing hysteresis to {}",
              cur_iter_, cur_scale_, cur_hysteresis_, cur_hysteresis_ - 1);
      --cur_hysteresis_;
    }
    last_overflow_iter_ = cur_iter_;
  } else {
    if (!legacy && options_.consecutive_hysteresis) cur_hysteresis_ = options_.hysteresis;
    const int64_t stable = cur_iter_ - last_overflow_iter_ - 1;
    if (stable > 0 && stable % options_.scale_window == 0) {
      if (!legacy && !options_.consecutive_hysteresis) cur_hysteresis_ = options_.hysteresis;
      cur_scale_ *= 2.0;
    }
  }
  ++cur_iter_;
  record();
  return overflow;
}

void LossScaler::ThrowAtMinimum() const {
  std::string hist;
  for (const HistoryEntry& e : history_) {
    hist += Format("\n  step {}: scale {} -> {}{}", e.iteration, e.scale_before, e.scale_after,
                   e.overflow ? " (overflow)" : "");
  }
  ZR_THROW(LossScaleError,
           "Current loss scale already at minimum ({}) - cannot decrease scale anymore (gradient overflow at "
           "loss-scale step {}). Recent loss-scale history (oldest first):{}\nThe fp16 range is too narrow for "
           "this run: consider bf16 (\"bf16\": {{\"enabled\": true}}, no loss scaling needed), a lower learning "
           "rate, or gradient clipping; lowering fp16.min_loss_scale only postpones this.",
           options_.min_scale, cur_iter_, hist);
}

LossScaler::State LossScaler::GetState() const {
  return State{cur_scale_, cur_iter_, last_overflow_iter_, cur_hysteresis_};
}

void LossScaler::SetState(const State& s) {
  if (!(s.cur_scale > 0.0) || !std::isfinite(s.cur_scale) || s.cur_iter < 0 || s.last_overflow_iter < -1 ||
      s.last_overflow_iter >= s.cur_iter || s.cur_hysteresis < 0) {
    ZR_THROW(InvalidArgument, "loss scaler: invalid saved state (scale {}, iteration {}, last overflow {}, hysteresis {})",
             s.cur_scale, s.cur_iter, s.last_overflow_iter, s.cur_hysteresis);
  }
  cur_scale_ = s.cur_scale;
  cur_iter_ = s.cur_iter;
  last_overflow_iter_ = s.last_overflow_iter;
  cur_hysteresis_ = s.cur_hysteresis;
  history_.clear();
}

}  // namespace zerorun::runtime

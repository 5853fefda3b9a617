#include "zerorun/experiments/early_stop.h"

#include <algorithm>
#include <cmath>

#include "zerorun/core/error.h"

namespace zerorun::experiments {
namespace {

class MedianStopper final : public EarlyStopper {
 public:
  explicit MedianStopper(const EarlyStopSpec& s) : spec_(s) {}
  std::string Report(const std::string& run, int64_t step, double loss) override {
    double& best = best_.try_emplace(run, INFINITY).first->second;
    if (std::isfinite(loss)) best = std::min(best, loss);
    if (step < spec_.grace_steps || static_cast<int64_t>(completed_.size()) < spec_.min_trials) return "";
    std::vector<double> means;
    for (const Curve& c : completed_) {
      double sum = 0;
      int64_t n = 0;
      for (const auto& [s, l] : c) {
        if (s > step) break;
        sum += l;
        ++n;
      }
      if (n > 0) means.push_back(sum / static_cast<double>(n));
    }
    if (static_cast<int64_t>(means.size()) < spec_.min_trials) return "";
    std::sort(means.begin(), means.end());
    size_t m = means.size();
    double median = m % 2 ? means[m / 2] : (means[m / 2 - 1] + means[m / 2]) / 2;
    if (best > median) {
      return Format("median stopping at step {}: best loss {} is worse than the median {} of {} completed run(s)",
                    step, best, median, m);
    }
    return "";
  }
  void Completed(const std::string&, const Curve& curve) override { completed_.push_back(curve); }

 private:
  EarlyStopSpec spec_;
  std::map<std::string, double> best_;
  std::vector<Curve> completed_;
};

class AshaStopper final : public EarlyStopper {
 public:
  explicit AshaStopper(const EarlyStopSpec& s) : spec_(s) {}
  std::string Report(const std::string& run, int64_t step, double loss) override {
    size_t& next = next_rung_[run];
    for (;;) {
      double rung = static_cast<double>(spec_.grace_steps) * std::pow(spec_.reduction_factor, static_cast<double>(next));
      if (rung > 1e15 || static_cast<double>(step) < rung) return "";
      const int64_t rung_step = static_cast<int64_t>(std::llround(rung));
      if (spec_.max_steps > 0 && rung_step >= spec_.max_steps) return "";
      if (rungs_.size() <= next) rungs_.resize(next + 1);
      std::vector<double>& rec = rungs_[next];
      double value = std::isfinite(loss) ? loss : INFINITY;
      rec.push_back(value);
      ++next;
      const size_t n = rec.size();
      if (static_cast<double>(n) < spec_.reduction_factor) continue;
      std::vector<double> sorted = rec;
      std::sort(sorted.begin(), sorted.end());
      size_t keep = std::max<size_t>(1, static_cast<size_t>(std::floor(static_cast<double>(n) / spec_.reduction_factor)));
      double cutoff = sorted[keep - 1];
      if (value > cutoff) {
        return Format("ASHA at rung {} (step {}): loss {} is not among the best {} of {} (cutoff {})", next - 1,
                      rung_step, value, keep, n, cutoff);
      }
    }
  }
  void Completed(const std::string&, const Curve&) override {}

 private:
  EarlyStopSpec spec_;
  std::map<std::string, size_t> next_rung_;
  std::vector<std::vector<double>> rungs_;
};

}  // namespace

std::unique_ptr<EarlyStopper> MakeEarlyStopper(const EarlyStopSpec& spec) {
  switch (spec.rule) {
    case StopRule::kNone: return nullptr;
    case StopRule::kMedian: return std::make_unique<MedianStopper>(spec);
    case StopRule::kAsha: return std::make_unique<AshaStopper>(spec);
  }
  return nullptr;
}

}  // namespace zerorun::experiments

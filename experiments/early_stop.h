// Early stopping of runs from their intermediate losses (the trainer's progress lines).
//
// Median stopping (Golovin et al., "Google Vizier", 2017): at step s >= grace_steps, a run whose best
// loss so far is worse than the median, over the completed runs, of their mean loss up to step s is
// stopped (once min_trials runs have completed).
// ASHA (Li et al., "asynchronous successive halving", 2018), stopping form: rungs at
// r_k = grace_steps * eta^k (below max_steps when given); a run reaching rung k records its loss
// there, and once the rung holds at least eta records the run continues only if its loss is among
// the best floor(n / eta) of them.
// Decisions depend only on the order of the reports, so a sweep run one trial at a time decides the
// same way every time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "zerorun/experiments/spec.h"

namespace zerorun::experiments {

using Curve = std::vector<std::pair<int64_t, double>>;  // (step, loss), steps increasing

class EarlyStopper {
 public:
  virtual ~EarlyStopper() = default;
  // A run reports its loss at `step`; returns a reason to stop it, or "" to let it go on.
  virtual std::string Report(const std::string& run, int64_t step, double loss) = 0;
  // A run finished normally with this curve (a stopped or failed run is not reported here).
  virtual void Completed(const std::string& run, const Curve& curve) = 0;
};

// nullptr for StopRule::kNone.
std::unique_ptr<EarlyStopper> MakeEarlyStopper(const EarlyStopSpec& spec);

}  // namespace zerorun::experiments

// Search strategies: which point of the search space trial i evaluates. Grid enumerates the
// product of the parameters' values (the last parameter varies fastest); random samples each
// parameter independently from a generator seeded by (sweep seed, trial index), so trial i's point
// never depends on what ran before; TPE (the tree-structured Parzen estimator of Bergstra et al.,
// 2011) splits the finished trials into the best `gamma` fraction and the rest, models each
// parameter's density in both groups with a Parzen window (one Gaussian per observation plus a
// wide prior), and picks, among candidates drawn from the good density, the one with the largest
// ratio good/bad.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/experiments/spec.h"

namespace zerorun::experiments {

// One parameter's value in a trial.
struct ParamValue {
  std::string json;       // as written into the config / the flag's value
  double number = 0;      // its numeric value (choices: the choice's number, or its index when not a number)
  double internal = 0;    // the search coordinate: the value, its log (log ranges), or the choice index
};
using Point = std::vector<ParamValue>;  // aligned with SweepSpec::params (derived entries filled by the sweep)

struct Observation {
  Point point;
  double loss = 0;  // the objective, minimised (a maximised objective is negated)
};

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  // How many trials the strategy proposes (grid: the grid's size, capped by `trials` when given).
  virtual int64_t NumTrials() const = 0;
  // The point of trial `index`. `history`: the finished trials (in trial order).
  virtual Point Suggest(int64_t index, const std::vector<Observation>& history) = 0;
};

std::unique_ptr<SearchStrategy> MakeSearchStrategy(const SweepSpec& spec);

// The grid's size (product of the sampled parameters' value counts); throws InvalidArgument past 10^7.
int64_t GridSize(const SweepSpec& spec);

// The value a sampled parameter takes at search coordinate `internal` (clamped into its range).
ParamValue ValueAt(const ParamSpec& p, double internal);
// The JSON text of a number (integers without a fraction, others as short as round-trips).
std::string NumberJson(double x);

}  // namespace zerorun::experiments

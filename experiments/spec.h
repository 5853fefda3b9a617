// A sweep's specification (docs/experiments.md "The spec"): a base DeepSpeed config, the search space
// over config keys (by JSON path) and trainer flags, the strategy, the objective and early stopping.
// Parsing is strict: an unknown key is an error with a "did you mean", and every error names the spec
// file and the key's place ("sweep.json: params.lr.log_uniform: ...").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zerorun::experiments {

enum class ParamKind { kChoices, kUniform, kLogUniform, kInt, kExpr };

// One swept (or derived) value. Exactly one of `path` and `flag` is set.
struct ParamSpec {
  std::string name;
  std::string path;  // JSON path into the config, e.g. "optimizer.params.betas[1]"
  std::string flag;  // a trainer flag, e.g. "--n_layer" (true: the flag alone; false: omitted)
  ParamKind kind = ParamKind::kChoices;
  std::vector<std::string> choices;  // kChoices: each value as JSON text
  double lo = 0, hi = 0;             // kUniform / kLogUniform / kInt bounds (inclusive)
  bool log = false;                  // kInt: sample log-uniformly
  int64_t grid_points = 0;           // ranges in a grid search: evenly spaced points (kInt: 0 = every integer)
  std::string expr;                  // kExpr: the formula (experiments/expr.h)
  bool Sampled() const { return kind != ParamKind::kExpr; }
};

enum class Strategy { kGrid, kRandom, kTpe };

// What a run is scored by, read from its summary (rank 0's).
struct ObjectiveSpec {
  std::string metric = "final_loss";  // final_loss | best_loss | mean_last_k | tokens_per_second | summary.<key>
  int64_t k = 10;                     // mean_last_k: the last k entries of `losses`
  bool maximize = false;              // default: minimise (maximise for tokens_per_second)
};

enum class StopRule { kNone, kMedian, kAsha };

// Early stopping on the intermediate losses of the trainer's progress lines ("step N/M | loss X").
struct EarlyStopSpec {
  StopRule rule = StopRule::kNone;
  int64_t grace_steps = 10;       // no decision before this step (ASHA: the first rung)
  double reduction_factor = 3;    // ASHA: rungs at grace * eta^k, keeps the best 1/eta at each
  int64_t max_steps = 0;          // ASHA: no rung at or beyond it (0: no limit)
  int64_t min_trials = 3;         // median: completed runs needed before stopping anything
};

struct TpeSpec {
  int64_t startup_trials = 8;  // random points before the model is used
  int64_t candidates = 24;     // samples drawn from the good density per parameter
  double gamma = 0.25;         // fraction of the observations that count as good
};

struct SweepSpec {
  std::string source;                       // the spec file (for messages)
  std::string base_config;                  // the base DeepSpeed config as JSON text ("{}" when none)
  std::string base_config_origin;           // its file, or "inline"
  std::vector<std::string> command;         // the trainer command (default: zerorun-train)
  std::vector<std::string> extra_args;      // appended to every trial's command
  std::string seed_flag = "--seed";         // "" : no seed passed
  int64_t world_size = 1;                   // ranks per trial (batch arithmetic of derived values)
  Strategy strategy = Strategy::kRandom;
  int64_t trials = 0;                       // points to evaluate (grid: 0 = the whole grid)
  uint64_t seed = 0;                        // sampling seed and the base of the trial seeds
  int64_t repeats = 1;                      // runs per point (different seeds); the objective is their mean
  int64_t parallel = 0;                     // runs at once (0: cores / world_size)
  double trial_timeout_s = 0;               // a run taking longer fails (0: no limit)
  int64_t stop_after_no_improvement = 0;    // end the sweep after N finished trials without a new best (0: never)
  ObjectiveSpec objective;
  EarlyStopSpec early_stopping;
  TpeSpec tpe;
  std::vector<ParamSpec> params;            // in the spec's order (the grid's order)
  std::map<std::string, double> constants;  // names usable in derived values
  std::string canonical;                    // what must match when a results directory is resumed
};

// Parses the spec in `text`; `source` names it in errors and relative base_config paths resolve
// against its directory. Throws InvalidArgument.
SweepSpec ParseSweepSpec(const std::string& text, const std::string& source);
SweepSpec LoadSweepSpec(const std::string& path);

const char* StrategyName(Strategy s);

}  // namespace zerorun::experiments

// Running a sweep (docs/experiments.md): trials proposed by the strategy, each run as a trainer
// process with its own config, seed, log and summary, up to `parallel` at once; early stopping on the
// runs' progress lines; results written after every trial so a stopped sweep resumes where it was.
//
// Results directory:
//   sweep.json                the spec as run (a resume must match it, trial count aside)
//   trials/NNNN/params.json   the trial's point (and flags), written before it runs
//   trials/NNNN/config.json   its DeepSpeed config
//   trials/NNNN/runR/         log.txt, summary.0.json (rank 0), metrics/ (csv_monitor), run.json
//   trials/NNNN/result.json   the finished trial: status, reason, objective, runs and curves
//   results.csv, results.jsonl  every finished trial, best first; best_config.json, best.json
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "zerorun/experiments/early_stop.h"
#include "zerorun/experiments/search.h"
#include "zerorun/experiments/spec.h"

namespace zerorun::experiments {

// How a run (and a trial) ended. Ordered as the results table ranks them.
enum class RunStatus { kOk, kStopped, kDiverged, kFailed };
const char* RunStatusName(RunStatus s);

struct RunRecord {
  uint64_t seed = 0;
  RunStatus status = RunStatus::kFailed;
  std::string reason;            // why it is not ok ("" when ok)
  double objective = 0;          // NaN when there is none
  Curve curve;                   // (step, loss): the summary's losses, or the progress lines when stopped
  double tokens_per_second = 0;  // from the summary (0 when none)
  double wall_seconds = 0;       // as the sweep measured it
};

struct TrialRecord {
  int64_t id = 0;
  Point point;                   // every parameter (derived ones included)
  std::vector<std::string> flags;
  RunStatus status = RunStatus::kFailed;
  std::string reason;
  double objective = 0;          // mean over the runs that have one; NaN when none has
  std::vector<RunRecord> runs;
  bool reused = false;           // loaded from an earlier invocation
};

struct SweepOptions {
  std::string out_dir;                      // the results directory (created)
  std::string trials_dir;                   // where the trials go ("": out_dir/trials)
  std::string default_trainer;              // used when the spec has no "command"
  int64_t cores = 0;                        // 0: the machine's
  const std::atomic<bool>* interrupt = nullptr;  // set: stop the runs, keep what finished, return
  std::function<void(const std::string&)> log;   // one line per event (nullptr: stdout)
  int64_t poll_ms = 20;
};

struct SweepOutcome {
  std::vector<TrialRecord> trials;  // sorted as results.csv
  int64_t ran = 0;                  // runs started by this invocation
  bool interrupted = false;
  int64_t best = -1;                // index into trials of the best ok trial, -1 when none
};

// Throws InvalidArgument for a spec the base config cannot take (a path that cannot be set, a
// derived value that does not evaluate) before any trial runs, and for a results directory made by
// another spec; IoError when the directory cannot be written.
SweepOutcome RunSweep(const SweepSpec& spec, const SweepOptions& opts);

// The trial's config and flags for `point` (derived values filled in); exposed for tests.
struct TrialSetup {
  std::string config_json;          // pretty-printed
  std::vector<std::string> flags;
  Point point;                      // with derived values
};
TrialSetup MakeTrialSetup(const SweepSpec& spec, const Point& sampled);

// Reads the results directory's finished trials (for reports); sorted as results.csv.
std::vector<TrialRecord> LoadSweepResults(const SweepSpec& spec, const std::string& out_dir,
                                          const std::string& trials_dir = "");

}  // namespace zerorun::experiments

// Loss-spike protection, the judging half: keeps running statistics of the last `window` accepted
// steps' loss and global gradient norm and calls a step a spike when either is more than `threshold`
// standard deviations above its window's mean (z-score), or is not finite. The rollback itself (load
// the last checkpoint, skip the offending batches) is the training loop's: zerorun-train does it
// (docs/checkpoint.md, "Loss-spike rollback").
//
// Deterministic: the verdict is a pure function of the accepted history, so every rank of a job (which
// all see the same all-reduced loss and global norm) decides the same, and a run resumed from a
// checkpoint that stored the history (ToJson / FromJson) decides as the uninterrupted one.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

namespace zerorun::runtime {

struct SpikeGuardOptions {
  double threshold = 0;     // z-score above the window's mean that makes a spike (> 0)
  int64_t window = 20;      // accepted steps the statistics cover (>= 2); no z-score verdict before it is full
  // The standard deviation used is at least this fraction of |mean|, so that a nearly flat series
  // does not turn rounding noise into spikes.
  double min_relative_std = 1e-3;
};

struct SpikeVerdict {
  bool spike = false;
  std::string metric;  // "loss" or "grad_norm" (the first that spiked)
  double value = 0, mean = 0, stddev = 0;
  double zscore = 0;   // (value - mean) / stddev; +inf for a non-finite value
  std::string Describe() const;  // "loss 4.1 is 17.3 sigma above the window's mean 1.2 (sd 0.168)"
};

class SpikeGuard {
 public:
  // Throws InvalidArgument for threshold <= 0 or window < 2.
  explicit SpikeGuard(const SpikeGuardOptions& options);

  // Judges a step's mean loss and global gradient norm (grad_norm < 0: not computed, not judged).
  SpikeVerdict Judge(double loss, double grad_norm) const;
  // Adds an accepted step (global step number `step`, increasing) to the window.
  void Accept(int64_t step, double loss, double grad_norm);
  int64_t accepted() const { return static_cast<int64_t>(history_.size()); }
  bool full() const { return accepted() >= options_.window; }
  const SpikeGuardOptions& options() const { return options_; }

  // The window as JSON ({"steps": [...], "loss": [...], "grad_norm": [...]}; doubles round-trip
  // exactly) for a checkpoint's client state, and back: a rollback to (or a resume from) a checkpoint
  // restores the window as it was when that checkpoint was saved. FromJson throws CheckpointError naming
  // `source` and the JSON path for anything malformed (it replaces the window only when all is valid).
  std::string ToJson() const;
  void FromJson(const std::string& json, const std::string& source);
  // The same inside a checkpoint's client state: {"spike_guard": <ToJson()>}; FromClientState restores
  // the window from its "spike_guard" member and returns true, or, when there is none (a checkpoint
  // saved without a guard), empties the window and returns false.
  std::string ToClientState() const;
  bool FromClientState(const std::string& client_state_json, const std::string& source);

 private:
  struct Entry {
    int64_t step;
    double loss, grad_norm;
  };
  SpikeVerdict JudgeOne(const char* metric, double value, double Entry::*field) const;

  SpikeGuardOptions options_;
  std::deque<Entry> history_;  // at most `window` entries, oldest first
};

}  // namespace zerorun::runtime

// The non-tensor step state a checkpoint carries so a run continues bit for bit: engine counters,
// the loss scaler (scale, iteration, last overflow, hysteresis left), the LR scheduler, the data
// sampler's cursor, the dropout RNG cursors, and the optimizer's scalars (step counts and the
// hyper-parameters schedulers change). Serialised as the "state" object of manifest.json; every
// number round-trips exactly (integers as JSON integers, doubles in RapidJSON's shortest round-trip
// form, parsed at full precision; non-finite doubles are refused).
//
// Capture*/Restore* move each piece between its live object and its saved form. Restore* check that
// the saved piece fits the object (same scheduler type, same sampler data and seed, same module tree)
// and throw CheckpointError naming what differs; the live object is unchanged then.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "zerorun/runtime/data/sampler.h"
#include "zerorun/runtime/loss_scaler.h"
#include "zerorun/runtime/lr_schedules.h"
#include "zerorun/runtime/nn/module.h"

namespace zerorun::runtime {

struct LossScalerCheckpoint {
  bool dynamic = true;
  LossScaler::State state;
};

struct LrSchedulerCheckpoint {
  std::string type;                   // "WarmupLR", ... (must match on restore)
  int64_t last_batch_iteration = -1;  // DeepSpeed's whole scheduler state
};

struct SamplerCheckpoint {
  data::SamplerCursor cursor;  // the next batch (the same on every data-parallel rank)
  int64_t batch_size = 0;      // B per rank
  int64_t seq_len = 0;         // T
  int world_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = true;
  int64_t num_windows = 0;     // fingerprint of the dataset at this T
};

struct RngCheckpoint {
  uint64_t seed = 0;
  // rng_calls() of every module, by path ("" is the root), in pre-order.
  std::vector<std::pair<std::string, uint64_t>> calls;
};

struct TrainingState {
  // Engine counters (DeepSpeed's names).
  int64_t global_steps = 0;
  int64_t global_samples = 0;
  int64_t micro_steps = 0;
  int64_t skipped_steps = 0;
  std::optional<LossScalerCheckpoint> loss_scaler;
  std::optional<LrSchedulerCheckpoint> lr_scheduler;
  std::optional<SamplerCheckpoint> sampler;
  std::optional<RngCheckpoint> rng;
  // Optimizer::State::scalars ("group0.step", "group0.lr", ...), in order.
  std::vector<std::pair<std::string, double>> optimizer_scalars;

  friend bool operator==(const TrainingState&, const TrainingState&);
};

// InvalidArgument naming the field for a non-finite double or an empty or duplicate name.
std::string TrainingStateToJson(const TrainingState& state);
// CheckpointError "<source>: state.<path>: ..." for anything malformed.
TrainingState TrainingStateFromJson(const std::string& json, const std::string& source);

LossScalerCheckpoint CaptureLossScaler(const LossScaler& scaler);
// CheckpointError when the saved scaler was dynamic and this one is static or vice versa.
void RestoreLossScaler(LossScaler& scaler, const LossScalerCheckpoint& saved);

LrSchedulerCheckpoint CaptureLrScheduler(const LrScheduler& scheduler);
// Sets the iteration and writes its LRs into the optimizer; CheckpointError for another type.
void RestoreLrScheduler(LrScheduler& scheduler, const LrSchedulerCheckpoint& saved);

SamplerCheckpoint CaptureSampler(const data::DistributedSampler& sampler);
// Continues exactly after the last window consumed by the saving run. With the same per-step global
// batch (batch_size × world_size) the cursor is taken as is; otherwise, when the windows consumed so
// far (cursor.batch × B × W of this epoch's order) are a whole number of the new sampler's global
// batches, the cursor is converted (an epoch that is already used up moves to the next epoch), so a
// different world size resumes without replaying or skipping a window. CheckpointError naming the
// field when the seed, shuffle, seq_len or dataset (num_windows) differ, or the position falls
// inside a new global batch.
void RestoreSampler(data::DistributedSampler& sampler, const SamplerCheckpoint& saved);

RngCheckpoint CaptureRng(nn::Module& root);
// Sets the seed and every module's call counter; CheckpointError naming the first module path that
// is in one tree and not the other.
void RestoreRng(nn::Module& root, const RngCheckpoint& saved);

}  // namespace zerorun::runtime

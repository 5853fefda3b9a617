// The machine-readable summary of a training run: one JSON file per rank, written by zerorun-train
// (`--summary PATH`, `{rank}` in PATH replaced by the rank). Keys are part of the contract tests and
// scripts rely on; docs/train.md lists them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "zerorun/core/memory.h"

namespace zerorun::runtime {

struct CollectiveBytes {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  double seconds = 0;  // time this rank's communicator spent executing these calls (OpStats::total_time_s)
};

// A loss-spike rollback (zerorun-train --spike_threshold): step `step` spiked, the run went back to the
// checkpoint of `restored_step` and never trains on this rank's batches of that step again.
struct SpikeRollback {
  int64_t step = 0;
  int64_t restored_step = 0;
  std::string metric;                  // "loss" or "grad_norm"
  double value = 0, mean = 0, zscore = 0;  // the spiking value, its window's mean, z-score (inf: not finite)
  std::vector<std::pair<int64_t, int64_t>> skipped_batches;  // this rank's (epoch, batch) of that step
};

struct TrainSummary {
  int rank = 0;
  int world_size = 1;
  int zero_stage = 0;
  std::string dtype = "fp32";           // fp32 | bf16 | fp16
  std::string backend = "local";        // communicator backend
  std::string gemm;                     // the CPU GEMM backend, ISA and threads (kernels::GemmDescription)
  int64_t steps = 0;                    // global steps (including skipped)
  int64_t skipped_steps = 0;
  int64_t global_samples = 0;
  int64_t micro_batch = 0;
  int64_t gradient_accumulation_steps = 1;
  int64_t seq_len = 0;
  std::vector<double> losses;           // mean loss of each global step (over its micro-batches); after a
                                        // rollback, of the steps kept (a rolled-back step's is in rollbacks)
  double final_loss = 0;
  double eval_loss = -1;                // zerorun-train --eval_batches: held-out loss of the final model (-1: none)
  int64_t eval_batches = 0;             // batches it was averaged over (0: no evaluation; eval_loss not written)
  double entropy_floor = -1;            // best achievable loss of the data (synthetic corpus), -1: unknown
  double loss_scale = 1;
  double lr = 0;
  double grad_norm = -1;                // last applied step's global norm (-1: never computed)
  double tokens_per_second = 0;         // this rank's tokens / wall time of the training loop
  double wall_seconds = 0;
  // zerorun-train --profile_window A:B: steps A..B alone (0: no window; the keys are not written).
  int64_t window_first_step = 0, window_last_step = 0;
  double window_tokens_per_second = 0;  // this rank's tokens of those steps / their wall time
  double window_step_ms = 0;            // their mean wall time per step
  int64_t parameters = 0;               // model parameters (unique; tied counted once)
  std::vector<SpikeRollback> rollbacks;  // in order (written only with a spike guard: spike_guard true)
  bool spike_guard = false;
  MemoryAccount::Snapshot memory;       // by category; peak_total
  std::map<std::string, CollectiveBytes> comm_bytes;  // by collective name (all_reduce, ...)
  // The engine's timers, total milliseconds over the run: forward, backward, backward_allreduce (waiting
  // for gradient reductions after backward), step, allgather (waiting for parameter gathers after the
  // update), and any others it keeps.
  std::map<std::string, double> timers_ms;
};

// Serialises the summary (pretty JSON). Memory is written as
// "memory_bytes": {"params": {"current": .., "peak": ..}, ..., "peak_total": .., "current_total": ..};
// collectives as "comm_bytes": {"all_gather": {"calls", "bytes_sent", "bytes_received", "seconds"}, ...};
// timers as "timers_ms": {"forward": .., ...}.
std::string SummaryToJson(const TrainSummary& s);
// Writes it to `path` atomically (temp file + rename). Throws IoError naming the path.
void WriteSummaryJson(const TrainSummary& s, const std::string& path);
// A two-line, human-readable account of this rank's communication per step against the ZeRO paper
// (2Ψ per step for stages 0-2, 3Ψ for stage 3, in units of Ψ(N-1)/N elements of `comm_elem_bytes`
// bytes, by collective) and of how much of the collectives' execution time the engine waited for
// (timers backward_allreduce + allgather + reduce_wait + gather_wait). One rank: says there is none.
std::string CommReport(const TrainSummary& s, int comm_elem_bytes);
// `{rank}` in `pattern` replaced by `rank`.
std::string ExpandRankPattern(const std::string& pattern, int rank);

}  // namespace zerorun::runtime

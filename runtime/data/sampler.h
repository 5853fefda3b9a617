// The distributed sampler: cuts every document of a TokenDataset into windows of T+1 tokens with
// stride T (window i of a document covers tokens [i*T, i*T + T]; windows never cross documents),
// orders all windows by a seeded permutation per epoch (the same on every rank), deals them to ranks
// and packs B windows per batch into inputs (B, T) = window[0..T) and targets (B, T) = window[1..T].
//
// Dealing and batching are DeepSpeed's data loader's (torch DistributedSampler + DataLoader with
// drop_last = dataloader_drop_last): the epoch's order of N windows is padded by repeating it from its
// start to S·W positions, S = ceil(N / W), and rank r takes positions r, r + W, r + 2W, ... (S windows,
// disjoint across ranks unless padding repeats some); its batches are consecutive runs of B of them.
// With drop_last the S mod B windows that do not fill a batch are dropped (floor(S / B) batches);
// without it (DeepSpeed's default) the last batch of the epoch has S mod B rows (ceil(S / B) batches).
// The cursor (epoch, batch) is the whole state: saving it and restoring it into a sampler built with
// the same options gives the identical next batches.
#pragma once

#include <cstdint>
#include <vector>

#include "zerorun/runtime/data/dataset.h"

namespace zerorun::data {

struct SamplerOptions {
  int64_t batch_size = 8;   // B: windows per batch on this rank (the micro-batch)
  int64_t seq_len = 128;    // T
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;        // the shuffle of epoch e is a pure function of (seed, e)
  bool shuffle = true;      // false: windows in dataset order every epoch
  bool drop_last = false;   // DeepSpeed's dataloader_drop_last (default false: keep the partial batch)
};

struct SamplerCursor {
  int64_t epoch = 0;
  int64_t batch = 0;  // next batch within the epoch
};

struct Batch {
  int64_t B = 0, T = 0;          // B: rows of this batch (fewer than the batch size in a last partial one)
  std::vector<int32_t> inputs;   // (B, T)
  std::vector<int32_t> targets;  // (B, T)
  int64_t epoch = 0;
  int64_t index = 0;             // batch index within the epoch
};

class DistributedSampler {
 public:
  // Throws InvalidArgument for bad options and DataError when the dataset has no window of T+1 tokens,
  // or (drop_last) too few for one full batch on every rank — naming the dataset, T and the counts.
  // `dataset` must outlive the sampler.
  DistributedSampler(const TokenDataset& dataset, const SamplerOptions& options);

  int64_t num_windows() const { return static_cast<int64_t>(window_doc_.size()); }
  const SamplerOptions& options() const { return options_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // S = ceil(N / W): the windows this rank is dealt per epoch (padding included).
  int64_t windows_per_rank() const { return windows_per_rank_; }
  // Rows of batch `index` of an epoch: B, or S mod B for the last one without drop_last.
  int64_t BatchRows(int64_t index) const;

  // The next batch; moves the cursor (to the next epoch after the last batch of one).
  Batch Next();
  // Same, into caller buffers inputs (B, T) and targets (B, T); returns the rows written (BatchRows).
  int64_t Next(int32_t* inputs, int32_t* targets);

  SamplerCursor cursor() const { return cursor_; }
  // Throws InvalidArgument if the cursor is out of range for this sampler.
  void set_cursor(const SamplerCursor& cursor);

  // The window ids of batch `index` of `epoch` on this rank, BatchRows(index) of them (tests:
  // disjointness, coverage).
  std::vector<int64_t> WindowsOfBatch(int64_t epoch, int64_t index) const;

 private:
  const std::vector<int64_t>& Order(int64_t epoch) const;

  const TokenDataset& dataset_;
  SamplerOptions options_;
  std::vector<int32_t> window_doc_;      // per window: its document
  std::vector<int64_t> window_start_;    // per window: first token
  int64_t batches_per_epoch_ = 0;
  int64_t windows_per_rank_ = 0;
  SamplerCursor cursor_;
  mutable int64_t order_epoch_ = -1;
  mutable std::vector<int64_t> order_;
};

}  // namespace zerorun::data

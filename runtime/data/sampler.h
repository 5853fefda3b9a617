// The distributed sampler: cuts every document of a TokenDataset into windows of T+1 tokens with
// stride T (window i of a document covers tokens [i*T, i*T + T]; windows never cross documents),
// orders all windows by a seeded permutation per epoch (the same on every rank), deals them to ranks
// (rank r takes positions r, r + W, r + 2W, ... of the epoch's order, so ranks are disjoint), and
// packs B windows per batch into inputs (B, T) = window[0..T) and targets (B, T) = window[1..T].
//
// Every rank gets the same number of batches per epoch: with drop_last the windows that do not fill
// a batch on every rank are dropped; without it the order wraps around to its start to fill the
// last batch (like torch's DistributedSampler padding). The cursor (epoch, batch) is the whole state:
// saving it and restoring it into a sampler built with the same options gives the identical next
// batches.
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
  bool drop_last = true;
};

struct SamplerCursor {
  int64_t epoch = 0;
  int64_t batch = 0;  // next batch within the epoch
};

struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> inputs;   // (B, T)
  std::vector<int32_t> targets;  // (B, T)
  int64_t epoch = 0;
  int64_t index = 0;             // batch index within the epoch
};

class DistributedSampler {
 public:
  // Throws InvalidArgument for bad options and DataError when the dataset has fewer windows than one
  // batch on every rank (naming the dataset, T and the counts). `dataset` must outlive the sampler.
  DistributedSampler(const TokenDataset& dataset, const SamplerOptions& options);

  int64_t num_windows() const { return static_cast<int64_t>(window_doc_.size()); }
  const SamplerOptions& options() const { return options_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  // The next batch; moves the cursor (to the next epoch after the last batch of one).
  Batch Next();
  // Same, into caller buffers inputs (B, T) and targets (B, T).
  void Next(int32_t* inputs, int32_t* targets);

  SamplerCursor cursor() const { return cursor_; }
  // Throws InvalidArgument if the cursor is out of range for this sampler.
  void set_cursor(const SamplerCursor& cursor);

  // The window ids of batch `index` of `epoch` on this rank (tests: disjointness, coverage).
  std::vector<int64_t> WindowsOfBatch(int64_t epoch, int64_t index) const;

 private:
  const std::vector<int64_t>& Order(int64_t epoch) const;

  const TokenDataset& dataset_;
  SamplerOptions options_;
  std::vector<int32_t> window_doc_;      // per window: its document
  std::vector<int64_t> window_start_;    // per window: first token
  int64_t batches_per_epoch_ = 0;
  SamplerCursor cursor_;
  mutable int64_t order_epoch_ = -1;
  mutable std::vector<int64_t> order_;
};

}  // namespace zerorun::data

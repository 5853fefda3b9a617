// The distributed window sampler; see sampler.h.
#include "zerorun/runtime/data/sampler.h"

#include <algorithm>
#include <numeric>

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/core/rng.h"

namespace zerorun::data {

DistributedSampler::DistributedSampler(const TokenDataset& dataset, const SamplerOptions& options)
    : dataset_(dataset), options_(options) {
  const SamplerOptions& o = options_;
  if (o.batch_size <= 0) ZR_THROW(InvalidArgument, "data sampler: batch size must be positive, got {}", o.batch_size);
  if (o.seq_len <= 0) ZR_THROW(InvalidArgument, "data sampler: sequence length must be positive, got {}", o.seq_len);
  if (o.world_size <= 0 || o.rank < 0 || o.rank >= o.world_size) {
    ZR_THROW(InvalidArgument, "data sampler: rank {} is not in [0, world_size={})", o.rank, o.world_size);
  }
  const int64_t T = o.seq_len;
  for (int64_t d = 0; d < dataset.num_documents(); ++d) {
    const int64_t n = dataset.document_size(d);
    const int64_t windows = n >= T + 1 ? (n - 1) / T : 0;
    for (int64_t i = 0; i < windows; ++i) {
      window_doc_.push_back(static_cast<int32_t>(d));
      window_start_.push_back(i * T);
    }
  }
  const int64_t N = num_windows();
  const int64_t B = o.batch_size;
  windows_per_rank_ = (N + o.world_size - 1) / o.world_size;
  batches_per_epoch_ = o.drop_last ? windows_per_rank_ / B : (windows_per_rank_ + B - 1) / B;
  if (N == 0 || batches_per_epoch_ == 0) {
    ZR_THROW(DataError,
             "dataset {} ({} tokens) has {} windows of seq_len+1 = {} tokens{}", dataset.description(),
             dataset.total_tokens(), N, T + 1,
             N == 0 ? std::string()
                    : Format(": {} per rank on {} ranks, fewer than one batch of {} (dataloader_drop_last is true)",
                             windows_per_rank_, o.world_size, B));
  }
}

int64_t DistributedSampler::BatchRows(int64_t index) const {
  return std::min(options_.batch_size, windows_per_rank_ - index * options_.batch_size);
}

const std::vector<int64_t>& DistributedSampler::Order(int64_t epoch) const {
  if (order_epoch_ == epoch) return order_;
  const int64_t W = num_windows();
  order_.resize(static_cast<size_t>(W));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (options_.shuffle) {
    // Fisher-Yates with Philox words of (seed, epoch): the same order on every rank.
    Rng rng(options_.seed ^ HashName("zerorun-sampler"), static_cast<uint64_t>(epoch));
    for (int64_t i = W - 1; i > 0; --i) {
      const uint64_t r = (static_cast<uint64_t>(rng.NextU32()) << 32) | rng.NextU32();
      const int64_t j = static_cast<int64_t>(r % static_cast<uint64_t>(i + 1));
      std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
    }
  }
  order_epoch_ = epoch;
  return order_;
}

std::vector<int64_t> DistributedSampler::WindowsOfBatch(int64_t epoch, int64_t index) const {
  ZR_CHECK(index >= 0 && index < batches_per_epoch_, "batch {} out of range ({} per epoch)", index, batches_per_epoch_);
  const std::vector<int64_t>& order = Order(epoch);
  const int64_t N = num_windows(), B = options_.batch_size, R = options_.world_size;
  std::vector<int64_t> out(static_cast<size_t>(BatchRows(index)));
  for (size_t b = 0; b < out.size(); ++b) {
    // Position in the padded epoch order (padding repeats the order from its start): this rank's sample
    // index * B + b is position (index * B + b) * R + rank.
    const int64_t pos = (index * B + static_cast<int64_t>(b)) * R + options_.rank;
    out[b] = order[static_cast<size_t>(pos % N)];
  }
  return out;
}

int64_t DistributedSampler::Next(int32_t* inputs, int32_t* targets) {
  const int64_t T = options_.seq_len;
  std::vector<int64_t> windows = WindowsOfBatch(cursor_.epoch, cursor_.batch);
  std::vector<int32_t> buf(static_cast<size_t>(T + 1));
  for (size_t b = 0; b < windows.size(); ++b) {
    const int64_t w = windows[b];
    dataset_.Read(window_doc_[static_cast<size_t>(w)], window_start_[static_cast<size_t>(w)], T + 1, buf.data());
    std::copy_n(buf.data(), T, inputs + b * T);
    std::copy_n(buf.data() + 1, T, targets + b * T);
  }
  if (++cursor_.batch == batches_per_epoch_) {
    cursor_.batch = 0;
    ++cursor_.epoch;
  }
  return static_cast<int64_t>(windows.size());
}

Batch DistributedSampler::Next() {
  Batch b;
  b.B = BatchRows(cursor_.batch);
  b.T = options_.seq_len;
  b.epoch = cursor_.epoch;
  b.index = cursor_.batch;
  b.inputs.resize(static_cast<size_t>(b.B * b.T));
  b.targets.resize(b.inputs.size());
  Next(b.inputs.data(), b.targets.data());
  return b;
}

void DistributedSampler::set_cursor(const SamplerCursor& c) {
  if (c.epoch < 0 || c.batch < 0 || c.batch >= batches_per_epoch_) {
    ZR_THROW(InvalidArgument, "data sampler: cursor (epoch {}, batch {}) is out of range ({} batches per epoch)",
             c.epoch, c.batch, batches_per_epoch_);
  }
  cursor_ = c;
}

}  // namespace zerorun::data

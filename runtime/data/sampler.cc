// The distributed window sampler; see sampler.h.
#include "zerorun/runtime/data/sampler.h"

#include <algorithm>
#include <numeric>

#include "zerorun/core/error.h"
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
  const int64_t W = num_windows();
  const int64_t per_step = o.batch_size * o.world_size;
  batches_per_epoch_ = o.drop_last ? W / per_step : (W + per_step - 1) / per_step;
  if (batches_per_epoch_ == 0 || (!o.drop_last && W == 0)) {
    ZR_THROW(DataError,
             "dataset {} ({} tokens) has {} windows of seq_len+1 = {} tokens, fewer than one batch on every rank "
             "(batch_size {} x world_size {} = {})",
             dataset.description(), dataset.total_tokens(), W, T + 1, o.batch_size, o.world_size, per_step);
  }
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
  const int64_t W = num_windows(), B = options_.batch_size, R = options_.world_size;
  std::vector<int64_t> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    // Position in the epoch order: batch-major, then rank, then the row within the batch.
    const int64_t pos = (index * B + b) * R + options_.rank;
    out[static_cast<size_t>(b)] = order[static_cast<size_t>(pos % W)];
  }
  return out;
}

void DistributedSampler::Next(int32_t* inputs, int32_t* targets) {
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
}

Batch DistributedSampler::Next() {
  Batch b;
  b.B = options_.batch_size;
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

// MakeStrategy (the one place that chooses by stage) and what both strategies share: the partitioned
// optimizer, overflow and global-norm agreement.
#include "zerorun/zero/strategy.h"

#include <algorithm>
#include <map>

#include "zerorun/core/async_copy.h"
#include "zerorun/core/error.h"
#include "zerorun/zero/strategy_common.h"

namespace zerorun::zero {

std::unique_ptr<Strategy> MakeStrategy(const StrategyOptions& options, std::vector<ParamSpec> params,
                                       ParamHost& host, UpdateRule& rule, comm::Communicator& comm, Timers& timers) {
  if (options.stage < 0 || options.stage > 3) {
    ZR_THROW(InvalidArgument, "zero_optimization.stage must be 0-3, got {}", options.stage);
  }
  if (options.reduce_bucket_numel < 1) {
    ZR_THROW(InvalidArgument, "zero_optimization.reduce_bucket_size must be >= 1, got {}", options.reduce_bucket_numel);
  }
  if ((options.stage == 1 || options.stage == 2) && options.allgather_bucket_numel > 0 &&
      options.allgather_bucket_numel % 2 != 0) {
    // The config loader refuses it at stages 1/2; a hand-made Config may not.
    ZR_THROW(ConfigError, "zero_optimization.allgather_bucket_size must be a multiple of nccl_start_alignment_factor "
             "(2); found {}", options.allgather_bucket_numel);
  }
  return options.stage == 3 ? MakeShardedStrategy(options, std::move(params), host, rule, comm, timers)
                            : MakeFlatStrategy(options, std::move(params), host, rule, comm, timers);
}

PartitionedStrategy::PartitionedStrategy(const StrategyOptions& options, std::vector<ParamSpec> params,
                                         ParamHost& host, UpdateRule& rule, comm::Communicator& comm, Timers& timers)
    : opt_(options),
      params_(std::move(params)),
      host_(host),
      rule_(rule),
      comm_(comm),
      timers_(timers),
      queue_(comm, {options.comm_dtype, options.average, options.prescale, options.predivide, options.synchronous}) {
  // Trainable parameters come first, group by group, each group in index order.
  bool frozen_seen = false;
  for (size_t id = 0; id < params_.size(); ++id) {
    const ParamSpec& p = params_[id];
    if (!p.trainable()) {
      frozen_seen = true;
      continue;
    }
    ZR_CHECK(!frozen_seen, "parameter {} ({}) is trainable but follows a frozen one", id, p.name);
    if (static_cast<size_t>(p.group) == group_ids_.size()) group_ids_.emplace_back();
    ZR_CHECK(static_cast<size_t>(p.group) + 1 == group_ids_.size() &&
                 static_cast<size_t>(p.index) == group_ids_.back().size(),
             "parameter {} ({}): group {} index {} out of order", id, p.name, p.group, p.index);
    group_ids_.back().push_back(static_cast<int>(id));
  }
}

void PartitionedStrategy::BuildOptimizer(std::vector<PartitionGroupSpec> groups, bool partitioned,
                                         ShardStore* shards) {
  partitioned_ = partitioned;
  PartitionOptimizerOptions po;
  po.grad_dtype = opt_.grad_dtype;
  po.param_dtype = opt_.param_dtype;
  // fp32 training: the parameters are the master, unless the state or the parameters are offloaded.
  po.master_copy = opt_.param_dtype != DType::kF32 || opt_.offload_optimizer || shards != nullptr;
  po.shard_store = shards;
  po.sub_group_size = opt_.sub_group_size;
  po.norm_comm = partitioned ? &comm_ : nullptr;
  po.device = opt_.device;
  po.grads_on_host = opt_.offload_optimizer;  // PartitionGradBuffer
  po.store_factory = opt_.state_store;
  optimizer_ = std::make_unique<PartitionOptimizer>(std::move(groups), rule_, po);
  optimizer_->Initialize();
}

Tensor PartitionedStrategy::PartitionGradBuffer(int64_t numel) const {
  if (!opt_.offload_optimizer) return Tensor::Zeros({numel}, opt_.grad_dtype, opt_.device, MemCategory::kGrads);
  Tensor t = PinnedHostTensor({numel}, opt_.grad_dtype, opt_.device);
  t.Zero();
  return t;
}

bool PartitionedStrategy::AnyNonFinite(bool scan) {
  int32_t any_bad = scan && !optimizer_->LocalAllFinite() ? 1 : 0;
  if (comm_.size() > 1) comm_.AllReduce(&any_bad, 1, DType::kI32, comm::ReduceOp::kMax).Wait();
  return any_bad != 0;
}

std::vector<double> PartitionedStrategy::GroupSumSquares() {
  std::vector<double> sums = optimizer_->LocalSumSquares();
  if (partitioned_ && comm_.size() > 1) {
    comm_.AllReduce(sums.data(), sums.size(), DType::kF64, comm::ReduceOp::kSum).Wait();
  }
  return sums;
}

std::vector<GradStats> PartitionedStrategy::GradStatistics() {
  std::vector<GradStats> stats = optimizer_->LocalGradStats();
  if (!partitioned_ || comm_.size() == 1) return stats;  // stage 0: every rank has every element
  // One sum over the counts and sums of squares (exact in fp64 below 2^53), one max over max_abs.
  constexpr size_t kSums = 6;
  std::vector<double> sums(stats.size() * kSums), maxes(stats.size());
  for (size_t g = 0; g < stats.size(); ++g) {
    const GradStats& s = stats[g];
    double* d = sums.data() + g * kSums;
    d[0] = static_cast<double>(s.numel);
    d[1] = static_cast<double>(s.zeros);
    d[2] = static_cast<double>(s.nonfinite);
    d[3] = static_cast<double>(s.fp16_underflow);
    d[4] = static_cast<double>(s.fp16_overflow);
    d[5] = s.sum_squares;
    maxes[g] = s.max_abs;
  }
  comm::Work a = comm_.AllReduce(sums.data(), sums.size(), DType::kF64, comm::ReduceOp::kSum);
  comm::Work b = comm_.AllReduce(maxes.data(), maxes.size(), DType::kF64, comm::ReduceOp::kMax);
  a.Wait();
  b.Wait();
  for (size_t g = 0; g < stats.size(); ++g) {
    GradStats& s = stats[g];
    const double* d = sums.data() + g * kSums;
    s.numel = static_cast<int64_t>(d[0]);
    s.zeros = static_cast<int64_t>(d[1]);
    s.nonfinite = static_cast<int64_t>(d[2]);
    s.fp16_underflow = static_cast<int64_t>(d[3]);
    s.fp16_overflow = static_cast<int64_t>(d[4]);
    s.sum_squares = d[5];
    s.max_abs = maxes[g];
  }
  return stats;
}

NonFiniteReport PartitionedStrategy::ReportNonFinite(const std::vector<int64_t>& priority) {
  ZR_CHECK(priority.size() == params_.size(), "{} priorities for {} parameters", priority.size(), params_.size());
  auto before = [&](int a, int b) {
    const int64_t pa = priority[static_cast<size_t>(a)], pb = priority[static_cast<size_t>(b)];
    return pa != pb ? pa < pb : a < b;
  };
  // This rank's parameters with a non-finite element in its part of their gradient, first by priority.
  std::vector<int> mine;
  for (auto [group, tensor] : optimizer_->NonFiniteTensors(params_.size())) {
    mine.push_back(group_ids_[static_cast<size_t>(group)][static_cast<size_t>(tensor)]);
  }
  std::sort(mine.begin(), mine.end(), before);
  // The record every rank sends: [count, first ids..., -1 padding].
  constexpr size_t kRecord = 1 + kMaxNonFiniteReported;
  std::vector<int64_t> record(kRecord, -1);
  record[0] = static_cast<int64_t>(mine.size());
  for (size_t i = 0; i < mine.size() && i < kMaxNonFiniteReported; ++i) record[1 + i] = mine[i];
  const int world = comm_.size();
  std::vector<int64_t> all(kRecord * static_cast<size_t>(world));
  if (world > 1) {
    comm_.AllGather(record.data(), all.data(), kRecord, DType::kI64).Wait();
  } else {
    all = record;
  }
  NonFiniteReport out;
  std::map<int, std::vector<int>> ranks_of;
  for (int r = 0; r < world; ++r) {
    const int64_t* rec = all.data() + kRecord * static_cast<size_t>(r);
    if (rec[0] > 0) out.ranks.push_back(r);
    for (size_t i = 1; i < kRecord && rec[i] >= 0; ++i) ranks_of[static_cast<int>(rec[i])].push_back(r);
    out.count_by_rank.push_back(rec[0]);
  }
  for (auto& [id, ranks] : ranks_of) out.params.push_back({id, std::move(ranks)});
  std::sort(out.params.begin(), out.params.end(),
            [&](const NonFiniteParam& a, const NonFiniteParam& b) { return before(a.id, b.id); });
  return out;
}

}  // namespace zerorun::zero

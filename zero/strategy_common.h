// What the flat (stages 0-2) and sharded (stage 3) strategies share: the partitioned optimizer over
// the state store, and the cross-rank agreement of overflow and gradient norms. Internal to zero/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "zerorun/zero/grad_buckets.h"
#include "zerorun/zero/partition_optimizer.h"
#include "zerorun/zero/strategy.h"

namespace zerorun::zero {

class PartitionedStrategy : public Strategy {
 public:
  bool AnyNonFinite(bool scan) override;
  std::vector<double> GroupSumSquares() override;
  std::vector<GradStats> GradStatistics() override;
  NonFiniteReport ReportNonFinite(const std::vector<int64_t>& priority) override;
  StateStore& state_store() override { return optimizer_->store(); }
  std::vector<StateExtent> StateExtents() const override { return extents_; }

 protected:
  PartitionedStrategy(const StrategyOptions& options, std::vector<ParamSpec> params, ParamHost& host,
                      UpdateRule& rule, comm::Communicator& comm, Timers& timers);

  // Builds the optimizer over the derived strategy's groups (one spec per parameter group) and fills
  // the master weights and state. `partitioned`: ranks hold disjoint parts of the gradients, so sums
  // of squares (and Lamb's tensor norms) are all-reduced.
  // `shards`: the shard store segments with a unit write to (stage 3's parameter offload; not owned).
  void BuildOptimizer(std::vector<PartitionGroupSpec> groups, bool partitioned, ShardStore* shards = nullptr);
  // A zeroed buffer for `numel` of this rank's reduced gradients (grad dtype): on the device
  // (MemCategory::kGrads), or with optimizer offload in pinned host memory (kPinned), where the buckets
  // land as they are reduced and the host optimizer reads them (ZeRO-Offload).
  Tensor PartitionGradBuffer(int64_t numel) const;

  StrategyOptions opt_;
  std::vector<ParamSpec> params_;
  std::vector<std::vector<int>> group_ids_;  // [group][index]: parameter id
  ParamHost& host_;
  UpdateRule& rule_;
  comm::Communicator& comm_;
  Timers& timers_;
  // The gradient-bucket path (its packing policies belong to the derived strategy, whose destructor
  // resets it first).
  GradBucketQueue queue_;
  std::unique_ptr<PartitionOptimizer> optimizer_;
  std::vector<StateExtent> extents_;
  bool partitioned_ = false;
};

// The strategies (flat_strategy.cc, sharded_strategy.cc); MakeStrategy picks one.
std::unique_ptr<Strategy> MakeFlatStrategy(const StrategyOptions& options, std::vector<ParamSpec> params,
                                           ParamHost& host, UpdateRule& rule, comm::Communicator& comm, Timers& timers);
std::unique_ptr<Strategy> MakeShardedStrategy(const StrategyOptions& options, std::vector<ParamSpec> params,
                                              ParamHost& host, UpdateRule& rule, comm::Communicator& comm,
                                              Timers& timers);

}  // namespace zerorun::zero

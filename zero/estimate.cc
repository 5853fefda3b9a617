// Memory estimate per rank: closed forms of what the ZeRO strategies allocate (zero/flat_strategy.cc,
// zero/sharded_strategy.cc, zero/grad_buckets.cc, zero/param_coordinator.cc, zero/state_store.cc) and
// DeepSpeed's estimator formulas (reference §5.2).
#include "zerorun/zero/estimate.h"

#include <algorithm>
#include <cctype>

#include "zerorun/core/error.h"
#include "zerorun/zero/partition.h"

namespace zerorun::zero {

std::vector<std::vector<int64_t>> ModelOfParams(int64_t psi, int64_t tensor_numel) {
  if (tensor_numel <= 0 || tensor_numel >= psi) return {{psi}};
  // At most a million tensors (larger ones beyond that), so that any Ψ stays cheap to lay out.
  tensor_numel = std::max(tensor_numel, CeilDiv(psi, 1'000'000));
  std::vector<int64_t> tensors;
  for (int64_t left = psi; left > 0; left -= tensor_numel) tensors.push_back(std::min(left, tensor_numel));
  return {tensors};
}

const char* OffloadTargetName(OffloadTarget t) {
  switch (t) {
    case OffloadTarget::kNone: return "none";
    case OffloadTarget::kCpu: return "cpu";
    case OffloadTarget::kNvme: return "nvme";
  }
  return "?";
}

std::string StageEstimate::Label() const {
  std::string s = "stage " + std::to_string(stage);
  if (offload_optimizer != OffloadTarget::kNone) s += std::string(" + optimizer→") + OffloadTargetName(offload_optimizer);
  if (offload_param != OffloadTarget::kNone) s += std::string(" + params→") + OffloadTargetName(offload_param);
  return s;
}

void ValidateEstimateInput(const EstimateInput& in) {
  if (in.world_size > 100'000'000) ZR_THROW(InvalidArgument, "estimate: world_size {} is too large", in.world_size);
  if (in.world_size < 1) ZR_THROW(InvalidArgument, "estimate: world_size must be >= 1, got {}", in.world_size);
  auto bytes_ok = [](int b) { return b == 2 || b == 4; };
  if (!bytes_ok(in.param_bytes)) ZR_THROW(InvalidArgument, "estimate: param_bytes must be 2 or 4, got {}", in.param_bytes);
  if (!bytes_ok(in.grad_bytes)) ZR_THROW(InvalidArgument, "estimate: grad_bytes must be 2 or 4, got {}", in.grad_bytes);
  if (!bytes_ok(in.comm_bytes)) ZR_THROW(InvalidArgument, "estimate: comm_bytes must be 2 or 4, got {}", in.comm_bytes);
  if (in.optimizer_state_bytes < 0) {
    ZR_THROW(InvalidArgument, "estimate: optimizer_state_bytes must be >= 0, got {}", in.optimizer_state_bytes);
  }
  if (in.largest_layer > kMaxEstimateParams || in.prefetch_numel > kMaxEstimateParams) {
    ZR_THROW(InvalidArgument, "estimate: largest_layer and prefetch must be at most {}", kMaxEstimateParams);
  }
  if (in.largest_layer < 0 || in.prefetch_numel < 0 || in.max_live_numel < 0 || in.persistence_threshold < 0) {
    ZR_THROW(InvalidArgument, "estimate: largest_layer, prefetch, max_live and persistence threshold must be >= 0");
  }
  int64_t total = 0;
  for (size_t g = 0; g < in.groups.size(); ++g) {
    for (int64_t n : in.groups[g]) {
      if (n < 0 || n > kMaxEstimateParams) {
        ZR_THROW(InvalidArgument, "estimate: parameter group {} has a tensor of {} elements (0 to {})", g, n,
                 kMaxEstimateParams);
      }
      total += n;
      if (total > kMaxEstimateParams) break;
    }
  }
  if (total < 1) ZR_THROW(InvalidArgument, "estimate: the model has no parameters");
  // Bytes stay far inside int64 (32 bytes per element at most, padding included).
  if (total > kMaxEstimateParams) {
    ZR_THROW(InvalidArgument, "estimate: {} parameters is more than the supported {}", total, kMaxEstimateParams);
  }
}

namespace {

// The flat layout the engine builds for one group at stages 0-2 (stage 0: buckets unpadded).
FlatGroupLayout FlatLayout(const EstimateInput& in, const std::vector<int64_t>& group, int stage) {
  return LayoutFlatGroup(group, in.world_size, 2, stage >= 1 && in.round_robin, std::max<int64_t>(1, in.reduce_bucket_numel),
                         stage == 0 ? FlatBucketing::kWhole : FlatBucketing::kSplit);
}

}  // namespace

int64_t PaddedNumel(const EstimateInput& in, int stage) {
  const int64_t n = in.world_size;
  int64_t padded = 0;
  for (const auto& group : in.groups) {
    if (stage == 3) {
      for (int64_t t : group) padded += AlignUp(t, n);
    } else {
      padded += FlatLayout(in, group, stage).padded_numel;
    }
  }
  return padded;
}

namespace {

// Stages 0-2: the largest bucket (stage 0: its data, what an all-reduce stages; stages 1/2: padded,
// what a reduce-scatter moves) and the largest tensor (padded to 2N).
struct FlatSizes {
  int64_t largest_bucket = 0;
  int64_t largest_tensor = 0;
};

FlatSizes SizeFlat(const EstimateInput& in, int stage) {
  FlatSizes s;
  for (const auto& group : in.groups) {
    for (const FlatBucket& b : FlatLayout(in, group, stage).buckets) {
      s.largest_bucket = std::max(s.largest_bucket, stage == 0 ? b.data_numel : b.range.size());
    }
    for (int64_t t : group) s.largest_tensor = std::max(s.largest_tensor, AlignUp(t, 2 * in.world_size));
  }
  return s;
}

// Stage 3: padded elements of the tensors that stay whole (≤ persistence threshold), and the largest
// of the others.
struct Stage3Split {
  int64_t persistent_padded = 0;
  int64_t sharded_padded = 0;
  int64_t largest_sharded_padded = 0;
  int64_t largest_padded = 0;  // over every tensor, persistent ones too
  int64_t tensors = 0;
};

Stage3Split SplitStage3(const EstimateInput& in) {
  Stage3Split s;
  for (const auto& group : in.groups) {
    for (int64_t t : group) {
      int64_t p = AlignUp(t, in.world_size);
      s.largest_padded = std::max(s.largest_padded, p);
      ++s.tensors;
      if (t <= in.persistence_threshold) {
        s.persistent_padded += p;
      } else {
        s.sharded_padded += p;
        s.largest_sharded_padded = std::max(s.largest_sharded_padded, p);
      }
    }
  }
  return s;
}

}  // namespace

StageEstimate EstimateStage(const EstimateInput& in, int stage, OffloadTarget offload_optimizer,
                            OffloadTarget offload_param) {
  ValidateEstimateInput(in);
  if (stage < 0 || stage > 3) ZR_THROW(InvalidArgument, "estimate: ZeRO stage must be 0-3, got {}", stage);
  if (offload_optimizer != OffloadTarget::kNone && stage == 0) {
    ZR_THROW(InvalidArgument, "estimate: optimizer offload needs ZeRO stage 1-3");
  }
  if (offload_param != OffloadTarget::kNone && stage != 3) {
    ZR_THROW(InvalidArgument, "estimate: parameter offload needs ZeRO stage 3");
  }
  StageEstimate e;
  e.stage = stage;
  e.offload_optimizer = offload_optimizer;
  e.offload_param = offload_param;

  const int64_t n = in.world_size;
  const int64_t p = in.param_bytes, g = in.grad_bytes, c = in.comm_bytes, k = in.optimizer_state_bytes;
  // fp32 training keeps a separate fp32 master only when the state or the parameters are offloaded.
  const bool master_copy =
      in.param_bytes != 4 || offload_optimizer != OffloadTarget::kNone || offload_param != OffloadTarget::kNone;
  const bool staged = in.comm_bytes != in.grad_bytes && n > 1;  // reduction staged through the comm dtype
  const int64_t pad = PaddedNumel(in, stage);
  const int64_t part = pad / n;  // this rank's partition (stage 3: Σ ceil(numel/N))

  // Partitioned optimizer side (fp32 master and state), own range: the whole buffer at stage 0.
  const int64_t own = stage == 0 ? pad : part;
  e.master_bytes = master_copy ? 4 * own : 0;
  e.optimizer_bytes = k * own;

  // Gradient buckets leave through one queue with at most two in flight (zero/grad_buckets.h).
  constexpr int64_t kInFlight = 2;
  switch (stage) {
    case 0: {
      e.params_bytes = p * pad;
      e.grads_bytes = g * pad;
      // All-reduce in place on the gradient buffer; a different wire dtype stages each bucket in flight.
      e.buckets_peak_bytes = staged ? c * std::min(pad, kInFlight * SizeFlat(in, 0).largest_bucket) : 0;
      break;
    }
    case 1: {
      e.params_bytes = p * pad;
      e.grads_bytes = g * pad;
      // Reduce-scatter in place in the full gradients; a different wire dtype stages each bucket in flight.
      e.buckets_peak_bytes = staged ? c * std::min(pad, kInFlight * SizeFlat(in, 1).largest_bucket) : 0;
      break;
    }
    case 2: {
      e.params_bytes = p * pad;
      e.grads_bytes = g * part;
      // Transient bucket buffers: those being filled — the buckets of the parameters whose gradients
      // are being written (at most L elements, the largest layer with its tied tensors, in buckets that
      // may reach one bucket beyond each end of it), the one waiting for the next layer, and a tied
      // tensor's — and at most two in flight; reduced in place (a wire dtype stages those in flight).
      const FlatSizes s = SizeFlat(in, 2);
      const int64_t layer = in.largest_layer > 0 ? in.largest_layer : s.largest_tensor;
      e.buckets_peak_bytes = g * std::min(pad, layer + (3 + kInFlight) * s.largest_bucket) +
                             (staged ? c * std::min(pad, kInFlight * s.largest_bucket) : 0);
      break;
    }
    case 3: {
      const Stage3Split s = SplitStage3(in);
      e.params_bytes = p * part + p * s.persistent_padded;
      e.grads_bytes = g * part;
      const int64_t layer = in.largest_layer > 0 ? in.largest_layer : s.largest_sharded_padded;
      // Gathered parameters: the module(s) in use plus prefetch, plus what is kept for reuse (up to
      // max_live), never more than the whole model.
      const int64_t ahead = std::max(std::min(in.prefetch_numel, in.max_live_numel),
                                     std::min(in.max_reuse_distance, in.max_live_numel));
      const int64_t live = std::min(s.sharded_padded, layer + ahead);
      e.live_params_peak_bytes = p * live;
      // Parameter offload: each gather in flight (the module's own and the prefetched ones) also holds
      // its shard copied to the device, 1/N of its elements.
      if (offload_param != OffloadTarget::kNone) {
        const int64_t in_flight = std::min(live, layer + std::min(in.prefetch_numel, in.max_live_numel));
        e.live_params_peak_bytes += p * ((in_flight + n - 1) / n);
      }
      // Full gradients (grad dtype): the module in backward plus the open bucket, which is packed once
      // it reaches reduce_bucket_size (so a bucket holds less than B + the largest tensor ≤ B + L);
      // then the packed wire copy of each bucket (reduce-scattered in place) until it completes, at
      // most two buckets at once.
      const int64_t bucket = in.reduce_bucket_numel + layer;
      e.buckets_peak_bytes = g * std::min(pad, layer + in.reduce_bucket_numel) + c * std::min(pad, kInFlight * bucket);
      break;
    }
  }

  // Offload placements.
  if (offload_optimizer != OffloadTarget::kNone) {
    // The partition's reduced gradients land in pinned host memory as the buckets are reduced, where
    // the host optimizer reads them (zero/strategy_common.h PartitionGradBuffer): stages 2/3 keep them
    // only there; stage 1 keeps its full gradients on the device and the host copy besides.
    e.host_bytes += g * own;
    if (stage >= 2) e.grads_bytes -= g * own;
  }
  if (offload_optimizer == OffloadTarget::kCpu) {
    // zerorun (offload/host_state_store.h): fp32 master (also in fp32 training) and state in host
    // buffers.
    e.host_bytes += 4 * own + k * own;
    e.master_bytes = 0;
    e.optimizer_bytes = 0;
  } else if (offload_optimizer == OffloadTarget::kNvme) {
    // zerorun (offload/nvme_state_store.h): master and state of every sub-group in two slots of the
    // swap file (the committed step and the one being written); in host memory only buffer_count
    // buffers of one sub-group each (a sub-group may pass sub_group_size by less than one unit: a
    // bucket slice or a parameter shard). Gradients as with cpu.
    const int64_t per = 4 + k;
    const int64_t sub = std::min(own, std::max<int64_t>(1, in.sub_group_numel));
    const int64_t subs = (own + sub - 1) / sub;
    e.nvme_bytes += 2 * per * own;
    e.host_bytes += per * sub * std::min(std::max<int64_t>(1, in.nvme_buffer_count), std::max<int64_t>(1, subs));
    e.master_bytes = 0;
    e.optimizer_bytes = 0;
  }
  if (offload_param != OffloadTarget::kNone) {
    // zerorun (offload/shard_stores.h): every 16-bit shard off the device (the persistent parameters'
    // gathered values stay); cpu: all of them in host memory; nvme: in the swap file, and in host
    // memory buffer_count buffers of the largest shard each.
    const int64_t moved = p * part;
    e.params_bytes -= moved;
    if (offload_param == OffloadTarget::kCpu) {
      e.host_bytes += moved;
    } else {
      const Stage3Split s = SplitStage3(in);
      e.nvme_bytes += moved;
      e.host_bytes += p * (s.largest_padded / n) * std::min(std::max<int64_t>(1, in.param_buffer_count), s.tensors);
    }
  }
  return e;
}

std::vector<StageEstimate> EstimateAll(const EstimateInput& in) {
  using O = OffloadTarget;
  std::vector<StageEstimate> out;
  for (int s = 0; s <= 3; ++s) out.push_back(EstimateStage(in, s));
  out.push_back(EstimateStage(in, 1, O::kCpu));
  out.push_back(EstimateStage(in, 2, O::kCpu));
  out.push_back(EstimateStage(in, 3, O::kCpu));
  out.push_back(EstimateStage(in, 3, O::kNvme));
  out.push_back(EstimateStage(in, 3, O::kNone, O::kCpu));
  out.push_back(EstimateStage(in, 3, O::kNone, O::kNvme));
  out.push_back(EstimateStage(in, 3, O::kCpu, O::kCpu));
  out.push_back(EstimateStage(in, 3, O::kNvme, O::kNvme));
  return out;
}

int OptimizerStateBytesFor(std::string_view type, bool sgd_momentum) {
  std::string t;
  for (char ch : type) t += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (t == "adam" || t == "adamw" || t == "lamb" || t == "onebitadam" || t == "zerooneadam" || t == "onebitlamb" ||
      t == "fusedadam" || t == "cpuadam") {
    return 8;
  }
  if (t == "lion" || t == "adagrad") return 4;
  if (t == "sgd") return sgd_momentum ? 4 : 0;
  return -1;
}

DeepSpeedEstimate DeepSpeedZero2Estimate(int64_t total_params, int gpus_per_node, int nodes, bool cpu_offload,
                                         double additional_buffer_factor) {
  const double total_gpus = static_cast<double>(gpus_per_node) * nodes;
  const double p = static_cast<double>(total_params);
  DeepSpeedEstimate e;
  if (cpu_offload) {
    e.gpu_bytes = 2 * total_params;
    e.cpu_bytes = static_cast<int64_t>(p * std::max(4.0 * total_gpus, 16.0) * additional_buffer_factor);
  } else {
    e.gpu_bytes = 2 * total_params + static_cast<int64_t>(18.0 * p / total_gpus);
    e.cpu_bytes = static_cast<int64_t>(p * 4.0 * gpus_per_node * additional_buffer_factor);
  }
  return e;
}

DeepSpeedEstimate DeepSpeedZero3Estimate(int64_t total_params, int64_t largest_layer_params, int gpus_per_node,
                                         int nodes, bool cpu_offload, bool cpu_offload_params, bool zero_init,
                                         double additional_buffer_factor) {
  const double total_gpus = static_cast<double>(gpus_per_node) * nodes;
  const double gpus_factor = 1.0 / nodes;
  const double p = static_cast<double>(total_params);
  const int64_t largest_layer_bytes = 4 * largest_layer_params;
  DeepSpeedEstimate e;
  if (cpu_offload) {
    if (cpu_offload_params) {
      e.gpu_bytes = largest_layer_bytes;
      e.cpu_bytes = static_cast<int64_t>(
          p * (zero_init ? 18.0 * gpus_factor : std::max(4.0 * gpus_per_node, 18.0 * gpus_factor)) *
          additional_buffer_factor);
    } else {
      e.gpu_bytes = largest_layer_bytes + static_cast<int64_t>(2.0 * p / total_gpus);
      e.cpu_bytes = static_cast<int64_t>(
          p * (zero_init ? 16.0 * gpus_factor : std::max(4.0 * gpus_per_node, 16.0 * gpus_factor)) *
          additional_buffer_factor);
    }
  } else {
    e.gpu_bytes = largest_layer_bytes + static_cast<int64_t>(18.0 * p / total_gpus);
    e.cpu_bytes = zero_init ? static_cast<int64_t>(static_cast<double>(largest_layer_params) * 4.0 * gpus_per_node *
                                                   additional_buffer_factor)
                            : static_cast<int64_t>(p * 4.0 * gpus_per_node * additional_buffer_factor);
  }
  return e;
}

}  // namespace zerorun::zero

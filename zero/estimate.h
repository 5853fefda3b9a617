// Per-rank memory estimate of ZeRO training: the model states the ZeRO paper predicts (16Ψ, 4Ψ+12Ψ/N,
// 2Ψ+14Ψ/N, 16Ψ/N for mixed-precision Adam), computed with zerorun's own padding and with the transient
// buffers zerorun really allocates (gradient buckets, stage-3 gathered parameters, prefetch and
// coalesced reduce-scatter buffers), plus the offload placements DeepSpeed's estimators describe
// and DeepSpeed's estimator formulas themselves (reference §5.2) as an oracle. Plain numbers in,
// plain numbers out: the CLI (tools/zerorun_config.cc) maps a config onto EstimateInput.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zerorun::zero {

// What is estimated. Sizes are in elements unless named _bytes.
struct EstimateInput {
  // Parameter tensors by parameter group (elements of each tensor), in the group's order. Padding
  // follows the engine: stage 0 pads each group's flat buffer to a multiple of 2N; stages 1/2 cut it
  // into reduce_bucket_numel buckets of whole tensors and pad each bucket to a multiple of 2N (so it
  // splits into N slices, partition.h); stage 3 pads each tensor to a multiple of N. When only Ψ is
  // known use ModelOfParams(Ψ): one group holding one tensor.
  std::vector<std::vector<int64_t>> groups;
  int world_size = 1;              // N, data-parallel ranks
  int param_bytes = 2;             // model dtype: 2 (bf16/fp16) or 4 (fp32; then no separate master copy)
  int grad_bytes = 2;              // gradient accumulation dtype (data_types.grad_accum_dtype)
  int comm_bytes = 2;              // communication_data_type (a reduction staged through it when ≠ grad)
  int optimizer_state_bytes = 8;   // fp32 state bytes per parameter: Adam/Lamb 8, SGD+momentum/Lion/Adagrad 4
  // Stage 3 (zero_optimization.stage3_*): elements.
  int64_t largest_layer = 0;       // L: most parameter elements one module's window holds at once
                                   // (with tied weights include the tied tensor); 0: the largest tensor
  int64_t prefetch_numel = 50'000'000;
  int64_t max_live_numel = 1'000'000'000;
  int64_t persistence_threshold = 100'000;  // tensors with at most this many elements stay whole
  // A released parameter reused within this many fetched elements stays gathered (bounded by
  // max_live_numel), so with DeepSpeed's default (1e9) a small model stays gathered through backward.
  int64_t max_reuse_distance = 1'000'000'000;
  // reduce_bucket_size: the gradient buckets of stages 0-2 (whole tensors up to this many elements);
  // stage 3 holds full gradients until a bucket of this many padded elements is packed.
  int64_t reduce_bucket_numel = 500'000'000;
  // NVMe optimizer offload (offload/nvme_state_store.h): the optimizer's sub-group (sub_group_size)
  // and the host buffers swapping it (offload_optimizer.buffer_count).
  int64_t sub_group_numel = 1'000'000'000;
  int64_t nvme_buffer_count = 4;
  // NVMe parameter offload (offload/shard_stores.h): offload_param.buffer_count buffers, each the
  // largest shard.
  int64_t param_buffer_count = 5;
  bool round_robin = false;  // round_robin_gradients (stages 1/2: the tensor order the buckets are cut in)
};

// A model known only by its size (the CLI's --params P): one group holding one tensor of psi elements,
// or, with tensor_numel > 0 (the CLI's --largest-layer), tensors of tensor_numel elements (the last one
// shorter; at most a million of them), which is what stages 1/2 cut their gradient buckets from.
std::vector<std::vector<int64_t>> ModelOfParams(int64_t psi, int64_t tensor_numel = 0);

enum class OffloadTarget { kNone, kCpu, kNvme };
const char* OffloadTargetName(OffloadTarget t);  // "none", "cpu", "nvme"

// Per-rank bytes of one (stage, offload) choice. Device bytes are on the accelerator (or, for
// zerorun's CPU backend, in the process); host/nvme bytes are what offload would move off it.
struct StageEstimate {
  int stage = 0;
  OffloadTarget offload_optimizer = OffloadTarget::kNone;
  OffloadTarget offload_param = OffloadTarget::kNone;
  // Model states resident on the device between steps (the engine's MemCategory current values).
  int64_t params_bytes = 0;        // 16-bit (or fp32) working parameters, incl. stage-3 persistent ones
  int64_t grads_bytes = 0;
  int64_t master_bytes = 0;        // fp32 master (0 in fp32 training: the parameters are the master)
  int64_t optimizer_bytes = 0;
  // Transient peaks during a step (upper bounds).
  int64_t buckets_peak_bytes = 0;      // gradient reduction buffers (MemCategory buckets)
  int64_t live_params_peak_bytes = 0;  // stage 3: gathered full parameters on top of params_bytes
  // Offloaded.
  int64_t host_bytes = 0;
  int64_t nvme_bytes = 0;
  int64_t ModelStateBytes() const { return params_bytes + grads_bytes + master_bytes + optimizer_bytes; }
  int64_t DevicePeakBytes() const { return ModelStateBytes() + buckets_peak_bytes + live_params_peak_bytes; }
  std::string Label() const;  // "stage 2", "stage 3 + optimizer→cpu + params→nvme", ...
};

// Largest model the estimator takes (keeps every byte count inside int64).
inline constexpr int64_t kMaxEstimateParams = 100'000'000'000'000;  // 1e14

// Checks the input (world_size ≥ 1, Ψ ≤ kMaxEstimateParams, byte sizes, no negative numels, at least one parameter); throws
// zerorun::InvalidArgument naming the field.
void ValidateEstimateInput(const EstimateInput& in);

// One choice. Optimizer offload at stages 1-3 (cpu or nvme: zerorun swaps at stages 1/2 too, which
// DeepSpeed does not), parameter offload only at stage 3 (with or without optimizer offload).
StageEstimate EstimateStage(const EstimateInput& in, int stage, OffloadTarget offload_optimizer = OffloadTarget::kNone,
                            OffloadTarget offload_param = OffloadTarget::kNone);
// Every stage 0-3 without offload, then each offload choice of stages 1-3.
std::vector<StageEstimate> EstimateAll(const EstimateInput& in);

// Total padded elements the engine lays out: stage 0 Σ_groups AlignUp(Σ tensors, 2N); stages 1/2
// Σ_groups Σ_buckets AlignUp(bucket, 2N); stage 3 Σ_tensors AlignUp(numel, N).
int64_t PaddedNumel(const EstimateInput& in, int stage);

// Optimizer state bytes per parameter by DeepSpeed optimizer type (case-insensitive: Adam, AdamW,
// Lamb, Lion, SGD, Adagrad, OneBitAdam, ...); SGD counts its momentum buffer only when `sgd_momentum`.
// Returns -1 for an unknown name.
int OptimizerStateBytesFor(std::string_view type, bool sgd_momentum = true);

// DeepSpeed's estimators, as reference §5.2 states them (bytes per GPU and per node's CPU).
struct DeepSpeedEstimate {
  int64_t gpu_bytes = 0;
  int64_t cpu_bytes = 0;
};
DeepSpeedEstimate DeepSpeedZero2Estimate(int64_t total_params, int gpus_per_node, int nodes, bool cpu_offload,
                                         double additional_buffer_factor = 1.5);
DeepSpeedEstimate DeepSpeedZero3Estimate(int64_t total_params, int64_t largest_layer_params, int gpus_per_node,
                                         int nodes, bool cpu_offload, bool cpu_offload_params, bool zero_init = true,
                                         double additional_buffer_factor = 1.5);

}  // namespace zerorun::zero

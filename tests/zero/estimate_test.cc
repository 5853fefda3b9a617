// The memory estimator against closed forms: the ZeRO paper's per-rank model states (reference §5.2:
// 16Ψ, 4Ψ+12Ψ/N, 2Ψ+14Ψ/N, 16Ψ/N for mixed-precision Adam, and its Ψ = 7.5B, N = 64 example),
// zerorun's padding rules, the transient buffers, offload placement, and DeepSpeed's estimator
// formulas evaluated by hand.
#include <doctest/doctest.h>

#include "zerorun/core/error.h"
#include "zerorun/zero/estimate.h"

using namespace zerorun;
using namespace zerorun::zero;

namespace {

EstimateInput Bf16Adam(int64_t psi, int world) {
  EstimateInput in;
  in.groups = ModelOfParams(psi);
  in.world_size = world;
  in.persistence_threshold = 0;  // the small test tensors would otherwise stay whole at stage 3
  return in;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("estimate: ZeRO paper model states for bf16 Adam (Ψ = 7.5B, N = 64)") {
  const int64_t psi = 7'500'000'000;  // a multiple of 2·64: no padding
  EstimateInput in = Bf16Adam(psi, 64);
  CHECK(EstimateStage(in, 0).ModelStateBytes() == 16 * psi);                      // 120 GB
  CHECK(EstimateStage(in, 1).ModelStateBytes() == 4 * psi + 12 * psi / 64);       // 31.4 GB
  CHECK(EstimateStage(in, 2).ModelStateBytes() == 2 * psi + 14 * psi / 64);       // 16.6 GB
  CHECK(EstimateStage(in, 3).ModelStateBytes() == 16 * psi / 64);                 // 1.9 GB
  CHECK(EstimateStage(in, 1).ModelStateBytes() == 31'406'250'000);
  CHECK(EstimateStage(in, 2).ModelStateBytes() == 16'640'625'000);
  CHECK(EstimateStage(in, 3).ModelStateBytes() == 1'875'000'000);
}

TEST_CASE("estimate: per-category model states, N = 1..4, Ψ a multiple of 2N") {
  const int64_t psi = 1'200;  // divisible by 2, 4, 6, 8
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    EstimateInput in = Bf16Adam(psi, n);
    StageEstimate s0 = EstimateStage(in, 0), s1 = EstimateStage(in, 1), s2 = EstimateStage(in, 2),
                  s3 = EstimateStage(in, 3);
    CHECK(s0.params_bytes == 2 * psi);
    CHECK(s0.grads_bytes == 2 * psi);
    CHECK(s0.master_bytes == 4 * psi);
    CHECK(s0.optimizer_bytes == 8 * psi);
    CHECK(s1.grads_bytes == 2 * psi);
    CHECK(s1.master_bytes == 4 * psi / n);
    CHECK(s1.optimizer_bytes == 8 * psi / n);
    CHECK(s2.params_bytes == 2 * psi);
    CHECK(s2.grads_bytes == 2 * psi / n);
    CHECK(s3.params_bytes == 2 * psi / n);
    CHECK(s3.grads_bytes == 2 * psi / n);
    CHECK(s3.live_params_peak_bytes > 0);
  }
}

TEST_CASE("estimate: optimizer state bytes and fp32 training") {
  CHECK(OptimizerStateBytesFor("AdamW") == 8);
  CHECK(OptimizerStateBytesFor("adam") == 8);
  CHECK(OptimizerStateBytesFor("Lamb") == 8);
  CHECK(OptimizerStateBytesFor("Lion") == 4);
  CHECK(OptimizerStateBytesFor("Adagrad") == 4);
  CHECK(OptimizerStateBytesFor("SGD") == 4);
  CHECK(OptimizerStateBytesFor("SGD", false) == 0);
  CHECK(OptimizerStateBytesFor("Muon") == -1);

  // SGD with momentum, bf16: K = 4 + 4 → 2Ψ + 2Ψ + 8Ψ at stage 0, 4Ψ + 8Ψ/N at stage 1.
  EstimateInput in = Bf16Adam(800, 4);
  in.optimizer_state_bytes = 4;
  CHECK(EstimateStage(in, 0).ModelStateBytes() == 12 * 800);
  CHECK(EstimateStage(in, 1).ModelStateBytes() == 4 * 800 + 8 * 800 / 4);

  // fp32 Adam: the parameters are the master, 4Ψ params + 4Ψ grads + 8Ψ state.
  in.optimizer_state_bytes = 8;
  in.param_bytes = in.grad_bytes = in.comm_bytes = 4;
  StageEstimate f0 = EstimateStage(in, 0), f3 = EstimateStage(in, 3);
  CHECK(f0.master_bytes == 0);
  CHECK(f0.ModelStateBytes() == 16 * 800);
  CHECK(f3.ModelStateBytes() == 16 * 800 / 4);
  CHECK(EstimateStage(in, 2).ModelStateBytes() == 4 * 800 + 12 * 800 / 4);
}

TEST_CASE("estimate: padding to 2N per group (stage 0), per bucket (stages 1/2) and N per tensor (stage 3)") {
  EstimateInput in;
  in.world_size = 3;
  in.groups = {{10, 7}, {5}};  // groups of 17 and 5 elements
  CHECK(PaddedNumel(in, 0) == 18 + 6);
  CHECK(PaddedNumel(in, 2) == 18 + 6);  // the default bucket holds a whole group
  CHECK(PaddedNumel(in, 3) == 12 + 9 + 6);
  // Buckets of at most 10: [10] and [7] are separate buckets, each padded to 6 (stage 0: only the end).
  EstimateInput b = in;
  b.reduce_bucket_numel = 10;
  CHECK(PaddedNumel(b, 0) == 18 + 6);
  CHECK(PaddedNumel(b, 1) == 12 + 12 + 6);
  in.persistence_threshold = 0;
  StageEstimate s1 = EstimateStage(in, 1);
  CHECK(s1.params_bytes == 2 * 24);
  CHECK(s1.master_bytes == 4 * 8);
  StageEstimate s3 = EstimateStage(in, 3);
  CHECK(s3.params_bytes == 2 * 9);  // (4 + 3 + 2) elements per rank
  CHECK(s3.optimizer_bytes == 8 * 9);
  // Tensors at or below the persistence threshold stay whole on every rank.
  in.persistence_threshold = 7;
  s3 = EstimateStage(in, 3);
  CHECK(s3.params_bytes == 2 * 9 + 2 * (9 + 6));
}

TEST_CASE("estimate: transient buffers") {
  const int64_t psi = 4'000;
  EstimateInput in = Bf16Adam(psi, 4);
  // bf16 on the wire: stage 0 all-reduces and stage 1 reduce-scatters in place in the gradients;
  // stage 2's transient buckets (here one bucket: the whole model) are reduce-scattered in place.
  CHECK(EstimateStage(in, 0).buckets_peak_bytes == 0);
  CHECK(EstimateStage(in, 1).buckets_peak_bytes == 0);
  CHECK(EstimateStage(in, 2).buckets_peak_bytes == 2 * psi);
  // fp32 on the wire stages each bucket in flight through an fp32 copy (at most two, here one).
  in.comm_bytes = 4;
  CHECK(EstimateStage(in, 0).buckets_peak_bytes == 4 * psi);
  CHECK(EstimateStage(in, 1).buckets_peak_bytes == 4 * psi);
  CHECK(EstimateStage(in, 2).buckets_peak_bytes == 2 * psi + 4 * psi);
  // One rank: nothing is exchanged.
  in.world_size = 1;
  CHECK(EstimateStage(in, 0).buckets_peak_bytes == 0);
  CHECK(EstimateStage(in, 1).buckets_peak_bytes == 0);

  // Stages 1/2 with many buckets: 20 tensors of 1000 in buckets of 2000 (pairs, padded to 2N = 8).
  // Stage 2 holds the largest layer's buckets (L + a bucket beyond each end), the bucket waiting for
  // the next layer, a tied tensor's and two in flight: L + 5 buckets, not the model (its 20000).
  EstimateInput many = Bf16Adam(0, 4);
  many.groups = {std::vector<int64_t>(20, 1'000)};
  many.reduce_bucket_numel = 2'000;
  many.largest_layer = 1'000;
  CHECK(PaddedNumel(many, 2) == 20'000);
  CHECK(EstimateStage(many, 2).buckets_peak_bytes == 2 * (1'000 + 5 * 2'000));
  many.comm_bytes = 4;
  CHECK(EstimateStage(many, 1).buckets_peak_bytes == 4 * 2 * 2'000);
  CHECK(EstimateStage(many, 2).buckets_peak_bytes == 2 * (1'000 + 5 * 2'000) + 4 * 2 * 2'000);

  // Stage 3: live parameters = largest layer + prefetch, capped by max_live and by the model.
  EstimateInput s = Bf16Adam(psi, 4);
  s.groups = {{1'000, 1'000, 1'000, 1'000}};
  s.persistence_threshold = 0;
  s.max_reuse_distance = 0;  // nothing kept for reuse
  s.largest_layer = 1'000;
  s.prefetch_numel = 2'000;
  CHECK(EstimateStage(s, 3).live_params_peak_bytes == 2 * 3'000);
  s.max_live_numel = 500;
  CHECK(EstimateStage(s, 3).live_params_peak_bytes == 2 * 1'500);
  s.prefetch_numel = 1'000'000;
  s.max_live_numel = 1'000'000;
  CHECK(EstimateStage(s, 3).live_params_peak_bytes == 2 * 4'000);
  // With parameters kept for reuse (DeepSpeed's default distance), up to max_live stay gathered.
  s.max_reuse_distance = 1'000'000'000;
  s.max_live_numel = 2'000;
  s.prefetch_numel = 0;
  CHECK(EstimateStage(s, 3).live_params_peak_bytes == 2 * 3'000);
  s.max_live_numel = 1'000'000;
  // Gradient buffers: full gradients of the layer in backward and of the open bucket (with the default
  // reduce_bucket_size: all of them), and the packed wire copies (reduce-scattered in place).
  CHECK(EstimateStage(s, 3).buckets_peak_bytes == 2 * 4'000 + 2 * 4'000);
  s.reduce_bucket_numel = 1'500;
  CHECK(EstimateStage(s, 3).buckets_peak_bytes == 2 * (1'000 + 1'500) + 2 * 4'000);
  // Small buckets: at most two packed buckets (each under B + L) travel.
  s.reduce_bucket_numel = 200;
  CHECK(EstimateStage(s, 3).buckets_peak_bytes == 2 * (1'000 + 200) + 2 * (2 * 1'200));
}

TEST_CASE("estimate: offload moves master and optimizer state (and params) off the device") {
  const int64_t psi = 8'000;
  EstimateInput in = Bf16Adam(psi, 4);
  StageEstimate o2 = EstimateStage(in, 2, OffloadTarget::kCpu);
  // The gradient partition lands in host memory as it is reduced (stage 2: only there).
  CHECK(o2.grads_bytes == 0);
  CHECK(o2.ModelStateBytes() == 2 * psi);
  CHECK(o2.host_bytes == 12 * psi / 4 + 2 * psi / 4);  // fp32 master + 2 moments, bf16 gradients
  // Stage 1 keeps its full gradients on the device, and the host copy of its partition besides.
  StageEstimate o1 = EstimateStage(in, 1, OffloadTarget::kCpu);
  CHECK(o1.ModelStateBytes() == 2 * psi + 2 * psi);
  CHECK(o1.host_bytes == o2.host_bytes);
  // ZeRO-Infinity: master + moments in two slots per element and the 16-bit shards in the swap files;
  // in host memory buffer_count sub-groups of state and buffer_count shards of the largest tensor (the
  // whole model here: one tensor); the 16-bit gradient shard in host memory too.
  in.sub_group_numel = 300;
  in.nvme_buffer_count = 2;
  in.param_buffer_count = 3;
  StageEstimate o3 = EstimateStage(in, 3, OffloadTarget::kNvme, OffloadTarget::kNvme);
  CHECK(o3.ModelStateBytes() == 0);
  CHECK(o3.nvme_bytes == 2 * 12 * psi / 4 + 2 * psi / 4);
  CHECK(o3.host_bytes == 2 * 12 * 300 + 2 * (psi / 4) * 1 + 2 * psi / 4);  // one tensor: one buffer is all it uses
  in.groups = {{1'000, 3'000, 4'000}};
  CHECK(EstimateStage(in, 3, OffloadTarget::kNvme, OffloadTarget::kNvme).host_bytes ==
        2 * 12 * 300 + 3 * 2 * 1'000 + 2 * psi / 4);
  // Parameter offload alone: fp32 training then keeps a separate fp32 master on the device.
  StageEstimate pc = EstimateStage(in, 3, OffloadTarget::kNone, OffloadTarget::kCpu);
  CHECK(pc.params_bytes == 0);
  CHECK(pc.host_bytes == 2 * psi / 4);
  in.param_bytes = in.grad_bytes = in.comm_bytes = 4;
  CHECK(EstimateStage(in, 3).master_bytes == 0);
  CHECK(EstimateStage(in, 3, OffloadTarget::kNone, OffloadTarget::kCpu).master_bytes == 4 * psi / 4);
  in = Bf16Adam(psi, 4);
  StageEstimate o3c = EstimateStage(in, 3, OffloadTarget::kCpu);
  CHECK(o3c.ModelStateBytes() == 2 * psi / 4);  // the 16-bit parameter shard stays
  CHECK_THROWS_AS(EstimateStage(in, 0, OffloadTarget::kCpu), InvalidArgument);
  // NVMe optimizer offload (zerorun: stages 1-3): two slots of master + state per element on NVMe,
  // buffer_count sub-groups of them in host memory.
  in.sub_group_numel = 300;
  in.nvme_buffer_count = 2;
  StageEstimate n2 = EstimateStage(in, 2, OffloadTarget::kNvme);
  CHECK(n2.nvme_bytes == 2 * 12 * psi / 4);
  CHECK(n2.host_bytes == 2 * 12 * 300 + 2 * psi / 4);
  CHECK(n2.ModelStateBytes() == o2.ModelStateBytes());
  in.nvme_buffer_count = 100;  // more buffers than sub-groups (7 of at most 300 elements)
  CHECK(EstimateStage(in, 2, OffloadTarget::kNvme).host_bytes == 7 * 12 * 300 + 2 * psi / 4);
  in.sub_group_numel = 1'000'000'000;
  CHECK_THROWS_AS(EstimateStage(in, 2, OffloadTarget::kCpu, OffloadTarget::kCpu), InvalidArgument);
  CHECK(EstimateAll(in).size() == 12);
}

TEST_CASE("estimate: bad input is rejected") {
  EstimateInput in = Bf16Adam(100, 0);
  CHECK_THROWS_AS(EstimateStage(in, 0), InvalidArgument);
  in.world_size = 2;
  CHECK_THROWS_AS(EstimateStage(in, 4), InvalidArgument);
  in.param_bytes = 3;
  CHECK_THROWS_AS(EstimateStage(in, 0), InvalidArgument);
  in.param_bytes = 2;
  in.groups = {{}};
  CHECK_THROWS_AS(EstimateStage(in, 0), InvalidArgument);
  in.groups = {{kMaxEstimateParams, kMaxEstimateParams}};
  CHECK_THROWS_AS(EstimateStage(in, 0), InvalidArgument);
  in.groups = {{kMaxEstimateParams}};
  CHECK(EstimateStage(in, 0).ModelStateBytes() == 16 * kMaxEstimateParams);
}

TEST_CASE("estimate: DeepSpeed's estimator formulas (reference §5.2)") {
  const int64_t p = 1'000'000'000, l = 50'000'000;
  // ZeRO-2, 1 node × 8 GPUs.
  DeepSpeedEstimate a = DeepSpeedZero2Estimate(p, 8, 1, /*cpu_offload=*/true);
  CHECK(a.gpu_bytes == 2'000'000'000);
  CHECK(a.cpu_bytes == 48'000'000'000);  // P · max(32, 16) · 1.5
  DeepSpeedEstimate b = DeepSpeedZero2Estimate(p, 8, 1, false);
  CHECK(b.gpu_bytes == 2'000'000'000 + 2'250'000'000);  // 2P + 18P/8
  CHECK(b.cpu_bytes == 48'000'000'000);                 // P · 4 · 8 · 1.5
  DeepSpeedEstimate c = DeepSpeedZero2Estimate(p, 1, 2, true);
  CHECK(c.cpu_bytes == 24'000'000'000);  // max(4·2, 16) = 16
  // ZeRO-3, 2 nodes × 4 GPUs.
  DeepSpeedEstimate d = DeepSpeedZero3Estimate(p, l, 4, 2, true, true);
  CHECK(d.gpu_bytes == 200'000'000);                 // 4L
  CHECK(d.cpu_bytes == 13'500'000'000);              // P · 18/2 · 1.5
  DeepSpeedEstimate e = DeepSpeedZero3Estimate(p, l, 4, 2, true, false);
  CHECK(e.gpu_bytes == 200'000'000 + 250'000'000);   // 4L + 2P/8
  CHECK(e.cpu_bytes == 12'000'000'000);              // P · 16/2 · 1.5
  DeepSpeedEstimate f = DeepSpeedZero3Estimate(p, l, 4, 2, false, false);
  CHECK(f.gpu_bytes == 200'000'000 + 2'250'000'000); // 4L + 18P/8
  CHECK(f.cpu_bytes == 1'200'000'000);               // L · 4 · 4 · 1.5
  DeepSpeedEstimate g = DeepSpeedZero3Estimate(p, l, 4, 2, false, false, /*zero_init=*/false);
  CHECK(g.cpu_bytes == 24'000'000'000);              // P · 4 · 4 · 1.5
  DeepSpeedEstimate h = DeepSpeedZero3Estimate(p, l, 8, 1, true, true, false);
  CHECK(h.cpu_bytes == 48'000'000'000);              // P · max(32, 18) · 1.5

  // zerorun's stage 2 keeps no fp32 gradient partition: DeepSpeed's 2Ψ + 18Ψ/N minus 4Ψ/N.
  EstimateInput in = Bf16Adam(p, 8);
  CHECK(EstimateStage(in, 2).ModelStateBytes() == b.gpu_bytes - 4 * p / 8);
  // Stage 3 without offload: 16Ψ/N against DeepSpeed's 18Ψ/N (+4L for the live layer and its grads).
  CHECK(EstimateStage(in, 3).ModelStateBytes() == f.gpu_bytes - 200'000'000 - 2 * p / 8);
}

}  // TEST_SUITE

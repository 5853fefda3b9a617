// Gradient and parameter traffic per step against the ZeRO paper (reference §5.2): 2Ψ per rank per
// step for stages 0-2 (all-reduce = reduce-scatter Ψ + all-gather Ψ; stages 1/2 reduce-scatter each
// gradient bucket, then all-gather each bucket's updated parameters), measured by the communicator's
// byte accounting on N = 2..4 ranks. Volumes are in (N-1)/N·Ψ units, summed over ranks.
#include <doctest/doctest.h>

#include <mutex>

#include "engine_test_util.h"
#include "zerorun/zero/partition.h"

using namespace zrtest;

TEST_SUITE("unit") {

TEST_CASE("engine traffic: stages 0-2 move 2Ψ per rank per step, stage 3 3Ψ") {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world = 2; world <= 4; ++world) {
      CAPTURE(stage);
      CAPTURE(world);
      std::mutex mu;
      int64_t reduce_bytes = 0, gather_bytes = 0, allreduce_bytes = 0, rs_bytes = 0, psi = 0, padded = 0;
      int64_t tied_padded = 0, buckets = 0, rs_calls = 0;
      const int steps = 3;
      comm::RunLocalRanks(world, [&](comm::Communicator& c) {
        RunSpec s;
        s.world = world;
        s.stage = stage;
        s.micro = 2;
        // Nothing persistent and nothing kept for reuse: every module window gathers (the paper's 3Ψ).
        s.zero_json = R"(, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0)";
        runtime::LoadOptions lo;
        lo.world_size = world;
        lo.log_warnings = false;
        runtime::Config cfg = runtime::LoadConfigString(ConfigJson(s), lo);  // fp32: no overflow check
        gpt::Gpt model(TinyGpt(DType::kF32));
        model.Initialize(3);
        runtime::Engine engine(model, cfg, c);
        c.ResetStats();
        for (int step = 0; step < steps; ++step) {
          auto [x, y] = MicroBatch(step, 0, c.rank(), world, 2, 1, 8, 16);
          engine.Forward(x, y);
          engine.Backward();
          engine.Step();
        }
        comm::CommStats st = c.Stats();
        std::lock_guard<std::mutex> lock(mu);
        reduce_bytes += st[comm::OpType::kReduce].bytes_sent;
        gather_bytes += st[comm::OpType::kAllGather].bytes_sent;
        allreduce_bytes += st[comm::OpType::kAllReduce].bytes_sent;
        rs_bytes += st[comm::OpType::kReduceScatter].bytes_sent;
        if (c.rank() == 0) {
          rs_calls = st[comm::OpType::kReduceScatter].calls;
          for (const auto& g : engine.param_groups()) {
            std::vector<int64_t> numels;
            for (auto* p : g.params) {
              numels.push_back(p->numel());
              if (stage == 3) padded += zero::ShardParamStage3(p->numel(), world, 0).padded_numel;
              if (p->name() == "wte.weight") tied_padded = zero::ShardParamStage3(p->numel(), world, 0).padded_numel;
            }
            if (stage < 3) padded += FlatPaddedNumel(numels, world, stage);
            if (stage == 1 || stage == 2) {
              buckets += static_cast<int64_t>(zero::LayoutFlatGroup(numels, world, 2, false, kTestBucket).buckets.size());
            }
          }
          psi = engine.num_parameters();
        }
      });
      const int64_t elem = 4;  // fp32
      if (stage == 0) {
        // Ring all-reduce of the gradients: 2(N-1)/N·Ψ per rank; only the rounding of per-bucket
        // chunking separates the measured sum from 2(N-1)Ψ.
        double want = 2.0 * (world - 1) * static_cast<double>(psi) * elem * steps;
        CHECK(static_cast<double>(allreduce_bytes) == doctest::Approx(want).epsilon(0.01));
        CHECK(reduce_bytes == 0);
        CHECK(gather_bytes == 0);
      } else if (stage == 3) {
        // Parameters gathered in forward and again in backward (2Ψ), gradients reduce-scattered (Ψ).
        // The tied embedding is used by two modules, so it is gathered twice in each direction.
        CHECK(rs_bytes == (world - 1) * padded * elem * steps);
        CHECK(gather_bytes == (world - 1) * (2 * padded + 2 * tied_padded) * elem * steps);
        CHECK(reduce_bytes == 0);
      } else {
        // One reduce-scatter per gradient bucket and one all-gather of each bucket's parameters, both of
        // the padded buckets: (N-1)·P each in total, P = Ψ + at most 2N-1 pad elements per bucket.
        CHECK(rs_calls == buckets * steps);
        CHECK(reduce_bytes == 0);
        CHECK(rs_bytes == (world - 1) * padded * elem * steps);
        CHECK(gather_bytes == (world - 1) * padded * elem * steps);
        CHECK(padded - psi < buckets * 2 * world);
        // Only the norm's per-group sums go through all-reduce (8 bytes per group and step).
        CHECK(allreduce_bytes < 64 * world * steps);
      }
    }
  }
}

}  // TEST_SUITE

TEST_SUITE("unit") {

TEST_CASE("engine traffic: stage 3 keeps parameters reused within max_reuse_distance (fewer gathers, same losses)") {
  std::vector<double> losses[2];
  int64_t gathered[2] = {0, 0};
  for (int reuse = 0; reuse < 2; ++reuse) {
    std::mutex mu;
    comm::RunLocalRanks(2, [&](comm::Communicator& c) {
      RunSpec s;
      s.world = 2;
      s.stage = 3;
      s.micro = 2;
      s.zero_json = reuse ? R"(, "stage3_param_persistence_threshold": 0)"
                          : R"(, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0)";
      runtime::Config cfg = LoadSpecConfig(s);
      gpt::Gpt model(TinyGpt(DType::kF32));
      model.Initialize(3);
      runtime::Engine engine(model, cfg, c);
      std::vector<double> mine;
      for (int step = 0; step < 3; ++step) {
        auto [x, y] = MicroBatch(step, 0, c.rank(), 2, 2, 1, 8, 16);
        mine.push_back(engine.Forward(x, y));
        engine.Backward();
        engine.Step();
      }
      std::lock_guard<std::mutex> lock(mu);
      if (c.rank() == 0) {
        losses[reuse] = mine;
        gathered[reuse] = c.Stats()[comm::OpType::kAllGather].bytes_sent;
      }
    });
  }
  CHECK(losses[0] == losses[1]);
  CHECK(gathered[1] < gathered[0]);
}

}  // TEST_SUITE

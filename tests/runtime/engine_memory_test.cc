// Model-state memory per rank against the ZeRO paper (reference §5.2) for mixed-precision Adam
// (bf16 parameters and gradients, fp32 master weights and two fp32 moments, K = 12):
//   stage 0: 2Ψ + 2Ψ + 12Ψ   stage 1: 2Ψ + 2Ψ + 12Ψ/N   stage 2: 2Ψ + 2Ψ/N + 12Ψ/N   stage 3: 16Ψ/N
// exactly, up to padding (stage 0: each group's flat buffer to a multiple of 2N elements; stages 1/2:
// each gradient bucket of it; stage 3: each parameter to a multiple of N) — measured with the
// engine's memory accounting after real training steps on N = 1..4 ranks.
#include <doctest/doctest.h>

#include <mutex>

#include "engine_test_util.h"
#include "zerorun/zero/partition.h"

using namespace zrtest;

TEST_SUITE("unit") {

TEST_CASE("engine memory: model states match 16Ψ, 4Ψ+12Ψ/N, 2Ψ+14Ψ/N up to padding") {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world = 1; world <= 4; ++world) {
      CAPTURE(stage);
      CAPTURE(world);
      std::mutex mu;
      comm::RunLocalRanks(world, [&](comm::Communicator& c) {
        RunSpec s;
        s.world = world;
        s.stage = stage;
        s.micro = 2;
        s.dtype = DType::kBF16;
        s.zero_json = R"(, "stage3_param_persistence_threshold": 0)";  // nothing stays resident
        runtime::Config cfg = LoadSpecConfig(s);
        gpt::Gpt model(TinyGpt(DType::kBF16));
        model.Initialize(3);
        runtime::Engine engine(model, cfg, c);
        // Padded Ψ: each group's flat buffer (stages 1/2: each of its buckets) padded to a multiple of 2N.
        int64_t padded = 0, psi = 0;
        for (const auto& g : engine.param_groups()) {
          std::vector<int64_t> numels;
          for (auto* p : g.params) numels.push_back(p->numel());
          if (stage == 3) {
            for (int64_t n : numels) padded += zero::ShardParamStage3(n, world, 0).padded_numel;
          } else {
            padded += FlatPaddedNumel(numels, world, stage);
          }
          for (int64_t n : numels) psi += n;
        }
        CHECK(psi == engine.num_parameters());
        for (int step = 0; step < 2; ++step) {
          auto [x, y] = MicroBatch(step, 0, c.rank(), world, 2, 1, 8, 16);
          engine.Forward(x, y);
          engine.Backward();
          engine.Step();
        }
        MemoryAccount& m = engine.memory();
        const int64_t part = padded / world;
        CHECK(m.Current(MemCategory::kParams) == (stage == 3 ? 2 * part : 2 * padded));
        CHECK(m.Current(MemCategory::kGrads) == (stage >= 2 ? 2 * part : 2 * padded));
        CHECK(m.Current(MemCategory::kMaster) == (stage == 0 ? 4 * padded : 4 * part));
        CHECK(m.Current(MemCategory::kOptimizer) == (stage == 0 ? 8 * padded : 8 * part));
        // Between steps no communication buffer is held.
        CHECK(m.Current(MemCategory::kBuckets) == 0);
        std::lock_guard<std::mutex> lock(mu);
      });
    }
  }
}

}  // TEST_SUITE

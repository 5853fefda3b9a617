// The engine through its ZeRO strategy (zero/strategy.h): sub_group_size cuts the optimizer step into
// sub-groups of the state store without changing a bit of the result, at every stage (Adam and Lamb);
// and the state store holds, for every element of every trainable parameter, exactly one fp32 master
// value on exactly one rank (stage 0: on every rank), found through StateExtents, equal to the
// parameter after rounding — what checkpoints read and write (zero::ReadState).
#include <doctest/doctest.h>

#include <map>
#include <mutex>

#include "engine_test_util.h"
#include "zerorun/zero/strategy.h"

using namespace zrtest;

namespace {

struct Run {
  std::vector<std::vector<float>> params;  // per rank
  std::vector<double> losses;              // rank 0
  int sub_groups = 0;                      // rank 0's store
};

Run Train3(int stage, int world, const std::string& zero_extra, const char* optimizer = "AdamW") {
  Run out;
  out.params.resize(static_cast<size_t>(world));
  std::mutex mu;
  comm::RunLocalRanks(world, [&](comm::Communicator& c) {
    RunSpec s;
    s.world = world;
    s.stage = stage;
    s.micro = 2;
    s.dtype = DType::kBF16;
    s.zero_json = R"(, "stage3_param_persistence_threshold": 0)" + zero_extra;
    s.optimizer = optimizer;
    runtime::Config cfg = LoadSpecConfig(s);
    gpt::Gpt model(TinyGpt(DType::kBF16));
    model.Initialize(4);
    runtime::EngineOptions eo;
    eo.groups.no_weight_decay_for_1d = true;
    runtime::Engine engine(model, cfg, c, eo);
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
      auto [x, y] = MicroBatch(step, 0, c.rank(), world, 2, 1, 8, 16);
      losses.push_back(engine.Forward(x, y));
      engine.Backward();
      engine.Step();
    }
    std::vector<float> flat = FlatParameters(engine);
    std::lock_guard<std::mutex> lock(mu);
    out.params[static_cast<size_t>(c.rank())] = flat;
    if (c.rank() == 0) {
      out.losses = losses;
      out.sub_groups = engine.zero_strategy().state_store().layout().num_sub_groups();
    }
  });
  return out;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("engine sub_group_size: stepping the state store sub-group by sub-group is bitwise one pass") {
  for (const char* optimizer : {"AdamW", "Lamb"}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (int world : {1, 3}) {
        CAPTURE(optimizer);
        CAPTURE(stage);
        CAPTURE(world);
        const Run one = Train3(stage, world, "", optimizer);
        const Run many = Train3(stage, world, R"(, "sub_group_size": 40)", optimizer);
        CHECK(one.sub_groups == 2);  // one per parameter group
        CHECK(many.sub_groups > 8);
        CHECK(many.losses == one.losses);
        for (int r = 0; r < world; ++r) CHECK(many.params[static_cast<size_t>(r)] == one.params[static_cast<size_t>(r)]);
      }
    }
  }
}

TEST_CASE("engine state store: every trainable element's master weight is held once, where StateExtents say") {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {1, 2, 3}) {
      CAPTURE(stage);
      CAPTURE(world);
      std::mutex mu;
      std::map<std::string, std::vector<int>> holders;  // parameter -> how many ranks hold each element
      size_t trainable = 0;
      comm::RunLocalRanks(world, [&](comm::Communicator& c) {
        RunSpec s;
        s.world = world;
        s.stage = stage;
        s.micro = 2;
        s.dtype = DType::kBF16;
        s.zero_json = R"(, "sub_group_size": 100)";
        runtime::Config cfg = LoadSpecConfig(s);
        gpt::Gpt model(TinyGpt(DType::kBF16));
        model.Initialize(6);
        runtime::EngineOptions eo;
        eo.groups.no_weight_decay_for_1d = true;
        runtime::Engine engine(model, cfg, c, eo);
        auto [x, y] = MicroBatch(0, 0, c.rank(), world, 2, 1, 8, 16);
        engine.Forward(x, y);
        engine.Backward();
        engine.Step();
        const std::vector<Tensor> full = engine.GatherParameters();
        std::map<const nn::Parameter*, size_t> index;
        for (size_t i = 0; i < model.Parameters().size(); ++i) index[model.Parameters()[i]] = i;
        zero::Strategy& st = engine.zero_strategy();
        const int master = st.state_store().layout().SlotIndex("master");
        REQUIRE(master >= 0);
        // Trainable parameters by the strategy's ids: group by group, in group order.
        std::vector<const nn::Parameter*> by_id;
        for (const auto& g : engine.param_groups()) by_id.insert(by_id.end(), g.params.begin(), g.params.end());
        std::lock_guard<std::mutex> lock(mu);
        trainable = by_id.size();
        for (const zero::StateExtent& e : st.StateExtents()) {
          const nn::Parameter* p = by_id.at(static_cast<size_t>(e.param));
          std::vector<float> m(static_cast<size_t>(e.numel));
          zero::ReadState(st.state_store(), master, e.group, {e.partition_offset, e.partition_offset + e.numel}, m.data());
          const std::vector<float> value = full[index.at(p)].ToVector();
          for (int64_t k = 0; k < e.numel; ++k) {
            // The 16-bit parameter is the master rounded to bf16.
            const float rounded = Tensor::FromVector({m[static_cast<size_t>(k)]}, {1}, DType::kBF16).ToVector()[0];
            CHECK(rounded == value[static_cast<size_t>(e.param_offset + k)]);
          }
          auto& h = holders[p->name()];
          h.resize(static_cast<size_t>(p->numel()), 0);
          for (int64_t k = 0; k < e.numel; ++k) h[static_cast<size_t>(e.param_offset + k)]++;
        }
      });
      CHECK(holders.size() == trainable);  // every trainable parameter has state somewhere
      for (const auto& [name, h] : holders) {
        CAPTURE(name);
        for (int n : h) CHECK(n == (stage == 0 ? world : 1));
      }
    }
  }
}

}  // TEST_SUITE

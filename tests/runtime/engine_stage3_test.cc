// ZeRO stage 3 specifics on the local backend: gradients leave in reduce_bucket_size buckets (one
// coalesced reduce-scatter per bucket, same bytes and the same arithmetic as one per parameter), and
// frozen parameters are sharded like trainable ones (16-bit shards only, gathered for their windows).
#include <doctest/doctest.h>

#include <mutex>

#include "engine_test_util.h"
#include "zerorun/zero/partition.h"

using namespace zrtest;

namespace {

struct BucketRun {
  int64_t reduce_scatters = 0;  // per rank, whole run
  int64_t rs_bytes = 0;         // per rank, whole run
  int64_t trainable_tensors = 0;
  std::vector<std::vector<float>> params;  // per rank, GatherParameters() concatenated
};

BucketRun RunWithBucket(int world, DType dtype, int64_t bucket, int steps) {
  BucketRun out;
  out.params.resize(static_cast<size_t>(world));
  std::mutex mu;
  comm::RunLocalRanks(world, [&](comm::Communicator& c) {
    RunSpec s;
    s.world = world;
    s.stage = 3;
    s.micro = 2;
    s.dtype = dtype;
    s.zero_json = Format(R"(, "stage3_param_persistence_threshold": 0, "reduce_bucket_size": {})", bucket);
    runtime::LoadOptions lo;
    lo.world_size = world;
    lo.log_warnings = false;
    // ConfigJson already sets reduce_bucket_size; the later key must win, so build it by hand.
    std::string json = ConfigJson(s);
    const std::string dflt = R"("reduce_bucket_size": 200 ,)";
    REQUIRE(json.find(dflt) != std::string::npos);
    json.replace(json.find(dflt), dflt.size(), "");
    runtime::Config cfg = runtime::LoadConfigString(json, lo);
    gpt::Gpt model(TinyGpt(dtype));
    model.Initialize(5);
    runtime::Engine engine(model, cfg, c);
    c.ResetStats();
    for (int step = 0; step < steps; ++step) {
      auto [x, y] = MicroBatch(step, 0, c.rank(), world, 2, 1, 8, 16);
      engine.Forward(x, y);
      engine.Backward();
      engine.Step();
    }
    comm::CommStats st = c.Stats();
    std::vector<float> flat = FlatParameters(engine);
    std::lock_guard<std::mutex> lock(mu);
    out.params[static_cast<size_t>(c.rank())] = std::move(flat);
    if (c.rank() == 0) {
      out.reduce_scatters = st[comm::OpType::kReduceScatter].calls;
      out.rs_bytes = st[comm::OpType::kReduceScatter].bytes_sent;
      for (const auto& g : engine.param_groups()) out.trainable_tensors += static_cast<int64_t>(g.params.size());
    }
  });
  return out;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("stage 3: gradients are reduce-scattered per reduce_bucket_size bucket, with the same bytes and result") {
  const int steps = 3;
  for (int world : {2, 3}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      CAPTURE(world);
      CAPTURE(DTypeName(dtype));
      BucketRun per_param = RunWithBucket(world, dtype, 1, steps);    // every gradient fills a bucket alone
      BucketRun mid = RunWithBucket(world, dtype, 600, steps);        // a few parameters per bucket
      BucketRun one = RunWithBucket(world, dtype, 500'000'000, steps);  // the whole backward in one bucket
      CHECK(per_param.reduce_scatters == per_param.trainable_tensors * steps);
      CHECK(one.reduce_scatters == steps);
      CHECK(mid.reduce_scatters > steps);
      CHECK(mid.reduce_scatters < per_param.reduce_scatters);
      // Packing changes neither the elements sent nor the arithmetic of any element.
      CHECK(mid.rs_bytes == per_param.rs_bytes);
      CHECK(one.rs_bytes == per_param.rs_bytes);
      for (int r = 0; r < world; ++r) {
        CHECK(mid.params[static_cast<size_t>(r)] == per_param.params[static_cast<size_t>(r)]);
        CHECK(one.params[static_cast<size_t>(r)] == per_param.params[static_cast<size_t>(r)]);
        CHECK(one.params[static_cast<size_t>(r)] == one.params[0]);
      }
    }
  }
}

TEST_CASE("stage 3: frozen parameters are sharded, gathered for their windows, and never change") {
  const int world = 2;
  std::vector<std::vector<float>> frozen_after(world);
  std::vector<double> first(world), last(world);
  int64_t params_bytes = 0, expected_bytes = 0;
  std::vector<float> before;
  std::mutex mu;
  comm::RunLocalRanks(world, [&](comm::Communicator& c) {
    RunSpec s;
    s.world = world;
    s.stage = 3;
    s.micro = 4;
    s.zero_json = R"(, "stage3_param_persistence_threshold": 0)";
    runtime::Config cfg = LoadSpecConfig(s);
    gpt::Gpt model(TinyGpt(DType::kF32));
    model.Initialize(1);
    nn::Parameter* wpe = model.FindParameter("wpe.weight");
    REQUIRE(wpe != nullptr);
    wpe->set_requires_grad(false);
    std::vector<float> init = wpe->engine_data().ToVector();
    runtime::Engine engine(model, cfg, c);
    // Released like every other partitioned parameter: no rank holds its full value between windows.
    CHECK_FALSE(wpe->engine_data().defined());
    int64_t shards = 0;
    for (nn::Parameter* p : model.Parameters()) shards += zero::ShardParamStage3(p->numel(), world, c.rank()).shard_numel;
    for (int step = 0; step < 6; ++step) {
      auto [x, y] = MicroBatch(step, 0, c.rank(), world, 4, 1, 8, 16);
      double loss = engine.Forward(x, y);
      engine.Backward();
      engine.Step();
      if (step == 0) first[static_cast<size_t>(c.rank())] = loss;
      last[static_cast<size_t>(c.rank())] = loss;
      CHECK_FALSE(wpe->engine_data().defined());
    }
    const int64_t held = engine.memory().Current(MemCategory::kParams);
    std::vector<Tensor> all = engine.GatherParameters();
    const auto& plist = model.Parameters();
    for (size_t i = 0; i < plist.size(); ++i) {
      if (plist[i] == wpe) frozen_after[static_cast<size_t>(c.rank())] = all[i].ToVector();
    }
    std::lock_guard<std::mutex> lock(mu);
    if (c.rank() == 0) {
      before = init;
      params_bytes = held;
      expected_bytes = shards * 4;  // fp32 shards of every parameter, frozen included, nothing else
    }
  });
  CHECK(params_bytes == expected_bytes);
  for (int r = 0; r < world; ++r) {
    CHECK(frozen_after[static_cast<size_t>(r)] == before);
    CHECK(last[static_cast<size_t>(r)] < first[static_cast<size_t>(r)]);
  }
}

}  // TEST_SUITE

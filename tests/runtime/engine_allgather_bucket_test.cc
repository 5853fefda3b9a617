// zero_optimization.allgather_bucket_size at stages 1/2: each gradient bucket is all-gathered once
// this rank's slice of it is updated (the optimizer going on with the next), in one in-place op when
// the slice fits allgather_bucket_size, else chunk by chunk through staging buffers. The result must
// be bitwise the run with one gather per bucket; the traffic must be Σ ceil(S/B) all-gathers per step
// over the buckets' slices S, with exactly the bytes of the unchunked gathers; the staging buffers
// (two, W·B elements each) are charged to kBuckets during the step and gone after it.
#include <doctest/doctest.h>

#include <algorithm>
#include <mutex>

#include "engine_test_util.h"
#include "zerorun/runtime/optim/optimizer.h"
#include "zerorun/zero/partition.h"

using namespace zrtest;

namespace {

struct BucketRun {
  std::vector<std::vector<float>> params;  // per rank, every parameter as fp32
  std::vector<double> losses;              // rank 0
  std::vector<int64_t> slices;             // every bucket's slice S, all groups
  std::vector<int64_t> step_counts;        // rank 0's optimizer step count per group
  int64_t gather_calls = 0;                // rank 0, over all steps
  int64_t gather_bytes_sent = 0;           // summed over ranks and steps
  int64_t gather_payload = 0;              // rank 0, over all steps
  // Rank 0's kBuckets bytes per step: when Step() begins, its peak during Step(), when it ends.
  std::vector<int64_t> buckets_before, buckets_peak, buckets_after;
};

constexpr int kSteps = 3;

// Two groups (no weight decay on 1-d parameters), each cut into reduce_bucket_size buckets whose slices
// are chunked or not depending on the bucket. `bucket` 0: the config's default.
BucketRun RunWithBucket(int stage, int world, DType dtype, int64_t bucket, const char* optimizer = "AdamW") {
  BucketRun out;
  out.params.resize(static_cast<size_t>(world));
  std::mutex mu;
  comm::RunLocalRanks(world, [&](comm::Communicator& c) {
    RunSpec s;
    s.world = world;
    s.stage = stage;
    s.micro = 2;
    s.dtype = dtype;
    if (bucket > 0) s.zero_json = Format(R"(, "allgather_bucket_size": {})", bucket);
    s.optimizer = optimizer;
    runtime::Config cfg = LoadSpecConfig(s);
    gpt::Gpt model(TinyGpt(dtype));
    model.Initialize(11);
    runtime::EngineOptions eo;
    eo.groups.no_weight_decay_for_1d = true;
    runtime::Engine engine(model, cfg, c, eo);
    c.ResetStats();
    std::vector<double> losses;
    std::vector<int64_t> before, peak, after;
    for (int step = 0; step < kSteps; ++step) {
      auto [x, y] = MicroBatch(step, 0, c.rank(), world, 2, 1, 8, 16);
      losses.push_back(engine.Forward(x, y));
      engine.Backward();
      MemoryAccount& m = engine.memory();
      before.push_back(m.Current(MemCategory::kBuckets));
      m.ResetPeaks();
      engine.Step();
      peak.push_back(m.Peak(MemCategory::kBuckets));
      after.push_back(m.Current(MemCategory::kBuckets));
    }
    comm::CommStats st = c.Stats();
    std::vector<float> flat = FlatParameters(engine);
    std::lock_guard<std::mutex> lock(mu);
    out.params[static_cast<size_t>(c.rank())] = flat;
    out.gather_bytes_sent += st[comm::OpType::kAllGather].bytes_sent;
    if (c.rank() == 0) {
      out.losses = losses;
      out.gather_calls = st[comm::OpType::kAllGather].calls;
      out.gather_payload = st[comm::OpType::kAllGather].payload_bytes;
      out.buckets_before = before;
      out.buckets_peak = peak;
      out.buckets_after = after;
      for (size_t g = 0; g < engine.param_groups().size(); ++g) {
        std::vector<int64_t> numels;
        for (auto* p : engine.param_groups()[g].params) numels.push_back(p->numel());
        for (const zero::FlatBucket& b : zero::LayoutFlatGroup(numels, world, 2, false, kTestBucket).buckets) {
          out.slices.push_back(b.slice_numel);
        }
        out.step_counts.push_back(engine.optimizer().step_count(static_cast<int>(g)));
      }
    }
  });
  return out;
}

// kBuckets during each step: the gradient buckets the step finds (stage 1 frees the reduction buffers
// still held, how many depends on timing, when it finishes them before the update), then
// `staging_bytes` on top of what stays after the step while the gather runs; after the step exactly
// what the single-gather run `base` holds.
void CheckStaging(const BucketRun& r, const BucketRun& base, int64_t staging_bytes) {
  REQUIRE(r.buckets_peak.size() == static_cast<size_t>(kSteps));
  for (size_t i = 0; i < r.buckets_peak.size(); ++i) {
    CAPTURE(i);
    CHECK(r.buckets_after[i] == base.buckets_after[i]);
    CHECK(r.buckets_peak[i] == std::max(r.buckets_before[i], r.buckets_after[i] + staging_bytes));
  }
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("engine allgather_bucket_size: chunked update+gather is bitwise the single gather, ceil(P/B) ops, same bytes") {
  for (int stage : {1, 2}) {
    for (int world : {2, 3}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        CAPTURE(stage);
        CAPTURE(world);
        CAPTURE(DTypeName(dtype));
        const BucketRun base = RunWithBucket(stage, world, dtype, 0);
        REQUIRE(base.slices.size() >= 4);
        const int64_t big = *std::max_element(base.slices.begin(), base.slices.end());
        REQUIRE(big >= 8);
        CHECK(base.gather_calls == static_cast<int64_t>(base.slices.size()) * kSteps);  // one per bucket
        CheckStaging(base, base, 0);
        for (size_t g = 0; g < 2; ++g) CHECK(base.step_counts[g] == kSteps);
        // Several chunks of the largest slices with a short last chunk (the bucket does not divide the
        // slice), an odd number of chunks, and a bucket that chunks only the largest slices.
        std::vector<int64_t> buckets = {2 * (big / 6) + 2, 2 * (big / 4) + 2, 2 * ((big - 1) / 2)};
        for (int64_t bucket : buckets) {
          CAPTURE(bucket);
          REQUIRE(bucket % 2 == 0);
          const BucketRun r = RunWithBucket(stage, world, dtype, bucket);
          int64_t chunks = 0;
          bool chunked = false;
          for (int64_t sl : r.slices) {
            chunks += zero::CeilDiv(sl, bucket);
            chunked = chunked || sl > bucket;
          }
          REQUIRE(chunked);
          INFO(Format("stage {} world {} {}: {} slices up to {}, bucket {}: {} gathers per step", stage, world,
                      DTypeName(dtype), r.slices.size(), big, bucket, chunks));
          CHECK(r.losses == base.losses);
          for (int rank = 0; rank < world; ++rank) {
            CHECK(r.params[static_cast<size_t>(rank)] == base.params[static_cast<size_t>(rank)]);
            CHECK(r.params[static_cast<size_t>(rank)] == r.params[0]);
          }
          for (size_t g = 0; g < 2; ++g) CHECK(r.step_counts[g] == kSteps);  // once per boundary
          CHECK(r.gather_calls == chunks * kSteps);
          CHECK(r.gather_bytes_sent == base.gather_bytes_sent);
          CHECK(r.gather_payload == base.gather_payload);
          // Two staging buffers of W·B elements during the step (a chunked slice has at least two
          // chunks), nothing after it.
          const int64_t staging = world * bucket * static_cast<int64_t>(DTypeSize(dtype));
          CheckStaging(r, base, 2 * staging);
        }
      }
    }
  }
}

TEST_CASE("engine allgather_bucket_size: Lamb's two passes gather in chunks too, with the same result") {
  const BucketRun base = RunWithBucket(2, 2, DType::kBF16, 0, "Lamb");
  const int64_t big = *std::max_element(base.slices.begin(), base.slices.end());
  const int64_t bucket = 2 * (big / 3) + 2;
  const BucketRun r = RunWithBucket(2, 2, DType::kBF16, bucket, "Lamb");
  CHECK(r.losses == base.losses);
  CHECK(r.params == base.params);
  int64_t chunks = 0;
  for (int64_t sl : r.slices) chunks += zero::CeilDiv(sl, bucket);
  CHECK(chunks > static_cast<int64_t>(r.slices.size()));
  CHECK(r.gather_calls == chunks * kSteps);
  CHECK(r.gather_bytes_sent == base.gather_bytes_sent);
  CheckStaging(r, base, 2 * 2 * bucket * 2);  // two bf16 buffers of W·B
}

TEST_CASE("engine allgather_bucket_size: one rank gathers nothing, whatever the bucket") {
  const BucketRun r = RunWithBucket(2, 1, DType::kBF16, 8);
  const BucketRun base = RunWithBucket(2, 1, DType::kBF16, 0);
  CHECK(r.gather_calls == 0);
  CheckStaging(r, base, 0);
  CHECK(r.params == base.params);
}

}  // TEST_SUITE

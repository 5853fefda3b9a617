// The memory estimator (zero/estimate.h) against the engine's measured accounting: a tiny GPT trains
// on the local backend at stages 0-3 on N = 1..4 ranks; the estimate of each model-state category
// (params, grads, master, optimizer) must equal the current bytes after the steps, and the transient
// estimates must bound the measured peaks (buckets; stage-3 gathered parameters on top of the shards).
// Also zerorun-config estimate's exit codes and its reading of a config file.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

#include "engine_test_util.h"
#include "zerorun/zero/estimate.h"
#include "zerorun/zero/partition.h"
#include "zerorun/zero/strategy.h"

using namespace zrtest;
namespace fs = std::filesystem;

namespace {

struct Case {
  int stage = 0;
  int world = 1;
  DType dtype = DType::kBF16;
  DType grad_dtype = DType::kBF16;  // data_types.grad_accum_dtype (set with extra_json)
  DType comm_dtype = DType::kBF16;  // communication_data_type (set with extra_json)
  std::string extra_json;           // extra top-level keys
  std::string zero_json;  // extra zero_optimization keys
  int64_t prefetch = 50'000'000;
  int64_t max_live = 1'000'000'000;
  int64_t persistence = 100'000;
  zero::OffloadTarget offload_param = zero::OffloadTarget::kNone;  // with a matching offload_param in zero_json
  int64_t param_buffers = 5;                                       // its buffer_count
};

struct Measured {
  zero::StageEstimate est;
  int64_t params = 0, grads = 0, master = 0, optimizer = 0, buckets_now = 0;
  int64_t params_peak = 0, buckets_peak = 0;
  int64_t pad_numel = 0, psi = 0;  // padded and real parameter elements
  int64_t shard_store_bytes = -1;  // parameter offload: what the shard store holds in host memory
  int64_t shard_units = 0;
  int64_t largest_bucket_bytes = 0;  // stage 2: the largest gradient bucket of the engine's layout
};

// Largest-layer size as the estimator defines it for the engine's stage-3 windows: the most padded
// elements of non-persistent parameters held by one module and its ancestors (windows nest), plus
// every tied parameter (its full gradient survives from one module's backward to the other's).
int64_t LargestLayer(nn::Module& root, int world, int64_t threshold) {
  std::map<nn::Parameter*, int> uses;
  for (nn::Module* m : root.Modules()) {
    for (nn::Parameter* p : m->DirectParameters()) uses[p]++;
  }
  auto padded = [&](nn::Parameter* p) { return p->numel() > threshold ? zero::AlignUp(p->numel(), world) : 0; };
  int64_t chain_max = 0;
  for (nn::Module* m : root.Modules()) {
    int64_t sum = 0;
    for (nn::Module* a = m; a != nullptr; a = a->parent()) {
      for (nn::Parameter* p : a->DirectParameters()) sum += padded(p);
    }
    chain_max = std::max(chain_max, sum);
  }
  int64_t tied = 0;
  for (auto [p, n] : uses) {
    if (n > 1) tied += zero::AlignUp(p->numel(), world);
  }
  return chain_max + tied;
}

std::vector<Measured> Run(const Case& k) {
  std::vector<Measured> out(static_cast<size_t>(k.world));
  std::mutex mu;
  comm::RunLocalRanks(k.world, [&](comm::Communicator& c) {
    RunSpec s;
    s.world = k.world;
    s.stage = k.stage;
    s.micro = 2;
    s.dtype = k.dtype;
    s.zero_json = k.zero_json;
    s.extra_json = k.extra_json;
    runtime::Config cfg = LoadSpecConfig(s);
    gpt::Gpt model(TinyGpt(k.dtype));
    model.Initialize(3);
    runtime::Engine engine(model, cfg, c);

    zero::EstimateInput in;
    for (const auto& g : engine.param_groups()) {
      std::vector<int64_t> numels;
      for (auto* p : g.params) numels.push_back(p->numel());
      in.groups.push_back(numels);
    }
    in.world_size = k.world;
    in.param_bytes = static_cast<int>(DTypeSize(k.dtype));
    in.grad_bytes = static_cast<int>(DTypeSize(k.dtype == DType::kF32 ? k.dtype : k.grad_dtype));
    in.comm_bytes = static_cast<int>(DTypeSize(k.dtype == DType::kF32 ? k.dtype : k.comm_dtype));
    in.optimizer_state_bytes = zero::OptimizerStateBytesFor("AdamW");
    in.prefetch_numel = k.prefetch;
    in.max_live_numel = k.max_live;
    in.persistence_threshold = k.persistence;
    in.reduce_bucket_numel = cfg.zero_optimization.reduce_bucket_size;
    in.largest_layer = LargestLayer(model, k.world, k.persistence);
    in.param_buffer_count = k.param_buffers;

    MemoryAccount& m = engine.memory();
    m.ResetPeaks();
    for (int step = 0; step < 3; ++step) {
      auto [x, y] = MicroBatch(step, 0, c.rank(), k.world, 2, 1, 8, 16);
      engine.Forward(x, y);
      engine.Backward();
      engine.Step();
    }
    Measured r;
    r.est = zero::EstimateStage(in, k.stage, zero::OffloadTarget::kNone, k.offload_param);
    if (zero::ShardStore* st = engine.zero_strategy().shard_store()) {
      r.shard_store_bytes = st->resident_bytes();
      r.shard_units = st->layout().num_units();
    }
    r.pad_numel = zero::PaddedNumel(in, k.stage);
    for (const auto& g : in.groups) {
      const zero::FlatGroupLayout l = zero::LayoutFlatGroup(g, k.world, 2, in.round_robin, std::max<int64_t>(1, in.reduce_bucket_numel));
      for (const zero::FlatBucket& b : l.buckets) {
        r.largest_bucket_bytes = std::max(r.largest_bucket_bytes, b.range.size() * in.grad_bytes);
      }
    }
    r.psi = engine.num_parameters();
    r.params = m.Current(MemCategory::kParams);
    r.grads = m.Current(MemCategory::kGrads);
    r.master = m.Current(MemCategory::kMaster);
    r.optimizer = m.Current(MemCategory::kOptimizer);
    r.buckets_now = m.Current(MemCategory::kBuckets);
    r.params_peak = m.Peak(MemCategory::kParams);
    r.buckets_peak = m.Peak(MemCategory::kBuckets);
    std::lock_guard<std::mutex> lock(mu);
    out[static_cast<size_t>(c.rank())] = r;
  });
  return out;
}

void CheckCase(const Case& k) {
  for (const Measured& r : Run(k)) {
    const zero::StageEstimate& e = r.est;
    if (k.offload_param != zero::OffloadTarget::kNone) {
      // The shard store's host memory: the estimate, plus each unit's 64-byte alignment (cpu) or each
      // buffer's 4 KiB alignment (nvme), and the allocation's page rounding.
      REQUIRE(r.shard_store_bytes >= 0);
      CHECK(r.shard_store_bytes >= e.host_bytes);
      const int64_t slack = k.offload_param == zero::OffloadTarget::kCpu ? 64 * r.shard_units : 4096 * k.param_buffers;
      CHECK(r.shard_store_bytes <= e.host_bytes + slack + 4096);
    }
    CHECK(r.params == e.params_bytes);
    CHECK(r.grads == e.grads_bytes);
    CHECK(r.master == e.master_bytes);
    CHECK(r.optimizer == e.optimizer_bytes);
    // Between steps no reduction buffer is held.
    CHECK(r.buckets_now == 0);
    // Transient buffers are freed as each reduction completes, and at most two travel at once: the
    // estimate is an upper bound. How many are alive together depends on how fast the reductions run
    // (a machine with idle cores finishes them sooner), so the floor is what cannot be avoided: at
    // stage 2 every bucket's buffer exists in full before it is reduced.
    CHECK(r.buckets_peak <= e.buckets_peak_bytes);
    if (k.stage == 2) {
      CHECK(r.largest_bucket_bytes > 0);
      CHECK(r.buckets_peak >= r.largest_bucket_bytes);
    }
    CHECK(r.params_peak <= e.params_bytes + e.live_params_peak_bytes);
    if (k.stage <= 2) {
      CHECK(r.params_peak == r.params);
    } else {
      // Stage 3: the gathered-parameter bound is not idle: within 25 % of the measured peak.
      CHECK(r.params_peak > r.params);
      CHECK(4 * (e.params_bytes + e.live_params_peak_bytes) <= 5 * r.params_peak);
    }
  }
}

struct ToolRun {
  int rc;
  std::string out, err;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ToolRun Tool(const std::string& args) {
  const char* d = std::getenv("ZERORUN_TEST_BINARY_DIR");
  const std::string bin = d ? std::string(d) + "/bin" : std::string("bin");
  const fs::path dir = fs::temp_directory_path() / ("zr_estimate_tool_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cmd =
      bin + "/zerorun-config estimate " + args + " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  const int status = std::system(cmd.c_str());
  ToolRun r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(dir / "out"), Slurp(dir / "err")};
  fs::remove_all(dir);
  return r;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("estimate vs measured: bf16 AdamW, stages 0-3, N = 1..4") {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world = 1; world <= 4; ++world) {
      CAPTURE(stage);
      CAPTURE(world);
      Case k;
      k.stage = stage;
      k.world = world;
      // Nothing persistent, and a small prefetch window so the live bound is below the whole model.
      k.persistence = 0;
      k.prefetch = 300;
      k.zero_json = R"(, "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 300)";
      CheckCase(k);
    }
  }
}

TEST_CASE("estimate vs measured: stage 3 persistence and max live; fp32 (no master)") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    Case k;
    k.stage = 3;
    k.world = world;
    k.persistence = 16;  // the LayerNorm weights and biases stay whole
    k.max_live = 100;
    k.zero_json = R"(, "stage3_param_persistence_threshold": 16, "stage3_max_live_parameters": 100)";
    CheckCase(k);
  }
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    Case k;
    k.stage = stage;
    k.world = 2;
    k.dtype = DType::kF32;
    k.persistence = 0;
    k.zero_json = R"(, "stage3_param_persistence_threshold": 0)";
    CheckCase(k);
  }
}

TEST_CASE("estimate vs measured: parameter offload (cpu, nvme), bf16 and fp32 (a master copy then)") {
  const std::string dir = fs::temp_directory_path() / ("zr_estimate_swap_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (zero::OffloadTarget t : {zero::OffloadTarget::kCpu, zero::OffloadTarget::kNvme}) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      for (int world : {1, 2, 3}) {
        CAPTURE(std::string(zero::OffloadTargetName(t)));
        CAPTURE(std::string(DTypeName(dtype)));
        CAPTURE(world);
        Case k;
        k.stage = 3;
        k.world = world;
        k.dtype = dtype;
        k.persistence = 0;
        k.prefetch = 300;
        k.offload_param = t;
        k.param_buffers = 3;
        k.zero_json = Format(R"(, "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 300,
                                "offload_param": {{"device": "{}", "nvme_path": "{}", "buffer_count": 3}})",
                             zero::OffloadTargetName(t), dir);
        CheckCase(k);
      }
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("estimate vs measured: fp32 on the wire, fp32 gradient accumulation") {
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    Case k;
    k.stage = stage;
    k.world = 2;
    k.comm_dtype = DType::kF32;
    k.persistence = 0;
    k.extra_json = R"(, "communication_data_type": "fp32")";
    k.zero_json = R"(, "stage3_param_persistence_threshold": 0)";
    CheckCase(k);
  }
  for (int stage = 1; stage <= 3; ++stage) {
    CAPTURE(stage);
    Case k;
    k.stage = stage;
    k.world = 3;
    k.grad_dtype = DType::kF32;
    k.comm_dtype = DType::kF32;
    k.persistence = 0;
    k.extra_json = R"(, "data_types": {"grad_accum_dtype": "fp32"}, "communication_data_type": "fp32")";
    k.zero_json = R"(, "stage3_param_persistence_threshold": 0)";
    CheckCase(k);
  }
}

TEST_CASE("zerorun-config estimate: exit codes and a config file's choices") {
  ToolRun ok = Tool("--params 7.5B --world-size 64 --largest-layer 100M --budget 24GiB");
  CHECK(ok.rc == 0);
  CHECK(ok.out.find("stage 3 ") != std::string::npos);
  CHECK(ok.out.find("stage 3 + params→nvme ") != std::string::npos);  // parameter offload alone is a choice too
  CHECK(ok.out.find("params→nvme: in the swap file") != std::string::npos);
  CHECK(ok.out.find("Activations are not included") != std::string::npos);
  CHECK(Tool("--params 1e9").rc == 2);                                     // no --world-size
  CHECK(Tool("--world-size 2").rc == 2);                                   // no --params
  CHECK(Tool("--params 1e9 --world-size 2 --budget 12XB").rc == 2);
  CHECK(Tool("--params 1e9 --world-size 2 --dtype fp8").rc == 2);
  CHECK(Tool("--params 1e9 --world-size 2 --optimizer Muon").rc == 2);
  CHECK(Tool("--params 1e9 --world-size 2 /nonexistent/ds.json").rc == 2);

  const fs::path cfg = fs::temp_directory_path() / (std::to_string(::getpid()) + "_estimate_ds.json");
  std::ofstream(cfg) << R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
    "optimizer": {"type": "Lion", "params": {"lr": 1e-4}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})";
  ToolRun f = Tool("--params 1e9 --world-size 4 " + cfg.string());
  fs::remove(cfg);
  CHECK(f.rc == 0);
  CHECK(f.out.find("Lion, 4 bytes") != std::string::npos);
  CHECK(f.out.find("stage 2 + optimizer→cpu (config)") != std::string::npos);
}

}  // TEST_SUITE

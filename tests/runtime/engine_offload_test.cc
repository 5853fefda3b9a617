// CPU optimizer offload (offload_optimizer.device "cpu", ZeRO-Offload): the fp32 master weights and
// optimizer state live in host buffers of offload/host_state_store.h, the partition's gradients land
// in host memory as their buckets are reduced, the fused optimizer steps there and the results come
// back — the same arithmetic, so losses and parameters are bitwise those of training without offload,
// at stages 1-3, 1-3 ranks, fp32 / bf16 / fp16, with gradient accumulation, over 20 steps. The memory account shows the state as pinned host
// memory and none of it as device master/optimizer memory.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "engine_test_util.h"
#include "zerorun/offload/nvme_state_store.h"
#include "zerorun/offload/shard_stores.h"
#include "zerorun/runtime/engine_validate.h"
#include "zerorun/zero/estimate.h"
#include "zerorun/zero/strategy.h"

using namespace zrtest;

namespace {

const char* kCpuOffload = R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true})";

// `off` trained exactly as `none`: every loss, skip, loss scale and final parameter bit for bit.
void CheckSameRun(const RunResult& off, const RunResult& none, int world) {
  CHECK(off.losses == none.losses);
  CHECK(off.skipped == none.skipped);
  CHECK(off.scales == none.scales);
  for (int r = 0; r < world; ++r) {
    CHECK(off.final_params[static_cast<size_t>(r)] == none.final_params[static_cast<size_t>(r)]);
  }
}

void CheckCpuOffloadBitwise(DType dtype) {
  for (int stage = 1; stage <= 3; ++stage) {
    for (int world = 1; world <= 3; ++world) {
      CAPTURE(stage);
      CAPTURE(world);
      RunSpec s;
      s.world = world;
      s.stage = stage;
      s.micro = 2;
      s.gas = 2;
      s.steps = 20;
      s.dtype = dtype;
      s.zero_json = R"(, "sub_group_size": 300)";  // several sub-groups per partition
      const RunResult none = Train(s);
      s.zero_json += kCpuOffload;
      const RunResult cpu = Train(s);
      REQUIRE(none.losses.size() == 20);
      CheckSameRun(cpu, none, world);
    }
  }
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("cpu offload: bitwise equal to no offload, fp32, stages 1-3 x 1-3 ranks, accumulation, 20 steps") {
  CheckCpuOffloadBitwise(DType::kF32);
}

TEST_CASE("cpu offload: bitwise equal to no offload, bf16, stages 1-3 x 1-3 ranks, accumulation, 20 steps") {
  CheckCpuOffloadBitwise(DType::kBF16);
}

TEST_CASE("cpu offload: bitwise equal to no offload, fp16, stages 1-3 x 1-3 ranks, accumulation, 20 steps") {
  CheckCpuOffloadBitwise(DType::kF16);
}

TEST_CASE("cpu offload: the state is pinned host memory, not device master/optimizer memory") {
  for (int stage = 1; stage <= 3; ++stage) {
    for (const char* pin : {"true", "false"}) {
      CAPTURE(stage);
      CAPTURE(pin);
      RunSpec s;
      s.world = 1;
      s.stage = stage;
      s.micro = 2;
      s.dtype = DType::kBF16;
      s.zero_json = Format(R"(, "offload_optimizer": {{"device": "cpu", "pin_memory": {}}})", pin);
      runtime::Config cfg = LoadSpecConfig(s);
      comm::RunLocalRanks(1, [&](comm::Communicator& c) {
        gpt::Gpt model(TinyGpt(DType::kBF16));
        model.Initialize(3);
        runtime::Engine engine(model, cfg, c);
        auto [x, y] = MicroBatch(0, 0, 0, 1, 2, 1, 8, 16);
        engine.Forward(x, y);
        engine.Backward();
        engine.Step();
        const zero::StateStore& store = engine.zero_strategy().state_store();
        CHECK(store.offloaded());
        MemoryAccount& m = engine.memory();
        const int64_t state = store.resident_bytes();
        // master + exp_avg + exp_avg_sq of every partition element, 4 bytes each (pinned: page-rounded).
        const int64_t numel = [&] {
          int64_t n = 0;
          for (int64_t g : store.layout().group_numels) n += g;
          return n;
        }();
        CHECK(state >= 12 * numel);
        // The partition's bf16 gradients were landed in (pinned, through the device's backend) host
        // memory as they were reduced: at stages 2/3 there is no device gradient buffer; stage 1 keeps
        // its full gradients besides. Then one sub-group's staging of 16-bit parameters.
        const int64_t grads = 2 * numel, staging = 2 * store.layout().LargestSubGroupNumel();
        if (stage >= 2) CHECK(m.Current(MemCategory::kGrads) == 0);
        if (stage == 1) CHECK(m.Current(MemCategory::kGrads) >= 2 * numel);
        if (std::string(pin) == "true") {
          CHECK(store.placement() == "cpu (pinned host memory)");
          CHECK(m.Current(MemCategory::kMaster) == 0);
          CHECK(m.Current(MemCategory::kOptimizer) == 0);
          CHECK(m.Current(MemCategory::kPinned) >= state + grads + staging);
          CHECK(m.Current(MemCategory::kPinned) <= state + grads + staging + 8192);
        } else {
          CHECK(store.placement() == "cpu (pageable host memory)");
          CHECK(m.Current(MemCategory::kMaster) == 4 * numel);
          CHECK(m.Current(MemCategory::kOptimizer) == 8 * numel);
          CHECK(m.Current(MemCategory::kPinned) == grads + staging);
        }
      });
    }
  }
}

TEST_CASE("cpu offload: refused by name at stage 0, with ratio < 1, with super_offload") {
  auto problem = [](const std::string& zero, int stage) {
    RunSpec s;
    s.stage = stage;
    s.zero_json = zero;
    try {
      runtime::Config cfg = LoadSpecConfig(s);
      runtime::ValidateForEngine(cfg, 1);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(problem(kCpuOffload, 0).find("offload_optimizer.device") != std::string::npos);
  const std::string ratio = problem(R"(, "offload_optimizer": {"device": "cpu", "ratio": 0.5})", 3);
  CHECK(ratio.find("zero_optimization.offload_optimizer.ratio") != std::string::npos);
  CHECK(ratio.find("partial optimizer offload") != std::string::npos);
  const std::string super = problem(R"(, "offload_optimizer": {"device": "cpu", "super_offload": true})", 3);
  CHECK(super.find("zero_optimization.offload_optimizer.super_offload") != std::string::npos);
  CHECK(problem(kCpuOffload, 2).empty());
}

}  // TEST_SUITE

// ---- NVMe optimizer offload -----------------------------------------------------------------------

namespace {

// A fresh directory under TMPDIR (or /tmp) for swap files, removed afterwards.
class SwapTemp {
 public:
  SwapTemp() {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/zerorun-nvme-engine-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~SwapTemp() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string NvmeJson(const std::string& path, bool pipeline, int buffers = 2) {
  return Format(R"(, "offload_optimizer": {{"device": "nvme", "nvme_path": "{}", "buffer_count": {},
                 "pipeline_read": {}, "pipeline_write": {}}})",
                path, buffers, pipeline ? "true" : "false", pipeline ? "true" : "false");
}

void CheckNvmeOffloadBitwise(DType dtype) {
  SwapTemp dir;
  for (int stage = 1; stage <= 3; ++stage) {
    for (int world = 1; world <= 3; ++world) {
      CAPTURE(stage);
      CAPTURE(world);
      RunSpec s;
      s.world = world;
      s.stage = stage;
      s.micro = 2;
      s.gas = 2;
      s.steps = 20;
      s.dtype = dtype;
      s.zero_json = R"(, "sub_group_size": 300)";
      const RunResult none = Train(s);
      s.zero_json += NvmeJson(dir.path(), (stage + world) % 2 == 0);  // pipelined or not, alternately
      const RunResult nvme = Train(s);
      REQUIRE(none.losses.size() == 20);
      CheckSameRun(nvme, none, world);
    }
  }
  CHECK(std::filesystem::is_empty(dir.path()));  // every job removed its swap directory
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("nvme offload: bitwise equal to no offload, fp32, stages 1-3 x 1-3 ranks, accumulation, 20 steps") {
  CheckNvmeOffloadBitwise(DType::kF32);
}

TEST_CASE("nvme offload: bitwise equal to no offload, bf16, stages 1-3 x 1-3 ranks, accumulation, 20 steps") {
  CheckNvmeOffloadBitwise(DType::kBF16);
}

TEST_CASE("nvme offload: bitwise equal to no offload, fp16, stages 1-3 x 1-3 ranks, accumulation, 20 steps") {
  CheckNvmeOffloadBitwise(DType::kF16);
}

TEST_CASE("nvme offload: host memory for the state is buffer_count sub-groups, as the estimator says; it swaps") {
  SwapTemp dir;
  for (int stage = 1; stage <= 3; ++stage) {
    CAPTURE(stage);
    RunSpec s;
    s.world = 2;
    s.stage = stage;
    s.micro = 2;
    s.dtype = DType::kBF16;
    s.zero_json = R"(, "sub_group_size": 300)" + NvmeJson(dir.path(), true, 3);
    runtime::Config cfg = LoadSpecConfig(s);
    comm::RunLocalRanks(2, [&](comm::Communicator& c) {
      gpt::Gpt model(TinyGpt(DType::kBF16));
      model.Initialize(3);
      runtime::Engine engine(model, cfg, c);
      for (int step = 0; step < 3; ++step) {
        auto [x, y] = MicroBatch(step, 0, c.rank(), 2, 2, 1, 8, 16);
        engine.Forward(x, y);
        engine.Backward();
        engine.Step();
      }
      zero::StateStore& store = engine.zero_strategy().state_store();
      auto* nvme = dynamic_cast<offload::NvmeStateStore*>(&store);
      REQUIRE(nvme != nullptr);
      const offload::NvmeStateStoreStats st = nvme->stats();
      const zero::StateStoreLayout& l = store.layout();
      CHECK(l.num_sub_groups() > 3);  // more sub-groups than buffers: it must swap
      CHECK(st.buffers == 3);
      CHECK(st.swap_ins > 0);
      CHECK(st.swap_outs >= 4 * l.num_sub_groups());  // initial write-out + one per step
      CHECK(st.file.find("/rank" + std::to_string(c.rank()) + "/") != std::string::npos);
      // Host memory of the state: the three buffers, nothing else (master and optimizer: 0 B).
      MemoryAccount& m = engine.memory();
      CHECK(m.Current(MemCategory::kMaster) == 0);
      CHECK(m.Current(MemCategory::kOptimizer) == 0);
      CHECK(store.resident_bytes() == offload::NvmeStateStoreHostBytes(l, 3));
      // The partition's bf16 gradients land in pinned host memory (stages 2/3: only there; stage 1
      // keeps its full gradients on the device too).
      int64_t own = 0;
      for (int64_t g : l.group_numels) own += g;
      const int64_t host_grads = 2 * own;
      if (stage >= 2) CHECK(m.Current(MemCategory::kGrads) == 0);
      if (stage == 1) CHECK(m.Current(MemCategory::kGrads) >= 2 * 2 * own);
      // pinned = the buffers + one footer block per swap-file slot + the host gradients + the
      // optimizer's staging of one sub-group's parameters.
      const int64_t staging = 2 * l.LargestSubGroupNumel();
      CHECK(m.Current(MemCategory::kPinned) <=
            store.resident_bytes() + 2 * l.num_sub_groups() * 4096 + host_grads + staging + 8192);
      CHECK(m.Current(MemCategory::kPinned) >= store.resident_bytes() + host_grads);
      // The estimator: buffer_count × sub_group_size × (master + 2 moments), up to one unit per buffer
      // (a sub-group closes once it reaches sub_group_size) and the 4 KiB rounding; and the gradients.
      zero::EstimateInput in;
      in.groups = {{own * 2}};
      in.world_size = 2;
      in.sub_group_numel = 300;
      in.nvme_buffer_count = 3;
      const zero::StageEstimate e = zero::EstimateStage(in, 3, zero::OffloadTarget::kNvme);
      REQUIRE(in.grad_bytes == 2);
      CHECK(e.host_bytes == 3 * 12 * 300 + host_grads);
      CHECK(store.resident_bytes() + host_grads >= e.host_bytes);
      CHECK(store.resident_bytes() <= 3 * 12 * l.LargestSubGroupNumel() + 3 * 4096);
    });
  }
}

TEST_CASE("nvme offload: nvme_path missing or not a directory -> an IoError naming the key at engine construction") {
  SwapTemp dir;
  for (const std::string& path : {dir.path() + "/missing", std::string("/proc/version")}) {
    RunSpec s;
    s.stage = 2;
    s.micro = 2;
    s.zero_json = NvmeJson(path, false);
    runtime::Config cfg = LoadSpecConfig(s);
    std::string msg;
    comm::RunLocalRanks(1, [&](comm::Communicator& c) {
      gpt::Gpt model(TinyGpt(DType::kF32));
      model.Initialize(3);
      try {
        runtime::Engine engine(model, cfg, c);
      } catch (const IoError& e) {
        msg = e.what();
      }
    });
    CAPTURE(msg);
    CHECK(msg.find("zero_optimization.offload_optimizer.nvme_path") != std::string::npos);
    CHECK(msg.find(path) != std::string::npos);
  }
}

}  // TEST_SUITE

// ---- parameter offload (offload_param, stage 3) ---------------------------------------------------

namespace {

std::string ParamOffloadJson(const std::string& device, const std::string& path, int buffers = 2) {
  return Format(R"(, "offload_param": {{"device": "{}", "nvme_path": "{}", "buffer_count": {}, "buffer_size": 100000}})",
                device, path, buffers);
}

// Stage 3 with the 16-bit shards in host memory (cpu) or swap files (nvme), alone and with optimizer
// offload, against no offload: bitwise the same losses and parameters. World 2 and 3 also gather every
// parameter on demand (persistence threshold 0) instead of keeping small ones resident, through a small
// prefetch window (so nvme reads the next window's shards ahead of their gathers).
void CheckParamOffloadBitwise(DType dtype) {
  SwapTemp dir;
  for (int world = 1; world <= 3; ++world) {
    CAPTURE(world);
    RunSpec s;
    s.world = world;
    s.stage = 3;
    s.micro = 2;
    s.gas = 2;
    s.steps = 20;
    s.dtype = dtype;
    s.zero_json = world == 1 ? R"(, "sub_group_size": 300)"
                             : R"(, "sub_group_size": 300, "stage3_param_persistence_threshold": 0,
                                  "stage3_prefetch_bucket_size": 600)";
    const RunResult none = Train(s);
    REQUIRE(none.losses.size() == 20);
    const std::string base = s.zero_json;
    const std::string with_optimizer = world % 2 == 0 ? NvmeJson(dir.path(), true) : kCpuOffload;
    for (const std::string& offload :
         {ParamOffloadJson("cpu", dir.path()), ParamOffloadJson("nvme", dir.path()),
          ParamOffloadJson(world % 2 == 0 ? "nvme" : "cpu", dir.path(), 3) + with_optimizer}) {
      CAPTURE(offload);
      s.zero_json = base + offload;
      CheckSameRun(Train(s), none, world);
    }
  }
  CHECK(std::filesystem::is_empty(dir.path()));  // every job removed its swap directories
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("param offload: bitwise equal to no offload, fp32, cpu/nvme, alone and with optimizer offload, 1-3 ranks") {
  CheckParamOffloadBitwise(DType::kF32);
}

TEST_CASE("param offload: bitwise equal to no offload, bf16, cpu/nvme, alone and with optimizer offload, 1-3 ranks") {
  CheckParamOffloadBitwise(DType::kBF16);
}

TEST_CASE("param offload: bitwise equal to no offload, fp16, cpu/nvme, alone and with optimizer offload, 1-3 ranks") {
  CheckParamOffloadBitwise(DType::kF16);
}

TEST_CASE("param offload: Lamb (two passes, per-tensor trust ratios over split tensors) bitwise too") {
  SwapTemp dir;
  for (int world : {1, 2}) {
    CAPTURE(world);
    RunSpec s;
    s.world = world;
    s.stage = 3;
    s.micro = 2;
    s.steps = 10;
    s.dtype = DType::kBF16;
    s.optimizer = "Lamb";
    s.zero_json = R"(, "sub_group_size": 300, "stage3_param_persistence_threshold": 0)";
    const RunResult none = Train(s);
    s.zero_json += ParamOffloadJson("nvme", dir.path());
    CheckSameRun(Train(s), none, world);
  }
}

TEST_CASE("param offload: no shard in device memory; nvme holds buffer_count shards in host memory and swaps") {
  SwapTemp dir;
  for (const char* device : {"cpu", "nvme"}) {
    CAPTURE(device);
    RunSpec s;
    s.world = 2;
    s.stage = 3;
    s.micro = 2;
    s.dtype = DType::kBF16;
    s.zero_json = R"(, "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 8000)" +
                  ParamOffloadJson(device, dir.path(), 3);
    runtime::Config cfg = LoadSpecConfig(s);
    gpt::GptConfig gc = TinyGpt(DType::kBF16);
    gc.n_layer = 4;  // many shards, the largest (4 x 32 x 32 / 2 ranks) a small part of them
    gc.d_model = 32;
    comm::RunLocalRanks(2, [&](comm::Communicator& c) {
      gpt::Gpt model(gc);
      model.Initialize(3);
      runtime::Engine engine(model, cfg, c);
      for (int step = 0; step < 3; ++step) {
        auto [x, y] = MicroBatch(step, 0, c.rank(), 2, 2, 1, 8, 16);
        engine.Forward(x, y);
        engine.Backward();
        engine.Step();
      }
      zero::ShardStore* store = engine.zero_strategy().shard_store();
      REQUIRE(store != nullptr);
      const zero::ShardStoreLayout& l = store->layout();
      MemoryAccount& m = engine.memory();
      // Between steps nothing is gathered (no persistent parameters) and no shard is device memory.
      CHECK(m.Current(MemCategory::kParams) == 0);
      if (std::string(device) == "cpu") {
        CHECK(store->placement() == "cpu (pinned host memory)");
        CHECK(store->resident_bytes() >= 2 * l.TotalNumel());
        CHECK(m.Current(MemCategory::kPinned) >= store->resident_bytes());
        return;
      }
      auto* nvme = dynamic_cast<offload::NvmeShardStore*>(store);
      REQUIRE(nvme != nullptr);
      const offload::NvmeShardStoreStats st = nvme->stats();
      CHECK(l.num_units() > 3);  // more shards than buffers: it must swap
      CHECK(st.buffers == 3);
      CHECK(st.file.find("/rank" + std::to_string(c.rank()) + "/") != std::string::npos);
      CHECK(st.file.find(".params/") != std::string::npos);
      CHECK(st.swap_outs >= 4 * l.num_units());  // the initial write + one per step
      CHECK(st.swap_ins >= 3 * l.num_units());   // every shard read at least once per forward
      CHECK(st.prefetches > 0);                  // the next window's shards, read ahead of their gathers
      // Host memory for the shards: the three buffers (each the largest shard), as the estimate says.
      CHECK(store->resident_bytes() == offload::NvmeShardStoreHostBytes(l, 3));
      CHECK(store->resident_bytes() < 2 * l.TotalNumel());
      CHECK(store->resident_bytes() <= 3 * (2 * l.LargestUnitNumel() + 4096));
    });
  }
}

TEST_CASE("param offload: buffer_size below the largest shard, nvme_path missing -> errors naming the key") {
  SwapTemp dir;
  auto construct = [](const std::string& zero) {
    RunSpec s;
    s.stage = 3;
    s.micro = 2;
    s.zero_json = zero;
    runtime::Config cfg = LoadSpecConfig(s);
    std::string msg;
    comm::RunLocalRanks(1, [&](comm::Communicator& c) {
      gpt::Gpt model(TinyGpt(DType::kF32));
      model.Initialize(3);
      try {
        runtime::Engine engine(model, cfg, c);
      } catch (const Error& e) {
        msg = e.what();
      }
    });
    return msg;
  };
  const std::string small = construct(Format(
      R"(, "offload_param": {{"device": "nvme", "nvme_path": "{}", "buffer_size": 100}})", dir.path()));
  CAPTURE(small);
  CHECK(small.find("zero_optimization.offload_param.buffer_size") != std::string::npos);
  CHECK(small.find("parameter '") != std::string::npos);  // names the parameter whose shard does not fit
  const std::string missing = construct(ParamOffloadJson("nvme", dir.path() + "/missing"));
  CAPTURE(missing);
  CHECK(missing.find("zero_optimization.offload_param.nvme_path") != std::string::npos);
  CHECK(missing.find("does not exist") != std::string::npos);
  CHECK(std::filesystem::is_empty(dir.path()));
}

}  // TEST_SUITE

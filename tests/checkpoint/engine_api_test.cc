// Engine::SaveCheckpoint / LoadCheckpoint with DeepSpeed's semantics (reference §6): default tag
// global_step<N>, `latest`, no latest = nothing loaded, client_state, load_module_only,
// load_optimizer_states, load_module_strict, exclude_frozen_parameters, tag_validation; a damaged
// checkpoint fails on every rank alike and leaves the engine unchanged; saving inside an
// accumulation window is refused.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>

#include "tests/checkpoint/engine_ckpt_util.h"
#include "zerorun/runtime/optim/optimizer.h"
#include "zerorun/zero/state_store.h"
#include "zerorun/zero/strategy.h"

namespace {

using namespace ckpttest;
using namespace enginetest;

// Slot `slot` of every trainable parameter's master/state on this rank, concatenated in extent order.
std::vector<float> StoreSlot(Engine& e, const std::string& slot) {
  zero::StateStore& store = e.zero_strategy().state_store();
  const int k = store.layout().SlotIndex(slot);
  REQUIRE(k >= 0);
  std::vector<float> out;
  for (const zero::StateExtent& x : e.zero_strategy().StateExtents()) {
    std::vector<float> v(static_cast<size_t>(x.numel));
    zero::ReadState(store, k, x.group, {x.partition_offset, x.partition_offset + x.numel}, v.data());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

struct Trained {
  std::vector<float> params;  // full parameters
  std::vector<float> master, exp_avg;
};

// Trains `steps` steps of case c on one rank and saves to dir (options as given).
Trained TrainAndSave(const ResumeCase& c, int steps, const fs::path& dir, const SaveCheckpointOptions& so = {}) {
  Trained t;
  comm::RunLocalRanks(1, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(7);
    Engine engine(model, ResumeConfig(c, 1), comm);
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = zrtest::MicroBatch(s, 0, 0, 1, c.micro, 1, 8, 16);
      engine.Forward(x, y);
      engine.Backward();
      engine.Step();
    }
    engine.SaveCheckpoint(dir.string(), so);
    t.params = zrtest::FlatParameters(engine);
    t.master = StoreSlot(engine, "master");
    t.exp_avg = StoreSlot(engine, "exp_avg");
  });
  return t;
}

ResumeCase OneRankCase() {
  ResumeCase c;
  c.world = 1;
  c.stage = 1;
  c.dtype = DType::kBF16;
  c.dropout = 0;
  return c;
}

// Loads `load_dir` with `lo` on 2 fresh ranks of case c, each expected to fail with CheckpointError:
// returns their messages. The step state is restored only after every byte was applied, so it stays
// 0; the parameters too when `unchanged`.
std::vector<std::string> FailedLoads(const ResumeCase& c, const fs::path& load_dir, const LoadCheckpointOptions& lo,
                                     bool unchanged) {
  std::atomic<int> failed{0};
  std::mutex mu;
  std::vector<std::string> messages;
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(7);
    Engine engine(model, ResumeConfig(c, 2), comm);
    const std::vector<float> before = zrtest::FlatParameters(engine);
    try {
      engine.LoadCheckpoint(load_dir.string(), lo);
    } catch (const CheckpointError& e) {
      ++failed;
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(e.what());
    }
    CHECK(engine.global_steps() == 0);
    if (unchanged) CHECK(zrtest::FlatParameters(engine) == before);
  });
  CHECK(failed == 2);
  return messages;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("checkpoint engine: default tag global_step<N>, latest, client state; no latest loads nothing") {
  const fs::path dir = TempDir("engine_api_tag");
  ResumeCase c = OneRankCase();
  SaveCheckpointOptions so;
  so.client_state_json = R"({"epoch": 3, "note": "hi"})";
  TrainAndSave(c, 3, dir / "ck", so);
  CHECK(fs::is_directory(dir / "ck" / "global_step3"));
  CHECK(ReadBytes(dir / "ck" / "latest") == "global_step3");
  comm::RunLocalRanks(1, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(8);
    Engine engine(model, ResumeConfig(c, 1), comm);
    LoadCheckpointResult r = engine.LoadCheckpoint((dir / "ck").string());
    CHECK(r.loaded);
    CHECK(r.tag == "global_step3");
    CHECK(r.client_state_json.find("\"note\"") != std::string::npos);
    CHECK(engine.global_steps() == 3);
    CHECK(engine.optimizer().step_count(0) == 3);
    // DeepSpeed: no latest file (or no directory at all) = nothing loaded, nothing changed.
    fs::create_directories(dir / "empty");
    for (const fs::path& p : {dir / "empty", dir / "missing"}) {
      gpt::Gpt m2(ResumeGpt(c));
      m2.Initialize(8);
      Engine e2(m2, ResumeConfig(c, 1), comm);
      LoadCheckpointResult none = e2.LoadCheckpoint(p.string());
      CHECK_FALSE(none.loaded);
      CHECK(e2.global_steps() == 0);
    }
    // An explicit tag that does not exist is an error naming the tags there.
    const std::string err = ErrorOf<CheckpointError>([&] {
      LoadCheckpointOptions lo;
      lo.tag = "nope";
      engine.LoadCheckpoint((dir / "ck").string(), lo);
    });
    CHECK(err.find("global_step3") != std::string::npos);
  });
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine: load_module_only, load_optimizer_states false, load_lr_scheduler_states false") {
  const fs::path dir = TempDir("engine_api_only");
  ResumeCase c = OneRankCase();
  const Trained saved = TrainAndSave(c, 4, dir);
  comm::RunLocalRanks(1, [&](comm::Communicator& comm) {
    {
      gpt::Gpt model(ResumeGpt(c));
      model.Initialize(8);
      Engine engine(model, ResumeConfig(c, 1), comm);
      LoadCheckpointOptions lo;
      lo.load_module_only = true;
      CHECK(engine.LoadCheckpoint(dir.string(), lo).loaded);
      CHECK(zrtest::FlatParameters(engine) == saved.params);
      CHECK(engine.global_steps() == 0);
      CHECK(engine.optimizer().step_count(0) == 0);
      // Masters are the (bf16) weights, not the saved fp32 masters; optimizer state untouched (zeros).
      std::vector<float> master = StoreSlot(engine, "master");
      CHECK(master != saved.master);
      for (float v : StoreSlot(engine, "exp_avg")) REQUIRE(v == 0.0f);
    }
    {
      gpt::Gpt model(ResumeGpt(c));
      model.Initialize(8);
      Engine engine(model, ResumeConfig(c, 1), comm);
      LoadCheckpointOptions lo;
      lo.load_optimizer_states = false;
      lo.load_lr_scheduler_states = false;
      const double lr0 = engine.GetLr()[0];
      CHECK(engine.LoadCheckpoint(dir.string(), lo).loaded);
      CHECK(zrtest::FlatParameters(engine) == saved.params);
      CHECK(StoreSlot(engine, "master") == saved.master);  // load_from_fp32_weights (default true)
      for (float v : StoreSlot(engine, "exp_avg")) REQUIRE(v == 0.0f);
      CHECK(engine.global_steps() == 4);
      CHECK(engine.optimizer().step_count(0) == 0);
      CHECK(engine.GetLr()[0] == lr0);
    }
    {
      gpt::Gpt model(ResumeGpt(c));
      model.Initialize(8);
      Engine engine(model, ResumeConfig(c, 1), comm);
      CHECK(engine.LoadCheckpoint(dir.string()).loaded);
      CHECK(StoreSlot(engine, "master") == saved.master);
      CHECK(StoreSlot(engine, "exp_avg") == saved.exp_avg);
      CHECK(engine.optimizer().step_count(0) == 4);
    }
  });
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine: load_module_strict, another model, exclude_frozen_parameters") {
  const fs::path dir = TempDir("engine_api_strict");
  ResumeCase c = OneRankCase();
  TrainAndSave(c, 2, dir / "a");
  comm::RunLocalRanks(1, [&](comm::Communicator& comm) {
    gpt::GptConfig bigger = ResumeGpt(c);
    bigger.n_layer = 3;
    {
      gpt::Gpt model(bigger);
      model.Initialize(8);
      Engine engine(model, ResumeConfig(c, 1), comm);
      const std::string err = ErrorOf<CheckpointError>([&] { engine.LoadCheckpoint((dir / "a").string()); });
      CHECK(err.find("h.2.") != std::string::npos);
      CHECK(err.find("does not match the model") != std::string::npos);
      CHECK(engine.global_steps() == 0);
      LoadCheckpointOptions lo;
      lo.load_module_strict = false;
      lo.load_optimizer_states = false;
      CHECK(engine.LoadCheckpoint((dir / "a").string(), lo).loaded);
      CHECK(engine.global_steps() == 2);
    }
    {
      gpt::GptConfig wider = ResumeGpt(c);
      wider.d_model = 32;
      gpt::Gpt model(wider);
      model.Initialize(8);
      Engine engine(model, ResumeConfig(c, 1), comm);
      LoadCheckpointOptions lo;
      lo.load_module_strict = false;
      const std::string err = ErrorOf<CheckpointError>([&] { engine.LoadCheckpoint((dir / "a").string(), lo); });
      CHECK(err.find("has shape") != std::string::npos);
    }
    {
      // A frozen parameter left out of the save; loading it back needs load_module_strict false.
      gpt::Gpt model(ResumeGpt(c));
      model.Initialize(7);
      nn::Parameter* frozen = model.Parameters().back();
      frozen->set_requires_grad(false);
      Engine engine(model, ResumeConfig(c, 1), comm);
      SaveCheckpointOptions so;
      so.exclude_frozen_parameters = true;
      engine.SaveCheckpoint((dir / "b").string(), so);
      CheckpointReader reader((dir / "b" / "global_step0").string());
      CHECK(reader.manifest().FindTensor(frozen->name()) == nullptr);
      CHECK(reader.manifest().tensors.size() + 1 == model.Parameters().size());
      gpt::Gpt m2(ResumeGpt(c));
      m2.Initialize(9);
      m2.Parameters().back()->set_requires_grad(false);
      Engine e2(m2, ResumeConfig(c, 1), comm);
      CHECK_THROWS_AS(e2.LoadCheckpoint((dir / "b").string()), CheckpointError);
      LoadCheckpointOptions lo;
      lo.load_module_strict = false;
      CHECK(e2.LoadCheckpoint((dir / "b").string(), lo).loaded);
    }
  });
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine: tag_validation Fail across ranks; saving inside an accumulation window refused") {
  const fs::path dir = TempDir("engine_api_tagval");
  ResumeCase c;
  c.world = 2;
  c.stage = 2;
  c.dropout = 0;
  c.gas = 2;
  c.extra_json = R"(, "checkpoint": {"tag_validation": "Fail"})";
  std::atomic<int> refused{0}, window{0};
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(7);
    Engine engine(model, ResumeConfig(c, 2), comm);
    SaveCheckpointOptions so;
    so.tag = comm.rank() == 0 ? "t0" : "t1";
    try {
      engine.SaveCheckpoint(dir.string(), so);
    } catch (const InvalidArgument& e) {
      if (std::string(e.what()).find("t1") != std::string::npos) ++refused;
    }
    auto [x, y] = zrtest::MicroBatch(0, 0, comm.rank(), 2, c.micro, 2, 8, 16);
    engine.Forward(x, y);
    engine.Backward();
    engine.Step();  // micro step 1 of 2: inside the window
    try {
      engine.SaveCheckpoint(dir.string());
    } catch (const InvalidArgument& e) {
      if (std::string(e.what()).find("accumulation window") != std::string::npos) ++window;
    }
  });
  CHECK(refused == 2);
  CHECK(window == 2);
  CHECK_FALSE(fs::exists(dir / "latest"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine: a flipped byte in one rank's shard fails the load on every rank; the engine is unchanged "
          "(the one-pass load: PARTLY loaded, said on every rank)") {
  const fs::path dir = TempDir("engine_api_flip");
  ResumeCase c;
  c.world = 2;
  c.stage = 3;
  c.dropout = 0;
  c.dtype = DType::kF16;
  c.data = WriteTextCorpus(dir).string();
  RunSegment(c, 0, 3, "", (dir / "ck").string());
  const fs::path shard = dir / "ck" / "global_step3" / "rank00001.safetensors";
  std::string bytes = ReadBytes(shard);
  bytes[bytes.size() - 10] ^= 0x10;
  WriteBytes(shard, bytes);
  for (const bool verify_first : {true, false}) {
    INFO("verify_before_apply " << verify_first);
    LoadCheckpointOptions lo;
    lo.verify_before_apply = verify_first;
    const std::vector<std::string> messages = FailedLoads(c, dir / "ck", lo, /*unchanged=*/verify_first);
    for (const std::string& m : messages) {
      CHECK(m.find("rank00001.safetensors") != std::string::npos);
      CHECK(m.find("checksum mismatch") != std::string::npos);
      CHECK((m.find("PARTLY loaded") != std::string::npos) == !verify_first);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine: a read error while verifying leaves the engine unchanged; one after it (while applying) "
          "fails every rank saying the engine is PARTLY loaded") {
  const fs::path dir = TempDir("engine_api_readfail");
  ResumeCase c;
  c.world = 2;
  c.stage = 2;
  c.dropout = 0;
  c.dtype = DType::kF32;
  c.data = WriteTextCorpus(dir).string();
  RunSegment(c, 0, 3, "", (dir / "ck").string());
  // A read of rank 1's shard failing in the verifying pass (past a quarter of it: rank 1 reads all of
  // it there), or failing the second read of any offset, which only the pass that applies makes.
  const int64_t shard_bytes =
      static_cast<int64_t>(fs::file_size(dir / "ck" / "global_step3" / "rank00001.safetensors"));
  for (const bool while_applying : {false, true}) {
    INFO("while applying: " << while_applying);
    FaultEnv env;
    env.fail_read_path = "rank00001.safetensors";
    if (while_applying) {
      env.fail_reread = true;
    } else {
      env.fail_read_after_bytes = shard_bytes / 4;
    }
    LoadCheckpointOptions lo;
    lo.env = &env;
    const std::vector<std::string> messages = FailedLoads(c, dir / "ck", lo, /*unchanged=*/!while_applying);
    for (const std::string& m : messages) {
      INFO(m);
      CHECK(m.find("rank00001.safetensors") != std::string::npos);
      CHECK(m.find("Input/output error") != std::string::npos);
      CHECK((m.find("PARTLY loaded") != std::string::npos) == while_applying);
    }
  }
  // The same checkpoint loads when the disk behaves.
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(7);
    Engine engine(model, ResumeConfig(c, 2), comm);
    CHECK(engine.LoadCheckpoint((dir / "ck").string()).loaded);
    CHECK(engine.global_steps() == 3);
  });
  fs::remove_all(dir);
}

}  // TEST_SUITE

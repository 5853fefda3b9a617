// Engine::SaveCheckpoint with SaveCheckpointOptions::async on 2 ranks: the files are those of a
// synchronous save of the same step, byte for byte, although training goes on (and changes the
// parameters) while they are written; `latest` appears only once the write is finished; a write that
// fails in the background is thrown from the next call (or from WaitForCheckpoint) and leaves `latest`
// on the previous tag.
#include <doctest/doctest.h>

#include <mutex>
#include <optional>

#include "tests/checkpoint/engine_ckpt_util.h"

namespace {

using namespace ckpttest;
using namespace enginetest;

void TrainSteps(Engine& engine, const ResumeCase& c, int rank, int from, int n) {
  for (int s = from; s < from + n; ++s) {
    auto [x, y] = zrtest::MicroBatch(s, 0, rank, 2, c.micro, 1, 8, 16);
    engine.Forward(x, y);
    engine.Backward();
    engine.Step();
  }
}

// DeepSpeed's checkpoint.writer.decoupled: every save asynchronous.
Config DecoupledConfig(const ResumeCase& c) {
  Config cfg = ResumeConfig(c, 2);
  cfg.checkpoint.writer = zerorun::runtime::CheckpointWriterConfig{};
  cfg.checkpoint.writer->decoupled = true;
  return cfg;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("checkpoint engine async save: byte-identical to a synchronous save of the same step while training goes on") {
  const fs::path dir = TempDir("engine_async");
  ResumeCase c = TwoRanks(dir);
  const std::string sync_dir = (dir / "sync").string(), async_dir = (dir / "async").string();
  std::mutex mu;
  std::vector<bool> latest_early(2, true), changed(2, false);
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(7);
    Engine engine(model, ResumeConfig(c, 2), comm);
    TrainSteps(engine, c, comm.rank(), 0, 2);
    SaveCheckpointOptions so;
    so.tag = "snap";
    engine.SaveCheckpoint(sync_dir, so);
    const std::vector<float> at_save = zrtest::FlatParameters(engine);
    so.async = true;
    engine.SaveCheckpoint(async_dir, so);
    const bool early = fs::exists(fs::path(async_dir) / "latest");
    TrainSteps(engine, c, comm.rank(), 2, 3);  // the parameters change while the files are written
    const bool differs = zrtest::FlatParameters(engine) != at_save;
    std::lock_guard<std::mutex> lock(mu);
    latest_early[static_cast<size_t>(comm.rank())] = early;
    changed[static_cast<size_t>(comm.rank())] = differs;
    // ~Engine finishes the save (collectively) and writes `latest`.
  });
  CHECK(changed == std::vector<bool>{true, true});
  CHECK(latest_early == std::vector<bool>{false, false});  // not before every rank's files are durable
  CHECK(ReadBytes(fs::path(async_dir) / "latest") == "snap");
  for (const char* f : {"rank00000.safetensors", "rank00001.safetensors"}) {
    INFO(f);
    const std::string a = ReadBytes(fs::path(async_dir) / "snap" / f);
    CHECK(a.size() > 1000);
    CHECK(a == ReadBytes(fs::path(sync_dir) / "snap" / f));
  }
  for (const auto& e : fs::directory_iterator(async_dir)) CHECK(!IsCheckpointTemporary(e.path().filename().string()));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine async save: checkpoint.writer.decoupled makes every save asynchronous") {
  const fs::path dir = TempDir("engine_decoupled");
  ResumeCase c = TwoRanks(dir);
  const std::string ck = (dir / "ck").string();
  std::mutex mu;
  std::vector<bool> latest_early(2, true);
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(7);
    Engine engine(model, DecoupledConfig(c), comm);
    TrainSteps(engine, c, comm.rank(), 0, 2);
    engine.SaveCheckpoint(ck);  // no SaveCheckpointOptions::async: the config asks for it
    const bool early = fs::exists(fs::path(ck) / "latest");
    std::lock_guard<std::mutex> lock(mu);
    latest_early[static_cast<size_t>(comm.rank())] = early;
  });
  CHECK(latest_early == std::vector<bool>{false, false});
  CHECK(ReadBytes(fs::path(ck) / "latest") == "global_step2");
  CHECK(fs::exists(fs::path(ck) / "global_step2" / "rank00001.safetensors"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine async save: decoupled reserves the snapshot's memory at construction; every save copies into it") {
  const fs::path dir = TempDir("engine_arena");
  ResumeCase c = TwoRanks(dir);
  const std::string ck = (dir / "ck").string();
  std::mutex mu;
  std::vector<std::vector<float>> at_second(2);
  std::vector<int64_t> reserved(2), after_saves(2), peak(2), shard_bytes(2);
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(7);
    Engine engine(model, DecoupledConfig(c), comm);
    MemoryAccount& m = engine.memory();
    const int64_t at_construction = m.Current(MemCategory::kOther);
    TrainSteps(engine, c, comm.rank(), 0, 2);
    engine.SaveCheckpoint(ck);  // global_step2, into the arena
    TrainSteps(engine, c, comm.rank(), 2, 2);
    engine.SaveCheckpoint(ck);  // global_step4: waits for global_step2, then reuses the arena
    const std::vector<float> snapshot = zrtest::FlatParameters(engine);
    TrainSteps(engine, c, comm.rank(), 4, 2);  // the parameters change while global_step4 is written
    REQUIRE(engine.WaitForCheckpoint().has_value());
    std::lock_guard<std::mutex> lock(mu);
    const size_t r = static_cast<size_t>(comm.rank());
    reserved[r] = at_construction;
    after_saves[r] = m.Current(MemCategory::kOther);
    peak[r] = m.Peak(MemCategory::kOther);
    at_second[r] = snapshot;
    // The shard's tensor data: the file less its 8-byte length and JSON header (safetensors).
    const std::string shard =
        ReadBytes(fs::path(ck) / "global_step4" / ("rank0000" + std::to_string(comm.rank()) + ".safetensors"));
    uint64_t header = 0;
    for (int i = 0; i < 8; ++i) header |= static_cast<uint64_t>(static_cast<unsigned char>(shard[static_cast<size_t>(i)])) << (8 * i);
    shard_bytes[r] = static_cast<int64_t>(shard.size() - 8 - header);
  });
  for (size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(shard_bytes[r] > 10000);
    CHECK(reserved[r] >= shard_bytes[r]);  // room for every chunk (each 64-byte aligned)
    CHECK(reserved[r] <= shard_bytes[r] + 64 * 200);
    CHECK(after_saves[r] == reserved[r]);  // nothing left over
    CHECK(peak[r] < reserved[r] * 3 / 2);  // no snapshot-sized allocation on top of it
  }
  CHECK(ReadBytes(fs::path(ck) / "latest") == "global_step4");
  // The second snapshot, taken in the arena the first had used, holds the parameters of step 4.
  std::vector<std::vector<float>> loaded(2);
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(11);
    Engine engine(model, ResumeConfig(c, 2), comm);
    REQUIRE(engine.LoadCheckpoint(ck).loaded);
    std::lock_guard<std::mutex> lock(mu);
    loaded[static_cast<size_t>(comm.rank())] = zrtest::FlatParameters(engine);
  });
  CHECK(loaded == at_second);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine async save: disk full in the background write is thrown by the next save on every rank; latest stays on the previous tag") {
  const fs::path dir = TempDir("engine_async_full");
  ResumeCase c = TwoRanks(dir);
  const std::string ck = (dir / "ck").string();
  FaultEnv env;
  env.DiskFullAfter("rank00001.safetensors", 200);
  std::mutex mu;
  std::vector<std::string> errors(2);
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(7);
    Engine engine(model, ResumeConfig(c, 2), comm);
    TrainSteps(engine, c, comm.rank(), 0, 2);
    SaveCheckpointOptions so;
    so.async = true;
    engine.SaveCheckpoint(ck, so);  // global_step2, fine
    TrainSteps(engine, c, comm.rank(), 2, 2);
    so.env = &env;
    engine.SaveCheckpoint(ck, so);  // global_step4: rank 1's shard hits ENOSPC in the background
    TrainSteps(engine, c, comm.rank(), 4, 1);
    std::string e;
    try {
      engine.SaveCheckpoint(ck, SaveCheckpointOptions{});  // waits for global_step4 first
    } catch (const IoError& x) {
      e = x.what();
    }
    std::lock_guard<std::mutex> lock(mu);
    errors[static_cast<size_t>(comm.rank())] = e;
  });
  for (const std::string& e : errors) {
    INFO(e);
    CHECK(Contains(e, "rank 1"));
    CHECK(Contains(e, "No space left on device"));
    CHECK(Contains(e, "rank00001.safetensors"));
  }
  CHECK(ReadBytes(dir / "ck" / "latest") == "global_step2");
  CHECK_FALSE(fs::exists(dir / "ck" / "global_step4"));
  CHECK_FALSE(fs::exists(dir / "ck" / "global_step5"));
  for (const auto& e : fs::directory_iterator(dir / "ck")) CHECK(!IsCheckpointTemporary(e.path().filename().string()));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine async save: WaitForCheckpoint publishes it and returns what was written, nullopt "
          "when none is pending, and throws a background write's error on every rank") {
  const fs::path dir = TempDir("engine_async_wait");
  ResumeCase c = TwoRanks(dir);
  const std::string ck = (dir / "ck").string();
  FaultEnv env;
  env.DiskFullAfter("rank00000.safetensors", 200);
  std::mutex mu;
  std::vector<std::string> errors(2);
  std::vector<uint64_t> written(2, 0);
  std::vector<bool> latest_after_wait(2, false), none_pending(2, false), none_after_error(2, false);
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(7);
    Engine engine(model, ResumeConfig(c, 2), comm);
    const bool nothing = !engine.WaitForCheckpoint().has_value();
    TrainSteps(engine, c, comm.rank(), 0, 2);
    SaveCheckpointOptions so;
    so.async = true;
    const SaveCheckpointResult started = engine.SaveCheckpoint(ck, so);
    CHECK(started.bytes_written == 0);
    CHECK(started.in_background);
    CHECK(started.waited_for_previous_s == 0);  // nothing was pending
    std::optional<SaveCheckpointResult> r = engine.WaitForCheckpoint();
    REQUIRE(r.has_value());
    CHECK(!r->in_background);  // waited for: written
    CHECK(r->bytes_written > 0);
    const bool latest = ReadBytes(fs::path(ck) / "latest") == "global_step2";  // on return, on every rank
    CHECK(r->tag == "global_step2");
    CHECK(r->dir == (fs::path(ck) / "global_step2").string());
    CHECK(!engine.WaitForCheckpoint().has_value());  // the same save is not waited for twice
    // A save made while another is in the background finishes that one first, and says how long that
    // took apart from its own time.
    SaveCheckpointOptions pair = so;
    pair.save_latest = false;
    pair.tag = "pair_a";
    CHECK(engine.SaveCheckpoint(ck, pair).waited_for_previous_s == 0);
    pair.tag = "pair_b";
    CHECK(engine.SaveCheckpoint(ck, pair).waited_for_previous_s > 0);
    REQUIRE(engine.WaitForCheckpoint().has_value());
    TrainSteps(engine, c, comm.rank(), 2, 2);
    so.env = &env;
    engine.SaveCheckpoint(ck, so);  // rank 0's shard hits ENOSPC in the background
    std::string e;
    try {
      engine.WaitForCheckpoint();
    } catch (const IoError& x) {
      e = x.what();
    }
    const bool none = !engine.WaitForCheckpoint().has_value();  // the failed save is over
    std::lock_guard<std::mutex> lock(mu);
    const size_t me = static_cast<size_t>(comm.rank());
    errors[me] = e;
    written[me] = r->bytes_written;
    latest_after_wait[me] = latest;
    none_pending[me] = nothing;
    none_after_error[me] = none;
  });
  CHECK(none_pending == std::vector<bool>{true, true});
  CHECK(latest_after_wait == std::vector<bool>{true, true});
  CHECK(none_after_error == std::vector<bool>{true, true});
  for (size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    const std::string shard = (fs::path(ck) / "global_step2" / (r == 0 ? "rank00000.safetensors" : "rank00001.safetensors")).string();
    CHECK(written[r] > fs::file_size(shard));  // its shard and its index
    INFO(errors[r]);
    CHECK(Contains(errors[r], "rank 0"));
    CHECK(Contains(errors[r], "No space left on device"));
  }
  CHECK(ReadBytes(dir / "ck" / "latest") == "global_step2");
  CHECK_FALSE(fs::exists(dir / "ck" / "global_step4"));
  fs::remove_all(dir);
}

}  // TEST_SUITE

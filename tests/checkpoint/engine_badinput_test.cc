// Bad input through Engine::LoadCheckpoint / SaveCheckpoint on 2 ranks: each problem is named in one
// CheckpointError (or IoError) thrown on every rank alike, and the engine (or the previous
// checkpoint) is left as it was: a truncated shard, a rank's files missing, a checkpoint directory
// that is a file, disk full during a save, a DeepSpeed .pt checkpoint. (A flipped byte and another
// model: engine_api_test.cc.)
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>

#include "tests/checkpoint/engine_ckpt_util.h"

namespace {

using namespace ckpttest;
using namespace enginetest;

// Every rank's error of LoadCheckpoint(load_dir) ("(loaded)" when it loaded; a failed load is
// checked to leave the engine unchanged).
std::vector<std::string> LoadErrors(const ResumeCase& c, const std::string& load_dir, bool verify_first = true) {
  std::vector<std::string> errors(2);
  std::mutex mu;
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(7);
    Engine engine(model, ResumeConfig(c, 2), comm);
    const std::vector<float> before = zrtest::FlatParameters(engine);
    std::string e;
    LoadCheckpointOptions lo;
    lo.verify_before_apply = verify_first;
    try {
      engine.LoadCheckpoint(load_dir, lo);
      e = "(loaded)";
    } catch (const CheckpointError& x) {
      e = x.what();
    }
    if (e != "(loaded)") {  // a failed load changes nothing
      CHECK(engine.global_steps() == 0);
      CHECK(zrtest::FlatParameters(engine) == before);
    }
    std::lock_guard<std::mutex> lock(mu);
    errors[static_cast<size_t>(comm.rank())] = e;
  });
  return errors;
}

void CheckBoth(const std::vector<std::string>& errors, const std::vector<std::string>& parts) {
  for (const std::string& e : errors) {
    INFO(e);
    for (const std::string& p : parts) CHECK(Contains(e, p));
  }
}

// Both loads refuse it on both ranks, changing nothing: the one-pass load finds these before it reads
// any tensor too.
void CheckBothLoads(const ResumeCase& c, const fs::path& load_dir, const std::vector<std::string>& parts) {
  for (const bool verify_first : {true, false}) {
    INFO("verify_before_apply " << verify_first);
    CheckBoth(LoadErrors(c, load_dir.string(), verify_first), parts);
  }
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("checkpoint engine bad input: truncated shard, missing rank files, directory is a file, DeepSpeed .pt") {
  const fs::path dir = TempDir("engine_bad");
  ResumeCase c = TwoRanks(dir);
  RunSegment(c, 0, 2, "", (dir / "good").string());
  const fs::path good = dir / "good" / "global_step2";
  auto copy = [&](const std::string& name) {
    fs::copy(dir / "good", dir / name, fs::copy_options::recursive);
    return dir / name / "global_step2";
  };
  {
    const fs::path t = copy("truncated");
    const fs::path shard = t / "rank00001.safetensors";
    fs::resize_file(shard, fs::file_size(shard) - 3);
    CheckBothLoads(c, dir / "truncated", {"rank00001.safetensors (rank 1)", "truncated shard"});
  }
  {
    const fs::path t = copy("missing");
    fs::remove(t / "rank00001.safetensors");
    fs::remove(t / "rank00001.json");
    CheckBothLoads(c, dir / "missing", {"is incomplete", "the files of rank 1 are missing"});
  }
  {
    WriteBytes(dir / "afile", "not a directory");
    CheckBothLoads(c, dir / "afile", {"afile", "is a file"});
    // Saving into it: IoError on every rank.
    std::atomic<int> io{0};
    comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
      gpt::Gpt model(ResumeGpt(c));
      model.Initialize(7);
      Engine engine(model, ResumeConfig(c, 2), comm);
      try {
        engine.SaveCheckpoint((dir / "afile").string());
      } catch (const IoError&) {
        ++io;
      }
    });
    CHECK(io == 2);
  }
  {
    fs::create_directories(dir / "ds" / "global_step10");
    WriteBytes(dir / "ds" / "latest", "global_step10");
    WriteBytes(dir / "ds" / "global_step10" / "mp_rank_00_model_states.pt", std::string("PK\x03\x04", 4) + "zip");
    CheckBothLoads(c, dir / "ds",
                   {"DeepSpeed/PyTorch checkpoint", "zerorun does not read torch pickles", "load_module_only"});
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint engine bad input: disk full during a save fails on every rank; the previous checkpoint stays latest and loads") {
  const fs::path dir = TempDir("engine_full");
  ResumeCase c = TwoRanks(dir);
  RunSegment(c, 0, 2, "", (dir / "ck").string());
  const std::string before = ReadBytes(dir / "ck" / "global_step2" / "rank00000.safetensors");
  FaultEnv env;
  env.DiskFullAfter("rank00001.safetensors", 200);
  std::mutex mu;
  std::vector<std::string> errors(2);
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    gpt::Gpt model(ResumeGpt(c));
    model.Initialize(7);
    Engine engine(model, ResumeConfig(c, 2), comm);
    CHECK(engine.LoadCheckpoint((dir / "ck").string()).loaded);
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = zrtest::MicroBatch(s, 0, comm.rank(), 2, c.micro, 1, 8, 16);
      engine.Forward(x, y);
      engine.Backward();
      engine.Step();
    }
    SaveCheckpointOptions so;
    so.env = &env;
    std::string e;
    try {
      engine.SaveCheckpoint((dir / "ck").string(), so);
    } catch (const IoError& x) {
      e = x.what();
    }
    std::lock_guard<std::mutex> lock(mu);
    errors[static_cast<size_t>(comm.rank())] = e;
  });
  CheckBoth(errors, {"rank 1", "No space left on device"});
  CHECK(ReadBytes(dir / "ck" / "latest") == "global_step2");
  CHECK_FALSE(fs::exists(dir / "ck" / "global_step4"));
  CHECK(ReadBytes(dir / "ck" / "global_step2" / "rank00000.safetensors") == before);
  for (const auto& e : fs::directory_iterator(dir / "ck")) CHECK(!IsCheckpointTemporary(e.path().filename().string()));
  CHECK(LoadErrors(c, (dir / "ck").string()) == std::vector<std::string>{"(loaded)", "(loaded)"});
  fs::remove_all(dir);
}

}  // TEST_SUITE

// Helpers for the engine checkpoint tests: a tiny GPT with dropout trained on a text file through the
// data sampler, as segments [from, to) of steps on the `local` backend, each segment a new model, a
// new engine and a new sampler (what a new process would build), optionally loading a checkpoint
// first and saving one at the end.
#pragma once

#include <cstring>
#include <functional>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "tests/checkpoint/ckpt_test_util.h"
#include "tests/runtime/engine_test_util.h"
#include "zerorun/runtime/data/dataset.h"
#include "zerorun/runtime/data/sampler.h"
#include "zerorun/runtime/engine.h"

namespace enginetest {

using namespace zerorun;
using namespace zerorun::runtime;
namespace fs = std::filesystem;

// A fresh directory in /dev/shm when there is one (fsync is free on tmpfs: the bitwise-resume matrix
// saves 72 checkpoints; crash safety is tested on a real file system elsewhere), else TempDir.
inline fs::path MemoryTempDir(const std::string& name) {
  std::error_code ec;
  if (!fs::is_directory("/dev/shm", ec) || ::access("/dev/shm", W_OK) != 0) return ckpttest::TempDir(name);
  fs::path d = fs::path("/dev/shm") / ("zr_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d, ec);
  fs::create_directories(d);
  return d;
}

// A deterministic ASCII text (about 24 KB) as a data file; returns its path.
inline fs::path WriteTextCorpus(const fs::path& dir) {
  const fs::path p = dir / "corpus.txt";
  std::string text;
  Rng rng(99, 1);
  const char* words[] = {"the ", "zero ", "run ", "of ", "a ", "check", "point ", "resumes ", "bit ", "for ", "\n"};
  while (text.size() < 24000) text += words[rng.NextU32() % 11];
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

struct ResumeCase {
  int world = 2;
  int stage = 0;
  DType dtype = DType::kF32;
  int64_t gas = 1;
  int64_t micro = 4;
  std::string data;          // the text file
  float dropout = 0.1f;
  std::string optimizer = "AdamW";
  std::string extra_json = R"(, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5}})";
  std::string zero_json;  // extra keys of zero_optimization (leading comma included)
};

inline gpt::GptConfig ResumeGpt(const ResumeCase& c) {
  gpt::GptConfig g = zrtest::TinyGpt(c.dtype);
  g.vocab_size = 128;  // ASCII
  g.dropout = c.dropout;
  return g;
}

// 2 ranks, ZeRO-2, bf16, no dropout, a text corpus in `dir`: the bad-input and async-save tests' job.
inline ResumeCase TwoRanks(const fs::path& dir) {
  ResumeCase c;
  c.world = 2;
  c.stage = 2;
  c.dtype = DType::kBF16;
  c.dropout = 0;
  c.data = WriteTextCorpus(dir).string();
  return c;
}

inline Config ResumeConfig(const ResumeCase& c, int world) {
  zrtest::RunSpec s;
  s.world = world;
  s.stage = c.stage;
  s.micro = c.micro;
  s.gas = c.gas;
  s.dtype = c.dtype;
  s.optimizer = c.optimizer;
  s.extra_json = c.extra_json;
  s.zero_json = c.zero_json;
  return zrtest::LoadSpecConfig(s);
}

struct Segment {
  std::vector<std::vector<uint32_t>> loss_bits;  // per rank: every micro-step's loss, as bits
  int64_t loaded_steps = -1;                     // global_steps after loading (-1: nothing loaded)
  std::vector<std::string> client_state;         // per rank: what the load returned
};

// Steps [from, to) of case c on `world` ranks (0: c.world): new model (initialised from another seed
// when it will load), engine and sampler; loads `load_dir`'s latest first when given; saves to
// `save_dir` at the end when given (default tag).
// `after_load` (optional) runs on every rank right after the load.
inline Segment RunSegment(const ResumeCase& c, int64_t from, int64_t to, const std::string& load_dir,
                          const std::string& save_dir, int world = 0, const LoadCheckpointOptions& lo_in = {},
                          const std::function<void(Engine&, comm::Communicator&)>& after_load = {}) {
  if (world == 0) world = c.world;
  Segment out;
  out.loss_bits.resize(static_cast<size_t>(world));
  out.client_state.resize(static_cast<size_t>(world));
  std::mutex mu;
  comm::RunLocalRanks(world, [&](comm::Communicator& comm) {
    Config cfg = ResumeConfig(c, world);
    gpt::GptConfig gc = ResumeGpt(c);
    gpt::Gpt model(gc);
    model.Initialize(load_dir.empty() ? 7 : 1000 + static_cast<uint64_t>(from));
    Engine engine(model, cfg, comm);
    std::unique_ptr<data::TokenDataset> dataset = data::OpenByteTextFiles({c.data}, gc.vocab_size);
    data::SamplerOptions so;
    so.batch_size = c.micro;
    so.seq_len = gc.seq_len;
    so.rank = comm.rank();
    so.world_size = world;
    so.seed = 5;
    data::DistributedSampler sampler(*dataset, so);
    int64_t loaded = -1;
    std::string client;
    if (!load_dir.empty()) {
      LoadCheckpointOptions lo = lo_in;
      lo.sampler = &sampler;
      LoadCheckpointResult r = engine.LoadCheckpoint(load_dir, lo);
      if (r.loaded) loaded = r.global_steps;
      client = r.client_state_json;
      if (after_load) after_load(engine, comm);
    }
    std::vector<uint32_t> bits;
    for (int64_t step = from; step < to; ++step) {
      for (int64_t m = 0; m < c.gas; ++m) {
        data::Batch b = sampler.Next();
        Tensor x = Tensor::Empty({b.B, b.T}, DType::kI32), y = Tensor::Empty({b.B, b.T}, DType::kI32);
        std::memcpy(x.data(), b.inputs.data(), b.inputs.size() * 4);
        std::memcpy(y.data(), b.targets.data(), b.targets.size() * 4);
        float loss = engine.Forward(x, y);
        engine.Backward();
        engine.Step();
        uint32_t u;
        std::memcpy(&u, &loss, 4);
        bits.push_back(u);
      }
    }
    if (!save_dir.empty()) {
      SaveCheckpointOptions so2;
      so2.sampler = &sampler;
      so2.client_state_json = Format(R"({{"segment_end": {}}})", to);
      engine.SaveCheckpoint(save_dir, so2);
    }
    std::lock_guard<std::mutex> lock(mu);
    out.loss_bits[static_cast<size_t>(comm.rank())] = std::move(bits);
    if (comm.rank() == 0) out.loaded_steps = loaded;
    out.client_state[static_cast<size_t>(comm.rank())] = client;
  });
  return out;
}

}  // namespace enginetest

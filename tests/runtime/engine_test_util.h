// Shared helpers for engine tests: a tiny GPT, a deterministic global batch split across ranks and
// micro-steps, and a runner that trains on the `local` backend (ranks as threads).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "zerorun/comm/local/local_comm.h"
#include "zerorun/core/rng.h"
#include "zerorun/examples/gpt/gpt.h"
#include "zerorun/runtime/config/config.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/zero/partition.h"

namespace zrtest {

using namespace zerorun;

inline gpt::GptConfig TinyGpt(DType dtype) {
  gpt::GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 16;
  c.vocab_size = 16;
  c.seq_len = 8;
  c.dtype = dtype;
  return c;
}

// Sample `index` of the training stream: a sequence whose next token is a fixed function of the
// previous one with some noise, so the loss can fall well below log(V).
inline void FillSample(int64_t index, int64_t T, int64_t V, int32_t* tokens, int32_t* targets) {
  Rng rng(1234, static_cast<uint64_t>(index));
  int32_t t = static_cast<int32_t>(rng.NextU32() % V);
  for (int64_t i = 0; i <= T; ++i) {
    int32_t next = (rng.Uniform() < 0.8f) ? static_cast<int32_t>((t * 5 + 3) % V) : static_cast<int32_t>(rng.NextU32() % V);
    if (i < T) tokens[i] = t;
    if (i > 0) targets[i - 1] = t;
    t = next;
  }
}

// The micro-batch of rank `rank` at micro-step `micro` (0-based within global step `step`):
// global samples step·tbs + (micro·world + rank)·mbs + [0, mbs).
inline std::pair<Tensor, Tensor> MicroBatch(int64_t step, int micro, int rank, int world, int64_t mbs, int64_t gas,
                                            int64_t T, int64_t V) {
  Tensor x = Tensor::Empty({mbs, T}, DType::kI32);
  Tensor y = Tensor::Empty({mbs, T}, DType::kI32);
  int64_t tbs = mbs * gas * world;
  for (int64_t b = 0; b < mbs; ++b) {
    int64_t index = step * tbs + (micro * world + rank) * mbs + b;
    FillSample(index, T, V, x.data_as<int32_t>() + b * T, y.data_as<int32_t>() + b * T);
  }
  return {x, y};
}

struct RunSpec {
  int world = 1;
  int stage = 0;
  int64_t micro = 8;
  int64_t gas = 1;
  int steps = 10;
  DType dtype = DType::kF32;
  std::string extra_json;  // appended inside the top-level object (leading comma included)
  std::string zero_json;  // extra keys of zero_optimization (leading comma included)
  std::string precision_json;  // replaces the default fp16/bf16 section (trailing comma included)
  std::string optimizer = "AdamW";  // another type is allowed with zero_allow_untested_optimizer
  uint64_t seed = 7;
  std::optional<gpt::GptConfig> model;  // unset: TinyGpt(dtype)
  runtime::EngineOptions engine_options;
  std::function<void(runtime::Engine&)> after;  // called on every rank after the last step
};

struct RunResult {
  std::vector<double> losses;                   // mean loss per global step, averaged over ranks
  std::vector<std::vector<float>> final_params;  // per rank: every parameter, concatenated, as fp32
  int64_t skipped = 0;
  std::vector<double> scales;                   // loss scale after each step (rank 0)
};

inline std::string ConfigJson(const RunSpec& s) {
  std::string prec = !s.precision_json.empty() ? s.precision_json
                     : s.dtype == DType::kBF16 ? R"("bf16": {"enabled": true},)"
                     : s.dtype == DType::kF16 ? R"("fp16": {"enabled": true, "initial_scale_power": 8},)"
                                              : "";
  const std::string untested = s.optimizer == "AdamW" ? "" : R"(, "zero_allow_untested_optimizer": true)";
  return Format(R"({{ "train_micro_batch_size_per_gpu": {}, "gradient_accumulation_steps": {}, {}
    "optimizer": {{"type": "{}", "params": {{"lr": 0.01, "weight_decay": 0.01}}}},
    "gradient_clipping": 1.0,
    "zero_optimization": {{"stage": {}, "reduce_bucket_size": 200 {}}} {}{} }})",
                s.micro, s.gas, prec, s.optimizer, s.stage, s.zero_json, s.extra_json, untested);
}

// The tests' reduce_bucket_size (ConfigJson).
inline constexpr int64_t kTestBucket = 200;

// Padded elements of a group's flat buffer at stages 0-2 (zero/partition.h): stage 0 pads the buffer
// to 2W; stages 1/2 pad each reduce_bucket_size bucket to 2W.
inline int64_t FlatPaddedNumel(const std::vector<int64_t>& numels, int world, int stage, int64_t bucket = kTestBucket) {
  return zero::LayoutFlatGroup(numels, world, 2, false, bucket,
                               stage == 0 ? zero::FlatBucketing::kWhole : zero::FlatBucketing::kSplit)
      .padded_numel;
}

// The config of `s`, loaded for s.world ranks without printing warnings.
inline runtime::Config LoadSpecConfig(const RunSpec& s) {
  runtime::LoadOptions lo;
  lo.world_size = s.world;
  lo.log_warnings = false;
  return runtime::LoadConfigString(ConfigJson(s), lo);
}

// Every parameter's full value (model().Parameters() order) concatenated as fp32. At stage 3 this is
// a collective: every rank must call it.
inline std::vector<float> FlatParameters(runtime::Engine& engine) {
  std::vector<float> flat;
  for (const Tensor& t : engine.GatherParameters()) {
    std::vector<float> v = t.ToVector();
    flat.insert(flat.end(), v.begin(), v.end());
  }
  return flat;
}

// Trains a TinyGpt per RunSpec on the local backend and collects what every rank saw.
inline RunResult Train(const RunSpec& s) {
  RunResult out;
  out.final_params.resize(static_cast<size_t>(s.world));
  std::vector<std::vector<double>> rank_losses(static_cast<size_t>(s.world));
  std::mutex mu;
  comm::RunLocalRanks(s.world, [&](comm::Communicator& comm) {
    runtime::Config cfg = LoadSpecConfig(s);
    gpt::GptConfig gc = s.model ? *s.model : TinyGpt(s.dtype);
    gpt::Gpt model(gc);
    model.Initialize(s.seed);
    runtime::Engine engine(model, cfg, comm, s.engine_options);
    std::vector<double> losses;
    std::vector<double> scales;
    for (int step = 0; step < s.steps; ++step) {
      double sum = 0;
      for (int m = 0; m < s.gas; ++m) {
        auto [x, y] = MicroBatch(step, m, comm.rank(), s.world, s.micro, s.gas, gc.seq_len, gc.vocab_size);
        sum += engine.Forward(x, y);
        engine.Backward();
        engine.Step();
      }
      losses.push_back(sum / static_cast<double>(s.gas));
      scales.push_back(engine.loss_scale());
    }
    if (s.after) s.after(engine);
    std::vector<float> flat = FlatParameters(engine);
    std::lock_guard<std::mutex> lock(mu);
    rank_losses[static_cast<size_t>(comm.rank())] = losses;
    out.final_params[static_cast<size_t>(comm.rank())] = flat;
    if (comm.rank() == 0) {
      out.skipped = engine.skipped_steps();
      out.scales = scales;
    }
  });
  for (int step = 0; step < s.steps; ++step) {
    double sum = 0;
    for (const auto& l : rank_losses) sum += l[static_cast<size_t>(step)];
    out.losses.push_back(sum / s.world);
  }
  return out;
}

}  // namespace zrtest

// flops_profiler: the layers' own MAC counts add up to the GPT closed form (6Ψ per token for the
// matmul parameters Ψ plus the attention term 12·L·T²·d per sequence for a training step), per module
// and in total; recomputed forwards are counted apart (HFU); the report and output_file; MFU against a
// given peak; the GEMM probe measures something.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "tests/runtime/engine_test_util.h"
#include "zerorun/runtime/observe/flops_profiler.h"

namespace fs = std::filesystem;
using namespace zerorun;

namespace {

struct Captured {
  bool have = false;
  runtime::FlopsProfile profile;
  int64_t num_parameters = 0;
};

// Trains s and returns rank 0's profile (other ranks must have none).
Captured Profile(zrtest::RunSpec s) {
  Captured c;
  std::mutex mu;
  s.after = [&](runtime::Engine& e) {
    std::lock_guard<std::mutex> lock(mu);
    if (e.rank() != 0) {
      CHECK(e.flops_profile() == nullptr);
      return;
    }
    REQUIRE(e.flops_profile() != nullptr);
    c.have = true;
    c.profile = *e.flops_profile();
    c.num_parameters = e.num_parameters();
  };
  zrtest::Train(s);
  return c;
}

const runtime::ModuleProfile& Find(const runtime::FlopsProfile& p, const std::string& name) {
  for (const auto& m : p.modules) {
    if (m.name == name) return m;
  }
  FAIL("no module " << name);
  return p.modules.front();
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("flops profiler: a GPT's counted FLOPs equal the closed form, per module and in total") {
  zrtest::RunSpec s;
  s.world = 2;
  s.stage = 1;
  s.micro = 4;
  s.gas = 2;
  s.steps = 3;
  gpt::GptConfig gc = zrtest::TinyGpt(DType::kF32);
  gc.n_layer = 3;
  gc.d_model = 24;
  gc.n_head = 3;
  gc.vocab_size = 40;
  gc.seq_len = 8;
  s.model = gc;
  s.engine_options.peak_flops = 1e9;
  s.extra_json = R"(, "flops_profiler": {"enabled": true, "profile_step": 1, "module_depth": -1, "top_modules": 2})";
  Captured c = Profile(s);
  REQUIRE(c.have);
  const runtime::FlopsProfile& p = c.profile;
  const int64_t L = gc.n_layer, d = gc.d_model, V = gc.vocab_size, T = gc.seq_len;
  const int64_t sequences = s.micro * s.gas;  // this rank's sequences in the step
  const int64_t tokens = sequences * T;
  // Ψ: the matmul parameters — per block qkv 3d², attention proj d², MLP fc 4d² and proj 4d²; the
  // (tied) LM head V·d. Embedding lookups, norms and biases are not matmuls.
  const int64_t psi = L * 12 * d * d + V * d;
  const int64_t attention_macs = L * sequences * 2 * T * T * d;  // Q·Kᵀ and A·V, full T×T
  CHECK(p.step == 1);
  CHECK(p.fwd_macs == tokens * psi + attention_macs);
  // A training step: 3 × forward = 6Ψ per token + 12·L·T²·d per sequence.
  CHECK(3.0 * p.fwd_flops() == doctest::Approx(static_cast<double>(6 * psi * tokens + 12 * L * T * T * d * sequences)));
  CHECK(p.params == c.num_parameters);
  CHECK(p.samples == sequences);
  CHECK(p.world_size == 2);
  CHECK(p.recompute_macs == 0);
  CHECK(p.fwd_ms > 0);
  CHECK(p.bwd_ms > 0);
  // Per module, by the layer's own shapes.
  CHECK(Find(p, "h.0.attn.qkv").macs == tokens * 3 * d * d);
  CHECK(Find(p, "h.0.attn").macs == tokens * 4 * d * d + sequences * 2 * T * T * d);
  CHECK(Find(p, "h.2.mlp").macs == tokens * 8 * d * d);
  CHECK(Find(p, "h.1.ln_1").macs == 0);
  CHECK(Find(p, "lm_head").macs == tokens * V * d);
  CHECK(Find(p, "h.1").depth == 2);
  CHECK(Find(p, "h.1").calls == s.gas);
  CHECK(Find(p, "h.1").params == 12 * d * d + 9 * d + 4 * d);  // weights, biases (3d+d+4d+d), two norms (2 x 2d)
  // MFU = 3 × fwd FLOPs / iteration time / peak.
  CHECK(p.mfu() == doctest::Approx(3.0 * p.fwd_flops() / (p.iter_ms() * 1e-3) / 1e9));
  runtime::FlopsProfilerConfig fc;
  fc.top_modules = 2;
  const std::string text = runtime::FlopsProfileText(p, fc);
  CHECK(text.find("Profile Summary at step 1") != std::string::npos);
  CHECK(text.find("MFU") != std::string::npos);
  CHECK(text.find("depth 2:") != std::string::npos);
  CHECK(text.find("'TransformerBlock'") != std::string::npos);
  CHECK(text.find("h.0.attn.qkv (Linear)") != std::string::npos);
  fc.module_depth = 1;
  fc.detailed = false;
  const std::string shallow = runtime::FlopsProfileText(p, fc);
  CHECK(shallow.find("depth 2:") == std::string::npos);
  CHECK(shallow.find("Detailed Profile") == std::string::npos);
}

TEST_CASE("flops profiler: activation checkpointing's recompute counted apart (HFU > MFU); output_file") {
  fs::path out = fs::temp_directory_path() / ("zr_flops_" + std::to_string(::getpid()) + ".txt");
  zrtest::RunSpec s;
  s.steps = 1;
  s.micro = 2;
  s.engine_options.peak_flops = 1e9;
  s.extra_json = Format(R"(, "activation_checkpointing": {{"cpu_checkpointing": false}},
      "flops_profiler": {{"enabled": true, "profile_step": 0, "output_file": "{}"}})", out.string());
  Captured c = Profile(s);
  REQUIRE(c.have);
  const gpt::GptConfig gc = zrtest::TinyGpt(DType::kF32);
  const int64_t d = gc.d_model, T = gc.seq_len;
  const int64_t block_macs = s.micro * T * 12 * d * d + s.micro * 2 * T * T * d;
  CHECK(c.profile.step == 0);
  CHECK(c.profile.recompute_macs == gc.n_layer * block_macs);
  CHECK(c.profile.hfu() > c.profile.mfu());
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(ss.str().find("DeepSpeed Flops Profiler") != std::string::npos);
  CHECK(ss.str().find("HFU") != std::string::npos);
  fs::remove(out);
}

TEST_CASE("flops profiler: the GEMM probe measures a positive rate") {
  CHECK(runtime::MeasurePeakFlops(DType::kF32, 128, 0.05) > 0);
}

}  // TEST_SUITE

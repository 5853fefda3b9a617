// Activation checkpointing as the engine applies it (runtime/activation_checkpointing.h): every option
// — from the config and from EngineOptions — trains to bitwise the losses and parameters of no
// checkpointing at stages 0-3 on 1 and 2 ranks, and the activation bytes follow the formulas of
// docs/engine.md (held between forward and backward exactly; the peak exactly relative to none).
#include <doctest/doctest.h>

#include <map>
#include <mutex>

#include "engine_test_util.h"
#include "zerorun/runtime/activation_checkpointing.h"
#include "zerorun/runtime/engine_validate.h"

using namespace zrtest;
namespace rt = zerorun::runtime;

namespace {

gpt::GptConfig Model(DType dtype, float dropout) {
  gpt::GptConfig c = TinyGpt(dtype);
  c.n_layer = 4;
  c.dropout = dropout;
  return c;
}

struct Variant {
  std::string name;
  std::string config;                                  // activation_checkpointing section ("" : none)
  std::optional<rt::ActivationCheckpointingOptions> options;  // EngineOptions::activation_checkpointing
  int checkpoints = 0;                                 // expected segments (0: off)
};

struct Outcome {
  std::vector<double> losses;     // every micro-step's loss on every rank
  std::vector<float> params;      // rank 0's final parameters
  int checkpoints = 0;
  int64_t syncs = 0;
  std::vector<rt::ActivationCheckpointer::SegmentProfile> profile;
};

Outcome TrainVariant(int world, int stage, DType dtype, const Variant& v) {
  RunSpec s;
  s.world = world;
  s.stage = stage;
  s.dtype = dtype;
  s.micro = 3;
  s.gas = 2;
  if (!v.config.empty()) s.extra_json = ", \"activation_checkpointing\": " + v.config;
  Outcome out;
  std::mutex mu;
  std::vector<std::vector<double>> losses(static_cast<size_t>(world));
  comm::RunLocalRanks(world, [&](comm::Communicator& comm) {
    const rt::Config cfg = LoadSpecConfig(s);
    const gpt::GptConfig gc = Model(dtype, 0.1f);
    gpt::Gpt model(gc);
    rt::EngineOptions eo;
    eo.init_seed = 11;
    eo.activation_checkpointing = v.options;
    rt::Engine engine(model, cfg, comm, eo);
    std::vector<double> mine;
    for (int step = 0; step < 4; ++step) {
      for (int m = 0; m < s.gas; ++m) {
        auto [x, y] = MicroBatch(step, m, comm.rank(), world, s.micro, s.gas, gc.seq_len, gc.vocab_size);
        mine.push_back(engine.Forward(x, y));
        engine.Backward();
        engine.Step();
      }
    }
    std::vector<float> flat = FlatParameters(engine);
    std::lock_guard<std::mutex> lock(mu);
    losses[static_cast<size_t>(comm.rank())] = mine;
    if (comm.rank() == 0) {
      out.params = flat;
      if (const auto* ac = engine.activation_checkpointer()) {
        out.checkpoints = ac->num_checkpoints();
        out.syncs = ac->boundary_syncs();
        out.profile = ac->profile();
      }
    }
  });
  for (const auto& l : losses) out.losses.insert(out.losses.end(), l.begin(), l.end());
  return out;
}

rt::ActivationCheckpointingOptions Opts(int64_t n, bool cpu, bool contiguous) {
  rt::ActivationCheckpointingOptions o;
  o.number_checkpoints = n;
  o.cpu_checkpointing = cpu;
  o.contiguous_memory_optimization = contiguous;
  return o;
}

std::vector<Variant> Variants() {
  std::vector<Variant> v;
  v.push_back({"off", "", std::nullopt, 0});
  v.push_back({"config: section written, defaults (every block)", "{}", std::nullopt, 4});
  v.push_back({"config: number_checkpoints 2", R"({"number_checkpoints": 2})", std::nullopt, 2});
  v.push_back({"config: number_checkpoints 3 (uneven segments)", R"({"number_checkpoints": 3})", std::nullopt, 3});
  v.push_back({"config: cpu_checkpointing", R"({"cpu_checkpointing": true})", std::nullopt, 4});
  v.push_back({"config: contiguous_memory_optimization", R"({"contiguous_memory_optimization": true, "number_checkpoints": 4})",
               std::nullopt, 4});
  v.push_back({"config: synchronize_checkpoint_boundary", R"({"synchronize_checkpoint_boundary": true})", std::nullopt, 4});
  v.push_back({"config: profile", R"({"profile": true, "number_checkpoints": 2})", std::nullopt, 2});
  v.push_back({"config: partition_activations (model-parallel size 1)", R"({"partition_activations": true})",
               std::nullopt, 4});
  v.push_back({"config: everything", R"({"partition_activations": true, "cpu_checkpointing": true,
      "contiguous_memory_optimization": true, "number_checkpoints": 2, "synchronize_checkpoint_boundary": true,
      "profile": true})", std::nullopt, 2});
  rt::ActivationCheckpointingOptions attn;
  attn.select = rt::ActivationCheckpointingOptions::Select::kPredicate;
  attn.predicate = [](const nn::Module& m) { return m.type_name() == "CausalSelfAttention"; };
  v.push_back({"options: selective, attention only", "", attn, 4});
  rt::ActivationCheckpointingOptions mlp = attn;
  mlp.predicate = [](const nn::Module& m) { return m.path().find(".mlp") != std::string::npos && m.type_name() == "Mlp"; };
  mlp.cpu_checkpointing = true;
  v.push_back({"options: selective by path, MLPs in host memory", "", mlp, 4});
  v.push_back({"options: 1 checkpoint over all blocks, contiguous in host memory", "", Opts(1, true, true), 1});
  rt::ActivationCheckpointingOptions off;
  off.enabled = false;
  v.push_back({"options: enabled false wins over the config's section", R"({"cpu_checkpointing": true})", off, 0});
  return v;
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("activation checkpointing: every option trains bitwise like none (stages 0-3, 1 and 2 ranks, dropout on)") {
  struct Case {
    int world, stage;
    DType dtype;
  };
  for (const Case c : {Case{1, 0, DType::kF32}, Case{2, 1, DType::kBF16}, Case{2, 2, DType::kF16},
                       Case{2, 3, DType::kBF16}}) {
    const std::vector<Variant> variants = Variants();
    const Outcome base = TrainVariant(c.world, c.stage, c.dtype, variants[0]);
    REQUIRE(base.losses.size() == static_cast<size_t>(8 * c.world));
    for (const Variant& v : variants) {
      INFO("world ", c.world, " stage ", c.stage, " ", DTypeName(c.dtype), ": ", v.name);
      const Outcome o = TrainVariant(c.world, c.stage, c.dtype, v);
      CHECK(o.checkpoints == v.checkpoints);
      CHECK(o.losses == base.losses);
      CHECK(o.params == base.params);
    }
  }
}

TEST_CASE("activation checkpointing: synchronize counts boundaries, profile times every checkpoint") {
  const std::vector<Variant> variants = Variants();
  const Outcome sync = TrainVariant(1, 0, DType::kF32, variants[6]);
  // 4 checkpoints x 8 micro-steps x 4 boundaries (forward begin/end, replay begin/end).
  CHECK(sync.syncs == 4 * 8 * 4);
  const Outcome prof = TrainVariant(1, 0, DType::kF32, variants[7]);
  REQUIRE(prof.profile.size() == 2);
  CHECK(prof.profile[0].modules == "h.0..h.1");
  CHECK(prof.profile[1].modules == "h.2..h.3");
  for (const auto& p : prof.profile) {
    CHECK(p.forwards == 8);
    CHECK(p.replays == 8);
    CHECK(p.backwards == 8);
    CHECK(p.forward_ms > 0);
    CHECK(p.recompute_ms > 0);
    CHECK(p.backward_ms > 0);
  }
}

TEST_CASE("activation checkpointing: bad selections are refused naming the module") {
  gpt::Gpt model(Model(DType::kF32, 0));
  rt::ActivationCheckpointingOptions none;
  none.select = rt::ActivationCheckpointingOptions::Select::kPredicate;
  none.predicate = [](const nn::Module& m) { return m.type_name() == "Conv2d"; };
  CHECK_THROWS_WITH_AS(rt::ActivationCheckpointer(model, none, false), doctest::Contains("selects no module"),
                       InvalidArgument);
  rt::ActivationCheckpointingOptions split;
  split.blocks = {model.blocks()->at(0), model.blocks()->at(1)->children()[0].second};  // not siblings
  split.number_checkpoints = 1;
  CHECK_THROWS_WITH_AS(rt::ActivationCheckpointer(model, split, false), doctest::Contains("not siblings"),
                       InvalidArgument);
  {
    rt::ActivationCheckpointer outer(model, Opts(0, false, false), false);
    rt::ActivationCheckpointingOptions inner;
    inner.select = rt::ActivationCheckpointingOptions::Select::kPredicate;
    inner.predicate = [](const nn::Module& m) { return m.type_name() == "Mlp"; };
    CHECK_THROWS_WITH_AS(rt::ActivationCheckpointer(model, inner, false), doctest::Contains("checkpointed already"),
                         InvalidArgument);
  }
  for (const auto& [name, block] : model.blocks()->children()) CHECK(!block->activation_checkpointing());
}

}  // TEST_SUITE

namespace {

// Activation bytes of one training micro-step of the model under `ckpt` (nullopt: none).
struct Bytes {
  int64_t held = 0;        // kActivations held between forward and backward
  int64_t peak = 0;        // kActivations peak over forward + backward
  int64_t host_held = 0;   // kHostActivations held between forward and backward
  int64_t host_peak = 0;
  int64_t after = 0;       // kActivations still held after backward
  int64_t host_after = 0;
};

struct Dims {
  int64_t B = 4, T = 16, C = 32, NH = 2, V = 8, L = 4;
  DType dtype = DType::kF32;
  int64_t e() const { return static_cast<int64_t>(DTypeSize(dtype)); }
  int64_t N() const { return B * T; }
  int64_t S() const { return N() * C * e(); }  // a block's input (and output)
  // What a block allocates and keeps for backward, its input and output aside: ln_1 and ln_2 statistics
  // (2 × N fp32 each), ln_1's output, qkv (3C), the attention output, the residual sum h, ln_2's output,
  // fc (4C) and GELU's output (4C): 15 N·C elements, and the fp32 softmax probabilities (B, NH, T, T).
  int64_t A() const { return 15 * N() * C * e() + 16 * N() + 4 * B * NH * T * T; }
  // The attention's share of A when it is checkpointed instead: qkv (3 N·C), its output (N·C), the
  // probabilities; its input (ln_1's output) stays, as the checkpoint.
  int64_t Aattn() const { return 4 * N() * C * e() + 4 * B * NH * T * T; }
  // Held outside the blocks: ln_f's statistics and output, the logits (N, V).
  int64_t H() const { return 8 * N() + S() + N() * V * e(); }
};

Bytes Measure(const Dims& d, const std::optional<rt::ActivationCheckpointingOptions>& ckpt) {
  gpt::GptConfig c;
  c.n_layer = d.L;
  c.n_head = d.NH;
  c.d_model = d.C;
  c.vocab_size = d.V;
  c.seq_len = d.T;
  c.dtype = d.dtype;
  c.dropout = 0.1f;
  MemoryAccount acct("ckpt");
  ScopedMemoryAccount scope(&acct);
  gpt::Gpt model(c);
  model.Initialize(5);
  std::unique_ptr<rt::ActivationCheckpointer> ac;
  if (ckpt) ac = std::make_unique<rt::ActivationCheckpointer>(model, *ckpt, false);
  auto [x, y] = MicroBatch(0, 0, 0, 1, d.B, 1, d.T, d.V);
  Bytes b;
  for (int pass = 0; pass < 2; ++pass) {  // the second pass: a contiguous buffer exists already
    const int64_t a0 = acct.Current(MemCategory::kActivations), h0 = acct.Current(MemCategory::kHostActivations);
    acct.ResetPeaks();
    model.ForwardLoss(x, y);
    b.held = acct.Current(MemCategory::kActivations) - a0;
    b.host_held = acct.Current(MemCategory::kHostActivations) - h0;
    model.BackwardLoss(1.0f);
    b.peak = acct.Peak(MemCategory::kActivations) - a0;
    b.host_peak = acct.Peak(MemCategory::kHostActivations) - h0;
    b.after = acct.Current(MemCategory::kActivations);
    b.host_after = acct.Current(MemCategory::kHostActivations);
  }
  return b;
}

}  // namespace

TEST_SUITE("unit") {
TEST_CASE("activation checkpointing: activation bytes per option against the formulas") {
  for (DType t : {DType::kF32, DType::kBF16}) {
    Dims d;
    d.dtype = t;
    INFO(DTypeName(t));
    const int64_t L = d.L, S = d.S(), A = d.A(), H = d.H();
    const Bytes off = Measure(d, std::nullopt);
    CHECK(off.held == H + (L + 1) * S + L * A);
    CHECK(off.after == 0);
    std::map<int64_t, int64_t> peak;
    for (int64_t n : {4, 3, 2, 1}) {
      INFO("number_checkpoints ", n);
      const Bytes b = Measure(d, Opts(n, false, false));
      CHECK(b.held == H + (n + 1) * S);  // n kept inputs and the last block's output
      CHECK(b.after == 0);
      // Backward replays the last (largest) segment of k blocks while the others are their inputs.
      const int64_t k = L - (n - 1) * L / n;
      CHECK(off.peak - b.peak == (L - k) * (A + S) - (n - 1) * S);
      peak[n] = b.peak;
    }
    for (int64_t n : {4, 2}) {
      INFO("number_checkpoints ", n);
      const Bytes cpu = Measure(d, Opts(n, true, false));
      CHECK(cpu.held == H + S);  // the kept inputs moved to host memory
      CHECK(cpu.host_held == n * S);
      CHECK(cpu.host_peak == n * S);
      CHECK(cpu.peak == peak[n] - (n - 1) * S);
      CHECK(cpu.host_after == 0);
      const Bytes contig = Measure(d, Opts(n, false, true));  // second pass: the buffer is there already
      CHECK(contig.after == n * S);                           // one slot per checkpoint, held for the run
      CHECK(contig.held == H + S);
      CHECK(contig.peak == cpu.peak);
      const Bytes both = Measure(d, Opts(n, true, true));
      CHECK(both.host_after == n * S);
      CHECK(both.after == 0);
      CHECK(both.held == H + S);
      CHECK(both.peak == cpu.peak);
    }
    rt::ActivationCheckpointingOptions attn;
    attn.select = rt::ActivationCheckpointingOptions::Select::kPredicate;
    attn.predicate = [](const nn::Module& m) { return m.type_name() == "CausalSelfAttention"; };
    const Bytes sel = Measure(d, attn);
    CHECK(sel.held == H + (L + 1) * S + L * (A - d.Aattn()));
    CHECK(off.peak - sel.peak == L * d.Aattn());
  }
}
}

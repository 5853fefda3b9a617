// The `numerics` section (docs/monitoring.md "Numerics statistics"): gradient statistics against a
// direct computation over the full gradient and world 1 against the sharded world 2; fp16 range
// counts on planted values; an overflow planted in one module's gradient on rank 1 only named with
// that parameter, module and rank (rank 0's partition alone holds nothing of it); the activation check
// naming the module whose forward produced a NaN.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "tests/runtime/engine_test_util.h"
#include "zerorun/comm/local/local_comm.h"
#include "zerorun/core/log.h"
#include "zerorun/runtime/config/config.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/nn/linear.h"
#include "zerorun/runtime/nn/loss.h"
#include "zerorun/zero/grad_stats.h"
#include "zerorun/zero/strategy.h"

using namespace zerorun;
namespace fs = std::filesystem;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// y = x ⊙ g over the last dimension (g: (d), ones); its backward adds dg = Σ dy ⊙ x and returns
// dy ⊙ g. What it plants, when asked, is the test's known fault.
class Planted final : public nn::Module {
 public:
  enum class Plant {
    kNone,
    kGradInf,         // dg[0] = +Inf (dx stays finite)
    kGradAndInputInf, // dg[0] = +Inf and dx = +Inf: the modules before it get non-finite gradients too
    kGradValues,      // dg = grad_values (replacing the true gradient)
    kForwardNaN,      // y[0] = NaN
  };
  Planted(int64_t d, DType dtype) : Module("Planted"), dtype_(dtype) {
    g_ = AddParameter("g", {d}, dtype, nn::Init::Ones());
  }
  Plant plant = Plant::kNone;
  std::vector<float> grad_values;

 protected:
  Tensor OnForward(const Tensor& x) override {
    x_ = x;
    std::vector<float> v = x.ToVector();
    const std::vector<float> g = g_->data().ToVector();
    for (size_t i = 0; i < v.size(); ++i) v[i] *= g[i % g.size()];
    if (plant == Plant::kForwardNaN) v[0] = kNaN;
    return Tensor::FromVector(v, x.shape(), dtype_, MemCategory::kActivations);
  }
  Tensor OnBackward(const Tensor& dy) override {
    const std::vector<float> d = dy.ToVector();
    const std::vector<float> x = x_.ToVector();
    std::vector<float> g = g_->data().ToVector();
    std::vector<float> dg = g_->grad().ToVector();
    std::vector<float> dx(d.size());
    for (size_t i = 0; i < d.size(); ++i) {
      dg[i % g.size()] += d[i] * x[i];
      dx[i] = d[i] * g[i % g.size()];
    }
    if (plant == Plant::kGradInf || plant == Plant::kGradAndInputInf) dg[0] = kInf;
    if (plant == Plant::kGradAndInputInf) std::fill(dx.begin(), dx.end(), kInf);
    if (plant == Plant::kGradValues) dg = grad_values;
    g_->grad().CopyFrom(Tensor::FromVector(dg, {static_cast<int64_t>(dg.size())}, dtype_));
    x_ = Tensor();
    return Tensor::FromVector(dx, dy.shape(), dtype_, MemCategory::kActivations);
  }
  void OnReleaseActivations() override { x_ = Tensor(); }

 private:
  DType dtype_;
  nn::Parameter* g_;
  Tensor x_;
};

// l1 (8 -> 8) -> p (Planted, 8) -> l2 (8 -> 1); loss = mean of the squared outputs. Two parameter
// groups (biases get no weight decay); the first's flat layout is l1.weight [0, 64), p.g [64, 72),
// l2.weight [72, 80): at 2 ranks in one bucket the partitions split at 40, so p.g is all rank 1's.
class Chain final : public nn::LossModule {
 public:
  explicit Chain(DType dtype) : LossModule("Chain"), dtype_(dtype) {
    nn::LinearOptions lo;
    lo.dtype = dtype;
    l1 = AddModule("l1", std::make_unique<nn::Linear>(8, 8, lo));
    p = AddModule("p", std::make_unique<Planted>(8, dtype));
    l2 = AddModule("l2", std::make_unique<nn::Linear>(8, 1, lo));
  }
  nn::Linear* l1;
  Planted* p;
  nn::Linear* l2;

 protected:
  float OnForwardLoss(const Tensor& inputs, const Tensor&) override {
    y_ = l2->Forward(p->Forward(l1->Forward(inputs.To(dtype_))));
    double sum = 0;
    for (float v : y_.ToVector()) sum += static_cast<double>(v) * v;
    return static_cast<float>(sum / static_cast<double>(y_.numel()));
  }
  void OnBackwardLoss(float grad_scale) override {
    std::vector<float> y = y_.ToVector();
    for (float& v : y) v = grad_scale * 2.0f * v / static_cast<float>(y.size());
    Tensor dy = Tensor::FromVector(y, y_.shape(), dtype_, MemCategory::kActivations);
    y_ = Tensor();
    l1->Backward(p->Backward(l2->Backward(dy)));
  }
  void OnReleaseActivations() override { y_ = Tensor(); }

 private:
  DType dtype_;
  Tensor y_;
};

// (2, 8) inputs of `rank` at step `step`: fixed, different per rank and step.
Tensor Inputs(int rank, int step) {
  std::vector<float> v(16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.7f * static_cast<float>(i) + 1.3f * rank + 0.37f * step);
  return Tensor::FromVector(v, {2, 8});
}

runtime::Config ChainConfig(int world, int stage, DType dtype, const std::string& extra = "") {
  runtime::LoadOptions lo;
  lo.world_size = world;
  lo.log_warnings = false;
  const std::string prec = dtype == DType::kF16   ? R"("fp16": {"enabled": true, "initial_scale_power": 8},)"
                           : dtype == DType::kBF16 ? R"("bf16": {"enabled": true},)"
                                                   : "";
  return runtime::LoadConfigString(
      Format(R"({{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, {}
        "optimizer": {{"type": "AdamW", "params": {{"lr": 0.01}}}},
        "zero_optimization": {{"stage": {}, "reduce_bucket_size": 1000}} {}}})",
             prec, stage, extra),
      lo);
}

// The log lines written while fn runs.
std::string CaptureLog(const std::function<void()>& fn) {
  const fs::path p = fs::temp_directory_path() / ("zr_numerics_log_" + std::to_string(::getpid()));
  fs::remove(p);
  SetLogFile(p.string());
  try {
    fn();
  } catch (...) {
    SetLogFile("");
    throw;
  }
  SetLogFile("");
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  fs::remove(p);
  return ss.str();
}

// Statistics of the values, computed here directly (the reference for the engine's).
struct Direct {
  int64_t numel = 0, zeros = 0;
  double max_abs = 0, sum_squares = 0;
  void Add(const std::vector<float>& v) {
    for (float x : v) {
      ++numel;
      if (x == 0.0f) ++zeros;
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
      sum_squares += static_cast<double>(x) * x;
    }
  }
};

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("numerics: fp16 range, zero and non-finite counts of planted values") {
  const std::vector<float> v = {0.0f,      -0.0f,    1e-8f,  -3e-8f,   5.9e-8f, 6e-8f, 1e-3f, -2.0f,
                                65504.0f, 65505.0f, -7e4f,  kInf,     -kInf,   kNaN};
  zero::GradStats s;
  zero::AccumulateGradStats(v.data(), static_cast<int64_t>(v.size()), DType::kF32, &s);
  CHECK(s.numel == 14);
  CHECK(s.zeros == 2);
  CHECK(s.nonfinite == 3);
  CHECK(s.fp16_underflow == 3);  // 1e-8, -3e-8, 5.9e-8 (below 2^-24 = 5.96e-8); 6e-8 is not
  CHECK(s.fp16_overflow == 5);   // 65505, -7e4 and the three non-finite; 65504 is fp16's largest finite
  CHECK(s.max_abs == doctest::Approx(7e4));
  double ss = 0;
  for (float x : v) {
    if (std::isfinite(x)) ss += static_cast<double>(x) * x;
  }
  CHECK(s.sum_squares == doctest::Approx(ss).epsilon(1e-12));
  // Partial statistics combine: the two halves added give the whole.
  zero::GradStats a, b;
  zero::AccumulateGradStats(v.data(), 7, DType::kF32, &a);
  zero::AccumulateGradStats(v.data() + 7, 7, DType::kF32, &b);
  a.Add(b);
  CHECK(a.numel == s.numel);
  CHECK(a.zeros == s.zeros);
  CHECK(a.fp16_underflow == s.fp16_underflow);
  CHECK(a.fp16_overflow == s.fp16_overflow);
  CHECK(a.max_abs == s.max_abs);
  // fp16 storage: 2^-24 is representable (not an underflow), Inf is an overflow.
  const std::vector<uint16_t> h = {0x0001 /* 2^-24 */, 0x0000, 0x7c00 /* +Inf */, 0x3c00 /* 1 */};
  zero::GradStats hs;
  zero::AccumulateGradStats(h.data(), 4, DType::kF16, &hs);
  CHECK(hs.fp16_underflow == 0);
  CHECK(hs.zeros == 1);
  CHECK(hs.fp16_overflow == 1);
  CHECK(hs.nonfinite == 1);
  CHECK(hs.max_abs == 1.0);
}

TEST_CASE("numerics: statistics equal a direct computation over the full gradient, and world 1 equals sharded world 2") {
  // World 1, stage 0: after Backward the parameters' gradients are the full (reduced) gradient.
  const int64_t mbs = 8;
  auto run = [&](int world, int stage, bool direct) {
    std::vector<runtime::GroupNumerics> out;
    double engine_norm = 0;
    std::vector<Direct> d;
    std::mutex mu;
    comm::RunLocalRanks(world, [&](comm::Communicator& comm) {
      zrtest::RunSpec s;
      s.world = world;
      s.stage = stage;
      s.micro = mbs / world;
      s.extra_json = R"(, "numerics": {"enabled": true, "interval": 1})";
      runtime::Config cfg = zrtest::LoadSpecConfig(s);
      gpt::GptConfig gc = zrtest::TinyGpt(DType::kF32);
      gpt::Gpt model(gc);
      model.Initialize(s.seed);
      runtime::Engine engine(model, cfg, comm);
      auto [x, y] = zrtest::MicroBatch(0, 0, comm.rank(), world, s.micro, 1, gc.seq_len, gc.vocab_size);
      engine.Forward(x, y);
      engine.Backward();
      if (direct) {
        for (const runtime::ParamGroup& g : engine.param_groups()) {
          d.emplace_back();
          for (nn::Parameter* p : g.params) d.back().Add(p->engine_grad().ToVector());
        }
      }
      runtime::StepResult r = engine.Step();
      std::lock_guard<std::mutex> lock(mu);
      CHECK(r.numerics.size() == engine.param_groups().size());
      int64_t numel = 0;
      for (const runtime::GroupNumerics& g : r.numerics) numel += g.numel;
      CHECK(numel == engine.num_parameters());  // every element once: no padding, no replica
      if (comm.rank() == 0) {
        out = r.numerics;
        engine_norm = r.grad_norm;
      }
    });
    return std::make_tuple(out, engine_norm, d);
  };
  const auto [w1, norm1, d] = run(1, 0, true);
  const int64_t gc_layers = zrtest::TinyGpt(DType::kF32).n_layer, gc_dim = zrtest::TinyGpt(DType::kF32).d_model;
  REQUIRE(w1.size() == 2);  // TinyGpt: weights, and the no-decay biases and gains
  REQUIRE(d.size() == 2);
  double sum_squares = 0;
  for (size_t g = 0; g < w1.size(); ++g) {
    CAPTURE(g);
    CHECK(w1[g].numel == d[g].numel);
    CHECK(w1[g].grad_max_abs == d[g].max_abs);
    CHECK(w1[g].grad_max_abs > 0);
    CHECK(w1[g].grad_norm == doctest::Approx(std::sqrt(d[g].sum_squares)).epsilon(1e-12));
    CHECK(w1[g].zero_fraction == static_cast<double>(d[g].zeros) / static_cast<double>(d[g].numel));
    CHECK(w1[g].nonfinite_fraction == 0);
    sum_squares += w1[g].grad_norm * w1[g].grad_norm;
  }
  CHECK(std::sqrt(sum_squares) == doctest::Approx(norm1).epsilon(1e-6));  // the engine's global norm (kernels::SumSquares sums in another order)
  for (auto [world, stage] : {std::pair{2, 0}, std::pair{2, 2}, std::pair{2, 3}, std::pair{4, 1}}) {
    if (mbs % world != 0) continue;
    CAPTURE(world);
    CAPTURE(stage);
    const std::vector<runtime::GroupNumerics> w = std::get<0>(run(world, stage, false));
    REQUIRE(w.size() == w1.size());
    for (size_t g = 0; g < w.size(); ++g) {
      CAPTURE(g);
      CHECK(w[g].numel == w1[g].numel);
      CHECK(w[g].grad_max_abs == doctest::Approx(w1[g].grad_max_abs).epsilon(1e-5));
      CHECK(w[g].grad_norm == doctest::Approx(w1[g].grad_norm).epsilon(1e-5));
      // Exact zeros are the same elements at every world size, except in the attention's key bias:
      // its gradient is zero in exact arithmetic (a softmax ignores a constant added to its row), so
      // each element is rounding noise, exactly zero in some summation orders and not in others.
      const double numel = static_cast<double>(w1[g].numel);
      const double key_bias = g == 1 ? static_cast<double>(gc_layers * gc_dim) : 0.0;
      CHECK(std::fabs(w[g].zero_fraction - w1[g].zero_fraction) * numel <= key_bias);
    }
  }
}

TEST_CASE("numerics: fp16 overflow and zero fractions of planted gradient values, every interval steps") {
  comm::RunLocalRanks(1, [&](comm::Communicator& comm) {
    Chain model(DType::kF16);
    model.Initialize(3);
    runtime::Engine engine(model, ChainConfig(1, 0, DType::kF16, R"(, "numerics": {"enabled": true, "interval": 2})"), comm);
    // p.g's stored (scaled) gradient: 2 zeros, 1 Inf, 5 ordinary values.
    model.p->plant = Planted::Plant::kGradValues;
    model.p->grad_values = {0.0f, 0.0f, kInf, 1.0f, -2.0f, 3.0f, 0.5f, 0.25f};
    const int64_t n = 80;  // group 0: l1.weight, p.g, l2.weight (the biases are group 1)
    for (int step = 0; step < 4; ++step) {
      engine.Forward(Inputs(0, step), Tensor());
      engine.Backward();
      const runtime::StepResult r = engine.Step();
      CHECK(r.overflow);  // the planted Inf
      if (step % 2 == 0) {
        CHECK(r.numerics.empty());  // steps 1 and 3 are not numerics steps (interval 2)
        continue;
      }
      CHECK(r.numerics.size() == 2);
      if (r.numerics.size() != 2) continue;
      const runtime::GroupNumerics& g = r.numerics[0];
      CHECK(r.numerics[1].numel == 9);
      CHECK(r.numerics[1].fp16_overflow_fraction == 0);
      CHECK(g.numel == n);
      CHECK(g.fp16_overflow_fraction == doctest::Approx(1.0 / static_cast<double>(n)));
      CHECK(g.nonfinite_fraction == doctest::Approx(1.0 / static_cast<double>(n)));
      CHECK(g.fp16_underflow_fraction == 0);  // fp16 gradients: nothing below 2^-24 is left to count
      CHECK(g.zero_fraction >= 2.0 / static_cast<double>(n));
      // max-abs is over the finite elements, unscaled.
      CHECK(g.grad_max_abs >= 3.0 / r.loss_scale);
      CHECK(std::isfinite(g.grad_norm));
    }
  });
}

TEST_CASE("numerics: an overflow planted in one module's gradient on rank 1 only is named with that parameter, module and rank") {
  for (int stage : {1, 2}) {
    for (Planted::Plant plant : {Planted::Plant::kGradInf, Planted::Plant::kGradAndInputInf}) {
      CAPTURE(stage);
      CAPTURE(static_cast<int>(plant));
      std::mutex mu;
      std::vector<runtime::StepResult> results(2);
      const std::string log = CaptureLog([&] {
        comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
          Chain model(DType::kF16);
          model.Initialize(3);
          runtime::Engine engine(model, ChainConfig(2, stage, DType::kF16), comm);
          // The premise: rank 0's partition holds nothing of p.g, rank 1's all of it (so a report
          // from rank 0's partition alone cannot name it).
          int pg = -1;
          const std::vector<nn::Parameter*> params = model.Parameters();
          for (size_t i = 0; i < params.size(); ++i) {
            if (params[i]->name() == "p.g") pg = static_cast<int>(i);
          }
          int64_t held = 0;
          for (const zero::StateExtent& e : engine.zero_strategy().StateExtents()) {
            if (e.param == pg) held += e.numel;
          }
          {
            std::lock_guard<std::mutex> lock(mu);
            CHECK(held == (comm.rank() == 1 ? 8 : 0));
          }
          for (int step = 0; step < 2; ++step) {
            model.p->plant = step == 1 && comm.rank() == 1 ? plant : Planted::Plant::kNone;
            engine.Forward(Inputs(comm.rank(), step), Tensor());
            engine.Backward();
            runtime::StepResult r = engine.Step();
            std::lock_guard<std::mutex> lock(mu);
            if (step == 0) CHECK_FALSE(r.overflow);
            if (step == 1) results[static_cast<size_t>(comm.rank())] = r;
          }
          std::lock_guard<std::mutex> lock(mu);
          CHECK(engine.skipped_steps() == 1);
        });
      });
      for (int rank = 0; rank < 2; ++rank) {
        const runtime::StepResult& r = results[static_cast<size_t>(rank)];
        CAPTURE(rank);
        CHECK(r.overflow);
        CHECK_FALSE(r.applied);
        // The module whose backward ran first among those with non-finite gradients: p (backward
        // runs l2, p, l1), on rank 1, whatever else became non-finite after it.
        CHECK(r.nonfinite_module == "p");
        CHECK(r.nonfinite_module_ranks == std::vector<int>{1});
        REQUIRE(!r.nonfinite_params.empty());
        CHECK(r.nonfinite_params[0] == "p.g (rank 1)");
        if (plant == Planted::Plant::kGradInf) {
          CHECK(r.nonfinite_params.size() == 1);
          CHECK(r.nonfinite_ranks == std::vector<int>{1});
        } else {
          // dx = Inf: l1's gradients are non-finite too, its weight on both ranks' partitions; l2's are not.
          CHECK(r.nonfinite_ranks == std::vector<int>{0, 1});
          CHECK(std::find(r.nonfinite_params.begin(), r.nonfinite_params.end(), "l1.weight (rank 0,1)") !=
                r.nonfinite_params.end());
          for (const std::string& n : r.nonfinite_params) CHECK(n.rfind("l2.", 0) != 0);
        }
      }
      CHECK_MESSAGE(log.find("first module in backward order with non-finite gradients: p (on rank(s) 1)") !=
                        std::string::npos, log);
      CHECK_MESSAGE(log.find("p.g (rank 1)") != std::string::npos, log);
    }
  }
}

TEST_CASE("numerics: bf16 gradients whose sum of squares overflows but which are finite are not an overflow") {
  // The boundary step reads the norm's sums of squares first and scans the gradients only when a sum
  // is not finite. 1e30 squared overflows the sum's fp32 lanes, so the scan runs and finds every
  // gradient finite: the step is applied (bf16 checks overflow by default). With an Inf among the same
  // values it is an overflow, and skipped.
  for (int world : {1, 2}) {
    CAPTURE(world);
    std::mutex mu;
    comm::RunLocalRanks(world, [&](comm::Communicator& comm) {
      Chain model(DType::kBF16);
      model.Initialize(3);
      runtime::Engine engine(model, ChainConfig(world, 2, DType::kBF16), comm);
      model.p->plant = Planted::Plant::kGradValues;
      model.p->grad_values = {1e30f, -1e30f, 1.0f, -2.0f, 3.0f, 0.5f, 0.25f, 0.0f};
      for (int step = 0; step < 3; ++step) {
        if (step == 1) model.p->grad_values[3] = kInf;
        if (step == 2) model.p->grad_values[3] = -2.0f;
        engine.Forward(Inputs(comm.rank(), step), Tensor());
        engine.Backward();
        const runtime::StepResult r = engine.Step();
        std::lock_guard<std::mutex> lock(mu);
        CAPTURE(step);
        CHECK(r.overflow == (step == 1));
        CHECK(r.applied == (step != 1));
      }
      std::lock_guard<std::mutex> lock(mu);
      CHECK(engine.skipped_steps() == 1);
    });
  }
}

TEST_CASE("numerics: fp32 training names non-finite gradients with numerics.enabled and still applies the step") {
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    Chain model(DType::kF32);
    model.Initialize(3);
    runtime::Engine engine(model, ChainConfig(2, 2, DType::kF32, R"(, "numerics": {"enabled": true})"), comm);
    model.p->plant = comm.rank() == 1 ? Planted::Plant::kGradInf : Planted::Plant::kNone;
    engine.Forward(Inputs(comm.rank(), 0), Tensor());
    engine.Backward();
    const runtime::StepResult r = engine.Step();
    CHECK(r.overflow);
    CHECK(r.applied);  // fp32 does not skip (DeepSpeed's behaviour): monitoring does not change it
    CHECK(r.nonfinite_module == "p");
    CHECK(r.nonfinite_ranks == std::vector<int>{1});
    CHECK(r.numerics.size() == 2);
    if (r.numerics.size() != 2) return;
    CHECK(r.numerics[0].nonfinite_fraction == doctest::Approx(1.0 / 80));
    CHECK(r.numerics[1].nonfinite_fraction == 0);
    CHECK(r.numerics[0].fp16_overflow_fraction == 0);  // fp16 counts only for fp16 training
  });
}

TEST_CASE("numerics: check_activations names the first module whose forward output was not finite") {
  for (bool check : {false, true}) {
    CAPTURE(check);
    std::string first;
    const std::string log = CaptureLog([&] {
      comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
        Chain model(DType::kF32);
        model.Initialize(3);
        runtime::Engine engine(
            model, ChainConfig(2, 0, DType::kF32, Format(R"(, "numerics": {{"check_activations": {}}})", check ? "true" : "false")), comm);
        // A finite forward names nothing.
        CHECK(std::isfinite(engine.Forward(Inputs(comm.rank(), 0), Tensor())));
        CHECK(engine.first_nonfinite_output().empty());
        engine.Backward();
        engine.Step();
        // Rank 1's p puts a NaN into its output; l2 after it is not finite either.
        model.p->plant = comm.rank() == 1 ? Planted::Plant::kForwardNaN : Planted::Plant::kNone;
        const float loss = engine.Forward(Inputs(comm.rank(), 1), Tensor());
        if (comm.rank() == 1) {
          CHECK(std::isnan(loss));
          first = engine.first_nonfinite_output();
        } else {
          CHECK(std::isfinite(loss));
          CHECK(engine.first_nonfinite_output().empty());
        }
      });
    });
    if (check) {
      CHECK(first == "p (Planted)");
      CHECK_MESSAGE(log.find("rank 1: the loss is nan") != std::string::npos, log);
      CHECK_MESSAGE(log.find("first module in forward order whose output was not finite: p (Planted)") !=
                        std::string::npos, log);
    } else {
      CHECK(first.empty());
      CHECK_MESSAGE(log.find("check_activations") != std::string::npos, log);  // the hint
    }
  }
}

}  // TEST_SUITE

// gpt_example: trains the example GPT for a few steps on a synthetic, learnable token stream with a
// tiny AdamW written against Parameter's engine accessors (the real engine lives in runtime/), and
// prints the loss. Shows the whole user-facing API: build, Initialize, ForwardLoss, BackwardLoss.
//   gpt_example [--steps N] [--dtype fp32|bf16|fp16] [--layers L] [--batch B] [--seq T] [--lr X]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "zerorun/core/rng.h"
#include "zerorun/examples/gpt/gpt.h"

using namespace zerorun;

namespace {

// AdamW on fp32 master copies of every parameter; 16-bit parameters get the rounded result.
class TinyAdamW {
 public:
  TinyAdamW(nn::Module& model, float lr) : lr_(lr) {
    for (nn::Parameter* p : model.Parameters()) {
      if (!p->requires_grad()) continue;
      State s{p, p->engine_data().To(DType::kF32), Tensor::Zeros(p->shape(), DType::kF32),
              Tensor::Zeros(p->shape(), DType::kF32)};
      states_.push_back(std::move(s));
    }
  }
  void Step() {
    ++t_;
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(t_)), c2 = 1.0f - std::pow(b2, static_cast<float>(t_));
    for (State& s : states_) {
      std::vector<float> g = s.p->engine_grad().ToVector();
      float* w = s.master.data_as<float>();
      float* m = s.m.data_as<float>();
      float* v = s.v.data_as<float>();
      const float wd = s.p->options().weight_decay ? 0.1f : 0.0f;
      for (size_t i = 0; i < g.size(); ++i) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        w[i] -= lr_ * (m[i] / c1 / (std::sqrt(v[i] / c2) + eps) + wd * w[i]);
      }
      s.p->engine_data().CopyFrom(s.master);
    }
  }

 private:
  struct State {
    nn::Parameter* p;
    Tensor master, m, v;
  };
  float lr_;
  int t_ = 0;
  std::vector<State> states_;
};

// A stream where token i+1 follows from token i (a fixed permutation), with some noise: learnable.
void Batch(int64_t B, int64_t T, int64_t V, uint64_t step, Tensor* tokens, Tensor* targets) {
  *tokens = Tensor::Empty({B, T}, DType::kI32);
  *targets = Tensor::Empty({B, T}, DType::kI32);
  for (int64_t b = 0; b < B; ++b) {
    int32_t cur = static_cast<int32_t>(Philox4x32(7, step, static_cast<uint64_t>(b))[0] % V);
    for (int64_t t = 0; t < T; ++t) {
      tokens->data_as<int32_t>()[b * T + t] = cur;
      cur = static_cast<int32_t>((cur * 5 + 3) % V);
      targets->data_as<int32_t>()[b * T + t] = cur;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  gpt::GptConfig cfg;
  cfg.n_layer = 2;
  cfg.d_model = 64;
  cfg.n_head = 4;
  cfg.vocab_size = 64;
  cfg.seq_len = 32;
  int steps = 30;
  int64_t batch = 8;
  float lr = 3e-3f;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--steps") steps = std::atoi(v.c_str());
    else if (a == "--dtype") cfg.dtype = ParseDType(v);
    else if (a == "--layers") cfg.n_layer = std::atoi(v.c_str());
    else if (a == "--batch") batch = std::atoll(v.c_str());
    else if (a == "--seq") cfg.seq_len = std::atoll(v.c_str());
    else if (a == "--lr") lr = std::strtof(v.c_str(), nullptr);
    else {
      std::fprintf(stderr, "gpt_example: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  try {
    gpt::Gpt model(cfg);
    model.Initialize(/*seed=*/1234);
    std::printf("%s: %lld parameters\n", cfg.ToString().c_str(), static_cast<long long>(model.NumParameterElements()));
    TinyAdamW opt(model, lr);
    for (int step = 0; step < steps; ++step) {
      Tensor tokens, targets;
      Batch(batch, cfg.seq_len, cfg.vocab_size, static_cast<uint64_t>(step), &tokens, &targets);
      auto t0 = std::chrono::steady_clock::now();
      model.ZeroGrad();
      const float loss = model.ForwardLoss(tokens, targets);
      model.BackwardLoss(1.0f);
      opt.Step();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (step % 5 == 0 || step == steps - 1) {
        std::printf("step %3d  loss %.4f  %.0f tokens/s\n", step, loss, static_cast<double>(batch * cfg.seq_len) / s);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "gpt_example: %s\n", e.what());
    return 1;
  }
  return 0;
}

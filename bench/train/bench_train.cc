// bench_train: training tokens/s of the example GPT through runtime::Engine on one rank: forward,
// backward and the AdamW step (DeepSpeed config: AdamW, no clipping, no schedule, ZeRO stage 0;
// bf16 = bf16 weights with fp32 master and optimizer state). run.sh sets it beside torch.optim.AdamW.
//   bench_train [--dtype fp32|bf16] [--threads N] [--iters N] [--warmup N] [--layers L] [--dim C]
//               [--heads H] [--seq T] [--vocab V] [--batch B]
// Prints the median step time and its parts (forward / backward / step); last lines "cpu_tokens_per_s <v>"
// (per process CPU-second) and "tokens_per_s <v>".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/comm/init.h"
#include "zerorun/core/cpu_features.h"
#include "zerorun/core/rng.h"
#include "zerorun/core/thread_pool.h"
#include "zerorun/examples/gpt/gpt.h"
#include "zerorun/kernels/gemm_backend.h"
#include "zerorun/runtime/config/config.h"
#include "zerorun/runtime/engine.h"

using namespace zerorun;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string CpuModel() {
  std::string model = "unknown";
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      std::string l = line;
      if (l.rfind("model name", 0) == 0 && l.find(':') != std::string::npos) {
        model = l.substr(l.find(':') + 2);
        if (!model.empty() && model.back() == '\n') model.pop_back();
        break;
      }
    }
    std::fclose(f);
  }
  return model;
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  gpt::GptConfig gc;  // defaults: 4 layers, d 256, 4 heads, T 128, V 256
  std::string dtype = "fp32";
  int64_t batch = 8;
  int iters = 10, warmup = 2, threads = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_train: %s needs a value\n", a.c_str());
      return 2;
    }
    std::string v = argv[++i];
    if (a == "--dtype") dtype = v;
    else if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--iters") iters = std::max(1, std::atoi(v.c_str()));
    else if (a == "--warmup") warmup = std::atoi(v.c_str());
    else if (a == "--layers") gc.n_layer = std::atoll(v.c_str());
    else if (a == "--dim") gc.d_model = std::atoll(v.c_str());
    else if (a == "--heads") gc.n_head = std::atoll(v.c_str());
    else if (a == "--seq") gc.seq_len = std::atoll(v.c_str());
    else if (a == "--vocab") gc.vocab_size = std::atoll(v.c_str());
    else if (a == "--batch") batch = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "bench_train: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (dtype != "fp32" && dtype != "bf16") {
    std::fprintf(stderr, "bench_train: --dtype must be fp32 or bf16, got '%s'\n", dtype.c_str());
    return 2;
  }
  if (threads > 0) ThreadPool::SetDefaultThreads(threads);
  try {
    const std::string json = Format(
        R"({{"train_micro_batch_size_per_gpu": {}, "gradient_accumulation_steps": 1,
            "optimizer": {{"type": "AdamW", "params": {{"lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8,
                                                      "weight_decay": 0.01}}}},
            "bf16": {{"enabled": {}}}, "zero_optimization": {{"stage": 0}}}})",
        batch, dtype == "bf16" ? "true" : "false");
    runtime::LoadOptions lo;
    lo.source_name = "bench_train config";
    lo.hidden_size = gc.d_model;
    runtime::Config cfg = runtime::LoadConfigString(json, lo);
    gc.dtype = cfg.ModelDType();
    std::shared_ptr<comm::Communicator> comm = comm::InitFromEnv();  // no launcher env: one local rank
    gpt::Gpt model(gc);
    model.Initialize(1);
    runtime::EngineOptions eo;
    eo.groups.no_weight_decay_for_1d = true;
    runtime::Engine engine(model, cfg, comm, eo);

    const int64_t T = gc.seq_len;
    Tensor tokens = Tensor::Empty({batch, T}, DType::kI32), targets = Tensor::Empty({batch, T}, DType::kI32);
    for (int64_t i = 0; i < batch * T; ++i) {
      tokens.data_as<int32_t>()[i] = static_cast<int32_t>(Philox4x32(1, 0, static_cast<uint64_t>(i))[0] % gc.vocab_size);
      targets.data_as<int32_t>()[i] = static_cast<int32_t>(Philox4x32(2, 0, static_cast<uint64_t>(i))[0] % gc.vocab_size);
    }
    std::vector<double> total, fwd, bwd, step, cpu;
    float first_loss = 0, last_loss = 0;
    for (int i = 0; i < warmup + iters; ++i) {
      const double c0 = ProcessCpuSeconds();
      auto t0 = Clock::now();
      last_loss = engine.Forward(tokens, targets);
      auto t1 = Clock::now();
      engine.Backward();
      auto t2 = Clock::now();
      engine.Step();
      auto t3 = Clock::now();
      if (i == 0) first_loss = last_loss;
      if (i < warmup) continue;
      fwd.push_back(Seconds(t0, t1));
      bwd.push_back(Seconds(t1, t2));
      step.push_back(Seconds(t2, t3));
      total.push_back(Seconds(t0, t3));
      cpu.push_back(ProcessCpuSeconds() - c0);
    }
    const double med = Median(total);
    // Model FLOPs per token trained, PaLM's closed form (appendix B) as bench_gpt_kernels uses it:
    // 6 N + 12 L d T, N = parameters without the position embedding (forward + backward of every
    // weight's product; attention's two T x T products counted without the causal half).
    const double d = static_cast<double>(gc.d_model), L = static_cast<double>(gc.n_layer);
    const double n_weights = static_cast<double>(engine.num_parameters()) - static_cast<double>(gc.seq_len) * d;
    const double flops_per_token = 6.0 * n_weights + 12.0 * L * d * static_cast<double>(T);
    const double tokens_per_s = static_cast<double>(batch * T) / med;
    std::printf("cpu: %s; zerorun isa %s; gemm: %s\n", CpuModel().c_str(), IsaName(ActiveIsa()).c_str(),
                kernels::GemmDescription().c_str());
    if (std::string w = kernels::GemmWarning(); !w.empty()) std::printf("warning: %s\n", w.c_str());
    std::printf("model FLOPs/token %.4g (closed form); achieved %.2f GFLOP/s\n", flops_per_token,
                flops_per_token * tokens_per_s * 1e-9);
    std::printf("zerorun %s, B=%lld, threads=%d, %lld params: %.1f ms/step (median of %d; forward %.1f, "
                "backward %.1f, step %.1f), loss %.4f -> %.4f\n",
                gc.ToString().c_str(), static_cast<long long>(batch), ThreadPool::Default().num_threads(),
                static_cast<long long>(engine.num_parameters()), 1e3 * med, iters, 1e3 * Median(fwd),
                1e3 * Median(bwd), 1e3 * Median(step), first_loss, last_loss);
    std::printf("gflops %.3f\n", flops_per_token * tokens_per_s * 1e-9);
    // Process CPU time per step (all threads): robust to other load on a shared host at 1 thread.
    std::printf("cpu_tokens_per_s %.1f\n", static_cast<double>(batch * T) / Median(cpu));
    std::printf("tokens_per_s %.1f\n", tokens_per_s);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}

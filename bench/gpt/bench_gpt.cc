// bench_gpt: forward+backward tokens/s of the example GPT on CPU (no optimizer step), the number
// run.sh sets beside PyTorch on the same dims. With --profile it also reports where the time goes,
// per module type, exclusive of children, measured through the observer seam.
//   bench_gpt [--dtype fp32|bf16|fp16] [--threads N] [--iters N] [--warmup N] [--layers L] [--dim C]
//             [--heads H] [--seq T] [--vocab V] [--batch B] [--profile]
// Last line: "tokens_per_s <value>".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "zerorun/core/rng.h"
#include "zerorun/core/thread_pool.h"
#include "zerorun/examples/gpt/gpt.h"

using namespace zerorun;
using Clock = std::chrono::steady_clock;

namespace {

// Exclusive wall time per module type and phase: a module's time minus its children's.
class ProfileObserver final : public nn::ModuleObserver {
 public:
  void PreForward(nn::Module&, bool) override { Push(); }
  void PostForward(nn::Module& m, bool) override { Pop(m.type_name() + " fwd"); }
  void PreBackward(nn::Module&) override { Push(); }
  void PostBackward(nn::Module& m) override { Pop(m.type_name() + " bwd"); }
  void Print(double total_s) const {
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [k, v] : exclusive_s_) rows.emplace_back(v, k);
    std::sort(rows.rbegin(), rows.rend());
    std::printf("%-28s %10s %7s\n", "module (exclusive)", "ms/iter", "share");
    for (const auto& [s, k] : rows) {
      std::printf("%-28s %10.2f %6.1f%%\n", k.c_str(), 1e3 * s / iters, 100.0 * s / total_s);
    }
  }
  void Reset() { exclusive_s_.clear(); }
  int iters = 1;

 private:
  struct Frame {
    Clock::time_point start;
    double child_s = 0;
  };
  void Push() { stack_.push_back({Clock::now(), 0.0}); }
  void Pop(const std::string& key) {
    Frame f = stack_.back();
    stack_.pop_back();
    const double s = std::chrono::duration<double>(Clock::now() - f.start).count();
    exclusive_s_[key] += s - f.child_s;
    if (!stack_.empty()) stack_.back().child_s += s;
  }
  std::vector<Frame> stack_;
  std::map<std::string, double> exclusive_s_;
};

}  // namespace

int main(int argc, char** argv) {
  gpt::GptConfig cfg;  // defaults: 4 layers, d 256, 4 heads, T 128, V 256
  int64_t batch = 8;
  int iters = 10, warmup = 2, threads = 0;
  bool profile = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--profile") {
      profile = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_gpt: %s needs a value\n", a.c_str());
      return 2;
    }
    std::string v = argv[++i];
    if (a == "--dtype") cfg.dtype = ParseDType(v);
    else if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--iters") iters = std::atoi(v.c_str());
    else if (a == "--warmup") warmup = std::atoi(v.c_str());
    else if (a == "--layers") cfg.n_layer = std::atoll(v.c_str());
    else if (a == "--dim") cfg.d_model = std::atoll(v.c_str());
    else if (a == "--heads") cfg.n_head = std::atoll(v.c_str());
    else if (a == "--seq") cfg.seq_len = std::atoll(v.c_str());
    else if (a == "--vocab") cfg.vocab_size = std::atoll(v.c_str());
    else if (a == "--batch") batch = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "bench_gpt: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (threads > 0) ThreadPool::SetDefaultThreads(threads);
  try {
    gpt::Gpt model(cfg);
    model.Initialize(1);
    const int64_t T = cfg.seq_len;
    Tensor tokens = Tensor::Empty({batch, T}, DType::kI32), targets = Tensor::Empty({batch, T}, DType::kI32);
    for (int64_t i = 0; i < batch * T; ++i) {
      tokens.data_as<int32_t>()[i] = static_cast<int32_t>(Philox4x32(1, 0, static_cast<uint64_t>(i))[0] % cfg.vocab_size);
      targets.data_as<int32_t>()[i] = static_cast<int32_t>(Philox4x32(2, 0, static_cast<uint64_t>(i))[0] % cfg.vocab_size);
    }
    ProfileObserver prof;
    auto step = [&] {
      model.ZeroGrad();
      model.ForwardLoss(tokens, targets);
      model.BackwardLoss(1.0f);
    };
    for (int i = 0; i < warmup; ++i) step();
    std::vector<double> times;
    for (int i = 0; i < iters; ++i) {
      auto t0 = Clock::now();
      step();
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    const double med = times[times.size() / 2];
    const double tps = static_cast<double>(batch * T) / med;
    std::printf("zerorun %s, B=%lld, threads=%d, %lld params: %.1f ms/iter (median of %d), min %.1f ms\n",
                cfg.ToString().c_str(), static_cast<long long>(batch), ThreadPool::Default().num_threads(),
                static_cast<long long>(model.NumParameterElements()), 1e3 * med, iters, 1e3 * times.front());
    if (profile) {
      model.SetObserver(&prof);
      prof.iters = iters;
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) step();
      const double total = std::chrono::duration<double>(Clock::now() - t0).count();
      model.SetObserver(nullptr);
      prof.Print(total);
    }
    std::printf("tokens_per_s %.1f\n", tps);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}

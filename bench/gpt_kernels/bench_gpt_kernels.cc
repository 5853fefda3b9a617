// bench_gpt_kernels: one GPT-2 training step written directly against the kernel entries (ops.h), the
// way llm.c's train_gpt2.cu is: embedding, L pre-LN blocks (LayerNorm, QKV linear, causal attention,
// projection, residual, LayerNorm, 4C GELU MLP, residual), final LayerNorm, tied LM head, softmax
// cross-entropy, the whole backward, and a multi-tensor AdamW on fp32 master weights writing the
// 16-bit weights. It measures what the kernels allow (no engine, no ZeRO): tokens/s and MFU on a CUDA
// device, and runs the same code on the CPU (small dims) so its logic is checked without a GPU.
//
//   bench_gpt_kernels [--device cpu|cuda] [--dtype bf16|fp16|fp32] [--layers 12] [--dim 768] [--heads 12]
//                     [--seq 1024] [--vocab 50257] [--batch 8] [--steps 20] [--warmup 3] [--lr 3e-4]
//                     [--seed 1] [--peak-tflops P] [--losses FILE]
//
// Data: one fixed batch of random tokens (targets = the next token), trained on repeatedly, so the loss
// must fall from ln(V); the same seed gives the same initial weights and data on every device, and
// --losses writes one loss per step for comparing devices. MFU uses PaLM's closed form (appendix B),
// as nanoGPT does: FLOPs per token = 6 N + 12 L C T, N = parameters without the position embedding,
// against --peak-tflops (default 989.4 on cuda: H100/H200 SXM dense bf16; none on cpu).
// Last line: one JSON object with the figures.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/core/cpu_features.h"
#include "zerorun/core/device.h"
#include "zerorun/core/dtype.h"
#include "zerorun/core/error.h"
#include "zerorun/core/rng.h"
#include "zerorun/kernels/cpu/optim.h"
#include "zerorun/kernels/ops.h"
#include "zerorun/kernels/ref/optim.h"
#if defined(ZERORUN_HAVE_CUDA)
#include "zerorun/kernels/cuda/optim.h"
#endif

using namespace zerorun;
using namespace zerorun::kernels;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string device = "cpu";
  DType dtype = DType::kBF16;
  int64_t L = 12, C = 768, NH = 12, T = 1024, V = 50257, B = 8;
  int steps = 20, warmup = 3;
  float lr = 3e-4f;
  uint64_t seed = 1;
  double peak_tflops = -1;
  std::string losses_path;
};

// "model name" of /proc/cpuinfo ("?" when unreadable).
std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "?";
}

[[noreturn]] void Usage(const std::string& msg) {
  std::fprintf(stderr, "bench_gpt_kernels: %s\n(see the comment at the top of bench/gpt_kernels/bench_gpt_kernels.cc)\n",
               msg.c_str());
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(f + " needs a value");
      return argv[++i];
    };
    auto integer = [&]() -> int64_t {
      std::string v = value();
      char* end = nullptr;
      long long x = std::strtoll(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || x <= 0) Usage(f + ": '" + v + "' is not a positive integer");
      return x;
    };
    if (f == "--device") a.device = value();
    else if (f == "--dtype") {
      try {
        a.dtype = ParseDType(value());
      } catch (const Error& e) {
        Usage(e.what());
      }
    } else if (f == "--layers") a.L = integer();
    else if (f == "--dim") a.C = integer();
    else if (f == "--heads") a.NH = integer();
    else if (f == "--seq") a.T = integer();
    else if (f == "--vocab") a.V = integer();
    else if (f == "--batch") a.B = integer();
    else if (f == "--steps") a.steps = static_cast<int>(integer());
    else if (f == "--warmup") a.warmup = static_cast<int>(std::stoll(value()));
    else if (f == "--lr") a.lr = std::stof(value());
    else if (f == "--seed") a.seed = static_cast<uint64_t>(integer());
    else if (f == "--peak-tflops") a.peak_tflops = std::stod(value());
    else if (f == "--losses") a.losses_path = value();
    else Usage("unknown flag '" + f + "'");
  }
  if (a.device != "cpu" && a.device != "cuda") Usage("--device must be cpu or cuda");
  if (a.dtype != DType::kF32 && !Is16Bit(a.dtype)) Usage("--dtype must be fp32, fp16 or bf16");
  if (a.C % a.NH != 0) Usage("--dim must be divisible by --heads");
  if (a.warmup < 0 || a.warmup >= a.steps) Usage("--warmup must be in [0, --steps)");
  if (a.peak_tflops < 0 && a.device == "cuda") a.peak_tflops = 989.4;
  return a;
}

// Memory of the device under test, freed at exit.
class Arena {
 public:
  explicit Arena(Device d) : device_(d) {}
  ~Arena() {
    for (auto& [p, n] : blocks_) GetAllocator(device_).Deallocate(p, n);
  }
  void* Get(DType t, int64_t n) {
    size_t bytes = std::max<size_t>(16, static_cast<size_t>(n) * DTypeSize(t));
    void* p = GetAllocator(device_).Allocate(bytes);
    blocks_.emplace_back(p, bytes);
    bytes_ += bytes;
    return p;
  }
  size_t bytes() const { return bytes_; }

 private:
  Device device_;
  std::vector<std::pair<void*, size_t>> blocks_;
  size_t bytes_ = 0;
};

// One parameter: its 16-bit (or fp32) compute copy, fp32 master, gradient and Adam moments.
struct Param {
  int64_t n = 0;
  void* w = nullptr;       // dtype
  float* master = nullptr;
  float* grad = nullptr;
  float* m = nullptr;
  float* v = nullptr;
};

struct Layer {
  Param ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  // Saved activations (dtype unless said): the block input is the previous layer's residual.
  void *ln1, *qkv, *atty, *res2, *ln2, *fch, *fchg, *out;
  float *ln1_mean, *ln1_rstd, *att, *ln2_mean, *ln2_rstd;  // fp32
};

class Gpt2 {
 public:
  Gpt2(const Args& a, Device d) : a_(a), dev_(d), arena_(d), N_(a.B * a.T) {
    const int64_t C = a.C, V = a.V, T = a.T, L = a.L;
    const float std = 0.02f, proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(L));
    wte_ = NewParam(V * C, Init::kNormal, std);
    wpe_ = NewParam(T * C, Init::kNormal, std);
    layers_.resize(static_cast<size_t>(L));
    for (Layer& l : layers_) {
      l.ln1w = NewParam(C, Init::kOne, 0);
      l.ln1b = NewParam(C, Init::kZero, 0);
      l.qkvw = NewParam(3 * C * C, Init::kNormal, std);
      l.qkvb = NewParam(3 * C, Init::kZero, 0);
      l.projw = NewParam(C * C, Init::kNormal, proj_std);
      l.projb = NewParam(C, Init::kZero, 0);
      l.ln2w = NewParam(C, Init::kOne, 0);
      l.ln2b = NewParam(C, Init::kZero, 0);
      l.fcw = NewParam(4 * C * C, Init::kNormal, std);
      l.fcb = NewParam(4 * C, Init::kZero, 0);
      l.fcprojw = NewParam(4 * C * C, Init::kNormal, proj_std);
      l.fcprojb = NewParam(C, Init::kZero, 0);
      l.ln1 = Act(C);
      l.qkv = Act(3 * C);
      l.atty = Act(C);
      l.res2 = Act(C);
      l.ln2 = Act(C);
      l.fch = Act(4 * C);
      l.fchg = Act(4 * C);
      l.out = Act(C);
      l.ln1_mean = F32(N_);
      l.ln1_rstd = F32(N_);
      l.ln2_mean = F32(N_);
      l.ln2_rstd = F32(N_);
      l.att = F32(AttentionSavedElems(a.B, T, a.NH));
    }
    lnfw_ = NewParam(C, Init::kOne, 0);
    lnfb_ = NewParam(C, Init::kZero, 0);
    encoded_ = Act(C);
    lnf_ = Act(C);
    lnf_mean_ = F32(N_);
    lnf_rstd_ = F32(N_);
    logits_ = Act(V);
    d_res_ = Act(C);
    d_res2_ = Act(C);
    d_tmp_ = Act(C);
    d_wide_ = Act(4 * C);
    d_wide2_ = Act(4 * C);
    d_qkv_ = Act(3 * C);
    // The fixed batch: tokens (B, T + 1), inputs the first T, targets the last T.
    std::vector<int32_t> seq(static_cast<size_t>(a.B * (T + 1)));
    for (size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<int32_t>(Philox4x32(a.seed, 99, i)[0] % V);
    std::vector<int32_t> in(static_cast<size_t>(N_)), tgt(static_cast<size_t>(N_));
    for (int64_t b = 0; b < a.B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        in[static_cast<size_t>(b * T + t)] = seq[static_cast<size_t>(b * (T + 1) + t)];
        tgt[static_cast<size_t>(b * T + t)] = seq[static_cast<size_t>(b * (T + 1) + t + 1)];
      }
    }
    tokens_ = static_cast<int32_t*>(arena_.Get(DType::kI32, N_));
    targets_ = static_cast<int32_t*>(arena_.Get(DType::kI32, N_));
    CopyBytes(tokens_, dev_, in.data(), Device::CPU(), in.size() * sizeof(int32_t));
    CopyBytes(targets_, dev_, tgt.data(), Device::CPU(), tgt.size() * sizeof(int32_t));
  }

  int64_t parameters() const { return params_total_; }
  int64_t position_parameters() const { return wpe_.n; }
  size_t device_bytes() const { return arena_.bytes(); }

  // Forward, backward and the update; returns the loss (this waits for the device).
  float Step(int64_t step) {
    for (const Param& p : params_) Fill(p.grad, 0.0f, p.n, DType::kF32);
    const float loss = Forward();
    Backward();
    Update(step);
    return loss;
  }

 private:
  enum class Init { kNormal, kOne, kZero };

  Param NewParam(int64_t n, Init init, float std) {
    Param p;
    p.n = n;
    p.w = arena_.Get(a_.dtype, n);
    p.master = F32(n);
    p.grad = F32(n);
    p.m = F32(n);
    p.v = F32(n);
    std::vector<float> host(static_cast<size_t>(n), init == Init::kOne ? 1.0f : 0.0f);
    if (init == Init::kNormal) FillNormal(host.data(), host.size(), a_.seed, params_.size() + 1, 0, 0.0f, std);
    CopyBytes(p.master, dev_, host.data(), Device::CPU(), host.size() * sizeof(float));
    Copy(p.w, a_.dtype, p.master, DType::kF32, n);
    Fill(p.m, 0.0f, n, DType::kF32);
    Fill(p.v, 0.0f, n, DType::kF32);
    params_.push_back(p);
    params_total_ += n;
    return p;
  }
  void* Act(int64_t width) { return arena_.Get(a_.dtype, N_ * width); }
  float* F32(int64_t n) { return static_cast<float*>(arena_.Get(DType::kF32, n)); }

  // y (N, out) = x (N, in) W^T (+ b), W (out, in).
  void Linear(void* y, const void* x, const Param& w, const Param* b, int64_t in, int64_t out) {
    GemmParams p;
    p.trans_b = Trans::kT;
    p.m = N_;
    p.n = out;
    p.k = in;
    p.a = x;
    p.a_type = a_.dtype;
    p.lda = in;
    p.b = w.w;
    p.b_type = a_.dtype;
    p.ldb = in;
    p.c = y;
    p.c_type = a_.dtype;
    p.ldc = out;
    p.bias = b != nullptr ? b->w : nullptr;
    p.bias_type = a_.dtype;
    Gemm(p);
  }
  // dx (N, in) = dy W;  dW += dy^T x;  db += column sums of dy.
  void LinearBackward(void* dx, const void* dy, const void* x, const Param& w, const Param* b, int64_t in,
                      int64_t out) {
    const DType t = a_.dtype;
    Gemm(Trans::kN, Trans::kN, N_, in, out, 1.0f, dy, t, out, w.w, t, in, 0.0f, dx, t, in);
    Gemm(Trans::kT, Trans::kN, out, in, N_, 1.0f, dy, t, out, x, t, in, 1.0f, w.grad, DType::kF32, in);
    if (b != nullptr) BiasBackward(b->grad, DType::kF32, dy, t, N_, out);
  }

  float Forward() {
    const int64_t C = a_.C, T = a_.T, B = a_.B, NH = a_.NH;
    const DType t = a_.dtype;
    EmbeddingForward(encoded_, t, tokens_, wte_.w, wpe_.w, t, B, T, C, a_.V);
    const void* residual = encoded_;
    for (Layer& l : layers_) {
      LayerNormForward(l.ln1, l.ln1_mean, l.ln1_rstd, residual, l.ln1w.w, l.ln1b.w, N_, C, 1e-5f, t, t);
      Linear(l.qkv, l.ln1, l.qkvw, &l.qkvb, C, 3 * C);
      AttentionForward(l.atty, l.att, l.qkv, B, T, C, NH, t);
      Linear(l.res2, l.atty, l.projw, &l.projb, C, C);
      Add(l.res2, l.res2, residual, N_ * C, t);
      LayerNormForward(l.ln2, l.ln2_mean, l.ln2_rstd, l.res2, l.ln2w.w, l.ln2b.w, N_, C, 1e-5f, t, t);
      Linear(l.fch, l.ln2, l.fcw, &l.fcb, C, 4 * C);
      GeluForward(l.fchg, l.fch, N_ * 4 * C, t, GeluApprox::kTanh);
      Linear(l.out, l.fchg, l.fcprojw, &l.fcprojb, 4 * C, C);
      Add(l.out, l.out, l.res2, N_ * C, t);
      residual = l.out;
    }
    LayerNormForward(lnf_, lnf_mean_, lnf_rstd_, residual, lnfw_.w, lnfb_.w, N_, C, 1e-5f, t, t);
    Linear(logits_, lnf_, wte_, nullptr, C, a_.V);
    // dlogits in place over the logits: the gradient of the mean loss.
    return CrossEntropy(logits_, nullptr, logits_, targets_, N_, a_.V, t, -1, 1.0f).loss;
  }

  void Backward() {
    const int64_t C = a_.C, T = a_.T, B = a_.B, NH = a_.NH, V = a_.V;
    const DType t = a_.dtype;
    const void* last = layers_.empty() ? encoded_ : layers_.back().out;
    LinearBackward(d_tmp_, logits_, lnf_, wte_, nullptr, C, V);  // dlnf, dwte += dlogits^T lnf
    LayerNormBackward(d_res_, lnfw_.grad, lnfb_.grad, d_tmp_, last, lnfw_.w, lnf_mean_, lnf_rstd_, N_, C, t, t,
                      DType::kF32);
    for (size_t i = layers_.size(); i-- > 0;) {
      Layer& l = layers_[i];
      const void* input = i == 0 ? encoded_ : layers_[i - 1].out;
      // d_res_: gradient of this block's output (= of res2 through the skip, and of the MLP output).
      LinearBackward(d_wide_, d_res_, l.fchg, l.fcprojw, &l.fcprojb, 4 * C, C);
      GeluBackward(d_wide2_, d_wide_, l.fch, N_ * 4 * C, t, GeluApprox::kTanh);
      LinearBackward(d_tmp_, d_wide2_, l.ln2, l.fcw, &l.fcb, C, 4 * C);
      LayerNormBackward(d_res2_, l.ln2w.grad, l.ln2b.grad, d_tmp_, l.res2, l.ln2w.w, l.ln2_mean, l.ln2_rstd, N_, C, t,
                        t, DType::kF32);
      Add(d_res2_, d_res2_, d_res_, N_ * C, t);  // gradient of res2
      LinearBackward(d_tmp_, d_res2_, l.atty, l.projw, &l.projb, C, C);
      AttentionBackward(d_qkv_, d_tmp_, l.qkv, l.att, B, T, C, NH, t);
      LinearBackward(d_tmp_, d_qkv_, l.ln1, l.qkvw, &l.qkvb, C, 3 * C);
      LayerNormBackward(d_res_, l.ln1w.grad, l.ln1b.grad, d_tmp_, input, l.ln1w.w, l.ln1_mean, l.ln1_rstd, N_, C, t,
                        t, DType::kF32);
      Add(d_res_, d_res_, d_res2_, N_ * C, t);  // gradient of the block input
    }
    EmbeddingBackward(wte_.grad, wpe_.grad, DType::kF32, d_res_, t, tokens_, B, T, C, V);
  }

  void Update(int64_t step) {
    AdamHyper h;
    h.lr = a_.lr;
    h.beta1 = 0.9f;
    h.beta2 = 0.95f;
    h.weight_decay = 0.0f;
    h.step = step;
    std::vector<OptimSpan> spans;
    for (const Param& p : params_) {
      OptimSpan s;
      s.params = p.master;
      s.grads = p.grad;
      s.grad_dtype = DType::kF32;
      s.param_copy = p.w;
      s.copy_dtype = a_.dtype;
      s.n = p.n;
      spans.push_back(s);
    }
    if (dev_.is_cpu()) {
      for (size_t i = 0; i < params_.size(); ++i) cpu::AdamStep(h, spans[i], params_[i].m, params_[i].v);
      return;
    }
#if defined(ZERORUN_HAVE_CUDA)
    std::vector<cuda::OptimTensor> ts;
    for (size_t i = 0; i < params_.size(); ++i) ts.push_back({spans[i], params_[i].m, params_[i].v});
    cuda::AdamStep(h, ts.data(), static_cast<int64_t>(ts.size()));
#endif
  }

  Args a_;
  Device dev_;
  Arena arena_;
  int64_t N_;
  std::vector<Param> params_;
  int64_t params_total_ = 0;
  Param wte_, wpe_, lnfw_, lnfb_;
  std::vector<Layer> layers_;
  void *encoded_, *lnf_, *logits_, *d_res_, *d_res2_, *d_tmp_, *d_wide_, *d_wide2_, *d_qkv_;
  float *lnf_mean_, *lnf_rstd_;
  int32_t* tokens_ = nullptr;
  int32_t* targets_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  try {
    const Device dev = a.device == "cuda" ? Device::CUDA(0) : Device::CPU();
    if (dev.is_cuda() && (!HasDeviceBackend(DeviceType::kCUDA) || GetDeviceBackend(DeviceType::kCUDA).DeviceCount() == 0)) {
      ZR_THROW(InvalidArgument, "--device cuda: no CUDA device is visible{}",
               HasDeviceBackend(DeviceType::kCUDA) ? "" : " (zerorun was built without CUDA)");
    }
    std::unique_ptr<Stream> stream = CreateStream(dev);
    KernelDeviceScope scope(dev, stream.get());
    Gpt2 model(a, dev);
    const double n_flop_params = static_cast<double>(model.parameters() - model.position_parameters());
    const double flops_per_token = 6.0 * n_flop_params + 12.0 * a.L * a.C * a.T;
    const double tokens = static_cast<double>(a.B * a.T);
    std::printf("# bench_gpt_kernels on %s (%s, CPU %s, ISA %s): L %lld, C %lld, NH %lld, T %lld, V %lld, B %lld, "
                "%lld parameters, %.2f GiB on the device\n",
                dev.ToString().c_str(), DTypeName(a.dtype), CpuModelName().c_str(), IsaName(ActiveIsa()).c_str(),
                static_cast<long long>(a.L), static_cast<long long>(a.C), static_cast<long long>(a.NH),
                static_cast<long long>(a.T), static_cast<long long>(a.V), static_cast<long long>(a.B),
                static_cast<long long>(model.parameters()), static_cast<double>(model.device_bytes()) / (1 << 30));
    std::vector<float> losses;
    double timed_s = 0;
    for (int s = 1; s <= a.steps; ++s) {
      const auto t0 = Clock::now();
      const float loss = model.Step(s);
      stream->Synchronize();
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      if (s > a.warmup) timed_s += dt;
      losses.push_back(loss);
      std::printf("step %3d  loss %.6f  %.1f ms\n", s, loss, dt * 1e3);
      std::fflush(stdout);
      if (!std::isfinite(loss)) ZR_THROW(Error, "step {}: the loss is {}", s, loss);
    }
    const double step_s = timed_s / (a.steps - a.warmup);
    const double achieved = flops_per_token * tokens / step_s;
    const double mfu = a.peak_tflops > 0 ? achieved / (a.peak_tflops * 1e12) : -1;
    if (!a.losses_path.empty()) {
      FILE* f = std::fopen(a.losses_path.c_str(), "w");
      if (f == nullptr) ZR_THROW(IoError, "cannot write --losses {}: {}", a.losses_path, std::strerror(errno));
      for (float l : losses) std::fprintf(f, "%.9g\n", l);
      std::fclose(f);
    }
    std::printf("{\"device\": \"%s\", \"dtype\": \"%s\", \"parameters\": %lld, \"batch\": %lld, \"seq\": %lld, "
                "\"step_ms\": %.3f, \"tokens_per_s\": %.1f, \"tflops\": %.2f, \"peak_tflops\": %.1f, \"mfu\": %.4f, "
                "\"first_loss\": %.6f, \"last_loss\": %.6f}\n",
                dev.ToString().c_str(), DTypeName(a.dtype), static_cast<long long>(model.parameters()),
                static_cast<long long>(a.B), static_cast<long long>(a.T), step_s * 1e3, tokens / step_s,
                achieved / 1e12, a.peak_tflops, mfu, losses.front(), losses.back());
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gpt_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}

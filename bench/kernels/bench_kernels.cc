// CPU kernel throughput. GEMM is timed beside OpenBLAS's cblas_sgemm called directly (with OpenBLAS's
// own threads) in the same run and printed as a ratio; the layer kernels print time per call and
// throughput for the GPT-bench shapes (B 8, T 128, C 256, NH 4, V 256) in fp32, bf16 and fp16.
// Usage: zr_bench_kernels [--threads 1,2] [--reps N] [--only gemm|attn|norm|act|ce] [--cpu-time]
// --cpu-time measures process CPU time (sum over threads): use it with --threads 1 on a busy host.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "zerorun/core/dtype.h"
#include "zerorun/core/rng.h"
#include "zerorun/core/thread_pool.h"
#include "zerorun/kernels/ops.h"

namespace {

using zerorun::DType;
namespace k = zerorun::kernels;

int g_reps = 20;
bool g_cpu_time = false;  // --cpu-time: process CPU time instead of wall time (robust on a busy host)

double NowMs() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median wall times in milliseconds of several functions run interleaved (one call of each per
// round, after two warm-up rounds), so a shared, noisy machine slows them alike.
std::vector<double> MedianMs(const std::vector<std::function<void()>>& fns) {
  std::vector<std::vector<double>> t(fns.size());
  for (int round = 0; round < g_reps + 2; ++round) {
    for (size_t f = 0; f < fns.size(); ++f) {
      double a = NowMs();
      fns[f]();
      double ms = NowMs() - a;
      if (round >= 2) t[f].push_back(ms);
    }
  }
  std::vector<double> med;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}
double MedianMs(const std::function<void()>& fn) { return MedianMs(std::vector<std::function<void()>>{fn})[0]; }

struct Buf {
  std::vector<unsigned char> bytes;
  Buf(int64_t n, DType t, uint64_t seed) : bytes(static_cast<size_t>(n) * zerorun::DTypeSize(t)) {
    std::vector<float> f(static_cast<size_t>(n));
    zerorun::FillUniform(f.data(), f.size(), seed, 1, 0, -1.0f, 1.0f);
    zerorun::Convert(f.data(), DType::kF32, bytes.data(), t, f.size());
  }
  void* data() { return bytes.data(); }
};

const DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

void BenchGemm(int threads) {
  struct Shape { int64_t m, n, k; bool tb; const char* what; };
  // GPT-bench linears with B*T = 1024 rows: qkv, proj, fc, fc-proj (weights (out, in), y = x W^T),
  // a weight-gradient shape (dW = dy^T x) and a square reference.
  Shape shapes[] = {{1024, 768, 256, true, "qkv fwd"},      {1024, 256, 256, true, "proj fwd"},
                    {1024, 1024, 256, true, "fc fwd"},      {1024, 256, 1024, true, "fcproj fwd"},
                    {1024, 256, 1024, false, "fc dx"},      {1024, 1024, 1024, false, "square"}};
  for (const auto& s : shapes) {
    double gflop = 2.0 * s.m * s.n * s.k * 1e-9;
    std::vector<Buf> bufs;
    std::vector<std::function<void()>> fns;
    fns.push_back([&] {
      openblas_set_num_threads(threads);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, static_cast<int>(s.m),
                  static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, static_cast<float*>(bufs[0].data()),
                  static_cast<int>(s.k), static_cast<float*>(bufs[1].data()), static_cast<int>(s.tb ? s.k : s.n), 0.0f,
                  static_cast<float*>(bufs[2].data()), static_cast<int>(s.n));
      openblas_set_num_threads(1);  // zerorun's kernels run OpenBLAS single-threaded in the core pool
    });
    for (DType t : kTypes) {
      bufs.emplace_back(s.m * s.k, t, 1);
      bufs.emplace_back(s.k * s.n, t, 2);
      bufs.emplace_back(s.m * s.n, t, 3);
    }
    for (int i = 0; i < 3; ++i) {
      DType t = kTypes[i];
      fns.push_back([&, t, i] {
        k::Gemm(k::Trans::kN, s.tb ? k::Trans::kT : k::Trans::kN, s.m, s.n, s.k, 1.0f, bufs[3 * i].data(), t, s.k,
                bufs[3 * i + 1].data(), t, s.tb ? s.k : s.n, 0.0f, bufs[3 * i + 2].data(), t, s.n);
      });
    }
    std::vector<double> ms = MedianMs(fns);
    std::printf("gemm %-10s m=%-5ld n=%-5ld k=%-5ld threads=%d  openblas-sgemm %7.3f ms %6.1f GFLOP/s |", s.what,
                static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k), threads, ms[0],
                gflop / ms[0] * 1e3);
    for (int i = 0; i < 3; ++i) {
      std::printf(" %s %6.1f GFLOP/s (x%.2f)", zerorun::DTypeName(kTypes[i]), gflop / ms[i + 1] * 1e3,
                  ms[0] / ms[i + 1]);
    }
    std::printf("\n");
  }
}

void BenchAttention(int threads) {
  int64_t B = 8, T = 128, C = 256, NH = 4;
  // Useful work (causal half counted once): QK^T and PV forward, four products backward.
  double gflop_fwd = 2.0 * 2.0 * B * NH * T * T * (C / NH) * 0.5 * 1e-9;
  for (DType t : kTypes) {
    Buf qkv(B * T * 3 * C, t, 1), out(B * T * C, t, 2), dout(B * T * C, t, 3), dqkv(B * T * 3 * C, t, 4);
    std::vector<float> att(static_cast<size_t>(B * NH * T * T));
    double f = MedianMs([&] { k::AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH, t); });
    double b = MedianMs([&] {
      k::AttentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, t);
    });
    std::printf("attention B=%ld T=%ld C=%ld NH=%ld threads=%d dtype=%-4s  fwd %7.3f ms (%5.1f GFLOP/s)  bwd %7.3f ms "
                "(%5.1f GFLOP/s)\n",
                static_cast<long>(B), static_cast<long>(T), static_cast<long>(C), static_cast<long>(NH), threads,
                zerorun::DTypeName(t), f, gflop_fwd / f * 1e3, b, 2 * gflop_fwd / b * 1e3);
  }
}

void BenchNorm(int threads) {
  int64_t N = 1024, C = 256;
  for (DType t : kTypes) {
    Buf x(N * C, t, 1), out(N * C, t, 2), dout(N * C, t, 3), dx(N * C, t, 4), w(C, t, 5), bb(C, t, 6);
    std::vector<float> mean(N), rstd(N), dw(C), db(C);
    double f = MedianMs([&] {
      k::LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bb.data(), N, C, 1e-5f, t, t);
    });
    double b = MedianMs([&] {
      k::LayerNormBackward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(),
                           N, C, t, t, DType::kF32);
    });
    double bytes = static_cast<double>(N * C) * zerorun::DTypeSize(t);
    std::printf("layernorm N=%ld C=%ld threads=%d dtype=%-4s  fwd %7.3f ms (%5.1f GB/s)  bwd %7.3f ms (%5.1f GB/s)\n",
                static_cast<long>(N), static_cast<long>(C), threads, zerorun::DTypeName(t), f, 2 * bytes / f * 1e-6, b,
                3 * bytes / b * 1e-6);
  }
}

void BenchActivations(int threads) {
  int64_t n = 1024 * 1024;  // B*T x 4C of the GPT-bench MLP
  for (DType t : kTypes) {
    Buf x(n, t, 1), y(n, t, 2), dy(n, t, 3), dx(n, t, 4);
    double f = MedianMs([&] { k::GeluForward(y.data(), x.data(), n, t, k::GeluApprox::kTanh); });
    double b = MedianMs([&] { k::GeluBackward(dx.data(), dy.data(), x.data(), n, t, k::GeluApprox::kTanh); });
    double r = MedianMs([&] { k::Add(y.data(), x.data(), dy.data(), n, t); });
    double d = MedianMs([&] { k::DropoutForward(y.data(), x.data(), n, t, 0.1f, 1, 2, 3); });
    std::printf("elementwise n=%ld threads=%d dtype=%-4s  gelu fwd %6.3f ms  gelu bwd %6.3f ms  add %6.3f ms  "
                "dropout %6.3f ms  (%.0f Melem/s gelu fwd)\n",
                static_cast<long>(n), threads, zerorun::DTypeName(t), f, b, r, d, n / f * 1e-3);
  }
}

void BenchCrossEntropy(int threads) {
  for (int64_t V : {int64_t{256}, int64_t{50257}}) {
    int64_t N = V > 1000 ? 256 : 1024;
    for (DType t : kTypes) {
      Buf logits(N * V, t, 1), dlogits(N * V, t, 2);
      std::vector<int32_t> targets(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 7919) % V);
      double ms = MedianMs([&] {
        k::CrossEntropy(dlogits.data(), nullptr, logits.data(), targets.data(), N, V, t, -100, 1.0f);
      });
      std::printf("cross-entropy N=%ld V=%ld threads=%d dtype=%-4s  fwd+bwd %7.3f ms (%.0f Melem/s)\n",
                  static_cast<long>(N), static_cast<long>(V), threads, zerorun::DTypeName(t), ms, N * V / ms * 1e-3);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string threads = "1,2", only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = argv[++i];
    else if (a == "--reps" && i + 1 < argc) g_reps = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--cpu-time") g_cpu_time = true;
    else {
      std::fprintf(stderr, "usage: zr_bench_kernels [--threads 1,2] [--reps N] [--only gemm|attn|norm|act|ce] [--cpu-time]\n");
      return 2;
    }
  }
  std::stringstream ss(threads);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    int th = std::atoi(tok.c_str());
    zerorun::ThreadPool::SetDefaultThreads(th);
    if (only.empty() || only == "gemm") BenchGemm(th);
    if (only.empty() || only == "attn") BenchAttention(th);
    if (only.empty() || only == "norm") BenchNorm(th);
    if (only.empty() || only == "act") BenchActivations(th);
    if (only.empty() || only == "ce") BenchCrossEntropy(th);
  }
  return 0;
}

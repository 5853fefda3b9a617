// CPU kernel throughput. GEMM is timed beside OpenBLAS's cblas_sgemm called directly (with OpenBLAS's
// own threads) in the same run and printed as a ratio; the layer kernels print time per call and
// throughput for the GPT-bench shapes (B 8, T 128, C 256, NH 4, V 256) in fp32, bf16 and fp16.
// Usage: zr_bench_kernels [--threads 1,2] [--reps N] [--only peak|gemm|attn|norm|act|ce] [--cpu-time]
// --cpu-time measures process CPU time (sum over threads): use it with --threads 1 on a busy host.
#include <cblas.h>
#include <dlfcn.h>
#include <immintrin.h>
#include <unistd.h>
#if ZERORUN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "zerorun/core/cpu_features.h"
#include "zerorun/core/dtype.h"
#include "zerorun/core/rng.h"
#include "zerorun/core/thread_pool.h"
#include "zerorun/kernels/gemm_backend.h"
#include "zerorun/kernels/ops.h"

namespace {

using zerorun::DType;
namespace k = zerorun::kernels;

int g_reps = 20;
// Keeps the peak loops' results alive.
std::atomic<float> g_sink{0};
void AddSink(float v) { g_sink.store(g_sink.load(std::memory_order_relaxed) + v, std::memory_order_relaxed); }
bool g_cpu_time = false;  // --cpu-time: process CPU time instead of wall time (robust on a busy host)

double NowMs() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median wall times in milliseconds of several functions run interleaved (each timed once per round,
// after two warm-up rounds), so a shared, noisy machine slows them alike. With more than one thread a
// function runs as a burst of kBurst back-to-back calls of which the last kTimed are timed (per call),
// after kSettleMs in which every core of zerorun's pool spins. A peer's OpenMP or OpenBLAS threads keep
// spinning for a while after its call; timed right after, the next function found the second core
// taken (zerorun's 2-thread GEMMs measured at the 1-thread rate). Sleeping instead of spinning let this
// VM's idle vCPU halt, and the next call then paid its wake-up. The untimed first call of a burst wakes
// the function's own threads, as the previous step of a training loop would have.
std::vector<double> MedianMs(const std::vector<std::function<void()>>& fns) {
  constexpr int kBurst = 4, kTimed = 3;
  constexpr double kSettleMs = 30;
  zerorun::ThreadPool& pool = zerorun::ThreadPool::Default();
  const bool threaded = pool.num_threads() > 1 && fns.size() > 1;
  const auto settle = [&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(kSettleMs);
    pool.ParallelFor(0, pool.num_threads(), 1, [&](int64_t, int64_t) {
      while (std::chrono::steady_clock::now() < until) _mm_pause();
    });
  };
  std::vector<std::vector<double>> t(fns.size());
  for (int round = 0; round < g_reps + 2; ++round) {
    for (size_t f = 0; f < fns.size(); ++f) {
      double ms = 0;
      if (threaded) {
        settle();
        for (int i = 0; i < kBurst - kTimed; ++i) fns[f]();
        const double a = NowMs();
        for (int i = 0; i < kTimed; ++i) fns[f]();
        ms = (NowMs() - a) / kTimed;
      } else {
        const double a = NowMs();
        fns[f]();
        ms = NowMs() - a;
      }
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

// ---- peak arithmetic throughput (the denominator of "fraction of peak") ---------------------------

// Twelve independent FMA chains in registers (named variables: an array of vectors is kept in memory):
// the core's fp32 FMA (and bf16 dot-product) issue rate.
#define ZR_PEAK_BODY(VEC, SET1, OP, STORE, LANES, A, B)                                                    \
  VEC a0 = SET1(1.0f), a1 = SET1(1.1f), a2 = SET1(1.2f), a3 = SET1(1.3f), a4 = SET1(1.4f), a5 = SET1(1.5f); \
  VEC a6 = SET1(1.6f), a7 = SET1(1.7f), a8 = SET1(1.8f), a9 = SET1(1.9f), a10 = SET1(2.0f), a11 = SET1(2.1f); \
  for (int64_t it = 0; it < iters; ++it) {                                                                 \
    a0 = OP(a0, A, B); a1 = OP(a1, A, B); a2 = OP(a2, A, B); a3 = OP(a3, A, B);                          \
    a4 = OP(a4, A, B); a5 = OP(a5, A, B); a6 = OP(a6, A, B); a7 = OP(a7, A, B);                          \
    a8 = OP(a8, A, B); a9 = OP(a9, A, B); a10 = OP(a10, A, B); a11 = OP(a11, A, B);                      \
  }                                                                                                        \
  float buf[LANES], sink = 0;                                                                              \
  for (VEC v : {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11}) {                                       \
    STORE(buf, v);                                                                                         \
    for (float f : buf) sink += f;                                                                         \
  }                                                                                                        \
  AddSink(sink);

__attribute__((target("avx512f"))) __m512 Fma512(__m512 c, __m512 a, __m512 b) { return _mm512_fmadd_ps(c, a, b); }
__attribute__((target("avx2,fma"))) __m256 Fma256(__m256 c, __m256 a, __m256 b) { return _mm256_fmadd_ps(c, a, b); }
__attribute__((target("avx512f,avx512bf16"))) __m512 Dot512(__m512 c, __m512bh a, __m512bh b) {
  return _mm512_dpbf16_ps(c, a, b);
}

__attribute__((target("avx512f"))) double PeakLoopAvx512(int64_t iters) {
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  ZR_PEAK_BODY(__m512, _mm512_set1_ps, Fma512, _mm512_storeu_ps, 16, x, y)
  return 2.0 * 16 * 12 * static_cast<double>(iters);
}
__attribute__((target("avx2,fma"))) double PeakLoopAvx2(int64_t iters) {
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  ZR_PEAK_BODY(__m256, _mm256_set1_ps, Fma256, _mm256_storeu_ps, 8, x, y)
  return 2.0 * 8 * 12 * static_cast<double>(iters);
}
// vdpbf16ps: 32 bf16 products summed in pairs into 16 fp32 lanes (64 FLOP per instruction).
__attribute__((target("avx512f,avx512bf16"))) double PeakLoopBf16(int64_t iters) {
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);
  ZR_PEAK_BODY(__m512, _mm512_set1_ps, Dot512, _mm512_storeu_ps, 16, x, y)
  return 2.0 * 32 * 12 * static_cast<double>(iters);
}
#undef ZR_PEAK_BODY

// GFLOP/s of `loop` on `threads` cores: each pool thread runs it and times itself in thread CPU time
// (so other processes on a shared host do not lower the figure); the rates add up. Best of 5 rounds.
double PeakGflops(double (*loop)(int64_t), int threads) {
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    std::vector<double> rate(static_cast<size_t>(threads));
    zerorun::ThreadPool::Default().ParallelFor(0, threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        timespec t0, t1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        double flops = loop(int64_t{2} << 20);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        double s = static_cast<double>(t1.tv_sec - t0.tv_sec) + 1e-9 * static_cast<double>(t1.tv_nsec - t0.tv_nsec);
        rate[static_cast<size_t>(i)] = flops / s * 1e-9;
      }
    });
    double total = 0;
    for (double r : rate) total += r;
    best = std::max(best, total);
  }
  return best;
}

struct Peaks {
  double fp32 = 0, bf16 = 0;  // GFLOP/s on `threads` threads; bf16 0: no bf16 instructions
};

Peaks MeasurePeaks(int threads) {
  Peaks p;
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  p.fp32 = PeakGflops(avx512 ? &PeakLoopAvx512 : &PeakLoopAvx2, threads);
  if (__builtin_cpu_supports("avx512bf16")) p.bf16 = PeakGflops(&PeakLoopBf16, threads);
  std::printf("peak threads=%d: fp32 FMA %.1f GFLOP/s (%s)", threads, p.fp32, avx512 ? "avx512" : "avx2");
  if (p.bf16 > 0) {
    std::printf(", bf16 dot-product %.1f GFLOP/s (avx512_bf16)\n", p.bf16);
  } else {
    std::printf(", no bf16 instructions\n");
  }
  return p;
}

// OpenMP threads for oneDNN's own GEMM calls (its runtime is OpenMP; zerorun's calls hold it to one).
void SetOmpThreads(int n) {
  using SetThreads = void (*)(int);
  static const SetThreads set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set != nullptr) set(n);
}

#if ZERORUN_HAVE_ONEDNN
// A oneDNN matmul primitive as a framework uses it (created and run with the calling thread's OpenMP
// thread count): the bf16 peer, and a second fp32 one.
struct PeerMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  dnnl::matmul prim;
  std::unordered_map<int, dnnl::memory> args;
  PeerMatmul(int64_t m, int64_t n, int64_t k, bool ta, bool tb, DType ab, DType c, void* a, void* b, void* cp) {
    using dims = dnnl::memory::dims;
    auto dt = [](DType t) { return t == DType::kF32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16; };
    dnnl::memory::desc a_md(dims{m, k}, dt(ab), ta ? dims{1, m} : dims{k, 1});
    dnnl::memory::desc b_md(dims{k, n}, dt(ab), tb ? dims{1, k} : dims{n, 1});
    dnnl::memory::desc c_md(dims{m, n}, dt(c), dims{n, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
    prim = dnnl::matmul(pd);
    args = {{DNNL_ARG_SRC, dnnl::memory(a_md, eng, a)}, {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, eng, b)},
            {DNNL_ARG_DST, dnnl::memory(c_md, eng, cp)}};
  }
  void Run() {
    prim.execute(stream, args);
    stream.wait();
  }
};
#endif

void BenchGemm(int threads) {
  struct Shape { int64_t m, n, k; bool ta, tb; const char* what; };
  // GPT-bench linears with B*T = 1024 rows (weights (out, in)): forward y = x W^T, input gradient
  // dx = dy W, weight gradient dW = dy^T x (qkv 256->768, fc 256->1024, mproj 1024->256); and a square
  // reference.
  Shape shapes[] = {{1024, 768, 256, false, true, "qkv fwd"},   {1024, 256, 768, false, false, "qkv dx"},
                    {768, 256, 1024, true, false, "qkv dW"},    {1024, 256, 256, false, true, "proj fwd"},
                    {1024, 1024, 256, false, true, "fc fwd"},   {1024, 256, 1024, false, true, "fcproj fwd"},
                    {1024, 256, 1024, false, false, "fc dx"},   {1024, 256, 1024, true, false, "fc dW"},
                    {1024, 1024, 256, false, false, "mproj dx"}, {256, 1024, 1024, true, false, "mproj dW"},
                    {1024, 256, 256, false, true, "lmhead fwd"}, {1024, 1024, 1024, false, false, "square"}};
  const Peaks peaks = MeasurePeaks(threads);
  for (const auto& s : shapes) {
    double gflop = 2.0 * s.m * s.n * s.k * 1e-9;
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    std::vector<Buf> bufs;
    for (DType t : kTypes) {
      bufs.emplace_back(s.m * s.k, t, 1);
      bufs.emplace_back(s.k * s.n, t, 2);
      bufs.emplace_back(s.m * s.n, t, 3);
    }
    Buf c32(s.m * s.n, DType::kF32, 4);
    const auto A = [&](int i) { return bufs[3 * i].data(); };
    const auto B = [&](int i) { return bufs[3 * i + 1].data(); };
    const auto C = [&](int i) { return bufs[3 * i + 2].data(); };
    std::vector<std::function<void()>> fns;
    std::vector<std::string> names;
    // Peers, each with its own threads: OpenBLAS sgemm, oneDNN's sgemm and bf16 GEMM (fp32 C).
    names.push_back("openblas fp32");
    fns.push_back([&] {
      openblas_set_num_threads(threads);
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                  static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.0f,
                  static_cast<float*>(A(0)), static_cast<int>(lda), static_cast<float*>(B(0)), static_cast<int>(ldb),
                  0.0f, static_cast<float*>(C(0)), static_cast<int>(s.n));
      openblas_set_num_threads(1);  // zerorun's kernels run OpenBLAS single-threaded in the core pool
    });
#if ZERORUN_HAVE_ONEDNN
    names.push_back("onednn fp32");
    fns.push_back([&] {
      SetOmpThreads(threads);
      dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, static_cast<float*>(A(0)), lda,
                 static_cast<float*>(B(0)), ldb, 0.0f, static_cast<float*>(C(0)), s.n);
      SetOmpThreads(1);
    });
    SetOmpThreads(threads);
    PeerMatmul mm32(s.m, s.n, s.k, s.ta, s.tb, DType::kF32, DType::kF32, A(0), B(0), C(0));
    // oneDNN 2.6 has no bf16 matmul on CPUs without AVX-512 (e.g. AVX2-only EPYCs): no such peer there
    std::unique_ptr<PeerMatmul> mm16;
    try {
      mm16 = std::make_unique<PeerMatmul>(s.m, s.n, s.k, s.ta, s.tb, DType::kBF16, DType::kBF16, A(1), B(1), C(1));
    } catch (const dnnl::error&) {
    }
    SetOmpThreads(1);
    names.push_back("onednn-matmul fp32");
    fns.push_back([&] {
      SetOmpThreads(threads);
      mm32.Run();
      SetOmpThreads(1);
    });
    if (mm16) {
      names.push_back("onednn bf16");
      fns.push_back([&] {
        SetOmpThreads(threads);
        mm16->Run();
        SetOmpThreads(1);
      });
    }
#endif
    // zerorun: every dtype on the active backend, and fp32 on OpenBLAS inside zerorun.
    const k::GemmBackend active = k::ActiveGemmBackend();
    for (int i = 0; i < 3; ++i) {
      DType t = kTypes[i];
      names.push_back(std::string("zerorun ") + zerorun::DTypeName(t));
      fns.push_back([&, t, i] {
        k::Gemm(s.ta ? k::Trans::kT : k::Trans::kN, s.tb ? k::Trans::kT : k::Trans::kN, s.m, s.n, s.k, 1.0f, A(i), t,
                lda, B(i), t, ldb, 0.0f, C(i), t, s.n);
      });
    }
    if (active != k::GemmBackend::kOpenblas) {
      names.push_back("zerorun fp32 on openblas");
      fns.push_back([&] {
        k::SetGemmBackend(k::GemmBackend::kOpenblas);
        k::Gemm(s.ta ? k::Trans::kT : k::Trans::kN, s.tb ? k::Trans::kT : k::Trans::kN, s.m, s.n, s.k, 1.0f, A(0),
                DType::kF32, lda, B(0), DType::kF32, ldb, 0.0f, C(0), DType::kF32, s.n);
        k::SetGemmBackend(active);
      });
    }
    std::vector<double> ms = MedianMs(fns);
    const auto gf = [&](const std::string& name) {
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] == name) return gflop / ms[i] * 1e3;
      }
      return 0.0;
    };
    double best32 = std::max({gf("openblas fp32"), gf("onednn fp32"), gf("onednn-matmul fp32")});
    double best16 = gf("onednn bf16");
    std::printf("gemm %-10s m=%-5ld n=%-5ld k=%-5ld %c%c threads=%d |", s.what, static_cast<long>(s.m),
                static_cast<long>(s.n), static_cast<long>(s.k), s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', threads);
    for (size_t i = 0; i < names.size(); ++i) std::printf(" %s %.1f", names[i].c_str(), gflop / ms[i] * 1e3);
    std::printf(" GFLOP/s\n");
    std::printf("gemm %-10s summary: fp32 zerorun %.1f GFLOP/s = %.2f of best peer (%.1f), %.2f of fp32 peak", s.what,
                gf("zerorun fp32"), gf("zerorun fp32") / best32, best32, gf("zerorun fp32") / peaks.fp32);
    if (best16 > 0) {
      std::printf(" | bf16 zerorun %.1f GFLOP/s = %.2f of best peer (%.1f), %.2f of %s peak", gf("zerorun bf16"),
                  gf("zerorun bf16") / best16, best16,
                  gf("zerorun bf16") / (peaks.bf16 > 0 ? peaks.bf16 : peaks.fp32), peaks.bf16 > 0 ? "bf16" : "fp32");
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
    // Cold: as in a training step, where each layer's operands were last touched a layer (or a whole
    // forward) earlier: the calls rotate over sets of buffers larger together than the L3 cache.
    constexpr int kSets = 8;
    std::vector<Buf> qkvs, outs, douts, dqkvs;
    std::vector<std::vector<float>> atts;
    for (int i = 0; i < kSets; ++i) {
      qkvs.emplace_back(B * T * 3 * C, t, 10 + i), outs.emplace_back(B * T * C, t, 20 + i);
      douts.emplace_back(B * T * C, t, 30 + i), dqkvs.emplace_back(B * T * 3 * C, t, 40 + i);
      atts.emplace_back(static_cast<size_t>(B * NH * T * T));
    }
    int fi = 0, bi = 0;
    double cf = MedianMs([&] {
      const int i = fi++ % kSets;
      k::AttentionForward(outs[i].data(), atts[i].data(), qkvs[i].data(), B, T, C, NH, t);
    });
    double cb = MedianMs([&] {
      const int i = bi++ % kSets;
      k::AttentionBackward(dqkvs[i].data(), douts[i].data(), qkvs[i].data(), atts[i].data(), B, T, C, NH, t);
    });
    std::printf("attention B=%ld T=%ld C=%ld NH=%ld threads=%d dtype=%-4s  fwd %7.3f ms (%5.1f GFLOP/s)  bwd %7.3f ms "
                "(%5.1f GFLOP/s) | cold operands: fwd %7.3f ms  bwd %7.3f ms\n",
                static_cast<long>(B), static_cast<long>(T), static_cast<long>(C), static_cast<long>(NH), threads,
                zerorun::DTypeName(t), f, gflop_fwd / f * 1e3, b, 2 * gflop_fwd / b * 1e3, cf, cb);
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
      std::fprintf(stderr, "usage: zr_bench_kernels [--threads 1,2] [--reps N] [--only peak|gemm|attn|norm|act|ce] [--cpu-time]\n");
      return 2;
    }
  }
  // OpenBLAS is a peer: give it the kernels this CPU should get. It reads OPENBLAS_CORETYPE when it
  // loads, so a lowering or missing setting is fixed by running this program again with it set.
  if (std::getenv("ZR_BENCH_KEEP_CORETYPE") == nullptr) {
    const k::GemmBackend chosen = k::ActiveGemmBackend();  // what zerorun runs (ZERORUN_GEMM or oneDNN)
    k::SetGemmBackend(k::GemmBackend::kOpenblas);
    std::string warning = k::GemmWarning();
    k::SetGemmBackend(chosen);  // (this read ActiveGemmBackend() after the line above: zerorun ran OpenBLAS)
    const char* best = zerorun::GetCpuFeatures().avx512 ? (__builtin_cpu_supports("avx512bf16") ? "Cooperlake"
                                                                                              : "SkylakeX")
                                                        : "Haswell";
    if (!warning.empty()) {
      const char* old_env = std::getenv("OPENBLAS_CORETYPE");
      std::printf("# OpenBLAS ran %s (OPENBLAS_CORETYPE=%s): running again with OPENBLAS_CORETYPE=%s\n",
                  openblas_get_corename(), old_env != nullptr ? old_env : "unset", best);
      std::fflush(stdout);
      setenv("OPENBLAS_CORETYPE", best, 1);
      setenv("ZR_BENCH_KEEP_CORETYPE", "1", 1);
      execv("/proc/self/exe", argv);
      std::perror("zr_bench_kernels: execv");
      return 1;
    }
  }
  char model[512] = "unknown";
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strncmp(line, "model name", 10) == 0) {
        const char* colon = std::strchr(line, ':');
        std::snprintf(model, sizeof model, "%s", colon != nullptr ? colon + 2 : line);
        model[std::strcspn(model, "\n")] = '\0';
        break;
      }
    }
    std::fclose(f);
  }
  const char* core_env = std::getenv("OPENBLAS_CORETYPE");
  std::printf("# cpu: %s; zerorun isa %s; gemm %s; openblas peer: %s kernels (OPENBLAS_CORETYPE=%s)\n", model,
              zerorun::IsaName(zerorun::ActiveIsa()).c_str(), k::GemmDescription().c_str(), openblas_get_corename(),
              core_env != nullptr ? core_env : "unset");
  std::stringstream ss(threads);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    int th = std::atoi(tok.c_str());
    zerorun::ThreadPool::SetDefaultThreads(th);
    if (only == "peak") MeasurePeaks(th);
    if (only.empty() || only == "gemm") BenchGemm(th);
    if (only.empty() || only == "attn") BenchAttention(th);
    if (only.empty() || only == "norm") BenchNorm(th);
    if (only.empty() || only == "act") BenchActivations(th);
    if (only.empty() || only == "ce") BenchCrossEntropy(th);
  }
  return 0;
}

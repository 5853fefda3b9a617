// What decides the CUDA kernels' work, tested on the CPU (no GPU needed, and in builds without CUDA):
// the kernel device scope and table dispatch, the Philox words of the header device code compiles
// (core/philox.h) against core and the CPU's SIMD paths, launch geometry, and kernels/cuda/plan.h's
// plans carried out with plain loops in place of the device steps: GEMM staging (every dtype triple,
// transposes, leading dimensions, batches, bias, beta) against the reference GEMM, multi-tensor
// chunking, scratch layouts, and the attention decomposition against the reference attention.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kernel_test_util.h"
#include "zerorun/core/device.h"
#include "zerorun/core/error.h"
#include "zerorun/core/philox.h"
#include "zerorun/kernels/access.h"
#include "zerorun/kernels/cpu/philox.h"
#include "zerorun/kernels/cuda/plan.h"
#include "zerorun/kernels/dropout_mask.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::test {
namespace {

using cuda::CublasCall;
using cuda::GemmPlan;

bool CudaTableBuilt() { return HasKernelTable(DeviceType::kCUDA); }

// ---- GEMM plans carried out on the host -------------------------------------------------------------

// The device steps of ExecuteGemmPlan as loops. Scratch starts as NaN, so a step that reads what no
// step wrote shows up in the result. Cublas checks that the plan only asks what cuBLAS accepts.
struct HostGemmOps {
  std::vector<std::unique_ptr<std::vector<float>>> scratch;
  int cublas_calls = 0;

  void* Scratch(size_t bytes) {
    scratch.push_back(std::make_unique<std::vector<float>>(bytes / sizeof(float) + 1,
                                                           std::numeric_limits<float>::quiet_NaN()));
    return scratch.back()->data();
  }
  void Convert(const void* src, DType st, void* dst, DType dt, int64_t n) {
    for (int64_t i = 0; i < n; ++i) Store(dst, dt, i, Load(src, st, i));
  }
  void FillBiasRows(void* c, DType ct, int64_t ldc, int64_t stride_c, int64_t batch, int64_t m, int64_t n,
                    const void* bias, DType bt) {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) Store(c, ct, b * stride_c + i * ldc + j, Load(bias, bt, j));
  }
  // BLAS's column-major definition: C(i, j) = alpha sum_l op(X)(i, l) op(Y)(l, j) + beta C(i, j), with
  // C(i, j) at c[i + j ldc] and beta == 0 never reading C.
  void Cublas(const CublasCall& k) {
    ++cublas_calls;
    CHECK(k.first_type == k.second_type);
    CHECK(cuda::CublasTakes(k.first_type, k.c_type));
    for (int64_t b = 0; b < k.batch; ++b) {
      const void* x = At(k.first, k.first_type, b * k.stride_first);
      const void* y = At(k.second, k.second_type, b * k.stride_second);
      void* c = At(k.c, k.c_type, b * k.stride_c);
      for (int64_t j = 0; j < k.n; ++j) {
        for (int64_t i = 0; i < k.m; ++i) {
          double acc = 0.0;
          for (int64_t l = 0; l < k.k; ++l) {
            double xv = LoadD(x, k.first_type, k.trans_first ? l + i * k.ld_first : i + l * k.ld_first);
            double yv = LoadD(y, k.second_type, k.trans_second ? j + l * k.ld_second : l + j * k.ld_second);
            acc += xv * yv;
          }
          double v = static_cast<double>(k.alpha) * acc;
          if (k.beta != 0.0f) v += static_cast<double>(k.beta) * LoadD(c, k.c_type, i + j * k.ldc);
          Store(c, k.c_type, i + j * k.ldc, static_cast<float>(v));
        }
      }
    }
  }
  void Epilogue(const float* w, void* c, DType ct, int64_t ldc, int64_t stride_c, int64_t batch, int64_t m, int64_t n,
                float w_scale, const void* bias, DType bt) {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t at = b * stride_c + i * ldc + j;
          const float bv = bias != nullptr ? Load(bias, bt, j) : 0.0f;
          Store(c, ct, at, w != nullptr ? std::fma(w_scale, w[at], bv) : bv);
        }
  }
};

struct GemmCase {
  Trans ta, tb;
  int64_t m, n, k, batch;
  DType at, bt, ct;
  bool bias;
  DType bias_t;
  float alpha, beta;
};

// Runs one case through the plan (host steps) and through the reference; compares C.
void CheckGemmCase(const GemmCase& g) {
  const int64_t a_rows = g.ta == Trans::kN ? g.m : g.k, a_cols = g.ta == Trans::kN ? g.k : g.m;
  const int64_t b_rows = g.tb == Trans::kN ? g.k : g.n, b_cols = g.tb == Trans::kN ? g.n : g.k;
  GemmParams p;
  p.trans_a = g.ta;
  p.trans_b = g.tb;
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.alpha = g.alpha;
  p.beta = g.beta;
  p.lda = a_cols + 2;  // padded rows, and padding between batches
  p.ldb = b_cols + 1;
  p.ldc = g.n + 3;
  p.batch = g.batch;
  p.stride_a = a_rows * p.lda + 5;
  p.stride_b = g.batch > 1 && g.k % 2 == 1 ? 0 : b_rows * p.ldb + 1;  // stride 0: one B for every batch
  p.stride_c = g.m * p.ldc + 2;
  const int64_t a_n = (g.batch - 1) * p.stride_a + a_rows * p.lda + 1;
  const int64_t b_n = (g.batch - 1) * p.stride_b + b_rows * p.ldb + 1;
  const int64_t c_n = (g.batch - 1) * p.stride_c + g.m * p.ldc + 1;
  Buffer a = Buffer::Random(g.at, a_n, 1), b = Buffer::Random(g.bt, b_n, 2), bias = Buffer::Random(g.bias_t, g.n, 3);
  Buffer c0 = Buffer::Random(g.ct, c_n, 4);
  if (g.beta == 0.0f) {
    for (int64_t i = 0; i < c_n; i += 3) c0.Set(i, std::numeric_limits<double>::quiet_NaN());  // must not leak
  }
  p.a = a.data();
  p.a_type = g.at;
  p.b = b.data();
  p.b_type = g.bt;
  p.bias = g.bias ? bias.data() : nullptr;
  p.bias_type = g.bias_t;
  p.c_type = g.ct;
  Buffer want = c0, got = c0;
  p.c = want.data();
  Ref().gemm(p);
  p.c = got.data();
  HostGemmOps ops;
  const GemmPlan plan = cuda::PlanGemm(p);
  cuda::ExecuteGemmPlan(p, plan, ops);
  CHECK(ops.cublas_calls == (g.k == 0 ? 0 : 1));
  // Compare the m x n block of every batch (and that the padding in between was left alone).
  Buffer got_v(g.ct, g.batch * g.m * g.n), want_v(g.ct, g.batch * g.m * g.n);
  int64_t pad_changed = 0;
  for (int64_t i = 0; i < c_n; ++i) {
    const int64_t bi = std::min(i / p.stride_c, g.batch - 1), r = (i - bi * p.stride_c) / p.ldc,
                  col = (i - bi * p.stride_c) % p.ldc;
    if (r < g.m && col < g.n) {
      got_v.Set((bi * g.m + r) * g.n + col, got.Get(i));
      want_v.Set((bi * g.m + r) * g.n + col, want.Get(i));
    } else {
      const double before = c0.Get(i), after = got.Get(i);
      pad_changed += !(before == after || (std::isnan(before) && std::isnan(after)));
    }
  }
  CHECK(pad_changed == 0);
  CheckOp(got_v, want_v, "gemm plan", 1e-5);
}

// ---- the attention decomposition carried out on the host ---------------------------------------------

struct HostAttentionOps {
  cuda::AttentionDims d;
  void PermuteQkv(const void* qkv, void* q, void* k, void* v) {
    void* dst[3] = {q, k, v};
    ForHeads([&](int64_t b, int64_t h, int64_t t, int64_t e) {
      for (int which = 0; which < 3; ++which) {
        Store(dst[which], d.type, cuda::HeadOffset(b, h, t, e, d.T, d.NH, d.HS()),
              Load(qkv, d.type, cuda::QkvOffset(b, t, which, h, e, d.T, d.C, d.HS())));
      }
    });
  }
  void Permute(const void* x, void* y) {
    ForHeads([&](int64_t b, int64_t h, int64_t t, int64_t e) {
      Store(y, d.type, cuda::HeadOffset(b, h, t, e, d.T, d.NH, d.HS()), Load(x, d.type, (b * d.T + t) * d.C + h * d.HS() + e));
    });
  }
  void Unpermute(const float* x, void* out) {
    ForHeads([&](int64_t b, int64_t h, int64_t t, int64_t e) {
      Store(out, d.type, (b * d.T + t) * d.C + h * d.HS() + e, x[cuda::HeadOffset(b, h, t, e, d.T, d.NH, d.HS())]);
    });
  }
  void UnpermuteQkv(const float* dq, const float* dk, const float* dv, void* dqkv) {
    const float* src[3] = {dq, dk, dv};
    ForHeads([&](int64_t b, int64_t h, int64_t t, int64_t e) {
      for (int which = 0; which < 3; ++which) {
        Store(dqkv, d.type, cuda::QkvOffset(b, t, which, h, e, d.T, d.C, d.HS()),
              src[which][cuda::HeadOffset(b, h, t, e, d.T, d.NH, d.HS())]);
      }
    });
  }
  void CausalSoftmax(float* att, void* p16) {
    for (int64_t row = 0; row < d.heads() * d.T; ++row) {
      const int64_t t = row % d.T;
      float* a = att + row * d.T;
      double mx = -INFINITY, sum = 0.0;
      for (int64_t s = 0; s <= t; ++s) mx = std::max<double>(mx, a[s]);
      for (int64_t s = 0; s <= t; ++s) sum += std::exp(a[s] - mx);
      for (int64_t s = 0; s < d.T; ++s) {
        a[s] = s <= t ? static_cast<float>(std::exp(a[s] - mx) / sum) : 0.0f;
        if (p16 != nullptr) Store(p16, d.type, row * d.T + s, a[s]);
      }
    }
  }
  void SoftmaxGrad(const float* att, float* dp, void* ds16, float scale) {
    for (int64_t row = 0; row < d.heads() * d.T; ++row) {
      double dot = 0.0;
      for (int64_t s = 0; s < d.T; ++s) dot += static_cast<double>(att[row * d.T + s]) * dp[row * d.T + s];
      for (int64_t s = 0; s < d.T; ++s) {
        const float v = static_cast<float>(att[row * d.T + s] * (dp[row * d.T + s] - dot) * scale);
        if (ds16 != nullptr) {
          Store(ds16, d.type, row * d.T + s, v);
        } else {
          dp[row * d.T + s] = v;
        }
      }
    }
  }
  void Round(const float* src, void* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) Store(dst, d.type, i, src[i]);
  }
  void Gemm(const GemmParams& p) { Ref().gemm(p); }

  template <typename F>
  void ForHeads(F f) {
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t h = 0; h < d.NH; ++h)
        for (int64_t t = 0; t < d.T; ++t)
          for (int64_t e = 0; e < d.HS(); ++e) f(b, h, t, e);
  }
};

TEST_SUITE("unit") {

TEST_CASE("kernel device scopes nest, restore, stay per thread and check their stream's device") {
  CHECK(KernelDevice() == Device::CPU());
  CHECK(KernelStream() == nullptr);
  CHECK(&ActiveKernelTable() == &KernelTableFor(Device::CPU()));
  auto cpu_stream = CreateStream(Device::CPU());
  {
    KernelDeviceScope outer(Device::CPU(), cpu_stream.get());
    CHECK(KernelStream() == cpu_stream.get());
    {
      KernelDeviceScope inner(Device::CUDA(1));
      CHECK(KernelDevice() == Device::CUDA(1));
      CHECK(KernelStream() == nullptr);
      std::thread other([] { CHECK(KernelDevice() == Device::CPU()); });  // scopes are per thread
      other.join();
    }
    CHECK(KernelDevice() == Device::CPU());
    CHECK(KernelStream() == cpu_stream.get());
    // A CPU scope runs the CPU table on its stream: results are there when the call returns.
    float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, out[3] = {};
    Add(out, a, b, 3, DType::kF32);
    CHECK(out[2] == 33.0f);
  }
  CHECK(KernelDevice() == Device::CPU());
  CHECK_THROWS_WITH_AS(KernelDeviceScope(Device::CUDA(0), cpu_stream.get()),
                       doctest::Contains("the stream belongs to cpu, not to cuda:0"), InvalidArgument);
}

TEST_CASE("a CUDA kernel scope runs the CUDA table, or says the build has none") {
  float buf[16] = {};
  KernelDeviceScope scope(Device::CUDA(0));
  // Arguments are validated before any device is touched, on every device.
  CHECK_THROWS_WITH_AS(LayerNormForward(buf, buf, nullptr, buf, nullptr, nullptr, 2, 4, 1e-5f, DType::kF32, DType::kF32),
                       doctest::Contains("LayerNormForward: rstd is null"), InvalidArgument);
  if (!CudaTableBuilt()) {
    CHECK_THROWS_WITH_AS(ActiveKernelTable(), doctest::Contains("no kernel table for cuda:0"), InvalidArgument);
    CHECK_THROWS_WITH_AS(Add(buf, buf, buf, 4, DType::kF32), doctest::Contains("built without CUDA"), InvalidArgument);
    return;
  }
  const KernelTable& t = ActiveKernelTable();
  CHECK(std::string(t.name) == "cuda");
  CHECK(&t == &KernelTableFor(Device::CUDA(3)));
  const auto* begin = reinterpret_cast<const char*>(&t) + sizeof(const char*);
  const auto* end = reinterpret_cast<const char*>(&t + 1);
  for (const char* p = begin; p < end; p += sizeof(void*)) {
    void* fn;
    std::memcpy(&fn, p, sizeof fn);
    CHECK(fn != nullptr);
  }
  if (GetDeviceBackend(DeviceType::kCUDA).DeviceCount() == 0) {
    // No GPU here: an op fails cleanly, naming the device, before reading any pointer. The token
    // pointer is not dereferenceable: the host-side token check must leave device pointers alone.
    const auto* bogus = reinterpret_cast<const int32_t*>(uintptr_t{16});
    CHECK_THROWS_WITH_AS(EmbeddingForward(buf, DType::kF32, bogus, buf, nullptr, DType::kF32, 1, 2, 2, 4),
                         doctest::Contains("cuda:0 requested but 0 CUDA device(s) are visible"), InvalidArgument);
    CHECK_THROWS_WITH_AS(Add(buf, buf, buf, 4, DType::kF32), doctest::Contains("0 CUDA device(s)"), InvalidArgument);
  }
}

TEST_CASE("the Philox header device code compiles gives core's words, the SIMD paths' words and the dropout mask") {
  // Random123's known answers for Philox4x32-10.
  PhiloxWords z = Philox4x32Block(0, 0, 0);
  CHECK(z.w[0] == 0x6627e8d5u);
  CHECK(z.w[1] == 0xe169c58du);
  CHECK(z.w[2] == 0xbc57ac4cu);
  CHECK(z.w[3] == 0x9b00dbd8u);
  PhiloxWords f = Philox4x32Block(~0ull, ~0ull, ~0ull);
  CHECK(f.w[0] == 0x408f276du);
  CHECK(f.w[3] == 0x6d5451fdu);
  const uint64_t seed = 0x243f6a8885a308d3ull, stream = 0x13198a2e03707344ull;
  const int64_t blocks = 1000;
  std::vector<uint32_t> simd(static_cast<size_t>(4 * blocks));
  ForEachIsa([&](Isa) {
    cpu::PhiloxWords(seed, stream, 12345, blocks, simd.data());
    int64_t bad = 0;
    for (int64_t i = 0; i < 4 * blocks; ++i) {
      const uint64_t word = 4 * 12345 + static_cast<uint64_t>(i);
      bad += simd[static_cast<size_t>(i)] != PhiloxWordAt(seed, stream, word);
      bad += PhiloxWordAt(seed, stream, word) != Philox4x32(seed, stream, word >> 2)[word & 3];
    }
    CHECK(bad == 0);
  });
  // The mask device kernels compute per element equals the block form and the reference dropout.
  const float p = 0.3f;
  const uint32_t threshold = DropoutThreshold(p);
  const int64_t n = 4099, offset = 77;
  Buffer x(DType::kF32, n), out(DType::kF32, n);
  for (int64_t i = 0; i < n; ++i) x.Set(i, 1.0);
  Ref().dropout_forward(out.data(), x.data(), n, DType::kF32, p, seed, stream, offset);
  int64_t mismatches = 0, kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t idx = static_cast<uint64_t>(offset + i);
    bool block[4];
    DropoutKeepBlock(seed, stream, idx >> 2, threshold, block);
    const bool keep = DropoutKeep(seed, stream, idx, threshold);
    mismatches += keep != block[idx & 3];
    mismatches += keep != (out.Get(i) != 0.0);
    kept += keep;
  }
  CHECK(mismatches == 0);
  CHECK(kept > n / 2);  // about 70 % kept
  CHECK(kept < n * 9 / 10);
}

TEST_CASE("launch geometry covers every element within CUDA's grid limits") {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{1} << 40}) {
    const cuda::Launch l = cuda::ElementwiseLaunch(n);
    CHECK(l.blocks >= 1);
    CHECK(l.blocks <= cuda::kMaxElementwiseBlocks);
    CHECK(l.threads == cuda::kThreads);
    if (n > 0 && l.blocks < cuda::kMaxElementwiseBlocks) CHECK(l.blocks * l.threads >= n);
    const cuda::Launch r = cuda::WarpPerRowLaunch(n == (int64_t{1} << 40) ? 1 << 20 : n, 8);
    CHECK(r.threads == 256);
    CHECK(r.blocks * 8 >= std::min<int64_t>(n, 1 << 20));
    const int64_t rb = cuda::ReduceBlocks(n);
    CHECK(rb >= 1);
    CHECK(rb <= cuda::kMaxReduceBlocks);
    CHECK(cuda::ReduceBlocks(n) == rb);  // a function of n only: sums add in the same order every run
  }
  for (int64_t N : {int64_t{0}, int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{8192}, int64_t{5000000},
                    int64_t{100000000}}) {
    CAPTURE(N);
    const cuda::ColumnSumPlan p = cuda::PlanColumnSums(N, 770);
    CHECK(p.chunks >= 1);
    CHECK(p.chunks <= cuda::kMaxGridY);
    CHECK(p.rows_per_chunk * p.chunks >= N);
    CHECK((N == 0 || p.rows_per_chunk * (p.chunks - 1) < N));  // no empty chunk
    CHECK(p.col_blocks == 25);
  }
}

TEST_CASE("multi-tensor optimizer launches cover every element once within the argument limits") {
  std::vector<int64_t> sizes = {0, 1, 65536, 65537, 7, 0, 3 * 65536 + 5};
  for (int i = 0; i < 60; ++i) sizes.push_back((i * 7919) % 200000);
  sizes.push_back(int64_t{400} * 65536);  // one tensor over more than one launch's blocks
  const auto launches = cuda::PlanMultiTensor(sizes, cuda::kOptimChunk, cuda::kOptimMaxTensors, cuda::kOptimMaxBlocks);
  std::vector<int64_t> covered(sizes.size(), 0);
  std::vector<int64_t> next_chunk(sizes.size(), 0);
  for (const auto& l : launches) {
    CHECK(!l.blocks.empty());
    CHECK(l.tensors.size() <= static_cast<size_t>(cuda::kOptimMaxTensors));
    CHECK(l.blocks.size() <= static_cast<size_t>(cuda::kOptimMaxBlocks));
    for (size_t j = 1; j < l.tensors.size(); ++j) CHECK(l.tensors[j] > l.tensors[j - 1]);
    for (const auto& b : l.blocks) {
      REQUIRE(b.tensor >= 0);
      REQUIRE(static_cast<size_t>(b.tensor) < l.tensors.size());
      const size_t t = static_cast<size_t>(l.tensors[static_cast<size_t>(b.tensor)]);
      CHECK(b.chunk == next_chunk[t]);  // chunks in order, none twice
      ++next_chunk[t];
      const int64_t begin = b.chunk * cuda::kOptimChunk;
      covered[t] += std::min(sizes[t], begin + cuda::kOptimChunk) - begin;
    }
  }
  CHECK(covered == sizes);
}

TEST_CASE("scratch layouts are aligned and their pieces do not overlap") {
  for (DType t : StorageTypes()) {
    for (bool backward : {false, true}) {
      CAPTURE(std::string(DTypeName(t)));
      CAPTURE(backward);
      const int64_t B = 3, T = 17, C = 24, NH = 4;
      const cuda::AttentionScratch s = cuda::PlanAttentionScratch(B, T, C, NH, t, backward);
      const size_t heads_b = static_cast<size_t>(B * T * C) * DTypeSize(t), heads_f = static_cast<size_t>(B * T * C) * 4;
      const size_t probs_b = static_cast<size_t>(B * NH * T * T) * DTypeSize(t), probs_f = static_cast<size_t>(B * NH * T * T) * 4;
      std::vector<std::pair<size_t, size_t>> pieces = {{s.q, heads_b}, {s.k, heads_b}, {s.v, heads_b}};
      if (Is16Bit(t)) pieces.push_back({s.p16, probs_b});
      if (backward) {
        pieces.push_back({s.dout, heads_b});
        pieces.push_back({s.dp, probs_f});
        pieces.push_back({s.dq, heads_f});
        pieces.push_back({s.dk, heads_f});
        pieces.push_back({s.dv, heads_f});
        if (Is16Bit(t)) pieces.push_back({s.ds16, probs_b});
      } else {
        pieces.push_back({s.out, heads_f});
      }
      for (size_t i = 0; i < pieces.size(); ++i) {
        CHECK(pieces[i].first % cuda::ScratchLayout::kAlign == 0);
        CHECK(pieces[i].first + pieces[i].second <= s.bytes);
        for (size_t j = i + 1; j < pieces.size(); ++j) {
          const bool apart = pieces[i].first + pieces[i].second <= pieces[j].first ||
                             pieces[j].first + pieces[j].second <= pieces[i].first;
          CHECK(apart);
        }
      }
    }
  }
}

TEST_CASE("GEMM plans ask cuBLAS only what it takes and give the reference result for every dtype triple") {
  const std::vector<std::array<int64_t, 4>> shapes = {{1, 1, 1, 1}, {7, 5, 3, 1}, {4, 9, 11, 3}, {5, 6, 0, 2}};
  int64_t cases = 0;
  for (Trans ta : {Trans::kN, Trans::kT})
    for (Trans tb : {Trans::kN, Trans::kT})
      for (const auto& s : shapes)
        for (DType at : StorageTypes())
          for (DType bt : StorageTypes())
            for (DType ct : StorageTypes())
              for (int bias = 0; bias < 3; ++bias)
                for (float beta : {0.0f, 0.5f}) {
                  GemmCase g{ta, tb, s[0], s[1], s[2], s[3], at, bt, ct, bias > 0,
                             bias == 2 ? DType::kF32 : ct, beta == 0.0f ? 1.0f : 0.75f, beta};
                  CAPTURE(cases);
                  CheckGemmCase(g);
                  ++cases;
                }
  CHECK(cases == 4 * 4 * 27 * 3 * 2);
  // The common training GEMMs run as one cuBLAS call with nothing staged.
  GemmParams p;
  p.m = p.n = p.k = 8;
  p.a_type = p.b_type = p.c_type = DType::kBF16;
  p.bias = &p;  // any non-null pointer
  p.bias_type = DType::kBF16;
  GemmPlan fwd = cuda::PlanGemm(p);  // bf16 linear forward with bias: pre-filled, one rounding
  CHECK((!fwd.stage_a && !fwd.stage_b && !fwd.stage_c && fwd.prefill_bias && fwd.cublas_beta == 1.0f));
  p.bias = nullptr;
  p.c_type = DType::kF32;
  p.beta = 1.0f;  // weight gradient accumulated into fp32
  GemmPlan wgrad = cuda::PlanGemm(p);
  CHECK((!wgrad.stage_a && !wgrad.stage_b && !wgrad.stage_c && wgrad.cublas_beta == 1.0f));
  p.a_type = DType::kF32;  // fp32 x bf16: only the bf16 operand is widened
  GemmPlan mixed = cuda::PlanGemm(p);
  CHECK((!mixed.stage_a && mixed.stage_b && !mixed.stage_c && mixed.in_type == DType::kF32));
}

TEST_CASE("the attention decomposition reproduces the reference attention, forward and backward") {
  for (DType t : {DType::kF32, DType::kBF16}) {
    CAPTURE(std::string(DTypeName(t)));
    const cuda::AttentionDims d{2, 13, 12, 3, t};
    const int64_t qkv_n = d.B * d.T * 3 * d.C, out_n = d.B * d.T * d.C, att_n = AttentionSavedElems(d.B, d.T, d.NH);
    Buffer qkv = Buffer::Random(t, qkv_n, 5, -2, 2), dout = Buffer::Random(t, out_n, 6);
    Buffer out_ref(t, out_n), att_ref(DType::kF32, att_n), dqkv_ref(t, qkv_n);
    Ref().attention_forward(out_ref.data(), att_ref.f32(), qkv.data(), d.B, d.T, d.C, d.NH, t);
    Ref().attention_backward(dqkv_ref.data(), dout.data(), qkv.data(), att_ref.f32(), d.B, d.T, d.C, d.NH, t);
    HostAttentionOps ops{d};
    std::vector<char> fwd_scratch(cuda::PlanAttentionScratch(d.B, d.T, d.C, d.NH, t, false).bytes);
    std::vector<char> bwd_scratch(cuda::PlanAttentionScratch(d.B, d.T, d.C, d.NH, t, true).bytes);
    Buffer out(t, out_n), att(DType::kF32, att_n), dqkv(t, qkv_n);
    cuda::RunAttentionForward(ops, d, out.data(), att.f32(), qkv.data(), fwd_scratch.data());
    cuda::RunAttentionBackward(ops, d, dqkv.data(), dout.data(), qkv.data(), att_ref.f32(), bwd_scratch.data());
    CheckOp(att, att_ref, "probabilities", 1e-5);
    if (t == DType::kF32) {
      CheckOp(out, out_ref, "out", 1e-5);
      CheckOp(dqkv, dqkv_ref, "dqkv", 1e-5);
    } else {
      // P and dS enter their GEMMs rounded to bf16 (plan.h): within a few bf16 ulps of the output scale.
      CheckClose(out, out_ref, 2.0, 8 * Ulp(out_ref.MaxAbs(), t), "out (bf16)");
      CheckClose(dqkv, dqkv_ref, 2.0, 8 * Ulp(dqkv_ref.MaxAbs(), t), "dqkv (bf16)");
    }
  }
}

}  // TEST_SUITE

}  // namespace
}  // namespace zerorun::kernels::test

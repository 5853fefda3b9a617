// Backend selection: the public entries follow SetKernelBackend; both tables are complete.
#include <doctest/doctest.h>

#include <thread>

#include "kernel_test_util.h"
#include "zerorun/core/error.h"
#include "zerorun/core/thread_pool.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::test {
namespace {

TEST_SUITE("unit") {

TEST_CASE("every table entry is set and the backend switch routes calls") {
  for (const KernelTable* k : {&RefKernelTable(), &CpuKernelTable()}) {
    CAPTURE(k->name);
    // The table is a struct of pointers after the name: every one must be non-null.
    const auto* begin = reinterpret_cast<const char*>(k) + sizeof(const char*);
    const auto* end = reinterpret_cast<const char*>(k + 1);
    for (const char* p = begin; p < end; p += sizeof(void*)) {
      void* fn;
      std::memcpy(&fn, p, sizeof fn);
      CHECK(fn != nullptr);
    }
  }
  Backend before = ActiveBackend();
  SetKernelBackend(Backend::kRef);
  CHECK(&ActiveKernelTable() == &RefKernelTable());
  CHECK(std::string(BackendName(ActiveBackend())) == "ref");
  SetKernelBackend(Backend::kCpu);
  CHECK(&ActiveKernelTable() == &CpuKernelTable());
  SetKernelBackend(before);
}

TEST_CASE("public entries reject bad arguments, naming the op and the argument") {
  float buf[64] = {};
  CHECK_THROWS_WITH_AS(AttentionForward(buf, buf, buf, 1, 2, 6, 4, DType::kF32),
                       doctest::Contains("AttentionForward: C = 6 is not divisible by NH = 4"), InvalidArgument);
  CHECK_THROWS_WITH_AS(LayerNormForward(buf, buf, nullptr, buf, nullptr, nullptr, 2, 4, 1e-5f, DType::kF32,
                                        DType::kF32),
                       doctest::Contains("LayerNormForward: rstd is null"), InvalidArgument);
  CHECK_THROWS_WITH_AS(Add(buf, buf, buf, 4, DType::kI32), doctest::Contains("Add: type has dtype int32"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(SoftmaxForward(buf, buf, -1, 4, DType::kF32), doctest::Contains("N = -1"), InvalidArgument);
  CHECK_THROWS_AS(SwiGluBackward(buf, buf, buf, 2, 2, DType::kF32), InvalidArgument);  // din aliases in
  CHECK_THROWS_AS(Copy(buf, DType::kF16, buf, DType::kF32, 4), InvalidArgument);       // in-place conversion
  // Zero sizes are no-ops that accept null pointers.
  Gemm(Trans::kN, Trans::kN, 0, 3, 3, 1, nullptr, DType::kF32, 3, nullptr, DType::kF32, 3, 0, nullptr, DType::kF32, 3);
  GeluForward(nullptr, nullptr, 0, DType::kBF16, GeluApprox::kTanh);
  CHECK(SumSquares(nullptr, 0, DType::kF32) == 0.0);
  CHECK(AllFinite(nullptr, 0, DType::kF16));
  CHECK(CrossEntropy(nullptr, nullptr, nullptr, nullptr, 0, 5, DType::kF32, -1, 1.0f).count == 0);
}

TEST_CASE("cpu results do not depend on the thread count") {
  // Gradient sums (norms, bias, embedding), the loss and sums of squares use fixed blocks added in a
  // fixed order: 1, 2 and 3 threads must agree bit for bit.
  int64_t N = 300, C = 70, V = 33, B = 3, T = 100;
  auto run = [&](int threads) {
    ThreadPool::SetDefaultThreads(threads);
    std::vector<Buffer> out;
    for (DType t : {DType::kF32, DType::kBF16}) {
      Buffer x = Buffer::Random(t, N * C, 1), dy = Buffer::Random(t, N * C, 2), dx(t, N * C);
      Buffer dw = Buffer::Random(DType::kF32, C, 3), db = Buffer::Random(t, C, 4), o(t, N * C);
      Buffer mean(DType::kF32, N), rstd(DType::kF32, N);
      Cpu().layernorm_forward(o.data(), mean.f32(), rstd.f32(), x.data(), nullptr, nullptr, N, C, 1e-5f, t, t);
      Cpu().layernorm_backward(dx.data(), dw.data(), nullptr, dy.data(), x.data(), nullptr, mean.f32(), rstd.f32(), N,
                               C, t, t, DType::kF32);
      Cpu().bias_backward(db.data(), t, dy.data(), t, N, C);
      std::vector<int32_t> tok(static_cast<size_t>(B * T));
      for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>(i * 7 % V);
      Buffer dwte = Buffer::Random(t, V * C, 5), dwpe = Buffer::Random(DType::kF32, T * C, 6);
      Cpu().embedding_backward(dwte.data(), nullptr, t, dy.data(), t, tok.data(), B, T, C, V);
      Cpu().embedding_backward(nullptr, dwpe.data(), DType::kF32, dy.data(), t, tok.data(), B, T, C, V);
      Buffer logits = Buffer::Random(t, N * V, 7, -4, 4), loss(DType::kF32, 2);
      loss.Set(0, Cpu().cross_entropy(nullptr, nullptr, logits.data(), tok.data(), N, V, t, -1, 1.0f).loss);
      loss.Set(1, static_cast<float>(Cpu().sum_squares(x.data(), N * C, t)));
      for (Buffer* b : {&o, &dx, &dw, &db, &dwte, &dwpe, &loss}) out.push_back(*b);
    }
    return out;
  };
  std::vector<Buffer> one = run(1), two = run(2), three = run(3);
  ThreadPool::SetDefaultThreads(ThreadPool::DefaultThreadCount());
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(two[i].BitEqual(one[i]));
    CHECK(three[i].BitEqual(one[i]));
  }
}

TEST_CASE("cpu kernels called concurrently from several threads give the serial results") {
  // Ranks-as-threads: four callers share the pool and OpenBLAS; each must get exactly what it gets
  // alone (per-thread scratch, no shared mutable state).
  constexpr int kCallers = 4;
  int64_t B = 2, T = 70, C = 48, NH = 3, M = 150, V = 37;
  struct Result {
    Buffer gemm, att_out, ln_out, dqkv;
    float loss = 0.0f;
  };
  auto run = [&](int seed, DType t) {
    Result r;
    Buffer a = Buffer::Random(t, M * C, seed), w = Buffer::Random(t, 3 * C * C, seed + 1);
    r.gemm = Buffer(t, M * 3 * C);
    Cpu().gemm([&] {
      GemmParams p;
      p.trans_b = Trans::kT, p.m = M, p.n = 3 * C, p.k = C;
      p.a = a.data(), p.a_type = t, p.lda = C, p.b = w.data(), p.b_type = t, p.ldb = C;
      p.c = r.gemm.data(), p.c_type = t, p.ldc = 3 * C;
      return p;
    }());
    Buffer qkv = Buffer::Random(t, B * T * 3 * C, seed + 2), dout = Buffer::Random(t, B * T * C, seed + 3);
    Buffer att(DType::kF32, B * NH * T * T);
    r.att_out = Buffer(t, B * T * C);
    r.dqkv = Buffer(t, B * T * 3 * C);
    Cpu().attention_forward(r.att_out.data(), att.f32(), qkv.data(), B, T, C, NH, t);
    Cpu().attention_backward(r.dqkv.data(), dout.data(), qkv.data(), att.f32(), B, T, C, NH, t);
    Buffer mean(DType::kF32, M), rstd(DType::kF32, M);
    r.ln_out = Buffer(t, M * C);
    Cpu().layernorm_forward(r.ln_out.data(), mean.f32(), rstd.f32(), a.data(), nullptr, nullptr, M, C, 1e-5f, t, t);
    Buffer logits = Buffer::Random(t, M * V, seed + 4, -5, 5);
    std::vector<int32_t> targets(static_cast<size_t>(M));
    for (int64_t i = 0; i < M; ++i) targets[i] = static_cast<int32_t>((i * 13 + seed) % V);
    r.loss = Cpu().cross_entropy(nullptr, nullptr, logits.data(), targets.data(), M, V, t, -1, 1.0f).loss;
    return r;
  };
  for (DType t : {DType::kF32, DType::kBF16}) {
    CAPTURE(std::string(DTypeName(t)));
    std::vector<Result> serial;
    for (int c = 0; c < kCallers; ++c) serial.push_back(run(10 * c, t));
    std::vector<Result> parallel(kCallers);
    std::vector<std::thread> threads;
    for (int c = 0; c < kCallers; ++c) threads.emplace_back([&, c] { parallel[c] = run(10 * c, t); });
    for (auto& th : threads) th.join();
    for (int c = 0; c < kCallers; ++c) {
      CHECK(parallel[c].gemm.BitEqual(serial[c].gemm));
      CHECK(parallel[c].att_out.BitEqual(serial[c].att_out));
      CHECK(parallel[c].dqkv.BitEqual(serial[c].dqkv));
      CHECK(parallel[c].ln_out.BitEqual(serial[c].ln_out));
      CHECK(parallel[c].loss == serial[c].loss);
    }
  }
}

}  // TEST_SUITE
}  // namespace
}  // namespace zerorun::kernels::test

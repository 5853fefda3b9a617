// GEMM and bias kernels: cpu against ref over shapes, transposes, leading dims, beta, bias, batches
// and every storage dtype; ref against closed-form products.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kernel_test_util.h"
#include "zerorun/core/error.h"
#include "zerorun/kernels/cpu/onednn.h"
#include "zerorun/kernels/gemm_backend.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels::test {
namespace {

struct GemmCase {
  int64_t m, n, k;
  Trans ta, tb;
  float alpha, beta;
  bool bias;
  int64_t batch;
  int64_t pad;  // extra leading-dimension elements
};

// Runs one case on `table` with buffers derived from fixed seeds; returns C.
Buffer RunGemm(const KernelTable& table, const GemmCase& g, DType at, DType bt, DType ct) {
  int64_t a_rows = g.ta == Trans::kN ? g.m : g.k, a_cols = g.ta == Trans::kN ? g.k : g.m;
  int64_t b_rows = g.tb == Trans::kN ? g.k : g.n, b_cols = g.tb == Trans::kN ? g.n : g.k;
  int64_t lda = a_cols + g.pad, ldb = b_cols + g.pad, ldc = g.n + g.pad;
  int64_t sa = a_rows * lda + 3, sb = b_rows * ldb + 1, sc = g.m * ldc + 2;
  Buffer a = Buffer::Random(at, sa * g.batch, 11);
  Buffer b = Buffer::Random(bt, sb * g.batch, 12);
  Buffer c = Buffer::Random(ct, sc * g.batch, 13);
  Buffer bias = Buffer::Random(ct, g.n, 14);
  if (g.beta == 0.0f && c.size() > 0) c.Set(0, std::nan(""));  // must not leak when beta == 0
  GemmParams p;
  p.trans_a = g.ta;
  p.trans_b = g.tb;
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.alpha = g.alpha;
  p.beta = g.beta;
  p.a = a.data();
  p.a_type = at;
  p.lda = lda;
  p.b = b.data();
  p.b_type = bt;
  p.ldb = ldb;
  p.c = c.data();
  p.c_type = ct;
  p.ldc = ldc;
  p.bias = g.bias ? bias.data() : nullptr;
  p.bias_type = ct;
  p.batch = g.batch;
  p.stride_a = sa;
  p.stride_b = sb;
  p.stride_c = sc;
  table.gemm(p);
  return c;
}

TEST_SUITE("unit") {

TEST_CASE("ref Gemm matches a closed-form product") {
  // A (2, 3) = [[1,2,3],[4,5,6]], B (3, 2) = [[1,0],[0,1],[1,1]] -> A*B = [[4,5],[10,11]].
  float a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 0, 0, 1, 1, 1}, c[] = {1, 1, 1, 1}, bias[] = {10, 20};
  GemmParams p;
  p.m = 2, p.n = 2, p.k = 3, p.alpha = 2.0f, p.beta = 1.0f;
  p.a = a, p.lda = 3, p.b = b, p.ldb = 2, p.c = c, p.ldc = 2, p.bias = bias;
  Ref().gemm(p);
  CHECK(c[0] == 2 * 4 + 1 + 10);
  CHECK(c[1] == 2 * 5 + 1 + 20);
  CHECK(c[2] == 2 * 10 + 1 + 10);
  CHECK(c[3] == 2 * 11 + 1 + 20);
  // A^T with A stored (3, 2): op(A) = [[1,3,5],[2,4,6]]; B^T with B stored (2, 3) = [[1,0,1],[0,1,1]].
  float at[] = {1, 2, 3, 4, 5, 6}, bt[] = {1, 0, 1, 0, 1, 1}, d[4];
  Gemm(Trans::kT, Trans::kT, 2, 2, 3, 1.0f, at, DType::kF32, 2, bt, DType::kF32, 3, 0.0f, d, DType::kF32, 2);
  CHECK(d[0] == 1 + 5);
  CHECK(d[1] == 3 + 5);
  CHECK(d[2] == 2 + 6);
  CHECK(d[3] == 4 + 6);
}

// Every GEMM backend this build has, switched process-wide and restored.
void ForEachGemmBackend(const std::function<void(GemmBackend)>& fn) {
  const GemmBackend before = ActiveGemmBackend();
  for (GemmBackend b : GemmBackends()) {
    SetGemmBackend(b);
    CAPTURE(std::string(GemmBackendName(b)));
    fn(b);
  }
  SetGemmBackend(before);
}

// Runs this test binary's test case(s) `name` (a doctest filter) in a child with `env` ("A=1 B=2") added; its exit status
// and output (bounded by the child's own test timeout).
std::pair<int, std::string> RunCaseWith(const std::string& env, const std::string& name) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = "env " + env + " timeout 120 '" + self + "' --no-version -tc='" + name + "' 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  int status = pclose(f);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

TEST_CASE("cpu Gemm matches ref: shapes, transposes, dtypes") {
  std::vector<GemmCase> cases = {
      {0, 5, 3, Trans::kN, Trans::kN, 1, 0, false, 1, 0},
      {3, 5, 0, Trans::kN, Trans::kN, 1, 0, true, 1, 0},  // k == 0: C = bias
      {1, 1, 1, Trans::kN, Trans::kN, 1, 0, false, 1, 0},
      {7, 7, 7, Trans::kN, Trans::kT, 0.5f, 0.25f, true, 1, 1},
      {7, 7, 7, Trans::kT, Trans::kN, 1, 1, false, 3, 2},
      {7, 7, 7, Trans::kT, Trans::kT, -1, 0, true, 2, 0},
      {4099, 3, 5, Trans::kN, Trans::kN, 1, 0, true, 1, 0},
      {2, 4099, 3, Trans::kN, Trans::kT, 1, 0.5f, false, 1, 3},
      {5, 3, 4099, Trans::kT, Trans::kN, 1, 0, false, 1, 0},
      {130, 150, 170, Trans::kN, Trans::kT, 1, 0, true, 1, 0},
      {130, 150, 170, Trans::kT, Trans::kN, 1, 1, false, 1, 5},
  };
  for (const auto& g : cases) {
    for (DType t : StorageTypes()) {
      CAPTURE(g.m);
      CAPTURE(g.n);
      CAPTURE(g.k);
      CAPTURE(std::string(DTypeName(t)));
      // All operands in t, and mixed cases: 16-bit A into fp32 B and C; fp32 A with 16-bit B and C.
      std::vector<std::array<DType, 3>> types = {{t, t, t}};
      if (t != DType::kF32) {
        types.push_back({t, DType::kF32, DType::kF32});
        types.push_back({DType::kF32, t, t});
      }
      for (auto [at, bt, ct] : types) {
        Buffer want = RunGemm(Ref(), g, at, bt, ct);
        ForEachGemmBackend([&](GemmBackend) {
          ForEachIsa([&](Isa) { CheckOp(RunGemm(Cpu(), g, at, bt, ct), want, "gemm", 1e-5); });
        });
      }
    }
  }
}

TEST_CASE("cpu Gemm at the GPT-bench linear shapes, 16-bit against fp32, on every backend") {
  // The bf16/fp16 products of one layer's forward, input and weight gradients (B*T = 256 rows here)
  // agree with the fp32 reference of the same (already rounded) operands to accumulation rounding
  // plus one rounding of C.
  struct Case { int64_t m, n, k; Trans ta, tb; float beta; bool bias; };
  const Case cases[] = {{256, 768, 256, Trans::kN, Trans::kT, 0, true},   // qkv forward
                        {256, 256, 768, Trans::kN, Trans::kN, 0, false},  // qkv dx
                        {768, 256, 256, Trans::kT, Trans::kN, 1, false},  // qkv dW +=
                        {256, 1024, 256, Trans::kN, Trans::kT, 0, true}}; // fc forward
  for (const Case& c : cases) {
    GemmCase g{c.m, c.n, c.k, c.ta, c.tb, 1.0f, c.beta, c.bias, 1, 0};
    for (DType t : {DType::kBF16, DType::kF16}) {
      CAPTURE(std::string(DTypeName(t)));
      CAPTURE(c.m);
      CAPTURE(c.n);
      CAPTURE(c.k);
      for (DType ct : {t, DType::kF32}) {
        Buffer want = RunGemm(Ref(), g, t, t, ct);
        ForEachGemmBackend([&](GemmBackend) { CheckOp(RunGemm(Cpu(), g, t, t, ct), want, "gemm 16-bit", 1e-5); });
      }
    }
  }
}

TEST_CASE("Gemm: every oneDNN ISA cap and OpenBLAS in a fresh process (ZERORUN_ISA, ONEDNN_MAX_CPU_ISA, ZERORUN_GEMM)") {
  // oneDNN's ISA is fixed at its first call, so each cap runs the numerics cases in a child process:
  // avx2 (bf16 widened to fp32) and avx512_core without bf16 (widened); OpenBLAS chosen by ZERORUN_GEMM.
  if (std::getenv("ZR_GEMM_TEST_CHILD") != nullptr) return;
  // doctest filters are comma-separated wildcards: name the cases by their comma-free starts.
  const std::string numerics = "cpu Gemm matches ref:*,cpu Gemm at the GPT-bench linear shapes*";
  const std::string describe = "the GEMM backend describes itself";
  std::vector<std::pair<std::string, std::string>> runs = {{"ZERORUN_GEMM=openblas", describe}};
  if (cpu::OnednnBuilt()) {
    if (GetCpuFeatures().avx2) runs.push_back({"ZERORUN_ISA=avx2", numerics + "," + describe});
    if (GetCpuFeatures().avx512) runs.push_back({"ONEDNN_MAX_CPU_ISA=AVX512_CORE", numerics + "," + describe});
  }
  for (const auto& [env, cases] : runs) {
    CAPTURE(env);
    auto [status, out] = RunCaseWith("ZR_GEMM_TEST_CHILD=1 " + env, cases);
    INFO(out);
    CHECK(status == 0);
    CHECK(out.find("0 failed") != std::string::npos);
    CHECK(out.find("| 0 passed") == std::string::npos);
  }
}

TEST_CASE("the GEMM backend describes itself") {
  const std::string d = GemmDescription();
  CAPTURE(d);
  CHECK(d.find(GemmBackendName(ActiveGemmBackend())) == 0);
  CHECK(d.find(" thread") != std::string::npos);
  if (ActiveGemmBackend() == GemmBackend::kOnednn) {
    CHECK(d.find(cpu::OnednnIsa()) != std::string::npos);
    CHECK(!cpu::OnednnIsa().empty());
    GemmParams tn;
    tn.trans_a = Trans::kT;
    GemmParams nn;
    GemmParams tn16 = tn;
    tn16.a_type = tn16.b_type = DType::kBF16;
    CHECK_FALSE(cpu::OnednnDefersTransposedA(nn));
    CHECK_FALSE(cpu::OnednnDefersTransposedA(tn16));
    if (cpu::OnednnAvx512()) {
      CHECK(GemmWarning().empty());  // oneDNN detects its own ISA and runs every product
      CHECK_FALSE(cpu::OnednnDefersTransposedA(tn));
      CHECK(d.find("openblas") == std::string::npos);
    } else {  // below AVX-512 the fp32 products with A transposed run on OpenBLAS, and it says so
      CHECK(cpu::OnednnDefersTransposedA(tn));
      CHECK(d.find("; fp32 with A transposed on openblas ") != std::string::npos);
    }
    const char* cap = std::getenv("ZERORUN_ISA");
    if (cap != nullptr && std::string(cap) == "avx2") CHECK(cpu::OnednnIsa().rfind("avx2", 0) == 0);
    if (cap != nullptr) CHECK(!cpu::OnednnNative16(DType::kBF16));
  }
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  if (ActiveGemmBackend() == GemmBackend::kOpenblas && core != nullptr && std::string(core) == "Prescott" &&
      GetCpuFeatures().avx2) {
    // OpenBLAS on SSE3 kernels on a CPU with AVX2: the warning names the variable and the value.
    CHECK(GemmWarning().find("OPENBLAS_CORETYPE=") != std::string::npos);
    const std::string w = GemmWarning();
    if (GetCpuFeatures().avx512) {
      CHECK((w.find("OPENBLAS_CORETYPE=SkylakeX") != std::string::npos ||
             w.find("OPENBLAS_CORETYPE=Cooperlake") != std::string::npos));
    } else {
      CHECK(w.find("OPENBLAS_CORETYPE=Haswell") != std::string::npos);
    }
  }
  if (!cpu::OnednnBuilt()) CHECK_THROWS_AS(SetGemmBackend(GemmBackend::kOnednn), InvalidArgument);
}

TEST_CASE("an OpenBLAS below this CPU's kernels is reported with the variable that fixes it") {
  if (std::getenv("ZR_GEMM_TEST_CHILD") != nullptr) return;
  if (!GetCpuFeatures().avx2) return;  // nothing better than Prescott to ask for
  auto [status, out] = RunCaseWith("ZR_GEMM_TEST_CHILD=1 ZERORUN_GEMM=openblas OPENBLAS_CORETYPE=Prescott",
                                   "the GEMM backend describes itself");
  INFO(out);
  CHECK(status == 0);
  CHECK(out.find("1 passed") != std::string::npos);
}

TEST_CASE("BiasAdd and BiasBackward: cpu matches ref; closed form") {
  float out[] = {1, 2, 3, 4, 5, 6}, bias[] = {10, 20, 30}, dbias[] = {1, 1, 1};
  BiasAdd(out, DType::kF32, bias, DType::kF32, 2, 3);
  CHECK(out[0] == 11);
  CHECK(out[5] == 36);
  BiasBackward(dbias, DType::kF32, out, DType::kF32, 2, 3);  // columns sum 11+14, 22+25, 33+36, plus 1
  CHECK(dbias[0] == 26);
  CHECK(dbias[1] == 48);
  CHECK(dbias[2] == 70);
  std::vector<std::pair<int64_t, int64_t>> shapes = {{0, 3}, {1, 1}, {7, 7}, {3, 4099}, {513, 300}};
  for (auto [N, C] : shapes) {
    for (DType t : StorageTypes()) {
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(std::string(DTypeName(t)));
      Buffer x0 = Buffer::Random(t, N * C, 1), b = Buffer::Random(t, C, 2), x = x0;
      Ref().bias_add(x.data(), t, b.data(), t, N, C);
      ForEachIsa([&](Isa) {
        Buffer x2 = x0;
        Cpu().bias_add(x2.data(), t, b.data(), t, N, C);
        CheckOp(x2, x, "bias_add");
      });
      for (DType gt : {t, DType::kF32}) {
        Buffer d0 = Buffer::Random(gt, C, 3), d1 = d0;
        Ref().bias_backward(d1.data(), gt, x.data(), t, N, C);
        ForEachIsa([&](Isa) {
          Buffer d2 = d0;
          Cpu().bias_backward(d2.data(), gt, x.data(), t, N, C);
          CheckOp(d2, d1, "bias_backward", 1e-5);
        });
      }
    }
  }
}

TEST_CASE("Gemm rejects bad arguments with the op and argument named") {
  float a[4] = {}, b[4] = {}, c[4] = {};
  CHECK_THROWS_WITH_AS(Gemm(Trans::kN, Trans::kN, 2, 2, 2, 1, a, DType::kF32, 1, b, DType::kF32, 2, 0, c,
                            DType::kF32, 2),
                       doctest::Contains("lda"), InvalidArgument);
  CHECK_THROWS_WITH_AS(Gemm(Trans::kN, Trans::kN, -1, 2, 2, 1, a, DType::kF32, 2, b, DType::kF32, 2, 0, c,
                            DType::kF32, 2),
                       doctest::Contains("m = -1"), InvalidArgument);
  CHECK_THROWS_AS(Gemm(Trans::kN, Trans::kN, 2, 2, 2, 1, a, DType::kI32, 2, b, DType::kF32, 2, 0, c, DType::kF32, 2),
                  InvalidArgument);
  CHECK_THROWS_WITH_AS(Gemm(Trans::kN, Trans::kN, int64_t{1} << 31, 1, 1, 1, a, DType::kF32, 1, b, DType::kF32, 1, 0,
                            c, DType::kF32, 1),
                       doctest::Contains("32-bit BLAS limit"), InvalidArgument);
}

}  // TEST_SUITE
}  // namespace
}  // namespace zerorun::kernels::test

// The GEMM backend switch and the OpenBLAS seam: the one place that includes cblas.h, sets OpenBLAS's
// threading and checks which kernels it picked for this CPU.
#include "zerorun/kernels/cpu/blas.h"

#include <cblas.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "zerorun/core/cpu_features.h"
#include "zerorun/core/error.h"
#include "zerorun/core/format.h"
#include "zerorun/core/thread_pool.h"
#include "zerorun/kernels/cpu/onednn.h"
#include "zerorun/kernels/gemm_backend.h"
#include "zerorun/kernels/ops.h"

namespace zerorun::kernels {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_gemm_backend{kUnset};

GemmBackend GemmBackendFromEnv() {
  const char* env = std::getenv("ZERORUN_GEMM");
  if (env == nullptr || *env == '\0') return cpu::OnednnBuilt() ? GemmBackend::kOnednn : GemmBackend::kOpenblas;
  if (std::strcmp(env, "openblas") == 0) return GemmBackend::kOpenblas;
  if (std::strcmp(env, "onednn") == 0) {
    if (!cpu::OnednnBuilt()) {
      ZR_THROW(ConfigError, "ZERORUN_GEMM=onednn, but this zerorun was built without oneDNN (install the Debian "
                            "package 'libdnnl-dev' and rebuild)");
    }
    return GemmBackend::kOnednn;
  }
  ZR_THROW(ConfigError, "ZERORUN_GEMM='{}' is not a GEMM backend (expected 'onednn' or 'openblas')", env);
}

bool HasCpu(const char* feature) {
  __builtin_cpu_init();
  if (std::strcmp(feature, "avx512bf16") == 0) return __builtin_cpu_supports("avx512bf16");
  return false;
}

// The OpenBLAS kernel family this CPU should get, given what Debian's 0.3.21 offers.
const char* BestOpenblasCore() {
  const CpuFeatures& f = GetCpuFeatures();
  if (f.avx512) return HasCpu("avx512bf16") ? "Cooperlake" : "SkylakeX";
  if (f.avx2) return "Haswell";
  return nullptr;
}

int CoreRank(const std::string& core) {
  if (core == "Cooperlake" || core == "SapphireRapids") return 3;
  if (core == "SkylakeX") return 2;
  if (core == "Haswell" || core == "Zen" || core == "SkylakeX_noavx512") return 1;
  return 0;  // Prescott, Core2, Nehalem, Sandybridge, ...: SSE or AVX1 kernels
}

}  // namespace

GemmBackend ActiveGemmBackend() {
  int b = g_gemm_backend.load(std::memory_order_relaxed);
  if (b == kUnset) {
    b = static_cast<int>(GemmBackendFromEnv());
    g_gemm_backend.store(b, std::memory_order_relaxed);
  }
  return static_cast<GemmBackend>(b);
}

void SetGemmBackend(GemmBackend backend) {
  if (backend == GemmBackend::kOnednn && !cpu::OnednnBuilt()) {
    ZR_THROW(InvalidArgument, "SetGemmBackend: this zerorun was built without oneDNN");
  }
  g_gemm_backend.store(static_cast<int>(backend), std::memory_order_relaxed);
}

const char* GemmBackendName(GemmBackend backend) { return backend == GemmBackend::kOnednn ? "onednn" : "openblas"; }

std::string GemmDescription() {
  const int threads = ThreadPool::Default().num_threads();
  const char* unit = threads == 1 ? "thread" : "threads";
  if (ActiveGemmBackend() == GemmBackend::kOnednn) {
    return Format("onednn {} ({}{}), {} {}", cpu::OnednnIsa(),
                  cpu::OnednnNative16(DType::kBF16) ? "bf16 native" : "bf16 computed in fp32",
                  cpu::OnednnAvx512() ? "" : Format("; fp32 with A transposed on openblas {}", openblas_get_corename()),
                  threads, unit);
  }
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  return Format("openblas {}{}, {} {}", openblas_get_corename(),
                env != nullptr ? Format(" (OPENBLAS_CORETYPE={})", env) : std::string(), threads, unit);
}

std::string GemmWarning() {
  // OpenBLAS runs every GEMM, or (oneDNN below AVX-512) the fp32 ones with A transposed
  if (ActiveGemmBackend() != GemmBackend::kOpenblas && (!cpu::OnednnBuilt() || cpu::OnednnAvx512())) return "";
  const std::string core = openblas_get_corename();
  const char* best = BestOpenblasCore();
  if (best == nullptr || CoreRank(core) >= CoreRank(best)) return "";
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  return Format("OpenBLAS runs its {} kernels on a CPU that can run {}{}: GEMMs are several times slower than they "
                "should be; set OPENBLAS_CORETYPE={} in the environment before starting{}",
                core, best, env != nullptr ? Format(" (OPENBLAS_CORETYPE={} is set)", env) : std::string(" (it did not "
                "recognise this CPU)"), best, cpu::OnednnBuilt() ? " (or unset ZERORUN_GEMM to use oneDNN)" : "");
}

namespace cpu {

void EnsureBlasSingleThreaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // BLAS scales C by beta; make beta == 0 ignore C's contents like the rest of zerorun
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  if (ActiveGemmBackend() == GemmBackend::kOnednn) {
    GemmParams p;
    p.trans_a = trans_a ? Trans::kT : Trans::kN;
    p.trans_b = trans_b ? Trans::kT : Trans::kN;
    p.m = m, p.n = n, p.k = k, p.alpha = alpha, p.beta = beta;
    p.a = a, p.lda = lda, p.b = b, p.ldb = ldb, p.c = c, p.ldc = ldc;
    if (OnednnGemm(p, nullptr)) return;
  }
  EnsureBlasSingleThreaded();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace cpu
}  // namespace zerorun::kernels

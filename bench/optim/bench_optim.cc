// Fused CPU AdamW throughput on one flat fp32 buffer (default 64 M parameters), fp32 gradients, as
// torch.optim.AdamW sees it: 28 bytes of memory traffic per parameter. Optionally with bf16 gradients
// and a bf16 parameter copy (the mixed-precision path). Prints one line per thread count:
//   zerorun_adamw threads=T n=N grad=fp32 copy=none median_ms=X mparams_per_s=Y
// Usage: zr_bench_optim [--n N] [--iters K] [--threads 1,2] [--mixed]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "zerorun/core/dtype.h"
#include "zerorun/core/rng.h"
#include "zerorun/core/thread_pool.h"
#include "zerorun/kernels/cpu/optim.h"

namespace {

// Large buffers: allocated once, huge pages advised, touched before timing.
template <typename T>
T* BigAlloc(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 2 << 20, n * sizeof(T)) != 0) std::abort();
  madvise(p, n * sizeof(T), MADV_HUGEPAGE);
  std::memset(p, 0, n * sizeof(T));
  return static_cast<T*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = int64_t{64} << 20;
  int iters = 10;
  std::string threads = "1,2";
  bool mixed = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--n" && i + 1 < argc) n = std::atoll(argv[++i]);
    else if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) threads = argv[++i];
    else if (a == "--mixed") mixed = true;
    else {
      std::fprintf(stderr, "usage: zr_bench_optim [--n N] [--iters K] [--threads 1,2] [--mixed]\n");
      return 2;
    }
  }
  float* p = BigAlloc<float>(static_cast<size_t>(n));
  float* m = BigAlloc<float>(static_cast<size_t>(n));
  float* v = BigAlloc<float>(static_cast<size_t>(n));
  float* g = BigAlloc<float>(static_cast<size_t>(n));
  uint16_t* g16 = mixed ? BigAlloc<uint16_t>(static_cast<size_t>(n)) : nullptr;
  uint16_t* copy = mixed ? BigAlloc<uint16_t>(static_cast<size_t>(n)) : nullptr;
  zerorun::FillNormal(p, static_cast<size_t>(n), 1, 0, 0, 0.0f, 0.02f);
  zerorun::FillNormal(g, static_cast<size_t>(n), 2, 0, 0, 0.0f, 1e-3f);
  if (mixed) zerorun::ConvertF32ToBF16(g, g16, static_cast<size_t>(n));

  zerorun::kernels::AdamHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.01f;
  zerorun::kernels::OptimSpan s;
  s.params = p;
  s.n = n;
  s.grads = mixed ? static_cast<const void*>(g16) : g;
  s.grad_dtype = mixed ? zerorun::DType::kBF16 : zerorun::DType::kF32;
  s.param_copy = copy;
  s.copy_dtype = zerorun::DType::kBF16;

  std::stringstream ss(threads);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    int t = std::atoi(tok.c_str());
    zerorun::ThreadPool pool(t);
    std::vector<double> ms;
    for (int it = 0; it < iters + 1; ++it) {
      h.step = it + 1;
      auto t0 = std::chrono::steady_clock::now();
      zerorun::kernels::cpu::AdamStep(h, s, m, v, &pool);
      auto t1 = std::chrono::steady_clock::now();
      if (it > 0) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());  // first: warm-up
    }
    std::sort(ms.begin(), ms.end());
    double med = ms[ms.size() / 2];
    std::printf("zerorun_adamw threads=%d n=%lld grad=%s copy=%s median_ms=%.2f mparams_per_s=%.1f\n", t,
                static_cast<long long>(n), mixed ? "bf16" : "fp32", mixed ? "bf16" : "none", med,
                static_cast<double>(n) / (med * 1e3));
  }
  return 0;
}

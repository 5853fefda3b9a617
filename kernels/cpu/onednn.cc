// oneDNN matmul primitives for the CPU GEMM (see onednn.h). One primitive per (shape, strides,
// dtypes, alpha, beta, bias) and thread, created on first use and kept: creation JIT-compiles a kernel
// (tens of microseconds to milliseconds), execution of a cached one costs a few microseconds.
#include "zerorun/kernels/cpu/onednn.h"

#if ZERORUN_HAVE_ONEDNN

#include <dlfcn.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "zerorun/core/error.h"

namespace zerorun::kernels::cpu {
namespace {

// Applies the ZERORUN_ISA cap to oneDNN once, before its first primitive (oneDNN refuses the cap
// after that). Read from the environment, not ActiveIsa(): a test's SetMaxIsa must not cap the
// process's GEMMs for good.
void ApplyIsaCap() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("ZERORUN_ISA");
    if (env == nullptr) return;
    if (std::strcmp(env, "scalar") == 0) dnnl_set_max_cpu_isa(dnnl_cpu_isa_sse41);
    if (std::strcmp(env, "avx2") == 0) dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2);
  });
}

// oneDNN's OpenMP runtime would start its own threads beside the core pool's; each calling thread
// sets its OpenMP thread count to 1 once (a per-thread setting). Looked up at run time: the OpenMP
// library is oneDNN's dependency, not zerorun's.
void OneOmpThreadHere() {
  thread_local bool done = false;
  if (done) return;
  done = true;
  using SetThreads = void (*)(int);
  static const SetThreads set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set != nullptr) set(1);
}

const dnnl::engine& Engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::data_type DnnlType(DType t) {
  switch (t) {
    case DType::kF32: return dnnl::memory::data_type::f32;
    case DType::kBF16: return dnnl::memory::data_type::bf16;
    case DType::kF16: return dnnl::memory::data_type::f16;
    default: return dnnl::memory::data_type::undef;
  }
}

using Key = std::array<int64_t, 14>;
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct Entry {
  bool ok = false;
  dnnl::matmul prim;
  dnnl::memory a, b, c, bias;
};

int64_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

Entry Create(const GemmParams& p, bool has_bias) {
  using dims = dnnl::memory::dims;
  Entry e;
  if (OnednnDefersTransposedA(p)) return e;  // OpenBLAS's sgemm takes it (the caller's widened path)
  const dnnl::engine& eng = Engine();
  dnnl::memory::desc a_md(dims{p.m, p.k}, DnnlType(p.a_type), p.trans_a == Trans::kN ? dims{p.lda, 1} : dims{1, p.lda});
  dnnl::memory::desc b_md(dims{p.k, p.n}, DnnlType(p.b_type), p.trans_b == Trans::kN ? dims{p.ldb, 1} : dims{1, p.ldb});
  dnnl::memory::desc c_md(dims{p.m, p.n}, DnnlType(p.c_type), dims{p.ldc, 1});
  dnnl::memory::desc bias_md = has_bias ? dnnl::memory::desc(dims{1, p.n}, dnnl::memory::data_type::f32, dims{p.n, 1})
                                        : dnnl::memory::desc();
  dnnl::primitive_attr attr;
  if (p.alpha != 1.0f) attr.set_output_scales(0, {p.alpha});
  if (p.beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(p.beta);
    attr.set_post_ops(po);
  }
  try {
    dnnl::matmul::desc d(a_md, b_md, bias_md, c_md);
    dnnl::matmul::primitive_desc pd(d, attr, eng);
    // oneDNN's reference implementations are plain loops: widening to fp32 is much faster.
    if (std::strncmp(pd.impl_info_str(), "ref", 3) == 0) return e;
    e.prim = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    return e;  // no implementation for these dtypes on this CPU
  }
  e.a = dnnl::memory(a_md, eng, DNNL_MEMORY_NONE);
  e.b = dnnl::memory(b_md, eng, DNNL_MEMORY_NONE);
  e.c = dnnl::memory(c_md, eng, DNNL_MEMORY_NONE);
  if (has_bias) e.bias = dnnl::memory(bias_md, eng, DNNL_MEMORY_NONE);
  e.ok = true;
  return e;
}

}  // namespace

bool OnednnBuilt() { return true; }

std::string OnednnIsa() {
  ApplyIsaCap();
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
  }
}

bool OnednnNative16(DType t) {
  ApplyIsaCap();
  const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const auto has = [isa](dnnl_cpu_isa_t want) { return (isa & want) == static_cast<unsigned>(want); };
  // oneDNN 2.6 knows no AVX512-FP16 level and its AMX is bf16/int8: fp16 is never native there.
  if (t == DType::kBF16) return has(dnnl_cpu_isa_avx512_core_bf16) || has(dnnl_cpu_isa_avx512_core_amx);
  return false;
}

bool OnednnAvx512() {
  ApplyIsaCap();
  const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  return (isa & static_cast<unsigned>(dnnl_cpu_isa_avx512_core)) == static_cast<unsigned>(dnnl_cpu_isa_avx512_core);
}

// Measured (bench/kernels, zr_bench_kernels --only gemm, AMD EPYC AVX2, 1 thread): oneDNN 2.6's AVX2
// matmul multiplies fp32 with A transposed -- the weight gradients dW = dy^T x -- at 0.45 (fc 256->1024),
// 0.51 (1024->256) and 0.81 (qkv) of OpenBLAS's sgemm, every other GPT shape within 0.93-1.00 of it.
bool OnednnDefersTransposedA(const GemmParams& p) {
  return p.trans_a == Trans::kT && p.a_type == DType::kF32 && p.b_type == DType::kF32 && !OnednnAvx512();
}

bool OnednnGemm(const GemmParams& p, const float* bias32) {
  if (p.m <= 0 || p.n <= 0) return true;  // nothing to write (oneDNN's kernels divide by these)
  if (p.k <= 0) return false;             // C = beta C + bias: the caller's widened path does it
  ApplyIsaCap();
  OneOmpThreadHere();
  if (bias32 != nullptr && p.alpha != 1.0f) return false;  // oneDNN scales the bias with alpha
  const bool has_bias = bias32 != nullptr;
  const Key key{static_cast<int64_t>(p.trans_a), static_cast<int64_t>(p.trans_b), static_cast<int64_t>(p.a_type),
                static_cast<int64_t>(p.b_type), static_cast<int64_t>(p.c_type), has_bias, p.m, p.n, p.k, p.lda,
                p.ldb, p.ldc, FloatBits(p.alpha), FloatBits(p.beta)};
  thread_local std::unordered_map<Key, Entry, KeyHash> cache;
  thread_local dnnl::stream stream(Engine());
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= 4096) cache.clear();  // a bound for programs that sweep shapes
    it = cache.emplace(key, Create(p, has_bias)).first;
  }
  Entry& e = it->second;
  if (!e.ok) return false;
  e.a.set_data_handle(const_cast<void*>(p.a));
  e.b.set_data_handle(const_cast<void*>(p.b));
  e.c.set_data_handle(p.c);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}};
  if (has_bias) {
    e.bias.set_data_handle(const_cast<float*>(bias32));
    args.emplace(DNNL_ARG_BIAS, e.bias);
  }
  try {
    e.prim.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& err) {
    ZR_THROW(Error, "Gemm: oneDNN matmul ({} x {} x {}) failed: {}", p.m, p.n, p.k, err.what());
  }
  return true;
}

}  // namespace zerorun::kernels::cpu

#else  // built without oneDNN

namespace zerorun::kernels::cpu {

bool OnednnBuilt() { return false; }
std::string OnednnIsa() { return ""; }
bool OnednnNative16(DType) { return false; }
bool OnednnGemm(const GemmParams&, const float*) { return false; }
bool OnednnAvx512() { return false; }
bool OnednnDefersTransposedA(const GemmParams&) { return false; }

}  // namespace zerorun::kernels::cpu

#endif

// The public kernel entries: validate once (InvalidArgument naming the op and the argument), then run
// the active backend's table. Backends assume valid arguments.
#include "zerorun/kernels/ops.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>
#include <string>

#include "zerorun/core/error.h"
#include "zerorun/kernels/kernel_table.h"

namespace zerorun::kernels {
namespace {

constexpr int kUnset = -1;
std::atomic<int> g_backend{kUnset};

Backend BackendFromEnv() {
  const char* env = std::getenv("ZERORUN_KERNELS");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "cpu") == 0) return Backend::kCpu;
  if (std::strcmp(env, "ref") == 0) return Backend::kRef;
  ZR_THROW(ConfigError, "ZERORUN_KERNELS='{}' is not a kernel backend (expected 'cpu' or 'ref')", env);
}

void CheckFloat16or32(const char* op, const char* arg, DType t) {
  if (t != DType::kF32 && t != DType::kF16 && t != DType::kBF16) {
    ZR_THROW(InvalidArgument, "{}: {} has dtype {}; expected fp32, fp16 or bf16", op, arg, DTypeName(t));
  }
}

void CheckFloating(const char* op, const char* arg, DType t) {
  if (!IsFloating(t)) {
    ZR_THROW(InvalidArgument, "{}: {} has dtype {}; expected a floating dtype", op, arg, DTypeName(t));
  }
}

void CheckNonNegative(const char* op, const char* arg, int64_t v) {
  if (v < 0) ZR_THROW(InvalidArgument, "{}: {} = {} is negative", op, arg, v);
}

void CheckPtr(const char* op, const char* arg, const void* p, bool needed) {
  if (needed && p == nullptr) ZR_THROW(InvalidArgument, "{}: {} is null", op, arg);
}

// Host-side range check. Device tokens are not readable here: the device table checks them in its
// kernels and throws the same message.
void CheckTokens(const char* op, const char* arg, const int32_t* tokens, int64_t n, int64_t V, bool allow_ignore,
                 int32_t ignore_index) {
  if (!KernelDevice().is_cpu()) return;
  for (int64_t i = 0; i < n; ++i) {
    int32_t t = tokens[i];
    if (allow_ignore && t == ignore_index) continue;
    if (t < 0 || t >= V) ZR_THROW(InvalidArgument, "{}: {}[{}] = {} is outside [0, {})", op, arg, i, t, V);
  }
}

}  // namespace

Backend ActiveBackend() {
  int b = g_backend.load(std::memory_order_acquire);
  if (b == kUnset) {
    Backend from_env = BackendFromEnv();
    int expected = kUnset;
    g_backend.compare_exchange_strong(expected, static_cast<int>(from_env), std::memory_order_acq_rel);
    b = g_backend.load(std::memory_order_acquire);
  }
  return static_cast<Backend>(b);
}

void SetKernelBackend(Backend backend) { g_backend.store(static_cast<int>(backend), std::memory_order_release); }

const char* BackendName(Backend backend) { return backend == Backend::kRef ? "ref" : "cpu"; }

// ---- devices -------------------------------------------------------------------------------------

namespace {
thread_local Device t_device = Device::CPU();
thread_local Stream* t_stream = nullptr;

std::atomic<const KernelTable*>& DeviceTableSlot(DeviceType type) {
  static std::atomic<const KernelTable*> slots[2] = {nullptr, nullptr};  // one per DeviceType
  return slots[static_cast<size_t>(type)];
}
}  // namespace

KernelDeviceScope::KernelDeviceScope(Device device, Stream* stream)
    : previous_device_(t_device), previous_stream_(t_stream) {
  if (stream != nullptr && !(stream->device() == device)) {
    ZR_THROW(InvalidArgument, "KernelDeviceScope: the stream belongs to {}, not to {}", stream->device().ToString(),
             device.ToString());
  }
  t_device = device;
  t_stream = stream;
}

KernelDeviceScope::~KernelDeviceScope() {
  t_device = previous_device_;
  t_stream = previous_stream_;
}

Device KernelDevice() { return t_device; }
Stream* KernelStream() { return t_stream; }

void RegisterKernelTable(DeviceType type, const KernelTable* table) {
  if (type != DeviceType::kCPU) DeviceTableSlot(type).store(table, std::memory_order_release);
}

bool HasKernelTable(DeviceType type) {
  return type == DeviceType::kCPU || DeviceTableSlot(type).load(std::memory_order_acquire) != nullptr;
}

const KernelTable& KernelTableFor(Device device) {
  if (device.is_cpu()) return ActiveBackend() == Backend::kRef ? RefKernelTable() : CpuKernelTable();
  const KernelTable* t = DeviceTableSlot(device.type).load(std::memory_order_acquire);
  if (t == nullptr) {
    ZR_THROW(InvalidArgument, "kernels: no kernel table for {}: zerorun was built without CUDA (reconfigure "
             "with -DZERORUN_CUDA=ON on a machine with the CUDA toolkit)", device.ToString());
  }
  return *t;
}

const KernelTable& ActiveKernelTable() { return KernelTableFor(t_device); }

// ---- GEMM ----------------------------------------------------------------------------------------

void Gemm(const GemmParams& p) {
  const char* op = "Gemm";
  CheckNonNegative(op, "m", p.m);
  CheckNonNegative(op, "n", p.n);
  CheckNonNegative(op, "k", p.k);
  CheckNonNegative(op, "batch", p.batch);
  CheckFloat16or32(op, "a_type", p.a_type);
  CheckFloat16or32(op, "b_type", p.b_type);
  CheckFloat16or32(op, "c_type", p.c_type);
  if (p.bias != nullptr) CheckFloat16or32(op, "bias_type", p.bias_type);
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  int64_t a_cols = p.trans_a == Trans::kN ? p.k : p.m;
  int64_t b_cols = p.trans_b == Trans::kN ? p.n : p.k;
  if (p.lda < std::max<int64_t>(1, a_cols)) ZR_THROW(InvalidArgument, "Gemm: lda = {} < {}", p.lda, a_cols);
  if (p.ldb < std::max<int64_t>(1, b_cols)) ZR_THROW(InvalidArgument, "Gemm: ldb = {} < {}", p.ldb, b_cols);
  if (p.ldc < p.n) ZR_THROW(InvalidArgument, "Gemm: ldc = {} < n = {}", p.ldc, p.n);
  // The CPU backend hands these to BLAS's 32-bit integer interface.
  for (auto [name, v] : {std::pair{"m", p.m}, std::pair{"n", p.n}, std::pair{"k", p.k}, std::pair{"lda", p.lda},
                         std::pair{"ldb", p.ldb}, std::pair{"ldc", p.ldc}}) {
    if (v > std::numeric_limits<int32_t>::max()) {
      ZR_THROW(InvalidArgument, "Gemm: {} = {} exceeds the 32-bit BLAS limit", name, v);
    }
  }
  CheckPtr(op, "c", p.c, true);
  CheckPtr(op, "a", p.a, p.k > 0);
  CheckPtr(op, "b", p.b, p.k > 0);
  ActiveKernelTable().gemm(p);
}

void Gemm(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, DType a_type,
          int64_t lda, const void* b, DType b_type, int64_t ldb, float beta, void* c, DType c_type, int64_t ldc) {
  GemmParams p;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.m = m;
  p.n = n;
  p.k = k;
  p.alpha = alpha;
  p.beta = beta;
  p.a = a;
  p.a_type = a_type;
  p.lda = lda;
  p.b = b;
  p.b_type = b_type;
  p.ldb = ldb;
  p.c = c;
  p.c_type = c_type;
  p.ldc = ldc;
  Gemm(p);
}

// ---- bias -----------------------------------------------------------------------------------------

void BiasAdd(void* out, DType out_type, const void* bias, DType bias_type, int64_t N, int64_t C) {
  const char* op = "BiasAdd";
  CheckNonNegative(op, "N", N);
  CheckNonNegative(op, "C", C);
  CheckFloat16or32(op, "out_type", out_type);
  CheckFloat16or32(op, "bias_type", bias_type);
  if (N == 0 || C == 0) return;
  CheckPtr(op, "out", out, true);
  CheckPtr(op, "bias", bias, true);
  ActiveKernelTable().bias_add(out, out_type, bias, bias_type, N, C);
}

void BiasBackward(void* dbias, DType dbias_type, const void* dout, DType dout_type, int64_t N, int64_t C) {
  const char* op = "BiasBackward";
  CheckNonNegative(op, "N", N);
  CheckNonNegative(op, "C", C);
  CheckFloat16or32(op, "dbias_type", dbias_type);
  CheckFloat16or32(op, "dout_type", dout_type);
  if (N == 0 || C == 0) return;
  CheckPtr(op, "dbias", dbias, true);
  CheckPtr(op, "dout", dout, true);
  ActiveKernelTable().bias_backward(dbias, dbias_type, dout, dout_type, N, C);
}

// ---- embedding -------------------------------------------------------------------------------------

void EmbeddingForward(void* out, DType out_type, const int32_t* tokens, const void* wte, const void* wpe,
                      DType param_type, int64_t B, int64_t T, int64_t C, int64_t V) {
  const char* op = "EmbeddingForward";
  CheckNonNegative(op, "B", B);
  CheckNonNegative(op, "T", T);
  CheckNonNegative(op, "C", C);
  CheckNonNegative(op, "V", V);
  CheckFloat16or32(op, "out_type", out_type);
  CheckFloat16or32(op, "param_type", param_type);
  if (B * T == 0) return;
  CheckPtr(op, "tokens", tokens, true);
  CheckTokens(op, "tokens", tokens, B * T, V, false, 0);
  if (C == 0) return;
  CheckPtr(op, "out", out, true);
  CheckPtr(op, "wte", wte, true);
  ActiveKernelTable().embedding_forward(out, out_type, tokens, wte, wpe, param_type, B, T, C, V);
}

void EmbeddingBackward(void* dwte, void* dwpe, DType grad_type, const void* dout, DType dout_type,
                       const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t V) {
  const char* op = "EmbeddingBackward";
  CheckNonNegative(op, "B", B);
  CheckNonNegative(op, "T", T);
  CheckNonNegative(op, "C", C);
  CheckNonNegative(op, "V", V);
  CheckFloat16or32(op, "grad_type", grad_type);
  CheckFloat16or32(op, "dout_type", dout_type);
  if (B * T == 0 || C == 0 || (dwte == nullptr && dwpe == nullptr)) return;
  CheckPtr(op, "dout", dout, true);
  CheckPtr(op, "tokens", tokens, dwte != nullptr);
  if (dwte != nullptr) CheckTokens(op, "tokens", tokens, B * T, V, false, 0);
  ActiveKernelTable().embedding_backward(dwte, dwpe, grad_type, dout, dout_type, tokens, B, T, C, V);
}

// ---- normalisation ---------------------------------------------------------------------------------

void LayerNormForward(void* out, float* mean, float* rstd, const void* x, const void* weight, const void* bias,
                      int64_t N, int64_t C, float eps, DType act_type, DType param_type) {
  const char* op = "LayerNormForward";
  CheckNonNegative(op, "N", N);
  CheckNonNegative(op, "C", C);
  CheckFloat16or32(op, "act_type", act_type);
  CheckFloat16or32(op, "param_type", param_type);
  if (N == 0) return;
  if (C == 0) ZR_THROW(InvalidArgument, "{}: C = 0 (normalising an empty row)", op);
  CheckPtr(op, "out", out, true);
  CheckPtr(op, "mean", mean, true);
  CheckPtr(op, "rstd", rstd, true);
  CheckPtr(op, "x", x, true);
  ActiveKernelTable().layernorm_forward(out, mean, rstd, x, weight, bias, N, C, eps, act_type, param_type);
}

void LayerNormBackward(void* dx, void* dweight, void* dbias, const void* dout, const void* x, const void* weight,
                       const float* mean, const float* rstd, int64_t N, int64_t C, DType act_type,
                       DType param_type, DType grad_type) {
  const char* op = "LayerNormBackward";
  CheckNonNegative(op, "N", N);
  CheckNonNegative(op, "C", C);
  CheckFloat16or32(op, "act_type", act_type);
  CheckFloat16or32(op, "param_type", param_type);
  CheckFloat16or32(op, "grad_type", grad_type);
  if (N == 0 || C == 0) return;
  CheckPtr(op, "dout", dout, true);
  CheckPtr(op, "x", x, true);
  CheckPtr(op, "mean", mean, true);
  CheckPtr(op, "rstd", rstd, true);
  ActiveKernelTable().layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, N, C, act_type,
                                         param_type, grad_type);
}

void RMSNormForward(void* out, float* rstd, const void* x, const void* weight, int64_t N, int64_t C, float eps,
                    DType act_type, DType param_type) {
  const char* op = "RMSNormForward";
  CheckNonNegative(op, "N", N);
  CheckNonNegative(op, "C", C);
  CheckFloat16or32(op, "act_type", act_type);
  CheckFloat16or32(op, "param_type", param_type);
  if (N == 0) return;
  if (C == 0) ZR_THROW(InvalidArgument, "{}: C = 0 (normalising an empty row)", op);
  CheckPtr(op, "out", out, true);
  CheckPtr(op, "rstd", rstd, true);
  CheckPtr(op, "x", x, true);
  ActiveKernelTable().rmsnorm_forward(out, rstd, x, weight, N, C, eps, act_type, param_type);
}

void RMSNormBackward(void* dx, void* dweight, const void* dout, const void* x, const void* weight, const float* rstd,
                     int64_t N, int64_t C, DType act_type, DType param_type, DType grad_type) {
  const char* op = "RMSNormBackward";
  CheckNonNegative(op, "N", N);
  CheckNonNegative(op, "C", C);
  CheckFloat16or32(op, "act_type", act_type);
  CheckFloat16or32(op, "param_type", param_type);
  CheckFloat16or32(op, "grad_type", grad_type);
  if (N == 0 || C == 0) return;
  CheckPtr(op, "dout", dout, true);
  CheckPtr(op, "x", x, true);
  CheckPtr(op, "rstd", rstd, true);
  ActiveKernelTable().rmsnorm_backward(dx, dweight, dout, x, weight, rstd, N, C, act_type, param_type, grad_type);
}

// ---- activations -----------------------------------------------------------------------------------

namespace {
bool CheckUnary(const char* op, int64_t n, DType type, std::initializer_list<std::pair<const char*, const void*>> ptrs) {
  CheckNonNegative(op, "n", n);
  CheckFloat16or32(op, "type", type);
  if (n == 0) return false;
  for (auto [name, p] : ptrs) CheckPtr(op, name, p, true);
  return true;
}
}  // namespace

void GeluForward(void* out, const void* x, int64_t n, DType type, GeluApprox approx) {
  if (CheckUnary("GeluForward", n, type, {{"out", out}, {"x", x}})) {
    ActiveKernelTable().gelu_forward(out, x, n, type, approx);
  }
}

void GeluBackward(void* dx, const void* dout, const void* x, int64_t n, DType type, GeluApprox approx) {
  if (CheckUnary("GeluBackward", n, type, {{"dx", dx}, {"dout", dout}, {"x", x}})) {
    ActiveKernelTable().gelu_backward(dx, dout, x, n, type, approx);
  }
}

void SiluForward(void* out, const void* x, int64_t n, DType type) {
  if (CheckUnary("SiluForward", n, type, {{"out", out}, {"x", x}})) ActiveKernelTable().silu_forward(out, x, n, type);
}

void SiluBackward(void* dx, const void* dout, const void* x, int64_t n, DType type) {
  if (CheckUnary("SiluBackward", n, type, {{"dx", dx}, {"dout", dout}, {"x", x}})) {
    ActiveKernelTable().silu_backward(dx, dout, x, n, type);
  }
}

void SwiGluForward(void* out, const void* in, int64_t N, int64_t H, DType type) {
  CheckNonNegative("SwiGluForward", "N", N);
  CheckNonNegative("SwiGluForward", "H", H);
  if (CheckUnary("SwiGluForward", N * H, type, {{"out", out}, {"in", in}})) {
    ActiveKernelTable().swiglu_forward(out, in, N, H, type);
  }
}

void SwiGluBackward(void* din, const void* dout, const void* in, int64_t N, int64_t H, DType type) {
  CheckNonNegative("SwiGluBackward", "N", N);
  CheckNonNegative("SwiGluBackward", "H", H);
  if (CheckUnary("SwiGluBackward", N * H, type, {{"din", din}, {"dout", dout}, {"in", in}})) {
    if (din == in) ZR_THROW(InvalidArgument, "SwiGluBackward: din must not alias in");
    ActiveKernelTable().swiglu_backward(din, dout, in, N, H, type);
  }
}

// ---- elementwise ---------------------------------------------------------------------------------------

void Add(void* out, const void* a, const void* b, int64_t n, DType type) {
  if (CheckUnary("Add", n, type, {{"out", out}, {"a", a}, {"b", b}})) ActiveKernelTable().add(out, a, b, n, type);
}

void Axpy(void* y, DType y_type, const void* x, DType x_type, float alpha, int64_t n) {
  CheckFloat16or32("Axpy", "x_type", x_type);
  if (CheckUnary("Axpy", n, y_type, {{"y", y}, {"x", x}})) ActiveKernelTable().axpy(y, y_type, x, x_type, alpha, n);
}

void Scale(void* out, const void* x, float alpha, int64_t n, DType type) {
  if (CheckUnary("Scale", n, type, {{"out", out}, {"x", x}})) ActiveKernelTable().scale(out, x, alpha, n, type);
}

void Fill(void* out, float value, int64_t n, DType type) {
  if (CheckUnary("Fill", n, type, {{"out", out}})) ActiveKernelTable().fill(out, value, n, type);
}

void Copy(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  const char* op = "Copy";
  CheckNonNegative(op, "n", n);
  CheckFloating(op, "dst_type", dst_type);
  CheckFloating(op, "src_type", src_type);
  if (n == 0) return;
  CheckPtr(op, "dst", dst, true);
  CheckPtr(op, "src", src, true);
  if (dst == src && dst_type == src_type) return;
  if (dst == src) ZR_THROW(InvalidArgument, "Copy: in-place {} -> {} is not supported", DTypeName(src_type),
                           DTypeName(dst_type));
  ActiveKernelTable().copy(dst, dst_type, src, src_type, n);
}

// ---- dropout ----------------------------------------------------------------------------------------

namespace {
void CheckDropoutP(const char* op, float p) {
  if (!(p >= 0.0f && p < 1.0f)) ZR_THROW(InvalidArgument, "{}: p = {} is outside [0, 1)", op, p);
}
}  // namespace

void DropoutForward(void* out, const void* x, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                    uint64_t offset) {
  CheckDropoutP("DropoutForward", p);
  if (CheckUnary("DropoutForward", n, type, {{"out", out}, {"x", x}})) {
    ActiveKernelTable().dropout_forward(out, x, n, type, p, seed, stream, offset);
  }
}

void DropoutBackward(void* dx, const void* dout, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                     uint64_t offset) {
  CheckDropoutP("DropoutBackward", p);
  if (CheckUnary("DropoutBackward", n, type, {{"dx", dx}, {"dout", dout}})) {
    ActiveKernelTable().dropout_backward(dx, dout, n, type, p, seed, stream, offset);
  }
}

// ---- softmax -----------------------------------------------------------------------------------------

void SoftmaxForward(void* out, const void* x, int64_t N, int64_t C, DType type) {
  CheckNonNegative("SoftmaxForward", "N", N);
  CheckNonNegative("SoftmaxForward", "C", C);
  if (CheckUnary("SoftmaxForward", N * C, type, {{"out", out}, {"x", x}})) {
    ActiveKernelTable().softmax_forward(out, x, N, C, type);
  }
}

void SoftmaxBackward(void* dx, const void* dout, const void* y, int64_t N, int64_t C, DType type) {
  CheckNonNegative("SoftmaxBackward", "N", N);
  CheckNonNegative("SoftmaxBackward", "C", C);
  if (CheckUnary("SoftmaxBackward", N * C, type, {{"dx", dx}, {"dout", dout}, {"y", y}})) {
    ActiveKernelTable().softmax_backward(dx, dout, y, N, C, type);
  }
}

// ---- attention ---------------------------------------------------------------------------------------

namespace {
bool CheckAttention(const char* op, int64_t B, int64_t T, int64_t C, int64_t NH, DType type) {
  CheckNonNegative(op, "B", B);
  CheckNonNegative(op, "T", T);
  CheckNonNegative(op, "C", C);
  CheckFloat16or32(op, "type", type);
  if (NH <= 0) ZR_THROW(InvalidArgument, "{}: NH = {} must be positive", op, NH);
  if (C % NH != 0) ZR_THROW(InvalidArgument, "{}: C = {} is not divisible by NH = {}", op, C, NH);
  return B * T * C > 0;
}
}  // namespace

void AttentionForward(void* out, float* att, const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                      DType type) {
  const char* op = "AttentionForward";
  if (!CheckAttention(op, B, T, C, NH, type)) return;
  CheckPtr(op, "out", out, true);
  CheckPtr(op, "att", att, true);
  CheckPtr(op, "qkv", qkv, true);
  ActiveKernelTable().attention_forward(out, att, qkv, B, T, C, NH, type);
}

void AttentionBackward(void* dqkv, const void* dout, const void* qkv, const float* att, int64_t B, int64_t T,
                       int64_t C, int64_t NH, DType type) {
  const char* op = "AttentionBackward";
  if (!CheckAttention(op, B, T, C, NH, type)) return;
  CheckPtr(op, "dqkv", dqkv, true);
  CheckPtr(op, "dout", dout, true);
  CheckPtr(op, "qkv", qkv, true);
  CheckPtr(op, "att", att, true);
  ActiveKernelTable().attention_backward(dqkv, dout, qkv, att, B, T, C, NH, type);
}

// ---- cross-entropy --------------------------------------------------------------------------------

CrossEntropyResult CrossEntropy(void* dlogits, float* losses, const void* logits, const int32_t* targets, int64_t N,
                                int64_t V, DType type, int32_t ignore_index, float grad_scale) {
  const char* op = "CrossEntropy";
  CheckNonNegative(op, "N", N);
  CheckNonNegative(op, "V", V);
  CheckFloat16or32(op, "type", type);
  if (N == 0) return {};
  if (V == 0) ZR_THROW(InvalidArgument, "{}: V = 0 (no classes)", op);
  CheckPtr(op, "logits", logits, true);
  CheckPtr(op, "targets", targets, true);
  CheckTokens(op, "targets", targets, N, V, true, ignore_index);
  return ActiveKernelTable().cross_entropy(dlogits, losses, logits, targets, N, V, type, ignore_index, grad_scale);
}

// ---- reductions ------------------------------------------------------------------------------------

double SumSquares(const void* x, int64_t n, DType type) {
  CheckNonNegative("SumSquares", "n", n);
  CheckFloating("SumSquares", "type", type);
  if (n == 0) return 0.0;
  CheckPtr("SumSquares", "x", x, true);
  return ActiveKernelTable().sum_squares(x, n, type);
}

bool AllFinite(const void* x, int64_t n, DType type) {
  CheckNonNegative("AllFinite", "n", n);
  CheckFloating("AllFinite", "type", type);
  if (n == 0) return true;
  CheckPtr("AllFinite", "x", x, true);
  return ActiveKernelTable().all_finite(x, n, type);
}

}  // namespace zerorun::kernels

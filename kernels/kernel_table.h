// The table of kernel implementations behind kernels/ops.h. Each backend (ref/, cpu/, cuda/)
// fills one KernelTable with functions of exactly these signatures; the public entries in ops.cc
// validate arguments once and call the active table. Implementations may assume valid arguments
// (non-negative sizes, supported dtypes, non-null pointers where the contract requires them).
// Tests call RefKernelTable() and CpuKernelTable() directly to compare them.
#pragma once

#include "zerorun/kernels/ops.h"

namespace zerorun::kernels {

struct KernelTable {
  const char* name = "";
  void (*gemm)(const GemmParams& p) = nullptr;
  void (*bias_add)(void* out, DType out_type, const void* bias, DType bias_type, int64_t N, int64_t C) = nullptr;
  void (*bias_backward)(void* dbias, DType dbias_type, const void* dout, DType dout_type, int64_t N,
                        int64_t C) = nullptr;
  void (*embedding_forward)(void* out, DType out_type, const int32_t* tokens, const void* wte, const void* wpe,
                            DType param_type, int64_t B, int64_t T, int64_t C, int64_t V) = nullptr;
  void (*embedding_backward)(void* dwte, void* dwpe, DType grad_type, const void* dout, DType dout_type,
                             const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t V) = nullptr;
  void (*layernorm_forward)(void* out, float* mean, float* rstd, const void* x, const void* weight,
                            const void* bias, int64_t N, int64_t C, float eps, DType act_type,
                            DType param_type) = nullptr;
  void (*layernorm_backward)(void* dx, void* dweight, void* dbias, const void* dout, const void* x,
                             const void* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                             DType act_type, DType param_type, DType grad_type) = nullptr;
  void (*rmsnorm_forward)(void* out, float* rstd, const void* x, const void* weight, int64_t N, int64_t C,
                          float eps, DType act_type, DType param_type) = nullptr;
  void (*rmsnorm_backward)(void* dx, void* dweight, const void* dout, const void* x, const void* weight,
                           const float* rstd, int64_t N, int64_t C, DType act_type, DType param_type,
                           DType grad_type) = nullptr;
  void (*gelu_forward)(void* out, const void* x, int64_t n, DType type, GeluApprox approx) = nullptr;
  void (*gelu_backward)(void* dx, const void* dout, const void* x, int64_t n, DType type,
                        GeluApprox approx) = nullptr;
  void (*silu_forward)(void* out, const void* x, int64_t n, DType type) = nullptr;
  void (*silu_backward)(void* dx, const void* dout, const void* x, int64_t n, DType type) = nullptr;
  void (*swiglu_forward)(void* out, const void* in, int64_t N, int64_t H, DType type) = nullptr;
  void (*swiglu_backward)(void* din, const void* dout, const void* in, int64_t N, int64_t H, DType type) = nullptr;
  void (*add)(void* out, const void* a, const void* b, int64_t n, DType type) = nullptr;
  void (*axpy)(void* y, DType y_type, const void* x, DType x_type, float alpha, int64_t n) = nullptr;
  void (*scale)(void* out, const void* x, float alpha, int64_t n, DType type) = nullptr;
  void (*fill)(void* out, float value, int64_t n, DType type) = nullptr;
  void (*copy)(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) = nullptr;
  void (*dropout_forward)(void* out, const void* x, int64_t n, DType type, float p, uint64_t seed, uint64_t stream,
                          uint64_t offset) = nullptr;
  void (*dropout_backward)(void* dx, const void* dout, int64_t n, DType type, float p, uint64_t seed,
                           uint64_t stream, uint64_t offset) = nullptr;
  void (*softmax_forward)(void* out, const void* x, int64_t N, int64_t C, DType type) = nullptr;
  void (*softmax_backward)(void* dx, const void* dout, const void* y, int64_t N, int64_t C, DType type) = nullptr;
  void (*attention_forward)(void* out, float* att, const void* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                            DType type) = nullptr;
  void (*attention_backward)(void* dqkv, const void* dout, const void* qkv, const float* att, int64_t B,
                             int64_t T, int64_t C, int64_t NH, DType type) = nullptr;
  CrossEntropyResult (*cross_entropy)(void* dlogits, float* losses, const void* logits, const int32_t* targets,
                                      int64_t N, int64_t V, DType type, int32_t ignore_index,
                                      float grad_scale) = nullptr;
  double (*sum_squares)(const void* x, int64_t n, DType type) = nullptr;
  bool (*all_finite)(const void* x, int64_t n, DType type) = nullptr;
};

// Plain loops with double accumulation: the oracle.
const KernelTable& RefKernelTable();
// SIMD (runtime ISA choice) and multithreaded through ThreadPool::Default().
const KernelTable& CpuKernelTable();
// The table the public entries run on this thread: ActiveBackend()'s for the CPU device, the
// registered table of the KernelDevice()'s type otherwise (InvalidArgument when there is none).
const KernelTable& ActiveKernelTable();

// Device twins register their table at load time (kernels/cuda/table.cc registers "cuda" in CUDA
// builds), as device backends do in core/device.h. HasKernelTable(kCPU) is always true.
void RegisterKernelTable(DeviceType type, const KernelTable* table);
bool HasKernelTable(DeviceType type);
// The table for `device`: ActiveBackend()'s for the CPU; throws InvalidArgument naming the device when
// no table is registered for its type.
const KernelTable& KernelTableFor(Device device);

}  // namespace zerorun::kernels

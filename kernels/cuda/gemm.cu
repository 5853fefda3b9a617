// CUDA GEMM through cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx, fp32 compute: bf16 and fp16
// run on tensor cores with fp32 accumulation; fp32 runs in full fp32, TF32 only when
// ZERORUN_CUDA_TF32=1), plus bias add and the bias gradient. What is converted, pre-filled or finished
// by an epilogue is decided by plan.h (PlanGemm, ExecuteGemmPlan: unit-tested on the CPU); this file
// only provides the device steps. One cuBLAS handle per (thread, device), kept in a pool when the
// thread ends, set to the calling thread's kernel stream for each call.
#include <cublas_v2.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "zerorun/kernels/cuda/column_sums.cuh"
#include "zerorun/kernels/cuda/common.cuh"
#include "zerorun/kernels/cuda/cuda.h"

#define ZR_CUBLAS_CHECK(call)                                                                          \
  do {                                                                                                 \
    cublasStatus_t zr_st_ = (call);                                                                    \
    if (zr_st_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      ZR_THROW(Error, "cuBLAS error at {}:{}: {} failed: {}", __FILE__, __LINE__, #call,               \
               cublasGetStatusString(zr_st_));                                                         \
    }                                                                                                  \
  } while (0)

namespace zerorun::kernels::cuda {
namespace {

// ---- handles -----------------------------------------------------------------------------------------

class HandlePool {
 public:
  cublasHandle_t Take(int device) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& free = free_[device];
      if (!free.empty()) {
        cublasHandle_t h = free.back();
        free.pop_back();
        return h;
      }
    }
    cublasHandle_t h = nullptr;
    ZR_CUBLAS_CHECK(cublasCreate(&h));  // on the current device (CurrentCtx set it)
    return h;
  }
  void Give(int device, cublasHandle_t h) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[device].push_back(h);
  }

 private:
  std::mutex mu_;
  std::map<int, std::vector<cublasHandle_t>> free_;
};

HandlePool& Pool() {
  static HandlePool* pool = new HandlePool();  // lives until exit: handles outlive thread-locals
  return *pool;
}

struct ThreadHandles {
  std::map<int, cublasHandle_t> by_device;
  ~ThreadHandles() {
    for (auto& [device, h] : by_device) Pool().Give(device, h);
  }
};

bool AllowTf32() {
  static const bool allow = [] {
    const char* v = std::getenv("ZERORUN_CUDA_TF32");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return false;
    if (std::strcmp(v, "1") == 0) return true;
    ZR_THROW(ConfigError, "ZERORUN_CUDA_TF32='{}' must be 0 or 1", v);
  }();
  return allow;
}

cublasHandle_t Handle(const Ctx& ctx) {
  thread_local ThreadHandles handles;
  cublasHandle_t& h = handles.by_device[ctx.device];
  if (h == nullptr) h = Pool().Take(ctx.device);
  ZR_CUBLAS_CHECK(cublasSetStream(h, ctx.stream));
  return h;
}

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: ZR_THROW(InvalidArgument, "Gemm (cuda): dtype {} is not fp32, fp16 or bf16", DTypeName(t));
  }
}

// ---- the device steps of ExecuteGemmPlan -------------------------------------------------------------

__global__ void ConvertKernel(const void* src, DType st, void* dst, DType dt, int64_t n) {
  ZR_GRID_STRIDE(i, n) StoreAny(dst, dt, i, LoadAny(src, st, i));
}

__global__ void FillBiasRowsKernel(void* c, DType ct, int64_t ldc, int64_t stride_c, int64_t m, int64_t n,
                                   int64_t total, const void* bias, DType bt) {
  ZR_GRID_STRIDE(i, total) {
    const int64_t b = i / (m * n), r = (i / n) % m, j = i % n;
    StoreAny(c, ct, b * stride_c + r * ldc + j, LoadAny(bias, bt, j));
  }
}

__global__ void EpilogueKernel(const float* w, void* c, DType ct, int64_t ldc, int64_t stride_c, int64_t m,
                               int64_t n, int64_t total, float w_scale, const void* bias, DType bt) {
  ZR_GRID_STRIDE(i, total) {
    const int64_t b = i / (m * n), r = (i / n) % m, j = i % n;
    const int64_t at = b * stride_c + r * ldc + j;
    const float bv = bias != nullptr ? LoadAny(bias, bt, j) : 0.0f;
    StoreAny(c, ct, at, w != nullptr ? fmaf(w_scale, w[at], bv) : bv);
  }
}

class CudaGemmOps {
 public:
  explicit CudaGemmOps(const Ctx& ctx) : ctx_(ctx) {}
  void* Scratch(size_t bytes) {
    scratch_.push_back(std::make_unique<cuda::Scratch>(ctx_, bytes));
    return scratch_.back()->get();
  }
  void Convert(const void* src, DType st, void* dst, DType dt, int64_t n) {
    const Launch l = ElementwiseLaunch(n);
    ConvertKernel<<<l.blocks, l.threads, 0, ctx_.stream>>>(src, st, dst, dt, n);
    CheckLaunch("Gemm");
  }
  void FillBiasRows(void* c, DType ct, int64_t ldc, int64_t stride_c, int64_t batch, int64_t m, int64_t n,
                    const void* bias, DType bt) {
    const int64_t total = batch * m * n;
    const Launch l = ElementwiseLaunch(total);
    FillBiasRowsKernel<<<l.blocks, l.threads, 0, ctx_.stream>>>(c, ct, ldc, stride_c, m, n, total, bias, bt);
    CheckLaunch("Gemm");
  }
  void Cublas(const CublasCall& k) {
    cublasHandle_t h = Handle(ctx_);
    const bool tf32 = AllowTf32() && k.first_type == DType::kF32;
    const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const cublasOperation_t op_first = k.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = k.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (k.batch == 1) {
      ZR_CUBLAS_CHECK(cublasGemmEx(h, op_first, op_second, static_cast<int>(k.m), static_cast<int>(k.n),
                                   static_cast<int>(k.k), &k.alpha, k.first, CudaType(k.first_type),
                                   static_cast<int>(k.ld_first), k.second, CudaType(k.second_type),
                                   static_cast<int>(k.ld_second), &k.beta, k.c, CudaType(k.c_type),
                                   static_cast<int>(k.ldc), compute, CUBLAS_GEMM_DEFAULT));
    } else {
      ZR_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          h, op_first, op_second, static_cast<int>(k.m), static_cast<int>(k.n), static_cast<int>(k.k), &k.alpha,
          k.first, CudaType(k.first_type), static_cast<int>(k.ld_first), k.stride_first, k.second,
          CudaType(k.second_type), static_cast<int>(k.ld_second), k.stride_second, &k.beta, k.c, CudaType(k.c_type),
          static_cast<int>(k.ldc), k.stride_c, static_cast<int>(k.batch), compute, CUBLAS_GEMM_DEFAULT));
    }
  }
  void Epilogue(const float* w, void* c, DType ct, int64_t ldc, int64_t stride_c, int64_t batch, int64_t m,
                int64_t n, float w_scale, const void* bias, DType bt) {
    const int64_t total = batch * m * n;
    const Launch l = ElementwiseLaunch(total);
    EpilogueKernel<<<l.blocks, l.threads, 0, ctx_.stream>>>(w, c, ct, ldc, stride_c, m, n, total, w_scale, bias, bt);
    CheckLaunch("Gemm");
  }

 private:
  Ctx ctx_;
  std::vector<std::unique_ptr<cuda::Scratch>> scratch_;
};

void Gemm(const GemmParams& p) {
  ZR_CHECK(p.batch <= INT32_MAX, "Gemm (cuda): batch {} exceeds cuBLAS's 32-bit batch count", p.batch);
  const Ctx ctx = CurrentCtx();
  CudaGemmOps ops(ctx);
  ExecuteGemmPlan(p, PlanGemm(p), ops);
}

// ---- bias ----------------------------------------------------------------------------------------------

__global__ void BiasAddKernel(void* out, DType ot, const void* bias, DType bt, int64_t N, int64_t C) {
  ZR_GRID_STRIDE(i, N * C) StoreAny(out, ot, i, LoadAny(out, ot, i) + LoadAny(bias, bt, i % C));
}

struct DoutTerm {
  const void* dout;
  DType type;
  int64_t C;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const { v[0] = LoadAny(dout, type, r * C + c); }
};

void BiasAdd(void* out, DType out_type, const void* bias, DType bias_type, int64_t N, int64_t C) {
  const Ctx ctx = CurrentCtx();
  const Launch l = ElementwiseLaunch(N * C);
  BiasAddKernel<<<l.blocks, l.threads, 0, ctx.stream>>>(out, out_type, bias, bias_type, N, C);
  CheckLaunch("BiasAdd");
}

void BiasBackward(void* dbias, DType dbias_type, const void* dout, DType dout_type, int64_t N, int64_t C) {
  const Ctx ctx = CurrentCtx();
  ColumnSums<1>(ctx, DoutTerm{dout, dout_type, C}, N, C, ColumnOutputs<1>{{dbias}}, dbias_type, "BiasBackward");
}

}  // namespace

void FillGemm(KernelTable& t) {
  t.gemm = &Gemm;
  t.bias_add = &BiasAdd;
  t.bias_backward = &BiasBackward;
}

}  // namespace zerorun::kernels::cuda

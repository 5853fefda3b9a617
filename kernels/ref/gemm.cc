// Reference GEMM (triple loop, double accumulation) and bias add / bias gradient.
#include <vector>

#include "zerorun/kernels/access.h"
#include "zerorun/kernels/ref/ref.h"

namespace zerorun::kernels::ref {
namespace {

void Gemm(const GemmParams& p) {
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    const void* a = At(p.a, p.a_type, bi * p.stride_a);
    const void* b = At(p.b, p.b_type, bi * p.stride_b);
    void* c = At(p.c, p.c_type, bi * p.stride_c);
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double acc = 0.0;
        for (int64_t l = 0; l < p.k; ++l) {
          double av = LoadD(a, p.a_type, p.trans_a == Trans::kN ? i * p.lda + l : l * p.lda + i);
          double bv = LoadD(b, p.b_type, p.trans_b == Trans::kN ? l * p.ldb + j : j * p.ldb + l);
          acc += av * bv;
        }
        double v = static_cast<double>(p.alpha) * acc;
        if (p.beta != 0.0f) v += static_cast<double>(p.beta) * LoadD(c, p.c_type, i * p.ldc + j);
        if (p.bias != nullptr) v += LoadD(p.bias, p.bias_type, j);
        StoreD(c, p.c_type, i * p.ldc + j, v);
      }
    }
  }
}

void BiasAdd(void* out, DType out_type, const void* bias, DType bias_type, int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < C; ++j) {
      StoreD(out, out_type, i * C + j, LoadD(out, out_type, i * C + j) + LoadD(bias, bias_type, j));
    }
  }
}

void BiasBackward(void* dbias, DType dbias_type, const void* dout, DType dout_type, int64_t N, int64_t C) {
  for (int64_t j = 0; j < C; ++j) {
    double acc = 0.0;
    for (int64_t i = 0; i < N; ++i) acc += LoadD(dout, dout_type, i * C + j);
    StoreD(dbias, dbias_type, j, LoadD(dbias, dbias_type, j) + acc);
  }
}

}  // namespace

void FillGemm(KernelTable& t) {
  t.gemm = &Gemm;
  t.bias_add = &BiasAdd;
  t.bias_backward = &BiasBackward;
}

}  // namespace zerorun::kernels::ref

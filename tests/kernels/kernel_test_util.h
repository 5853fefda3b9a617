// Helpers for the kernel tests: typed buffers with closed-form or seeded random contents, ulp-based
// comparisons, the list of ISA paths this CPU can run, and a finite-difference driver.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "zerorun/core/cpu_features.h"
#include "zerorun/core/dtype.h"
#include "zerorun/core/rng.h"
#include "zerorun/kernels/cpu/onednn.h"
#include "zerorun/kernels/gemm_backend.h"
#include "zerorun/kernels/kernel_table.h"

namespace zerorun::kernels::test {

class Buffer {
 public:
  Buffer() = default;
  Buffer(DType type, int64_t n) : type_(type), n_(n), bytes_(static_cast<size_t>(n) * DTypeSize(type) + 8, 0) {}

  // Uniform in [lo, hi) from (seed), rounded to the dtype.
  static Buffer Random(DType type, int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
    Buffer b(type, n);
    Rng rng(seed, 7);
    for (int64_t i = 0; i < n; ++i) b.Set(i, lo + (hi - lo) * rng.Uniform());
    return b;
  }
  // Same values as `src` in another dtype (rounded).
  Buffer As(DType type) const {
    Buffer b(type, n_);
    for (int64_t i = 0; i < n_; ++i) b.Set(i, Get(i));
    return b;
  }

  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  float* f32() { return reinterpret_cast<float*>(bytes_.data()); }
  DType type() const { return type_; }
  int64_t size() const { return n_; }

  double Get(int64_t i) const {
    switch (type_) {
      case DType::kF32: return reinterpret_cast<const float*>(bytes_.data())[i];
      case DType::kF64: return reinterpret_cast<const double*>(bytes_.data())[i];
      case DType::kF16: return HalfBitsToFloat(reinterpret_cast<const uint16_t*>(bytes_.data())[i]);
      default: return BF16BitsToFloat(reinterpret_cast<const uint16_t*>(bytes_.data())[i]);
    }
  }
  void Set(int64_t i, double v) {
    switch (type_) {
      case DType::kF32: reinterpret_cast<float*>(bytes_.data())[i] = static_cast<float>(v); break;
      case DType::kF64: reinterpret_cast<double*>(bytes_.data())[i] = v; break;
      case DType::kF16: reinterpret_cast<uint16_t*>(bytes_.data())[i] = FloatToHalfBits(static_cast<float>(v)); break;
      default: reinterpret_cast<uint16_t*>(bytes_.data())[i] = FloatToBF16Bits(static_cast<float>(v)); break;
    }
  }
  double MaxAbs() const {
    double m = 0.0;
    for (int64_t i = 0; i < n_; ++i) m = std::max(m, std::fabs(Get(i)));
    return m;
  }
  bool BitEqual(const Buffer& o) const {
    return type_ == o.type_ && n_ == o.n_ &&
           std::memcmp(bytes_.data(), o.bytes_.data(), static_cast<size_t>(n_) * DTypeSize(type_)) == 0;
  }

 private:
  DType type_ = DType::kF32;
  int64_t n_ = 0;
  std::vector<unsigned char> bytes_;
};

// The spacing of the dtype's values around v.
inline double Ulp(double v, DType t) {
  int mant = t == DType::kF32 ? 23 : t == DType::kF16 ? 10 : t == DType::kBF16 ? 7 : 52;
  int min_exp = t == DType::kF16 ? -14 : t == DType::kF64 ? -1022 : -126;
  double a = std::fabs(v);
  int e = a > 0 ? std::ilogb(a) : min_exp;
  if (e < min_exp) e = min_exp;
  return std::ldexp(1.0, e - mant);
}

// Every element: |got - want| <= ulps * Ulp(want) + abs_tol. Reports the first few mismatches.
inline void CheckClose(const Buffer& got, const Buffer& want, double ulps, double abs_tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  int64_t bad = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    double g = got.Get(i), w = want.Get(i);
    bool ok = (std::isnan(g) && std::isnan(w)) || (g == w) || std::fabs(g - w) <= ulps * Ulp(w, want.type()) + abs_tol;
    if (!ok && ++bad <= 3) {
      MESSAGE(what << ": element " << i << " got " << g << " want " << w << " (diff " << (g - w) << ", tol "
                   << ulps * Ulp(w, want.type()) + abs_tol << ")");
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " elements differ");
}

// The default tolerance for comparing the cpu backend against ref on one op: fp32 tight (relative
// to the output's scale, since both accumulate differently), 16-bit one ulp of the storage dtype.
// `scale_floor` bounds the scale from below (elementwise ops whose outputs can all be tiny).
inline void CheckOp(const Buffer& got, const Buffer& want, const std::string& what, double fp32_rel = 2e-6,
                    double scale_floor = 1e-30) {
  double scale = std::max(scale_floor, want.MaxAbs());
  if (want.type() == DType::kF32) {
    CheckClose(got, want, 4.0, fp32_rel * scale, what);
  } else {
    CheckClose(got, want, 1.0, 2e-6 * scale, what);
  }
}

inline std::vector<Isa> IsasToTest() {
  std::vector<Isa> v{Isa::kScalar};
  if (GetCpuFeatures().avx2 && GetCpuFeatures().f16c) v.push_back(Isa::kAvx2);
  if (GetCpuFeatures().avx512) v.push_back(Isa::kAvx512);
  return v;
}

// Runs fn once per ISA path (capping ActiveIsa), restoring the CPU's own limit afterwards.
inline void ForEachIsa(const std::function<void(Isa)>& fn) {
  for (Isa isa : IsasToTest()) {
    SetMaxIsa(isa);
    CAPTURE(IsaName(isa));
    fn(isa);
  }
  SetMaxIsa(Isa::kAvx512);
}

inline const std::vector<DType>& StorageTypes() {
  static const std::vector<DType> v{DType::kF32, DType::kF16, DType::kBF16};
  return v;
}

// The GEMM backends this build has (OpenBLAS, and oneDNN when built with it), and the one the
// process starts with.
inline std::vector<GemmBackend> GemmBackends() {
  std::vector<GemmBackend> v{GemmBackend::kOpenblas};
  if (cpu::OnednnBuilt()) v.push_back(GemmBackend::kOnednn);
  return v;
}
inline GemmBackend DefaultGemmBackend() { return cpu::OnednnBuilt() ? GemmBackend::kOnednn : GemmBackend::kOpenblas; }

inline const KernelTable& Ref() { return RefKernelTable(); }
inline const KernelTable& Cpu() { return CpuKernelTable(); }

// Central finite difference of a scalar function of x (fp64 buffer) at every element.
inline std::vector<double> NumericGrad(Buffer& x, const std::function<double()>& loss, double h = 1e-6) {
  std::vector<double> g(static_cast<size_t>(x.size()));
  for (int64_t i = 0; i < x.size(); ++i) {
    double v = x.Get(i);
    x.Set(i, v + h);
    double up = loss();
    x.Set(i, v - h);
    double down = loss();
    x.Set(i, v);
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// |analytic - numeric| <= tol * max(1, max |numeric|) for every element.
inline void CheckGrad(const Buffer& analytic, const std::vector<double>& numeric, double tol, const std::string& what) {
  double scale = 1.0;
  for (double v : numeric) scale = std::max(scale, std::fabs(v));
  int64_t bad = 0;
  for (int64_t i = 0; i < analytic.size(); ++i) {
    if (std::fabs(analytic.Get(i) - numeric[i]) > tol * scale && ++bad <= 3) {
      MESSAGE(what << ": grad " << i << " analytic " << analytic.Get(i) << " numeric " << numeric[i]);
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " gradient elements off");
}

// sum_i out[i] * w[i] in double: the scalar loss whose gradient w.r.t. out is w.
inline double Dot(const Buffer& out, const Buffer& w) {
  double s = 0.0;
  for (int64_t i = 0; i < out.size(); ++i) s += out.Get(i) * w.Get(i);
  return s;
}

}  // namespace zerorun::kernels::test

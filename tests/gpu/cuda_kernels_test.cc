// Every CUDA kernel against the CPU reference (kernels::ref), forward and backward, every storage
// dtype, through the public entries (ops.h) under a KernelDeviceScope on a non-default stream; the
// multi-tensor optimizers bit for bit against the reference rules; determinism of the gradient sums;
// event ordering between two streams. Label `gpu`; skipped (CTest: skipped) without a CUDA device.
//
// ZERORUN_GPU_TEST_DEVICE=cpu runs the same tests with the CPU as the device under test (host memory,
// the CPU table, the CPU's optimizers on its portable path), which checks the tests' own logic on a
// machine without a GPU; tests/gpu/run.sh does that in its dry run.
//
// Tolerances (docs/gpu.md): fp32 results within 8 ulp + r * max|ref| (r = 1e-6 for elementwise ops,
// softmax and the loss, 1e-5 for GEMMs, norms, attention and parameter gradients); 16-bit results
// within 1 ulp + 2e-6 * max|ref| (both round once); max|ref| is taken as at least 1 for activations
// and a norm's dx; 16-bit attention within 2 ulp + 8 ulp of max|ref|
// (P and dS enter their GEMMs rounded to 16 bits); exact: fill, copy/casts, dropout, optimizers.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/common/skip.h"
#include "tests/kernels/kernel_test_util.h"
#include "zerorun/core/cpu_features.h"
#include "zerorun/core/device.h"
#include "zerorun/core/error.h"
#include "zerorun/kernels/cpu/optim.h"
#include "zerorun/kernels/cuda/optim.h"
#include "zerorun/kernels/ops.h"
#include "zerorun/kernels/ref/optim.h"

namespace zerorun::kernels::test {
namespace {

bool CpuDryRun() {
  const char* v = std::getenv("ZERORUN_GPU_TEST_DEVICE");
  return v != nullptr && std::strcmp(v, "cpu") == 0;
}

Device TestDevice() { return CpuDryRun() ? Device::CPU() : Device::CUDA(0); }

std::string NoDeviceReason() {
  if (CpuDryRun()) return "";
  if (!HasDeviceBackend(DeviceType::kCUDA)) return "zerorun was built without CUDA";
  if (GetDeviceBackend(DeviceType::kCUDA).DeviceCount() == 0) return "no CUDA device visible";
  return "";
}

#define ZR_NEED_DEVICE()                                    \
  do {                                                      \
    const std::string zr_why_ = NoDeviceReason();           \
    if (!zr_why_.empty()) ZR_TEST_SKIP(zr_why_);            \
  } while (0)

// The device under test, a stream of its own, and the kernel scope that routes ops there.
class Dev {
 public:
  Dev() : device_(TestDevice()), stream_(CreateStream(device_)), scope_(device_, stream_.get()) {}
  Device device() const { return device_; }
  Stream& stream() { return *stream_; }

 private:
  Device device_;
  std::unique_ptr<Stream> stream_;
  KernelDeviceScope scope_;
};

// Device memory holding a Buffer's values (or uninitialised ones).
class DBuf {
 public:
  DBuf(Dev& dev, DType type, int64_t n)
      : dev_(dev), type_(type), n_(n), bytes_(std::max<size_t>(16, static_cast<size_t>(n) * DTypeSize(type))),
        ptr_(GetAllocator(dev.device()).Allocate(bytes_)) {}
  DBuf(Dev& dev, const Buffer& b) : DBuf(dev, b.type(), b.size()) {
    CopyBytes(ptr_, dev_.device(), b.data(), Device::CPU(), static_cast<size_t>(n_) * DTypeSize(type_));
  }
  ~DBuf() { GetAllocator(dev_.device()).Deallocate(ptr_, bytes_); }
  DBuf(const DBuf&) = delete;
  DBuf& operator=(const DBuf&) = delete;
  void* data() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  const int32_t* i32() const { return static_cast<const int32_t*>(ptr_); }
  // Waits for the test stream, then copies back.
  Buffer Get() const {
    dev_.stream().Synchronize();
    Buffer b(type_, n_);
    CopyBytes(b.data(), Device::CPU(), ptr_, dev_.device(), static_cast<size_t>(n_) * DTypeSize(type_));
    return b;
  }

 private:
  Dev& dev_;
  DType type_;
  int64_t n_;
  size_t bytes_;
  void* ptr_;
};

// Tokens on the device.
class DTokens {
 public:
  DTokens(Dev& dev, const std::vector<int32_t>& v) : buf_(dev, DType::kI32, static_cast<int64_t>(v.size())) {
    CopyBytes(buf_.data(), dev.device(), v.data(), Device::CPU(), v.size() * sizeof(int32_t));
  }
  const int32_t* data() const { return buf_.i32(); }

 private:
  DBuf buf_;
};

// `scale_floor` bounds max|ref| from below where outputs can all be tiny (activation tails, a norm's
// dx over one column, which cancels to rounding noise).
void CheckGpu(const Buffer& got, const Buffer& want, const std::string& what, double fp32_rel,
              double scale_floor = 1e-30) {
  const double scale = std::max(scale_floor, want.MaxAbs());
  if (want.type() == DType::kF32) {
    CheckClose(got, want, 8.0, fp32_rel * scale, what);
  } else {
    CheckClose(got, want, 1.0, 2e-6 * scale, what);
  }
}

const std::vector<int64_t> kSizes = {1, 7, 4099, 1 << 20};

std::string Name(DType t) { return DTypeName(t); }

std::vector<int32_t> Tokens(int64_t n, int64_t V, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>(Philox4x32(seed, 1, i)[0] % V);
  return v;
}

TEST_SUITE("gpu") {

TEST_CASE("cuda elementwise ops, casts and dropout match the reference") {
  ZR_NEED_DEVICE();
  Dev dev;
  for (int64_t n : kSizes) {
    for (DType t : StorageTypes()) {
      CAPTURE(n);
      CAPTURE(Name(t));
      Buffer a = Buffer::Random(t, n, 1, -4, 4), b = Buffer::Random(t, n, 2, -4, 4);
      DBuf da(dev, a), db(dev, b), out(dev, t, n);
      Buffer want(t, n);
      Add(out.data(), da.data(), db.data(), n, t);
      Ref().add(want.data(), a.data(), b.data(), n, t);
      CheckGpu(out.Get(), want, "add", 1e-6);
      Add(da.data(), da.data(), db.data(), n, t);  // in place
      CheckGpu(da.Get(), want, "add in place", 1e-6);
      Scale(out.data(), db.data(), -0.37f, n, t);
      Ref().scale(want.data(), b.data(), -0.37f, n, t);
      CheckGpu(out.Get(), want, "scale", 1e-6);
      Fill(out.data(), 1.2345f, n, t);
      Ref().fill(want.data(), 1.2345f, n, t);
      CHECK(out.Get().BitEqual(want));
      for (DType xt : StorageTypes()) {
        Buffer y = Buffer::Random(t, n, 3), x = Buffer::Random(xt, n, 4);
        DBuf dy(dev, y), dx(dev, x);
        Axpy(dy.data(), t, dx.data(), xt, 0.7f, n);
        Ref().axpy(y.data(), t, x.data(), xt, 0.7f, n);
        CheckGpu(dy.Get(), y, "axpy from " + Name(xt), 1e-6);
      }
      for (float p : {0.0f, 0.1f, 0.5f}) {
        DBuf dx(dev, a);
        DropoutForward(out.data(), db.data(), n, t, p, 42, 7, 1001);
        Ref().dropout_forward(want.data(), b.data(), n, t, p, 42, 7, 1001);
        CHECK(out.Get().BitEqual(want));
        DropoutBackward(dx.data(), dx.data(), n, t, p, 42, 7, 1001);  // in place
        Buffer back(t, n);
        Ref().dropout_backward(back.data(), a.data(), n, t, p, 42, 7, 1001);
        CHECK(dx.Get().BitEqual(back));
      }
    }
  }
  // Casts between every pair, exact as core's converters, including rounding ties, subnormals, Inf,
  // overflow and (between fp32 and 16 bits) NaN payloads.
  const int64_t n = 70000;
  for (DType st : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    Buffer src = Buffer::Random(st, n, 9, -70000, 70000);
    for (int64_t i = 0; i < 2000; ++i) src.Set(i, std::ldexp(1.0 + i / 2048.0, static_cast<int>(i % 60) - 30));
    for (int64_t i = 2000; i < 2100; ++i) src.Set(i, std::ldexp(static_cast<double>(i), -150 + static_cast<int>(i % 30)));
    src.Set(2100, std::numeric_limits<double>::infinity());
    src.Set(2101, -std::numeric_limits<double>::infinity());
    if (st == DType::kF32) {
      uint32_t nan = 0x7fa12345u;
      std::memcpy(src.f32() + 2102, &nan, 4);
    }
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
      if (st == dt) continue;
      CAPTURE(Name(st) + " -> " + Name(dt));
      DBuf ds(dev, src), dd(dev, dt, n);
      Copy(dd.data(), dt, ds.data(), st, n);
      Buffer want(dt, n);
      Ref().copy(want.data(), dt, src.data(), st, n);
      if (st == DType::kF64 || dt == DType::kF64) {
        CheckClose(dd.Get(), want, 0.0, 0.0, "copy");  // values equal (NaN payloads through fp64 may differ)
      } else {
        CHECK(dd.Get().BitEqual(want));
      }
    }
  }
}

TEST_CASE("cuda sums of squares and finite checks match the reference") {
  ZR_NEED_DEVICE();
  Dev dev;
  for (int64_t n : kSizes) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
      CAPTURE(n);
      CAPTURE(Name(t));
      Buffer x = Buffer::Random(t, n, 5, -3, 3);
      DBuf dx(dev, x);
      const double want = Ref().sum_squares(x.data(), n, t);
      const double got = SumSquares(dx.data(), n, t);
      // The device sums in double; the CPU backend (dry run) in fp32 lanes with double chunk totals.
      CHECK(std::fabs(got - want) <= (CpuDryRun() ? 1e-6 : 1e-12) * want);
      CHECK(SumSquares(dx.data(), n, t) == got);  // the same sum every run
      CHECK(AllFinite(dx.data(), n, t));
      Buffer ints(t, n);
      for (int64_t i = 0; i < n; ++i) ints.Set(i, static_cast<double>(i % 7) - 3);
      DBuf di(dev, ints);
      CHECK(SumSquares(di.data(), n, t) == Ref().sum_squares(ints.data(), n, t));  // exact
      for (double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
        Buffer y = x;
        y.Set(n - 1, bad);
        DBuf dy(dev, y);
        CHECK_FALSE(AllFinite(dy.data(), n, t));
        CHECK(std::isnan(SumSquares(dy.data(), n, t)) == std::isnan(bad));
      }
    }
  }
}

TEST_CASE("cuda activations match the reference, forward and backward") {
  ZR_NEED_DEVICE();
  Dev dev;
  for (int64_t n : kSizes) {
    for (DType t : StorageTypes()) {
      CAPTURE(n);
      CAPTURE(Name(t));
      Buffer x = Buffer::Random(t, n, 11, -6, 6), dy = Buffer::Random(t, n, 12);
      DBuf dx_in(dev, x), ddy(dev, dy), out(dev, t, n);
      Buffer want(t, n);
      for (GeluApprox a : {GeluApprox::kTanh, GeluApprox::kNone}) {
        GeluForward(out.data(), dx_in.data(), n, t, a);
        Ref().gelu_forward(want.data(), x.data(), n, t, a);
        CheckGpu(out.Get(), want, "gelu", 1e-6, 1.0);
        GeluBackward(out.data(), ddy.data(), dx_in.data(), n, t, a);
        Ref().gelu_backward(want.data(), dy.data(), x.data(), n, t, a);
        CheckGpu(out.Get(), want, "gelu backward", 1e-6, 1.0);
      }
      SiluForward(out.data(), dx_in.data(), n, t);
      Ref().silu_forward(want.data(), x.data(), n, t);
      CheckGpu(out.Get(), want, "silu", 1e-6, 1.0);
      SiluBackward(out.data(), ddy.data(), dx_in.data(), n, t);
      Ref().silu_backward(want.data(), dy.data(), x.data(), n, t);
      CheckGpu(out.Get(), want, "silu backward", 1e-6, 1.0);
      const int64_t N = 3, H = (n + 5) / 6;
      Buffer in = Buffer::Random(t, N * 2 * H, 13, -5, 5), g = Buffer::Random(t, N * H, 14);
      DBuf din(dev, in), dg(dev, g), sw(dev, t, N * H), dsw(dev, t, N * 2 * H);
      Buffer sw_want(t, N * H), dsw_want(t, N * 2 * H);
      SwiGluForward(sw.data(), din.data(), N, H, t);
      Ref().swiglu_forward(sw_want.data(), in.data(), N, H, t);
      CheckGpu(sw.Get(), sw_want, "swiglu", 1e-6, 1.0);
      SwiGluBackward(dsw.data(), dg.data(), din.data(), N, H, t);
      Ref().swiglu_backward(dsw_want.data(), g.data(), in.data(), N, H, t);
      CheckGpu(dsw.Get(), dsw_want, "swiglu backward", 1e-6, 1.0);
    }
  }
}

TEST_CASE("cuda LayerNorm and RMSNorm match the reference, forward and backward") {
  ZR_NEED_DEVICE();
  Dev dev;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {7, 13}, {300, 770}, {4099, 64}};
  for (auto [N, C] : shapes) {
    for (DType t : StorageTypes()) {
      for (DType pt : {t, DType::kF32}) {
        for (bool affine : {true, false}) {
          CAPTURE(N);
          CAPTURE(C);
          CAPTURE(Name(t) + " params " + Name(pt));
          CAPTURE(affine);
          Buffer x = Buffer::Random(t, N * C, 21, -3, 3), w = Buffer::Random(pt, C, 22, 0.5, 1.5),
                 bias = Buffer::Random(pt, C, 23), dy = Buffer::Random(t, N * C, 24);
          DBuf dxin(dev, x), dw(dev, w), db(dev, bias), ddy(dev, dy), out(dev, t, N * C),
              mean(dev, DType::kF32, N), rstd(dev, DType::kF32, N);
          const void* wp = affine ? dw.data() : nullptr;
          const void* bp = affine ? db.data() : nullptr;
          Buffer out_w(t, N * C), mean_w(DType::kF32, N), rstd_w(DType::kF32, N);
          LayerNormForward(out.data(), mean.f32(), rstd.f32(), dxin.data(), wp, bp, N, C, 1e-5f, t, pt);
          Ref().layernorm_forward(out_w.data(), mean_w.f32(), rstd_w.f32(), x.data(), affine ? w.data() : nullptr,
                                  affine ? bias.data() : nullptr, N, C, 1e-5f, t, pt);
          CheckGpu(out.Get(), out_w, "layernorm", 1e-5);
          CheckGpu(mean.Get(), mean_w, "mean", 1e-5);
          CheckGpu(rstd.Get(), rstd_w, "rstd", 1e-5);
          // Backward from the reference's statistics; gradients accumulate into non-zero fp32 values.
          DBuf rmean(dev, mean_w), rrstd(dev, rstd_w), dx(dev, t, N * C);
          Buffer gw0 = Buffer::Random(DType::kF32, C, 25), gb0 = Buffer::Random(DType::kF32, C, 26);
          DBuf gw(dev, gw0), gb(dev, gb0);
          Buffer dx_w(t, N * C), gw_w = gw0, gb_w = gb0;
          LayerNormBackward(dx.data(), gw.data(), gb.data(), ddy.data(), dxin.data(), wp, rmean.f32(), rrstd.f32(), N,
                            C, t, pt, DType::kF32);
          Ref().layernorm_backward(dx_w.data(), gw_w.data(), gb_w.data(), dy.data(), x.data(),
                                   affine ? w.data() : nullptr, mean_w.f32(), rstd_w.f32(), N, C, t, pt, DType::kF32);
          CheckGpu(dx.Get(), dx_w, "layernorm dx", 1e-5, 1.0);
          CheckGpu(gw.Get(), gw_w, "layernorm dweight", 1e-5);
          CheckGpu(gb.Get(), gb_w, "layernorm dbias", 1e-5);
          // RMSNorm, with a null dx (first layer) in one pass to check it is skipped.
          RMSNormForward(out.data(), rstd.f32(), dxin.data(), wp, N, C, 1e-5f, t, pt);
          Ref().rmsnorm_forward(out_w.data(), rstd_w.f32(), x.data(), affine ? w.data() : nullptr, N, C, 1e-5f, t, pt);
          CheckGpu(out.Get(), out_w, "rmsnorm", 1e-5);
          CheckGpu(rstd.Get(), rstd_w, "rms rstd", 1e-5);
          DBuf rrstd2(dev, rstd_w), gw2(dev, gw0);
          Buffer gw2_w = gw0;
          RMSNormBackward(affine ? dx.data() : nullptr, gw2.data(), ddy.data(), dxin.data(), wp, rrstd2.f32(), N, C, t,
                          pt, DType::kF32);
          Ref().rmsnorm_backward(dx_w.data(), gw2_w.data(), dy.data(), x.data(), affine ? w.data() : nullptr,
                                 rstd_w.f32(), N, C, t, pt, DType::kF32);
          if (affine) CheckGpu(dx.Get(), dx_w, "rmsnorm dx", 1e-5, 1.0);
          CheckGpu(gw2.Get(), gw2_w, "rmsnorm dweight", 1e-5);
        }
      }
    }
  }
}

TEST_CASE("cuda softmax and cross-entropy match the reference") {
  ZR_NEED_DEVICE();
  Dev dev;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {7, 13}, {33, 50257}, {1000, 300}};
  for (auto [N, C] : shapes) {
    for (DType t : StorageTypes()) {
      CAPTURE(N);
      CAPTURE(C);
      CAPTURE(Name(t));
      Buffer x = Buffer::Random(t, N * C, 31, -8, 8), dy = Buffer::Random(t, N * C, 32);
      DBuf dx_in(dev, x), ddy(dev, dy), y(dev, t, N * C), dx(dev, t, N * C);
      Buffer y_w(t, N * C), dx_w(t, N * C);
      SoftmaxForward(y.data(), dx_in.data(), N, C, t);
      Ref().softmax_forward(y_w.data(), x.data(), N, C, t);
      CheckGpu(y.Get(), y_w, "softmax", 1e-6);
      DBuf ry(dev, y_w);
      SoftmaxBackward(dx.data(), ddy.data(), ry.data(), N, C, t);
      Ref().softmax_backward(dx_w.data(), dy.data(), y_w.data(), N, C, t);
      CheckGpu(dx.Get(), dx_w, "softmax backward", 1e-6);
      // Cross-entropy with some ignored rows; dlogits in place over the logits.
      std::vector<int32_t> targets = Tokens(N, C, 33);
      for (int64_t i = 0; i < N; i += 5) targets[static_cast<size_t>(i)] = -100;
      DTokens dt(dev, targets);
      DBuf losses(dev, DType::kF32, N);
      Buffer losses_w(DType::kF32, N), dl_w(t, N * C);
      const CrossEntropyResult got = CrossEntropy(dx_in.data(), losses.f32(), dx_in.data(), dt.data(), N, C, t, -100, 2.5f);
      const CrossEntropyResult want =
          Ref().cross_entropy(dl_w.data(), losses_w.f32(), x.data(), targets.data(), N, C, t, -100, 2.5f);
      CHECK(got.count == want.count);
      CHECK(std::fabs(got.loss - want.loss) <= 1e-6f * std::max(1.0f, std::fabs(want.loss)));
      CheckGpu(losses.Get(), losses_w, "losses", 1e-6);
      CheckGpu(dx_in.Get(), dl_w, "dlogits (in place)", 1e-6);
    }
  }
  // Every row ignored: loss 0, count 0, gradient 0. A bad target throws naming it, changing nothing.
  Dev dev2;
  Buffer x = Buffer::Random(DType::kF32, 4 * 6, 34);
  DBuf dx(dev2, x);
  DTokens none(dev2, {-1, -1, -1, -1});
  const CrossEntropyResult r = CrossEntropy(dx.data(), nullptr, dx.data(), none.data(), 4, 6, DType::kF32, -1, 1.0f);
  CHECK(r.count == 0);
  CHECK(r.loss == 0.0f);
  CHECK(dx.Get().MaxAbs() == 0.0);
  DBuf dx2(dev2, x);
  DTokens bad(dev2, {1, 2, 9, 0});
  CHECK_THROWS_WITH_AS(CrossEntropy(dx2.data(), nullptr, dx2.data(), bad.data(), 4, 6, DType::kF32, -1, 1.0f),
                       doctest::Contains("CrossEntropy: targets[2] = 9 is outside [0, 6)"), InvalidArgument);
  CHECK(dx2.Get().BitEqual(x));
}

TEST_CASE("cuda embeddings match the reference, the token gradient deterministically") {
  ZR_NEED_DEVICE();
  Dev dev;
  const int64_t B = 3, T = 100, C = 70, V = 33;
  const std::vector<int32_t> tok = Tokens(B * T, V, 41);
  DTokens dtok(dev, tok);
  for (DType t : StorageTypes()) {
    for (DType pt : {t, DType::kF32}) {
      CAPTURE(Name(t) + " params " + Name(pt));
      Buffer wte = Buffer::Random(pt, V * C, 42), wpe = Buffer::Random(pt, T * C, 43);
      DBuf dwte(dev, wte), dwpe(dev, wpe), out(dev, t, B * T * C);
      Buffer out_w(t, B * T * C);
      for (bool pos : {true, false}) {
        EmbeddingForward(out.data(), t, dtok.data(), dwte.data(), pos ? dwpe.data() : nullptr, pt, B, T, C, V);
        Ref().embedding_forward(out_w.data(), t, tok.data(), wte.data(), pos ? wpe.data() : nullptr, pt, B, T, C, V);
        CheckGpu(out.Get(), out_w, "embedding forward", 1e-6);
      }
      for (DType gt : {DType::kF32, t}) {
        Buffer dy = Buffer::Random(t, B * T * C, 44), gte0 = Buffer::Random(gt, V * C, 45),
               gpe0 = Buffer::Random(gt, T * C, 46);
        DBuf ddy(dev, dy), gte(dev, gte0), gpe(dev, gpe0), gte2(dev, gte0);
        Buffer gte_w = gte0, gpe_w = gpe0;
        EmbeddingBackward(gte.data(), gpe.data(), gt, ddy.data(), t, dtok.data(), B, T, C, V);
        Ref().embedding_backward(gte_w.data(), gpe_w.data(), gt, dy.data(), t, tok.data(), B, T, C, V);
        CheckGpu(gte.Get(), gte_w, "dwte", 1e-6);
        CheckGpu(gpe.Get(), gpe_w, "dwpe", 1e-6);
        EmbeddingBackward(gte2.data(), nullptr, gt, ddy.data(), t, dtok.data(), B, T, C, V);
        CHECK(gte2.Get().BitEqual(gte.Get()));  // same bits every run
      }
    }
  }
  std::vector<int32_t> bad_tok = tok;
  bad_tok[5] = 40;
  DTokens dbad(dev, bad_tok);
  Buffer wte = Buffer::Random(DType::kF32, V * C, 47);
  DBuf dwte(dev, wte), out(dev, DType::kF32, B * T * C), g(dev, wte);
  CHECK_THROWS_WITH_AS(EmbeddingForward(out.data(), DType::kF32, dbad.data(), dwte.data(), nullptr, DType::kF32, B, T, C,
                                        V),
                       doctest::Contains("EmbeddingForward: tokens[5] = 40 is outside [0, 33)"), InvalidArgument);
  CHECK_THROWS_WITH_AS(EmbeddingBackward(g.data(), nullptr, DType::kF32, out.data(), DType::kF32, dbad.data(), B, T, C,
                                         V),
                       doctest::Contains("EmbeddingBackward: tokens[5] = 40"), InvalidArgument);
  CHECK(g.Get().BitEqual(wte));  // nothing was added
}

TEST_CASE("cuda GEMMs match the reference for transposes, dtypes, bias, beta and batches") {
  ZR_NEED_DEVICE();
  Dev dev;
  struct Types {
    DType a, b, c;
  };
  const std::vector<Types> types = {{DType::kF32, DType::kF32, DType::kF32},   {DType::kBF16, DType::kBF16, DType::kBF16},
                                    {DType::kF16, DType::kF16, DType::kF16},   {DType::kBF16, DType::kBF16, DType::kF32},
                                    {DType::kF16, DType::kF16, DType::kF32},   {DType::kF32, DType::kBF16, DType::kF32},
                                    {DType::kF32, DType::kF32, DType::kBF16}, {DType::kBF16, DType::kBF16, DType::kF16}};
  const std::vector<std::array<int64_t, 4>> shapes = {{1, 1, 1, 1}, {7, 5, 3, 1}, {64, 96, 80, 3}, {300, 200, 256, 1},
                                                      {5, 6, 0, 1}};
  for (const auto& s : shapes)
    for (const Types& ty : types)
      for (Trans ta : {Trans::kN, Trans::kT})
        for (Trans tb : {Trans::kN, Trans::kT})
          for (int bias = 0; bias < 2; ++bias)
            for (float beta : {0.0f, 1.0f}) {
              const int64_t m = s[0], n = s[1], k = s[2], batch = s[3];
              CAPTURE(m);
              CAPTURE(n);
              CAPTURE(k);
              CAPTURE(batch);
              CAPTURE(Name(ty.a) + " x " + Name(ty.b) + " -> " + Name(ty.c));
              CAPTURE(static_cast<int>(ta) * 2 + static_cast<int>(tb));
              CAPTURE(bias);
              CAPTURE(beta);
              GemmParams p;
              p.trans_a = ta;
              p.trans_b = tb;
              p.m = m;
              p.n = n;
              p.k = k;
              p.alpha = 0.5f;
              p.beta = beta;
              p.lda = (ta == Trans::kN ? k : m) + 1;
              p.ldb = (tb == Trans::kN ? n : k) + 2;
              p.ldc = n + 3;
              p.batch = batch;
              p.stride_a = (ta == Trans::kN ? m : k) * p.lda;
              p.stride_b = (tb == Trans::kN ? k : n) * p.ldb;
              p.stride_c = m * p.ldc;
              Buffer a = Buffer::Random(ty.a, batch * p.stride_a + 1, 51), b = Buffer::Random(ty.b, batch * p.stride_b + 1, 52);
              Buffer c = Buffer::Random(ty.c, batch * p.stride_c + 1, 53), bv = Buffer::Random(ty.c, n, 54);
              DBuf da(dev, a), db(dev, b), dc(dev, c), dbias(dev, bv);
              p.a_type = ty.a;
              p.b_type = ty.b;
              p.c_type = ty.c;
              p.bias_type = ty.c;
              p.a = da.data();
              p.b = db.data();
              p.c = dc.data();
              p.bias = bias ? dbias.data() : nullptr;
              Gemm(p);
              p.a = a.data();
              p.b = b.data();
              p.c = c.data();
              p.bias = bias ? bv.data() : nullptr;
              Ref().gemm(p);
              CheckGpu(dc.Get(), c, "gemm", 1e-5);
            }
  // Bias add and the (deterministic) bias gradient.
  for (DType t : StorageTypes()) {
    const int64_t N = 4099, C = 70;
    Buffer out = Buffer::Random(t, N * C, 55), bias = Buffer::Random(t, C, 56), dy = Buffer::Random(t, N * C, 57);
    Buffer db0 = Buffer::Random(DType::kF32, C, 58);
    DBuf dout(dev, out), dbias(dev, bias), ddy(dev, dy), ddb(dev, db0), ddb2(dev, db0);
    BiasAdd(dout.data(), t, dbias.data(), t, N, C);
    Ref().bias_add(out.data(), t, bias.data(), t, N, C);
    CheckGpu(dout.Get(), out, "bias add " + Name(t), 1e-6);
    BiasBackward(ddb.data(), DType::kF32, ddy.data(), t, N, C);
    BiasBackward(ddb2.data(), DType::kF32, ddy.data(), t, N, C);
    Buffer db_w = db0;
    Ref().bias_backward(db_w.data(), DType::kF32, dy.data(), t, N, C);
    CheckGpu(ddb.Get(), db_w, "bias backward " + Name(t), 1e-5);
    CHECK(ddb.Get().BitEqual(ddb2.Get()));
  }
}

TEST_CASE("cuda attention matches the reference, forward and backward") {
  ZR_NEED_DEVICE();
  Dev dev;
  const std::vector<std::array<int64_t, 4>> dims = {{1, 1, 4, 1}, {2, 13, 12, 3}, {2, 64, 128, 4}, {1, 256, 64, 2}};
  for (const auto& d : dims) {
    for (DType t : StorageTypes()) {
      const int64_t B = d[0], T = d[1], C = d[2], NH = d[3];
      CAPTURE(B);
      CAPTURE(T);
      CAPTURE(C);
      CAPTURE(NH);
      CAPTURE(Name(t));
      Buffer qkv = Buffer::Random(t, B * T * 3 * C, 61, -2, 2), dy = Buffer::Random(t, B * T * C, 62);
      const int64_t att_n = AttentionSavedElems(B, T, NH);
      Buffer out_w(t, B * T * C), att_w(DType::kF32, att_n), dqkv_w(t, B * T * 3 * C);
      Ref().attention_forward(out_w.data(), att_w.f32(), qkv.data(), B, T, C, NH, t);
      Ref().attention_backward(dqkv_w.data(), dy.data(), qkv.data(), att_w.f32(), B, T, C, NH, t);
      DBuf dqkv_in(dev, qkv), ddy(dev, dy), out(dev, t, B * T * C), att(dev, DType::kF32, att_n),
          dqkv(dev, t, B * T * 3 * C);
      AttentionForward(out.data(), att.f32(), dqkv_in.data(), B, T, C, NH, t);
      CheckGpu(att.Get(), att_w, "probabilities", 1e-5);
      DBuf ratt(dev, att_w);
      AttentionBackward(dqkv.data(), ddy.data(), dqkv_in.data(), ratt.f32(), B, T, C, NH, t);
      if (t == DType::kF32) {
        CheckGpu(out.Get(), out_w, "attention out", 1e-5);
        CheckGpu(dqkv.Get(), dqkv_w, "attention dqkv", 1e-5);
      } else {
        CheckClose(out.Get(), out_w, 2.0, 8 * Ulp(out_w.MaxAbs(), t), "attention out (16-bit)");
        CheckClose(dqkv.Get(), dqkv_w, 2.0, 8 * Ulp(dqkv_w.MaxAbs(), t), "attention dqkv (16-bit)");
      }
    }
  }
}

// ---- optimizers ---------------------------------------------------------------------------------------

enum class Rule { kAdamW, kAdamL2, kLion, kSgd, kSgdNesterov, kAdagrad, kLamb };

struct HostTensor {
  Buffer p, g, s0, s1, copy;
  DType copy_type;
  bool has_copy;
};

TEST_CASE("cuda multi-tensor optimizers equal the reference rules bit for bit") {
  ZR_NEED_DEVICE();
  if (CpuDryRun()) SetMaxIsa(Isa::kScalar);  // the CPU's portable path is the reference's bits
  Dev dev;
  const std::vector<int64_t> sizes = {0, 1, 7, 4099, 65537, 1 << 20, 3};
  const DType grad_types[3] = {DType::kF32, DType::kF16, DType::kBF16};
  const DType copy_types[3] = {DType::kBF16, DType::kF16, DType::kF32};
  for (Rule rule : {Rule::kAdamW, Rule::kAdamL2, Rule::kLion, Rule::kSgd, Rule::kSgdNesterov, Rule::kAdagrad,
                    Rule::kLamb}) {
    CAPTURE(static_cast<int>(rule));
    std::vector<HostTensor> host;
    std::vector<std::unique_ptr<DBuf>> dbufs;
    std::vector<cuda::OptimTensor> dev_tensors;
    auto dptr = [&](const Buffer& b) {
      dbufs.push_back(std::make_unique<DBuf>(dev, b));
      return dbufs.back()->data();
    };
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i];
      HostTensor h{Buffer::Random(DType::kF32, n, 70 + i), Buffer::Random(grad_types[i % 3], n, 80 + i, -0.1, 0.1),
                   Buffer(DType::kF32, n), Buffer(DType::kF32, n), Buffer(copy_types[i % 3], n), copy_types[i % 3],
                   i % 4 != 3};
      if (rule == Rule::kAdagrad) h.s0 = Buffer::Random(DType::kF32, n, 90 + i, 0, 0.01);
      cuda::OptimTensor t;
      t.span.params = static_cast<float*>(dptr(h.p));
      t.span.grads = dptr(h.g);
      t.span.grad_dtype = h.g.type();
      t.span.grad_scale = 0.5f;
      t.span.param_copy = h.has_copy ? dptr(h.copy) : nullptr;
      t.span.copy_dtype = h.copy_type;
      t.span.n = n;
      t.state0 = static_cast<float*>(dptr(h.s0));
      t.state1 = static_cast<float*>(dptr(h.s1));
      dev_tensors.push_back(t);
      host.push_back(std::move(h));
    }
    for (int64_t step = 1; step <= 3; ++step) {
      AdamHyper adam;
      adam.lr = 1e-2f;
      adam.weight_decay = 0.1f;
      adam.adam_w_mode = rule != Rule::kAdamL2;
      adam.step = step;
      LionHyper lion;
      lion.lr = 1e-3f;
      lion.weight_decay = 0.1f;
      lion.step = step;
      SgdHyper sgd;
      sgd.lr = 0.1f;
      sgd.momentum = 0.9f;
      sgd.dampening = 0.1f;
      sgd.weight_decay = 0.01f;
      sgd.nesterov = rule == Rule::kSgdNesterov;
      sgd.step = step;
      AdagradHyper ada;
      ada.lr = 0.1f;
      ada.lr_decay = 0.01f;
      ada.weight_decay = 0.01f;
      ada.step = step;
      LambHyper lamb;
      lamb.lr = 1e-2f;
      lamb.weight_decay = 0.01f;
      lamb.step = step;
      // Reference, tensor by tensor.
      std::vector<float> trust(host.size(), 1.0f);
      std::vector<LambNorms> ref_norms(host.size());
      for (size_t i = 0; i < host.size(); ++i) {
        HostTensor& h = host[i];
        OptimSpan s{h.p.f32(), h.g.data(), h.g.type(), 0.5f, h.has_copy ? h.copy.data() : nullptr, h.copy_type,
                    h.p.size()};
        switch (rule) {
          case Rule::kAdamW:
          case Rule::kAdamL2: ref::AdamStep(adam, s, h.s0.f32(), h.s1.f32()); break;
          case Rule::kLion: ref::LionStep(lion, s, h.s0.f32()); break;
          case Rule::kSgd:
          case Rule::kSgdNesterov: ref::SgdStep(sgd, s, h.s0.f32()); break;
          case Rule::kAdagrad: ref::AdagradStep(ada, s, h.s0.f32()); break;
          case Rule::kLamb:
            ref_norms[i] = ref::LambMoments(lamb, s, h.s0.f32(), h.s1.f32());
            trust[i] = LambTrustRatio(lamb, ref_norms[i]);
            ref::LambApply(lamb, s, h.s0.f32(), h.s1.f32(), trust[i]);
            break;
        }
      }
      // The device under test, all tensors in one call.
      const int64_t count = static_cast<int64_t>(dev_tensors.size());
      const cuda::OptimTensor* ts = dev_tensors.data();
      if (!CpuDryRun()) {
        switch (rule) {
          case Rule::kAdamW:
          case Rule::kAdamL2: cuda::AdamStep(adam, ts, count); break;
          case Rule::kLion: cuda::LionStep(lion, ts, count); break;
          case Rule::kSgd:
          case Rule::kSgdNesterov: cuda::SgdStep(sgd, ts, count); break;
          case Rule::kAdagrad: cuda::AdagradStep(ada, ts, count); break;
          case Rule::kLamb: {
            std::vector<LambNorms> norms(host.size());
            cuda::LambMoments(lamb, ts, count, norms.data());
            for (size_t i = 0; i < host.size(); ++i) {
              CHECK(std::fabs(norms[i].param_sq - ref_norms[i].param_sq) <= 1e-12 * ref_norms[i].param_sq);
              CHECK(std::fabs(norms[i].update_sq - ref_norms[i].update_sq) <= 1e-12 * ref_norms[i].update_sq);
            }
            cuda::LambApply(lamb, ts, count, trust.data());
            break;
          }
        }
      } else {
        for (size_t i = 0; i < dev_tensors.size(); ++i) {
          const cuda::OptimTensor& t = dev_tensors[i];
          switch (rule) {
            case Rule::kAdamW:
            case Rule::kAdamL2: cpu::AdamStep(adam, t.span, t.state0, t.state1); break;
            case Rule::kLion: cpu::LionStep(lion, t.span, t.state0); break;
            case Rule::kSgd:
            case Rule::kSgdNesterov: cpu::SgdStep(sgd, t.span, t.state0); break;
            case Rule::kAdagrad: cpu::AdagradStep(ada, t.span, t.state0); break;
            case Rule::kLamb:
              cpu::LambMoments(lamb, t.span, t.state0, t.state1);
              cpu::LambApply(lamb, t.span, t.state0, t.state1, trust[i]);
              break;
          }
        }
      }
      dev.stream().Synchronize();
    }
    // dbufs holds, per tensor: params, grads, [copy], state0, state1.
    size_t at = 0;
    for (size_t i = 0; i < host.size(); ++i) {
      CAPTURE(i);
      const HostTensor& h = host[i];
      CHECK(dbufs[at++]->Get().BitEqual(h.p));
      ++at;  // grads
      if (h.has_copy) CHECK(dbufs[at++]->Get().BitEqual(h.copy));
      CHECK(dbufs[at++]->Get().BitEqual(h.s0));
      const bool two_states = rule == Rule::kAdamW || rule == Rule::kAdamL2 || rule == Rule::kLamb;
      if (two_states) CHECK(dbufs[at]->Get().BitEqual(h.s1));
      ++at;
    }
  }
  if (CpuDryRun()) SetMaxIsa(Isa::kAvx512);
}

TEST_CASE("an event orders work between two streams of the device") {
  ZR_NEED_DEVICE();
  Dev dev;
  auto other = CreateStream(dev.device());
  auto ready = CreateEvent(dev.device());
  const int64_t n = int64_t{1} << 26;  // long enough that an unordered read would see old values
  DBuf a(dev, DType::kF32, n), b(dev, DType::kF32, n);
  Fill(a.data(), 1.0f, n, DType::kF32);
  Fill(a.data(), 2.0f, n, DType::kF32);  // on the test stream
  ready->Record(dev.stream());
  ready->Block(*other);
  {
    KernelDeviceScope on_other(dev.device(), other.get());
    Scale(b.data(), a.data(), 3.0f, n, DType::kF32);  // on the other stream, after the event
  }
  other->Synchronize();
  CHECK(ready->Query());
  Buffer got = b.Get();
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; i += 4093) wrong += got.Get(i) != 6.0;
  CHECK(got.Get(n - 1) == 6.0);
  CHECK(wrong == 0);
}

}  // TEST_SUITE

}  // namespace
}  // namespace zerorun::kernels::test

// Optimizer update kernels: closed-form single steps of the reference, and the fused CPU kernels
// against the reference over several steps, for every gradient dtype, copy dtype, ISA path and the
// sizes 0, 1, 7, 4099 and 1M.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "zerorun/core/cpu_features.h"
#include "zerorun/core/dtype.h"
#include "zerorun/core/rng.h"
#include "zerorun/core/thread_pool.h"
#include "zerorun/kernels/cpu/optim.h"
#include "zerorun/kernels/ref/optim.h"

namespace zk = zerorun::kernels;
using zerorun::DType;

namespace {

struct Buffers {
  std::vector<float> p, m, v;
  std::vector<uint16_t> copy16;
  std::vector<float> copy32;
};

// Gradients of `n` elements in `dt`, from a seeded normal distribution (scaled by `mag`), stored as bytes.
std::vector<uint8_t> MakeGrads(int64_t n, DType dt, uint64_t seed, float mag) {
  std::vector<float> g(static_cast<size_t>(n));
  if (n) zerorun::FillNormal(g.data(), g.size(), seed, 7, 0, 0.0f, mag);
  std::vector<uint8_t> out(static_cast<size_t>(n) * zerorun::DTypeSize(dt) + 1);
  if (n) zerorun::Convert(g.data(), DType::kF32, out.data(), dt, g.size());
  return out;
}

std::vector<float> MakeParams(int64_t n, uint64_t seed) {
  std::vector<float> p(static_cast<size_t>(n) + 1);
  if (n) zerorun::FillUniform(p.data(), static_cast<size_t>(n), seed, 3, 0, -1.0f, 1.0f);
  return p;
}

enum class Rule { kAdamW, kAdamL2, kLion, kSgd, kSgdNesterov, kAdagrad, kLamb, kLambInside };

std::string RuleName(Rule r) {
  switch (r) {
    case Rule::kAdamW: return "adamw";
    case Rule::kAdamL2: return "adam-l2";
    case Rule::kLion: return "lion";
    case Rule::kSgd: return "sgd";
    case Rule::kSgdNesterov: return "sgd-nesterov";
    case Rule::kAdagrad: return "adagrad";
    case Rule::kLamb: return "lamb";
    case Rule::kLambInside: return "lamb-eps-inside";
  }
  return "?";
}

// Runs `steps` updates of `rule` on (p, m, v) with either implementation.
void RunRule(Rule rule, bool fused, int64_t step, zk::OptimSpan s, float* m, float* v) {
  switch (rule) {
    case Rule::kAdamW:
    case Rule::kAdamL2: {
      zk::AdamHyper h;
      h.lr = 1e-2f;
      h.weight_decay = 0.1f;
      h.adam_w_mode = rule == Rule::kAdamW;
      h.step = step;
      fused ? zk::cpu::AdamStep(h, s, m, v) : zk::ref::AdamStep(h, s, m, v);
      break;
    }
    case Rule::kLion: {
      zk::LionHyper h;
      h.lr = 1e-3f;
      h.weight_decay = 0.05f;
      h.step = step;
      fused ? zk::cpu::LionStep(h, s, m) : zk::ref::LionStep(h, s, m);
      break;
    }
    case Rule::kSgd:
    case Rule::kSgdNesterov: {
      zk::SgdHyper h;
      h.lr = 0.05f;
      h.momentum = 0.9f;
      h.dampening = rule == Rule::kSgd ? 0.1f : 0.0f;
      h.nesterov = rule == Rule::kSgdNesterov;
      h.weight_decay = 0.01f;
      h.step = step;
      fused ? zk::cpu::SgdStep(h, s, m) : zk::ref::SgdStep(h, s, m);
      break;
    }
    case Rule::kAdagrad: {
      zk::AdagradHyper h;
      h.lr = 0.1f;
      h.lr_decay = 0.01f;
      h.weight_decay = 0.02f;
      h.step = step;
      fused ? zk::cpu::AdagradStep(h, s, m) : zk::ref::AdagradStep(h, s, m);
      break;
    }
    case Rule::kLamb:
    case Rule::kLambInside: {
      zk::LambHyper h;
      h.lr = 1e-2f;
      h.weight_decay = 0.01f;
      h.eps_inside_sqrt = rule == Rule::kLambInside;
      h.step = step;
      fused ? (void)zk::cpu::LambStep(h, s, m, v) : (void)zk::ref::LambStep(h, s, m, v);
      break;
    }
  }
}

// Max |a-b| / max(1, |b|) over the first n elements.
double MaxRelDiff(const float* a, const float* b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = std::fabs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::fabs(static_cast<double>(b[i])));
    if (!(d <= worst)) worst = d;  // NaN counts as the worst
  }
  return worst;
}

void CompareFusedToRef(Rule rule, int64_t n, DType grad_dt, DType copy_dt, int steps) {
  CAPTURE(RuleName(rule));
  CAPTURE(n);
  const std::string gname = zerorun::DTypeName(grad_dt), cname = zerorun::DTypeName(copy_dt);
  CAPTURE(gname);
  CAPTURE(cname);
  std::vector<float> p_ref = MakeParams(n, 11), p_cpu = p_ref;
  std::vector<float> m_ref(static_cast<size_t>(n) + 1, 0.0f), v_ref = m_ref, m_cpu = m_ref, v_cpu = m_ref;
  const size_t cbytes = static_cast<size_t>(n) * zerorun::DTypeSize(copy_dt) + 2;
  std::vector<uint8_t> c_ref(cbytes, 0xAB), c_cpu(cbytes, 0xAB);
  for (int step = 1; step <= steps; ++step) {
    std::vector<uint8_t> g = MakeGrads(n, grad_dt, 100 + step, 0.5f);
    zk::OptimSpan s;
    s.n = n;
    s.grads = g.data();
    s.grad_dtype = grad_dt;
    s.grad_scale = 0.75f;  // the combined unscale+clip factor is applied inside the pass
    s.copy_dtype = copy_dt;
    s.params = p_ref.data();
    s.param_copy = c_ref.data();
    RunRule(rule, false, step, s, m_ref.data(), v_ref.data());
    s.params = p_cpu.data();
    s.param_copy = c_cpu.data();
    RunRule(rule, true, step, s, m_cpu.data(), v_cpu.data());
  }
  // The fused kernels do the same IEEE operations in the same order. The portable path equals the
  // reference exactly (up to the order of Lamb's double norm sums); SIMD paths may fuse multiply-adds,
  // a last-bit difference per step. Lion's sign(c) can flip where c is within rounding of zero: such
  // an element moves by 2*lr, and must stay rare.
  const bool lamb = rule == Rule::kLamb || rule == Rule::kLambInside;
  const bool exact = zerorun::ActiveIsa() == zerorun::Isa::kScalar && !lamb;
  const double tol = exact ? 0.0 : 2e-5;
  if (rule == Rule::kLion) {
    int64_t flips = 0;
    for (int64_t i = 0; i < n; ++i) {
      double d = std::fabs(static_cast<double>(p_cpu[i]) - p_ref[i]);
      if (d > tol) {
        CHECK(d <= 2.0 * 1e-3 * steps + 1e-5);
        ++flips;
      }
    }
    CHECK(flips <= 1 + n / 10000);
  } else {
    CHECK(MaxRelDiff(p_cpu.data(), p_ref.data(), n) <= tol);
  }
  CHECK(MaxRelDiff(m_cpu.data(), m_ref.data(), n) <= tol);
  CHECK(MaxRelDiff(v_cpu.data(), v_ref.data(), n) <= tol);
  // Nothing past the end was touched.
  CHECK(p_cpu[static_cast<size_t>(n)] == p_ref[static_cast<size_t>(n)]);
  CHECK(c_cpu[cbytes - 1] == 0xAB);
  CHECK(c_cpu[cbytes - 2] == 0xAB);
  // The copy is exactly the conversion of the updated master weights.
  std::vector<uint8_t> expect(cbytes, 0xAB);
  if (n) zerorun::Convert(p_cpu.data(), DType::kF32, expect.data(), copy_dt, static_cast<size_t>(n));
  CHECK(std::memcmp(expect.data(), c_cpu.data(), cbytes) == 0);
  std::vector<uint8_t> expect_ref(cbytes, 0xAB);
  if (n) zerorun::Convert(p_ref.data(), DType::kF32, expect_ref.data(), copy_dt, static_cast<size_t>(n));
  CHECK(std::memcmp(expect_ref.data(), c_ref.data(), cbytes) == 0);
}

const Rule kAllRules[] = {Rule::kAdamW, Rule::kAdamL2,   Rule::kLion, Rule::kSgd,
                          Rule::kSgdNesterov, Rule::kAdagrad, Rule::kLamb, Rule::kLambInside};

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("optim kernels: Adam/AdamW first step from zero state (closed form)") {
    // m = (1-b1) g, v = (1-b2) g^2 and the bias corrections cancel them: the update is -lr*g/(|g|+eps).
    float p[2] = {1.0f, -2.0f};
    float g[2] = {0.5f, -4.0f};
    float m[2] = {0, 0}, v[2] = {0, 0};
    zk::OptimSpan s;
    s.params = p;
    s.grads = g;
    s.n = 2;
    zk::AdamHyper h;
    h.lr = 0.1f;
    h.weight_decay = 0.1f;
    h.adam_w_mode = true;
    zk::ref::AdamStep(h, s, m, v);
    // AdamW: p <- p - lr*wd*p, then p - lr*sign(g)
    CHECK(p[0] == doctest::Approx(1.0 - 0.01 - 0.1).epsilon(1e-6));
    CHECK(p[1] == doctest::Approx(-2.0 + 0.02 + 0.1).epsilon(1e-6));
    CHECK(m[0] == doctest::Approx(0.05).epsilon(1e-6));
    CHECK(v[1] == doctest::Approx(0.001 * 16).epsilon(1e-5));

    // Classic Adam (adam_w_mode false): decay joins the gradient, the step stays -lr*sign.
    float q[1] = {1.0f}, mq[1] = {0}, vq[1] = {0}, gq[1] = {0.5f};
    s.params = q;
    s.grads = gq;
    s.n = 1;
    h.adam_w_mode = false;
    zk::cpu::AdamStep(h, s, mq, vq);
    CHECK(q[0] == doctest::Approx(0.9).epsilon(1e-6));
    CHECK(mq[0] == doctest::Approx(0.1 * 0.6).epsilon(1e-6));  // g + wd*p = 0.6

    // Without bias correction: update = -lr * (1-b1) g / (sqrt(1-b2)|g| + eps).
    float r[1] = {0.0f}, mr[1] = {0}, vr[1] = {0}, gr[1] = {2.0f};
    s.params = r;
    s.grads = gr;
    h = zk::AdamHyper{};
    h.lr = 1.0f;
    h.bias_correction = false;
    zk::cpu::AdamStep(h, s, mr, vr);
    CHECK(r[0] == doctest::Approx(-0.1 * 2.0 / (std::sqrt(0.001) * 2.0)).epsilon(1e-5));
  }

  TEST_CASE("optim kernels: Lion / SGD / Adagrad closed form") {
    float p[3] = {1.0f, 1.0f, 1.0f}, m[3] = {0, 0, 0};
    float g[3] = {0.3f, -2.0f, 0.0f};
    zk::OptimSpan s;
    s.params = p;
    s.grads = g;
    s.n = 3;
    zk::LionHyper lh;
    lh.lr = 0.1f;
    lh.weight_decay = 0.5f;
    lh.beta2 = 0.99f;
    zk::cpu::LionStep(lh, s, m);
    // p*(1 - 0.05) - 0.1*sign(0.1*g)
    CHECK(p[0] == doctest::Approx(0.95 - 0.1));
    CHECK(p[1] == doctest::Approx(0.95 + 0.1));
    CHECK(p[2] == doctest::Approx(0.95));  // sign(0) = 0
    CHECK(m[1] == doctest::Approx(0.01 * -2.0));

    // SGD momentum 0.9, nesterov, constant g = 1, lr 0.1: buf1 = 1, d1 = 1 + 0.9 = 1.9;
    // buf2 = 0.9 + 1 = 1.9, d2 = 1 + 0.9*1.9 = 2.71.
    float q[1] = {0.0f}, buf[1] = {123.0f}, one[1] = {1.0f};
    s.params = q;
    s.grads = one;
    s.n = 1;
    zk::SgdHyper sh;
    sh.lr = 0.1f;
    sh.momentum = 0.9f;
    sh.nesterov = true;
    sh.step = 1;
    zk::cpu::SgdStep(sh, s, buf);
    CHECK(buf[0] == doctest::Approx(1.0));
    CHECK(q[0] == doctest::Approx(-0.19));
    sh.step = 2;
    zk::ref::SgdStep(sh, s, buf);
    CHECK(buf[0] == doctest::Approx(1.9));
    CHECK(q[0] == doctest::Approx(-0.19 - 0.271));

    // Plain SGD with weight decay: p - lr*(g + wd*p).
    float r[1] = {2.0f};
    s.params = r;
    zk::SgdHyper plain;
    plain.lr = 0.5f;
    plain.weight_decay = 0.25f;
    zk::cpu::SgdStep(plain, s, nullptr);
    CHECK(r[0] == doctest::Approx(2.0 - 0.5 * (1.0 + 0.5)));

    // Adagrad: sum = g^2, p - lr*g/(|g|+eps); second step with lr_decay 0.5: clr = lr/1.5.
    float a[1] = {1.0f}, sum[1] = {0.0f}, ga[1] = {3.0f};
    s.params = a;
    s.grads = ga;
    zk::AdagradHyper ah;
    ah.lr = 0.3f;
    ah.lr_decay = 0.5f;
    zk::cpu::AdagradStep(ah, s, sum);
    CHECK(sum[0] == doctest::Approx(9.0));
    CHECK(a[0] == doctest::Approx(0.7));
    ah.step = 2;
    zk::cpu::AdagradStep(ah, s, sum);
    CHECK(a[0] == doctest::Approx(0.7 - 0.2 * 3.0 / std::sqrt(18.0)).epsilon(1e-5));
  }

  TEST_CASE("optim kernels: Lamb trust ratio and clamping (closed form)") {
    // Four weights of 2, gradients of +-1: u = (1-b1)/sqrt(1-b2) * sign(g), ||u|| = 2*0.1/sqrt(0.001),
    // ||p|| = 4, trust = ||p||/||u||, and p <- p - lr*sqrt(1-b2)/(1-b1)*trust*u = p - lr*trust*sign(g).
    float p[4] = {2, 2, 2, 2}, m[4] = {}, v[4] = {};
    float g[4] = {1, -1, 1, -1};
    zk::OptimSpan s;
    s.params = p;
    s.grads = g;
    s.n = 4;
    zk::LambHyper h;
    h.lr = 0.01f;
    h.eps = 0.0f;
    const double trust = 4.0 / (2.0 * 0.1 / std::sqrt(0.001));
    float t = zk::cpu::LambStep(h, s, m, v);
    CHECK(t == doctest::Approx(trust).epsilon(1e-5));
    CHECK(p[0] == doctest::Approx(2.0 - 0.01 * trust).epsilon(1e-5));
    CHECK(p[1] == doctest::Approx(2.0 + 0.01 * trust).epsilon(1e-5));

    zk::LambHyper c;
    c.max_coeff = 0.5f;
    c.min_coeff = 0.25f;
    CHECK(zk::LambTrustRatio(c, {100.0, 1.0}) == doctest::Approx(0.5));
    CHECK(zk::LambTrustRatio(c, {1e-6, 1.0}) == doctest::Approx(0.25));
    CHECK(zk::LambTrustRatio(c, {0.0, 1.0}) == 1.0f);  // zero weights: ratio 1 (not clamped)
    CHECK(zk::LambTrustRatio(c, {1.0, 0.0}) == 1.0f);
    CHECK(zk::LambTrustRatio(c, {0.09, 1.0}) == doctest::Approx(0.3));
  }

  TEST_CASE("optim kernels: grad_scale equals pre-scaled gradients") {
    const int64_t n = 1000;
    std::vector<float> p1 = MakeParams(n, 5), p2 = p1;
    std::vector<float> m1(n, 0), v1(n, 0), m2(n, 0), v2(n, 0);
    std::vector<float> g(n);
    zerorun::FillNormal(g.data(), n, 9, 1, 0, 0.0f, 1.0f);
    std::vector<float> g4(n);
    for (int64_t i = 0; i < n; ++i) g4[i] = g[i] * 4.0f;  // exact
    zk::AdamHyper h;
    zk::OptimSpan a{p1.data(), g.data(), DType::kF32, 1.0f, nullptr, DType::kBF16, n};
    zk::OptimSpan b{p2.data(), g4.data(), DType::kF32, 0.25f, nullptr, DType::kBF16, n};
    zk::cpu::AdamStep(h, a, m1.data(), v1.data());
    zk::cpu::AdamStep(h, b, m2.data(), v2.data());
    CHECK(p1 == p2);
    CHECK(m1 == m2);
  }

  TEST_CASE("optim kernels: fused CPU equals the reference over sizes and dtypes and steps") {
    for (Rule rule : kAllRules) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{4099}}) {
        for (DType gd : {DType::kF32, DType::kF16, DType::kBF16}) {
          CompareFusedToRef(rule, n, gd, gd == DType::kF16 ? DType::kF16 : DType::kBF16, 3);
        }
      }
    }
  }

  TEST_CASE("optim kernels: fused CPU equals the reference at 1M elements") {
    const int64_t n = int64_t{1} << 20;
    for (DType gd : {DType::kF32, DType::kF16, DType::kBF16}) CompareFusedToRef(Rule::kAdamW, n, gd, DType::kBF16, 2);
  }

  TEST_CASE("optim kernels: every ISA path and thread count gives the reference result") {
    zerorun::ThreadPool one(1), three(3);
    for (zerorun::Isa isa : {zerorun::Isa::kScalar, zerorun::Isa::kAvx2, zerorun::Isa::kAvx512}) {
      zerorun::SetMaxIsa(isa);
      const std::string isa_name = zerorun::IsaName(zerorun::ActiveIsa());
      CAPTURE(isa_name);
      for (Rule rule : kAllRules) CompareFusedToRef(rule, 70001, DType::kBF16, DType::kBF16, 2);
    }
    zerorun::SetMaxIsa(zerorun::Isa::kAvx512);
    // Thread counts: same bits.
    const int64_t n = 300000;
    std::vector<float> pa = MakeParams(n, 1), pb = pa, ma(n, 0), va(n, 0), mb(n, 0), vb(n, 0);
    std::vector<uint8_t> g = MakeGrads(n, DType::kF32, 2, 1.0f);
    zk::OptimSpan s{pa.data(), g.data(), DType::kF32, 1.0f, nullptr, DType::kBF16, n};
    zk::LambHyper lh;
    float ta = zk::cpu::LambStep(lh, s, ma.data(), va.data(), &one);
    s.params = pb.data();
    float tb = zk::cpu::LambStep(lh, s, mb.data(), vb.data(), &three);
    CHECK(ta == tb);
    CHECK(pa == pb);
  }
}

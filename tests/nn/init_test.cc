// Initializers: pure functions of (seed, name, index); distribution parameters; shard fills.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "zerorun/runtime/nn/init.h"
#include "zerorun/runtime/nn/module.h"
#include "zerorun/runtime/nn/sequential.h"

namespace zerorun::nn {
namespace {

std::vector<float> Fill(const Init& init, const Shape& shape, uint64_t seed, const char* name) {
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  FillInit(init, shape, seed, name, 0, v.data(), static_cast<int64_t>(v.size()));
  return v;
}

void Moments(const std::vector<float>& v, double* mean, double* stddev) {
  double s = 0, s2 = 0;
  for (float x : v) s += x;
  *mean = s / static_cast<double>(v.size());
  for (float x : v) s2 += (x - *mean) * (x - *mean);
  *stddev = std::sqrt(s2 / static_cast<double>(v.size()));
}

class Leaf final : public Module {
 public:
  Leaf() : Module("Leaf") {
    AddParameter("weight", {33, 17}, DType::kF32, Init::Normal(0.0f, 0.02f));
    AddParameter("weight16", {33, 17}, DType::kBF16, Init::Normal(0.0f, 0.02f));
  }
};

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("nn.init: values depend only on seed and name") {
  auto a = Fill(Init::Normal(0, 1), {100}, 1, "h.0.w");
  CHECK(a == Fill(Init::Normal(0, 1), {100}, 1, "h.0.w"));
  CHECK(a != Fill(Init::Normal(0, 1), {100}, 2, "h.0.w"));
  CHECK(a != Fill(Init::Normal(0, 1), {100}, 1, "h.1.w"));
  // The shape only sets how many elements there are: a prefix is the same numbers.
  auto longer = Fill(Init::Normal(0, 1), {300}, 1, "h.0.w");
  CHECK(std::vector<float>(longer.begin(), longer.begin() + 100) == a);
}

TEST_CASE("nn.init: a shard fill equals the slice of the full fill, for every kind") {
  const Shape shape{37, 29};
  for (Init init : {Init::Zeros(), Init::Ones(), Init::Constant(0.5f), Init::Normal(0.1f, 2.0f),
                    Init::Uniform(-3, 1), Init::XavierUniform(), Init::XavierNormal(), Init::KaimingUniform(),
                    Init::KaimingNormal(), Init::Gpt2Residual(12)}) {
    auto full = Fill(init, shape, 77, "p");
    std::vector<float> shard(101);
    FillInit(init, shape, 77, "p", 555, shard.data(), 101);
    CHECK(std::vector<float>(full.begin() + 555, full.begin() + 656) == shard);
  }
  float x;
  CHECK_THROWS_AS(FillInit(Init::Ones(), {4}, 1, "p", 3, &x, 2), InvalidArgument);
  CHECK_THROWS_AS(Init::Gpt2Residual(0), InvalidArgument);
}

TEST_CASE("nn.init: distributions have the documented parameters") {
  const Shape shape{512, 384};  // fan_out 512, fan_in 384
  double mean, sd;
  Moments(Fill(Init::Normal(0.5f, 0.02f), shape, 3, "n"), &mean, &sd);
  CHECK(mean == doctest::Approx(0.5).epsilon(0.001));
  CHECK(sd == doctest::Approx(0.02).epsilon(0.01));
  Moments(Fill(Init::Gpt2Residual(4), shape, 3, "r"), &mean, &sd);
  CHECK(sd == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.01));
  Moments(Fill(Init::XavierNormal(), shape, 3, "xn"), &mean, &sd);
  CHECK(sd == doctest::Approx(std::sqrt(2.0 / (512 + 384))).epsilon(0.01));
  Moments(Fill(Init::KaimingNormal(), shape, 3, "kn"), &mean, &sd);
  CHECK(sd == doctest::Approx(std::sqrt(2.0 / 384)).epsilon(0.01));
  auto xu = Fill(Init::XavierUniform(), shape, 3, "xu");
  const double xb = std::sqrt(6.0 / (512 + 384));
  float lo = 1e9f, hi = -1e9f;
  for (float v : xu) lo = std::min(lo, v), hi = std::max(hi, v);
  CHECK(hi <= xb);
  CHECK(lo >= -xb);
  CHECK(hi > 0.99 * xb);
  CHECK(lo < -0.99 * xb);
  auto ku = Fill(Init::KaimingUniform(1.0f / std::sqrt(3.0f)), shape, 3, "ku");  // PyTorch Linear default
  float kmax = 0;
  for (float v : ku) kmax = std::max(kmax, std::abs(v));
  CHECK(kmax <= 1.0 / std::sqrt(384.0) + 1e-7);
  CHECK(FanIn({8, 3, 5}) == 15);
  CHECK(FanOut({8, 3, 5}) == 40);
  CHECK(FanIn({7}) == 7);
}

TEST_CASE("nn.init: initial values do not depend on how many modules exist; 16-bit values are rounded fp32") {
  auto build = [](int n) {
    auto s = std::make_unique<Sequential>();
    for (int i = 0; i < n; ++i) s->Append(std::make_unique<Leaf>());
    s->Initialize(42);
    return s;
  };
  auto small = build(2), large = build(5);
  for (const char* name : {"0.weight", "1.weight", "1.weight16"}) {
    CHECK(small->FindParameter(name)->engine_data().ToVector() ==
          large->FindParameter(name)->engine_data().ToVector());
  }
  auto w32 = small->FindParameter("1.weight")->engine_data();
  auto w16 = small->FindParameter("1.weight16")->engine_data();
  auto expect = Fill(Init::Normal(0.0f, 0.02f), {33, 17}, 42, "1.weight16");
  auto got = w16.ToVector();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == BF16BitsToFloat(FloatToBF16Bits(expect[i])));
  CHECK(w32.ToVector() == Fill(Init::Normal(0.0f, 0.02f), {33, 17}, 42, "1.weight"));
}

}  // TEST_SUITE
}  // namespace zerorun::nn

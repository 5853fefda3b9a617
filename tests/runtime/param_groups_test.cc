// Parameter grouping: decay flags, lr multipliers, the 1-D rule, named overrides, frozen parameters.
#include <doctest/doctest.h>

#include "zerorun/core/error.h"
#include "zerorun/runtime/param_groups.h"

using zerorun::DType;
using zerorun::nn::Init;
using zerorun::nn::ParamOptions;
using zerorun::nn::Parameter;
using zerorun::runtime::BuildParamGroups;
using zerorun::runtime::ParamGroupOptions;

TEST_SUITE("unit") {

TEST_CASE("parameters group by decay flag, lr multiplier and name, in model order") {
  Parameter w1("w1", {4, 4}, DType::kF32, Init::Zeros());
  Parameter b1("b1", {4}, DType::kF32, Init::Zeros());
  Parameter w2("w2", {4, 4}, DType::kF32, Init::Zeros());
  Parameter frozen("f", {4, 4}, DType::kF32, Init::Zeros());
  frozen.set_requires_grad(false);
  ParamOptions head;
  head.group = "head";
  head.lr_scale = 0.1f;
  Parameter h("h", {4, 4}, DType::kF32, Init::Zeros(), head);
  std::vector<Parameter*> all = {&w1, &b1, &frozen, &w2, &h};

  auto plain = BuildParamGroups(all, {});
  REQUIRE(plain.size() == 2);
  CHECK(plain[0].params == std::vector<Parameter*>{&w1, &b1, &w2});
  CHECK(plain[1].name == "head");
  CHECK(plain[1].lr_scale == doctest::Approx(0.1));

  ParamGroupOptions opt;
  opt.no_weight_decay_for_1d = true;
  opt.overrides.push_back({"head", 0.5, 0.0});
  auto g = BuildParamGroups(all, opt);
  REQUIRE(g.size() == 3);
  CHECK(g[0].params == std::vector<Parameter*>{&w1, &w2});
  CHECK(g[0].weight_decay);
  CHECK(g[1].params == std::vector<Parameter*>{&b1});
  CHECK_FALSE(g[1].weight_decay);
  CHECK(g[2].lr == 0.5);
  CHECK(g[2].weight_decay_value == 0.0);

  ParamGroupOptions bad;
  bad.overrides.push_back({"nope", 1.0, std::nullopt});
  CHECK_THROWS_WITH_AS(BuildParamGroups(all, bad), doctest::Contains("'nope'"), zerorun::InvalidArgument);
}

}  // TEST_SUITE

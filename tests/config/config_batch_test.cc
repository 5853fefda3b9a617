// Batch resolution (reference deepspeed.md §1.1 and §10.1 items 1-5): DeepSpeed's derivations with
// floor division in its order, then its assertions with its messages.
#include "config_test_util.h"

using namespace zr_config_test;

namespace {
struct Triple {
  int64_t tbs, mbs, gas;
};
Triple Resolve(const std::string& json, int world) {
  const rt::Config c = Load(json, world);
  CHECK(c.train_batch_size() == c.micro_batch_per_gpu() * c.gradient_accumulation_steps() * world);
  return {c.train_batch_size(), c.micro_batch_per_gpu(), c.gradient_accumulation_steps()};
}
bool Same(Triple a, Triple b) { return a.tbs == b.tbs && a.mbs == b.mbs && a.gas == b.gas; }
}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("batch: DeepSpeed TestBatchConfig derivations, W=2") {
    CHECK(Same(Resolve(R"({"train_batch_size":32,"train_micro_batch_size_per_gpu":16,"gradient_accumulation_steps":1})", 2),
               {32, 16, 1}));
    CHECK(Same(Resolve(R"({"train_batch_size":32,"train_micro_batch_size_per_gpu":16})", 2), {32, 16, 1}));
    CHECK(Same(Resolve(R"({"train_batch_size":32})", 2), {32, 16, 1}));
    CHECK(Same(Resolve(R"({"train_micro_batch_size_per_gpu":16})", 2), {32, 16, 1}));
    CHECK(Same(Resolve(R"({"train_batch_size":32,"train_micro_batch_size_per_gpu":8,"gradient_accumulation_steps":2})", 2),
               {32, 8, 2}));
    CHECK(Same(Resolve(R"({"train_batch_size":32,"gradient_accumulation_steps":2})", 2), {32, 8, 2}));
    CHECK(Same(Resolve(R"({"train_micro_batch_size_per_gpu":8,"gradient_accumulation_steps":2})", 2), {32, 8, 2}));
  }

  TEST_CASE("batch: only train_batch_size at W=1 (test_only_required_fields)") {
    CHECK(Same(Resolve(R"({"train_batch_size": 64})", 1), {64, 64, 1}));
  }

  TEST_CASE("batch: inconsistent triples fail with DeepSpeed's assertion, W=2") {
    auto e = Errors(R"({"train_batch_size":33,"train_micro_batch_size_per_gpu":17,"gradient_accumulation_steps":2})", 2);
    CHECK_MESSAGE(Has(e, "train_batch_size", "33 != 17 * 2 * 2"), Dump(e));
    e = Errors(R"({"train_batch_size":33,"train_micro_batch_size_per_gpu":17})", 2);  // gas = (33//17)//2 = 0
    // reported on a key the user wrote, with the derivation
    CHECK_MESSAGE(Has(e, "train_batch_size", "Gradient accumulation steps: 0 has to be greater than 0"), Dump(e));
    CHECK_MESSAGE(Has(e, "train_batch_size", "(33 // 17) // 2 = 0"), Dump(e));
    CHECK_MESSAGE(Has(e, "train_batch_size", "at least train_micro_batch_size_per_gpu × world = 34"), Dump(e));
    e = Errors(R"({"train_batch_size":33,"gradient_accumulation_steps":2})", 2);  // mbs = (33//2)//2 = 8
    CHECK_MESSAGE(Has(e, "train_batch_size", "33 != 8 * 2 * 2"), Dump(e));
    e = Errors(R"({"gradient_accumulation_steps":2})", 2);
    CHECK(Has(e, "train_batch_size", "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided"));
    e = Errors(R"({})", 2);
    CHECK(Has(e, "train_batch_size", "needs to be provided"));
    e = Errors(R"({"train_batch_size":32,"train_micro_batch_size_per_gpu":18,"gradient_accumulation_steps":1})", 2);
    CHECK(Has(e, "train_batch_size", "32 != 18 * 1 * 2"));
    e = Errors(R"({"train_batch_size":32,"train_micro_batch_size_per_gpu":18})", 2);
    CHECK(Has(e, "train_batch_size", "0 has to be greater than 0"));
  }

  TEST_CASE("batch: non-positive values and zero divisors") {
    CHECK(Has(Errors(R"({"train_batch_size":0})"), "train_batch_size", "Train batch size: 0 has to be greater than 0"));
    CHECK(Has(Errors(R"({"train_micro_batch_size_per_gpu":-4})"), "train_micro_batch_size_per_gpu",
              "Micro batch size per gpu: -4 has to be greater than 0"));
    CHECK(Has(Errors(R"({"train_batch_size":8,"train_micro_batch_size_per_gpu":0})"), "train_micro_batch_size_per_gpu",
              "has to be greater than 0"));
    CHECK(Has(Errors(R"({"train_batch_size":8,"gradient_accumulation_steps":0})"), "gradient_accumulation_steps",
              "has to be greater than 0"));
  }

  TEST_CASE("batch: every error names a key the user wrote (issue 13 item 5)") {
    // a given value <= 0 is reported under its own key, never under one derived from it
    auto e = Errors(R"({"train_micro_batch_size_per_gpu": -1})", 2);
    CHECK_MESSAGE(e.size() == 1, Dump(e));
    CHECK_MESSAGE(Has(e, "train_micro_batch_size_per_gpu", "Micro batch size per gpu: -1 has to be greater than 0"), Dump(e));
    e = Errors(R"({"train_batch_size": 8, "gradient_accumulation_steps": -2})", 2);
    CHECK_MESSAGE(e.size() == 1, Dump(e));
    CHECK_MESSAGE(Has(e, "gradient_accumulation_steps", "-2 has to be greater than 0"), Dump(e));
    e = Errors(R"({"train_batch_size": -8, "train_micro_batch_size_per_gpu": 0})", 2);  // both, each on its key
    CHECK_MESSAGE(Has(e, "train_batch_size", "Train batch size: -8"), Dump(e));
    CHECK_MESSAGE(Has(e, "train_micro_batch_size_per_gpu", "Micro batch size per gpu: 0"), Dump(e));
    // "auto" everywhere: both were given, so "needs to be provided" would be false
    e = Errors(R"({"train_batch_size":"auto","train_micro_batch_size_per_gpu":"auto","gradient_accumulation_steps":"auto"})", 2);
    CHECK_MESSAGE(e.size() == 1, Dump(e));
    CHECK_MESSAGE(Has(e, "train_micro_batch_size_per_gpu", "are both \"auto\""), Dump(e));
    CHECK_MESSAGE(!Has(e, "train_batch_size", "needs to be provided"), Dump(e));
    e = Errors(R"({"train_batch_size":"auto","gradient_accumulation_steps":2})", 2);
    CHECK_MESSAGE(Has(e, "train_batch_size", "train_batch_size is \"auto\""), Dump(e));
    // derived and too small: on the written key, with the arithmetic
    e = Errors(R"({"train_batch_size": 1})", 2);
    CHECK_MESSAGE(Has(e, "train_batch_size", "Micro batch size per gpu: 0 has to be greater than 0"), Dump(e));
    CHECK_MESSAGE(Has(e, "train_batch_size", "at least the world size 2"), Dump(e));
    e = Errors(R"({"train_batch_size": 3, "gradient_accumulation_steps": 2})", 2);  // micro = (3//2)//2 = 0
    CHECK_MESSAGE(Has(e, "train_batch_size", "gradient_accumulation_steps × world = 4"), Dump(e));
    // an overflowing derivation names the key that was given
    CHECK(Has(Errors(R"({"train_micro_batch_size_per_gpu":4611686018427387904,"gradient_accumulation_steps":4})"),
              "train_micro_batch_size_per_gpu", "overflow"));
    // a mismatch says which value was derived and how
    e = Errors(R"({"train_batch_size":33,"train_micro_batch_size_per_gpu":16})", 2);
    CHECK_MESSAGE(Has(e, "train_batch_size", "33 != 16 * 1 * 2 (gradient_accumulation_steps derived as"), Dump(e));
  }

  TEST_CASE("batch: world sizes 1..8 with odd ones") {
    for (int w = 1; w <= 8; ++w) {
      CHECK(Same(Resolve(R"({"train_micro_batch_size_per_gpu":3,"gradient_accumulation_steps":5})", w), {15 * w, 3, 5}));
      const std::string tbs = std::to_string(12 * w);
      CHECK(Same(Resolve(R"({"train_batch_size":)" + tbs + R"(,"gradient_accumulation_steps":4})", w), {12 * w, 3, 4}));
    }
    // 7 ranks, 30 samples: (30 // 7) = 4 per rank with gas 1 → 28 != 30.
    CHECK(Has(Errors(R"({"train_batch_size":30})", 7), "train_batch_size", "30 != 4 * 1 * 7"));
  }

  TEST_CASE("batch: \"auto\" batch keys are derived from the others; provenance says so") {
    const rt::Config c =
        Load(R"({"train_batch_size":"auto","train_micro_batch_size_per_gpu":4,"gradient_accumulation_steps":"auto"})", 2);
    CHECK(c.train_batch_size() == 8);
    CHECK(c.gradient_accumulation_steps() == 1);
    REQUIRE(c.ProvenanceOf("train_batch_size") != nullptr);
    CHECK(c.ProvenanceOf("train_batch_size")->kind == rt::Provenance::Kind::kAuto);
    CHECK(c.ProvenanceOf("train_micro_batch_size_per_gpu")->kind == rt::Provenance::Kind::kFile);
    CHECK(Has(Errors(R"({"train_batch_size":"auto"})"), "train_batch_size", "train_batch_size is \"auto\" but nothing to derive it from"));
  }

  TEST_CASE("batch: derived values carry their formula") {
    const rt::Config c = Load(R"({"train_batch_size":32,"train_micro_batch_size_per_gpu":8})", 2);
    const rt::Provenance* p = c.ProvenanceOf("gradient_accumulation_steps");
    REQUIRE(p != nullptr);
    CHECK(p->kind == rt::Provenance::Kind::kDerived);
    CHECK(p->detail.find("(32 // 8) // 2") != std::string::npos);
  }
}

// Parsing rules (reference deepspeed.md §0): comments and trailing commas, duplicate keys, syntax errors
// with line and column, DeepSpeed's typing of numbers/bools/strings, unknown keys with suggestions,
// "auto", and that every problem is reported at once.
#include <cstdlib>

#include "config_test_util.h"

using namespace zr_config_test;
using zerorun::Format;

TEST_SUITE("unit") {
  TEST_CASE("parse: comments and trailing commas are accepted (hjson-like)") {
    const rt::Config c = Load("{\n  // a comment\n  \"train_batch_size\": 8, /* block */\n  \"fp16\": {\"enabled\": true,},\n}");
    CHECK(c.train_batch_size() == 8);
    CHECK(c.fp16.enabled);
  }

  TEST_CASE("parse: syntax errors name source, line and column") {
    rt::LoadOptions o = Opts();
    o.source_name = "ds.json";
    auto e = Errors("{\n  \"train_batch_size\": 8\n  \"fp16\": {}\n}", o);
    REQUIRE(e.size() == 1);
    CHECK(e[0].path == "ds.json:3:3");  // the missing comma is noticed at the next key
    CHECK(e[0].message.find("syntax error") != std::string::npos);
    e = Errors("{\"a\": tru}", o);
    REQUIRE(e.size() == 1);
    CHECK(e[0].path.rfind("ds.json:1:", 0) == 0);
    e = Errors("{\"train_batch_size\": NaN}", o);  // NaN/Infinity literals are not JSON
    REQUIRE(e.size() == 1);
    CHECK(e[0].path == "ds.json:1:22");
    e = Errors("", o);
    REQUIRE(e.size() == 1);
    CHECK(e[0].path == "ds.json:1:1");
    e = Errors("{} {}", o);
    REQUIRE(e.size() == 1);
    CHECK(e[0].path == "ds.json:1:4");
  }

  TEST_CASE("parse: the root must be an object") {
    auto e = Errors("[1, 2]");
    REQUIRE(e.size() == 1);
    CHECK(e[0].message.find("expected a JSON object") != std::string::npos);
  }

  TEST_CASE("parse: duplicate keys at any level are errors naming them (test_config_duplicate_key)") {
    auto e = Errors(R"({"train_batch_size": 8, "train_batch_size": 8,})");
    CHECK_MESSAGE(Has(e, "train_batch_size", "Duplicate keys"), Dump(e));
    e = Errors(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1, "stage": 2}})");
    CHECK_MESSAGE(Has(e, "zero_optimization.stage", "Duplicate keys in DeepSpeed config: [\"stage\"]"), Dump(e));
  }

  TEST_CASE("parse: nesting is bounded") {
    std::string deep(100000, '[');
    auto e = Errors("{\"x\": " + deep);
    CHECK(e.size() == 1);  // a syntax error, not a stack overflow
    std::string nested = "{\"x\": " + std::string(100, '[') + std::string(100, ']') + "}";
    e = Errors(nested);
    REQUIRE(e.size() == 1);
    CHECK(e[0].path.rfind("x[0][0][0]", 0) == 0);
    CHECK(e[0].message == "nesting deeper than 64 levels");
  }

  TEST_CASE("types: integers may be written 5e8, not 5.5; pydantic sections take \"500\"") {
    const rt::Config c = Load(R"({"train_batch_size": 8, "zero_optimization": {"reduce_bucket_size": 5e8,
        "allgather_bucket_size": "200", "stage3_prefetch_bucket_size": 1.2e7}})");
    CHECK(c.zero_optimization.reduce_bucket_size == 500000000);
    CHECK(c.zero_optimization.allgather_bucket_size == 200);
    CHECK(c.zero_optimization.prefetch_bucket_size == 12000000);
    auto e = Errors(R"({"train_batch_size": 8, "zero_optimization": {"reduce_bucket_size": 5.5}})");
    CHECK_MESSAGE(Has(e, "zero_optimization.reduce_bucket_size", "fractional part"), Dump(e));
    e = Errors(R"({"train_batch_size": 8, "zero_optimization": {"reduce_bucket_size": "5e8"}})");
    CHECK(Has(e, "zero_optimization.reduce_bucket_size", "expected an integer >= 0; found \"5e8\""));
    e = Errors(R"({"train_batch_size": 8, "zero_optimization": {"sub_group_size": -1}})");
    CHECK(Has(e, "zero_optimization.sub_group_size", "expected an integer >= 0; found -1"));
    e = Errors(R"({"train_batch_size": 8, "zero_optimization": {"stage": 4}})");
    CHECK(Has(e, "zero_optimization.stage", "expected an integer in [0, 3]; found 4"));
    e = Errors(R"({"train_batch_size": 8, "zero_optimization": {"stage": "DS"}})");  // test_config_base_literalfail
    CHECK(Has(e, "zero_optimization.stage", "found \"DS\""));
    // Dict-parsed sections (top level) keep JSON types strictly.
    e = Errors(R"({"train_batch_size": "8"})");
    CHECK(Has(e, "train_batch_size", "expected an integer; found \"8\""));
    e = Errors(R"({"train_batch_size": 8.5})");
    CHECK(Has(e, "train_batch_size", "fractional part"));
  }

  TEST_CASE("types: pydantic bool coercions apply in pydantic sections only") {
    const rt::Config c = Load(R"({"train_batch_size": 8, "fp16": {"enabled": "yes"}, "zero_optimization": {"overlap_comm": 0}})");
    CHECK(c.fp16.enabled);
    CHECK(c.zero_optimization.overlap_comm == false);
    CHECK(Has(Errors(R"({"train_batch_size": 8, "fp16": {"enabled": 2}})"), "fp16.enabled", "expected a boolean; found 2"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "prescale_gradients": "yes"})"), "prescale_gradients", "expected a boolean"));
    CHECK(Has(Errors(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"betas": "0.9"}}})"),
              "optimizer.params.betas", "expected a list of 2 numbers"));
  }

  TEST_CASE("types: fp16.loss_scale validation (test_precision_config_loss_scale)") {
    for (const char* ok : {"0", "1", "2.0", "\"3\""}) {
      const std::string j = std::string(R"({"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": )") + ok + "}}";
      CHECK_MESSAGE(Errors(j).empty(), ok);
    }
    CHECK(Load(R"({"train_batch_size": 8, "fp16": {"loss_scale": "3"}})").fp16.loss_scale == 3.0);
    for (const char* bad : {"-1", "true", "[]", "{}", "\"inf\"", "\"nan\"", "\"1e999\""}) {
      const std::string j = std::string(R"({"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": )") + bad + "}}";
      auto e = Errors(j);
      CHECK_MESSAGE(Has(e, "fp16.loss_scale", "a number"), std::string(bad), " → ", Dump(e));
    }
  }

  TEST_CASE("types: dynamic-scale window and min (test_precision_config_dynamic_scale)") {
    for (const char* key : {"loss_scale_window", "min_loss_scale"}) {
      for (const char* bad : {"0", "-1"}) {
        const std::string j = Format(R"({{"train_batch_size": 8, "fp16": {{"enabled": true, "loss_scale": 0, "{}": {}}}}})",
                                     key, bad);
        CHECK_MESSAGE(Has(Errors(j), std::string("fp16.") + key, "> 0"), j);
        // Static scale or disabled fp16: accepted unchanged.
        const std::string s = Format(R"({{"train_batch_size": 8, "fp16": {{"enabled": true, "loss_scale": 128, "{}": {}}}}})",
                                     key, bad);
        CHECK_MESSAGE(Errors(s).empty(), s);
        const std::string d = Format(R"({{"train_batch_size": 8, "fp16": {{"enabled": false, "{}": {}}}}})", key, bad);
        CHECK_MESSAGE(Errors(d).empty(), d);
      }
      for (const char* bad : {"true", "\"abc\"", "null", "1.5"}) {
        const std::string j = Format(R"({{"train_batch_size": 8, "fp16": {{"enabled": true, "{}": {}}}}})", key, bad);
        CHECK_MESSAGE(Has(Errors(j), std::string("fp16.") + key, "expected an integer"), j);
      }
    }
  }

  TEST_CASE("unknown keys: errors with a did-you-mean, at every level") {
    auto e = Errors(R"({"train_batch_size": 8, "gradient_clipp1ng": 1.0})");
    CHECK(Has(e, "gradient_clipp1ng", "did you mean \"gradient_clipping\""));
    e = Errors(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_sise": 5e7}})");
    CHECK(Has(e, "zero_optimization.stage3_prefetch_bucket_sise", "did you mean \"stage3_prefetch_bucket_size\""));
    e = Errors(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimiser": {"device": "cpu"}}})");
    CHECK(Has(e, "zero_optimization.offload_optimiser", "did you mean \"offload_optimizer\""));
    e = Errors(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"devcie": "cpu"}}})");
    CHECK(Has(e, "zero_optimization.offload_param.devcie", "did you mean \"device\""));
    e = Errors(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"weight_decy": 0.1}}})");
    CHECK(Has(e, "optimizer.params.weight_decy", "did you mean \"weight_decay\""));
    e = Errors(R"({"train_batch_size": 8, "zero_optimization": {"grad_hooks": true}})");  // docs-only key
    CHECK(Has(e, "zero_optimization.grad_hooks", "unknown key"));
    e = Errors(R"({"train_batch_size": 8, "zero_optimization": {"aio": {}}})");  // aio is top level
    CHECK(Has(e, "zero_optimization.aio", "\"aio\" is a top-level key"));
    e = Errors(R"({"train_batch_size": 8, "optimizer": {"type": "adamw", "params": {"lr": 1}}, "scheduler": {"type": "WarmupLr"}})");
    CHECK(Has(e, "scheduler.type", "did you mean \"WarmupLR\""));  // scheduler names are case-sensitive
  }

  TEST_CASE("unknown keys: the switch turns them into warnings (option and env)") {
    const std::string j = R"({"train_batch_size": 8, "my_key": 1, "fp16": {"enabld": true}})";
    CHECK(Errors(j).size() == 2);
    rt::LoadOptions o = Opts();
    o.allow_unknown_keys = true;
    const rt::Config c = rt::LoadConfigString(j, o);
    CHECK(c.warnings().size() == 2);
    CHECK(c.fp16.enabled == false);
    setenv("ZERORUN_ALLOW_UNKNOWN_CONFIG", "1", 1);
    CHECK(Errors(j).empty());
    unsetenv("ZERORUN_ALLOW_UNKNOWN_CONFIG");
    CHECK(Errors(j).size() == 2);
  }

  TEST_CASE("DeepSpeed keys zerorun does not implement load with one warning each, or are refused by the engine") {
    const rt::Config c = Load(R"({"train_batch_size": 8, "pipeline": {"stages": 2}, "sparse_attention": {"mode": "fixed"},
        "zero_optimization": {"stage": 3, "zero_quantized_weights": true, "zero_quantized_gradients": false},
        "autotuning": {"enabled": false}, "optimizer": {"type": "AdamW"}})");
    std::vector<std::string> paths;
    for (const auto& w : c.warnings()) paths.push_back(w.path);
    CHECK(paths == std::vector<std::string>{"pipeline", "sparse_attention"});  // autotuning is off: nothing to say
    const auto refused = rt::UnsupportedKeys(c);
    REQUIRE(refused.size() == 1);  // quantized weights change the numerics; false gradients are the default
    CHECK(refused[0].path == "zero_optimization.zero_quantized_weights");
    CHECK(refused[0].message.find("ZeRO++ quantized communication is not implemented") != std::string::npos);
  }

  TEST_CASE("\"auto\" is resolved where derivable, refused elsewhere, never dropped") {
    auto e = Errors(R"({"train_batch_size": 8, "gradient_clipping": "auto", "fp16": {"enabled": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})");
    CHECK(Has(e, "gradient_clipping", "which zerorun cannot resolve"));
    CHECK(Has(e, "fp16.enabled", "which zerorun cannot resolve"));
    CHECK(Has(e, "optimizer.params.lr", "which zerorun cannot resolve"));
    const std::string zero_auto = R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}})";
    e = Errors(zero_auto);
    CHECK(Has(e, "zero_optimization.reduce_bucket_size", "hidden size"));
    CHECK(Has(e, "zero_optimization.prefetch_bucket_size", "hidden size"));
    rt::LoadOptions o = Opts();
    o.hidden_size = 1024;
    const rt::Config c = rt::LoadConfigString(zero_auto, o);
    CHECK(c.zero_optimization.reduce_bucket_size == 1024 * 1024);
    CHECK(c.zero_optimization.prefetch_bucket_size == 943718);  // int(0.9 * 1024²)
    CHECK(c.zero_optimization.param_persistence_threshold == 10240);
    CHECK(c.ProvenanceOf("zero_optimization.reduce_bucket_size")->kind == rt::Provenance::Kind::kAuto);
  }

  TEST_CASE("all problems are reported together; the message lists them one per line") {
    const std::string j = R"({"train_batch_size": 8, "gradient_clipping": -1, "fp16": {"enabled": true, "hysteresis": "x"},
        "zero_optimization": {"stage": 9}, "bogus": 1})";
    try {
      rt::LoadConfigString(j, Opts());
      FAIL("expected ConfigLoadError");
    } catch (const rt::ConfigLoadError& err) {
      CHECK(err.issues().size() == 4);
      const std::string what = err.what();
      CHECK(what.find("4 problems") != std::string::npos);
      CHECK(what.find("\n  gradient_clipping: expected a number >= 0; found -1") != std::string::npos);
      CHECK(what.find("\n  zero_optimization.stage: ") != std::string::npos);
      const zerorun::ConfigError& base = err;  // catchable as the core ConfigError
      CHECK(std::string(base.what()) == what);
    }
  }

  TEST_CASE("files: missing file is an IoError naming it; source names the file in syntax errors") {
    CHECK_THROWS_AS(rt::LoadConfigFile("/nonexistent/ds_config.json"), zerorun::IoError);
    CHECK_THROWS_AS(rt::LoadConfigFile("/tmp"), zerorun::IoError);
    CHECK_THROWS_WITH_AS(rt::LoadConfigFile("/dev/zero"), "config file /dev/zero is larger than 64 MiB", zerorun::IoError);
  }
}

TEST_SUITE("unit") {
  TEST_CASE("absurd inputs: problems are capped at 200 plus a count; many unknown keys stay fast") {
    std::string j = "{\"train_batch_size\": 8";
    for (int i = 0; i < 20000; ++i) j += ", \"k" + std::to_string(i) + "\": 1";
    j += "}";
    auto e = Errors(j);
    REQUIRE(e.size() == 201);
    CHECK(e.back().path.empty());
    CHECK(e.back().message == "... and 19800 more problems not shown");
    rt::LoadOptions o = Opts();
    o.allow_unknown_keys = true;
    const rt::Config c = rt::LoadConfigString(j, o);
    CHECK(c.warnings().size() == 201);
  }
}

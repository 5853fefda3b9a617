// No key accepted in silence: every key of the schema has a declared disposition (acted, warned with a
// reason, refused with a reason, or following another key), and the declaration is what loading and
// ValidateForEngine do — each warned key set to a value other than its default warns once naming it,
// each refused key makes the engine's check (or the loader) fail naming it, and acted keys do not warn.
#include <cmath>
#include <cstdlib>
#include <set>

#include "config_test_util.h"
#include "zerorun/runtime/engine_validate.h"

using namespace zr_config_test;

namespace {

bool IsAliasOrDeprecated(const rt::SchemaEntry& e) {
  return e.status.rfind("alias of", 0) == 0 || e.status.rfind("deprecated", 0) == 0;
}
bool IsSection(const rt::SchemaEntry& e) { return e.type.rfind("object", 0) == 0; }

std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1) {
    parts.push_back(path.substr(start, dot - start));
  }
  parts.push_back(path.substr(start));
  return parts;
}

// `path` = value as the members of a JSON object, nested: "a": {"b": value}.
std::string Nested(const std::string& path, const std::string& value) {
  const std::vector<std::string> parts = Split(path);
  std::string open, close;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    open += "\"" + parts[i] + "\": {";
    close += "}";
  }
  return open + "\"" + parts.back() + "\": " + value + close;
}

// A value of the entry's type other than its default, or "" when the test cannot make one.
std::string OtherValue(const rt::SchemaEntry& e) {
  const std::string& t = e.type;
  const std::string& d = e.default_text;
  if (t == "any" || IsSection(e)) return "{}";
  if (t.rfind("bool", 0) == 0) return d == "true" ? "false" : "true";
  if (t.rfind("int", 0) == 0) {
    if (d == "null" || d == "derived") return "2";
    const long long v = std::strtoll(d.c_str(), nullptr, 10);
    return std::to_string(v == INT64_MAX ? v - 1 : v + 1);
  }
  if (t.rfind("float", 0) == 0) {
    if (d == "null") return "0.5";
    const double v = std::strtod(d.c_str(), nullptr);
    return std::to_string(v > 0 ? v / 2 : 0.5);
  }
  if (t.rfind("string", 0) == 0) return "\"x\"";
  if (t.rfind("list of 2 floats", 0) == 0) return "[0.5, 0.5]";
  if (t.rfind("list of floats", 0) == 0) return "[0.5]";
  if (t.rfind("list of ints", 0) == 0) return "[2]";
  if (t.rfind("list of strings", 0) == 0) return "[\"all_reduce\"]";
  if (t.rfind("one of ", 0) == 0) {
    std::string names = t.substr(7);
    if (const size_t sp = names.find(' '); sp != std::string::npos) names = names.substr(0, sp);  // "... or null"
    size_t start = 0;
    while (start <= names.size()) {
      const size_t slash = std::min(names.find('/', start), names.size());
      const std::string n = names.substr(start, slash - start);
      if ("\"" + n + "\"" != d) return "\"" + n + "\"";
      start = slash + 1;
    }
  }
  return "";
}

// The other keys a config needs so that `e` is read at all (its optimizer or scheduler type).
std::string Context(const rt::SchemaEntry& e) {
  std::string c = "\"train_batch_size\": 8, ";
  const std::string first = e.variant.substr(0, e.variant.find(','));
  if (e.path.rfind("optimizer.params", 0) == 0) c += "\"optimizer\": {\"type\": \"" + first + "\", \"params\": {";
  else if (e.path.rfind("scheduler.params", 0) == 0) c += "\"scheduler\": {\"type\": \"" + first + "\", \"params\": {";
  else if (e.path.rfind("optimizer", 0) != 0) c += "\"optimizer\": {\"type\": \"AdamW\"}, ";
  return c;
}

std::string ConfigWith(const rt::SchemaEntry& e, const std::string& value) {
  if (e.path == "optimizer.type") return "{\"train_batch_size\": 8, \"optimizer\": {\"type\": " + value + "}}";
  if (e.path == "optimizer.legacy_fusion") {
    return "{\"train_batch_size\": 8, \"optimizer\": {\"type\": \"AdamW\", \"legacy_fusion\": " + value + "}}";
  }
  const std::string ctx = Context(e);
  if (e.path.rfind("optimizer.params.", 0) == 0 || e.path.rfind("scheduler.params.", 0) == 0) {
    const std::string key = e.path.substr(e.path.rfind('.') + 1);
    return "{" + ctx + "\"" + key + "\": " + value + "}}}";
  }
  return "{" + ctx + Nested(e.path, value) + "}";
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("dispositions: every key of the schema has one, and every row names a key of the schema") {
    std::set<std::string> schema_paths;
    int keys = 0;
    for (const rt::SchemaEntry& e : rt::ConfigSchema()) {
      schema_paths.insert(e.path);
      if (IsAliasOrDeprecated(e) || IsSection(e)) continue;
      ++keys;
      CHECK_MESSAGE(rt::FindKeyDisposition(e.path) != nullptr, "key ", e.path,
                    " has no disposition: add its row to runtime/config/config_dispositions.cc (acted, warned with "
                    "why, refused with why, or follows another key)");
      CHECK_MESSAGE(!e.status.empty(), e.path);
    }
    CHECK(keys > 250);
    std::set<std::string> rows;
    for (const rt::KeyDisposition& d : rt::KeyDispositions()) {
      CHECK_MESSAGE(rows.insert(d.path).second, "two rows for ", d.path);
      CHECK_MESSAGE(schema_paths.count(d.path) == 1, "row ", d.path, " names no key of the schema");
      CHECK_MESSAGE(std::string(d.why).size() > 3, d.path, ": a disposition says why");
      if (d.use == rt::KeyUse::kFollows) {
        const rt::KeyDisposition* target = rt::FindKeyDisposition(d.why);
        CHECK_MESSAGE(target != nullptr, d.path, " follows ", d.why, ", which has no row");
        if (target) CHECK_MESSAGE(target->use != rt::KeyUse::kFollows, d.path, " follows a key that follows");
      }
    }
  }

  TEST_CASE("dispositions: warned keys warn once naming themselves; refused keys are refused; acted keys do not warn") {
    int warned = 0, refused = 0, acted = 0;
    for (const rt::SchemaEntry& e : rt::ConfigSchema()) {
      if (IsAliasOrDeprecated(e) || e.type == "refused") continue;
      const rt::KeyDisposition* d = rt::FindKeyDisposition(e.path);
      if (d == nullptr) continue;  // a section: its keys carry the rows
      const std::string value = OtherValue(e);
      REQUIRE_MESSAGE(!value.empty(), "no other value for ", e.path, " of type ", e.type);
      const std::string json = ConfigWith(e, value);
      INFO(json);
      std::vector<rt::ConfigIssue> load_errors, engine_errors, warnings;
      try {
        const rt::Config c = rt::LoadConfigString(json, Opts());
        warnings = c.warnings();
        engine_errors = rt::EngineConfigProblems(c, 1);
      } catch (const rt::ConfigLoadError& err) {
        load_errors = err.issues();
      }
      int no_effect = 0;
      for (const rt::ConfigIssue& w : warnings) {
        if (w.path == e.path && w.message.rfind("accepted, has no effect in zerorun because ", 0) == 0) ++no_effect;
      }
      switch (d->use) {
        case rt::KeyUse::kWarned:
          ++warned;
          CHECK_MESSAGE(load_errors.empty(), Dump(load_errors));
          CHECK_MESSAGE(engine_errors.empty(), Dump(engine_errors));
          CHECK_MESSAGE(no_effect == 1, e.path, ": expected one \"has no effect\" warning\n", Dump(warnings));
          break;
        case rt::KeyUse::kRefused:
          ++refused;
          CHECK_MESSAGE((Has(load_errors, e.path) || Has(engine_errors, e.path)), e.path, " was not refused\n",
                        Dump(load_errors), Dump(engine_errors));
          break;
        case rt::KeyUse::kActed:
        case rt::KeyUse::kFollows:
          ++acted;
          CHECK_MESSAGE(no_effect == 0, e.path, " is declared ", rt::KeyUseName(d->use), " but warned");
          break;
      }
    }
    CHECK(warned > 30);
    CHECK(refused > 15);
    CHECK(acted > 100);
  }

  TEST_CASE("dispositions: refusals name the value, the reason and what to write; provenance shows translations") {
    rt::Config c = Load(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"},
        "bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true},
        "zero_optimization": {"stage": 2, "cpu_offload": true}, "mup": {"width": 2}})");
    const auto problems = rt::EngineConfigProblems(c, 1);
    CHECK(problems.size() == 3);  // CPU optimizer offload (from cpu_offload) is acted on
    CHECK(Has(problems, "bf16.bf16_optimizer_states", "true is not supported by zerorun: zerorun keeps fp32 master"));
    CHECK(Has(problems, "bf16.bf16_optimizer_states", "remove the key or write false"));
    CHECK(c.zero_optimization.OptimizerOffload() == rt::OffloadDevice::kCpu);
    CHECK(Has(problems, "mup", "the section is not supported by zerorun: muP"));
    CHECK_THROWS_AS(rt::ValidateForEngine(c, 1), rt::ConfigLoadError);
    // Hand-made configs are checked by value, not by what a file said.
    rt::Config h = Load(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW"}})");
    CHECK(rt::EngineConfigProblems(h, 1).empty());
    h.batch.managed_gradient_accumulation = false;
    h.zero_optimization.offload_param.emplace();
    CHECK(rt::EngineConfigProblems(h, 1).size() == 1);  // an offload_param section with device "none" is fine
    h.zero_optimization.offload_param->device = rt::OffloadDevice::kCpu;  // parameter offload is acted on
    CHECK(rt::EngineConfigProblems(h, 1).size() == 1);
    h.zero_optimization.offload_optimizer.emplace();
    h.zero_optimization.offload_optimizer->ratio = 0.5;
    CHECK(Has(rt::EngineConfigProblems(h, 1), "zero_optimization.offload_optimizer.ratio", "0.5"));
    CHECK(Has(rt::EngineConfigProblems(h, 1), "managed_gradient_accumulation", "false is not supported"));
  }

  TEST_CASE("ValidateForEngine: world size, data_parallel_size, a missing optimizer") {
    const rt::Config c = Load(R"({"train_micro_batch_size_per_gpu": 2, "data_parallel_size": 2})", 2);
    const auto p = rt::EngineConfigProblems(c, 3);
    CHECK(Has(p, "", "resolved for a data-parallel world of 2 ranks but the job has 3"));
    CHECK(Has(p, "data_parallel_size", "2 but the job has 3 ranks"));
    CHECK(Has(p, "optimizer", "no optimizer section"));
    CHECK(p.size() == 3);
    const rt::Config ok = Load(R"({"train_micro_batch_size_per_gpu": 2, "data_parallel_size": 2,
        "optimizer": {"type": "Lion"}})", 2);
    CHECK(rt::EngineConfigProblems(ok, 2).empty());
  }

  TEST_CASE("dispositions: features with a switch are refused only when switched on") {
    auto problems = [](const std::string& j) { return rt::EngineConfigProblems(Load(j), 1); };
    const std::string base = R"("train_batch_size": 8, "optimizer": {"type": "AdamW"})";
    CHECK(problems("{" + base + R"(, "progressive_layer_drop": {"enabled": false, "theta": 0.5, "gamma": 0.001}})").empty());
    CHECK(Has(problems("{" + base + R"(, "progressive_layer_drop": {"enabled": true, "theta": 0.5}})"),
              "progressive_layer_drop.enabled", "progressive layer drop"));
    CHECK(problems("{" + base + R"(, "torch_autocast": {"enabled": false, "dtype": "bfloat16"}})").empty());
    CHECK(Has(problems("{" + base + R"(, "torch_autocast": {"enabled": "true"}})"), "torch_autocast.enabled"));
    // autotuning is acted on by zerorun-sweep --autotune; the engine, like DeepSpeed's, ignores it silently.
    const rt::Config a = Load("{" + base + R"(, "autotuning": {"enabled": true, "fast": true}})");
    CHECK(!Has(a.warnings(), "autotuning.enabled"));
    CHECK(rt::EngineConfigProblems(a, 1).empty());
  }
}

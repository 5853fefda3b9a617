// Strict parsing of a sweep spec with RapidJSON: each object is read through `Fields`, which knows
// the keys it accepts and, at the end, names any other key with the closest accepted one.
#include "zerorun/experiments/spec.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "zerorun/core/error.h"
#include "zerorun/experiments/expr.h"
#include "zerorun/experiments/json_path.h"

namespace zerorun::experiments {
namespace {

using rapidjson::Value;

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string ToJson(const Value& v) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  v.Accept(w);
  return sb.GetString();
}

const char* TypeName(const Value& v) {
  if (v.IsNull()) return "null";
  if (v.IsBool()) return "a boolean";
  if (v.IsNumber()) return "a number";
  if (v.IsString()) return "a string";
  if (v.IsArray()) return "an array";
  return "an object";
}

// The members of one JSON object, read key by key; Finish() refuses the keys nobody read.
class Fields {
 public:
  Fields(const Value& obj, std::string where, std::string source)
      : obj_(obj), where_(std::move(where)), source_(std::move(source)) {
    if (!obj.IsObject()) Fail(where_, Format("expected an object, got {}", TypeName(obj)));
  }
  [[noreturn]] void Fail(const std::string& place, const std::string& what) const {
    ZR_THROW(InvalidArgument, "{}: {}: {}", source_, place.empty() ? "(top level)" : place, what);
  }
  std::string Place(const std::string& key) const { return where_.empty() ? key : where_ + "." + key; }
  const Value* Get(const std::string& key) {
    known_.insert(key);
    auto it = obj_.FindMember(key.c_str());
    return it == obj_.MemberEnd() ? nullptr : &it->value;
  }
  bool Has(const std::string& key) { return Get(key) != nullptr; }
  std::string String(const std::string& key, const std::string& def) {
    const Value* v = Get(key);
    if (!v) return def;
    if (!v->IsString()) Fail(Place(key), Format("expected a string, got {}", TypeName(*v)));
    return v->GetString();
  }
  double Number(const std::string& key, double def, double min, double max) {
    const Value* v = Get(key);
    if (!v) return def;
    if (!v->IsNumber()) Fail(Place(key), Format("expected a number, got {}", TypeName(*v)));
    double x = v->GetDouble();
    if (!(x >= min && x <= max)) Fail(Place(key), Format("{} is out of range [{}, {}]", x, min, max));
    return x;
  }
  int64_t Int(const std::string& key, int64_t def, int64_t min, int64_t max) {
    const Value* v = Get(key);
    if (!v) return def;
    if (!v->IsInt64()) Fail(Place(key), Format("expected an integer, got {}", v->IsNumber() ? ToJson(*v) : TypeName(*v)));
    int64_t x = v->GetInt64();
    if (x < min || x > max) Fail(Place(key), Format("{} is out of range [{}, {}]", x, min, max));
    return x;
  }
  void Finish() const {
    for (auto it = obj_.MemberBegin(); it != obj_.MemberEnd(); ++it) {
      std::string key = it->name.GetString();
      if (known_.count(key)) continue;
      std::string best;
      size_t best_d = 1000;
      for (const std::string& k : known_) {
        size_t d = EditDistance(key, k);
        if (d < best_d) best_d = d, best = k;
      }
      std::string hint = best_d <= std::max<size_t>(2, key.size() / 3) ? Format(" (did you mean '{}'?)", best) : "";
      std::string all;
      for (const std::string& k : known_) all += (all.empty() ? "" : ", ") + k;
      Fail(Place(key), Format("unknown key{}; known here: {}", hint, all));
    }
  }

 private:
  const Value& obj_;
  std::string where_, source_;
  std::set<std::string> known_;
};

std::vector<std::string> StringArray(Fields& f, const std::string& key) {
  std::vector<std::string> out;
  const Value* v = f.Get(key);
  if (!v) return out;
  if (!v->IsArray()) f.Fail(f.Place(key), Format("expected an array of strings, got {}", TypeName(*v)));
  for (rapidjson::SizeType i = 0; i < v->Size(); ++i) {
    if (!(*v)[i].IsString()) f.Fail(Format("{}[{}]", f.Place(key), i), "expected a string");
    out.push_back((*v)[i].GetString());
  }
  return out;
}

std::pair<double, double> Bounds(Fields& f, const Value& v, const std::string& place, bool integer) {
  if (!v.IsArray() || v.Size() != 2 || !v[0].IsNumber() || !v[1].IsNumber()) {
    f.Fail(place, Format("expected [low, high] (two {}), got {}", integer ? "integers" : "numbers", ToJson(v)));
  }
  if (integer && (!v[0].IsInt64() || !v[1].IsInt64())) f.Fail(place, "expected integer bounds");
  double lo = v[0].GetDouble(), hi = v[1].GetDouble();
  if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) f.Fail(place, Format("low {} must be <= high {}", lo, hi));
  return {lo, hi};
}

ParamSpec ParseParam(const std::string& name, const Value& v, const std::string& source, Strategy strategy) {
  const std::string where = "params." + name;
  Fields f(v, where, source);
  ParamSpec p;
  p.name = name;
  p.path = f.String("path", "");
  p.flag = f.String("flag", "");
  if (p.path.empty() == p.flag.empty()) f.Fail(where, "give exactly one of \"path\" (a config key) and \"flag\" (a trainer flag)");
  if (!p.path.empty()) {
    try {
      ParseJsonPath(p.path);
    } catch (const InvalidArgument& e) {
      f.Fail(f.Place("path"), e.what());
    }
  }
  if (!p.flag.empty() && p.flag.rfind("--", 0) != 0) f.Fail(f.Place("flag"), Format("'{}' does not start with --", p.flag));
  int kinds = 0;
  for (const char* k : {"choices", "uniform", "log_uniform", "int", "expr"}) kinds += f.Has(k) ? 1 : 0;
  if (kinds != 1) {
    f.Fail(where, "give exactly one of \"choices\", \"uniform\", \"log_uniform\", \"int\", \"expr\"");
  }
  if (const Value* c = f.Get("choices")) {
    p.kind = ParamKind::kChoices;
    if (!c->IsArray() || c->Empty()) f.Fail(f.Place("choices"), "expected a non-empty array");
    for (rapidjson::SizeType i = 0; i < c->Size(); ++i) p.choices.push_back(ToJson((*c)[i]));
  } else if (const Value* u = f.Get("uniform")) {
    p.kind = ParamKind::kUniform;
    std::tie(p.lo, p.hi) = Bounds(f, *u, f.Place("uniform"), false);
  } else if (const Value* l = f.Get("log_uniform")) {
    p.kind = ParamKind::kLogUniform;
    std::tie(p.lo, p.hi) = Bounds(f, *l, f.Place("log_uniform"), false);
    if (p.lo <= 0) f.Fail(f.Place("log_uniform"), "bounds must be > 0");
  } else if (const Value* n = f.Get("int")) {
    p.kind = ParamKind::kInt;
    std::tie(p.lo, p.hi) = Bounds(f, *n, f.Place("int"), true);
  } else {
    p.kind = ParamKind::kExpr;
    p.expr = f.String("expr", "");
    if (p.expr.empty()) f.Fail(f.Place("expr"), "empty expression");
  }
  p.log = p.kind == ParamKind::kInt && f.Get("log") && (*f.Get("log")).IsTrue();
  if (const Value* lg = f.Get("log"); lg && !lg->IsBool()) f.Fail(f.Place("log"), "expected true or false");
  if (p.log && p.lo <= 0) f.Fail(f.Place("log"), "a log-scaled integer range needs bounds > 0");
  p.grid_points = f.Int("grid", 0, 0, 100000);
  if (p.grid_points > 0 && (p.kind == ParamKind::kChoices || p.kind == ParamKind::kExpr)) {
    f.Fail(f.Place("grid"), "only ranges take a number of grid points");
  }
  if (strategy == Strategy::kGrid && (p.kind == ParamKind::kUniform || p.kind == ParamKind::kLogUniform) &&
      p.grid_points == 0) {
    f.Fail(where, "a continuous range in a grid search needs \"grid\": N (the number of points)");
  }
  if (p.kind == ParamKind::kInt && p.grid_points == 0 && strategy == Strategy::kGrid && p.hi - p.lo + 1 > 10000) {
    f.Fail(where, "an integer range of more than 10000 values in a grid search needs \"grid\": N");
  }
  f.Finish();
  return p;
}

std::string ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ZR_THROW(InvalidArgument, "cannot read {} '{}'", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

const char* StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kGrid: return "grid";
    case Strategy::kRandom: return "random";
    case Strategy::kTpe: return "tpe";
  }
  return "?";
}

SweepSpec ParseSweepSpec(const std::string& text, const std::string& source) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseCommentsFlag | rapidjson::kParseTrailingCommasFlag>(text.c_str(), text.size());
  if (doc.HasParseError()) {
    ZR_THROW(InvalidArgument, "{}: not valid JSON at offset {}: {}", source, doc.GetErrorOffset(),
             rapidjson::GetParseError_En(doc.GetParseError()));
  }
  SweepSpec s;
  s.source = source;
  Fields f(doc, "", source);

  std::string strategy = f.String("strategy", "random");
  if (strategy == "grid") s.strategy = Strategy::kGrid;
  else if (strategy == "random") s.strategy = Strategy::kRandom;
  else if (strategy == "tpe" || strategy == "bayesian") s.strategy = Strategy::kTpe;
  else f.Fail("strategy", Format("'{}' is not one of grid, random, tpe (or bayesian)", strategy));

  if (const Value* b = f.Get("base_config")) {
    if (b->IsString()) {
      std::string path = b->GetString();
      if (!path.empty() && path[0] != '/') path = DirOf(source) + "/" + path;
      s.base_config = ReadFile(path, Format("{}: base_config", source));
      s.base_config_origin = path;
      rapidjson::Document check;
      check.Parse<rapidjson::kParseCommentsFlag | rapidjson::kParseTrailingCommasFlag>(s.base_config.c_str());
      if (check.HasParseError() || !check.IsObject()) f.Fail("base_config", Format("'{}' is not a JSON object", path));
      s.base_config = ToJson(check);
    } else if (b->IsObject()) {
      s.base_config = ToJson(*b);
      s.base_config_origin = "inline";
    } else {
      f.Fail("base_config", "expected a config file path or an inline object");
    }
  } else {
    s.base_config = "{}";
    s.base_config_origin = "none (an empty config)";
  }
  s.command = StringArray(f, "command");
  if (f.Has("command") && s.command.empty()) f.Fail("command", "must not be empty");
  s.extra_args = StringArray(f, "args");
  s.seed_flag = f.String("seed_flag", "--seed");
  s.world_size = f.Int("world_size", 1, 1, 1 << 20);
  s.trials = f.Int("trials", 0, 0, 1000000);
  s.seed = static_cast<uint64_t>(f.Int("seed", 0, 0, INT64_MAX));
  s.repeats = f.Int("repeats", 1, 1, 1000);
  s.parallel = f.Int("parallel", 0, 0, 4096);
  s.trial_timeout_s = f.Number("trial_timeout_s", 0, 0, 1e9);
  s.stop_after_no_improvement = f.Int("stop_after_no_improvement", 0, 0, INT64_MAX);
  if (s.strategy != Strategy::kGrid && s.trials == 0) f.Fail("trials", Format("a {} search needs \"trials\": N", strategy));

  if (const Value* o = f.Get("objective")) {
    Fields of(*o, "objective", source);
    s.objective.metric = of.String("metric", "final_loss");
    s.objective.k = of.Int("k", 10, 1, INT64_MAX);
    std::string mode = of.String("mode", s.objective.metric == "tokens_per_second" ? "max" : "min");
    if (mode != "min" && mode != "max") of.Fail("objective.mode", Format("'{}' is not min or max", mode));
    s.objective.maximize = mode == "max";
    of.Finish();
    static const std::set<std::string> kMetrics = {"final_loss", "best_loss", "mean_last_k", "tokens_per_second"};
    if (!kMetrics.count(s.objective.metric) && s.objective.metric.rfind("summary.", 0) != 0) {
      of.Fail("objective.metric", Format("'{}' is not one of final_loss, best_loss, mean_last_k, tokens_per_second "
                                         "or summary.<key>", s.objective.metric));
    }
  }
  if (const Value* e = f.Get("early_stopping")) {
    Fields ef(*e, "early_stopping", source);
    std::string rule = ef.String("rule", "");
    if (rule == "median") s.early_stopping.rule = StopRule::kMedian;
    else if (rule == "asha") s.early_stopping.rule = StopRule::kAsha;
    else if (rule == "none") s.early_stopping.rule = StopRule::kNone;
    else ef.Fail("early_stopping.rule", Format("'{}' is not one of median, asha, none", rule));
    s.early_stopping.grace_steps = ef.Int("grace_steps", 10, 1, INT64_MAX);
    s.early_stopping.reduction_factor = ef.Number("reduction_factor", 3, 1.5, 1000);
    s.early_stopping.max_steps = ef.Int("max_steps", 0, 0, INT64_MAX);
    s.early_stopping.min_trials = ef.Int("min_trials", 3, 1, 1000000);
    ef.Finish();
    if (s.objective.metric == "tokens_per_second" || s.objective.maximize) {
      ef.Fail("early_stopping", "early stopping compares intermediate losses, so it needs a minimised loss objective");
    }
  }
  if (const Value* t = f.Get("tpe")) {
    Fields tf(*t, "tpe", source);
    s.tpe.startup_trials = tf.Int("startup_trials", 8, 1, 1000000);
    s.tpe.candidates = tf.Int("candidates", 24, 1, 100000);
    s.tpe.gamma = tf.Number("gamma", 0.25, 0.01, 0.99);
    tf.Finish();
    if (s.strategy != Strategy::kTpe) tf.Fail("tpe", "only a tpe (bayesian) strategy reads this section");
  }
  if (const Value* c = f.Get("constants")) {
    if (!c->IsObject()) f.Fail("constants", "expected an object of names to numbers");
    for (auto it = c->MemberBegin(); it != c->MemberEnd(); ++it) {
      if (!it->value.IsNumber()) f.Fail(Format("constants.{}", it->name.GetString()), "expected a number");
      s.constants[it->name.GetString()] = it->value.GetDouble();
    }
  }
  const Value* params = f.Get("params");
  if (!params || !params->IsObject() || params->ObjectEmpty()) f.Fail("params", "expected a non-empty object of parameters");
  std::set<std::string> names;
  for (auto it = params->MemberBegin(); it != params->MemberEnd(); ++it) {
    std::string name = it->name.GetString();
    if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != std::string::npos) {
      f.Fail("params." + name, "a parameter's name is letters, digits and _ (derived values use it)");
    }
    if (s.constants.count(name)) f.Fail("params." + name, "the name is also a constant");
    s.params.push_back(ParseParam(name, it->value, source, s.strategy));
    names.insert(name);
  }
  bool sampled = false;
  for (const ParamSpec& p : s.params) sampled |= p.Sampled();
  if (!sampled) f.Fail("params", "every parameter is derived: nothing to search");
  f.Finish();
  // What must match to resume: everything but how many trials and how many at once.
  rapidjson::Document canon;
  canon.CopyFrom(doc, canon.GetAllocator());
  canon.RemoveMember("trials");
  canon.RemoveMember("parallel");
  canon.RemoveMember("trial_timeout_s");
  canon.RemoveMember("stop_after_no_improvement");
  if (canon.HasMember("base_config")) canon["base_config"].SetString(s.base_config.c_str(), canon.GetAllocator());
  s.canonical = ToJson(canon);
  return s;
}

SweepSpec LoadSweepSpec(const std::string& path) { return ParseSweepSpec(ReadFile(path, "sweep spec"), path); }

}  // namespace zerorun::experiments

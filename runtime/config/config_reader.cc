// JSON → ConfigBody. RapidJSON parses (comments and trailing commas on, NaN/Infinity off, iterative so
// deep nesting cannot overflow the stack); a walk rejects duplicate keys; then the reader visitor walks
// the field lists, converting each value with DeepSpeed's typing rules (deepspeed.md §0.7), recording
// where it came from, and reporting unknown keys with a "did you mean".
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include "zerorun/runtime/config/config_loader.h"
#include "zerorun/runtime/config/config_visitor.h"

namespace zerorun::runtime::config_detail {
namespace {

using rapidjson::Value;

std::string Quote(std::string_view s) {
  std::string out = "\"";
  size_t n = 0;
  for (char c : s) {
    if (++n > 60) {
      out += "...";
      break;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += Format("\\x{}{}", "0123456789abcdef"[u >> 4], "0123456789abcdef"[u & 15]);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// How a value found in the input is named in messages.
std::string Describe(const Value& v) {
  if (v.IsNull()) return "null";
  if (v.IsBool()) return v.GetBool() ? "true" : "false";
  if (v.IsInt64()) return std::to_string(v.GetInt64());
  if (v.IsUint64()) return std::to_string(v.GetUint64());
  if (v.IsNumber()) return FormatDouble(v.GetDouble());
  if (v.IsString()) return Quote(std::string_view(v.GetString(), v.GetStringLength()));
  if (v.IsArray()) return Format("a list of {}", v.Size());
  return "an object";
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool InRange(const Field& f, double x) {
  if (f.min_exclusive ? !(x > f.min) : !(x >= f.min)) return false;
  return x <= f.max;
}

// Pydantic's string → bool table.
std::optional<bool> BoolFromString(std::string_view s) {
  const std::string l = Lower(s);
  if (l == "true" || l == "yes" || l == "on" || l == "1" || l == "t" || l == "y") return true;
  if (l == "false" || l == "no" || l == "off" || l == "0" || l == "f" || l == "n") return false;
  return std::nullopt;
}

class Reader final : public ConfigVisitor {
 public:
  Reader(const Value& root, bool allow_unknown, Collected& out) : allow_unknown_(allow_unknown), out_(out) {
    frames_.push_back(Frame{&root, "", {}, {}, false, false, ""});
  }
  void Finish() { CheckUnknown(frames_.back()); }

  void Bool(const Field& f, bool& v) override {
    const bool before = v;
    if (const Value* j = Get(f, "a boolean")) {
      if (auto b = ToBool(*j)) v = *b;
      else Mismatch(f, "a boolean", *j);
    }
    IgnoredCheck(f, v != before);
  }
  void OptBool(const Field& f, std::optional<bool>& v) override {
    const auto before = v;
    if (const Value* j = Get(f, "a boolean or null")) {
      if (j->IsNull()) v.reset();
      else if (auto b = ToBool(*j)) v = *b;
      else Mismatch(f, "a boolean or null", *j);
    }
    IgnoredCheck(f, v != before);
  }
  void Int(const Field& f, int64_t& v) override {
    const int64_t before = v;
    if (const Value* j = Get(f, "an integer" + RangeText(f, true))) {
      if (auto x = ToInt(f, *j)) v = *x;
    }
    IgnoredCheck(f, v != before);
  }
  void OptInt(const Field& f, std::optional<int64_t>& v) override {
    const auto before = v;
    if (const Value* j = Get(f, "an integer" + RangeText(f, true) + " or null")) {
      if (j->IsNull()) v.reset();
      else if (auto x = ToInt(f, *j)) v = *x;
    }
    IgnoredCheck(f, v != before);
  }
  void Float(const Field& f, double& v) override {
    const double before = v;
    if (const Value* j = Get(f, "a number" + RangeText(f, false))) {
      if (auto x = ToFloat(f, *j)) v = *x;
    }
    IgnoredCheck(f, v != before);
  }
  void OptFloat(const Field& f, std::optional<double>& v) override {
    const auto before = v;
    if (const Value* j = Get(f, "a number" + RangeText(f, false) + " or null")) {
      if (j->IsNull()) v.reset();
      else if (auto x = ToFloat(f, *j)) v = *x;
    }
    IgnoredCheck(f, v != before);
  }
  void String(const Field& f, std::string& v) override {
    const std::string before = v;
    if (const Value* j = Get(f, "a string")) {
      if (j->IsString()) v.assign(j->GetString(), j->GetStringLength());
      else Mismatch(f, "a string", *j);
    }
    IgnoredCheck(f, v != before);
  }
  void OptString(const Field& f, std::optional<std::string>& v) override {
    const auto before = v;
    if (const Value* j = Get(f, "a string or null")) {
      if (j->IsNull()) v.reset();
      else if (j->IsString()) v = std::string(j->GetString(), j->GetStringLength());
      else Mismatch(f, "a string or null", *j);
    }
    IgnoredCheck(f, v != before);
  }
  void Enum(const Field& f, int& v, const EnumSpec& spec) override {
    const int before = v;
    if (const Value* j = Get(f, "one of " + spec.Choices())) {
      if (auto x = ToEnum(f, *j, spec, false)) v = *x;
    }
    IgnoredCheck(f, v != before);
  }
  void OptEnum(const Field& f, std::optional<int>& v, const EnumSpec& spec) override {
    const auto before = v;
    if (const Value* j = Get(f, "one of " + spec.Choices() + " or null")) {
      if (j->IsNull()) v.reset();
      else if (auto x = ToEnum(f, *j, spec, true)) v = *x;
    }
    IgnoredCheck(f, v != before);
  }
  void FloatList(const Field& f, std::vector<double>& v, size_t exact_len) override {
    const Value* j = Get(f, "a list of numbers");
    if (!j) return;
    if (!j->IsArray() || (exact_len != 0 && j->Size() != exact_len)) {
      Mismatch(f, exact_len ? Format("a list of {} numbers", exact_len) : std::string("a list of numbers"), *j);
      return;
    }
    std::vector<double> out;
    bool ok = true;
    for (rapidjson::SizeType i = 0; i < j->Size(); ++i) {
      Field ef = f;
      const std::string key = Format("{}[{}]", f.key, i);
      ef.key = key.c_str();
      if (auto x = ToFloat(ef, (*j)[i])) out.push_back(*x);
      else ok = false;
    }
    if (ok) v = std::move(out);
  }
  void IntList(const Field& f, std::vector<int64_t>& v) override {
    const Value* j = Get(f, "a list of integers");
    if (!j) return;
    if (!j->IsArray()) {
      Mismatch(f, "a list of integers", *j);
      return;
    }
    std::vector<int64_t> out;
    bool ok = true;
    for (rapidjson::SizeType i = 0; i < j->Size(); ++i) {
      Field ef = f;
      const std::string key = Format("{}[{}]", f.key, i);
      ef.key = key.c_str();
      if (auto x = ToInt(ef, (*j)[i])) out.push_back(*x);
      else ok = false;
    }
    if (ok) v = std::move(out);
  }
  void StringList(const Field& f, std::vector<std::string>& v) override {
    const Value* j = Get(f, "a list of strings");
    if (!j) return;
    bool ok = j->IsArray();
    if (ok) {
      for (const Value& e : j->GetArray()) ok = ok && e.IsString();
    }
    if (!ok) {
      Mismatch(f, "a list of strings", *j);
      return;
    }
    v.clear();
    for (const Value& e : j->GetArray()) v.emplace_back(e.GetString(), e.GetStringLength());
  }

  bool BeginSection(const Field& f, bool optional, bool* present) override {
    Provenance prov;
    const Value* j = Lookup(f, &prov);
    const std::string path = Path(f.key);
    if (j && translated_.count(path)) j = nullptr;  // legacy boolean form, already translated
    if (j && j->IsString() && Lower(j->GetString()) == "auto") {
      Error(f.key, "\"auto\" cannot be resolved for a section; write the section or remove the key");
      j = nullptr;
    }
    if (j && j->IsNull()) j = nullptr;
    if (j && !j->IsObject()) {
      Mismatch(f, "an object", *j);
      j = nullptr;
    }
    if (j) {
      out_.given.insert(path);
      out_.provenance[path] = prov;  // a section written in the file (even empty) is known to be
    }
    if (optional) {
      *present = j != nullptr;
      if (!j) return false;
    }
    if (j) {
      const KeyDisposition* d = FindKeyDisposition(path);
      if (d && d->use == KeyUse::kWarned) Warn(f.key, NoEffectWarning(*d));
    }
    const Frame& top = frames_.back();
    frames_.push_back(Frame{j, path, {}, {}, top.lenient || f.lenient, false,
                            prov.kind == Provenance::Kind::kAlias ? prov.detail : top.alias_note});
    return true;
  }
  void EndSection() override {
    CheckUnknown(frames_.back());
    frames_.pop_back();
  }
  void Opaque(const Field& f) override {
    Provenance prov;
    if (!Lookup(f, &prov)) return;
    const std::string path = Path(f.key);
    out_.given.insert(path);
    out_.provenance[path] = prov;  // UnsupportedKeys finds refused sections by it
    const KeyDisposition* d = FindKeyDisposition(path);
    if (d && d->use == KeyUse::kWarned) Warn(f.key, NoEffectWarning(*d));
  }
  void Refused(const Field& f, const char* why) override {
    Provenance prov;
    if (Lookup(f, &prov)) Error(f.key, why);
  }
  void AcceptRest(const char*) override { frames_.back().accept_rest = true; }
  std::optional<bool> DeprecatedBool(const Field& f, const char* replacement) override {
    Frame& fr = frames_.back();
    fr.known.push_back(f.key);
    if (!fr.obj) return std::nullopt;
    auto it = fr.obj->FindMember(f.key);
    if (it == fr.obj->MemberEnd()) return std::nullopt;
    fr.consumed.insert(f.key);
    translated_.insert(Path(f.key));
    out_.given.insert(Path(f.key));
    std::optional<bool> b = ToBool(it->value);
    if (!b) {
      Mismatch(f, "a boolean", it->value);
      return std::nullopt;
    }
    Warn(f.key, Format("Config parameter {} is deprecated use {} instead", f.key, replacement));
    return b;
  }
  void Skip(const char* key) override {
    frames_.back().known.push_back(key);
    frames_.back().consumed.insert(key);
  }
  bool Present(const char* key) override {
    const Value* obj = frames_.back().obj;
    if (!obj) return false;
    auto it = obj->FindMember(key);
    return it != obj->MemberEnd() && !it->value.IsNull();
  }
  std::optional<bool> PeekBool(const char* key) override {
    const Value* obj = frames_.back().obj;
    if (!obj) return std::nullopt;
    auto it = obj->FindMember(key);
    if (it == obj->MemberEnd() || !it->value.IsBool()) return std::nullopt;
    return it->value.GetBool();
  }
  void Error(const std::string& key, const std::string& message) override { out_.Error(Path(key), message); }
  void Warn(const std::string& key, const std::string& message) override { out_.Warn(Path(key), message); }
  void SetProvenance(const std::string& key, Provenance p) override { out_.provenance[Path(key)] = std::move(p); }

 private:
  struct Frame {
    const Value* obj;                  // null: section absent (fields take their defaults)
    std::string path;
    std::vector<std::string> known;    // every name asked for at this level (for suggestions)
    std::set<std::string> consumed;    // names found and read
    bool lenient;                      // pydantic coercions
    bool accept_rest;
    std::string alias_note;            // section reached through an alias (bfloat16)
  };

  std::string Path(const std::string& key) const { return JoinPath(frames_.back().path, key); }

  // Finds f.key (or its alias / deprecated name) in the current section; records provenance.
  const Value* Lookup(const Field& f, Provenance* prov) {
    Frame& fr = frames_.back();
    auto get = [&](const char* k) -> const Value* {
      if (!k) return nullptr;
      fr.known.push_back(k);
      if (!fr.obj) return nullptr;
      auto it = fr.obj->FindMember(k);
      if (it == fr.obj->MemberEnd()) return nullptr;
      fr.consumed.insert(k);
      return &it->value;
    };
    const Value* main = get(f.key);
    const Value* alias = get(f.alias);
    const Value* old = get(f.deprecated);
    if (main && alias) {
      Error(f.alias, Format("given twice: as \"{}\" and as its alias \"{}\"; keep one", f.key, f.alias));
    }
    if (old && (main || alias)) {
      Error(f.deprecated, Format("Cannot provide deprecated parameter '{}' and replacing parameter '{}' together",
                                 f.deprecated, main ? f.key : f.alias));
    }
    if (main) {
      *prov = fr.alias_note.empty() ? Provenance{Provenance::Kind::kFile, ""}
                                    : Provenance{Provenance::Kind::kAlias, fr.alias_note};
      return main;
    }
    if (alias) {
      *prov = {Provenance::Kind::kAlias, f.alias};
      return alias;
    }
    if (old) {
      Warn(f.deprecated, Format("Config parameter {} is deprecated use {} instead", f.deprecated, f.key));
      *prov = {Provenance::Kind::kDeprecated, f.deprecated};
      return old;
    }
    *prov = {Provenance::Kind::kDefault, ""};
    return nullptr;
  }

  // Lookup for leaf fields: records provenance and handles "auto". Returns the value to convert.
  const Value* Get(const Field& f, const std::string& expected) {
    Provenance prov;
    const Value* j = Lookup(f, &prov);
    const std::string path = Path(f.key);
    if (!out_.provenance.count(path) || prov.kind != Provenance::Kind::kDefault) out_.provenance[path] = prov;
    if (!j) return nullptr;
    out_.given.insert(path);
    if (j->IsString() && Lower(std::string_view(j->GetString(), j->GetStringLength())) == "auto") {
      if (f.auto_ok) {
        out_.auto_paths.insert(path);
        out_.provenance[path] = {Provenance::Kind::kAuto, "\"auto\""};
      } else {
        Error(f.key, Format("expected {}; found \"auto\", which zerorun cannot resolve for this key (nothing to derive "
                            "it from): write a value, or remove the key to use the default",
                            expected));
      }
      return nullptr;
    }
    return j;
  }

  // A value other than the default of a key whose disposition is "warned": one warning saying why.
  void IgnoredCheck(const Field& f, bool changed) {
    if (!changed) return;
    const KeyDisposition* d = FindKeyDisposition(Path(f.key));
    if (d && d->use == KeyUse::kWarned) Warn(f.key, NoEffectWarning(*d));
  }

  void Mismatch(const Field& f, const std::string& expected, const Value& found) {
    Error(f.key, Format("expected {}; found {}", expected, Describe(found)));
  }

  std::optional<bool> ToBool(const Value& j) const {
    if (j.IsBool()) return j.GetBool();
    if (!frames_.back().lenient) return std::nullopt;
    if (j.IsInt64() && (j.GetInt64() == 0 || j.GetInt64() == 1)) return j.GetInt64() == 1;
    if (j.IsString()) return BoolFromString(std::string_view(j.GetString(), j.GetStringLength()));
    return std::nullopt;
  }

  std::optional<int64_t> ToInt(const Field& f, const Value& j) {
    const std::string expected = "an integer" + RangeText(f, true);
    std::optional<int64_t> x;
    if (j.IsInt64()) {
      x = j.GetInt64();
    } else if (j.IsUint64()) {
      Error(f.key, Format("expected {}; found {} (too large)", expected, Describe(j)));
      return std::nullopt;
    } else if (j.IsDouble()) {
      const double d = j.GetDouble();
      if (!std::isfinite(d) || d != std::floor(d)) {
        Error(f.key, Format("expected {}; found {} (a number with a fractional part)", expected, Describe(j)));
        return std::nullopt;
      }
      if (!(d >= -9.2233720368547758e18 && d < 9.2233720368547758e18)) {
        Error(f.key, Format("expected {}; found {} (too large)", expected, Describe(j)));
        return std::nullopt;
      }
      x = static_cast<int64_t>(d);  // 5e8 is an integer
    } else if (j.IsString() && frames_.back().lenient) {
      // pydantic: "500" is an int, "5e8" is not.
      const std::string s(j.GetString(), j.GetStringLength());
      errno = 0;
      char* end = nullptr;
      const long long v = s.empty() ? 0 : std::strtoll(s.c_str(), &end, 10);
      if (s.empty() || errno != 0 || end != s.c_str() + s.size() || std::isspace(static_cast<unsigned char>(s[0]))) {
        Mismatch(f, expected, j);
        return std::nullopt;
      }
      x = v;
    } else {
      Mismatch(f, expected, j);
      return std::nullopt;
    }
    if (!InRange(f, static_cast<double>(*x))) {
      Mismatch(f, expected, j);
      return std::nullopt;
    }
    return x;
  }

  std::optional<double> ToFloat(const Field& f, const Value& j) {
    const std::string expected = "a number" + RangeText(f, false);
    std::optional<double> x;
    if (j.IsNumber()) {
      x = j.GetDouble();
    } else if (j.IsString() && (frames_.back().lenient || f.string_number)) {
      const std::string s(j.GetString(), j.GetStringLength());
      errno = 0;
      char* end = nullptr;
      const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
      const bool hex = s.find_first_of("xX") != std::string::npos;  // strtod reads hex floats; Python does not
      if (s.empty() || hex || errno != 0 || end != s.c_str() + s.size() ||
          std::isspace(static_cast<unsigned char>(s[0]))) {
        Mismatch(f, expected, j);
        return std::nullopt;
      }
      x = v;
    } else {
      Mismatch(f, expected, j);
      return std::nullopt;
    }
    if (!std::isfinite(*x)) {
      Error(f.key, Format("expected {} (finite); found {}", expected, Describe(j)));
      return std::nullopt;
    }
    if (!InRange(f, *x)) {
      Mismatch(f, expected, j);
      return std::nullopt;
    }
    return x;
  }

  std::optional<int> ToEnum(const Field& f, const Value& j, const EnumSpec& spec, bool nullable) {
    const std::string expected = Format("one of {}{}", spec.Choices(), nullable ? " or null" : "");
    if (!j.IsString()) {
      Mismatch(f, expected, j);
      return std::nullopt;
    }
    const std::string s(j.GetString(), j.GetStringLength());
    for (const auto& [name, value] : spec.names) {
      if (spec.case_insensitive ? Lower(s) == Lower(name) : s == name) return value;
    }
    for (const char* name : spec.unsupported) {
      if (Lower(s) == Lower(name)) {
        Error(f.key, Format("{} is not supported by zerorun; expected {}", Quote(s), expected));
        return std::nullopt;
      }
    }
    std::vector<std::string> names;
    for (const auto& n : spec.names) names.emplace_back(n.first);
    const std::string hint = SuggestKey(s, names);
    Error(f.key, Format("expected {}; found {}{}", expected, Quote(s),
                        hint.empty() ? std::string() : Format("; did you mean \"{}\"?", hint)));
    return std::nullopt;
  }

  void CheckUnknown(const Frame& fr) {
    if (!fr.obj || fr.accept_rest) return;
    for (const auto& m : fr.obj->GetObject()) {
      const std::string key(m.name.GetString(), m.name.GetStringLength());
      if (fr.consumed.count(key)) continue;
      const std::string path = JoinPath(fr.path, key);
      if (allow_unknown_ ? out_.warnings.size() >= Collected::kMaxIssues : out_.ErrorsFull()) {
        if (allow_unknown_) out_.Warn(path, "");  // full: only counted
        else out_.Error(path, "");
        continue;
      }
      std::string msg = Format("unknown key {}", Quote(key));
      const std::string hint = SuggestKey(key, fr.known);
      if (!hint.empty()) {
        msg += Format("; did you mean \"{}\"?", hint);
      } else {
        // Valid elsewhere? (e.g. "aio" written inside zero_optimization)
        for (const SchemaEntry& e : ConfigSchema()) {
          const size_t dot = e.path.rfind('.');
          const std::string leaf = dot == std::string::npos ? e.path : e.path.substr(dot + 1);
          if (leaf == key && e.path != path) {
            msg += e.path.find('.') == std::string::npos ? Format("; \"{}\" is a top-level key", key)
                                                         : Format("; \"{}\" is valid at {}", key, e.path);
            break;
          }
        }
      }
      if (allow_unknown_) {
        out_.Warn(path, msg + " (ignored: unknown keys allowed)");
      } else {
        out_.Error(path, msg + " [ZERORUN_ALLOW_UNKNOWN_CONFIG=1 to ignore]");
      }
    }
  }

  bool allow_unknown_;
  Collected& out_;
  std::vector<Frame> frames_;
  std::set<std::string> translated_;
};

void FindDuplicates(const Value& v, const std::string& path, int depth, Collected& out, bool* too_deep) {
  if (depth > kMaxDepth) {
    if (!*too_deep) out.Error(path, Format("nesting deeper than {} levels", kMaxDepth));
    *too_deep = true;
    return;
  }
  if (v.IsObject()) {
    std::set<std::string_view> seen, reported;
    for (const auto& m : v.GetObject()) {
      const std::string_view key(m.name.GetString(), m.name.GetStringLength());
      if (!seen.insert(key).second && reported.insert(key).second) {
        out.Error(JoinPath(path, std::string(key)),
                  Format("Duplicate keys in DeepSpeed config: [{}] (the key appears more than once in this object)",
                         Quote(key)));
      }
      FindDuplicates(m.value, JoinPath(path, std::string(key)), depth + 1, out, too_deep);
      if (*too_deep) return;
    }
  } else if (v.IsArray()) {
    for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
      FindDuplicates(v[i], Format("{}[{}]", path, i), depth + 1, out, too_deep);
      if (*too_deep) return;
    }
  }
}

}  // namespace

bool ParseAndRead(const std::string& text, const std::string& source, bool allow_unknown, ConfigBody& body,
                  Collected& out) {
  rapidjson::Document doc;
  constexpr unsigned kFlags =
      rapidjson::kParseCommentsFlag | rapidjson::kParseTrailingCommasFlag | rapidjson::kParseIterativeFlag;
  doc.Parse<kFlags>(text.data(), text.size());
  if (doc.HasParseError()) {
    const size_t offset = std::min(doc.GetErrorOffset(), text.size());
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < offset; ++i) {
      if (text[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    const size_t column = offset - line_start + 1;
    out.Error(Format("{}:{}:{}", source.empty() ? "<string>" : source, line, column),
              Format("JSON syntax error: {}", rapidjson::GetParseError_En(doc.GetParseError())));
    return false;
  }
  if (!doc.IsObject()) {
    out.Error("", Format("{}: expected a JSON object at the top level; found {}", source.empty() ? "<string>" : source,
                         Describe(doc)));
    return false;
  }
  bool too_deep = false;
  FindDuplicates(doc, "", 0, out, &too_deep);
  if (too_deep) return false;
  Reader reader(doc, allow_unknown, out);
  VisitConfig(reader, body);
  reader.Finish();
  return true;
}

}  // namespace zerorun::runtime::config_detail

// The schema: every key the loader accepts, with its type, DeepSpeed's code default and meaning, built
// by walking the same field lists the reader uses. docs/config.md embeds ConfigSchemaMarkdown(); a test
// compares the two in both directions.
#include "zerorun/runtime/config/config_visitor.h"

namespace zerorun::runtime {
namespace config_detail {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string EnumName(const EnumSpec& spec, int value) {
  for (const auto& [name, v] : spec.names) {
    if (v == value) return name;
  }
  return "?";
}

std::string EnumType(const EnumSpec& spec) {
  std::string out = "one of ";
  int last = -1;
  bool first = true;
  for (const auto& [name, v] : spec.names) {
    if (v == last) continue;
    last = v;
    if (!first) out += "/";
    out += name;
    first = false;
  }
  return out;
}

// The schema's status column: what config_dispositions.cc declares for the key; "" when it declares
// nothing (the dispositions test fails on that), "section" for an object whose keys carry the rows.
std::string DispositionText(const std::string& path, const std::string& type) {
  const KeyDisposition* d = FindKeyDisposition(path);
  if (d == nullptr) return type.rfind("object", 0) == 0 ? "section" : "";
  std::string out = KeyUseName(d->use);
  if (d->use == KeyUse::kFollows) out += " " + std::string(d->why);
  else if (d->use != KeyUse::kActed) out += ": " + std::string(d->why);
  if (d->issue) out += Format(" (issue #{})", d->issue);
  return out;
}

class Describer final : public ConfigVisitor {
 public:
  std::vector<SchemaEntry> entries;

  void Bool(const Field& f, bool& v) override { Add(f, "bool", v ? "true" : "false"); }
  void OptBool(const Field& f, std::optional<bool>& v) override {
    Add(f, "bool or null", v ? (*v ? "true" : "false") : "null");
  }
  void Int(const Field& f, int64_t& v) override { Add(f, "int" + RangeText(f, true), std::to_string(v)); }
  void OptInt(const Field& f, std::optional<int64_t>& v) override {
    Add(f, "int" + RangeText(f, true) + " or null", v ? std::to_string(*v) : "null");
  }
  void Float(const Field& f, double& v) override { Add(f, "float" + RangeText(f, false), FormatDouble(v)); }
  void OptFloat(const Field& f, std::optional<double>& v) override {
    Add(f, "float" + RangeText(f, false) + " or null", v ? FormatDouble(*v) : "null");
  }
  void String(const Field& f, std::string& v) override { Add(f, "string", JsonString(v)); }
  void OptString(const Field& f, std::optional<std::string>& v) override {
    Add(f, "string or null", v ? JsonString(*v) : "null");
  }
  void Enum(const Field& f, int& v, const EnumSpec& spec) override {
    Add(f, EnumType(spec), JsonString(EnumName(spec, v)));
  }
  void OptEnum(const Field& f, std::optional<int>& v, const EnumSpec& spec) override {
    Add(f, EnumType(spec) + " or null", v ? JsonString(EnumName(spec, *v)) : "null");
  }
  void FloatList(const Field& f, std::vector<double>& v, size_t exact_len) override {
    std::string def = "[";
    for (size_t i = 0; i < v.size(); ++i) def += (i ? ", " : "") + FormatDouble(v[i]);
    Add(f, exact_len ? Format("list of {} floats{}", exact_len, RangeText(f, false))
                     : "list of floats" + RangeText(f, false),
        def + "]");
  }
  void IntList(const Field& f, std::vector<int64_t>& v) override {
    std::string def = "[";
    for (size_t i = 0; i < v.size(); ++i) def += (i ? ", " : "") + std::to_string(v[i]);
    Add(f, "list of ints" + RangeText(f, true), def + "]");
  }
  void StringList(const Field& f, std::vector<std::string>& v) override {
    std::string def = "[";
    for (size_t i = 0; i < v.size(); ++i) def += (i ? ", " : "") + JsonString(v[i]);
    Add(f, "list of strings", def + "]");
  }
  bool BeginSection(const Field& f, bool optional, bool* present) override {
    Add(f, optional ? "object or null" : "object", optional ? "null" : "{}");
    stack_.push_back(JoinPath(stack_.back(), f.key));
    *present = false;
    return true;
  }
  void EndSection() override { stack_.pop_back(); }
  void Opaque(const Field& f) override { Add(f, "any", "null"); }
  void Refused(const Field& f, const char*) override { Add(f, "refused", "-"); }
  void SetVariant(const char* variant) override { variant_ = variant; }
  std::optional<bool> DeprecatedBool(const Field& f, const char* replacement) override {
    Add(f, "bool", "null", Format("deprecated: {}", replacement));
    return std::nullopt;
  }
  bool Describing() const override { return true; }

 private:
  void Add(const Field& f, const std::string& type, const std::string& def, std::string status = "") {
    const std::string& base = stack_.back();
    const std::string path = JoinPath(base, f.key);
    if (status.empty()) status = f.status == FieldStatus::kDeprecated ? "deprecated" : DispositionText(path, type);
    const std::string def_text = f.default_text ? f.default_text : def;
    entries.push_back({path, variant_, type, def_text, f.doc, status});
    if (f.alias) entries.push_back({JoinPath(base, f.alias), variant_, type, def_text, f.doc,
                                    Format("alias of {}", f.key)});
    if (f.deprecated) entries.push_back({JoinPath(base, f.deprecated), variant_, type, def_text, f.doc,
                                         Format("deprecated: {}", f.key)});
  }
  std::vector<std::string> stack_{""};
  std::string variant_;
};

std::string EscapeCell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

}  // namespace
}  // namespace config_detail

const std::vector<SchemaEntry>& ConfigSchema() {
  static const std::vector<SchemaEntry> schema = [] {
    config_detail::Describer d;
    ConfigBody body;
    config_detail::VisitConfig(d, body);
    return d.entries;
  }();
  return schema;
}

std::string ConfigSchemaMarkdown() {
  std::string out = "| key | for | type | default | status | meaning |\n|---|---|---|---|---|---|\n";
  for (const SchemaEntry& e : ConfigSchema()) {
    out += Format("| `{}` | {} | {} | `{}` | {} | {} |\n", e.path, e.variant, config_detail::EscapeCell(e.type),
                  e.default_text, config_detail::EscapeCell(e.status), config_detail::EscapeCell(e.doc));
  }
  return out;
}

}  // namespace zerorun::runtime

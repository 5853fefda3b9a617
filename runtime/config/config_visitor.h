// Internal: one field list per config section, walked by three visitors — the reader (JSON → structs,
// with validation and provenance), the describer (the schema that docs/config.md mirrors) and the
// emitter (effective JSON and the explain listing). Writing each section's fields once keeps parsing,
// documentation and output from drifting apart. Not part of the public API.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "zerorun/runtime/config/config.h"

namespace zerorun::runtime::config_detail {

enum class FieldStatus {
  kNormal,      // what zerorun does with it is declared in config_dispositions.cc
  kDeprecated,  // accepted for compatibility and translated; not written to the effective config
};

struct Field {
  const char* key = "";
  const char* doc = "";
  const char* alias = nullptr;       // also accepted under this name (populate_by_name), e.g. stage3_x
  const char* deprecated = nullptr;  // old name, translated with a warning; old and new together: error
  double min = -HUGE_VAL;            // numeric range, inclusive
  double max = HUGE_VAL;
  bool min_exclusive = false;        // (min, max] instead of [min, max]
  FieldStatus status = FieldStatus::kNormal;
  bool auto_ok = false;              // "auto" is resolved later (recorded as Provenance::kAuto)
  bool lenient = false;              // section: pydantic coercions apply inside ("500", "yes")
  bool string_number = false;        // float field also accepts a numeric string ("3") in any section
  const char* default_text = nullptr;  // overrides the default printed in the schema
};

// Enum values by name: the first name listed for a value is the one written out.
struct EnumSpec {
  std::vector<std::pair<const char*, int>> names;
  bool case_insensitive = true;
  // Names DeepSpeed accepts that zerorun refuses (error "... not supported by zerorun").
  std::vector<const char*> unsupported;
  std::string Choices() const;  // "\"none\", \"cpu\", \"nvme\""
};

class ConfigVisitor {
 public:
  virtual ~ConfigVisitor() = default;
  virtual void Bool(const Field& f, bool& v) = 0;
  virtual void OptBool(const Field& f, std::optional<bool>& v) = 0;
  virtual void Int(const Field& f, int64_t& v) = 0;
  virtual void OptInt(const Field& f, std::optional<int64_t>& v) = 0;
  virtual void Float(const Field& f, double& v) = 0;
  virtual void OptFloat(const Field& f, std::optional<double>& v) = 0;
  virtual void String(const Field& f, std::string& v) = 0;
  virtual void OptString(const Field& f, std::optional<std::string>& v) = 0;
  virtual void Enum(const Field& f, int& v, const EnumSpec& spec) = 0;
  virtual void OptEnum(const Field& f, std::optional<int>& v, const EnumSpec& spec) = 0;
  virtual void FloatList(const Field& f, std::vector<double>& v, size_t exact_len) = 0;
  virtual void IntList(const Field& f, std::vector<int64_t>& v) = 0;
  virtual void StringList(const Field& f, std::vector<std::string>& v) = 0;
  // Section `f.key`. *present: in: whether the struct holds a value (optional sections); out: whether
  // the section is to be visited (reader: given in the input and an object). Returns whether to visit;
  // a true return must be followed by EndSection.
  virtual bool BeginSection(const Field& f, bool optional, bool* present) = 0;
  virtual void EndSection() = 0;
  // A DeepSpeed section or key accepted whole, with any value (its disposition decides: a warning or a
  // refusal when it is written).
  virtual void Opaque(const Field& f) = 0;
  // A key DeepSpeed refuses too (or zerorun refuses outright): giving it is an error saying `why`.
  virtual void Refused(const Field& f, const char* why) = 0;
  // True for the describer, which visits every optimizer/scheduler variant.
  virtual bool Describing() const { return false; }
  // Inside a section: every other key is accepted silently (amp forwards its keys to apex).
  virtual void AcceptRest(const char* doc) {}
  // Optimizer/scheduler params: fields that follow belong to this type name ("" to clear).
  virtual void SetVariant(const char* variant) {}
  // A deprecated key whose translation is done by the caller: the reader returns its bool value when
  // given (warning, marks it known), others return nullopt (the describer records it).
  virtual std::optional<bool> DeprecatedBool(const Field& f, const char* replacement) = 0;
  // Reader only: `key` is accepted here without being read (its errors were reported elsewhere).
  virtual void Skip(const char* key) {}
  // Reader only: whether `key` is present in the current section, and whether it holds a bool.
  virtual bool Present(const char* key) { return false; }
  virtual std::optional<bool> PeekBool(const char* key) { return std::nullopt; }
  // Reader only: errors/warnings/provenance relative to the current section.
  virtual void Error(const std::string& key, const std::string& message) {}
  virtual void Warn(const std::string& key, const std::string& message) {}
  virtual void SetProvenance(const std::string& key, Provenance p) {}
};

template <class E>
void VisitEnum(ConfigVisitor& v, const Field& f, E& e, const EnumSpec& spec) {
  int x = static_cast<int>(e);
  v.Enum(f, x, spec);
  e = static_cast<E>(x);
}
template <class E>
void VisitOptEnum(ConfigVisitor& v, const Field& f, std::optional<E>& e, const EnumSpec& spec) {
  std::optional<int> x;
  if (e) x = static_cast<int>(*e);
  v.OptEnum(f, x, spec);
  e = x ? std::optional<E>(static_cast<E>(*x)) : std::nullopt;
}
template <class T, class Fn>
void VisitSection(ConfigVisitor& v, const Field& f, T& obj, Fn fn) {
  bool present = true;
  if (v.BeginSection(f, /*optional=*/false, &present)) {
    fn(v, obj);
    v.EndSection();
  }
}
template <class T, class Fn>
void VisitOptSection(ConfigVisitor& v, const Field& f, std::optional<T>& obj, Fn fn) {
  bool present = obj.has_value();
  const bool had = present;
  if (v.BeginSection(f, /*optional=*/true, &present)) {
    if (!obj) obj.emplace();
    fn(v, *obj);
    v.EndSection();
    if (!present && !had) obj.reset();  // the describer visits a temporary
  } else if (!present) {
    obj.reset();
  }
}

// Shared enum tables.
const EnumSpec& DTypeEnum();          // fp16|float16|half|torch.float16, bf16|..., fp32|...
const EnumSpec& OffloadDeviceEnum();  // none, cpu, nvme
const EnumSpec& WarmupTypeEnum();     // log, linear

// The field lists (config_schema_*.cc).
void VisitConfig(ConfigVisitor& v, ConfigBody& c);
void VisitTraining(ConfigVisitor& v, ConfigBody& c);     // batch, optimizer, scheduler, precision, scalars
void VisitZero(ConfigVisitor& v, ZeroConfig& z);
void VisitOtherSections(ConfigVisitor& v, ConfigBody& c);  // aio, checkpointing, monitors, profilers, ...

// Every effective leaf value as (dotted path, JSON text), in schema order (config_explain.cc).
std::vector<std::pair<std::string, std::string>> EffectiveValues(const Config& config);
// "accepted, has no effect in zerorun because <why> (issue #N)" (config_dispositions.cc).
std::string NoEffectWarning(const KeyDisposition& d);

// Text helpers (config_text.cc).
size_t EditDistance(std::string_view a, std::string_view b);  // optimal string alignment, case-insensitive
// Best candidate within a typo-sized distance, or "".
std::string SuggestKey(std::string_view typo, const std::vector<std::string>& candidates);
std::string FormatDouble(double d);  // shortest text that reads back to the same double
std::string JoinPath(const std::string& base, const std::string& key);
// " >= 0", " in [0, 1]", " > 0" or "" for the field's numeric range.
std::string RangeText(const Field& f, bool integer);

}  // namespace zerorun::runtime::config_detail

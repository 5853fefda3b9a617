// Strict JSON access for the checkpoint files (see checkpoint_json.h).
#include "zerorun/runtime/checkpoint_json.h"

#include <rapidjson/error/en.h>

#include <cmath>

#include "zerorun/core/error.h"

namespace zerorun::runtime::ckpt_json {

void Fail(const At& at, const std::string& what) {
  if (at.path.empty()) ZR_THROW(CheckpointError, "{}: {}", at.source, what);
  ZR_THROW(CheckpointError, "{}: {}: {}", at.source, at.path, what);
}

rapidjson::Document Parse(const std::string& text, const std::string& source) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseFullPrecisionFlag>(text.data(), text.size());
  if (doc.HasParseError()) {
    ZR_THROW(CheckpointError, "{}: not valid JSON at byte {} of {}: {} (truncated or corrupt?)", source,
             doc.GetErrorOffset(), text.size(), rapidjson::GetParseError_En(doc.GetParseError()));
  }
  return doc;
}

const Value& Object(const Value& v, const At& at) {
  if (!v.IsObject()) Fail(at, "expected a JSON object");
  return v;
}

const Value& Array(const Value& v, const At& at) {
  if (!v.IsArray()) Fail(at, "expected a JSON array");
  return v;
}

const Value* OptionalMember(const Value& obj, const char* key) {
  auto it = obj.FindMember(key);
  return it == obj.MemberEnd() ? nullptr : &it->value;
}

const Value& Member(const Value& obj, const At& at, const char* key) {
  const Value* v = OptionalMember(obj, key);
  if (!v) Fail(at, Format("missing key \"{}\"", key));
  return *v;
}

std::string String(const Value& obj, const At& at, const char* key) {
  const Value& v = Member(obj, at, key);
  if (!v.IsString()) Fail(at.Child(key), "expected a string");
  return {v.GetString(), v.GetStringLength()};
}

bool Bool(const Value& obj, const At& at, const char* key) {
  const Value& v = Member(obj, at, key);
  if (!v.IsBool()) Fail(at.Child(key), "expected true or false");
  return v.GetBool();
}

int64_t Int(const Value& obj, const At& at, const char* key, int64_t min, int64_t max) {
  const Value& v = Member(obj, at, key);
  if (!v.IsInt64()) Fail(at.Child(key), "expected an integer");
  int64_t x = v.GetInt64();
  if (x < min || x > max) Fail(at.Child(key), Format("{} is outside [{}, {}]", x, min, max));
  return x;
}

uint64_t Uint64(const Value& obj, const At& at, const char* key) {
  const Value& v = Member(obj, at, key);
  if (!v.IsUint64()) Fail(at.Child(key), "expected a non-negative integer");
  return v.GetUint64();
}

double Double(const Value& obj, const At& at, const char* key) {
  const Value& v = Member(obj, at, key);
  if (!v.IsNumber()) Fail(at.Child(key), "expected a number");
  double d = v.GetDouble();
  if (!std::isfinite(d)) Fail(at.Child(key), "expected a finite number");
  return d;
}

std::string ToText(const Value& v) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  v.Accept(w);
  return {buf.GetString(), buf.GetSize()};
}

void Key(JsonWriter& w, std::string_view key) { w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size())); }

void Str(JsonWriter& w, std::string_view s) { w.String(s.data(), static_cast<rapidjson::SizeType>(s.size())); }

void PutStr(JsonWriter& w, std::string_view key, std::string_view value) {
  Key(w, key);
  Str(w, value);
}

void PutInt(JsonWriter& w, std::string_view key, int64_t value) {
  Key(w, key);
  w.Int64(value);
}

void PutUint(JsonWriter& w, std::string_view key, uint64_t value) {
  Key(w, key);
  w.Uint64(value);
}

void PutBool(JsonWriter& w, std::string_view key, bool value) {
  Key(w, key);
  w.Bool(value);
}

void RawObject(JsonWriter& w, const std::string& json, const char* what) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseFullPrecisionFlag>(json.data(), json.size());
  if (doc.HasParseError() || !doc.IsObject()) {
    ZR_THROW(InvalidArgument, "checkpoint {} must be a JSON object; got \"{}\"", what,
             json.size() > 80 ? json.substr(0, 80) + "..." : json);
  }
  doc.Accept(w);
}

}  // namespace zerorun::runtime::ckpt_json

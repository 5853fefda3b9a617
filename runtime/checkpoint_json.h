// Internal to runtime/checkpoint*.cc (includes RapidJSON, so it is not part of the public API): strict
// JSON access whose every failure is a CheckpointError "<source>: <json.path>: <what>", and writing
// helpers. Numbers parse with full precision, so a double written by RapidJSON (shortest round-trip
// form) reads back bit for bit.
#pragma once

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace zerorun::runtime::ckpt_json {

using Value = rapidjson::Value;
using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

// Where a value sits, for messages: the input's name and the dotted JSON path.
struct At {
  const std::string& source;
  std::string path;
  At Child(std::string_view key) const { return {source, path.empty() ? std::string(key) : path + "." + std::string(key)}; }
  At Index(size_t i) const { return {source, path + "[" + std::to_string(i) + "]"}; }
};

[[noreturn]] void Fail(const At& at, const std::string& what);

// Parses `text` (full precision); CheckpointError with the byte offset on a syntax error.
rapidjson::Document Parse(const std::string& text, const std::string& source);

const Value& Object(const Value& v, const At& at);
const Value& Array(const Value& v, const At& at);
// A required member of object `obj` (which sits at `at`).
const Value& Member(const Value& obj, const At& at, const char* key);
const Value* OptionalMember(const Value& obj, const char* key);
std::string String(const Value& obj, const At& at, const char* key);
bool Bool(const Value& obj, const At& at, const char* key);
int64_t Int(const Value& obj, const At& at, const char* key, int64_t min, int64_t max);
uint64_t Uint64(const Value& obj, const At& at, const char* key);
double Double(const Value& obj, const At& at, const char* key);  // finite

// The value as compact JSON text.
std::string ToText(const Value& v);

// Writer conveniences.
void Key(JsonWriter& w, std::string_view key);
void Str(JsonWriter& w, std::string_view s);
// "key": value members.
void PutStr(JsonWriter& w, std::string_view key, std::string_view value);
void PutInt(JsonWriter& w, std::string_view key, int64_t value);
void PutUint(JsonWriter& w, std::string_view key, uint64_t value);
void PutBool(JsonWriter& w, std::string_view key, bool value);
// Writes already-serialised JSON (validated by parsing; InvalidArgument naming `what` if it is not a
// JSON object).
void RawObject(JsonWriter& w, const std::string& json, const char* what);

}  // namespace zerorun::runtime::ckpt_json

// manifest.json and rankNNNNN.json: writing and strict parsing (docs/checkpoint.md, "Format").
#include "zerorun/runtime/checkpoint_manifest.h"

#include <limits>
#include <set>

#include "zerorun/core/error.h"
#include "zerorun/runtime/checkpoint_json.h"
#include "zerorun/runtime/safetensors.h"

namespace zerorun::runtime {

using namespace ckpt_json;

namespace {

constexpr const char* kManifestFormat = "zerorun-checkpoint";
constexpr const char* kIndexFormat = "zerorun-checkpoint-rank";
constexpr int64_t kMaxWorld = 1 << 24;

std::string Padded(int rank) {
  std::string s = std::to_string(rank);
  if (s.size() < 5) s.insert(0, 5 - s.size(), '0');
  return s;
}

void WriteShape(JsonWriter& w, const Shape& shape) {
  w.StartArray();
  for (int64_t d : shape) w.Int64(d);
  w.EndArray();
}

Shape ReadShape(const Value& obj, const At& at, const char* key) {
  const Value& a = Array(Member(obj, at, key), at.Child(key));
  Shape shape;
  for (size_t i = 0; i < a.Size(); ++i) {
    if (!a[static_cast<rapidjson::SizeType>(i)].IsInt64() || a[static_cast<rapidjson::SizeType>(i)].GetInt64() < 0) {
      Fail(at.Child(key).Index(i), "expected a non-negative integer");
    }
    shape.push_back(a[static_cast<rapidjson::SizeType>(i)].GetInt64());
  }
  // numel must fit in int64 (and a byte count in uint64).
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / 8 / d) Fail(at.Child(key), "too many elements");
    n *= d;
  }
  return shape;
}

DType ReadDType(const Value& obj, const At& at, const char* key) {
  std::string name = String(obj, at, key);
  DType t;
  if (!SafetensorsDTypeFromName(name, &t)) {
    Fail(at.Child(key), Format("unknown dtype \"{}\" (known: F32 F16 BF16 F64 I8 U8 I32 I64)", name));
  }
  return t;
}

void CheckVersion(const Value& doc, const At& at, const char* format) {
  std::string f = String(doc, at, "format");
  if (f != format) Fail(at.Child("format"), Format("expected \"{}\", found \"{}\"", format, f));
  int64_t v = Int(doc, at, "format_version", 1, std::numeric_limits<int32_t>::max());
  if (v > kCheckpointFormatVersion) {
    Fail(at.Child("format_version"), Format("version {} was written by a newer zerorun; this build reads version {}",
                                            v, kCheckpointFormatVersion));
  }
}

}  // namespace

std::string CheckpointShardFile(int rank) { return "rank" + Padded(rank) + ".safetensors"; }
std::string CheckpointIndexFile(int rank) { return "rank" + Padded(rank) + ".json"; }

std::string CheckpointChunkKey(std::string_view slot, std::string_view tensor, int64_t offset) {
  return Format("{}/{}/{}", slot, tensor, offset);
}

const CheckpointSlot* CheckpointTensor::FindSlot(std::string_view slot) const {
  for (const CheckpointSlot& s : slots) {
    if (s.name == slot) return &s;
  }
  return nullptr;
}

const CheckpointTensor* CheckpointManifest::FindTensor(std::string_view name) const {
  for (const CheckpointTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void ValidateCheckpointTag(const std::string& tag) {
  if (tag.empty()) ZR_THROW(InvalidArgument, "checkpoint tag must be non-empty");
  if (tag.size() > 255) ZR_THROW(InvalidArgument, "checkpoint tag '{}...' is longer than 255 bytes", tag.substr(0, 40));
  if (tag[0] == '.') ZR_THROW(InvalidArgument, "checkpoint tag '{}' must not start with '.' (reserved for temporaries)", tag);
  if (tag == kCheckpointLatestFile) ZR_THROW(InvalidArgument, "checkpoint tag must not be 'latest' (the latest-tag file)");
  for (char c : tag) {
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      ZR_THROW(InvalidArgument, "checkpoint tag '{}' must not contain '/' or control characters", tag);
    }
  }
}

// ---- manifest.json ------------------------------------------------------------------------------

std::string CheckpointManifestToJson(const CheckpointManifest& m) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  PutStr(w, "format", kManifestFormat);
  PutInt(w, "format_version", m.format_version);
  PutStr(w, "tag", m.tag);
  PutStr(w, "save_id", m.save_id);
  PutInt(w, "world_size", m.world_size);
  PutInt(w, "zero_stage", m.zero_stage);
  PutStr(w, "model_dtype", SafetensorsDTypeName(m.model_dtype));
  PutStr(w, "optimizer", m.optimizer);
  Key(w, "checksum");
  w.StartObject();
  PutStr(w, "algorithm", "xxh3_64");
  PutUint(w, "block_bytes", m.checksum_block_bytes);
  w.EndObject();
  Key(w, "tensors");
  w.StartArray();
  for (const CheckpointTensor& t : m.tensors) {
    w.StartObject();
    PutStr(w, "name", t.name);
    Key(w, "shape");
    WriteShape(w, t.shape);
    Key(w, "slots");
    w.StartObject();
    for (const CheckpointSlot& s : t.slots) {
      PutStr(w, s.name, SafetensorsDTypeName(s.dtype));
    }
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  Key(w, "state");
  RawObject(w, m.state_json, "state");
  Key(w, "client_state");
  RawObject(w, m.client_state_json, "client_state");
  Key(w, "config");
  RawObject(w, m.config_json, "config");
  w.EndObject();
  return {buf.GetString(), buf.GetSize()};
}

CheckpointManifest CheckpointManifestFromJson(const std::string& text, const std::string& source) {
  rapidjson::Document doc = Parse(text, source);
  const At at{source, ""};
  Object(doc, at);
  CheckVersion(doc, at, kManifestFormat);
  CheckpointManifest m;
  m.format_version = static_cast<int>(Int(doc, at, "format_version", 1, kCheckpointFormatVersion));
  m.tag = String(doc, at, "tag");
  m.save_id = String(doc, at, "save_id");
  m.world_size = static_cast<int>(Int(doc, at, "world_size", 1, kMaxWorld));
  m.zero_stage = static_cast<int>(Int(doc, at, "zero_stage", 0, 3));
  m.model_dtype = ReadDType(doc, at, "model_dtype");
  m.optimizer = String(doc, at, "optimizer");
  const Value& ck = Object(Member(doc, at, "checksum"), at.Child("checksum"));
  std::string algo = String(ck, at.Child("checksum"), "algorithm");
  if (algo != "xxh3_64") Fail(at.Child("checksum.algorithm"), Format("unknown algorithm \"{}\" (known: xxh3_64)", algo));
  m.checksum_block_bytes = Uint64(ck, at.Child("checksum"), "block_bytes");
  if (m.checksum_block_bytes == 0 || m.checksum_block_bytes % 8 != 0) {
    Fail(at.Child("checksum.block_bytes"), "must be a positive multiple of 8");
  }

  const At tat = at.Child("tensors");
  const Value& tensors = Array(Member(doc, at, "tensors"), tat);
  std::set<std::string> names;
  for (rapidjson::SizeType i = 0; i < tensors.Size(); ++i) {
    const At e = tat.Index(i);
    const Value& v = Object(tensors[i], e);
    CheckpointTensor t;
    t.name = String(v, e, "name");
    if (t.name.empty()) Fail(e.Child("name"), "must be non-empty");
    if (!names.insert(t.name).second) Fail(e.Child("name"), Format("tensor '{}' appears twice", t.name));
    t.shape = ReadShape(v, e, "shape");
    const At sat = e.Child("slots");
    const Value& slots = Object(Member(v, e, "slots"), sat);
    for (auto it = slots.MemberBegin(); it != slots.MemberEnd(); ++it) {
      CheckpointSlot s;
      s.name.assign(it->name.GetString(), it->name.GetStringLength());
      if (s.name.empty() || s.name.find('/') != std::string::npos) Fail(sat, Format("bad slot name \"{}\"", s.name));
      if (t.FindSlot(s.name)) Fail(sat, Format("slot \"{}\" appears twice", s.name));
      if (!it->value.IsString()) Fail(sat.Child(s.name), "expected a dtype string");
      std::string dname(it->value.GetString(), it->value.GetStringLength());
      if (!SafetensorsDTypeFromName(dname, &s.dtype)) Fail(sat.Child(s.name), Format("unknown dtype \"{}\"", dname));
      t.slots.push_back(std::move(s));
    }
    m.tensors.push_back(std::move(t));
  }
  m.state_json = ToText(Object(Member(doc, at, "state"), at.Child("state")));
  m.client_state_json = ToText(Object(Member(doc, at, "client_state"), at.Child("client_state")));
  m.config_json = ToText(Object(Member(doc, at, "config"), at.Child("config")));
  return m;
}

// ---- rankNNNNN.json -----------------------------------------------------------------------------

std::string CheckpointRankIndexToJson(const CheckpointRankIndex& x) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  PutStr(w, "format", kIndexFormat);
  PutInt(w, "format_version", x.format_version);
  PutStr(w, "tag", x.tag);
  PutStr(w, "save_id", x.save_id);
  PutInt(w, "rank", x.rank);
  PutInt(w, "world_size", x.world_size);
  PutStr(w, "shard", x.shard);
  PutUint(w, "shard_bytes", x.shard_bytes);
  PutUint(w, "data_begin", x.data_begin);
  Key(w, "chunks");
  w.StartArray();
  for (const CheckpointChunk& c : x.chunks) {
    w.StartObject();
    PutStr(w, "tensor", c.tensor);
    PutStr(w, "slot", c.slot);
    PutInt(w, "offset", c.offset);
    PutInt(w, "numel", c.numel);
    PutStr(w, "key", c.key);
    Key(w, "data_offsets");
    w.StartArray();
    w.Uint64(c.data_begin);
    w.Uint64(c.data_end);
    w.EndArray();
    Key(w, "xxh3_64");
    w.StartArray();
    for (uint64_t h : c.hashes) Str(w, HashToHex(h));
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return {buf.GetString(), buf.GetSize()};
}

CheckpointRankIndex CheckpointRankIndexFromJson(const std::string& text, const std::string& source) {
  rapidjson::Document doc = Parse(text, source);
  const At at{source, ""};
  Object(doc, at);
  CheckVersion(doc, at, kIndexFormat);
  CheckpointRankIndex x;
  x.format_version = static_cast<int>(Int(doc, at, "format_version", 1, kCheckpointFormatVersion));
  x.tag = String(doc, at, "tag");
  x.save_id = String(doc, at, "save_id");
  x.world_size = static_cast<int>(Int(doc, at, "world_size", 1, kMaxWorld));
  x.rank = static_cast<int>(Int(doc, at, "rank", 0, x.world_size - 1));
  x.shard = String(doc, at, "shard");
  if (x.shard.empty() || x.shard.find('/') != std::string::npos || x.shard[0] == '.') {
    Fail(at.Child("shard"), Format("\"{}\" is not a file name in the checkpoint directory", x.shard));
  }
  x.shard_bytes = Uint64(doc, at, "shard_bytes");
  x.data_begin = Uint64(doc, at, "data_begin");
  if (x.data_begin < 8 || x.data_begin > x.shard_bytes) {
    Fail(at.Child("data_begin"), Format("{} is outside the shard's {} bytes", x.data_begin, x.shard_bytes));
  }
  const At cat = at.Child("chunks");
  const Value& chunks = Array(Member(doc, at, "chunks"), cat);
  for (rapidjson::SizeType i = 0; i < chunks.Size(); ++i) {
    const At e = cat.Index(i);
    const Value& v = Object(chunks[i], e);
    CheckpointChunk c;
    c.tensor = String(v, e, "tensor");
    c.slot = String(v, e, "slot");
    c.offset = Int(v, e, "offset", 0, std::numeric_limits<int64_t>::max());
    c.numel = Int(v, e, "numel", 0, std::numeric_limits<int64_t>::max() - c.offset);
    c.key = String(v, e, "key");
    const Value& off = Array(Member(v, e, "data_offsets"), e.Child("data_offsets"));
    if (off.Size() != 2 || !off[0].IsUint64() || !off[1].IsUint64() || off[0].GetUint64() > off[1].GetUint64()) {
      Fail(e.Child("data_offsets"), "expected [begin, end] with 0 <= begin <= end");
    }
    c.data_begin = off[0].GetUint64();
    c.data_end = off[1].GetUint64();
    if (c.data_end > x.shard_bytes - x.data_begin) {
      Fail(e.Child("data_offsets"), Format("[{}, {}] runs past the shard's data region ({} bytes)", c.data_begin,
                                           c.data_end, x.shard_bytes - x.data_begin));
    }
    const Value& hashes = Array(Member(v, e, "xxh3_64"), e.Child("xxh3_64"));
    for (rapidjson::SizeType k = 0; k < hashes.Size(); ++k) {
      uint64_t h = 0;
      if (!hashes[k].IsString() ||
          !HashFromHex(std::string_view(hashes[k].GetString(), hashes[k].GetStringLength()), &h)) {
        Fail(e.Child("xxh3_64").Index(k), "expected 16 hex digits");
      }
      c.hashes.push_back(h);
    }
    x.chunks.push_back(std::move(c));
  }
  return x;
}

}  // namespace zerorun::runtime

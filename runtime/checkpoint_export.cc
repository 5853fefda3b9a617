// ExportCheckpoint: plan the output files from the manifest's sizes, then stream every tensor through
// one buffer: CheckpointReader::Read (verified, converted) → SafetensorsWriter::AppendPart.
#include "zerorun/runtime/checkpoint_export.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "zerorun/core/error.h"
#include "zerorun/runtime/checkpoint_json.h"
#include "zerorun/runtime/checkpoint_reader.h"
#include "zerorun/runtime/checkpoint_state.h"
#include "zerorun/runtime/safetensors.h"

namespace zerorun::runtime {

namespace {

struct OutTensor {
  const CheckpointTensor* tensor;
  std::string slot;
  uint64_t bytes;
};

std::string ShardName(size_t i, size_t n) {
  auto five = [](size_t v) {
    std::string s = std::to_string(v);
    return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
  };
  return "model-" + five(i + 1) + "-of-" + five(n) + ".safetensors";
}

}  // namespace

bool ParseByteSize(const std::string& text, uint64_t* out) {
  struct Unit {
    const char* suffix;
    double factor;
  };
  static const Unit kUnits[] = {{"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30}, {"TiB", 0x1p40},
                                {"KB", 1e3},     {"MB", 1e6},     {"GB", 1e9},     {"TB", 1e12},
                                {"K", 1e3},      {"M", 1e6},      {"G", 1e9},      {"B", 1.0}};
  std::string number = text;
  double factor = 1.0;
  for (const Unit& u : kUnits) {
    const size_t n = std::char_traits<char>::length(u.suffix);
    if (number.size() > n && number.compare(number.size() - n, n, u.suffix) == 0) {
      number.resize(number.size() - n);
      factor = u.factor;
      break;
    }
  }
  if (number.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(v) || v < 0 || v * factor > 1.8e19) return false;
  *out = static_cast<uint64_t>(std::llround(v * factor));
  return true;
}

CheckpointExportResult ExportCheckpoint(const std::string& dir, const CheckpointExportOptions& o) {
  if (o.out_dir.empty()) ZR_THROW(InvalidArgument, "export: the output directory must be a non-empty path");
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16 && o.dtype != DType::kF16) {
    ZR_THROW(InvalidArgument, "export: dtype must be fp32, bf16 or fp16, not {}", DTypeName(o.dtype));
  }
  if (o.buffer_bytes < DTypeSize(o.dtype)) ZR_THROW(InvalidArgument, "export: buffer_bytes {} is too small", o.buffer_bytes);
  if (o.max_shard_bytes == 0) ZR_THROW(InvalidArgument, "export: max_shard_bytes must be positive");
  CheckpointEnv& env = o.env ? *o.env : CheckpointEnv::Posix();
  CheckpointReader reader(dir, &env);
  const CheckpointManifest& m = reader.manifest();

  // What goes out, in the manifest's (the model's) order, and into which file.
  std::vector<OutTensor> out;
  for (const CheckpointTensor& t : m.tensors) {
    std::string slot = o.slot;
    if (slot.empty()) slot = t.FindSlot(kSlotFp32) ? kSlotFp32 : kSlotParam;
    const CheckpointSlot* s = t.FindSlot(slot);
    if (!s) {
      std::string saved;
      for (const CheckpointSlot& x : t.slots) saved += (saved.empty() ? "" : ", ") + x.name;
      ZR_THROW(CheckpointError, "export of {}: tensor '{}' has no slot '{}' (saved: {})", dir, t.name, slot,
               saved.empty() ? "none" : saved);
    }
    if (!IsFloating(s->dtype)) {
      ZR_THROW(CheckpointError, "export of {}: tensor '{}' slot '{}' is {}, not a floating type", dir, t.name, slot,
               DTypeName(s->dtype));
    }
    out.push_back({&t, slot, static_cast<uint64_t>(t.numel()) * DTypeSize(o.dtype)});
  }
  std::vector<std::vector<size_t>> files(1);
  uint64_t in_file = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!files.back().empty() && in_file + out[i].bytes > o.max_shard_bytes) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().push_back(i);
    in_file += out[i].bytes;
  }

  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"zerorun_checkpoint", m.tag}};
  try {
    metadata["zerorun_global_steps"] = std::to_string(TrainingStateFromJson(m.state_json, dir).global_steps);
  } catch (const CheckpointError&) {  // a state without counters: the export does not need them
  }
  env.CreateDirs(o.out_dir);
  CheckpointExportResult result;
  const size_t out_size = DTypeSize(o.dtype);
  const int64_t piece_elems = static_cast<int64_t>(o.buffer_bytes / out_size);
  std::vector<char> buffer;
  std::map<std::string, std::string> weight_map;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string name = files.size() == 1 ? "model.safetensors" : ShardName(f, files.size());
    std::vector<SafetensorsWriter::Entry> entries;
    for (size_t i : files[f]) entries.push_back({out[i].tensor->name, o.dtype, out[i].tensor->shape});
    SafetensorsWriterOptions wo;
    wo.env = &env;
    SafetensorsWriter writer(JoinPath(o.out_dir, name), std::move(entries), metadata, wo);
    for (size_t i : files[f]) {
      const CheckpointTensor& t = *out[i].tensor;
      for (int64_t at = 0; at < t.numel(); at += piece_elems) {
        const int64_t n = std::min(piece_elems, t.numel() - at);
        buffer.resize(static_cast<size_t>(n) * out_size);
        reader.Read({{t.name, out[i].slot, at, n, buffer.data(), o.dtype}});
        writer.AppendPart(buffer.data(), buffer.size());
      }
      weight_map[t.name] = name;
      result.bytes += out[i].bytes;
      ++result.tensors;
    }
    writer.Commit();
    result.files.push_back(writer.path());
  }
  if (files.size() > 1) {
    rapidjson::StringBuffer buf;
    ckpt_json::JsonWriter w(buf);
    w.StartObject();
    w.Key("metadata");
    w.StartObject();
    w.Key("total_size");
    w.Uint64(result.bytes);
    w.EndObject();
    w.Key("weight_map");
    w.StartObject();
    for (const auto& [tensor, file] : weight_map) {
      ckpt_json::Key(w, tensor);
      ckpt_json::Str(w, file);
    }
    w.EndObject();
    w.EndObject();
    result.index_file = JoinPath(o.out_dir, "model.safetensors.index.json");
    env.WriteFileAtomic(result.index_file, std::string(buf.GetString(), buf.GetSize()), "export");
  }
  return result;
}

}  // namespace zerorun::runtime

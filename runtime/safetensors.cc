// safetensors writer (streaming, atomic rename) and strict reader. File access through CheckpointEnv
// (POSIX in production), so that every failure carries its errno and tests can inject faults;
// RapidJSON for the header in both directions.
#include "zerorun/runtime/safetensors.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"

namespace zerorun::runtime {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference implementation
constexpr size_t kBufferBytes = 1 << 20;

struct DTypeNameEntry {
  DType dtype;
  const char* name;
};
constexpr DTypeNameEntry kDTypeNames[] = {
    {DType::kF32, "F32"}, {DType::kF16, "F16"}, {DType::kBF16, "BF16"}, {DType::kF64, "F64"},
    {DType::kI8, "I8"},   {DType::kU8, "U8"},   {DType::kI32, "I32"},   {DType::kI64, "I64"},
};

// numel(shape) × size, or false on overflow of uint64.
bool ByteSize(const Shape& shape, size_t elem, uint64_t* out) {
  uint64_t n = elem;
  for (int64_t d : shape) {
    if (d < 0) return false;
    uint64_t u = static_cast<uint64_t>(d);
    if (u != 0 && n > std::numeric_limits<uint64_t>::max() / u) return false;
    n *= u;
  }
  *out = n;
  return true;
}

}  // namespace

const char* SafetensorsDTypeName(DType t) {
  for (const auto& e : kDTypeNames) {
    if (e.dtype == t) return e.name;
  }
  ZR_THROW(InvalidArgument, "dtype {} has no safetensors name", DTypeName(t));
}

bool SafetensorsDTypeFromName(std::string_view name, DType* out) {
  for (const auto& e : kDTypeNames) {
    if (name == e.name) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}

// ---- writer -------------------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<Entry> entries,
                                     const std::map<std::string, std::string>& metadata,
                                     SafetensorsWriterOptions options)
    : path_(std::move(path)), options_(std::move(options)),
      env_(options_.env ? options_.env : &CheckpointEnv::Posix()) {
  if (path_.empty() || path_.back() == '/') ZR_THROW(InvalidArgument, "safetensors: '{}' is not a file path", path_);
  // Lay the tensors out contiguously in declared order.
  std::set<std::string> names;
  uint64_t offset = 0;
  for (Entry& e : entries) {
    if (e.name.empty() || e.name == "__metadata__") {
      ZR_THROW(InvalidArgument, "{}: tensor name '{}' is reserved or empty", path_, e.name);
    }
    if (!names.insert(e.name).second) ZR_THROW(InvalidArgument, "{}: tensor '{}' is declared twice", path_, e.name);
    SafetensorsDTypeName(e.dtype);  // throws for types safetensors cannot name
    uint64_t bytes = 0;
    if (!ByteSize(e.shape, DTypeSize(e.dtype), &bytes)) {
      ZR_THROW(InvalidArgument, "{}: tensor '{}' has an invalid shape {}", path_, e.name, ShapeToString(e.shape));
    }
    entries_.push_back({std::move(e.name), e.dtype, std::move(e.shape), offset, offset + bytes});
    offset += bytes;
  }
  // Header JSON: __metadata__ first, then the tensors in data order; padded with spaces so that the
  // data region starts at a multiple of 8.
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  if (!metadata.empty()) {
    w.Key("__metadata__");
    w.StartObject();
    for (const auto& [k, v] : metadata) {
      w.Key(k.data(), static_cast<rapidjson::SizeType>(k.size()));
      w.String(v.data(), static_cast<rapidjson::SizeType>(v.size()));
    }
    w.EndObject();
  }
  for (const SafetensorsTensorInfo& e : entries_) {
    w.Key(e.name.data(), static_cast<rapidjson::SizeType>(e.name.size()));
    w.StartObject();
    w.Key("dtype");
    w.String(SafetensorsDTypeName(e.dtype));
    w.Key("shape");
    w.StartArray();
    for (int64_t d : e.shape) w.Int64(d);
    w.EndArray();
    w.Key("data_offsets");
    w.StartArray();
    w.Uint64(e.begin);
    w.Uint64(e.end);
    w.EndArray();
    w.EndObject();
  }
  w.EndObject();
  std::string header(buf.GetString(), buf.GetSize());
  header.append((8 - header.size() % 8) % 8, ' ');
  file_bytes_ = 8 + header.size() + offset;

  tmp_path_ = Format("{}.tmp.{}", path_, ::getpid());
  RemoveStaleTemporaries();
  try {
    file_ = env_->NewWritableFile(tmp_path_);
  } catch (const Error& e) {
    failed_ = true;
    ZR_THROW(IoError, "cannot save {}: {}", path_, e.what());
  }
  buffer_.reserve(kBufferBytes);
  uint64_t n = header.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  WriteAll(len, 8);
  WriteAll(header.data(), header.size());
}

void SafetensorsWriter::RemoveStaleTemporaries() {
  // "<file>.tmp.<pid>" of a writer that was killed before its commit (a live writer's is kept).
  const std::filesystem::path target(path_);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  const std::string prefix = target.filename().string() + ".tmp.";
  try {
    for (const std::string& name : env_->ListDir(dir)) {
      if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string digits = name.substr(prefix.size());
      if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
      const long pid = std::stol(digits);
      if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) == 0) continue;  // still writing
      if (pid > 0 && pid != ::getpid() && errno != ESRCH) continue;
      env_->RemoveFile(dir + "/" + name);
      ZR_INFO("removed {}/{}, left by a writer that did not finish", dir, name);
    }
  } catch (const Error&) {
    // A missing directory or an unreadable entry: the open below reports what matters. (Anything else,
    // e.g. a test's simulated crash, propagates.)
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!committed_) Discard();
}

void SafetensorsWriter::Discard() noexcept {
  file_.reset();
  if (tmp_path_.empty()) return;
  try {
    env_->RemoveFile(tmp_path_);
  } catch (...) {  // best effort (and never from a destructor): the failure being reported matters more
  }
}

void SafetensorsWriter::Fail(const std::string& what, int err) {
  failed_ = true;
  Discard();
  ZR_THROW(IoError, "{}", ErrnoMessage(Format("cannot save {}: {} {}", path_, what, tmp_path_), err));
}

void SafetensorsWriter::Fail(const Error& e) {
  failed_ = true;
  Discard();
  ZR_THROW(IoError, "cannot save {}: {}", path_, e.what());
}

void SafetensorsWriter::WriteOut(const void* data, size_t bytes) {
  int injected = options_.inject_errno ? options_.inject_errno("write", offset_) : 0;
  if (injected) Fail("write to", injected);
  try {
    file_->Append(data, bytes);
  } catch (const Error& e) {
    Fail(e);
  }
  offset_ += bytes;
}

void SafetensorsWriter::Flush() {
  if (buffer_.empty()) return;
  WriteOut(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void SafetensorsWriter::WriteAll(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    if (buffer_.empty() && bytes >= kBufferBytes) {
      // Large pieces go straight from the caller's memory to the file, without the copy.
      const size_t n = bytes - bytes % kBufferBytes;
      WriteOut(p, n);
      p += n;
      bytes -= n;
      continue;
    }
    size_t n = std::min(bytes, kBufferBytes - buffer_.size());
    buffer_.insert(buffer_.end(), p, p + n);
    p += n;
    bytes -= n;
    if (buffer_.size() == kBufferBytes) Flush();
  }
}

void SafetensorsWriter::Append(const void* data, size_t bytes) {
  if (failed_ || committed_) ZR_THROW(InvalidArgument, "{}: Append after the writer failed or committed", path_);
  if (next_ >= entries_.size()) {
    ZR_THROW(InvalidArgument, "{}: Append beyond the {} declared tensors", path_, entries_.size());
  }
  const SafetensorsTensorInfo& e = entries_[next_];
  if (part_bytes_ != 0 || bytes != e.end - e.begin) {
    ZR_THROW(InvalidArgument, "{}: tensor '{}' is declared with {} bytes, {} were appended", path_, e.name,
             e.end - e.begin, part_bytes_ + bytes);
  }
  WriteAll(data, bytes);
  ++next_;
}

void SafetensorsWriter::AppendPart(const void* data, size_t bytes) {
  if (failed_ || committed_) ZR_THROW(InvalidArgument, "{}: Append after the writer failed or committed", path_);
  // Zero-byte tensors complete as soon as they are reached.
  while (next_ < entries_.size() && entries_[next_].end == entries_[next_].begin) ++next_;
  if (bytes == 0) return;
  if (next_ >= entries_.size()) {
    ZR_THROW(InvalidArgument, "{}: Append beyond the {} declared tensors", path_, entries_.size());
  }
  const SafetensorsTensorInfo& e = entries_[next_];
  const uint64_t size = e.end - e.begin;
  if (part_bytes_ + bytes > size) {
    ZR_THROW(InvalidArgument, "{}: tensor '{}' is declared with {} bytes, {} were appended", path_, e.name, size,
             part_bytes_ + bytes);
  }
  WriteAll(data, bytes);
  part_bytes_ += bytes;
  if (part_bytes_ == size) {
    part_bytes_ = 0;
    ++next_;
  }
}

void SafetensorsWriter::Append(const Tensor& t) {
  if (next_ < entries_.size()) {
    const SafetensorsTensorInfo& e = entries_[next_];
    if (t.dtype() != e.dtype || !t.device().is_cpu() ||
        static_cast<uint64_t>(t.nbytes()) != e.end - e.begin) {
      ZR_THROW(InvalidArgument, "{}: tensor '{}' is declared {} {}, appended {}", path_, e.name,
               SafetensorsDTypeName(e.dtype), ShapeToString(e.shape), t.ToString());
    }
  }
  Append(t.data(), t.nbytes());
}

void SafetensorsWriter::Commit() {
  if (failed_ || committed_) ZR_THROW(InvalidArgument, "{}: Commit after the writer failed or committed", path_);
  while (next_ < entries_.size() && part_bytes_ == 0 && entries_[next_].end == entries_[next_].begin) ++next_;
  if (next_ != entries_.size()) {
    ZR_THROW(InvalidArgument, "{}: Commit after {} of {} tensors (next: '{}')", path_, next_, entries_.size(),
             entries_[next_].name);
  }
  Flush();
  int injected = options_.inject_errno ? options_.inject_errno("fsync", offset_) : 0;
  if (injected) Fail("fsync of", injected);
  try {
    file_->Sync();
    file_->Close();
    file_.reset();
    env_->Rename(tmp_path_, path_);
  } catch (const Error& e) {
    Fail(e);
  }
  committed_ = true;
  // Make the rename durable. The file is in place at this point; a failure here is still reported.
  try {
    env_->SyncDir(DirName(path_));
  } catch (const Error& e) {
    ZR_THROW(IoError, "saved {} but could not sync its directory: {}", path_, e.what());
  }
}

void WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Entry> entries;
  for (const auto& [name, t] : tensors) entries.push_back({name, t.dtype(), t.shape()});
  SafetensorsWriter w(path, std::move(entries), metadata);
  for (const auto& nt : tensors) w.Append(nt.second);
  w.Commit();
}

// ---- reader -------------------------------------------------------------------------------------

namespace {

// A non-negative integer JSON value as uint64, or false.
bool AsU64(const rapidjson::Value& v, uint64_t* out) {
  if (v.IsUint64()) {
    *out = v.GetUint64();
    return true;
  }
  return false;
}

}  // namespace

SafetensorsReader::SafetensorsReader(std::string path, CheckpointEnv* env, bool direct) : path_(std::move(path)) {
  CheckpointEnv& fs = env ? *env : CheckpointEnv::Posix();
  try {
    file_ = direct ? fs.NewDirectReadableFile(path_) : fs.NewReadableFile(path_);
  } catch (const CheckpointError& e) {
    ZR_THROW(CheckpointError, "cannot open safetensors file: {}", e.what());
  }
  {
    file_bytes_ = file_->size();
    if (file_bytes_ < 8) {
      ZR_THROW(CheckpointError, "{}: file is {} bytes, shorter than the 8-byte header length (truncated?)", path_,
               file_bytes_);
    }
    unsigned char len[8];
    ReadAt(0, len, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    if (n > kMaxHeaderBytes) {
      ZR_THROW(CheckpointError, "{}: header length {} is above the {}-byte limit (not a safetensors file?)", path_, n,
               kMaxHeaderBytes);
    }
    if (n > file_bytes_ - 8) {
      ZR_THROW(CheckpointError, "{}: header length {} runs past the end of the file ({} bytes; truncated?)", path_, n,
               file_bytes_);
    }
    data_begin_ = 8 + n;
    std::string header(n, '\0');
    ReadAt(8, header.data(), n);
    rapidjson::Document doc;
    doc.Parse(header.data(), header.size());
    if (doc.HasParseError()) {
      ZR_THROW(CheckpointError, "{}: header is not valid JSON at byte {} of {}: {}", path_, doc.GetErrorOffset(), n,
               rapidjson::GetParseError_En(doc.GetParseError()));
    }
    if (!doc.IsObject()) ZR_THROW(CheckpointError, "{}: header is not a JSON object", path_);
    const uint64_t data_bytes = file_bytes_ - data_begin_;
    for (auto it = doc.MemberBegin(); it != doc.MemberEnd(); ++it) {
      std::string name(it->name.GetString(), it->name.GetStringLength());
      const rapidjson::Value& v = it->value;
      if (name == "__metadata__") {
        if (!v.IsObject()) ZR_THROW(CheckpointError, "{}: __metadata__ is not an object", path_);
        for (auto m = v.MemberBegin(); m != v.MemberEnd(); ++m) {
          std::string key(m->name.GetString(), m->name.GetStringLength());
          if (!m->value.IsString()) ZR_THROW(CheckpointError, "{}: __metadata__.{} is not a string", path_, key);
          metadata_[key] = std::string(m->value.GetString(), m->value.GetStringLength());
        }
        continue;
      }
      if (!v.IsObject()) ZR_THROW(CheckpointError, "{}: tensor '{}': entry is not an object", path_, name);
      if (index_.count(name)) ZR_THROW(CheckpointError, "{}: tensor '{}' appears twice in the header", path_, name);
      SafetensorsTensorInfo info;
      info.name = name;
      auto dt = v.FindMember("dtype");
      if (dt == v.MemberEnd() || !dt->value.IsString()) {
        ZR_THROW(CheckpointError, "{}: tensor '{}': missing or non-string dtype", path_, name);
      }
      std::string dname(dt->value.GetString(), dt->value.GetStringLength());
      if (!SafetensorsDTypeFromName(dname, &info.dtype)) {
        ZR_THROW(CheckpointError, "{}: tensor '{}': unknown or unsupported dtype \"{}\" (known: F32 F16 BF16 F64 "
                 "I8 U8 I32 I64)", path_, name, dname);
      }
      auto sh = v.FindMember("shape");
      if (sh == v.MemberEnd() || !sh->value.IsArray()) {
        ZR_THROW(CheckpointError, "{}: tensor '{}': missing or non-array shape", path_, name);
      }
      for (const auto& d : sh->value.GetArray()) {
        uint64_t u = 0;
        if (!AsU64(d, &u) || u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          ZR_THROW(CheckpointError, "{}: tensor '{}': shape holds a value that is not a non-negative integer", path_,
                   name);
        }
        info.shape.push_back(static_cast<int64_t>(u));
      }
      auto off = v.FindMember("data_offsets");
      if (off == v.MemberEnd() || !off->value.IsArray() || off->value.Size() != 2 ||
          !AsU64(off->value[0], &info.begin) || !AsU64(off->value[1], &info.end)) {
        ZR_THROW(CheckpointError, "{}: tensor '{}': data_offsets must be two non-negative integers", path_, name);
      }
      if (info.begin > info.end || info.end > data_bytes) {
        ZR_THROW(CheckpointError, "{}: tensor '{}': data_offsets [{}, {}] out of range (data region: {} bytes)",
                 path_, name, info.begin, info.end, data_bytes);
      }
      uint64_t bytes = 0;
      if (!ByteSize(info.shape, DTypeSize(info.dtype), &bytes) || bytes != info.end - info.begin) {
        ZR_THROW(CheckpointError, "{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets span {}", path_,
                 name, ShapeToString(info.shape), dname, bytes, info.end - info.begin);
      }
      index_[name] = tensors_.size();
      tensors_.push_back(std::move(info));
    }
    // The data region must be covered exactly: sorted by offset, each tensor starts where the last ended.
    std::stable_sort(tensors_.begin(), tensors_.end(), [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) {
      return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
    });
    uint64_t at = 0;
    for (const SafetensorsTensorInfo& t : tensors_) {
      if (t.begin != at) {
        ZR_THROW(CheckpointError, "{}: tensor '{}': data_offsets [{}, {}] {} the previous tensor (which ends at {})",
                 path_, t.name, t.begin, t.end, t.begin < at ? "overlap" : "leave a hole after", at);
      }
      at = t.end;
    }
    if (at != data_bytes) {
      ZR_THROW(CheckpointError, "{}: the tensors cover {} bytes but the data region holds {} (truncated or trailing "
               "bytes)", path_, at, data_bytes);
    }
    index_.clear();
    for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  }
}

SafetensorsReader::~SafetensorsReader() = default;

void SafetensorsReader::ReadAt(uint64_t offset, void* dst, size_t bytes) const { file_->ReadAt(offset, dst, bytes); }

void SafetensorsReader::ReadData(uint64_t offset, void* dst, size_t bytes) const {
  const uint64_t data_bytes = file_bytes_ - data_begin_;
  if (offset > data_bytes || bytes > data_bytes - offset) {
    ZR_THROW(CheckpointError, "{}: read of bytes [{}, {}) of the data region, which holds {}", path_, offset,
             offset + bytes, data_bytes);
  }
  ReadAt(data_begin_ + offset, dst, bytes);
}

const SafetensorsTensorInfo* SafetensorsReader::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Tensor SafetensorsReader::Read(std::string_view name, MemCategory category) const {
  const SafetensorsTensorInfo* info = Find(name);
  if (!info) ZR_THROW(CheckpointError, "{}: no tensor '{}'", path_, name);
  Tensor t = Tensor::Empty(info->shape, info->dtype, Device::CPU(), category);
  ReadAt(data_begin_ + info->begin, t.data(), t.nbytes());
  return t;
}

void SafetensorsReader::ReadInto(const SafetensorsTensorInfo& info, const Tensor& dst) const {
  if (!dst.device().is_cpu() || dst.numel() != NumElements(info.shape)) {
    ZR_THROW(CheckpointError, "{}: tensor '{}' ({} {}) does not fit {}", path_, info.name,
             SafetensorsDTypeName(info.dtype), ShapeToString(info.shape), dst.ToString());
  }
  if (dst.dtype() == info.dtype) {
    ReadAt(data_begin_ + info.begin, dst.data(), dst.nbytes());
    return;
  }
  if (!IsFloating(dst.dtype()) || !IsFloating(info.dtype)) {
    ZR_THROW(CheckpointError, "{}: tensor '{}' is {} and cannot be converted to {}", path_, info.name,
             SafetensorsDTypeName(info.dtype), DTypeName(dst.dtype()));
  }
  Tensor tmp = Tensor::Empty(info.shape, info.dtype);
  ReadAt(data_begin_ + info.begin, tmp.data(), tmp.nbytes());
  dst.CopyFrom(tmp);
}

}  // namespace zerorun::runtime

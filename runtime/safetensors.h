// The safetensors file format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON {"<name>": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}} padded with spaces, then the tensors' raw little-endian bytes,
// contiguous, offsets relative to the end of the header. Used for the 16-bit model save
// (Engine::Save16BitModel) and the training checkpoint's shard files (runtime/checkpoint*.h): the
// writer streams one tensor (or one piece of a tensor) at a time, so a ZeRO-3 save never holds the
// full model, and publishes the file atomically. All file access goes through CheckpointEnv.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/core/tensor.h"
#include "zerorun/runtime/checkpoint_env.h"

namespace zerorun::runtime {

// The safetensors dtype string ("F32", "F16", "BF16", "F64", "I8", "U8", "I32", "I64") and back;
// SafetensorsDTypeFromName returns false for names zerorun has no type for ("BOOL", "F8_E4M3", ...).
const char* SafetensorsDTypeName(DType t);
bool SafetensorsDTypeFromName(std::string_view name, DType* out);

// One tensor of a file: its name, element type, shape and byte range relative to the data region.
struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // data_offsets[0]
  uint64_t end = 0;    // data_offsets[1]; end - begin = numel(shape) × DTypeSize(dtype)
};

struct SafetensorsWriterOptions {
  // Fault injection for tests: called before every write(2) (op "write", with the file offset it would
  // write at) and before fsync(2) (op "fsync"); a non-zero return is taken as that errno from the
  // system call. Null in production.
  std::function<int(std::string_view op, uint64_t offset)> inject_errno;
  // The file system (nullptr: CheckpointEnv::Posix()). Not owned; must outlive the writer.
  CheckpointEnv* env = nullptr;
};

// Streaming writer with atomic publication.
//
// Contract: the constructor takes every tensor's name, dtype and shape (names unique, not
// "__metadata__"; shapes non-negative), opens `<path>.tmp.<pid>` in the directory of `path` and writes
// the header; Append() then takes the tensors' bytes in exactly the declared order; Commit() checks that
// all were appended, fsyncs the file, renames it to `path` and fsyncs the directory. Until Commit()
// returns, an existing file at `path` is untouched. On any failure (ENOSPC, EIO, an unwritable or
// missing directory) the temporary file is removed and IoError names the path and the errno text; the
// writer is then dead (further calls throw). Destroying a writer that was not committed removes the
// temporary file. Bad declarations or appends out of order throw InvalidArgument naming the tensor.
// Not thread-safe.
class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::kF32;
    Shape shape;
  };

  SafetensorsWriter(std::string path, std::vector<Entry> entries, const std::map<std::string, std::string>& metadata,
                    SafetensorsWriterOptions options = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends the next declared tensor: a CPU tensor of the declared dtype and element count (its shape
  // may differ, e.g. a flat gathered buffer).
  void Append(const Tensor& t);
  // Appends the next declared tensor from raw bytes (exactly its byte size).
  void Append(const void* data, size_t bytes);
  // Appends the next `bytes` of the tensor being written (the next declared one, or the one a previous
  // AppendPart started): a tensor may arrive in any number of pieces, so a caller streaming a huge
  // tensor needs only a piece-sized buffer. InvalidArgument when `bytes` runs past the tensor's end.
  void AppendPart(const void* data, size_t bytes);
  // Publishes the file at path() (see the contract above).
  void Commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_path_; }
  // (The constructor first removes "<path>.tmp.<pid>" files whose writer process no longer exists:
  // what a writer killed before its commit leaves. Readers never open those names.)
  // Index of the next tensor Append expects (entries().size() when all are in).
  size_t next() const { return next_; }
  const std::vector<SafetensorsTensorInfo>& entries() const { return entries_; }
  // Total file size: 8 + header + data.
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  void RemoveStaleTemporaries();
  void WriteAll(const void* data, size_t bytes);
  void WriteOut(const void* data, size_t bytes);  // one Append to the file (and the fault hook)
  void Flush();
  [[noreturn]] void Fail(const std::string& what, int err);
  [[noreturn]] void Fail(const Error& e);
  void Discard() noexcept;

  std::string path_;
  std::string tmp_path_;
  SafetensorsWriterOptions options_;
  CheckpointEnv* env_ = nullptr;
  std::vector<SafetensorsTensorInfo> entries_;
  size_t next_ = 0;
  uint64_t part_bytes_ = 0;  // bytes of entries_[next_] already appended by AppendPart
  std::unique_ptr<WritableFile> file_;
  bool committed_ = false;
  bool failed_ = false;
  uint64_t offset_ = 0;      // bytes handed to write(2) so far
  uint64_t file_bytes_ = 0;
  std::vector<char> buffer_;  // coalesces small tensors into larger writes
};

// Writes `tensors` (CPU; names unique) with `metadata` in one go (SafetensorsWriter semantics).
void WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reader with strict validation.
//
// Contract: the constructor reads and validates the header; any violation throws CheckpointError naming
// the file and the tensor or field: a file shorter than 8 bytes, a header length beyond the file or above
// 100 MB, JSON that does not parse or is not an object of tensor entries, duplicate names, an unknown
// dtype, a negative or non-integer shape or offset, shape × dtype size ≠ the offsets' span, and offsets
// that overlap, leave holes or do not cover the data region exactly. A file that cannot be opened
// throws CheckpointError with the errno text; a failing read later throws IoError. Tensors are listed
// in data order. Reads are positional, so a const reader may be used from several threads.
class SafetensorsReader {
 public:
  // `env` (nullptr: CheckpointEnv::Posix()) must outlive the reader. `direct`: the file is opened
  // with CheckpointEnv::NewDirectReadableFile (large reads bypass the page cache).
  explicit SafetensorsReader(std::string path, CheckpointEnv* env = nullptr, bool direct = false);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const SafetensorsTensorInfo* Find(std::string_view name) const;
  // The tensor as a new CPU tensor of its file dtype and shape; CheckpointError if absent.
  Tensor Read(std::string_view name, MemCategory category = MemCategory::kOther) const;
  // Reads `info` (one of tensors()) into `dst`, a CPU tensor with the same element count; floating
  // dtypes are converted exactly as Convert() does, other dtypes must match (CheckpointError otherwise).
  void ReadInto(const SafetensorsTensorInfo& info, const Tensor& dst) const;
  // Offset of the data region in the file (8 + header length).
  uint64_t data_begin() const { return data_begin_; }
  uint64_t file_bytes() const { return file_bytes_; }
  // Reads `bytes` raw bytes at `offset` relative to the data region (for ranged reads of part of a
  // tensor); CheckpointError when the range leaves the data region.
  void ReadData(uint64_t offset, void* dst, size_t bytes) const;

 private:
  void ReadAt(uint64_t offset, void* dst, size_t bytes) const;

  std::string path_;
  std::unique_ptr<ReadableFile> file_;
  uint64_t file_bytes_ = 0;
  uint64_t data_begin_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace zerorun::runtime

// CheckpointEnv: the one seam through which checkpoint (and safetensors) code touches the file
// system, in the manner of LevelDB's Env. Production uses the POSIX implementation; tests wrap it to
// inject ENOSPC, short writes, EIO and crash points, and to drop what was never fsynced
// (tests/checkpoint/ckpt_test_util.h: FaultEnv). Whole-file operations (rename, renameat2 exchange,
// directory fsync and listing) because the crash model is about them; offload::FileEnv, the I/O
// engines' syscall-level seam, has none of those yet (docs/checkpoint.md).
//
// Errors: every operation that fails throws IoError whose message names the path and the errno text.
// Paths are plain strings ("/" separated); nothing here resolves or normalises them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zerorun::runtime {

// A file opened for sequential writing (created, or truncated when it exists).
// Not thread-safe; one writer per file.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all `bytes` at the end of the file (loops over short writes and EINTR).
  virtual void Append(const void* data, size_t bytes) = 0;
  // fsync(2): the bytes appended so far are durable when this returns.
  virtual void Sync() = 0;
  // Closes the file (a failing close(2) is reported). Further calls throw. The destructor closes
  // silently when Close() was not called.
  virtual void Close() = 0;
  virtual const std::string& path() const = 0;
};

// A file opened for positional reads. Reads of a const object may run from several threads.
class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly `bytes` at `offset`; a read past the end of the file throws CheckpointError
  // ("unexpected end of file"), a failing pread(2) IoError.
  virtual void ReadAt(uint64_t offset, void* dst, size_t bytes) const = 0;
  virtual const std::string& path() const = 0;
};

enum class FileKind { kMissing, kFile, kDirectory, kOther };

struct FileStat {
  FileKind kind = FileKind::kMissing;
  uint64_t bytes = 0;  // regular files
};

class CheckpointEnv {
 public:
  virtual ~CheckpointEnv() = default;

  // The POSIX implementation (a process-wide singleton; thread-safe).
  static CheckpointEnv& Posix();

  virtual std::unique_ptr<WritableFile> NewWritableFile(const std::string& path) = 0;
  // CheckpointError when the file is missing or is not a regular file (naming it); IoError otherwise.
  virtual std::unique_ptr<ReadableFile> NewReadableFile(const std::string& path) = 0;
  // The same file for reads that bypass the page cache where the file system allows: the POSIX
  // implementation reads calls of at least 1 MiB with O_DIRECT (through an aligned buffer per
  // thread), smaller ones buffered, and falls back to buffered reads where O_DIRECT is refused or
  // ZERORUN_CKPT_DIRECT=0 is set. By default, NewReadableFile.
  virtual std::unique_ptr<ReadableFile> NewDirectReadableFile(const std::string& path) { return NewReadableFile(path); }

  // stat(2), following links: a missing path is kMissing, never an error.
  virtual FileStat Stat(const std::string& path) = 0;
  // The names in `dir` (no "." or ".."), sorted.
  virtual std::vector<std::string> ListDir(const std::string& dir) = 0;
  // mkdir(2) of one level; succeeds when `dir` already is a directory; IoError naming it when it
  // exists as something else ("is a file, not a directory").
  virtual void CreateDir(const std::string& dir) = 0;
  // CreateDir of `dir` and every missing parent.
  void CreateDirs(const std::string& dir);
  // rename(2): atomically replaces `to` when it is a file or an empty directory.
  virtual void Rename(const std::string& from, const std::string& to) = 0;
  // renameat2(RENAME_EXCHANGE): atomically swaps two existing entries (e.g. a complete new checkpoint
  // directory with the old one of the same tag). Returns false, changing nothing, when the file
  // system does not support it (EINVAL/ENOSYS); other failures throw.
  virtual bool Exchange(const std::string& a, const std::string& b) = 0;
  // fsync(2) of a directory: the entries created, renamed or removed in it so far are durable.
  virtual void SyncDir(const std::string& dir) = 0;
  // unlink(2) of a file; a missing file is not an error.
  virtual void RemoveFile(const std::string& path) = 0;
  // Removes `path` and, for a directory, everything under it; a missing path is not an error.
  virtual void RemoveAll(const std::string& path) = 0;

  // Conveniences over the primitives above.
  std::string ReadFileToString(const std::string& path);
  // Writes `bytes` to `path` through `path.tmp.<suffix>`: write, fsync, rename, fsync the directory.
  // On failure the temporary is removed and `path` is untouched.
  void WriteFileAtomic(const std::string& path, const std::string& bytes, const std::string& suffix);
};

// Path helpers (no file-system access).
std::string JoinPath(const std::string& dir, const std::string& name);
std::string DirName(const std::string& path);   // "a/b/c" -> "a/b"; "c" -> "."; "/c" -> "/"
std::string BaseName(const std::string& path);  // "a/b/c" -> "c"

}  // namespace zerorun::runtime

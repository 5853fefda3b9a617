// The file-system seam (LevelDB's Env idea): every operation the I/O engines and the swap-file layer
// perform on files passes through a FileEnv, so tests can inject faults — short reads and writes,
// ENOSPC, EIO, a failing io_uring setup — through the same path production uses. PosixFileEnv is the
// real one; tests wrap it (tests/offload/fault_env.h).
//
// Conventions: every method returns what the system call returns, with failures as -errno (never
// errno plus -1), and never throws. Callers interpret, retry and report; no method asserts.
// IoFile is the RAII handle the engines take: an open descriptor with its path and open mode.
#pragma once

#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

struct io_uring;  // liburing's ring; only pointers cross this header
struct iovec;

namespace zerorun::offload {

enum class IoOp : uint8_t { kRead = 0, kWrite = 1 };
const char* IoOpName(IoOp op);  // "read", "write"

// A span of host memory (a pinned buffer handed to IoEngine::RegisterBuffers, ...).
struct IoRegion {
  void* data = nullptr;
  int64_t bytes = 0;
};

// Buffers, offsets and lengths of O_DIRECT requests are multiples of this (the page size; it covers
// 512-byte and 4 KiB logical sectors alike).
inline constexpr int64_t kDirectIoAlignment = 4096;

// Thread safety: every method may be called from several threads at once.
class FileEnv {
 public:
  virtual ~FileEnv() = default;

  // open(2): a descriptor, or -errno.
  virtual int Open(const std::string& path, int flags, mode_t mode) = 0;
  virtual int Close(int fd) = 0;
  // pread(2)/pwrite(2): bytes transferred (possibly fewer than asked), or -errno.
  virtual int64_t Pread(int fd, void* buf, int64_t bytes, int64_t offset) = 0;
  virtual int64_t Pwrite(int fd, const void* buf, int64_t bytes, int64_t offset) = 0;
  virtual int Fsync(int fd) = 0;
  // fallocate(2) mode 0 (allocates blocks; the file grows to offset + bytes if shorter).
  virtual int Fallocate(int fd, int64_t offset, int64_t bytes) = 0;
  virtual int Ftruncate(int fd, int64_t bytes) = 0;
  virtual int Fstat(int fd, struct stat* st) = 0;
  virtual int Stat(const std::string& path, struct stat* st) = 0;
  virtual int Statfs(const std::string& path, struct statfs* st) = 0;
  virtual int Access(const std::string& path, int mode) = 0;
  virtual int Mkdir(const std::string& path, mode_t mode) = 0;
  virtual int Unlink(const std::string& path) = 0;
  virtual int Rmdir(const std::string& path) = 0;
  // flock(2) with LOCK_EX | LOCK_NB.
  virtual int LockExclusive(int fd) = 0;

  // io_uring: ring setup and buffer registration go through the seam (tests make them fail), and so
  // does every completion: `result` is the CQE's res for a request of `bytes` at `offset` of `fd`;
  // the return value is what the engine acts on (PosixFileEnv returns `result`).
  virtual int UringQueueInit(unsigned entries, struct io_uring* ring, unsigned flags) = 0;
  virtual int UringRegisterBuffers(struct io_uring* ring, const struct iovec* iov, unsigned count) = 0;
  virtual int64_t UringCompleted(IoOp op, int fd, int64_t offset, int64_t bytes, int64_t result) {
    (void)op, (void)fd, (void)offset, (void)bytes;
    return result;
  }

  // The process-wide real environment.
  static FileEnv& Default();
};

class PosixFileEnv : public FileEnv {
 public:
  int Open(const std::string& path, int flags, mode_t mode) override;
  int Close(int fd) override;
  int64_t Pread(int fd, void* buf, int64_t bytes, int64_t offset) override;
  int64_t Pwrite(int fd, const void* buf, int64_t bytes, int64_t offset) override;
  int Fsync(int fd) override;
  int Fallocate(int fd, int64_t offset, int64_t bytes) override;
  int Ftruncate(int fd, int64_t bytes) override;
  int Fstat(int fd, struct stat* st) override;
  int Stat(const std::string& path, struct stat* st) override;
  int Statfs(const std::string& path, struct statfs* st) override;
  int Access(const std::string& path, int mode) override;
  int Mkdir(const std::string& path, mode_t mode) override;
  int Unlink(const std::string& path) override;
  int Rmdir(const std::string& path) override;
  int LockExclusive(int fd) override;
  int UringQueueInit(unsigned entries, struct io_uring* ring, unsigned flags) override;
  int UringRegisterBuffers(struct io_uring* ring, const struct iovec* iov, unsigned count) override;
};

// How IoFile::Open opens a file.
struct IoFileMode {
  bool write = false;   // O_RDWR instead of O_RDONLY
  bool create = false;  // O_CREAT (mode 0600)
  bool direct = true;   // O_DIRECT: requests must be aligned to kDirectIoAlignment
};

// An open file: descriptor, path and mode. Move-only; closes on destruction.
class IoFile {
 public:
  IoFile() = default;
  // Throws IoError naming the path and the errno text; O_DIRECT refused by the file system (EINVAL,
  // as on tmpfs) says so.
  static IoFile Open(const std::string& path, IoFileMode mode, FileEnv& env = FileEnv::Default());
  ~IoFile();
  IoFile(IoFile&& o) noexcept;
  IoFile& operator=(IoFile&& o) noexcept;
  IoFile(const IoFile&) = delete;
  IoFile& operator=(const IoFile&) = delete;

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool direct() const { return mode_.direct; }
  bool writable() const { return mode_.write; }
  FileEnv& env() const { return *env_; }
  // 1 for buffered files, kDirectIoAlignment for O_DIRECT ones.
  int64_t alignment() const { return mode_.direct ? kDirectIoAlignment : 1; }
  // The current size (fstat). Throws IoError.
  int64_t Size() const;
  void Close();

 private:
  int fd_ = -1;
  std::string path_;
  IoFileMode mode_;
  FileEnv* env_ = nullptr;
};

// The file system holding `path`, by statfs magic: "ext4", "xfs", "btrfs", "tmpfs", "nfs", ... or
// "unknown (0x...)".
std::string FileSystemName(FileEnv& env, const std::string& path);
// Bytes available to unprivileged writers on the file system holding `path`; -1 when statfs fails.
int64_t FreeBytes(FileEnv& env, const std::string& path);

}  // namespace zerorun::offload

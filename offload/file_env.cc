// PosixFileEnv (system calls, -errno on failure) and IoFile.
#include "zerorun/offload/file_env.h"

#include <fcntl.h>
#include <liburing.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "zerorun/core/error.h"

namespace zerorun::offload {

const char* IoOpName(IoOp op) { return op == IoOp::kRead ? "read" : "write"; }

namespace {
int Ret(int r) { return r < 0 ? -errno : r; }
int64_t Ret64(ssize_t r) { return r < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(r); }
}  // namespace

int PosixFileEnv::Open(const std::string& path, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return Ret(fd);
}
int PosixFileEnv::Close(int fd) { return Ret(::close(fd)); }
int64_t PosixFileEnv::Pread(int fd, void* buf, int64_t bytes, int64_t offset) {
  return Ret64(::pread(fd, buf, static_cast<size_t>(bytes), static_cast<off_t>(offset)));
}
int64_t PosixFileEnv::Pwrite(int fd, const void* buf, int64_t bytes, int64_t offset) {
  return Ret64(::pwrite(fd, buf, static_cast<size_t>(bytes), static_cast<off_t>(offset)));
}
int PosixFileEnv::Fsync(int fd) { return Ret(::fsync(fd)); }
int PosixFileEnv::Fallocate(int fd, int64_t offset, int64_t bytes) {
  return Ret(::fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(bytes)));
}
int PosixFileEnv::Ftruncate(int fd, int64_t bytes) { return Ret(::ftruncate(fd, static_cast<off_t>(bytes))); }
int PosixFileEnv::Fstat(int fd, struct stat* st) { return Ret(::fstat(fd, st)); }
int PosixFileEnv::Stat(const std::string& path, struct stat* st) { return Ret(::stat(path.c_str(), st)); }
int PosixFileEnv::Statfs(const std::string& path, struct statfs* st) { return Ret(::statfs(path.c_str(), st)); }
int PosixFileEnv::Access(const std::string& path, int mode) { return Ret(::access(path.c_str(), mode)); }
int PosixFileEnv::Mkdir(const std::string& path, mode_t mode) { return Ret(::mkdir(path.c_str(), mode)); }
int PosixFileEnv::Unlink(const std::string& path) { return Ret(::unlink(path.c_str())); }
int PosixFileEnv::Rmdir(const std::string& path) { return Ret(::rmdir(path.c_str())); }
int PosixFileEnv::LockExclusive(int fd) { return Ret(::flock(fd, LOCK_EX | LOCK_NB)); }
// liburing returns -errno itself.
int PosixFileEnv::UringQueueInit(unsigned entries, struct io_uring* ring, unsigned flags) {
  return io_uring_queue_init(entries, ring, flags);
}
int PosixFileEnv::UringRegisterBuffers(struct io_uring* ring, const struct iovec* iov, unsigned count) {
  return io_uring_register_buffers(ring, iov, count);
}

FileEnv& FileEnv::Default() {
  static PosixFileEnv env;
  return env;
}

IoFile IoFile::Open(const std::string& path, IoFileMode mode, FileEnv& env) {
  int flags = mode.write ? O_RDWR : O_RDONLY;
  if (mode.create) flags |= O_CREAT;
  if (mode.direct) flags |= O_DIRECT;
  const int fd = env.Open(path, flags, 0600);
  if (fd < 0) {
    if (fd == -EINVAL && mode.direct) {
      ZR_THROW(IoError, "cannot open {} with O_DIRECT: the file system ({}) does not support direct I/O", path,
               FileSystemName(env, path));
    }
    throw IoError(ErrnoMessage(Format("cannot open {} for {}", path, mode.write ? "reading and writing" : "reading"),
                               -fd));
  }
  IoFile f;
  f.fd_ = fd;
  f.path_ = path;
  f.mode_ = mode;
  f.env_ = &env;
  return f;
}

IoFile::~IoFile() { Close(); }

IoFile::IoFile(IoFile&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)), mode_(o.mode_), env_(o.env_) {}

IoFile& IoFile::operator=(IoFile&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    mode_ = o.mode_;
    env_ = o.env_;
  }
  return *this;
}

void IoFile::Close() {
  if (fd_ >= 0) {
    env_->Close(fd_);  // nothing to do about a failing close of a file whose writes were all checked
    fd_ = -1;
  }
}

int64_t IoFile::Size() const {
  struct stat st {};
  const int r = env_->Fstat(fd_, &st);
  if (r < 0) throw IoError(ErrnoMessage(Format("fstat of {}", path_), -r));
  return static_cast<int64_t>(st.st_size);
}

std::string FileSystemName(FileEnv& env, const std::string& path) {
  struct statfs st {};
  if (env.Statfs(path, &st) < 0) {
    // The path may not exist yet: ask about its directory.
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos || env.Statfs(slash == 0 ? "/" : path.substr(0, slash), &st) < 0) {
      return "unknown";
    }
  }
  switch (static_cast<unsigned long>(st.f_type)) {
    case EXT4_SUPER_MAGIC: return "ext4";  // also ext2/ext3 (same magic)
    case XFS_SUPER_MAGIC: return "xfs";
    case BTRFS_SUPER_MAGIC: return "btrfs";
    case TMPFS_MAGIC: return "tmpfs";
    case RAMFS_MAGIC: return "ramfs";
    case NFS_SUPER_MAGIC: return "nfs";
    case OVERLAYFS_SUPER_MAGIC: return "overlayfs";
    case 0x2fc12fc1: return "zfs";
    case 0x65735546: return "fuse";
    case 0xf2f52010: return "f2fs";
    default: return Format("unknown (0x{})", [&] {
      static const char* kHex = "0123456789abcdef";
      std::string s;
      for (auto v = static_cast<unsigned long>(st.f_type); v; v >>= 4) s.insert(s.begin(), kHex[v & 15]);
      return s.empty() ? std::string("0") : s;
    }());
  }
}

int64_t FreeBytes(FileEnv& env, const std::string& path) {
  struct statfs st {};
  if (env.Statfs(path, &st) < 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_bsize);
}

}  // namespace zerorun::offload

// The POSIX CheckpointEnv: open/write/fsync/rename/renameat2 with every failure carrying its errno.
#include "zerorun/runtime/checkpoint_env.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/offload/file_env.h"
#include "zerorun/offload/io_engine.h"

namespace zerorun::runtime {

namespace {

[[noreturn]] void ThrowErrno(const std::string& what, int err) { ZR_THROW(IoError, "{}", ErrnoMessage(what, err)); }

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void Append(const void* data, size_t bytes) override {
    CheckOpen();
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      // At most kWritebackBytes per write(2), each followed by starting the writeback of what has
      // not been started yet: the disk writes while the next bytes are copied into the page cache,
      // so the final fsync waits for the last piece only (otherwise the whole file stays dirty below
      // the kernel's background threshold and is written after the copying, in series with it).
      ssize_t r = ::write(fd_, p, std::min(bytes, kWritebackBytes));
      if (r < 0) {
        if (errno == EINTR) continue;
        ThrowErrno(Format("write to {}", path_), errno);
      }
      p += r;
      bytes -= static_cast<size_t>(r);
      written_ += static_cast<uint64_t>(r);
      if (written_ - started_ >= kWritebackBytes) {
        // A hint (fsync reports the errors that matter): a file system without it keeps its default.
        ::sync_file_range(fd_, static_cast<off_t>(started_), static_cast<off_t>(written_ - started_),
                          SYNC_FILE_RANGE_WRITE);
        started_ = written_;
      }
    }
  }
  void Sync() override {
    CheckOpen();
    if (::fsync(fd_) != 0) ThrowErrno(Format("fsync of {}", path_), errno);
  }
  void Close() override {
    CheckOpen();
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) ThrowErrno(Format("close of {}", path_), errno);
  }
  const std::string& path() const override { return path_; }

 private:
  void CheckOpen() const {
    if (fd_ < 0) ZR_THROW(InvalidArgument, "{}: file already closed", path_);
  }
  static constexpr size_t kWritebackBytes = size_t{8} << 20;
  std::string path_;
  int fd_;
  uint64_t written_ = 0;  // bytes appended (the file is written sequentially from offset 0)
  uint64_t started_ = 0;  // bytes whose writeback was started
};

// O_DIRECT writes through the offload I/O engine (io_uring; pread/pwrite where a ring cannot be set up).
// Append copies into page-aligned buffers and each full buffer is written while the next ones fill, so
// the disk writes while the caller copies and hashes, and the file takes no page-cache pages (on this
// project's VMs a buffered save spends most of its time getting fresh page-cache pages). The last
// partial buffer is written padded to the alignment and stays in memory, so that later Appends extend
// it; the file is truncated to the bytes appended before every fsync and at Close.
class DirectWritableFile final : public WritableFile {
 public:
  DirectWritableFile(std::string path, offload::IoFile file) : path_(std::move(path)), file_(std::move(file)) {
    offload::IoEngineOptions o;
    o.block_size = static_cast<int64_t>(kBufferBytes);  // one request per buffer
    o.queue_depth = static_cast<int>(kBuffers);
    // io_uring, or (where rings cannot be set up, e.g. a seccomp profile that blocks them) the pread
    // engine, said once per process rather than for every file.
    static std::atomic<bool> no_uring{false};
    if (!no_uring.load()) {
      try {
        o.kind = offload::IoEngineKind::kUring;
        engine_ = offload::CreateIoEngine(o);
        return;
      } catch (const IoError& e) {
        if (!no_uring.exchange(true)) ZR_WARN("checkpoint files: {}; writing them with pwrite instead", e.what());
      }
    }
    o.kind = offload::IoEngineKind::kPread;
    engine_ = offload::CreateIoEngine(o);
  }
  ~DirectWritableFile() override {
    for (Buffer& b : bufs_) {
      try {
        b.work.Wait();  // the engine must not write from freed memory
      } catch (...) {
      }
      std::free(b.data);
    }
  }

  void Append(const void* data, size_t bytes) override {
    CheckOpen();
    const char* p = static_cast<const char*>(data);
    if (bytes > 0) dirty_ = true;
    while (bytes > 0) {
      Buffer& b = Current();
      const size_t n = std::min(bytes, kBufferBytes - fill_);
      std::memcpy(b.data + fill_, p, n);
      fill_ += n;
      p += n;
      bytes -= n;
      if (fill_ == kBufferBytes) {
        b.work = engine_->SubmitWrite(file_, static_cast<int64_t>(offset_), b.data, static_cast<int64_t>(kBufferBytes));
        offset_ += kBufferBytes;
        fill_ = 0;
        cur_ = (cur_ + 1) % kBuffers;
        ready_ = false;
      }
    }
  }
  void Sync() override {
    CheckOpen();
    Drain();
    if (::fsync(file_.fd()) != 0) ThrowErrno(Format("fsync of {}", path_), errno);
  }
  void Close() override {
    CheckOpen();
    Drain();
    closed_ = true;
    file_.Close();
  }
  const std::string& path() const override { return path_; }

 private:
  // Up to 8 requests of 2 MiB in flight, 16 MiB of memory per open file. In 5 interleaved saves of a
  // 513 MB checkpoint (2026-12-04, ext4 on virtio) the median was 0.267 s, against 0.346 s for 8 x 1 MiB
  // and 0.340 s for 4 x 2 MiB.
  static constexpr size_t kBufferBytes = size_t{2} << 20;
  static constexpr size_t kBuffers = 8;
  struct Buffer {
    char* data = nullptr;
    offload::IoWork work;
  };

  void CheckOpen() const {
    if (closed_) ZR_THROW(InvalidArgument, "{}: file already closed", path_);
  }
  // The buffer being filled: allocated on first use, its previous write complete.
  Buffer& Current() {
    if (bufs_.empty()) bufs_.resize(kBuffers);
    Buffer& b = bufs_[cur_];
    if (!ready_) {
      b.work.Wait();  // IoError naming the file, the offset and the errno text
      if (b.data == nullptr) {
        b.data = static_cast<char*>(std::aligned_alloc(static_cast<size_t>(offload::kDirectIoAlignment), kBufferBytes));
        if (b.data == nullptr) ZR_THROW(OutOfMemoryError, "{}: no memory for a {} B write buffer", path_, kBufferBytes);
      }
      ready_ = true;
    }
    return b;
  }
  // Writes the partial buffer padded to the alignment, waits for every write and cuts the file to the
  // bytes appended.
  void Drain() {
    if (!dirty_) return;  // nothing appended since the last Drain (a Close after a Sync)
    if (fill_ > 0) {
      Buffer& b = Current();
      const size_t a = static_cast<size_t>(offload::kDirectIoAlignment);
      const size_t padded = (fill_ + a - 1) / a * a;
      std::memset(b.data + fill_, 0, padded - fill_);
      b.work = engine_->SubmitWrite(file_, static_cast<int64_t>(offset_), b.data, static_cast<int64_t>(padded));
      ready_ = false;  // Current() waits for it before the next Append writes into the buffer
    }
    for (Buffer& b : bufs_) b.work.Wait();
    if (::ftruncate(file_.fd(), static_cast<off_t>(offset_ + fill_)) != 0) {
      ThrowErrno(Format("truncate of {} to {} bytes", path_, offset_ + fill_), errno);
    }
    dirty_ = false;
  }

  std::string path_;
  offload::IoFile file_;
  std::unique_ptr<offload::IoEngine> engine_;
  std::vector<Buffer> bufs_;
  size_t cur_ = 0;        // the buffer being filled
  bool ready_ = false;    // bufs_[cur_] is allocated and no write from it is in flight
  size_t fill_ = 0;       // bytes in it
  uint64_t offset_ = 0;   // where it goes in the file (a multiple of kBufferBytes)
  bool dirty_ = true;     // bytes appended since the last Drain (true at first: an empty file is cut to 0)
  bool closed_ = false;
};

// ZERORUN_CKPT_DIRECT=0: checkpoint files are written and read through the page cache everywhere (the
// buffered writer; a one-pass load reads buffered).
bool DirectIoEnabled() {
  const char* v = std::getenv("ZERORUN_CKPT_DIRECT");
  return v == nullptr || std::string_view(v) != "0";
}

[[noreturn]] void ThrowEndOfFile(const std::string& path, uint64_t offset) {
  ZR_THROW(CheckpointError, "{}: unexpected end of file at offset {} (truncated or changed while reading?)", path,
           offset);
}

// Reads through pread(2). With a second descriptor opened O_DIRECT (`direct_fd` >= 0), reads of at
// least kDirectReadBytes bypass the page cache: whole aligned blocks are read into a per-thread
// aligned bounce buffer and the wanted bytes copied out (straight into the destination when it, the
// offset and the length are all aligned).
class PosixReadableFile final : public ReadableFile {
 public:
  static constexpr size_t kDirectReadBytes = size_t{1} << 20;
  static constexpr size_t kBounceBytes = size_t{4} << 20;

  PosixReadableFile(std::string path, int fd, uint64_t size, int direct_fd = -1)
      : path_(std::move(path)), fd_(fd), direct_fd_(direct_fd), size_(size) {}
  ~PosixReadableFile() override {
    ::close(fd_);
    if (direct_fd_ >= 0) ::close(direct_fd_);
  }
  uint64_t size() const override { return size_; }
  void ReadAt(uint64_t offset, void* dst, size_t bytes) const override {
    if (direct_fd_ >= 0 && bytes >= kDirectReadBytes && ReadDirect(offset, static_cast<char*>(dst), bytes)) return;
    Pread(fd_, offset, static_cast<char*>(dst), bytes);
  }
  const std::string& path() const override { return path_; }

 private:
  // Exactly `bytes` at `offset`, or the end-of-file error.
  void Pread(int fd, uint64_t offset, char* p, size_t bytes) const {
    while (bytes > 0) {
      ssize_t r = ::pread(fd, p, bytes, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        ThrowErrno(Format("read of {} at offset {}", path_, offset), errno);
      }
      if (r == 0) ThrowEndOfFile(path_, offset);
      p += r;
      bytes -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  }

  // False when the file system refuses the O_DIRECT read (EINVAL: the caller reads buffered).
  bool ReadDirect(uint64_t offset, char* dst, size_t bytes) const {
    constexpr uint64_t kAlign = static_cast<uint64_t>(offload::kDirectIoAlignment);
    const auto aligned = [&](uint64_t v) { return v % kAlign == 0; };
    if (aligned(offset) && aligned(bytes) && aligned(reinterpret_cast<uintptr_t>(dst))) {
      const ssize_t r = ::pread(direct_fd_, dst, bytes, static_cast<off_t>(offset));
      if (r == static_cast<ssize_t>(bytes)) return true;
      if (r < 0 && errno == EINVAL) return false;
      // Short (the end of the file) or interrupted: the general path below reads it again.
    }
    struct Free {
      void operator()(char* p) const { std::free(p); }
    };
    thread_local std::unique_ptr<char, Free> bounce;
    if (!bounce) {
      bounce.reset(static_cast<char*>(std::aligned_alloc(kAlign, kBounceBytes + kAlign)));
      if (!bounce) ZR_THROW(IoError, "read of {}: cannot allocate a {}-byte aligned buffer", path_, kBounceBytes);
    }
    while (bytes > 0) {
      const uint64_t begin = offset - offset % kAlign;
      const size_t n = std::min(bytes, static_cast<size_t>(kBounceBytes - (offset - begin)));
      const uint64_t want_end = offset + n;
      const uint64_t end = (want_end + kAlign - 1) / kAlign * kAlign;
      size_t got = 0;
      while (begin + got < want_end) {
        const ssize_t r = ::pread(direct_fd_, bounce.get() + got, static_cast<size_t>(end - begin - got),
                                  static_cast<off_t>(begin + got));
        if (r < 0) {
          if (errno == EINTR) continue;
          if (errno == EINVAL && got == 0) return false;
          ThrowErrno(Format("read of {} at offset {}", path_, begin + got), errno);
        }
        if (r == 0) ThrowEndOfFile(path_, begin + got);
        got += static_cast<size_t>(r);
        if (got % kAlign != 0 && begin + got < want_end) ThrowEndOfFile(path_, begin + got);
      }
      std::memcpy(dst, bounce.get() + (offset - begin), n);
      dst += n;
      bytes -= n;
      offset += n;
    }
    return true;
  }

  std::string path_;
  int fd_;
  int direct_fd_;
  uint64_t size_;
};

class PosixEnv final : public CheckpointEnv {
 public:
  std::unique_ptr<WritableFile> NewWritableFile(const std::string& path) override {
    const bool direct = DirectIoEnabled();
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
    if (fd < 0 && direct && errno == EINVAL) {
      // The file system refuses O_DIRECT (tmpfs before Linux 6.6, some FUSE file systems): buffered
      // writes.
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) return std::make_unique<PosixWritableFile>(path, fd);
    }
    if (fd < 0) ThrowErrno(Format("cannot create {}", path), errno);
    if (!direct) return std::make_unique<PosixWritableFile>(path, fd);
    ::close(fd);  // created (0644) and emptied: the engine's file opens it again
    return std::make_unique<DirectWritableFile>(path, offload::IoFile::Open(path, {.write = true, .create = false, .direct = true}));
  }

  std::unique_ptr<ReadableFile> NewReadableFile(const std::string& path) override { return OpenForReading(path, false); }

  std::unique_ptr<ReadableFile> NewDirectReadableFile(const std::string& path) override {
    return OpenForReading(path, DirectIoEnabled());
  }

  FileStat Stat(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      int err = errno;
      if (err == ENOENT || err == ENOTDIR) return {};
      ThrowErrno(Format("cannot stat {}", path), err);
    }
    FileStat out;
    if (S_ISREG(st.st_mode)) {
      out.kind = FileKind::kFile;
      out.bytes = static_cast<uint64_t>(st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      out.kind = FileKind::kDirectory;
    } else {
      out.kind = FileKind::kOther;
    }
    return out;
  }

  std::vector<std::string> ListDir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (!d) ThrowErrno(Format("cannot list directory {}", dir), errno);
    std::vector<std::string> names;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(std::move(n));
      errno = 0;
    }
    int err = errno;
    ::closedir(d);
    if (err != 0) ThrowErrno(Format("cannot list directory {}", dir), err);
    std::sort(names.begin(), names.end());
    return names;
  }

  void CreateDir(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) == 0) return;
    int err = errno;
    if (err == EEXIST) {
      FileStat st = Stat(dir);
      if (st.kind == FileKind::kDirectory) return;
      ZR_THROW(IoError, "cannot create directory {}: it exists and is {}, not a directory", dir,
               st.kind == FileKind::kFile ? "a file" : "something else");
    }
    if (err == ENOTDIR) {
      ZR_THROW(IoError, "cannot create directory {}: a component of its parent is a file, not a directory", dir);
    }
    ThrowErrno(Format("cannot create directory {}", dir), err);
  }

  void Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) ThrowErrno(Format("cannot rename {} to {}", from, to), errno);
  }

  bool Exchange(const std::string& a, const std::string& b) override {
    if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
    int err = errno;
    if (err == EINVAL || err == ENOSYS) return false;
    ThrowErrno(Format("cannot exchange {} and {}", a, b), err);
  }

  void SyncDir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) ThrowErrno(Format("cannot open directory {} to sync it", dir), errno);
    if (::fsync(fd) != 0) {
      int err = errno;
      ::close(fd);
      ThrowErrno(Format("fsync of directory {}", dir), err);
    }
    ::close(fd);
  }

  void RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) ThrowErrno(Format("cannot remove {}", path), errno);
  }

  void RemoveAll(const std::string& path) override {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return;
      ThrowErrno(Format("cannot stat {}", path), errno);
    }
    if (S_ISDIR(st.st_mode)) {
      for (const std::string& n : ListDir(path)) RemoveAll(JoinPath(path, n));
      if (::rmdir(path.c_str()) != 0 && errno != ENOENT) ThrowErrno(Format("cannot remove directory {}", path), errno);
      return;
    }
    RemoveFile(path);
  }

 private:
  // A regular file for reads; `direct`: with a second descriptor opened O_DIRECT (none where the file
  // system refuses it: buffered reads).
  static std::unique_ptr<PosixReadableFile> OpenForReading(const std::string& path, bool direct) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT || err == ENOTDIR) {
        ZR_THROW(CheckpointError, "{}", ErrnoMessage(Format("cannot open {}", path), err));
      }
      ThrowErrno(Format("cannot open {}", path), err);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      ThrowErrno(Format("cannot stat {}", path), err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      ZR_THROW(CheckpointError, "{}: not a regular file", path);
    }
    int direct_fd = -1;
    if (direct) {
      direct_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      if (direct_fd < 0 && errno != EINVAL) {
        int err = errno;
        ::close(fd);
        ThrowErrno(Format("cannot open {}", path), err);
      }
    }
    return std::make_unique<PosixReadableFile>(path, fd, static_cast<uint64_t>(st.st_size), direct_fd);
  }
};

}  // namespace

CheckpointEnv& CheckpointEnv::Posix() {
  static PosixEnv env;
  return env;
}

void CheckpointEnv::CreateDirs(const std::string& dir) {
  if (dir.empty() || dir == "." || dir == "/") return;
  FileStat st = Stat(dir);
  if (st.kind == FileKind::kDirectory) return;
  if (st.kind == FileKind::kMissing) CreateDirs(DirName(dir));
  CreateDir(dir);
}

std::string CheckpointEnv::ReadFileToString(const std::string& path) {
  std::unique_ptr<ReadableFile> f = NewReadableFile(path);
  std::string out(f->size(), '\0');
  f->ReadAt(0, out.data(), out.size());
  return out;
}

void CheckpointEnv::WriteFileAtomic(const std::string& path, const std::string& bytes, const std::string& suffix) {
  const std::string tmp = path + ".tmp." + suffix;
  try {
    std::unique_ptr<WritableFile> f = NewWritableFile(tmp);
    f->Append(bytes.data(), bytes.size());
    f->Sync();
    f->Close();
    Rename(tmp, path);
  } catch (...) {
    try {
      RemoveFile(tmp);
    } catch (const Error&) {  // the original failure is the one to report
    }
    throw;
  }
  SyncDir(DirName(path));
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string DirName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace zerorun::runtime

// Helpers of the offload tests: a fault-injecting FileEnv (wrapping the real one, so faults travel the
// same seam production uses), temporary directories, closed-form data, and engine factories.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/common/skip.h"
#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/offload/file_env.h"
#include "zerorun/offload/io_engine.h"

namespace zr_offload_test {

using namespace zerorun;
using namespace zerorun::offload;
namespace fs = std::filesystem;

// What a fault rule does to a matching request. Rules are tried in order; the first that matches
// (and has hits left) acts.
struct Fault {
  IoOp op = IoOp::kWrite;
  std::string path_contains = "";  // files whose path contains this ("" : every file)
  int64_t at_offset = -1;     // requests whose range holds this file offset (-1: every request)
  int err = 0;                // fail with -err (0: do not fail)
  bool shorten = false;       // move half of the request, in whole 4 KiB blocks (requests >= 8 KiB only)
  int times = -1;             // requests it hits (-1: every one)
};

// A PosixFileEnv with faults. Pread/Pwrite faults act before the call (a failed write writes nothing,
// a short one writes its first half); io_uring faults rewrite the completion's result (the kernel has
// moved the whole request; the engine must still act on what it is told).
class FaultEnv final : public PosixFileEnv {
 public:
  void Add(const Fault& f) {
    std::lock_guard<std::mutex> lock(mu_);
    faults_.push_back(f);
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    faults_.clear();
  }
  int hits() const { return hits_.load(); }
  std::atomic<int> uring_init_error{0};      // UringQueueInit fails with -this
  std::atomic<int> register_error{0};        // UringRegisterBuffers fails with -this
  std::atomic<int> access_error{0};          // Access fails with -this
  std::atomic<int> mkdir_error{0};           // Mkdir fails with -this
  std::atomic<int> fallocate_error{0};       // Fallocate fails with -this
  std::atomic<int> direct_open_error{0};     // Open with O_DIRECT fails with -this (EINVAL: as on old tmpfs)
  // Completion order seen by UringCompleted / Pread / Pwrite: (op, offset) of every request.
  std::vector<std::pair<IoOp, int64_t>> Completions() {
    std::lock_guard<std::mutex> lock(mu_);
    return completions_;
  }

  int Open(const std::string& path, int flags, mode_t mode) override {
    if ((flags & O_DIRECT) && direct_open_error) return -direct_open_error;
    const int fd = PosixFileEnv::Open(path, flags, mode);
    if (fd >= 0) {
      std::lock_guard<std::mutex> lock(mu_);
      paths_[fd] = path;
    }
    return fd;
  }
  int64_t Pread(int fd, void* buf, int64_t bytes, int64_t offset) override {
    Decision d = Decide(IoOp::kRead, fd, offset, bytes);
    if (d.err) return -d.err;
    return PosixFileEnv::Pread(fd, buf, d.bytes, offset);
  }
  int64_t Pwrite(int fd, const void* buf, int64_t bytes, int64_t offset) override {
    Decision d = Decide(IoOp::kWrite, fd, offset, bytes);
    if (d.err) return -d.err;
    return PosixFileEnv::Pwrite(fd, buf, d.bytes, offset);
  }
  int64_t UringCompleted(IoOp op, int fd, int64_t offset, int64_t bytes, int64_t result) override {
    Decision d = Decide(op, fd, offset, bytes);
    if (d.err) return -d.err;
    return result > d.bytes ? d.bytes : result;
  }
  int UringQueueInit(unsigned entries, struct io_uring* ring, unsigned flags) override {
    if (uring_init_error) return -uring_init_error;
    return PosixFileEnv::UringQueueInit(entries, ring, flags);
  }
  int UringRegisterBuffers(struct io_uring* ring, const struct iovec* iov, unsigned count) override {
    if (register_error) return -register_error;
    return PosixFileEnv::UringRegisterBuffers(ring, iov, count);
  }
  int Access(const std::string& path, int mode) override {
    return access_error ? -access_error : PosixFileEnv::Access(path, mode);
  }
  int Mkdir(const std::string& path, mode_t mode) override {
    return mkdir_error ? -mkdir_error : PosixFileEnv::Mkdir(path, mode);
  }
  int Fallocate(int fd, int64_t offset, int64_t bytes) override {
    return fallocate_error ? -fallocate_error : PosixFileEnv::Fallocate(fd, offset, bytes);
  }

 private:
  struct Decision {
    int err = 0;
    int64_t bytes = 0;
  };
  Decision Decide(IoOp op, int fd, int64_t offset, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    completions_.emplace_back(op, offset);
    Decision d{0, bytes};
    const std::string& path = paths_[fd];
    for (Fault& f : faults_) {
      if (f.op != op || f.times == 0) continue;
      if (f.at_offset >= 0 && (f.at_offset < offset || f.at_offset >= offset + bytes)) continue;
      if (!f.path_contains.empty() && path.find(f.path_contains) == std::string::npos) continue;
      if (f.shorten && bytes < 8192) continue;
      if (f.times > 0) --f.times;
      hits_++;
      if (f.err) d.err = f.err;
      else if (f.shorten) d.bytes = bytes / 2 / 4096 * 4096;
      break;
    }
    return d;
  }
  std::mutex mu_;
  std::vector<Fault> faults_;
  std::map<int, std::string> paths_;
  std::vector<std::pair<IoOp, int64_t>> completions_;
  std::atomic<int> hits_{0};
};

// A fresh directory under TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& base = "") {
    std::string root = base;
    if (root.empty()) {
      const char* t = std::getenv("TMPDIR");
      root = t && *t ? t : "/tmp";
    }
    std::string tmpl = root + "/zerorun-offload-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Whether files in `dir` can be opened with O_DIRECT (ext4 and xfs: yes; tmpfs: no).
inline bool SupportsDirectIo(const std::string& dir) {
  const std::string p = dir + "/.direct-probe";
  const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
  if (fd >= 0) ::close(fd);
  ::unlink(p.c_str());
  return fd >= 0;
}

// A small tmpfs mounted for the test's lifetime (root only): a real disk that fills up.
class SmallTmpfs {
 public:
  explicit SmallTmpfs(int64_t bytes) : dir_() {
    const std::string opts = "size=" + std::to_string(bytes);
    mounted_ = ::geteuid() == 0 && ::mount("tmpfs", dir_.path().c_str(), "tmpfs", 0, opts.c_str()) == 0;
    if (!mounted_) why_ = std::string("cannot mount a tmpfs (needs root): ") + std::strerror(errno);
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string why_;
};

// Closed-form content: byte i of a stream with `seed` (no period shorter than 2^32 bytes).
inline uint8_t PatternByte(uint64_t seed, uint64_t i) {
  uint64_t x = (i >> 3) * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x >> (8 * (i & 7)));
}
inline void FillPattern(void* buf, int64_t bytes, uint64_t seed, uint64_t first = 0) {
  auto* p = static_cast<uint8_t*>(buf);
  for (int64_t i = 0; i < bytes; ++i) p[i] = PatternByte(seed, first + static_cast<uint64_t>(i));
}
// The first mismatching index, or -1.
inline int64_t FirstMismatch(const void* buf, int64_t bytes, uint64_t seed, uint64_t first = 0) {
  const auto* p = static_cast<const uint8_t*>(buf);
  for (int64_t i = 0; i < bytes; ++i) {
    if (p[i] != PatternByte(seed, first + static_cast<uint64_t>(i))) return i;
  }
  return -1;
}

// Routes log lines to a file for the scope's lifetime; text() reads what was logged.
class LogCapture {
 public:
  LogCapture() : path_(dir_.File("log")) { SetLogFile(path_); }
  ~LogCapture() { SetLogFile(""); }
  std::string text() const {
    std::ifstream in(path_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

 private:
  TempDir dir_;
  std::string path_;
};

// The message of what fn throws ("" when it does not).
inline std::string Thrown(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// io_uring may be unavailable (seccomp, io_uring_disabled): tests of it skip, naming the reason.
inline std::string UringUnavailableReason() {
  try {
    IoEngineOptions o;
    o.kind = IoEngineKind::kUring;
    CreateIoEngine(o);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

inline std::unique_ptr<IoEngine> MakeEngine(IoEngineKind kind, IoEngineOptions o = {}) {
  o.kind = kind;
  return CreateIoEngine(o);
}

}  // namespace zr_offload_test

// Swap directories and swap files: the nvme_path preflight (missing, not a directory, not writable, no
// O_DIRECT, tmpfs, free space), per-job and per-rank isolation with the lock, records verified on read
// (length, generation, checksum, slot, file), and files truncated, deleted, replaced or filling up.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "offload_test_util.h"
#include "zerorun/offload/swap_file.h"

using namespace zr_offload_test;

namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;
constexpr const char* kKey = "zero_optimization.offload_optimizer.nvme_path";

SwapDirOptions Opts(const std::string& path, const std::string& job = "test-job", int rank = 0, FileEnv* env = nullptr) {
  SwapDirOptions o;
  o.nvme_path = path;
  o.config_key = kKey;
  o.job_id = job;
  o.rank = rank;
  o.env = env;
  return o;
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Overwrites `bytes` at `offset` of `path` through a separate descriptor (another process's view).
void Scribble(const std::string& path, int64_t offset, int64_t bytes, char value) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  std::string junk(static_cast<size_t>(bytes), value);
  REQUIRE(::pwrite(fd, junk.data(), junk.size(), offset) == static_cast<ssize_t>(bytes));
  ::close(fd);
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("swap dir preflight: missing, not a directory, not writable, empty path, bad job id, no space") {
    TempDir dir;
    std::string msg = Thrown([&] { SwapDir d(Opts(dir.File("missing"))); });
    CHECK(Has(msg, kKey));
    CHECK(Has(msg, dir.File("missing")));
    CHECK(Has(msg, "does not exist"));

    { std::ofstream(dir.File("plain")) << "x"; }
    msg = Thrown([&] { SwapDir d(Opts(dir.File("plain"))); });
    CHECK(Has(msg, kKey));
    CHECK(Has(msg, "is not a directory"));

    FaultEnv env;
    env.access_error = EACCES;  // as for a directory of another user (root passes access(2), so injected)
    msg = Thrown([&] { SwapDir d(Opts(dir.path(), "j", 0, &env)); });
    CHECK(Has(msg, kKey));
    CHECK(Has(msg, "is not writable by this process"));
    CHECK(Has(msg, "Permission denied"));
    env.access_error = 0;
    env.mkdir_error = EROFS;
    msg = Thrown([&] { SwapDir d(Opts(dir.path(), "j", 0, &env)); });
    CHECK(Has(msg, "cannot create the swap directory"));
    CHECK(Has(msg, "Read-only file system"));

    if (::geteuid() != 0) {  // a real unwritable directory
      const std::string ro = dir.File("ro");
      REQUIRE(::mkdir(ro.c_str(), 0500) == 0);
      msg = Thrown([&] { SwapDir d(Opts(ro)); });
      CHECK(Has(msg, "is not writable by this process"));
    }

    msg = Thrown([&] { SwapDir d(Opts("")); });
    CHECK(Has(msg, kKey));
    CHECK(Has(msg, "empty"));
    CHECK_THROWS_AS(SwapDir(Opts(dir.path(), "a/b")), InvalidArgument);

    SwapDirOptions big = Opts(dir.path());
    big.required_bytes = int64_t{1} << 60;
    msg = Thrown([&] { SwapDir d(big); });
    CHECK(Has(msg, kKey));
    CHECK(Has(msg, "free but rank 0's swap files need 1024.00 PiB"));
  }

  TEST_CASE("swap dir: per job and per rank; the same job and rank twice is refused, in and across processes") {
    TempDir dir;
    {
      SwapDir a0(Opts(dir.path(), "jobA", 0));
      SwapDir a1(Opts(dir.path(), "jobA", 1));
      SwapDir b0(Opts(dir.path(), "jobB", 0));
      CHECK(a0.path() == dir.path() + "/zerorun-jobA/rank0");
      CHECK(a1.path() == dir.path() + "/zerorun-jobA/rank1");
      CHECK(b0.path() == dir.path() + "/zerorun-jobB/rank0");
      CHECK(a0.job_dir() == a1.job_dir());
      CHECK(fs::is_directory(a0.path()));
      CHECK(fs::is_directory(b0.path()));

      const std::string msg = Thrown([&] { SwapDir again(Opts(dir.path(), "jobA", 0)); });
      CHECK(Has(msg, "is in use by another process"));
      CHECK(Has(msg, Format("(pid {})", ::getpid())));
      CHECK(Has(msg, "'jobA' and rank 0"));

      // Another process (a second job launched with the same id) fails the same way.
      const pid_t child = ::fork();
      if (child == 0) {
        int code = 1;
        try {
          SwapDir clash(Opts(dir.path(), "jobA", 1));
        } catch (const IoError& e) {
          code = Has(e.what(), "is in use by another process") ? 0 : 2;
        } catch (...) {
          code = 3;
        }
        ::_exit(code);
      }
      int status = 0;
      REQUIRE(::waitpid(child, &status, 0) == child);
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);

      // Files of the two jobs do not meet.
      auto engine = MakeEngine(IoEngineKind::kPread);
      SwapFile fa(a0, "optimizer", {64 * kKiB}, *engine);
      SwapFile fb(b0, "optimizer", {64 * kKiB}, *engine);
      CHECK(fa.path() != fb.path());
      PinnedBuffer x(64 * kKiB), y(64 * kKiB);
      FillPattern(x.data(), x.size(), 1);
      FillPattern(y.data(), y.size(), 2);
      fa.Write(0, x.data(), x.size(), 1);
      fb.Write(0, y.data(), y.size(), 1);
      fa.Read(0, y.data(), x.size(), 1);
      CHECK(FirstMismatch(y.data(), y.size(), 1) == -1);
    }
    // Everything it created is gone; the same job and rank can start again.
    CHECK_FALSE(fs::exists(dir.path() + "/zerorun-jobA"));
    CHECK_FALSE(fs::exists(dir.path() + "/zerorun-jobB"));
    SwapDir again(Opts(dir.path(), "jobA", 0));
    CHECK(fs::is_directory(again.path()));
  }

  TEST_CASE("swap dir: no O_DIRECT -> buffered I/O with a warning, or an error when direct I/O is required") {
    TempDir dir;
    FaultEnv env;
    env.direct_open_error = EINVAL;  // as on tmpfs before Linux 6.6
    {
      LogCapture log;
      SwapDir d(Opts(dir.path(), "nodirect", 0, &env));
      CHECK_FALSE(d.direct_io());
      CHECK(Has(log.text(), "swap files use buffered I/O"));
      CHECK(Has(log.text(), kKey));
      IoEngineOptions eo;
      eo.env = &env;
      auto engine = MakeEngine(IoEngineKind::kAuto, eo);
      SwapFile f(d, "buffered", {100 * kKiB}, *engine);
      CHECK_FALSE(f.file().direct());
      PinnedBuffer buf(SwapFile::AlignedBytes(99999));
      FillPattern(buf.data(), 99999, 9);
      f.Write(0, buf.data(), 99999, 4);
      std::memset(buf.data(), 0, static_cast<size_t>(buf.size()));
      f.Read(0, buf.data(), 99999, 4);
      CHECK(FirstMismatch(buf.data(), 99999, 9) == -1);
    }
    SwapDirOptions strict = Opts(dir.path(), "strict", 0, &env);
    strict.require_direct_io = true;
    const std::string msg = Thrown([&] { SwapDir d(strict); });
    CHECK(Has(msg, kKey));
    CHECK(Has(msg, "does not support O_DIRECT"));
    CHECK(Has(msg, "point " + std::string(kKey) + " at a local NVMe file system"));
    CHECK_FALSE(fs::exists(dir.path() + "/zerorun-strict"));  // a failed preflight leaves nothing behind
  }

  TEST_CASE("swap dir: nvme_path on tmpfs warns that swap files take host memory") {
    if (FileSystemName(FileEnv::Default(), "/dev/shm") != "tmpfs") ZR_TEST_SKIP("/dev/shm is not a tmpfs here");
    TempDir dir("/dev/shm");
    LogCapture log;
    SwapDir d(Opts(dir.path(), "shm"));
    CHECK(d.fs_type() == "tmpfs");
    CHECK(Has(log.text(), "is on tmpfs, which is memory"));
  }

  TEST_CASE("swap file: records round-trip through both engines (sizes 0, 1, 7, 4099, 1 MiB + 3)") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    SwapDir d(Opts(dir.path()));
    const std::vector<int64_t> sizes = {0, 1, 7, 4099, kMiB + 3};
    for (IoEngineKind writer : {IoEngineKind::kUring, IoEngineKind::kPread}) {
      for (IoEngineKind reader : {IoEngineKind::kUring, IoEngineKind::kPread}) {
        const std::string writer_name = IoEngineKindName(writer);
        CAPTURE(writer_name);
        const std::string reader_name = IoEngineKindName(reader);
        CAPTURE(reader_name);
        IoEngineOptions o;
        o.block_size = 256 * kKiB;
        o.intra_op_parallelism = 2;
        auto we = MakeEngine(writer, o);
        auto re = MakeEngine(reader, o);
        std::vector<int64_t> slots = sizes;
        auto fw = std::make_unique<SwapFile>(d, "records", slots, *we);
        CHECK(fw->file().direct() == d.direct_io());
        for (size_t s = 0; s < sizes.size(); ++s) {
          PinnedBuffer buf(SwapFile::AlignedBytes(std::max<int64_t>(sizes[s], 1)));
          FillPattern(buf.data(), sizes[s], 100 + s);
          fw->Write(static_cast<int>(s), buf.data(), sizes[s], 7 + s);
        }
        // The reader's engine reads the same file (another engine on the same descriptor).
        SwapFile& f = *fw;
        for (size_t s = 0; s < sizes.size(); ++s) {
          PinnedBuffer buf(SwapFile::AlignedBytes(std::max<int64_t>(sizes[s], 1)));
          IoWork direct = re->SubmitRead(f.file(), 0, buf.data(), kDirectIoAlignment);  // the header block
          direct.Wait();
          CHECK(std::memcmp(buf.data(), "ZRSWAPF1", 8) == 0);
          f.Read(static_cast<int>(s), buf.data(), sizes[s], 7 + s);
          CHECK(FirstMismatch(buf.data(), sizes[s], 100 + s) == -1);
        }
        CHECK(f.file_bytes() == kDirectIoAlignment * (1 + 5) + 0 + 4096 + 4096 + 8192 + (kMiB + 4096));
      }
    }
  }

  TEST_CASE("swap file: a record that does not verify is an IoError naming file, slot and rank") {
    TempDir dir;
    SwapDir d(Opts(dir.path(), "verify", 4));
    auto engine = MakeEngine(IoEngineKind::kAuto);
    SwapFile f(d, "opt", {64 * kKiB, 64 * kKiB, 64 * kKiB}, *engine);
    SwapFile other(d, "other", {64 * kKiB}, *engine);
    PinnedBuffer buf(64 * kKiB);
    FillPattern(buf.data(), 60000, 5);
    f.Write(0, buf.data(), 60000, 3);
    other.Write(0, buf.data(), 60000, 3);
    const std::string where = "rank 4: swap file " + f.path() + " slot ";

    // "buffer nbytes != file bytes", made explicit.
    std::string msg = Thrown([&] { f.Read(0, buf.data(), 61440, 3); });
    CHECK(Has(msg, where + "0"));
    CHECK(Has(msg, "the record holds 60000 bytes but 61440 were asked for"));
    msg = Thrown([&] { f.Read(0, buf.data(), 60000, 2); });
    CHECK(Has(msg, "the record is of generation 3 but 2 was expected"));
    msg = Thrown([&] { f.Read(1, buf.data(), 60000); });
    CHECK(Has(msg, where + "1"));
    CHECK(Has(msg, "holds no record (never written)"));
    f.Read(0, buf.data(), 60000, SwapFile::kAnyGeneration);
    CHECK(FirstMismatch(buf.data(), 60000, 5) == -1);

    // Slot layout: header block, then per slot a footer block and the payload.
    const int64_t slot_stride = kDirectIoAlignment + 64 * kKiB;
    const int64_t footer0 = kDirectIoAlignment, payload0 = footer0 + kDirectIoAlignment;
    Scribble(f.path(), payload0 + 1234, 1, 'Z');  // one corrupt byte
    msg = Thrown([&] { f.Read(0, buf.data(), 60000, 3); });
    CHECK(Has(msg, "the payload's checksum does not match its footer"));
    Scribble(f.path(), footer0 + 20, 1, 'Z');
    msg = Thrown([&] { f.Read(0, buf.data(), 60000, 3); });
    CHECK(Has(msg, "the record's footer is corrupt"));

    // A record copied into the wrong slot, or from another file, is not taken for this one.
    f.Write(0, buf.data(), 60000, 3);
    std::string copy(static_cast<size_t>(slot_stride), '\0');
    {
      const int fd = ::open(f.path().c_str(), O_RDWR);
      REQUIRE(::pread(fd, copy.data(), copy.size(), footer0) == slot_stride);
      REQUIRE(::pwrite(fd, copy.data(), copy.size(), footer0 + slot_stride) == slot_stride);
      ::close(fd);
    }
    msg = Thrown([&] { f.Read(1, buf.data(), 60000, 3); });
    CHECK(Has(msg, "the record belongs to this file (slot 0), not to this file and slot"));
    {
      const int src = ::open(other.path().c_str(), O_RDONLY);
      REQUIRE(::pread(src, copy.data(), copy.size(), footer0) == slot_stride);
      ::close(src);
      const int fd = ::open(f.path().c_str(), O_RDWR);
      REQUIRE(::pwrite(fd, copy.data(), copy.size(), footer0 + 2 * slot_stride) == slot_stride);
      ::close(fd);
    }
    msg = Thrown([&] { f.Read(2, buf.data(), 60000, 3); });
    CHECK(Has(msg, "the record belongs to another swap file"));

    // Misuse: larger than the slot.
    PinnedBuffer large(128 * kKiB);
    CHECK_THROWS_WITH_AS(f.Write(0, large.data(), 70000, 1), doctest::Contains("does not fit the slot's 65536 bytes"),
                         InvalidArgument);
    msg = Thrown([&] { f.Read(0, large.data(), 70000, 1); });
    CHECK(Has(msg, "the slot holds at most 65536"));
  }

  TEST_CASE("swap file: truncated, deleted or replaced under a running job is an error naming it") {
    TempDir dir;
    auto engine = MakeEngine(IoEngineKind::kAuto);
    SwapDir d(Opts(dir.path(), "victim", 1));
    PinnedBuffer buf(64 * kKiB);
    {
      SwapFile f(d, "trunc", {64 * kKiB, 64 * kKiB}, *engine);
      f.Write(1, buf.data(), buf.size(), 1);
      REQUIRE(::truncate(f.path().c_str(), 80 * kKiB) == 0);
      std::string msg = Thrown([&] { f.Read(1, buf.data(), buf.size(), 1); });
      CHECK(Has(msg, "rank 1: swap file " + f.path() + " slot 1"));
      CHECK(Has(msg, "it was truncated while in use"));
      msg = Thrown([&] { f.Write(1, buf.data(), buf.size(), 2); });
      CHECK(Has(msg, "swap-out: the swap file is 81920 bytes"));
    }
    {
      SwapFile f(d, "deleted", {64 * kKiB}, *engine);
      f.Write(0, buf.data(), buf.size(), 1);
      REQUIRE(::unlink(f.path().c_str()) == 0);
      const std::string msg = Thrown([&] { f.Read(0, buf.data(), buf.size(), 1); });
      CHECK(Has(msg, f.path()));
      CHECK(Has(msg, "the swap file was deleted or replaced while in use"));
    }
    {
      SwapFile f(d, "replaced", {64 * kKiB}, *engine);
      f.Write(0, buf.data(), buf.size(), 1);
      const std::string other = dir.File("impostor");
      { std::ofstream(other) << std::string(static_cast<size_t>(f.file_bytes()), 'x'); }
      REQUIRE(::rename(other.c_str(), f.path().c_str()) == 0);
      const std::string msg = Thrown([&] { f.Read(0, buf.data(), buf.size(), 1); });
      CHECK(Has(msg, "the swap file was deleted or replaced while in use"));
    }
  }

  TEST_CASE("swap file: ENOSPC during a swap-out names file and rank; the slot's last good record is not mistaken") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    for (IoEngineKind kind : {IoEngineKind::kUring, IoEngineKind::kPread}) {
      const std::string engine_name = IoEngineKindName(kind);
      CAPTURE(engine_name);
      FaultEnv env;
      IoEngineOptions eo;
      eo.env = &env;
      eo.rank = 2;
      eo.block_size = 64 * kKiB;
      auto engine = MakeEngine(kind, eo);
      SwapDir d(Opts(dir.path(), std::string("enospc-") + IoEngineKindName(kind), 2, &env));
      SwapFile f(d, "opt", {256 * kKiB}, *engine);
      PinnedBuffer buf(256 * kKiB);
      FillPattern(buf.data(), buf.size(), 1);
      f.Write(0, buf.data(), buf.size(), 1);

      FillPattern(buf.data(), buf.size(), 2);
      env.Add({.op = IoOp::kWrite, .path_contains = "opt.swp", .at_offset = 3 * kDirectIoAlignment + 64 * kKiB,
               .err = ENOSPC, .times = 1});
      std::string msg = Thrown([&] { f.Write(0, buf.data(), buf.size(), 2); });
      CHECK(Has(msg, "rank 2: swap file " + f.path() + " slot 0: swap-out of 262144 bytes failed"));
      CHECK(Has(msg, "No space left on device"));
      // Reading the generation last written completely fails loudly instead of returning a mix.
      PinnedBuffer back(256 * kKiB);
      msg = Thrown([&] { f.Read(0, back.data(), back.size(), 1); });
      CHECK(Has(msg, "the last swap-out of this slot failed"));
      CHECK((Has(msg, "checksum does not match") || Has(msg, "generation 2 but 1 was expected")));
      // Space is back: the next swap-out works.
      f.Write(0, buf.data(), buf.size(), 3);
      f.Read(0, back.data(), back.size(), 3);
      CHECK(FirstMismatch(back.data(), back.size(), 2) == -1);
    }
  }

  TEST_CASE("swap file: a disk too small for the swap files fails at creation, naming the file") {
    SmallTmpfs disk(1 * kMiB);
    if (!disk.mounted()) ZR_TEST_SKIP(disk.why());
    auto engine = MakeEngine(IoEngineKind::kAuto);
    SwapDir d(Opts(disk.path(), "small"));
    const std::string msg = Thrown([&] { SwapFile f(d, "big", {2 * kMiB}, *engine); });
    CHECK(Has(msg, "rank 0: cannot allocate"));
    CHECK(Has(msg, d.path() + "/big.swp"));
    CHECK(Has(msg, "No space left on device"));
    CHECK(Has(msg, "tmpfs has"));
    CHECK_FALSE(fs::exists(d.path() + "/big.swp"));  // no half-made file left behind
    // The preflight catches it before any file when the size is known.
    SwapDirOptions o = Opts(disk.path(), "small2");
    o.required_bytes = 2 * kMiB;
    CHECK(Has(Thrown([&] { SwapDir d2(o); }), "free but rank 0's swap files need 2.00 MiB"));
  }

  TEST_CASE("swap file: no fallocate on the file system -> a sparse file that still works") {
    TempDir dir;
    FaultEnv env;
    env.fallocate_error = EOPNOTSUPP;
    IoEngineOptions eo;
    eo.env = &env;
    auto engine = MakeEngine(IoEngineKind::kPread, eo);
    SwapDir d(Opts(dir.path(), "sparse", 0, &env));
    SwapFile f(d, "s", {128 * kKiB}, *engine);
    CHECK(f.file().Size() == f.file_bytes());
    PinnedBuffer buf(128 * kKiB);
    FillPattern(buf.data(), buf.size(), 8);
    f.Write(0, buf.data(), buf.size(), 1);
    std::memset(buf.data(), 0, static_cast<size_t>(buf.size()));
    f.Read(0, buf.data(), buf.size(), 1);
    CHECK(FirstMismatch(buf.data(), buf.size(), 8) == -1);
  }

  TEST_CASE("swap file: transfers of different slots in flight together") {
    TempDir dir;
    IoEngineOptions eo;
    eo.block_size = 64 * kKiB;
    eo.queue_depth = 16;
    eo.intra_op_parallelism = 2;
    auto engine = MakeEngine(IoEngineKind::kAuto, eo);
    SwapDir d(Opts(dir.path(), "async"));
    constexpr int kSlots = 6;
    SwapFile f(d, "many", std::vector<int64_t>(kSlots, 512 * kKiB), *engine);
    std::vector<PinnedBuffer> bufs;
    std::vector<SwapWork> works;
    for (int s = 0; s < kSlots; ++s) {
      bufs.emplace_back(512 * kKiB);
      FillPattern(bufs.back().data(), 500000, 40 + s);
      works.push_back(f.SubmitWrite(s, bufs.back().data(), 500000, 10 + s));
    }
    for (SwapWork& w : works) w.Wait();
    works.clear();
    for (int s = 0; s < kSlots; ++s) {
      std::memset(bufs[s].data(), 0, 512 * kKiB);
      works.push_back(f.SubmitRead(s, bufs[s].data(), 500000, 10 + s));
    }
    for (SwapWork& w : works) w.Wait();
    for (int s = 0; s < kSlots; ++s) CHECK(FirstMismatch(bufs[s].data(), 500000, 40 + s) == -1);
  }
}

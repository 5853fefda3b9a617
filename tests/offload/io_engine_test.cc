// The I/O engines: io_uring and pread against each other and against closed-form data, O_DIRECT
// alignment, large offsets, many requests in flight, the worker split, single_submit and
// overlap_events, registered buffers, and every fault through the FileEnv seam (short transfers,
// EINTR/EAGAIN, ENOSPC, EIO, a file truncated under the engine, io_uring unavailable).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "offload_test_util.h"
#include "zerorun/core/log.h"
#include "zerorun/core/memory.h"
#include "zerorun/offload/pinned_pool.h"

using namespace zr_offload_test;

namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;
const IoEngineKind kBoth[] = {IoEngineKind::kUring, IoEngineKind::kPread};

IoFile OpenRw(const std::string& path, bool direct, FileEnv& env = FileEnv::Default()) {
  return IoFile::Open(path, {.write = true, .create = true, .direct = direct}, env);
}

// Writes `bytes` of pattern `seed` at `offset` with `writer`, reads them back with `reader`.
void RoundTrip(IoEngine& writer, IoEngine& reader, const std::string& path, bool direct, int64_t offset, int64_t bytes,
               uint64_t seed) {
  const std::string writer_name = writer.name();
  CAPTURE(writer_name);
  const std::string reader_name = reader.name();
  CAPTURE(reader_name);
  CAPTURE(bytes);
  CAPTURE(offset);
  const int64_t alloc = std::max<int64_t>(bytes, 1);
  PinnedBuffer src(alloc), dst(alloc);
  FillPattern(src.data(), bytes, seed);
  std::memset(dst.data(), 0xEE, static_cast<size_t>(alloc));
  IoFile f = OpenRw(path, direct);
  writer.Write(f, offset, src.data(), bytes);
  reader.Read(f, offset, dst.data(), bytes);
  CHECK(FirstMismatch(dst.data(), bytes, seed) == -1);
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("io engines: uring and pread write and read each other's data, O_DIRECT and buffered") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    const bool direct = SupportsDirectIo(dir.path());
    if (!direct) ZR_TEST_SKIP(dir.path() + " does not support O_DIRECT");
    for (int p : {1, 2, 3}) {
      IoEngineOptions o;
      o.block_size = 64 * kKiB;
      o.queue_depth = 4;
      o.intra_op_parallelism = p;
      auto uring = MakeEngine(IoEngineKind::kUring, o);
      auto pread = MakeEngine(IoEngineKind::kPread, o);
      REQUIRE(uring->kind() == IoEngineKind::kUring);
      REQUIRE(pread->kind() == IoEngineKind::kPread);
      uint64_t seed = static_cast<uint64_t>(p) * 100;
      for (int64_t blocks : {0, 1, 7, 16, 4099}) {
        const int64_t bytes = blocks * kDirectIoAlignment;
        RoundTrip(*uring, *pread, dir.File("a"), true, 0, bytes, ++seed);
        RoundTrip(*pread, *uring, dir.File("b"), true, 3 * kDirectIoAlignment, bytes, ++seed);
        RoundTrip(*uring, *uring, dir.File("c"), true, 0, bytes, ++seed);
      }
      // Buffered files take any length and offset.
      for (int64_t bytes : {0, 1, 7, 4099, 1000003}) {
        RoundTrip(*uring, *pread, dir.File("d"), false, 13, bytes, ++seed);
        RoundTrip(*pread, *uring, dir.File("e"), false, 0, bytes, ++seed);
      }
    }
  }

  TEST_CASE("io engines: offsets beyond 4 GiB (large sparse file)") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    if (!SupportsDirectIo(dir.path())) ZR_TEST_SKIP(dir.path() + " does not support O_DIRECT");
    IoEngineOptions o;
    o.block_size = 256 * kKiB;
    o.intra_op_parallelism = 2;
    auto uring = MakeEngine(IoEngineKind::kUring, o);
    auto pread = MakeEngine(IoEngineKind::kPread, o);
    const int64_t offset = (int64_t{5} << 30) + 8 * kDirectIoAlignment;  // 5 GiB + 32 KiB
    RoundTrip(*uring, *pread, dir.File("big"), true, offset, 3 * kMiB, 7);
    RoundTrip(*pread, *uring, dir.File("big"), true, offset + 3 * kMiB, 2 * kMiB, 8);
    IoFile f = OpenRw(dir.File("big"), true);
    CHECK(f.Size() == offset + 5 * kMiB);
  }

  TEST_CASE("io_uring engine: queue_depth requests in flight, batched or single submits") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    if (!SupportsDirectIo(dir.path())) ZR_TEST_SKIP(dir.path() + " does not support O_DIRECT");
    const int64_t bytes = 256 * kDirectIoAlignment;  // 256 requests of 4 KiB
    PinnedBuffer buf(bytes);
    FillPattern(buf.data(), bytes, 3);
    for (bool single : {false, true}) {
      CAPTURE(single);
      IoEngineOptions o;
      o.block_size = kDirectIoAlignment;
      o.queue_depth = 16;
      o.single_submit = single;
      auto e = MakeEngine(IoEngineKind::kUring, o);
      IoFile f = OpenRw(dir.File("q"), true);
      e->Write(f, 0, buf.data(), bytes);
      const IoStats s = e->Stats();
      CHECK(s.requests == 256);
      CHECK(s.bytes_written == bytes);
      CHECK(s.max_in_flight == 16);
      if (single) {
        CHECK(s.submit_calls == s.requests);
      } else {
        CHECK(s.submit_calls <= s.requests - 15);  // the first 16 requests go in one call
      }
      CHECK(s.worker_bytes == std::vector<int64_t>{bytes});
    }
  }

  TEST_CASE("io_uring engine: overlap_events false submits a batch and reaps all of it before the next") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    if (!SupportsDirectIo(dir.path())) ZR_TEST_SKIP(dir.path() + " does not support O_DIRECT");
    const int64_t block = kDirectIoAlignment;
    const int64_t bytes = 64 * block;
    PinnedBuffer buf(bytes);
    FillPattern(buf.data(), bytes, 4);
    for (bool overlap : {false, true}) {
      CAPTURE(overlap);
      FaultEnv env;
      IoEngineOptions o;
      o.block_size = block;
      o.queue_depth = 8;
      o.overlap_events = overlap;
      o.env = &env;
      auto e = MakeEngine(IoEngineKind::kUring, o);
      IoFile f = OpenRw(dir.File("o"), true, env);
      e->Write(f, 0, buf.data(), bytes);
      std::vector<std::pair<IoOp, int64_t>> seen = env.Completions();
      REQUIRE(seen.size() == 64);
      if (!overlap) {
        // Completion k belongs to batch k / 8: blocks [8 (k/8), 8 (k/8) + 8).
        for (size_t k = 0; k < seen.size(); ++k) {
          const int64_t batch = static_cast<int64_t>(k) / 8;
          CHECK(seen[k].second / block / 8 == batch);
        }
        CHECK(e->Stats().submit_calls == 8);
      }
      CHECK(e->Stats().max_in_flight == 8);
      PinnedBuffer back(bytes);
      e->Read(f, 0, back.data(), bytes);
      CHECK(FirstMismatch(back.data(), bytes, 4) == -1);
    }
  }

  TEST_CASE("io engines: intra_op_parallelism splits a transfer into contiguous parts, one per worker") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    if (!SupportsDirectIo(dir.path())) ZR_TEST_SKIP(dir.path() + " does not support O_DIRECT");
    const int64_t block = 16 * kKiB;
    for (IoEngineKind kind : kBoth) {
      // 10 blocks over 3 workers: parts of 4, 4 and 2 blocks; 2 blocks over 3 workers: two parts.
      for (auto [blocks, want] : std::vector<std::pair<int64_t, std::vector<int64_t>>>{{10, {2, 4, 4}}, {9, {3, 3, 3}},
                                                                                     {2, {0, 1, 1}}}) {
        const std::string engine_name = IoEngineKindName(kind);
        CAPTURE(engine_name);
        CAPTURE(blocks);
        FaultEnv env;
        IoEngineOptions o;
        o.block_size = block;
        o.intra_op_parallelism = 3;
        o.env = &env;
        auto e = MakeEngine(kind, o);
        PinnedBuffer buf(blocks * block);
        FillPattern(buf.data(), blocks * block, 5);
        IoFile f = OpenRw(dir.File("split"), true, env);
        e->Write(f, 0, buf.data(), blocks * block);
        std::vector<int64_t> got = e->Stats().worker_bytes;
        std::sort(got.begin(), got.end());
        for (int64_t& g : got) g /= block;
        CHECK(got == want);
        // Each worker's writes are in increasing offset order within its contiguous part.
        std::vector<std::pair<IoOp, int64_t>> seen = env.Completions();
        CHECK(static_cast<int64_t>(seen.size()) == blocks);
        PinnedBuffer back(blocks * block);
        e->Read(f, 0, back.data(), blocks * block);
        CHECK(FirstMismatch(back.data(), blocks * block, 5) == -1);
      }
    }
  }

  TEST_CASE("io engines: many transfers in flight at once from several threads") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    if (!SupportsDirectIo(dir.path())) ZR_TEST_SKIP(dir.path() + " does not support O_DIRECT");
    for (IoEngineKind kind : kBoth) {
      const std::string engine_name = IoEngineKindName(kind);
      CAPTURE(engine_name);
      IoEngineOptions o;
      o.block_size = 32 * kKiB;
      o.queue_depth = 32;
      o.intra_op_parallelism = 2;
      auto e = MakeEngine(kind, o);
      IoFile f = OpenRw(dir.File("many"), true);
      constexpr int kThreads = 4, kPerThread = 8;
      const int64_t chunk = 96 * kKiB;
      PinnedBuffer src(chunk * kThreads * kPerThread), dst(chunk * kThreads * kPerThread);
      FillPattern(src.data(), src.size(), 11);
      auto run = [&](IoOp op, PinnedBuffer& buf) {
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t) {
          threads.emplace_back([&, t] {
            std::vector<IoWork> works;
            for (int i = 0; i < kPerThread; ++i) {
              const int64_t off = (int64_t{t} * kPerThread + i) * chunk;
              works.push_back(e->Submit(op, f, off, buf.as<char>() + off, chunk));
            }
            for (IoWork& w : works) w.Wait();
          });
        }
        for (std::thread& th : threads) th.join();
      };
      run(IoOp::kWrite, src);
      run(IoOp::kRead, dst);
      CHECK(FirstMismatch(dst.data(), dst.size(), 11) == -1);
    }
  }

  TEST_CASE("io_uring engine: registered buffers are used for requests inside them, refusal falls back") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    if (!SupportsDirectIo(dir.path())) ZR_TEST_SKIP(dir.path() + " does not support O_DIRECT");
    FaultEnv env;
    IoEngineOptions o;
    o.block_size = 64 * kKiB;
    o.intra_op_parallelism = 2;
    o.env = &env;
    auto e = MakeEngine(IoEngineKind::kUring, o);
    PinnedPool pool(256 * kKiB, 2);
    REQUIRE(e->RegisterBuffers(pool.Regions()));
    PinnedPool::Lease a = pool.Acquire();
    FillPattern(a.data(), a.size(), 21);
    IoFile f = OpenRw(dir.File("fixed"), true, env);
    e->Write(f, 0, a.data(), a.size());
    CHECK(e->Stats().fixed_requests == 4);
    PinnedBuffer outside(256 * kKiB);  // not registered
    e->Read(f, 0, outside.data(), outside.size());
    CHECK(e->Stats().fixed_requests == 4);
    CHECK(FirstMismatch(outside.data(), outside.size(), 21) == -1);
    // A transfer straddling two registered buffers uses each for its own requests.
    PinnedPool::Lease b = pool.Acquire();
    const char* lo = std::min(a.as<char>(), b.as<char>());
    e->Read(f, 0, const_cast<char*>(lo) + 128 * kKiB, 256 * kKiB);
    CHECK(e->Stats().fixed_requests == 8);

    // The kernel refusing (RLIMIT_MEMLOCK): false, and I/O still works unregistered.
    env.register_error = ENOMEM;
    CHECK_FALSE(e->RegisterBuffers(pool.Regions()));
    e->Read(f, 0, a.data(), a.size());
    CHECK(e->Stats().fixed_requests == 8);
    CHECK(FirstMismatch(a.data(), a.size(), 21) == -1);
  }

  TEST_CASE("io engines: short reads and writes are retried for the remainder") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    const bool direct = SupportsDirectIo(dir.path());
    for (IoEngineKind kind : kBoth) {
      for (bool d : {false, direct}) {
        const std::string engine_name = IoEngineKindName(kind);
        CAPTURE(engine_name);
        CAPTURE(d);
        FaultEnv env;
        IoEngineOptions o;
        o.block_size = 64 * kKiB;
        o.env = &env;
        auto e = MakeEngine(kind, o);
        const int64_t bytes = 1 * kMiB;
        PinnedBuffer src(bytes), dst(bytes);
        FillPattern(src.data(), bytes, 31);
        IoFile f = OpenRw(dir.File("short"), d, env);
        env.Add({.op = IoOp::kWrite, .shorten = true, .times = 20});
        e->Write(f, 0, src.data(), bytes);
        env.Add({.op = IoOp::kRead, .shorten = true, .times = 20});
        e->Read(f, 0, dst.data(), bytes);
        CHECK(env.hits() == 40);
        CHECK(e->Stats().short_transfers == 40);
        CHECK(FirstMismatch(dst.data(), bytes, 31) == -1);
      }
    }
  }

  TEST_CASE("io engines: EINTR and EAGAIN are retried; a request that never progresses fails") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    for (IoEngineKind kind : kBoth) {
      const std::string engine_name = IoEngineKindName(kind);
      CAPTURE(engine_name);
      FaultEnv env;
      IoEngineOptions o;
      o.block_size = 64 * kKiB;
      o.max_retries = 4;
      o.rank = 5;
      o.env = &env;
      auto e = MakeEngine(kind, o);
      PinnedBuffer buf(512 * kKiB);
      FillPattern(buf.data(), buf.size(), 41);
      IoFile f = OpenRw(dir.File("again"), false, env);
      env.Add({.op = IoOp::kWrite, .err = EINTR, .times = 3});
      env.Add({.op = IoOp::kWrite, .at_offset = 256 * kKiB, .err = EAGAIN, .times = 3});
      e->Write(f, 0, buf.data(), buf.size());
      CHECK(e->Stats().retries >= 6);
      PinnedBuffer back(512 * kKiB);
      e->Read(f, 0, back.data(), back.size());
      CHECK(FirstMismatch(back.data(), back.size(), 41) == -1);

      env.Add({.op = IoOp::kRead, .err = EAGAIN});  // forever
      const std::string msg = Thrown([&] { e->Read(f, 0, back.data(), back.size()); });
      CHECK(msg.find("rank 5") != std::string::npos);
      CHECK(msg.find("made no progress after 4 attempts") != std::string::npos);
      CHECK(msg.find(f.path()) != std::string::npos);
    }
  }

  TEST_CASE("io engines: ENOSPC and EIO are IoErrors naming rank, file, offset and the errno") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    const bool direct = SupportsDirectIo(dir.path());
    for (IoEngineKind kind : kBoth) {
      const std::string engine_name = IoEngineKindName(kind);
      CAPTURE(engine_name);
      FaultEnv env;
      IoEngineOptions o;
      o.block_size = 128 * kKiB;
      o.intra_op_parallelism = 2;
      o.rank = 3;
      o.env = &env;
      auto e = MakeEngine(kind, o);
      PinnedBuffer buf(1 * kMiB);
      IoFile f = OpenRw(dir.File("faulty.swp"), direct, env);
      env.Add({.op = IoOp::kWrite, .path_contains = "faulty", .at_offset = 640 * kKiB, .err = ENOSPC, .times = 1});
      IoWork w = e->SubmitWrite(f, 0, buf.data(), buf.size());
      std::string msg = Thrown([&] { w.Wait(); });
      CHECK(msg.find("rank 3") != std::string::npos);
      CHECK(msg.find(f.path()) != std::string::npos);
      CHECK(msg.find("at offset 655360") != std::string::npos);
      CHECK(msg.find("No space left on device") != std::string::npos);
      CHECK(msg.find("left)") != std::string::npos);  // the free space of the file system
      w.Wait();  // collected once; a second Wait does not throw again

      env.Add({.op = IoOp::kRead, .at_offset = 256 * kKiB, .err = EIO, .times = 1});
      msg = Thrown([&] { e->Read(f, 0, buf.data(), buf.size()); });
      CHECK(msg.find("Input/output error") != std::string::npos);
      CHECK(msg.find("read of 131072 bytes at offset 262144") != std::string::npos);
      // The engine is still usable after a failure.
      e->Write(f, 0, buf.data(), buf.size());
    }
  }

  TEST_CASE("io engines: a real full disk (small tmpfs) is an ENOSPC IoError naming the file") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    SmallTmpfs disk(1 * kMiB);
    if (!disk.mounted()) ZR_TEST_SKIP(disk.why());
    for (IoEngineKind kind : kBoth) {
      const std::string engine_name = IoEngineKindName(kind);
      CAPTURE(engine_name);
      IoEngineOptions o;
      o.block_size = 64 * kKiB;
      auto e = MakeEngine(kind, o);
      const std::string path = disk.path() + "/full-" + IoEngineKindName(kind);
      IoFile f = OpenRw(path, false);  // tmpfs: buffered
      PinnedBuffer buf(2 * kMiB);
      const std::string msg = Thrown([&] { e->Write(f, 0, buf.data(), buf.size()); });
      CHECK(msg.find(path) != std::string::npos);
      CHECK(msg.find("No space left on device") != std::string::npos);
      CHECK(msg.find("tmpfs") != std::string::npos);
      ::unlink(path.c_str());
    }
  }

  TEST_CASE("io engines: a file truncated under the engine is an 'unexpected end of file' IoError") {
    if (auto why = UringUnavailableReason(); !why.empty()) ZR_TEST_SKIP(why);
    TempDir dir;
    const bool direct = SupportsDirectIo(dir.path());
    for (IoEngineKind kind : kBoth) {
      for (bool d : {false, direct}) {
        const std::string engine_name = IoEngineKindName(kind);
        CAPTURE(engine_name);
        CAPTURE(d);
        IoEngineOptions o;
        o.block_size = 64 * kKiB;
        auto e = MakeEngine(kind, o);
        PinnedBuffer buf(1 * kMiB);
        IoFile f = OpenRw(dir.File("trunc"), d);
        e->Write(f, 0, buf.data(), buf.size());
        // Another process truncates it (here: another descriptor); the next read must not pass.
        REQUIRE(::truncate(f.path().c_str(), 300 * kKiB) == 0);
        const std::string msg = Thrown([&] { e->Read(f, 0, buf.data(), buf.size()); });
        CHECK(msg.find("unexpected end of file") != std::string::npos);
        CHECK(msg.find("the file is 307200 bytes") != std::string::npos);
        CHECK(msg.find(f.path()) != std::string::npos);
        // Reading entirely past the end too.
        const std::string past = Thrown([&] { e->Read(f, 512 * kKiB, buf.data(), 64 * kKiB); });
        CHECK(past.find("unexpected end of file") != std::string::npos);
      }
    }
  }

  TEST_CASE("io engines: io_uring unavailable -> the pread engine with a warning (auto), IoError (io_uring)") {
    FaultEnv env;
    env.uring_init_error = EPERM;  // as under a seccomp filter or kernel.io_uring_disabled=2
    IoEngineOptions o;
    o.env = &env;
    o.rank = 1;
    o.kind = IoEngineKind::kUring;
    const std::string msg = Thrown([&] { CreateIoEngine(o); });
    CHECK(msg.find("io_uring is unavailable") != std::string::npos);
    CHECK(msg.find("io_uring_queue_init") != std::string::npos);
    CHECK(msg.find("Operation not permitted") != std::string::npos);
    CHECK(msg.find("rank 1") != std::string::npos);

    TempDir dir;
    std::unique_ptr<IoEngine> e;
    {
      LogCapture log;
      o.kind = IoEngineKind::kAuto;
      e = CreateIoEngine(o);
      CHECK(log.text().find("using the pread engine instead") != std::string::npos);
    }
    CHECK(e->kind() == IoEngineKind::kPread);
    // And the fallback works.
    PinnedBuffer buf(64 * kKiB);
    FillPattern(buf.data(), buf.size(), 51);
    IoFile f = OpenRw(dir.File("fallback"), false, env);
    e->Write(f, 0, buf.data(), buf.size());
    PinnedBuffer back(64 * kKiB);
    e->Read(f, 0, back.data(), back.size());
    CHECK(FirstMismatch(back.data(), back.size(), 51) == -1);
  }

  TEST_CASE("io engines: misaligned O_DIRECT requests and bad arguments are refused before any I/O") {
    TempDir dir;
    if (!SupportsDirectIo(dir.path())) ZR_TEST_SKIP(dir.path() + " does not support O_DIRECT");
    for (IoEngineKind kind : {IoEngineKind::kPread, IoEngineKind::kAuto}) {
      auto e = MakeEngine(kind);
      PinnedBuffer buf(64 * kKiB);
      IoFile f = OpenRw(dir.File("align"), true);
      CHECK_THROWS_WITH_AS(e->Write(f, 0, buf.as<char>() + 512, 4096), doctest::Contains("the buffer address is not a multiple of 4096"),
                           InvalidArgument);
      CHECK_THROWS_WITH_AS(e->Write(f, 512, buf.data(), 4096), doctest::Contains("the offset is not a multiple"),
                           InvalidArgument);
      CHECK_THROWS_WITH_AS(e->Read(f, 0, buf.data(), 4097), doctest::Contains("the length is not a multiple"),
                           InvalidArgument);
      CHECK_THROWS_WITH_AS(e->Read(f, -4096, buf.data(), 4096), doctest::Contains("negative"), InvalidArgument);
      IoFile ro = IoFile::Open(dir.File("align"), {.write = false, .direct = true});
      CHECK_THROWS_WITH_AS(e->Write(ro, 0, buf.data(), 4096), doctest::Contains("read-only"), InvalidArgument);
      IoFile closed;
      CHECK_THROWS_WITH_AS(e->Read(closed, 0, buf.data(), 4096), doctest::Contains("not open"), InvalidArgument);
      CHECK(e->Stats().requests == 0);
    }
    IoEngineOptions bad;
    bad.block_size = 1000;
    CHECK_THROWS_WITH_AS(CreateIoEngine(bad), doctest::Contains("aio.block_size must be a positive multiple of 4096"),
                         InvalidArgument);
    bad.block_size = int64_t{2} << 30;
    CHECK_THROWS_WITH_AS(CreateIoEngine(bad), doctest::Contains("at most 1 GiB"), InvalidArgument);
    bad = {};
    bad.stall_warning_s = 0;
    CHECK_THROWS_WITH_AS(CreateIoEngine(bad), doctest::Contains("stall_warning_s"), InvalidArgument);
    bad = {};
    bad.queue_depth = 0;
    CHECK_THROWS_WITH_AS(CreateIoEngine(bad), doctest::Contains("aio.queue_depth"), InvalidArgument);
    bad = {};
    bad.intra_op_parallelism = 0;
    CHECK_THROWS_WITH_AS(CreateIoEngine(bad), doctest::Contains("aio.intra_op_parallelism"), InvalidArgument);
    CHECK_THROWS_WITH_AS(ParseIoEngineKind("libaio"), doctest::Contains("expected auto, io_uring or pread"),
                         InvalidArgument);
    CHECK(ParseIoEngineKind("uring") == IoEngineKind::kUring);
  }

  TEST_CASE("io engines: O_DIRECT refused by the file system is an IoError naming the file and file system") {
    // Linux before 6.6 refuses O_DIRECT on tmpfs with EINVAL; newer kernels accept it, so the refusal
    // is injected through the seam (on a tmpfs path when there is one, so the message names it).
    const bool shm = FileSystemName(FileEnv::Default(), "/dev/shm") == "tmpfs";
    TempDir dir(shm ? "/dev/shm" : "");
    FaultEnv env;
    env.direct_open_error = EINVAL;
    const std::string msg = Thrown([&] { OpenRw(dir.File("x"), true, env); });
    CHECK(msg.find("does not support direct I/O") != std::string::npos);
    CHECK(msg.find(FileSystemName(env, dir.path())) != std::string::npos);
    if (shm) CHECK(msg.find("(tmpfs)") != std::string::npos);
    CHECK(msg.find(dir.File("x")) != std::string::npos);
    // Other failures name the errno.
    const std::string missing = Thrown([&] { IoFile::Open(dir.File("nope/x"), {.write = false, .direct = false}); });
    CHECK(missing.find("No such file or directory") != std::string::npos);
    CHECK(missing.find(dir.File("nope/x")) != std::string::npos);
  }

  TEST_CASE("pinned pool: page-aligned buffers, accounted as pinned host memory, leases return") {
    MemoryAccount account("pinned-test");
    {
      ScopedMemoryAccount scope(&account);
      PinnedPool pool(10000, 3);  // rounded up to 12 KiB each
      CHECK(pool.buffer_bytes() == 12288);
      CHECK(account.Current(MemCategory::kPinned) == pool.total_bytes());
      CHECK(pool.total_bytes() >= 3 * 12288);
      std::vector<PinnedPool::Lease> leases;
      for (int i = 0; i < 3; ++i) {
        leases.push_back(pool.TryAcquire());
        REQUIRE(leases.back());
        CHECK(reinterpret_cast<uintptr_t>(leases.back().data()) % kDirectIoAlignment == 0);
        CHECK(leases.back().size() == 12288);
      }
      CHECK_FALSE(pool.TryAcquire());
      CHECK(pool.num_free() == 0);
      // A blocked Acquire wakes when another thread releases.
      std::thread t([&] { leases.pop_back(); });
      PinnedPool::Lease again = pool.Acquire();
      t.join();
      CHECK(again);
      CHECK(pool.Regions().size() == 3);
      leases.clear();
      again.Release();
      CHECK(pool.num_free() == 3);
      PinnedBuffer big(5 * kMiB);  // huge-page sized: 2 MiB aligned
      CHECK(reinterpret_cast<uintptr_t>(big.data()) % (2 * kMiB) == 0);
      CHECK(big.size() == 6 * kMiB);
      CHECK(account.Current(MemCategory::kPinned) == pool.total_bytes() + 6 * kMiB);
    }
    CHECK(account.Current(MemCategory::kPinned) == 0);
    CHECK(account.Peak(MemCategory::kPinned) > 0);
  }
}

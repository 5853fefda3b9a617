// WriteCheckpoint over the `local` backend: round trips at every layout and world size 1..3, resharded
// reads that touch only the bytes they need, `latest` and overwriting a tag, leftovers of interrupted
// saves, tag validation, arguments agreed across ranks, disk-full and failed-publish faults (IoError on
// every rank, nothing already saved changed), and crash sweeps: a crash at every file-system operation
// of a save, followed by the loss of everything not fsynced, always leaves `latest` naming a complete
// checkpoint and every older checkpoint intact.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>

#include "ckpt_test_util.h"
#include "tests/common/skip.h"
#include "zerorun/runtime/safetensors.h"

using namespace ckpttest;

namespace {

CheckpointWriteOptions Options(const fs::path& dir, const std::string& tag, CheckpointEnv* env = nullptr) {
  CheckpointWriteOptions o;
  o.save_dir = dir.string();
  o.tag = tag;
  o.env = env;
  return o;
}

// Every file under `dir` with its bytes (to prove nothing changed).
std::map<std::string, std::string> Snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = ReadBytes(e.path());
  }
  return out;
}

bool HasTemporaries(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (IsCheckpointTemporary(e.path().filename().string())) return true;
  }
  return false;
}

// Runs a save of `world` ranks and returns every rank's error text ("" when it returned).
template <typename E>
std::vector<std::string> SaveErrors(int world, const std::function<void(comm::Communicator&)>& save) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  comm::RunLocalRanks(world, [&](comm::Communicator& comm) {
    try {
      save(comm);
    } catch (const E& e) {
      errors[static_cast<size_t>(comm.rank())] = e.what();
    }
  });
  return errors;
}

CheckpointContents Contents(const CheckpointManifest& m, Layout layout, int world, int rank, Tensor* held,
                            int version = 0) {
  CheckpointContents c;
  c.manifest = m;
  c.chunks = LayoutChunks(m, layout, world, rank);
  std::vector<CheckpointChunkSpec> chunks = c.chunks;
  c.fetch = [chunks, m, held, version](size_t i) {
    const CheckpointChunkSpec& ch = chunks[i];
    const CheckpointTensor& t = *m.FindTensor(ch.tensor);
    *held = SlotValues(t, *t.FindSlot(ch.slot), ch.offset, ch.numel, version);
    return *held;
  };
  return c;
}

// What must hold after any crash: `latest` (if any) names a checkpoint that verifies and has the
// values of the version its tag says; every complete tag verifies too.
void CheckRecoverable(const fs::path& dir, const CheckpointManifest& m, const std::map<std::string, std::set<int>>& versions) {
  std::optional<std::string> latest = ReadLatestCheckpointTag(dir.string());
  REQUIRE(latest.has_value());
  CHECK(versions.count(*latest) == 1);
  for (const std::string& tag : ListCheckpointTags(dir.string())) {
    CAPTURE(tag);
    const std::string path = (dir / tag).string();
    CheckpointVerifyReport r = VerifyCheckpoint(path);
    CHECK_MESSAGE(r.ok(), (r.problems.empty() ? "" : r.problems[0]));
    // Its values are one of the versions ever saved under this tag.
    CheckpointReader reader(path);
    const CheckpointTensor& t = m.tensors[3];
    Tensor got = reader.ReadTensor(t.name, kSlotFp32);
    bool matched = false;
    for (int v : versions.at(tag)) {
      Tensor want = SlotValues(t, *t.FindSlot(kSlotFp32), 0, t.numel(), v);
      matched = matched || SameBytes(got, want);
    }
    CHECK(matched);
  }
  CHECK(ListCheckpointTags(dir.string()).size() >= 1);
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("checkpoint save: every layout at world sizes 1-3 round-trips every slot, files as documented") {
  const CheckpointManifest m = SyntheticManifest();
  for (Layout layout : kAllLayouts) {
    for (int world = 1; world <= 3; ++world) {
      CAPTURE(LayoutName(layout));
      CAPTURE(world);
      fs::path d = TempDir("roundtrip");
      WriteSynthetic(m, layout, world, Options(d, "global_step4"), /*version=*/4);
      CHECK(ReadLatestCheckpointTag(d.string()) == std::optional<std::string>("global_step4"));
      CHECK(ReadBytes(d / "latest") == "global_step4");  // DeepSpeed's format: the tag, no newline
      std::set<std::string> names;
      for (const auto& e : fs::directory_iterator(d / "global_step4")) names.insert(e.path().filename().string());
      std::set<std::string> expected = {"manifest.json"};
      for (int r = 0; r < world; ++r) {
        expected.insert(CheckpointShardFile(r));
        expected.insert(CheckpointIndexFile(r));
      }
      CHECK(names == expected);
      CHECK_FALSE(HasTemporaries(d));
      CheckSyntheticValues((d / "global_step4").string(), m, 4);
      CheckpointReader reader((d / "global_step4").string());
      CHECK(reader.manifest().world_size == world);
      CHECK(reader.manifest().tag == "global_step4");
      // Shards are plain safetensors: the generic reader opens them.
      SafetensorsReader plain((d / "global_step4" / CheckpointShardFile(0)).string());
      CHECK(plain.tensors().size() == reader.ranks()[0].chunks.size());
      fs::remove_all(d);
    }
  }
}

TEST_CASE("checkpoint load: a resharded read opens only the shards it needs and reads only their blocks") {
  const CheckpointManifest m = SyntheticManifest(DType::kF32, 40);
  fs::path d = TempDir("partial");
  CheckpointWriteOptions o = Options(d, "t");
  o.checksum_block_bytes = 64;
  WriteSynthetic(m, Layout::kPerParam, 4, o, 1);
  for (Layout layout : kAllLayouts) {
    for (int k : {1, 2, 3, 5}) {
      for (int r = 0; r < k; ++r) {
        CAPTURE(LayoutName(layout));
        CAPTURE(k);
        CAPTURE(r);
        CheckpointReader reader((d / "t").string());
        std::vector<CheckpointChunkSpec> pieces = LayoutChunks(m, layout, k, r);
        std::vector<std::vector<float>> buffers(pieces.size());
        std::vector<CheckpointReadRequest> requests;
        uint64_t wanted = 0;
        for (size_t i = 0; i < pieces.size(); ++i) {
          buffers[i].resize(static_cast<size_t>(pieces[i].numel));
          requests.push_back({pieces[i].tensor, pieces[i].slot, pieces[i].offset, pieces[i].numel, buffers[i].data(),
                              DType::kF32});
          wanted += static_cast<uint64_t>(pieces[i].numel) * 4;
        }
        reader.Read(requests);
        for (size_t i = 0; i < pieces.size(); ++i) {
          const CheckpointTensor& t = *m.FindTensor(pieces[i].tensor);
          CHECK(buffers[i] == SlotValues(t, *t.FindSlot(pieces[i].slot), pieces[i].offset, pieces[i].numel, 1).ToVector());
        }
        // At most one extra block at each end of each (request, chunk) intersection, and no more shards
        // than hold a wanted element.
        CHECK(reader.stats().bytes_read >= wanted);
        CHECK(reader.stats().bytes_read <= wanted + 2 * 64 * (requests.size() * 4));
        CHECK(reader.stats().shards_opened <= 4);
        if (layout == Layout::kPerParam && k == 4) CHECK(reader.stats().shards_opened == 1);
      }
    }
  }
  // One rank of the saved layout reads exactly its own shard, without rounding.
  CheckpointReader reader((d / "t").string());
  std::vector<CheckpointReadRequest> requests;
  std::vector<std::vector<float>> buffers;
  std::vector<CheckpointChunkSpec> own = LayoutChunks(m, Layout::kPerParam, 4, 2);
  buffers.reserve(own.size());
  uint64_t wanted = 0;
  for (const CheckpointChunkSpec& c : own) {
    buffers.emplace_back(static_cast<size_t>(c.numel));
    requests.push_back({c.tensor, c.slot, c.offset, c.numel, buffers.back().data(), DType::kF32});
    wanted += static_cast<uint64_t>(c.numel) * 4;
  }
  reader.Read(requests);
  CHECK(reader.stats().bytes_read == wanted);
  CHECK(reader.stats().shards_opened == 1);
  fs::remove_all(d);
}

TEST_CASE("checkpoint save: latest, save_latest false, and overwriting a tag replaces it whole") {
  const CheckpointManifest m = SyntheticManifest();
  fs::path d = TempDir("latest");
  WriteSynthetic(m, Layout::kFlat, 2, Options(d, "a"), 0);
  WriteSynthetic(m, Layout::kFlat, 2, Options(d, "b"), 1);
  CHECK(ReadLatestCheckpointTag(d.string()) == std::optional<std::string>("b"));
  CheckpointWriteOptions o = Options(d, "a");
  o.save_latest = false;
  WriteSynthetic(m, Layout::kPerParam, 3, o, 2);  // a different world size and layout under the same tag
  CHECK(ReadLatestCheckpointTag(d.string()) == std::optional<std::string>("b"));
  CheckSyntheticValues((d / "a").string(), m, 2);
  CHECK(CheckpointReader((d / "a").string()).manifest().world_size == 3);
  CHECK_FALSE(fs::exists(d / "a" / CheckpointShardFile(3)));
  CHECK(ListCheckpointTags(d.string()) == std::vector<std::string>{"a", "b"});
  CHECK_FALSE(HasTemporaries(d));
  WriteSynthetic(m, Layout::kPerParam, 1, Options(d, "a"), 3);
  CHECK(ReadLatestCheckpointTag(d.string()) == std::optional<std::string>("a"));
  CheckSyntheticValues((d / "a").string(), m, 3);
  // The world-3 copy is gone entirely: no stale rank files mix in.
  CHECK_FALSE(fs::exists(d / "a" / CheckpointShardFile(1)));
  CHECK(ResolveCheckpointDir(d.string(), "") == std::optional<std::string>((d / "a").string()));
  CHECK(ResolveCheckpointDir(d.string(), "b") == std::optional<std::string>((d / "b").string()));
  fs::remove_all(d);
}

TEST_CASE("checkpoint save: leftovers of an interrupted save are ignored on load and removed by the next save") {
  const CheckpointManifest m = SyntheticManifest();
  fs::path d = TempDir("leftovers");
  WriteSynthetic(m, Layout::kFlat, 2, Options(d, "good"), 5);
  // What a save killed at various points leaves behind.
  fs::create_directories(d / ".zerorun-tmp.next.1-2-3");
  WriteBytes(d / ".zerorun-tmp.next.1-2-3" / "rank00000.safetensors.tmp.77", "partial");
  WriteBytes(d / ".zerorun-tmp.next.1-2-3" / "manifest.json", "{\"format\":");
  WriteBytes(d / "latest.tmp.1-2-3", "ne");
  fs::create_directories(d / ".zerorun-old.good.4-5-6" / "x");
  CHECK(ListCheckpointTags(d.string()) == std::vector<std::string>{"good"});
  CHECK(ReadLatestCheckpointTag(d.string()) == std::optional<std::string>("good"));
  CheckSyntheticValues((d / "good").string(), m, 5);
  WriteSynthetic(m, Layout::kFlat, 2, Options(d, "next"), 6);
  CHECK_FALSE(HasTemporaries(d));
  CHECK(ListCheckpointTags(d.string()) == std::vector<std::string>{"good", "next"});
  fs::remove_all(d);
}

TEST_CASE("checkpoint save: tag_validation Fail fails every rank naming the tags; Warn and Ignore use rank 0's") {
  const CheckpointManifest m = SyntheticManifest();
  fs::path d = TempDir("tags");
  WriteSynthetic(m, Layout::kFlat, 3, Options(d, "before"), 0);
  const auto before = Snapshot(d);
  std::vector<std::string> errors = SaveErrors<InvalidArgument>(3, [&](comm::Communicator& comm) {
    CheckpointWriteOptions o = Options(d, comm.rank() == 2 ? "step9" : "step10");
    o.tag_validation = TagValidation::kFail;
    Tensor held;
    WriteCheckpoint(comm, o, Contents(m, Layout::kFlat, 3, comm.rank(), &held));
  });
  for (const std::string& e : errors) {
    CHECK(Contains(e, "rank 2: the checkpoint tag 'step9' differs from rank 0's 'step10'"));
  }
  CHECK(Snapshot(d) == before);
  CHECK_FALSE(HasTemporaries(d));
  for (TagValidation tv : {TagValidation::kWarn, TagValidation::kIgnore}) {
    comm::RunLocalRanks(3, [&](comm::Communicator& comm) {
      CheckpointWriteOptions o = Options(d, comm.rank() == 2 ? "step9" : "step10");
      o.tag_validation = tv;
      Tensor held;
      CheckpointWriteResult r = WriteCheckpoint(comm, o, Contents(m, Layout::kFlat, 3, comm.rank(), &held, 1));
      CHECK(r.tag == "step10");
    });
    CHECK(ListCheckpointTags(d.string()) == std::vector<std::string>{"before", "step10"});
    CheckSyntheticValues((d / "step10").string(), m, 1);
  }
  fs::remove_all(d);
}

TEST_CASE("checkpoint save: bad arguments on one rank fail every rank, naming it, before anything is written") {
  const CheckpointManifest m = SyntheticManifest();
  fs::path d = TempDir("args");
  WriteSynthetic(m, Layout::kFlat, 3, Options(d, "ok"), 0);
  const auto before = Snapshot(d);
  auto run = [&](const std::function<void(int, CheckpointContents&, CheckpointWriteOptions&)>& spoil) {
    return SaveErrors<InvalidArgument>(3, [&](comm::Communicator& comm) {
      CheckpointWriteOptions o = Options(d, "bad");
      Tensor held;
      CheckpointContents c = Contents(m, Layout::kFlat, 3, comm.rank(), &held);
      spoil(comm.rank(), c, o);
      WriteCheckpoint(comm, o, c);
    });
  };
  // A chunk missing on rank 1: the slots are not covered.
  std::vector<std::string> e = run([](int rank, CheckpointContents& c, CheckpointWriteOptions&) {
    if (rank == 1) c.chunks.erase(c.chunks.begin());
  });
  const std::string first1 = LayoutChunks(m, Layout::kFlat, 3, 1)[0].tensor;
  const std::string first2 = LayoutChunks(m, Layout::kFlat, 3, 2)[0].tensor;
  for (const std::string& x : e) {
    CHECK(Contains(x, "the chunks do not cover every tensor slot exactly: '" + first1 + "' (param): the ranks' "
                      "chunks hold"));
  }
  // An unknown slot on rank 2.
  e = run([](int rank, CheckpointContents& c, CheckpointWriteOptions&) {
    if (rank == 2) c.chunks[0].slot = "momentum";
  });
  for (const std::string& x : e) CHECK(Contains(x, "rank 2: chunk of tensor '" + first2 + "' names slot 'momentum'"));
  // A bad tag on rank 0 only, and an empty save_dir on rank 1.
  e = run([](int rank, CheckpointContents&, CheckpointWriteOptions& o) {
    if (rank == 0) o.tag = "a/b";
    if (rank == 1) o.save_dir = "";
  });
  for (const std::string& x : e) {
    CHECK(Contains(x, "rank 0: checkpoint tag 'a/b' must not contain '/'"));
    CHECK(Contains(x, "rank 1: save_dir must be a non-empty path"));
  }
  // fetch hands over the wrong dtype on rank 1: found while writing, the staging directory goes away.
  e = run([&](int rank, CheckpointContents& c, CheckpointWriteOptions&) {
    if (rank == 1) c.fetch = [&](size_t i) { return Tensor::Zeros({c.chunks[i].numel}, DType::kF16); };
  });
  for (const std::string& x : e) CHECK(Contains(x, "rank 1: fetch(0) for '" + first1 + "' (param) returned"));
  // A client state that is not an object.
  e = run([](int, CheckpointContents& c, CheckpointWriteOptions&) { c.manifest.client_state_json = "[1]"; });
  for (const std::string& x : e) CHECK(Contains(x, "the client_state JSON is not an object"));
  CHECK(Snapshot(d) == before);
  CHECK_FALSE(HasTemporaries(d));
  fs::remove_all(d);
}

TEST_CASE("checkpoint save: disk full on one rank is an IoError on every rank and changes nothing saved") {
  const CheckpointManifest m = SyntheticManifest();
  fs::path d = TempDir("enospc");
  WriteSynthetic(m, Layout::kPerParam, 3, Options(d, "global_step1"), 1);
  const auto before = Snapshot(d);
  FaultEnv env;
  env.DiskFullAfter("rank00001.safetensors", 1000);  // a short write, then ENOSPC
  std::vector<std::string> errors = SaveErrors<IoError>(3, [&](comm::Communicator& comm) {
    Tensor held;
    WriteCheckpoint(comm, Options(d, "global_step2", &env), Contents(m, Layout::kPerParam, 3, comm.rank(), &held, 2));
  });
  for (const std::string& e : errors) {
    CAPTURE(e);
    CHECK(Contains(e, "checkpoint save to " + (d / "global_step2").string() + " failed; nothing was published"));
    CHECK(Contains(e, "rank 1: cannot save"));
    CHECK(Contains(e, "rank00001.safetensors"));
    CHECK(Contains(e, std::strerror(ENOSPC)));
    CHECK_FALSE(Contains(e, "rank 0:"));
  }
  CHECK(Snapshot(d) == before);
  CHECK_FALSE(HasTemporaries(d));
  CheckSyntheticValues((d / "global_step1").string(), m, 1);

  // fsync failing for rank 0's manifest, then rank 0's publish failing: still every rank throws.
  FaultEnv sync_env;
  sync_env.fail_op = [](const std::string& op, const std::string& path) {
    return op == "sync" && Contains(path, "manifest.json");
  };
  sync_env.fail_errno = EIO;
  errors = SaveErrors<IoError>(2, [&](comm::Communicator& comm) {
    Tensor held;
    WriteCheckpoint(comm, Options(d, "global_step2", &sync_env), Contents(m, Layout::kFlat, 2, comm.rank(), &held, 2));
  });
  for (const std::string& e : errors) {
    CHECK(Contains(e, "rank 0: sync of"));
    CHECK(Contains(e, std::strerror(EIO)));
  }
  CHECK(Snapshot(d) == before);
  FaultEnv publish_env;
  publish_env.fail_op = [](const std::string& op, const std::string& path) {
    return op == "rename" && IsCheckpointTemporary(BaseName(path));  // the staging directory itself
  };
  publish_env.fail_errno = EIO;
  errors = SaveErrors<IoError>(2, [&](comm::Communicator& comm) {
    Tensor held;
    WriteCheckpoint(comm, Options(d, "global_step2", &publish_env), Contents(m, Layout::kFlat, 2, comm.rank(), &held, 2));
  });
  for (const std::string& e : errors) {
    CHECK(Contains(e, "every rank's files were written but rank 0 could not publish them"));
    CHECK(Contains(e, std::strerror(EIO)));
  }
  CHECK(Snapshot(d) == before);
  CHECK(ReadLatestCheckpointTag(d.string()) == std::optional<std::string>("global_step1"));
  CHECK_FALSE(HasTemporaries(d));
  CheckSyntheticValues((d / "global_step1").string(), m, 1);
  fs::remove_all(d);
}

// The bytes one synthetic checkpoint (2 ranks) takes on disk, in 4 KiB blocks.
uint64_t SyntheticCheckpointBytes(const CheckpointManifest& m) {
  fs::path probe = TempDir("fs_probe");
  WriteSynthetic(m, Layout::kFlat, 2, Options(probe, "t"), 1);
  uint64_t one = 0;
  for (const auto& e : fs::recursive_directory_iterator(probe)) {
    if (e.is_regular_file()) one += (e.file_size() + 4095) / 4096 * 4096;
  }
  fs::remove_all(probe);
  return one;
}

// On a file system at `d` with room for one checkpoint and a half: the second save fails on every rank
// with ENOSPC, publishes nothing, leaves no temporary and the first checkpoint as it was.
void CheckFullFileSystem(const CheckpointManifest& m, const fs::path& d) {
  WriteSynthetic(m, Layout::kFlat, 2, Options(d, "step1"), 1);
  const auto before = Snapshot(d);
  std::vector<std::string> errors = SaveErrors<IoError>(2, [&](comm::Communicator& comm) {
    Tensor held;
    WriteCheckpoint(comm, Options(d, "step2"), Contents(m, Layout::kFlat, 2, comm.rank(), &held, 2));
  });
  for (const std::string& e : errors) {
    CAPTURE(e);
    CHECK(Contains(e, "nothing was published"));
    CHECK(Contains(e, std::strerror(ENOSPC)));
  }
  CHECK(Snapshot(d) == before);
  CHECK_FALSE(HasTemporaries(d));  // the space the failed save took is given back
  CheckSyntheticValues((d / "step1").string(), m, 1);
  CHECK(ReadLatestCheckpointTag(d.string()) == std::optional<std::string>("step1"));
}

int RunQuiet(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

TEST_CASE("checkpoint env: a file written with O_DIRECT has exactly the bytes appended, whatever their sizes") {
  // The writer pads its last block to 4 KiB and truncates: every length, across its 2 MiB buffers and
  // with Appends after a Sync, must read back byte for byte (on ext4 here: O_DIRECT).
  fs::path d = TempDir("direct_sizes");
  CheckpointEnv& env = CheckpointEnv::Posix();
  std::vector<char> pattern(size_t{9} << 20);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>((i * 131 + i / 4099) & 0xff);
  const std::vector<std::vector<size_t>> cases = {
      {}, {1}, {4095}, {4096}, {4097}, {size_t{2} << 20}, {(size_t{2} << 20) + 1}, {(size_t{9} << 20) - 5},
      {3, 5000, size_t{2} << 20, 7, 1 << 20}, {size_t{17} << 20 >> 2, 4096 * 3 + 1}};
  for (size_t k = 0; k < cases.size(); ++k) {
    for (const bool sync_between : {false, true}) {
      CAPTURE(k);
      CAPTURE(sync_between);
      const std::string path = (d / ("f" + std::to_string(k))).string();
      std::string expected;
      {
        std::unique_ptr<WritableFile> f = env.NewWritableFile(path);
        size_t at = 0;
        for (size_t n : cases[k]) {
          n = std::min(n, pattern.size() - at);
          f->Append(pattern.data() + at, n);
          expected.append(pattern.data() + at, n);
          at += n;
          if (sync_between) f->Sync();
        }
        f->Sync();
        f->Close();
      }
      CHECK(fs::file_size(path) == expected.size());
      CHECK(env.ReadFileToString(path) == expected);
    }
  }
  fs::remove_all(d);
}

// Whether this process has `path` open with O_DIRECT (its descriptors' flags in /proc/self/fdinfo).
bool OpenWithODirect(const std::string& path) {
  for (const fs::directory_entry& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec) != fs::path(path)) continue;
    std::ifstream info("/proc/self/fdinfo/" + e.path().filename().string());
    std::string key;
    while (info >> key) {
      if (key != "flags:") continue;
      std::string octal;
      info >> octal;
      if (std::stoul(octal, nullptr, 8) & O_DIRECT) return true;
    }
  }
  return false;
}

TEST_CASE("checkpoint env: direct reads return exactly the buffered bytes at any offset, length and destination") {
  // 1 MiB and longer reads bypass the page cache through an aligned 4 MiB buffer (or straight into an
  // aligned destination); the file's length is not a multiple of 4 KiB, so reads end mid-block.
  fs::path d = TempDir("direct_reads");
  const std::string path = (d / "f").string();
  std::string content(size_t{11} << 20, '\0');
  content.resize(content.size() - 1234);
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>((i * 167 + i / 4093) & 0xff);
  WriteBytes(path, content);
  for (const bool direct_off : {false, true}) {
    CAPTURE(direct_off);
    if (direct_off) ::setenv("ZERORUN_CKPT_DIRECT", "0", 1);
    std::unique_ptr<ReadableFile> f = CheckpointEnv::Posix().NewDirectReadableFile(path);
    if (direct_off) ::unsetenv("ZERORUN_CKPT_DIRECT");
    const int probe = ::open(path.c_str(), O_RDONLY | O_DIRECT);
    if (probe >= 0) ::close(probe);
    // Where the file system takes O_DIRECT, the direct file holds such a descriptor (and only then).
    CHECK(OpenWithODirect(path) == (probe >= 0 && !direct_off));
    REQUIRE(f->size() == content.size());
    const uint64_t n = content.size();
    const std::vector<std::pair<uint64_t, uint64_t>> reads = {
        {0, 1 << 20},                   // aligned everything (into an aligned destination below)
        {4096, (uint64_t{4} << 20)},    // aligned, the bounce buffer's size
        {1, (1 << 20) + 3},             // unaligned both ends
        {4095, (uint64_t{9} << 20)},    // across three bounce buffers
        {n - (3 << 20) - 17, (3 << 20) + 17},  // to the end of the file exactly
        {12345, 100},                   // small: buffered
        {0, n}};                        // the whole file
    for (const auto& [off, len] : reads) {
      for (const size_t skew : {size_t{0}, size_t{1}}) {
        CAPTURE(off);
        CAPTURE(len);
        CAPTURE(skew);
        const size_t alloc = static_cast<size_t>((len + 2 * 4096 - 1) / 4096 * 4096);  // a multiple of the alignment
        std::unique_ptr<char, void (*)(void*)> buf(static_cast<char*>(std::aligned_alloc(4096, alloc)), std::free);
        REQUIRE(buf);
        f->ReadAt(off, buf.get() + skew, static_cast<size_t>(len));
        CHECK(std::memcmp(buf.get() + skew, content.data() + off, static_cast<size_t>(len)) == 0);
      }
    }
    std::vector<char> past(size_t{2} << 20);
    try {
      f->ReadAt(n - (1 << 20), past.data(), past.size());
      FAIL("a read past the end of the file returned");
    } catch (const CheckpointError& e) {
      CHECK(Contains(e.what(), "unexpected end of file"));
      CHECK(Contains(e.what(), path));
    }
  }
  fs::remove_all(d);
}

TEST_CASE("checkpoint save: a really full file system (a small tmpfs) fails the save and keeps the previous one") {
  // Both writers: O_DIRECT (tmpfs takes it since Linux 6.6; before, the writer falls back to buffered
  // writes) and the buffered one (ZERORUN_CKPT_DIRECT=0).
  const CheckpointManifest m = SyntheticManifest();
  const uint64_t one = SyntheticCheckpointBytes(m);
  for (const bool buffered : {false, true}) {
    CAPTURE(buffered);
    fs::path d = TempDir(buffered ? "tmpfs_buffered" : "tmpfs");
    const std::string size = "size=" + std::to_string((one * 3 / 2 + 4095) / 4096 * 4096);
    if (::mount("tmpfs", d.c_str(), "tmpfs", 0, size.c_str()) != 0) {
      const int err = errno;
      fs::remove_all(d);
      ZR_TEST_SKIP("mounting a tmpfs needs root (" << std::strerror(err) << ")");
    }
    struct Unmount {
      fs::path dir;
      bool buffered;
      ~Unmount() {
        if (buffered) ::unsetenv("ZERORUN_CKPT_DIRECT");
        ::umount(dir.c_str());
        fs::remove_all(dir);
      }
    } unmount{d, buffered};
    if (buffered) ::setenv("ZERORUN_CKPT_DIRECT", "0", 1);  // read at every file's creation
    CheckFullFileSystem(m, d);
  }
}

TEST_CASE("checkpoint save: a really full ext4 (a loop device: O_DIRECT writes) fails the save and keeps the previous one") {
  const CheckpointManifest m = SyntheticManifest();
  const uint64_t one = SyntheticCheckpointBytes(m);
  fs::path base = TempDir("ext4");
  const fs::path image = base / "fs.img", d = base / "mnt";
  fs::create_directories(d);
  struct Cleanup {
    fs::path base, mnt;
    bool mounted = false;
    ~Cleanup() {
      if (mounted) ::umount2(mnt.c_str(), MNT_DETACH);
      fs::remove_all(base);
    }
  } cleanup{base, d};
  if (::geteuid() != 0) ZR_TEST_SKIP("mounting a loop device needs root");
  if (RunQuiet("truncate -s 32M '" + image.string() + "' && mkfs.ext4 -q -F -m 0 -O ^has_journal '" + image.string() + "'") != 0) {
    ZR_TEST_SKIP("mkfs.ext4 failed (e2fsprogs missing?)");
  }
  if (RunQuiet("mount -o loop '" + image.string() + "' '" + d.string() + "'") != 0) {
    ZR_TEST_SKIP("mount -o loop failed (no loop devices here)");
  }
  cleanup.mounted = true;
  // Leave room for one checkpoint and a half: a filler takes the rest.
  struct statvfs st {};
  REQUIRE(::statvfs(d.c_str(), &st) == 0);
  const uint64_t avail = static_cast<uint64_t>(st.f_bavail) * st.f_frsize, keep = (one * 3 / 2 + 4095) / 4096 * 4096;
  REQUIRE(avail > keep);
  const int fd = ::open((d / "filler").c_str(), O_WRONLY | O_CREAT, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::posix_fallocate(fd, 0, static_cast<off_t>(avail - keep)) == 0);
  ::close(fd);
  // The writer takes the O_DIRECT path here (ext4 accepts it).
  const int probe = ::open((d / "probe").c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0600);
  REQUIRE(probe >= 0);
  ::close(probe);
  fs::remove(d / "probe");
  CheckFullFileSystem(m, d);
}

TEST_CASE("checkpoint save: a save directory that is a file fails every rank naming it") {
  fs::path d = TempDir("dirfile");
  WriteBytes(d / "ckpt", "not a directory");
  std::vector<std::string> errors = SaveErrors<IoError>(2, [&](comm::Communicator& comm) {
    Tensor held;
    WriteCheckpoint(comm, Options(d / "ckpt", "t"), Contents(SyntheticManifest(), Layout::kFlat, 2, comm.rank(), &held));
  });
  for (const std::string& e : errors) {
    CHECK(Contains(e, "rank 0: cannot create directory " + (d / "ckpt").string() + ": it exists and is a file"));
  }
  CHECK(ReadBytes(d / "ckpt") == "not a directory");
  // A tag that exists as a file is refused the same way.
  fs::create_directories(d / "save");
  WriteBytes(d / "save" / "t", "x");
  errors = SaveErrors<IoError>(1, [&](comm::Communicator& comm) {
    Tensor held;
    WriteCheckpoint(comm, Options(d / "save", "t"), Contents(SyntheticManifest(), Layout::kFlat, 1, 0, &held));
  });
  CHECK(Contains(errors[0], (d / "save" / "t").string() + ": it exists and is a file, not a checkpoint directory"));
  fs::remove_all(d);
}

TEST_CASE("checkpoint save: a crash at any file-system operation, then power loss, leaves latest loadable") {
  const CheckpointManifest m = SyntheticManifest();
  // Scenario 1: a new tag after an old one. Scenario 2: re-saving the tag `latest` names (the
  // exchange path). World 1 makes the operation order deterministic; world 3 interleaves ranks.
  struct Scenario {
    const char* name;
    int world;
    std::string tag;
  };
  for (const Scenario& sc : {Scenario{"new tag", 1, "step2"}, Scenario{"same tag", 1, "step1"},
                             Scenario{"new tag, 3 ranks", 3, "step2"}}) {
    CAPTURE(sc.name);
    int64_t completed_at = -1;
    int crashes = 0;
    for (int64_t k = 0; completed_at < 0 && k < 500; k += (sc.world == 1 ? 1 : 3)) {
      CAPTURE(k);
      fs::path d = TempDir("crash");
      WriteSynthetic(m, Layout::kFlat, sc.world, Options(d, "step1"), 1);
      FaultEnv env;
      env.crash_at_op = k;
      bool crashed = false;
      try {
        WriteSynthetic(m, Layout::kFlat, sc.world, Options(d, sc.tag, &env), 2);
      } catch (const SimulatedCrash&) {
        crashed = true;
      } catch (const CommError&) {  // a rank saw its crashed peer go away
        crashed = true;
      }
      if (!crashed) {
        completed_at = k;
        CHECK_FALSE(env.crashed());
      } else {
        ++crashes;
        env.DropUnsyncedData();
      }
      std::map<std::string, std::set<int>> versions = {{"step1", {1}}, {"step2", {2}}};
      if (sc.tag == "step1") versions["step1"] = {1, 2};
      CheckRecoverable(d, m, versions);
      // The next save cleans up and succeeds.
      WriteSynthetic(m, Layout::kFlat, sc.world, Options(d, "step3"), 3);
      CHECK_FALSE(HasTemporaries(d));
      CHECK(ReadLatestCheckpointTag(d.string()) == std::optional<std::string>("step3"));
      fs::remove_all(d);
    }
    CHECK(completed_at > 10);  // the sweep went through the whole save
    CHECK(crashes > 10);
  }
}

}  // TEST_SUITE

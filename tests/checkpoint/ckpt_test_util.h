// Shared helpers for the checkpoint tests: a synthetic model (tensors with slots, every element a
// closed-form value), the partition layouts ZeRO and Megatron produce (built from zero/partition.h),
// a writer of synthetic checkpoints over the `local` backend, and FaultEnv — the CheckpointEnv that
// injects ENOSPC, short writes, EIO and crashes, and can drop everything that was never fsynced
// (LevelDB's fault_injection_test idea).
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include "zerorun/comm/local/local_comm.h"
#include "zerorun/core/error.h"
#include "zerorun/core/rng.h"
#include "zerorun/runtime/checkpoint_env.h"
#include "zerorun/runtime/checkpoint_reader.h"
#include "zerorun/runtime/checkpoint_state.h"
#include "zerorun/runtime/checkpoint_writer.h"
#include "zerorun/zero/partition.h"

namespace ckpttest {

using namespace zerorun;
using namespace zerorun::runtime;
namespace fs = std::filesystem;

inline fs::path TempDir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("zr_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

inline std::string ReadBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteBytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename E>
std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "<no error>";
}

inline bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Same dtype-independent bytes (zero-size tensors have no storage: memcmp must not see null).
inline bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

// ---- a synthetic model ---------------------------------------------------------------------------

// Tensors with odd sizes (0, 1, 7, 4099 elements among them), each with a model-dtype "param" slot,
// fp32 masters and two Adam slots; one frozen tensor has only "param".
inline CheckpointManifest SyntheticManifest(DType model_dtype = DType::kBF16, uint64_t scale = 1) {
  CheckpointManifest m;
  m.zero_stage = 2;
  m.model_dtype = model_dtype;
  m.optimizer = "Adam";
  const std::vector<std::pair<std::string, Shape>> shapes = {
      {"wte.weight", {16, 8}}, {"h.0.attn.w", {7}},       {"h.0.attn.b", {1}},
      {"h.0.mlp.w", {4099}},   {"h.0.empty", {0}},        {"h.1.mlp.w", {3, 5, static_cast<int64_t>(scale)}},
      {"lm_head.frozen", {9, 2}}};
  for (const auto& [name, shape] : shapes) {
    CheckpointTensor t{name, shape, {{kSlotParam, model_dtype}}};
    if (name != "lm_head.frozen") {
      t.slots.push_back({kSlotFp32, DType::kF32});
      t.slots.push_back({"exp_avg", DType::kF32});
      t.slots.push_back({"exp_avg_sq", DType::kF32});
    }
    m.tensors.push_back(std::move(t));
  }
  return m;
}

// The value of element i of slot `slot` of tensor `tensor` (before rounding to the slot's dtype),
// shifted by `version` so that checkpoints of different steps differ everywhere.
inline float ElementValue(const std::string& tensor, const std::string& slot, int64_t i, int version = 0) {
  uint64_t h = HashName(tensor + "/" + slot) ^ (static_cast<uint64_t>(version) * 0x9e3779b97f4a7c15ull);
  Rng rng(h, 7, static_cast<uint64_t>(i));
  return rng.Uniform() * 8.0f - 4.0f + static_cast<float>(version);
}

// Elements [offset, offset + numel) of a slot, in the slot's dtype.
inline Tensor SlotValues(const CheckpointTensor& t, const CheckpointSlot& s, int64_t offset, int64_t numel,
                         int version = 0) {
  std::vector<float> v(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) v[static_cast<size_t>(i)] = ElementValue(t.name, s.name, offset + i, version);
  return Tensor::FromVector(v, {numel}, s.dtype);
}

// ---- layouts: which rank saves which element ranges -------------------------------------------------

enum class Layout {
  kRankZero,    // rank 0 saves everything (stage 0 without deduplication)
  kFlat,        // stages 1/2: every slot of every tensor concatenated, padded, cut into W partitions
  kFlatRoundRobin,
  kPerParam,    // stage 3: each tensor split ceil(n/W) per rank
  kBuckets,     // Megatron-style: buckets of consecutive tensors, each bucket split evenly over ranks
};
inline const char* LayoutName(Layout l) {
  switch (l) {
    case Layout::kRankZero: return "rank-zero";
    case Layout::kFlat: return "flat";
    case Layout::kFlatRoundRobin: return "flat-round-robin";
    case Layout::kPerParam: return "per-param";
    case Layout::kBuckets: return "buckets";
  }
  return "?";
}
inline const Layout kAllLayouts[] = {Layout::kRankZero, Layout::kFlat, Layout::kFlatRoundRobin, Layout::kPerParam,
                                     Layout::kBuckets};

// The chunks of one rank under `layout` at world size `world` (every slot laid out the same way).
inline std::vector<CheckpointChunkSpec> LayoutChunks(const CheckpointManifest& m, Layout layout, int world, int rank) {
  std::vector<int64_t> numels;
  for (const CheckpointTensor& t : m.tensors) numels.push_back(t.numel());
  std::vector<std::pair<int, zero::Range>> pieces;  // (tensor, element range) of this rank
  switch (layout) {
    case Layout::kRankZero:
      if (rank == 0) {
        for (size_t i = 0; i < numels.size(); ++i) pieces.push_back({static_cast<int>(i), {0, numels[i]}});
      }
      break;
    case Layout::kFlat:
    case Layout::kFlatRoundRobin: {
      zero::FlatGroupLayout g = zero::LayoutFlatGroup(numels, world, 2, layout == Layout::kFlatRoundRobin);
      for (const zero::ParamSlice& s : zero::ParamsInPartition(g, rank)) {
        pieces.push_back({s.param, {s.param_offset, s.param_offset + s.numel}});
      }
      break;
    }
    case Layout::kPerParam:
      for (size_t i = 0; i < numels.size(); ++i) {
        zero::Stage3Shard s = zero::ShardParamStage3(numels[i], world, rank);
        if (!s.real.empty()) pieces.push_back({static_cast<int>(i), s.real});
      }
      break;
    case Layout::kBuckets: {
      // Buckets of 2 consecutive tensors; rank r holds slice r of each bucket's flat range.
      for (size_t b = 0; b < numels.size(); b += 2) {
        std::vector<int64_t> bucket(numels.begin() + static_cast<long>(b),
                                    numels.begin() + static_cast<long>(std::min(b + 2, numels.size())));
        zero::FlatGroupLayout g = zero::LayoutFlatGroup(bucket, world, 1);
        for (const zero::ParamSlice& s : zero::ParamsInPartition(g, rank)) {
          pieces.push_back({static_cast<int>(b) + s.param, {s.param_offset, s.param_offset + s.numel}});
        }
      }
      break;
    }
  }
  std::vector<CheckpointChunkSpec> chunks;
  for (const CheckpointTensor& t : m.tensors) {
    for (const CheckpointSlot& s : t.slots) {
      for (const auto& [ti, r] : pieces) {
        if (m.tensors[static_cast<size_t>(ti)].name == t.name && r.size() > 0) {
          chunks.push_back({t.name, s.name, r.begin, r.size()});
        }
      }
    }
  }
  return chunks;
}

// Writes the synthetic checkpoint (values of `version`) from `world` local ranks under `layout`.
inline void WriteSynthetic(const CheckpointManifest& m, Layout layout, int world, CheckpointWriteOptions options,
                           int version = 0, const std::string& state_json = "") {
  comm::RunLocalRanks(world, [&](comm::Communicator& comm) {
    CheckpointContents c;
    c.manifest = m;
    if (!state_json.empty()) c.manifest.state_json = state_json;
    c.chunks = LayoutChunks(m, layout, world, comm.rank());
    Tensor held;
    c.fetch = [&](size_t i) {
      const CheckpointChunkSpec& ch = c.chunks[i];
      const CheckpointTensor& t = *m.FindTensor(ch.tensor);
      held = SlotValues(t, *t.FindSlot(ch.slot), ch.offset, ch.numel, version);
      return held;
    };
    WriteCheckpoint(comm, options, c);
  });
}

// Reads every slot of every tensor of checkpoint `dir` and checks it equals the values of `version`.
inline void CheckSyntheticValues(const std::string& dir, const CheckpointManifest& m, int version) {
  CheckpointReader reader(dir);
  for (const CheckpointTensor& t : m.tensors) {
    for (const CheckpointSlot& s : t.slots) {
      CAPTURE(t.name);
      CAPTURE(s.name);
      Tensor got = reader.ReadTensor(t.name, s.name);
      Tensor want = SlotValues(t, s, 0, t.numel(), version);
      REQUIRE(got.nbytes() == want.nbytes());
      CHECK(SameBytes(got, want));
    }
  }
}

// ---- FaultEnv ------------------------------------------------------------------------------------

// What a simulated crash throws: not a zerorun::Error, so no cleanup code mistakes it for a failure
// it could handle, as with a real kill -9.
struct SimulatedCrash : std::exception {
  const char* what() const noexcept override { return "simulated crash"; }
};

// Wraps the POSIX env. Every mutating operation (create, append, sync, close, rename, exchange,
// mkdir, sync-dir, remove) counts as one op. Faults, all off by default:
//   crash_at_op      the op with this index (0-based) and every later one throws SimulatedCrash;
//   fail_append      Append to a path containing `fail_path` fails with `fail_errno` once
//                    `fail_after_bytes` bytes went to that file, after writing what fits (a short
//                    write);
//   fail_read_after_bytes  a file opened for reading whose path contains `fail_read_path` fails its
//                    reads with EIO (IoError) once it has given that many bytes (each opened file
//                    counts its own);
//   fail_reread      such a file fails (EIO) a read at an offset it has already read from;
//   fail_op          the first op for which fail_op(name, path) is true fails with fail_errno (names:
//                    "create", "append", "sync", "close", "rename", "exchange", "mkdir", "syncdir",
//                    "remove").
// DropUnsyncedData() then simulates power loss: files lose what was appended after their last Sync,
// and creations, renames, exchanges and mkdirs whose directory was never fsynced afterwards are
// undone, newest first. (Removals are taken as durable: they only ever remove temporaries.)
class FaultEnv final : public CheckpointEnv {
 public:
  int64_t crash_at_op = -1;
  std::string fail_path;
  int fail_errno = ENOSPC;
  int64_t fail_after_bytes = -1;
  // A full disk for files whose path contains `path`, after `after` bytes of each.
  void DiskFullAfter(const std::string& path, int64_t after) {
    fail_path = path;
    fail_after_bytes = after;
    fail_errno = ENOSPC;
  }
  std::function<bool(const std::string& op, const std::string& path)> fail_op;
  std::string fail_read_path;
  int64_t fail_read_after_bytes = -1;
  bool fail_reread = false;

  int64_t ops() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ops_;
  }
  bool crashed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return crashed_;
  }

  void DropUnsyncedData() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [path, f] : files_) {
      std::error_code ec;
      if (f.size > f.synced && fs::exists(path, ec)) fs::resize_file(path, f.synced, ec);
    }
    for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
      std::error_code ec;
      switch (it->kind) {
        case Pending::kCreate: fs::remove(it->a, ec); break;
        case Pending::kMkdir: fs::remove_all(it->a, ec); break;
        case Pending::kRename:
          // Back to before the rename, the file it replaced included.
          if (fs::exists(it->b, ec)) fs::rename(it->b, it->a, ec);
          if (it->replaced) WriteBytes(it->b, *it->replaced);
          break;
        case Pending::kExchange: posix_.Exchange(it->a, it->b); break;
      }
    }
    pending_.clear();
    files_.clear();
  }

  std::unique_ptr<WritableFile> NewWritableFile(const std::string& path) override {
    Op("create", path);
    auto f = posix_.NewWritableFile(path);
    std::lock_guard<std::mutex> lock(mu_);
    files_[path] = {};
    pending_.push_back({Pending::kCreate, path, "", DirName(path)});
    return std::make_unique<File>(this, std::move(f), path);
  }
  std::unique_ptr<ReadableFile> NewReadableFile(const std::string& path) override {
    CheckCrashed();
    auto f = posix_.NewReadableFile(path);
    if ((fail_read_after_bytes < 0 && !fail_reread) || !Contains(path, fail_read_path)) return f;
    return std::make_unique<ReadFile>(this, std::move(f));
  }
  FileStat Stat(const std::string& path) override {
    CheckCrashed();
    return posix_.Stat(path);
  }
  std::vector<std::string> ListDir(const std::string& dir) override {
    CheckCrashed();
    return posix_.ListDir(dir);
  }
  void CreateDir(const std::string& dir) override {
    Op("mkdir", dir);
    bool existed = posix_.Stat(dir).kind == FileKind::kDirectory;
    posix_.CreateDir(dir);
    std::lock_guard<std::mutex> lock(mu_);
    if (!existed) pending_.push_back({Pending::kMkdir, dir, "", DirName(dir)});
  }
  void Rename(const std::string& from, const std::string& to) override {
    Op("rename", from);
    std::optional<std::string> replaced;
    if (posix_.Stat(to).kind == FileKind::kFile) replaced = ReadBytes(to);
    posix_.Rename(from, to);
    std::lock_guard<std::mutex> lock(mu_);
    if (files_.count(from)) {
      files_[to] = files_[from];
      files_.erase(from);
    }
    pending_.push_back({Pending::kRename, from, to, DirName(to), std::move(replaced)});
  }
  bool Exchange(const std::string& a, const std::string& b) override {
    Op("exchange", a);
    if (!posix_.Exchange(a, b)) return false;
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back({Pending::kExchange, a, b, DirName(b)});
    return true;
  }
  void SyncDir(const std::string& dir) override {
    Op("syncdir", dir);
    posix_.SyncDir(dir);
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](const Pending& p) { return p.dir == dir; }),
                   pending_.end());
  }
  void RemoveFile(const std::string& path) override {
    Op("remove", path);
    posix_.RemoveFile(path);
  }
  void RemoveAll(const std::string& path) override {
    Op("remove", path);
    posix_.RemoveAll(path);
  }

 private:
  struct Tracked {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  struct Pending {
    enum Kind { kCreate, kMkdir, kRename, kExchange } kind;
    std::string a, b;
    std::string dir;  // the directory whose fsync makes it durable
    std::optional<std::string> replaced = std::nullopt;  // kRename: the bytes of the file `b` replaced
  };

  class File final : public WritableFile {
   public:
    File(FaultEnv* env, std::unique_ptr<WritableFile> f, std::string path)
        : env_(env), f_(std::move(f)), path_(std::move(path)) {}
    void Append(const void* data, size_t bytes) override {
      env_->Op("append", path_);
      size_t ok = bytes;
      int err = 0;
      if (env_->fail_after_bytes >= 0 && Contains(path_, env_->fail_path)) {
        const uint64_t room = static_cast<uint64_t>(env_->fail_after_bytes) > written_
                                  ? static_cast<uint64_t>(env_->fail_after_bytes) - written_
                                  : 0;
        if (room < bytes) {
          ok = static_cast<size_t>(room);
          err = env_->fail_errno;
        }
      }
      if (ok > 0) f_->Append(data, ok);
      written_ += ok;
      env_->Grow(path_, ok);
      if (err) ZR_THROW(IoError, "{}", ErrnoMessage(Format("write to {}", path_), err));
    }
    void Sync() override {
      env_->Op("sync", path_);
      f_->Sync();
      env_->Synced(path_);
    }
    void Close() override {
      env_->Op("close", path_);
      f_->Close();
    }
    const std::string& path() const override { return path_; }

   private:
    FaultEnv* env_;
    std::unique_ptr<WritableFile> f_;
    std::string path_;
    uint64_t written_ = 0;
  };

  class ReadFile final : public ReadableFile {
   public:
    ReadFile(FaultEnv* env, std::unique_ptr<ReadableFile> f) : env_(env), f_(std::move(f)) {}
    uint64_t size() const override { return f_->size(); }
    void ReadAt(uint64_t offset, void* dst, size_t bytes) const override {
      {
        std::lock_guard<std::mutex> lock(mu_);
        read_bytes_ += bytes;
        const bool over = env_->fail_read_after_bytes >= 0 && read_bytes_ > static_cast<uint64_t>(env_->fail_read_after_bytes);
        const bool again = env_->fail_reread && !offsets_.insert(offset).second;
        if (over || again) {
          ZR_THROW(IoError, "{}", ErrnoMessage(Format("read of {} bytes at {} of {}", bytes, offset, path()), EIO));
        }
      }
      f_->ReadAt(offset, dst, bytes);
    }
    const std::string& path() const override { return f_->path(); }

   private:
    FaultEnv* env_;
    std::unique_ptr<ReadableFile> f_;
    mutable std::mutex mu_;
    mutable uint64_t read_bytes_ = 0;
    mutable std::set<uint64_t> offsets_;
  };

  void CheckCrashed() {
    std::lock_guard<std::mutex> lock(mu_);
    if (crashed_) throw SimulatedCrash();
  }
  void Op(const char* name, const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    if (crashed_ || (crash_at_op >= 0 && ops_ >= crash_at_op)) {
      crashed_ = true;
      throw SimulatedCrash();
    }
    ++ops_;
    if (fail_op && fail_op(name, path)) {
      fail_op = nullptr;
      ZR_THROW(IoError, "{}", ErrnoMessage(Format("{} of {}", name, path), fail_errno));
    }
  }
  void Grow(const std::string& path, uint64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    files_[path].size += n;
  }
  void Synced(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    files_[path].synced = files_[path].size;
  }

  CheckpointEnv& posix_ = CheckpointEnv::Posix();
  mutable std::mutex mu_;
  int64_t ops_ = 0;
  bool crashed_ = false;
  std::map<std::string, Tracked> files_;
  std::vector<Pending> pending_;
};

}  // namespace ckpttest

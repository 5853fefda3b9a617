// Opening, reading (through the reshard planner), verifying and matching training checkpoints.
#include "zerorun/runtime/checkpoint_reader.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "zerorun/core/error.h"
#include "zerorun/runtime/checkpoint_writer.h"
#include "zerorun/runtime/safetensors.h"

namespace zerorun::runtime {

namespace {

constexpr size_t kMaxProblemsShown = 20;

CheckpointEnv& EnvOr(CheckpointEnv* env) { return env ? *env : CheckpointEnv::Posix(); }

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string JoinProblems(const std::vector<std::string>& problems) {
  std::string out;
  for (size_t i = 0; i < problems.size() && i < kMaxProblemsShown; ++i) out += "\n  " + problems[i];
  if (problems.size() > kMaxProblemsShown) out += Format("\n  ... and {} more", problems.size() - kMaxProblemsShown);
  return out;
}

std::string ShardPath(const std::string& dir, int rank) { return JoinPath(dir, CheckpointShardFile(rank)); }

// True for the first bytes of a torch.save file: a zip archive (torch >= 1.6) or a raw pickle.
bool HasTorchMagic(CheckpointEnv& env, const std::string& path) {
  try {
    std::unique_ptr<ReadableFile> f = env.NewReadableFile(path);
    if (f->size() < 4) return false;
    unsigned char m[4];
    f->ReadAt(0, m, 4);
    if (m[0] == 'P' && m[1] == 'K' && m[2] == 3 && m[3] == 4) return true;
    return m[0] == 0x80 && m[1] >= 2 && m[1] <= 5;
  } catch (const Error&) {
    return false;
  }
}

std::string TorchMessage(const std::string& path, const std::string& found) {
  return Format(
      "{} is a DeepSpeed/PyTorch checkpoint ({}): zerorun does not read torch pickles. Convert it with "
      "DeepSpeed: `python zero_to_fp32.py <checkpoint_dir> <output_dir> --safe_serialization` (DeepSpeed "
      "saves that script in each checkpoint directory) writes model.safetensors; load it into the model with "
      "runtime::LoadSafetensorsIntoModel (the weights only, as load_module_only: optimizer state starts fresh)",
      path, found);
}

}  // namespace

// ---- finding checkpoints ------------------------------------------------------------------------

std::string DescribeTorchCheckpoint(const std::string& path, CheckpointEnv* env_in) {
  CheckpointEnv& env = EnvOr(env_in);
  FileStat st = env.Stat(path);
  if (st.kind == FileKind::kFile) {
    if (HasTorchMagic(env, path)) return TorchMessage(path, "a torch.save file");
    return "";
  }
  if (st.kind != FileKind::kDirectory) return "";
  for (const std::string& name : env.ListDir(path)) {
    if (EndsWith(name, ".pt") || name == "zero_to_fp32.py") return TorchMessage(path, "it holds " + name);
  }
  return "";
}

std::optional<std::string> ReadLatestCheckpointTag(const std::string& save_dir, CheckpointEnv* env_in) {
  CheckpointEnv& env = EnvOr(env_in);
  FileStat st = env.Stat(save_dir);
  if (st.kind == FileKind::kMissing) return std::nullopt;
  if (st.kind != FileKind::kDirectory) {
    ZR_THROW(CheckpointError, "checkpoint directory {} is a file, not a directory", save_dir);
  }
  const std::string path = JoinPath(save_dir, kCheckpointLatestFile);
  if (env.Stat(path).kind == FileKind::kMissing) return std::nullopt;
  std::string tag = env.ReadFileToString(path);
  while (!tag.empty() && (tag.back() == '\n' || tag.back() == '\r' || tag.back() == ' ' || tag.back() == '\t')) {
    tag.pop_back();
  }
  try {
    ValidateCheckpointTag(tag);
  } catch (const InvalidArgument& e) {
    ZR_THROW(CheckpointError, "{} does not hold a usable tag: {}", path, e.what());
  }
  return tag;
}

std::vector<std::string> ListCheckpointTags(const std::string& save_dir, CheckpointEnv* env_in) {
  CheckpointEnv& env = EnvOr(env_in);
  FileStat st = env.Stat(save_dir);
  if (st.kind == FileKind::kMissing) ZR_THROW(CheckpointError, "checkpoint directory {} does not exist", save_dir);
  if (st.kind != FileKind::kDirectory) {
    ZR_THROW(CheckpointError, "checkpoint directory {} is a file, not a directory", save_dir);
  }
  std::vector<std::string> tags;
  for (const std::string& name : env.ListDir(save_dir)) {
    if (name.empty() || name[0] == '.' || IsCheckpointTemporary(name)) continue;
    const std::string dir = JoinPath(save_dir, name);
    if (env.Stat(dir).kind == FileKind::kDirectory &&
        env.Stat(JoinPath(dir, kCheckpointManifestFile)).kind == FileKind::kFile) {
      tags.push_back(name);
    }
  }
  return tags;
}

std::optional<std::string> ResolveCheckpointDir(const std::string& load_dir, const std::string& tag,
                                                CheckpointEnv* env_in) {
  CheckpointEnv& env = EnvOr(env_in);
  FileStat st = env.Stat(load_dir);
  if (st.kind == FileKind::kMissing) {
    if (tag.empty()) return std::nullopt;
    ZR_THROW(CheckpointError, "checkpoint directory {} does not exist", load_dir);
  }
  if (st.kind != FileKind::kDirectory) {
    std::string torch = DescribeTorchCheckpoint(load_dir, &env);
    if (!torch.empty()) throw CheckpointError(torch);
    ZR_THROW(CheckpointError, "checkpoint directory {} is a file, not a directory", load_dir);
  }
  std::string use = tag;
  if (use.empty()) {
    std::optional<std::string> latest = ReadLatestCheckpointTag(load_dir, &env);
    if (!latest) {
      // The checkpoint directory itself, or a DeepSpeed save_dir without `latest`.
      if (env.Stat(JoinPath(load_dir, kCheckpointManifestFile)).kind == FileKind::kFile) return load_dir;
      std::string torch = DescribeTorchCheckpoint(load_dir, &env);
      if (!torch.empty()) throw CheckpointError(torch);
      return std::nullopt;
    }
    use = *latest;
  } else {
    ValidateCheckpointTag(use);
  }
  const std::string dir = JoinPath(load_dir, use);
  if (env.Stat(dir).kind == FileKind::kMissing) {
    std::vector<std::string> tags = ListCheckpointTags(load_dir, &env);
    std::string list;
    for (const std::string& t : tags) list += (list.empty() ? "" : ", ") + t;
    ZR_THROW(CheckpointError, "checkpoint {} does not exist{}; checkpoints in {}: {}", dir,
             tag.empty() ? " (named by latest)" : "", load_dir, list.empty() ? "none" : list);
  }
  return dir;
}

// ---- the reader ---------------------------------------------------------------------------------

struct CheckpointReader::SlotChunks {
  const CheckpointTensor* tensor = nullptr;
  const CheckpointSlot* slot = nullptr;
  PlanTensor plan;
  std::vector<std::pair<int, size_t>> refs;  // plan.chunks[i]: (rank, index in ranks_[rank].chunks)
};

CheckpointReader::CheckpointReader(std::string dir, CheckpointEnv* env) : dir_(std::move(dir)), env_(&EnvOr(env)) {
  std::vector<std::string> problems;
  Open(&problems);
  if (problems.size() == 1) throw CheckpointError(problems[0]);
  if (!problems.empty()) ZR_THROW(CheckpointError, "checkpoint {} cannot be loaded:{}", dir_, JoinProblems(problems));
}

CheckpointReader::CheckpointReader(std::string dir, CheckpointEnv* env, std::vector<std::string>* problems)
    : dir_(std::move(dir)), env_(&EnvOr(env)) {
  Open(problems);
}

CheckpointReader::~CheckpointReader() = default;

void CheckpointReader::Open(std::vector<std::string>* problems) {
  CheckpointEnv& env = *env_;
  FileStat st = env.Stat(dir_);
  if (st.kind == FileKind::kMissing) {
    problems->push_back(Format("checkpoint directory {} does not exist", dir_));
    return;
  }
  if (st.kind != FileKind::kDirectory) {
    std::string torch = DescribeTorchCheckpoint(dir_, &env);
    problems->push_back(torch.empty() ? Format("checkpoint directory {} is a file, not a directory", dir_) : torch);
    return;
  }
  const std::string manifest_path = JoinPath(dir_, kCheckpointManifestFile);
  if (env.Stat(manifest_path).kind != FileKind::kFile) {
    std::string torch = DescribeTorchCheckpoint(dir_, &env);
    problems->push_back(!torch.empty() ? torch
                                       : Format("{} has no {}: not a zerorun checkpoint (an interrupted save never "
                                                "leaves a directory under its tag)", dir_, kCheckpointManifestFile));
    return;
  }
  try {
    manifest_ = CheckpointManifestFromJson(env.ReadFileToString(manifest_path), manifest_path);
  } catch (const CheckpointError& e) {
    problems->push_back(e.what());
    return;
  }
  const CheckpointManifest& m = manifest_;

  // Every rank's index and shard.
  ranks_.resize(static_cast<size_t>(m.world_size));
  std::vector<bool> usable(static_cast<size_t>(m.world_size), false);
  std::vector<std::string> missing;
  std::vector<int> missing_ranks;
  for (int r = 0; r < m.world_size; ++r) {
    const std::string index_path = JoinPath(dir_, CheckpointIndexFile(r));
    const std::string shard_path = ShardPath(dir_, r);
    FileStat ist = env.Stat(index_path);
    FileStat sst = env.Stat(shard_path);
    if (ist.kind != FileKind::kFile || sst.kind != FileKind::kFile) {
      missing_ranks.push_back(r);
      if (ist.kind != FileKind::kFile) missing.push_back(CheckpointIndexFile(r));
      if (sst.kind != FileKind::kFile) missing.push_back(CheckpointShardFile(r));
      continue;
    }
    CheckpointRankIndex& x = ranks_[static_cast<size_t>(r)];
    try {
      x = CheckpointRankIndexFromJson(env.ReadFileToString(index_path), index_path);
    } catch (const CheckpointError& e) {
      problems->push_back(e.what());
      continue;
    }
    if (x.tag != m.tag || x.save_id != m.save_id || x.world_size != m.world_size || x.rank != r) {
      problems->push_back(Format("{} belongs to another save (tag '{}', save id {}, rank {} of {}; the manifest: "
                                 "tag '{}', save id {}, world size {})", index_path, x.tag, x.save_id, x.rank,
                                 x.world_size, m.tag, m.save_id, m.world_size));
      continue;
    }
    if (x.shard != CheckpointShardFile(r)) {
      problems->push_back(Format("{}: shard is \"{}\", expected \"{}\"", index_path, x.shard, CheckpointShardFile(r)));
      continue;
    }
    if (sst.bytes != x.shard_bytes) {
      problems->push_back(Format("{} (rank {}) is {} bytes but its index records {}: {}", shard_path, r, sst.bytes,
                                 x.shard_bytes, sst.bytes < x.shard_bytes ? "truncated shard" : "the shard was changed"));
      continue;
    }
    usable[static_cast<size_t>(r)] = true;
  }
  if (!missing_ranks.empty()) {
    std::string ranks;
    for (int r : missing_ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    std::string files;
    for (const std::string& f : missing) files += (files.empty() ? "" : ", ") + f;
    problems->push_back(Format("checkpoint {} is incomplete: the files of rank{} {} are missing (world size {}): {}",
                               dir_, missing_ranks.size() > 1 ? "s" : "", ranks, m.world_size, files));
  }

  // Chunks by tensor slot.
  for (const CheckpointTensor& t : m.tensors) {
    for (const CheckpointSlot& s : t.slots) {
      slot_index_[{t.name, s.name}] = slots_.size();
      SlotChunks sc;
      sc.tensor = &t;
      sc.slot = &s;
      sc.plan.name = Format("'{}' ({})", t.name, s.name);
      sc.plan.numel = t.numel();
      sc.plan.elem_bytes = DTypeSize(s.dtype);
      slots_.push_back(std::move(sc));
    }
  }
  for (int r = 0; r < m.world_size; ++r) {
    if (!usable[static_cast<size_t>(r)]) continue;
    const CheckpointRankIndex& x = ranks_[static_cast<size_t>(r)];
    const std::string index_path = JoinPath(dir_, CheckpointIndexFile(r));
    for (size_t i = 0; i < x.chunks.size(); ++i) {
      const CheckpointChunk& c = x.chunks[i];
      auto it = slot_index_.find(std::pair{c.tensor, c.slot});
      if (it == slot_index_.end()) {
        problems->push_back(Format("{}: chunk {} is of tensor '{}' slot '{}', which the manifest does not have",
                                   index_path, i, c.tensor, c.slot));
        continue;
      }
      SlotChunks& sc = slots_[it->second];
      const uint64_t bytes = static_cast<uint64_t>(c.numel) * sc.plan.elem_bytes;
      const uint64_t blocks = (bytes + m.checksum_block_bytes - 1) / m.checksum_block_bytes;
      if (c.data_end - c.data_begin != bytes || c.hashes.size() != blocks) {
        problems->push_back(Format("{}: chunk {} ('{}' {} [{}, {})) spans {} bytes with {} checksums; {} elements of "
                                   "{} need {} bytes and {} checksums", index_path, i, c.tensor, c.slot, c.offset,
                                   c.offset + c.numel, c.data_end - c.data_begin, c.hashes.size(), c.numel,
                                   DTypeName(sc.slot->dtype), bytes, blocks));
        continue;
      }
      sc.plan.chunks.push_back({r, c.offset, c.numel, x.data_begin + c.data_begin});
      sc.refs.emplace_back(r, i);
    }
  }
  for (const SlotChunks& sc : slots_) plans_.push_back(sc.plan);
  if (!problems->empty()) return;  // coverage would only repeat what is missing
  for (const SlotChunks& sc : slots_) {
    std::string cov = CheckChunkCoverage(sc.plan);
    if (!cov.empty()) problems->push_back(Format("checkpoint {}: {}", dir_, cov));
  }
}

const SafetensorsReader& CheckpointReader::Shard(int rank) {
  auto it = shards_.find(rank);
  if (it != shards_.end()) return *it->second;
  const CheckpointRankIndex& x = ranks_.at(static_cast<size_t>(rank));
  auto reader = std::make_unique<SafetensorsReader>(ShardPath(dir_, rank), env_, direct_reads_);
  const std::string& path = reader->path();
  if (reader->file_bytes() != x.shard_bytes || reader->data_begin() != x.data_begin ||
      reader->tensors().size() != x.chunks.size()) {
    ZR_THROW(CheckpointError, "{} (rank {}): {} bytes, data at {}, {} tensors; its index records {} bytes, data at {}, "
             "{} chunks", path, rank, reader->file_bytes(), reader->data_begin(), reader->tensors().size(),
             x.shard_bytes, x.data_begin, x.chunks.size());
  }
  for (const CheckpointChunk& c : x.chunks) {
    const SafetensorsTensorInfo* info = reader->Find(c.key);
    const CheckpointSlot* slot = manifest_.FindTensor(c.tensor)->FindSlot(c.slot);
    if (!info || info->dtype != slot->dtype || info->shape != Shape{c.numel} || info->begin != c.data_begin ||
        info->end != c.data_end) {
      ZR_THROW(CheckpointError, "{} (rank {}): header entry '{}' does not match the rank's index (tensor '{}' slot "
               "'{}', {} {} elements at [{}, {}))", path, rank, c.key, c.tensor, c.slot, DTypeName(slot->dtype),
               c.numel, c.data_begin, c.data_end);
    }
  }
  ++stats_.shards_opened;
  return *shards_.emplace(rank, std::move(reader)).first->second;
}

void CheckpointReader::ReadBlocks(int rank, size_t chunk, DType stored, uint64_t block_begin, uint64_t block_end,
                                  uint64_t want_lo, uint64_t want_hi, char* out, DType out_dtype, bool hash,
                                  std::vector<char>& staging, CheckpointReadStats& stats) const {
  const CheckpointChunk& c = ranks_.at(static_cast<size_t>(rank)).chunks.at(chunk);
  const SafetensorsReader& shard = *shards_.at(rank);
  const uint64_t block = manifest_.checksum_block_bytes;
  const uint64_t chunk_bytes = c.data_end - c.data_begin;
  const size_t in_size = DTypeSize(stored);
  const size_t out_size = DTypeSize(out_dtype);
  for (uint64_t k = block_begin; k < block_end; ++k) {
    const uint64_t lo = k * block;
    const uint64_t hi = std::min(lo + block, chunk_bytes);
    const uint64_t a = std::max(lo, want_lo);
    const uint64_t b = std::min(hi, want_hi);
    // A block wholly wanted, stored as wanted, is read straight into the destination.
    const bool direct = out != nullptr && stored == out_dtype && a == lo && b == hi;
    char* buf = direct ? out + (lo - want_lo) : nullptr;
    if (!direct) {
      staging.resize(static_cast<size_t>(block));
      buf = staging.data();
    }
    shard.ReadData(c.data_begin + lo, buf, static_cast<size_t>(hi - lo));
    stats.bytes_read += hi - lo;
    if (hash) {
      ++stats.blocks_verified;
      const uint64_t h = Xxh3(buf, static_cast<size_t>(hi - lo));
      if (h != c.hashes[k]) {
        ZR_THROW(CheckpointError, "{} (rank {}): checksum mismatch in tensor '{}' slot '{}' (the chunk of elements [{}, "
                 "{})), block {} of {} = file bytes [{}, {}): expected xxh3 {}, computed {}: the shard is corrupt; "
                 "restore it or load an earlier checkpoint", shard.path(), rank, c.tensor, c.slot, c.offset,
                 c.offset + c.numel, k, c.hashes.size(), shard.data_begin() + c.data_begin + lo,
                 shard.data_begin() + c.data_begin + hi, HashToHex(c.hashes[k]), HashToHex(h));
      }
    }
    if (direct || out == nullptr) continue;
    const char* src = buf + (a - lo);
    char* dst = out + (a - want_lo) / in_size * out_size;
    if (stored == out_dtype) {
      std::memcpy(dst, src, static_cast<size_t>(b - a));
    } else {
      Convert(src, stored, dst, out_dtype, static_cast<size_t>((b - a) / in_size));
    }
  }
}

void CheckpointReader::Read(const std::vector<CheckpointReadRequest>& requests, bool verified) {
  Run(requests, verified ? Mode::kReadVerified : Mode::kRead);
}

void CheckpointReader::Verify(const std::vector<CheckpointReadRequest>& requests) { Run(requests, Mode::kVerify); }

void CheckpointReader::Check(const std::vector<CheckpointReadRequest>& requests) { Run(requests, Mode::kCheck); }

void CheckpointReader::Run(const std::vector<CheckpointReadRequest>& requests, Mode mode) {
  std::vector<PlanWant> wants;
  wants.reserve(requests.size());
  for (const CheckpointReadRequest& rq : requests) {
    auto it = slot_index_.find(std::pair{rq.tensor, rq.slot});
    if (it == slot_index_.end()) {
      const CheckpointTensor* t = manifest_.FindTensor(rq.tensor);
      if (!t) ZR_THROW(CheckpointError, "checkpoint {} has no tensor '{}'", dir_, rq.tensor);
      std::string saved;
      for (const CheckpointSlot& s : t->slots) saved += (saved.empty() ? "" : ", ") + s.name;
      ZR_THROW(CheckpointError, "checkpoint {}: tensor '{}' has no slot '{}' (saved: {})", dir_, rq.tensor, rq.slot,
               saved.empty() ? "none" : saved);
    }
    const DType stored = slots_[it->second].slot->dtype;
    if (stored != rq.dst_dtype && (!IsFloating(stored) || !IsFloating(rq.dst_dtype))) {
      ZR_THROW(CheckpointError, "checkpoint {}: tensor '{}' slot '{}' is stored as {} and cannot be read as {}", dir_,
               rq.tensor, rq.slot, DTypeName(stored), DTypeName(rq.dst_dtype));
    }
    if (mode != Mode::kVerify && mode != Mode::kCheck && rq.numel > 0 && !rq.dst) ZR_THROW(InvalidArgument, "checkpoint read of '{}' ({}): no destination", rq.tensor, rq.slot);
    wants.push_back({it->second, rq.offset, rq.numel, 0});
  }
  // Each planned read, cut into pieces of at most kBlocksPerItem checksum blocks: the unit a thread
  // takes (pieces of one read write disjoint parts of its destination).
  constexpr uint64_t kBlocksPerItem = 2;
  struct Item {
    int rank;
    size_t chunk;
    DType stored;
    uint64_t block_begin, block_end, want_lo, want_hi;
    char* out;
    DType out_dtype;
  };
  std::vector<Item> items;
  uint64_t total = 0;
  for (const PlanRead& r : PlanReads(plans_, wants, manifest_.checksum_block_bytes)) {
    const SlotChunks& sc = slots_[r.tensor];
    const CheckpointReadRequest& rq = requests[r.want];
    const auto [rank, chunk] = sc.refs[r.chunk];
    Shard(rank);  // opened (and its header checked) here, on this thread
    if (mode == Mode::kCheck) continue;
    const uint64_t want_lo = static_cast<uint64_t>(r.offset - sc.plan.chunks[r.chunk].offset) * sc.plan.elem_bytes;
    char* out = mode == Mode::kVerify
                    ? nullptr
                    : static_cast<char*>(rq.dst) + static_cast<size_t>(r.dst_offset) * DTypeSize(rq.dst_dtype);
    for (uint64_t k = r.block_begin; k < r.block_end; k += kBlocksPerItem) {
      items.push_back({rank, chunk, sc.slot->dtype, k, std::min(r.block_end, k + kBlocksPerItem), want_lo,
                       want_lo + r.bytes, out, rq.dst_dtype});
    }
    total += r.bytes;
  }
  const bool hash = mode != Mode::kReadVerified;
  const auto run = [&](const Item& it, std::vector<char>& staging, CheckpointReadStats& stats) {
    ReadBlocks(it.rank, it.chunk, it.stored, it.block_begin, it.block_end, it.want_lo, it.want_hi, it.out,
               it.out_dtype, hash, staging, stats);
  };
  // Buffered reads mostly copy out of the page cache: at most one thread per CPU. Direct reads mostly
  // wait for the disk, so kReadThreads keep more of them in flight while others copy and hash (a
  // one-pass load of a 513 MB shard on 2 CPUs: median 0.266 s with 4 threads against 0.305 s with
  // 2, 5 alternating pairs).
  const size_t cap = direct_reads_ ? static_cast<size_t>(kReadThreads) : std::max(1u, std::thread::hardware_concurrency());
  const int threads = static_cast<int>(std::min<size_t>({static_cast<size_t>(kReadThreads), items.size(), cap}));
  if (total < parallel_bytes_ || threads < 2) {
    for (const Item& it : items) run(it, staging_, stats_);
    return;
  }
  // Threads take items in order; the first failure (in item order) is what the call reports, and the
  // others stop taking new items once one has failed.
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  size_t first_failed = items.size();
  std::exception_ptr first_error;
  std::vector<CheckpointReadStats> stats(static_cast<size_t>(threads));
  const auto work = [&](int t) {
    std::vector<char> own;
    std::vector<char>& staging = t == 0 ? staging_ : own;
    for (size_t i = next++; i < items.size() && !failed.load(std::memory_order_relaxed); i = next++) {
      try {
        run(items[i], staging, stats[static_cast<size_t>(t)]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < first_failed) first_failed = i, first_error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  for (const CheckpointReadStats& st : stats) {
    stats_.bytes_read += st.bytes_read;
    stats_.blocks_verified += st.blocks_verified;
  }
  if (first_error) std::rethrow_exception(first_error);
}

Tensor CheckpointReader::ReadTensor(std::string_view tensor, std::string_view slot, std::optional<DType> dtype) {
  const CheckpointTensor* t = manifest_.FindTensor(tensor);
  if (!t) ZR_THROW(CheckpointError, "checkpoint {} has no tensor '{}'", dir_, tensor);
  const CheckpointSlot* s = t->FindSlot(slot);
  Tensor out = Tensor::Empty(t->shape, dtype.value_or(s ? s->dtype : DType::kF32));
  Read({{t->name, std::string(slot), 0, t->numel(), out.data(), out.dtype()}});
  return out;
}

// ---- verify -------------------------------------------------------------------------------------

CheckpointVerifyReport VerifyCheckpoint(const std::string& dir, CheckpointEnv* env) {
  CheckpointVerifyReport report;
  CheckpointReader reader(dir, env, &report.problems);
  report.ranks = static_cast<int>(reader.ranks_.size());
  const uint64_t block = reader.manifest_.checksum_block_bytes;
  std::vector<bool> bad_rank(reader.ranks_.size(), false);
  for (const CheckpointReader::SlotChunks& sc : reader.slots_) {
    for (const auto& [rank, chunk] : sc.refs) {
      if (bad_rank[static_cast<size_t>(rank)]) continue;
      try {
        reader.Shard(rank);
      } catch (const CheckpointError& e) {
        report.problems.push_back(e.what());
        bad_rank[static_cast<size_t>(rank)] = true;
        continue;
      }
      const CheckpointChunk& c = reader.ranks_[static_cast<size_t>(rank)].chunks[chunk];
      const uint64_t bytes = c.data_end - c.data_begin;
      try {
        for (uint64_t k = 0; k < c.hashes.size(); ++k) {
          const uint64_t lo = k * block;
          reader.ReadBlocks(rank, chunk, sc.slot->dtype, k, k + 1, lo, std::min(bytes, lo + block), nullptr,
                            sc.slot->dtype, true, reader.staging_, reader.stats_);
        }
        ++report.chunks;
        report.bytes_verified += bytes;
      } catch (const CheckpointError& e) {
        report.problems.push_back(e.what());
      }
    }
  }
  return report;
}

// ---- model match --------------------------------------------------------------------------------

void CheckCheckpointMatchesModel(const CheckpointManifest& manifest, const std::string& dir,
                                 const std::vector<CheckpointModelTensor>& model, bool strict) {
  std::vector<std::string> diffs;
  std::map<std::string, bool, std::less<>> in_model;
  for (const CheckpointModelTensor& t : model) {
    in_model[t.name] = true;
    const CheckpointTensor* c = manifest.FindTensor(t.name);
    if (!c) {
      if (strict) diffs.push_back(Format("'{}' is in the model but not in the checkpoint", t.name));
    } else if (c->shape != t.shape) {
      diffs.push_back(Format("'{}' has shape {} in the checkpoint and {} in the model", t.name, ShapeToString(c->shape),
                             ShapeToString(t.shape)));
    }
  }
  if (strict) {
    for (const CheckpointTensor& c : manifest.tensors) {
      if (!in_model.count(c.name)) diffs.push_back(Format("'{}' is in the checkpoint but not in the model", c.name));
    }
  }
  if (diffs.empty()) return;
  constexpr size_t kShown = 5;
  std::string text;
  for (size_t i = 0; i < diffs.size() && i < kShown; ++i) text += (i ? "; " : "") + diffs[i];
  if (diffs.size() > kShown) text += Format("; ... and {} more", diffs.size() - kShown);
  ZR_THROW(CheckpointError, "checkpoint {} does not match the model (saved from another model?): {}", dir, text);
}

}  // namespace zerorun::runtime

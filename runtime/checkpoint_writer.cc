// WriteCheckpoint: prepare (rank 0) → agree on arguments and coverage → every rank writes its shard
// and index into the staging directory → agree on success → rank 0 publishes → agree on the publish.
// See checkpoint_writer.h for the protocol and docs/checkpoint.md for the crash analysis.
#include "zerorun/runtime/checkpoint_writer.h"

#include <unistd.h>

#include <cctype>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/runtime/checkpoint_agree.h"
#include "zerorun/runtime/checkpoint_json.h"
#include "zerorun/runtime/safetensors.h"

namespace zerorun::runtime {

namespace {

constexpr const char* kStagingPrefix = ".zerorun-tmp.";
constexpr const char* kOldPrefix = ".zerorun-old.";
constexpr const char* kLatestTmpPrefix = "latest.tmp.";

// Errors travel between ranks as text; the first character says which exception to throw.
constexpr char kArgError = 'A';
constexpr char kIoError = 'I';

std::string NewSaveId() {
  std::random_device rd;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch());
  std::ostringstream os;
  os << std::hex << ::getpid() << '-' << ns.count() << '-' << rd();
  return os.str();
}

// Checks everything about this rank's call that needs no file system; "" when fine.
std::string CheckArguments(const CheckpointWriteOptions& o, const CheckpointContents& c) {
  try {
    if (o.save_dir.empty()) ZR_THROW(InvalidArgument, "save_dir must be a non-empty path");
    ValidateCheckpointTag(o.tag);
    if (o.checksum_block_bytes == 0 || o.checksum_block_bytes % 8 != 0) {
      ZR_THROW(InvalidArgument, "checksum_block_bytes {} must be a positive multiple of 8", o.checksum_block_bytes);
    }
    for (const auto& [json, what] : {std::pair{&c.manifest.state_json, "state"},
                                     std::pair{&c.manifest.client_state_json, "client_state"},
                                     std::pair{&c.manifest.config_json, "config"}}) {
      if (!ckpt_json::Parse(*json, what).IsObject()) ZR_THROW(InvalidArgument, "the {} JSON is not an object", what);
    }
    if (!c.fetch && !c.chunks.empty()) ZR_THROW(InvalidArgument, "CheckpointContents::fetch is not set");
    std::map<std::string, const CheckpointTensor*> tensors;
    for (const CheckpointTensor& t : c.manifest.tensors) {
      if (t.name.empty() || !tensors.emplace(t.name, &t).second) {
        ZR_THROW(InvalidArgument, "tensor name '{}' is empty or appears twice", t.name);
      }
    }
    std::map<std::string, bool> keys;
    for (const CheckpointChunkSpec& ch : c.chunks) {
      auto it = tensors.find(ch.tensor);
      if (it == tensors.end()) ZR_THROW(InvalidArgument, "chunk of unknown tensor '{}'", ch.tensor);
      if (!it->second->FindSlot(ch.slot)) {
        ZR_THROW(InvalidArgument, "chunk of tensor '{}' names slot '{}', which the tensor does not have", ch.tensor,
                 ch.slot);
      }
      const int64_t n = it->second->numel();
      if (ch.offset < 0 || ch.numel < 0 || ch.offset > n || ch.numel > n - ch.offset) {
        ZR_THROW(InvalidArgument, "chunk [{}, {}) of '{}' ({}) is outside its {} elements", ch.offset,
                 ch.offset + ch.numel, ch.tensor, ch.slot, n);
      }
      if (!keys.emplace(CheckpointChunkKey(ch.slot, ch.tensor, ch.offset), true).second) {
        ZR_THROW(InvalidArgument, "two chunks of '{}' ({}) start at element {}", ch.tensor, ch.slot, ch.offset);
      }
    }
  } catch (const Error& e) {
    return std::string(1, kArgError) + e.what();
  }
  return "";
}

// Rank 0, step 1: save_dir exists, leftovers are gone, the staging directory is there and durable.
void Prepare(CheckpointEnv& env, const std::string& save_dir, const std::string& tag, const std::string& staging) {
  env.CreateDirs(save_dir);
  FileStat st = env.Stat(JoinPath(save_dir, tag));
  if (st.kind != FileKind::kMissing && st.kind != FileKind::kDirectory) {
    ZR_THROW(IoError, "cannot save checkpoint {}: it exists and is a file, not a checkpoint directory",
             JoinPath(save_dir, tag));
  }
  for (const std::string& name : env.ListDir(save_dir)) {
    if (IsCheckpointTemporary(name)) {
      ZR_INFO("checkpoint: removing {} left by an interrupted save", JoinPath(save_dir, name));
      env.RemoveAll(JoinPath(save_dir, name));
    }
  }
  env.CreateDir(staging);
  env.SyncDir(save_dir);
}

// Step 3: this rank's shard and index (and rank 0's manifest) into the staging directory.
uint64_t WriteRankFiles(CheckpointEnv& env, const std::string& staging, int rank, const CheckpointManifest& manifest,
                        const CheckpointContents& c) {
  std::vector<SafetensorsWriter::Entry> entries;
  entries.reserve(c.chunks.size());
  for (const CheckpointChunkSpec& ch : c.chunks) {
    const CheckpointSlot* slot = manifest.FindTensor(ch.tensor)->FindSlot(ch.slot);
    entries.push_back({CheckpointChunkKey(ch.slot, ch.tensor, ch.offset), slot->dtype, Shape{ch.numel}});
  }
  const std::string shard = CheckpointShardFile(rank);
  SafetensorsWriterOptions wo;
  wo.env = &env;
  SafetensorsWriter writer(JoinPath(staging, shard), std::move(entries),
                           {{"format", "zerorun-checkpoint"}, {"tag", manifest.tag}, {"rank", std::to_string(rank)}},
                           wo);
  CheckpointRankIndex index;
  index.tag = manifest.tag;
  index.save_id = manifest.save_id;
  index.rank = rank;
  index.world_size = manifest.world_size;
  index.shard = shard;
  for (size_t i = 0; i < c.chunks.size(); ++i) {
    const CheckpointChunkSpec& ch = c.chunks[i];
    Tensor t = c.fetch(i);
    const SafetensorsTensorInfo& info = writer.entries()[i];
    if (!t.defined() || !t.device().is_cpu() || t.dtype() != info.dtype || t.numel() != ch.numel) {
      ZR_THROW(InvalidArgument, "fetch({}) for '{}' ({}) returned {}, expected a CPU {} tensor of {} elements", i,
               ch.tensor, ch.slot, t.defined() ? t.ToString() : "an undefined tensor", DTypeName(info.dtype), ch.numel);
    }
    CheckpointChunk out;
    out.tensor = ch.tensor;
    out.slot = ch.slot;
    out.offset = ch.offset;
    out.numel = ch.numel;
    out.key = info.name;
    out.data_begin = info.begin;
    out.data_end = info.end;
    out.hashes = HashBlocks(t.data(), t.nbytes(), manifest.checksum_block_bytes);
    writer.Append(t);
    index.chunks.push_back(std::move(out));
  }
  writer.Commit();
  const uint64_t data_bytes = writer.entries().empty() ? 0 : writer.entries().back().end;
  index.shard_bytes = writer.file_bytes();
  index.data_begin = writer.file_bytes() - data_bytes;
  const std::string index_json = CheckpointRankIndexToJson(index);
  env.WriteFileAtomic(JoinPath(staging, CheckpointIndexFile(rank)), index_json, manifest.save_id);
  uint64_t bytes = writer.file_bytes() + index_json.size();
  if (rank == 0) {
    const std::string manifest_json = CheckpointManifestToJson(manifest);
    env.WriteFileAtomic(JoinPath(staging, kCheckpointManifestFile), manifest_json, manifest.save_id);
    bytes += manifest_json.size();
  }
  return bytes;
}

// Rank 0, step 4: the staging directory becomes <save_dir>/<tag>, then `latest` names it.
void Publish(CheckpointEnv& env, const std::string& save_dir, const std::string& staging, const std::string& final_dir,
             const std::string& save_id, bool save_latest, const std::string& tag) {
  if (env.Stat(final_dir).kind == FileKind::kMissing) {
    env.Rename(staging, final_dir);
    env.SyncDir(save_dir);
  } else if (env.Exchange(staging, final_dir)) {
    env.SyncDir(save_dir);
    // `staging` now holds the replaced checkpoint.
    try {
      env.RemoveAll(staging);
    } catch (const Error& e) {
      ZR_WARN("checkpoint {}: could not remove the replaced copy ({}); the next save removes it", final_dir, e.what());
    }
  } else {
    // No RENAME_EXCHANGE on this file system: two renames, with a window in which the tag is missing.
    const std::string old = JoinPath(save_dir, kOldPrefix + tag + "." + save_id);
    env.Rename(final_dir, old);
    env.Rename(staging, final_dir);
    env.SyncDir(save_dir);
    try {
      env.RemoveAll(old);
    } catch (const Error& e) {
      ZR_WARN("checkpoint {}: could not remove the replaced copy {} ({})", final_dir, old, e.what());
    }
  }
  if (save_latest) {
    env.WriteFileAtomic(JoinPath(save_dir, kCheckpointLatestFile), tag, save_id);
  }
}

void RemoveQuietly(CheckpointEnv& env, const std::string& path) {
  try {
    env.RemoveAll(path);
  } catch (const Error& e) {
    ZR_WARN("checkpoint: could not remove {} ({}); the next save removes it", path, e.what());
  }
}

// Throws the agreed errors (the same on every rank).
[[noreturn]] void ThrowAgreed(const std::vector<std::string>& errors, const std::string& what) {
  bool io = false;
  std::vector<std::string> texts(errors.size());
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) continue;
    io = io || errors[r][0] == kIoError;
    texts[r] = errors[r].substr(1);
  }
  const std::string msg = Format("{}: {}", what, JoinRankErrors(texts));
  if (io) throw IoError(msg);
  throw InvalidArgument(msg);
}

}  // namespace

bool IsCheckpointTemporary(const std::string& name) {
  return name.rfind(kStagingPrefix, 0) == 0 || name.rfind(kOldPrefix, 0) == 0 || name.rfind(kLatestTmpPrefix, 0) == 0;
}

void RemoveCheckpoint(const std::string& save_dir, const std::string& tag, CheckpointEnv* env_in) {
  CheckpointEnv& env = env_in ? *env_in : CheckpointEnv::Posix();
  ValidateCheckpointTag(tag);
  const std::string dir = JoinPath(save_dir, tag);
  if (env.Stat(dir).kind == FileKind::kMissing) return;
  const std::string latest = JoinPath(save_dir, kCheckpointLatestFile);
  if (env.Stat(latest).kind == FileKind::kFile) {
    std::string named = env.ReadFileToString(latest);
    while (!named.empty() && std::isspace(static_cast<unsigned char>(named.back()))) named.pop_back();
    if (named == tag) ZR_THROW(InvalidArgument, "will not remove checkpoint {}: 'latest' names it", dir);
  }
  const std::string doomed = JoinPath(save_dir, kOldPrefix + tag + "." + NewSaveId());
  env.Rename(dir, doomed);
  env.SyncDir(save_dir);
  env.RemoveAll(doomed);
}

struct PendingCheckpointWrite {
  CheckpointEnv* env = nullptr;
  CheckpointWriteOptions options;
  std::string staging;
  CheckpointWriteResult result;
  CheckpointManifest manifest;
  std::vector<Tensor> data;  // the snapshot: a host copy of every chunk
  CheckpointContents contents;
  std::string error;         // phase 3's outcome (kIoError/kArgError + text), set by the thread
  std::thread thread;
  bool finished = false;
  ~PendingCheckpointWrite() {
    if (thread.joinable()) thread.join();
  }
};

namespace {

// Phases 4-5, shared by the synchronous and the asynchronous save.
CheckpointWriteResult PublishAgreed(comm::Communicator& comm, CheckpointEnv& env, const CheckpointWriteOptions& options,
                                    const std::string& staging, const std::string& save_id,
                                    CheckpointWriteResult result, const std::string& error) {
  const int rank = comm.rank();
  const int world = comm.size();
  const std::string& final_dir = result.dir;
  std::vector<std::string> errors = AgreeOnErrors(comm, error);
  for (const std::string& e : errors) {
    if (!e.empty()) {
      ThrowAgreed(errors, Format("checkpoint save to {} failed; nothing was published, the previous checkpoint "
                                 "and 'latest' are untouched", final_dir));
    }
  }
  std::string publish_error;
  if (rank == 0) {
    try {
      Publish(env, options.save_dir, staging, final_dir, save_id, options.save_latest, result.tag);
    } catch (const Error& e) {
      publish_error = e.what();
    }
  }
  publish_error = BroadcastString(comm, publish_error);
  if (!publish_error.empty()) {
    ZR_THROW(IoError, "checkpoint save to {}: every rank's files were written but rank 0 could not publish "
             "them: {}", final_dir, publish_error);
  }
  if (rank == 0) {
    ZR_INFO("saved checkpoint {} ({} ranks{})", final_dir, world, options.save_latest ? ", latest" : "");
  }
  return result;
}

CheckpointWriteResult WriteCheckpointImpl(comm::Communicator& comm, const CheckpointWriteOptions& options,
                                          const CheckpointContents& contents,
                                          std::shared_ptr<PendingCheckpointWrite>* async_out) {
  CheckpointEnv& env = options.env ? *options.env : CheckpointEnv::Posix();
  const int rank = comm.rank();
  const int world = comm.size();
  std::string error = CheckArguments(options, contents);

  // 1. Rank 0 prepares and tells everyone the tag and save id (or its error).
  std::string tag = options.tag;
  std::string save_id;
  std::string staging;  // set on rank 0 once the staging directory exists
  std::string plan;
  if (rank == 0) {
    if (error.empty()) {
      save_id = NewSaveId();
      const std::string path = JoinPath(options.save_dir, kStagingPrefix + tag + "." + save_id);
      try {
        Prepare(env, options.save_dir, tag, path);
        staging = path;
      } catch (const Error& e) {
        error = std::string(1, kIoError) + e.what();
      }
    }
    plan = error.empty() ? tag + "\n" + save_id : "";
  }
  plan = BroadcastString(comm, plan);
  bool root_ok = !plan.empty();
  if (root_ok && rank != 0) {
    size_t nl = plan.find('\n');
    tag = plan.substr(0, nl);
    save_id = plan.substr(nl + 1);
    staging = JoinPath(options.save_dir, kStagingPrefix + tag + "." + save_id);
    if (tag != options.tag && options.tag_validation != TagValidation::kIgnore) {
      const std::string text = Format("the checkpoint tag '{}' differs from rank 0's '{}'", options.tag, tag);
      if (options.tag_validation == TagValidation::kFail) {
        if (error.empty()) error = kArgError + text;
      } else {
        ZR_WARN("{}; saving under rank 0's tag (checkpoint.tag_validation is Warn)", text);
      }
    }
  }
  const std::string final_dir = JoinPath(options.save_dir, tag);
  try {
    // 2. Arguments and coverage, agreed: one all-reduce of [failed ranks, elements per tensor slot].
    const CheckpointManifest& m = contents.manifest;
    std::vector<int64_t> sums(1, error.empty() ? 0 : 1);
    std::map<std::pair<std::string, std::string>, size_t> slot_index;
    for (const CheckpointTensor& t : m.tensors) {
      for (const CheckpointSlot& s : t.slots) {
        slot_index[{t.name, s.name}] = sums.size();
        sums.push_back(0);
      }
    }
    if (error.empty()) {
      for (const CheckpointChunkSpec& ch : contents.chunks) sums[slot_index.at({ch.tensor, ch.slot})] += ch.numel;
    }
    int64_t slots = static_cast<int64_t>(sums.size());
    int64_t slots_max = slots;
    comm.AllReduce(&slots_max, 1, DType::kI64, comm::ReduceOp::kMax).Wait();
    if (slots_max != slots) {
      if (error.empty()) error = std::string(1, kArgError) + Format("the manifest has {} tensor slots on this rank "
                                                                    "and {} on another", slots - 1, slots_max - 1);
      sums.assign(static_cast<size_t>(slots_max), 0);
      sums[0] = 1;
    }
    comm.AllReduce(sums.data(), sums.size(), DType::kI64, comm::ReduceOp::kSum).Wait();
    if (sums[0] > 0 || !root_ok) {
      ThrowAgreed(AgreeOnErrors(comm, error), Format("checkpoint save to {} failed before writing", final_dir));
    }
    std::string coverage;
    for (const CheckpointTensor& t : m.tensors) {
      for (const CheckpointSlot& s : t.slots) {
        int64_t got = sums[slot_index.at({t.name, s.name})];
        if (got != t.numel() && coverage.size() < 400) {
          coverage += Format("{}'{}' ({}): the ranks' chunks hold {} elements, the tensor has {}",
                             coverage.empty() ? "" : "; ", t.name, s.name, got, t.numel());
        }
      }
    }
    if (!coverage.empty()) {
      ZR_THROW(InvalidArgument, "checkpoint save to {}: the chunks do not cover every tensor slot exactly: {}",
               final_dir, coverage);
    }

    // 3. Every rank writes its files.
    CheckpointManifest manifest = m;
    manifest.format_version = kCheckpointFormatVersion;
    manifest.tag = tag;
    manifest.save_id = save_id;
    manifest.world_size = world;
    manifest.checksum_block_bytes = options.checksum_block_bytes;
    CheckpointWriteResult result{final_dir, tag, 0};
    if (async_out) {
      // Snapshot every chunk on this thread (the caller may change the tensors as soon as we return),
      // then write the files on a background thread; FinishCheckpointWrite runs phases 4-5.
      auto pending = std::make_shared<PendingCheckpointWrite>();
      pending->env = &env;
      pending->options = options;
      pending->staging = staging;
      pending->result = result;
      pending->manifest = std::move(manifest);
      pending->manifest.save_id = save_id;
      // Every rank learns whether every snapshot was taken (e.g. out of memory on one rank), so that
      // none goes on to a background write the others will not finish.
      std::string snapshot_error;
      try {
        for (size_t i = 0; i < contents.chunks.size(); ++i) {
          Tensor t = contents.fetch(i);
          const bool copy = contents.fetch_is_copy && contents.fetch_is_copy(i);
          pending->data.push_back(copy ? std::move(t) : t.Clone(MemCategory::kOther));
        }
      } catch (const std::exception& e) {
        snapshot_error = std::string(1, kIoError) + e.what();
      }
      const std::vector<std::string> snapshot_errors = AgreeOnErrors(comm, snapshot_error);
      for (const std::string& e : snapshot_errors) {
        if (!e.empty()) {
          ThrowAgreed(snapshot_errors, Format("checkpoint save to {} failed copying what to write into host memory; "
                                              "nothing was written or published", final_dir));
        }
      }
      pending->contents.chunks = contents.chunks;
      PendingCheckpointWrite* p = pending.get();
      pending->contents.fetch = [p](size_t i) { return p->data[i]; };
      pending->thread = std::thread([p, rank] {
        try {
          p->result.bytes_written = WriteRankFiles(*p->env, p->staging, rank, p->manifest, p->contents);
        } catch (const InvalidArgument& e) {
          p->error = std::string(1, kArgError) + e.what();
        } catch (const std::exception& e) {  // IoError and anything else: a write that did not happen
          p->error = std::string(1, kIoError) + e.what();
        }
      });
      *async_out = std::move(pending);
      return result;
    }
    try {
      result.bytes_written = WriteRankFiles(env, staging, rank, manifest, contents);
    } catch (const InvalidArgument& e) {
      error = std::string(1, kArgError) + e.what();
    } catch (const Error& e) {
      error = std::string(1, kIoError) + e.what();
    }
    // 4-5. Rank 0 publishes once every rank's files are durable; everyone learns the outcome.
    return PublishAgreed(comm, env, options, staging, save_id, result, error);
  } catch (const CommError&) {
    throw;  // a peer is gone: leave the staging directory for the next save (its writers may still run)
  } catch (...) {
    if (rank == 0 && !staging.empty()) RemoveQuietly(env, staging);
    throw;
  }
}

}  // namespace

CheckpointWriteResult WriteCheckpoint(comm::Communicator& comm, const CheckpointWriteOptions& options,
                                      const CheckpointContents& contents) {
  return WriteCheckpointImpl(comm, options, contents, nullptr);
}

std::shared_ptr<PendingCheckpointWrite> StartCheckpointWrite(comm::Communicator& comm,
                                                             const CheckpointWriteOptions& options,
                                                             const CheckpointContents& contents) {
  std::shared_ptr<PendingCheckpointWrite> pending;
  WriteCheckpointImpl(comm, options, contents, &pending);
  return pending;
}

CheckpointWriteResult FinishCheckpointWrite(comm::Communicator& comm, PendingCheckpointWrite& pending) {
  ZR_CHECK(!pending.finished, "FinishCheckpointWrite: this save was already finished");
  if (pending.thread.joinable()) pending.thread.join();
  pending.finished = true;
  pending.data.clear();
  CheckpointEnv& env = *pending.env;
  try {
    return PublishAgreed(comm, env, pending.options, pending.staging, pending.manifest.save_id, pending.result,
                         pending.error);
  } catch (const CommError&) {
    throw;
  } catch (...) {
    if (comm.rank() == 0 && !pending.staging.empty()) RemoveQuietly(env, pending.staging);
    throw;
  }
}

}  // namespace zerorun::runtime

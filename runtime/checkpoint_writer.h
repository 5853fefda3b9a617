// WriteCheckpoint: the collective, crash-safe save of one checkpoint (format: checkpoint_manifest.h;
// protocol and guarantees: docs/checkpoint.md). Every rank streams its own chunks into its own shard
// file in parallel — nothing is gathered to rank 0 but a few bytes of status.
//
// Protocol (R0 = rank 0):
//   1. R0 creates save_dir, removes temporaries a crashed save left there, creates the staging
//      directory <save_dir>/.zerorun-tmp.<tag>.<save id> and broadcasts tag and save id.
//   2. One all-reduce checks every rank's arguments and that the chunks of all ranks together cover
//      every slot of every tensor once (by element count); on failure every rank throws.
//   3. Each rank writes rankNNNNN.safetensors and rankNNNNN.json into the staging directory (R0 also
//      manifest.json), each through a temporary name, fsynced, renamed, with the directory fsynced.
//   4. AgreeOnErrors: only when every rank's files are durable does R0 publish: it renames the
//      staging directory to <save_dir>/<tag> (an existing tag is swapped out atomically with
//      renameat2(RENAME_EXCHANGE) and then removed), fsyncs save_dir, and if save_latest writes
//      <save_dir>/latest (the tag, no newline; temporary + fsync + rename + fsync).
//   5. R0's publish status is broadcast: every rank returns, or every rank throws.
// A crash (kill -9 of any rank, power loss) at any moment leaves `latest` naming a complete checkpoint
// and every earlier checkpoint intact; what remains of the interrupted save is a staging directory,
// which loaders never look at and the next WriteCheckpoint removes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/tensor.h"
#include "zerorun/runtime/checkpoint_env.h"
#include "zerorun/runtime/checkpoint_manifest.h"
#include "zerorun/runtime/config/config_types.h"  // TagValidation (checkpoint.tag_validation)

namespace zerorun::runtime {

struct CheckpointWriteOptions {
  // The directory that holds the tags and `latest` (created when missing). Must be non-empty.
  std::string save_dir;
  // The checkpoint's name (ValidateCheckpointTag). Rank 0's is used on every rank; tag_validation
  // says what happens when another rank passes a different one.
  std::string tag;
  // Point <save_dir>/latest at this tag once it is complete.
  bool save_latest = true;
  // kFail: a rank whose tag differs from rank 0's fails the save (on every rank); kWarn: it logs a
  // warning and rank 0's tag is used; kIgnore: rank 0's tag is used silently.
  TagValidation tag_validation = TagValidation::kWarn;
  // Checksum block size (a positive multiple of 8).
  uint64_t checksum_block_bytes = kDefaultChecksumBlockBytes;
  // The file system (nullptr: CheckpointEnv::Posix()); tests inject faults here. Not owned.
  CheckpointEnv* env = nullptr;
};

// A range of one slot of one tensor that this rank writes.
struct CheckpointChunkSpec {
  std::string tensor;
  std::string slot;
  int64_t offset = 0;  // first element of the flattened slot
  int64_t numel = 0;
};

struct CheckpointContents {
  // The global description, the same on every rank (rank 0's is written): tensors and their slots,
  // zero_stage, model_dtype, optimizer, state / client state / config JSON objects. tag, save_id,
  // world_size and checksum_block_bytes are filled in by WriteCheckpoint.
  CheckpointManifest manifest;
  // This rank's chunks, in the order they are written.
  std::vector<CheckpointChunkSpec> chunks;
  // The data of chunks[i], called once per chunk in order: a CPU tensor of the slot's dtype holding
  // chunks[i].numel elements (any shape), valid until the next call. Lets a caller stream state that
  // is not resident (acquire a sub-group, hand it out, release it).
  std::function<Tensor(size_t i)> fetch;
  // Optional: true when fetch(i) returned a tensor that nothing else references or will change (a
  // fresh copy the caller made): an asynchronous save keeps it as its snapshot instead of cloning it
  // again. Unset: every chunk is cloned.
  std::function<bool(size_t i)> fetch_is_copy;
};

struct CheckpointWriteResult {
  std::string dir;             // <save_dir>/<tag>
  std::string tag;             // the tag used (rank 0's)
  uint64_t bytes_written = 0;  // this rank's files
};

// Collective: every rank of `comm` must call it. Throws, on every rank alike:
//   - InvalidArgument for a bad save_dir, tag, chunk (unknown tensor or slot, range outside the
//     tensor, wrong dtype or size from fetch), for chunks that do not cover every slot exactly, and
//     (kFail) differing tags — naming the rank and the tensor;
//   - IoError when any rank cannot write (ENOSPC, EIO, save_dir is a file, ...), naming each failed
//     rank and its error; nothing is published, `latest` and every existing checkpoint are untouched,
//     and the staging directory is removed;
//   - CommError when a peer dies or the collective times out (the staging directory stays behind
//     for the next save to remove).
CheckpointWriteResult WriteCheckpoint(comm::Communicator& comm, const CheckpointWriteOptions& options,
                                      const CheckpointContents& contents);

// The asynchronous save (checkpoint.writer.decoupled). StartCheckpointWrite is collective and runs
// steps 1-2 as WriteCheckpoint does, then copies every chunk into host memory (contents.fetch is
// called for every chunk before it returns, so the caller may change its tensors right after) and
// writes this rank's files (step 3) on a background thread. FinishCheckpointWrite, collective, waits
// for that thread and runs steps 4-5: it throws what WriteCheckpoint would (an error of the
// background write names the rank and its file), and only then is `latest` written. Every started
// write must be finished once; destroying an unfinished one only joins its thread (nothing published).
struct PendingCheckpointWrite;
std::shared_ptr<PendingCheckpointWrite> StartCheckpointWrite(comm::Communicator& comm,
                                                             const CheckpointWriteOptions& options,
                                                             const CheckpointContents& contents);
CheckpointWriteResult FinishCheckpointWrite(comm::Communicator& comm, PendingCheckpointWrite& pending);

// The names WriteCheckpoint uses for temporaries in save_dir (and removes at the start of a save).
bool IsCheckpointTemporary(const std::string& name);

// Deletes checkpoint <save_dir>/<tag> crash-safely: it is first renamed to a temporary name (and
// save_dir fsynced), then removed, so a crash never leaves a half-deleted checkpoint under its tag —
// only a temporary that loaders ignore and the next save removes. Refuses (InvalidArgument) the tag
// `latest` names; a missing tag is not an error. Not a collective: call it on one rank.
void RemoveCheckpoint(const std::string& save_dir, const std::string& tag, CheckpointEnv* env = nullptr);

}  // namespace zerorun::runtime

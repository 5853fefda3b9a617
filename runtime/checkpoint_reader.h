// Reading a training checkpoint (format: checkpoint_manifest.h): finding it (`latest`, tags), opening
// and validating it, reading any element ranges of any tensor slot — so a checkpoint saved at any
// world size and layout loads into any other, each rank reading only the bytes it needs — verifying
// every checksum, and checking that it belongs to the model at hand.
//
// Every problem of the checkpoint itself is a CheckpointError naming the file and, where there is one,
// the rank and tensor; a failing read(2) is an IoError. Torch pickles (DeepSpeed's *.pt checkpoints)
// are recognised and refused with instructions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zerorun/core/tensor.h"
#include "zerorun/runtime/checkpoint_env.h"
#include "zerorun/runtime/checkpoint_manifest.h"
#include "zerorun/runtime/checkpoint_plan.h"

namespace zerorun::runtime {

class SafetensorsReader;

// The tag in <save_dir>/latest (trailing whitespace removed), or nullopt when there is no such file
// (DeepSpeed: "nothing loaded"). CheckpointError when save_dir is a file or the tag is unusable.
std::optional<std::string> ReadLatestCheckpointTag(const std::string& save_dir, CheckpointEnv* env = nullptr);

// The tags in save_dir that hold a manifest.json, sorted; temporaries of interrupted saves and other
// entries are skipped. CheckpointError when save_dir is missing or a file.
std::vector<std::string> ListCheckpointTags(const std::string& save_dir, CheckpointEnv* env = nullptr);

// <load_dir>/<tag>, with `tag` empty meaning the one `latest` names; nullopt when tag is empty and
// there is no `latest`. CheckpointError when load_dir is missing or a file, or the tag directory is
// missing (listing the tags that exist), or when it is a DeepSpeed checkpoint.
std::optional<std::string> ResolveCheckpointDir(const std::string& load_dir, const std::string& tag,
                                                CheckpointEnv* env = nullptr);

// If `path` (a directory or a file) looks like a DeepSpeed / PyTorch checkpoint (*.pt files, torch
// zip or pickle magic), the message to show; "" otherwise.
std::string DescribeTorchCheckpoint(const std::string& path, CheckpointEnv* env = nullptr);

// One element range to read: elements [offset, offset + numel) of the flattened `slot` of `tensor`,
// into `dst` as `dst_dtype` (numel elements). Floating dtypes convert exactly as core Convert();
// other dtypes must match the stored one.
struct CheckpointReadRequest {
  std::string tensor;
  std::string slot;
  int64_t offset = 0;
  int64_t numel = 0;
  void* dst = nullptr;
  DType dst_dtype = DType::kF32;
};

// Counters of what a reader did (tests check that partial loads read only what they need).
struct CheckpointReadStats {
  uint64_t bytes_read = 0;       // bytes read from shards (including checksum-block rounding)
  uint64_t blocks_verified = 0;  // checksum blocks hashed and compared
  int shards_opened = 0;
};

struct CheckpointVerifyReport;

class CheckpointReader {
 public:
  // Threads a large read call spreads its checksum blocks over, and what "large" is (bytes).
  static constexpr int kReadThreads = 4;
  static constexpr uint64_t kParallelBytes = uint64_t{32} << 20;

  // `dir` is one checkpoint, <save_dir>/<tag>. Reads manifest.json and every rank's index and checks,
  // before any tensor is read: the directory is a directory; manifest.json exists (otherwise: a
  // DeepSpeed checkpoint, or not a checkpoint); every rank's index and shard are present (listing all
  // missing ranks); the indexes belong to this save (tag, save id, world size); every shard has the
  // size its index records (truncated shards are caught here); every chunk names a known tensor and
  // slot within bounds, with one checksum per block; the chunks of every slot tile it exactly.
  // Shard headers are validated when a shard is first read.
  explicit CheckpointReader(std::string dir, CheckpointEnv* env = nullptr);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& dir() const { return dir_; }
  const CheckpointManifest& manifest() const { return manifest_; }
  const std::vector<CheckpointRankIndex>& ranks() const { return ranks_; }

  // Reads every request through the reshard planner: only the shards, and within them only the
  // checksum blocks, that hold the wanted elements; each block read is hashed and compared before its
  // bytes are used (CheckpointError naming the file, rank, tensor, slot and block on a mismatch;
  // the destination may then be partly written). A call that reads at least kParallelBytes spreads
  // its blocks over up to kReadThreads threads of its own (reads in flight together, hashing beside
  // them; at most one per CPU unless set_direct_reads); the error reported is then the first in
  // request order. Not thread-safe itself.
  //
  // `verified` true skips the hashing: for requests whose blocks Verify already checked through this
  // reader (its shard files stay open, so the same bytes are read again — from the page cache when
  // they fit there).
  void Read(const std::vector<CheckpointReadRequest>& requests, bool verified = false);
  // Reads and checks the blocks of every request as Read does, writing nothing (`dst` is ignored and
  // may be null; one block-sized buffer is reused): a load can check everything it will apply before
  // it changes anything, without holding the whole checkpoint in memory.
  void Verify(const std::vector<CheckpointReadRequest>& requests);
  // Every check of Read that needs no tensor bytes, reading none: each request names a saved tensor
  // and slot of a convertible dtype, and the shards it needs open with valid headers (a one-pass
  // load refuses a foreign or incomplete checkpoint with it before anything changes).
  void Check(const std::vector<CheckpointReadRequest>& requests);
  // The whole slot as a new CPU tensor of the tensor's global shape, in `dtype` (default: as stored).
  Tensor ReadTensor(std::string_view tensor, std::string_view slot, std::optional<DType> dtype = std::nullopt);

  const CheckpointReadStats& stats() const { return stats_; }
  // Calls reading fewer bytes than this run on the calling thread alone (default kParallelBytes; tests
  // set 0 to spread small reads, or UINT64_MAX for one thread).
  void set_parallel_bytes(uint64_t bytes) { parallel_bytes_ = bytes; }
  // Shards opened after this read their large calls past the page cache
  // (CheckpointEnv::NewDirectReadableFile): for a load that reads every byte once.
  void set_direct_reads(bool direct) { direct_reads_ = direct; }

 private:
  friend CheckpointVerifyReport VerifyCheckpoint(const std::string& dir, CheckpointEnv* env);
  struct SlotChunks;
  // Opens without throwing for problems of the checkpoint: they are appended to *problems.
  CheckpointReader(std::string dir, CheckpointEnv* env, std::vector<std::string>* problems);
  void Open(std::vector<std::string>* problems);
  // The shard of `rank`, its header validated against the rank's index on first use.
  const SafetensorsReader& Shard(int rank);
  // Reads the checksum blocks [block_begin, block_end) of one chunk, verifying each unless `hash` is
  // false; the bytes of the chunk in [want_lo, want_hi) go to `out` (converted from the stored dtype to
  // out_dtype), or nowhere when `out` is null.
  // Uses `staging` for blocks that do not go straight to `out`, counting into `stats`: several threads
  // call it at once, each with its own (shards must already be open: Shard() is not thread-safe).
  void ReadBlocks(int rank, size_t chunk, DType stored, uint64_t block_begin, uint64_t block_end, uint64_t want_lo,
                  uint64_t want_hi, char* out, DType out_dtype, bool hash, std::vector<char>& staging,
                  CheckpointReadStats& stats) const;
  enum class Mode { kRead, kReadVerified, kVerify, kCheck };
  void Run(const std::vector<CheckpointReadRequest>& requests, Mode mode);

  std::string dir_;
  CheckpointEnv* env_;
  CheckpointManifest manifest_;
  std::vector<CheckpointRankIndex> ranks_;
  // (tensor, slot) -> index into slots_
  std::map<std::pair<std::string, std::string>, size_t, std::less<>> slot_index_;
  std::vector<SlotChunks> slots_;
  std::vector<PlanTensor> plans_;  // slots_[i].plan, as the planner takes them
  std::map<int, std::unique_ptr<SafetensorsReader>> shards_;
  std::vector<char> staging_;  // one checksum block (the calling thread's)
  CheckpointReadStats stats_;
  uint64_t parallel_bytes_ = kParallelBytes;
  bool direct_reads_ = false;
};

// The result of VerifyCheckpoint: every problem found (empty = the checkpoint is intact).
struct CheckpointVerifyReport {
  std::vector<std::string> problems;
  int ranks = 0;
  int64_t chunks = 0;
  uint64_t bytes_verified = 0;
  bool ok() const { return problems.empty(); }
};

// Checks everything CheckpointReader checks, then reads every shard completely: its header against
// its index, and every checksum block of every chunk. Problems are collected (each names the file,
// rank and tensor), not thrown; an unreadable manifest.json is reported as the only problem.
CheckpointVerifyReport VerifyCheckpoint(const std::string& dir, CheckpointEnv* env = nullptr);

// A tensor of the model the checkpoint should belong to.
struct CheckpointModelTensor {
  std::string name;
  Shape shape;
};
// Compares the checkpoint's tensors with the model's: names missing on either side (only when
// `strict`, as load_module_strict) and shapes that differ (always). Throws CheckpointError naming the
// checkpoint and the first differences ("'h.0.w' has shape [4, 8] in the checkpoint and [4, 16] in
// the model; 'h.9.b' is in the model but not in the checkpoint; ... and 3 more").
void CheckCheckpointMatchesModel(const CheckpointManifest& manifest, const std::string& dir,
                                 const std::vector<CheckpointModelTensor>& model, bool strict = true);

}  // namespace zerorun::runtime

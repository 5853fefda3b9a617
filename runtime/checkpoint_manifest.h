// The training checkpoint's on-disk description (docs/checkpoint.md is the specification).
//
// A checkpoint is a directory <save_dir>/<tag>/ holding
//   manifest.json          rank 0: format version, tag, save id, world size, ZeRO stage, dtypes, every
//                          tensor with its global shape and the slots saved for it ("param" = the model
//                          dtype weights, "fp32" = master weights, optimizer slots such as "exp_avg"),
//                          the step state, the client state and the config that produced the run;
//   rankNNNNN.safetensors  each rank: its chunks, plain safetensors (readable by any reader);
//   rankNNNNN.json         each rank: its index: for every chunk, which elements [offset, offset+numel)
//                          of which slot of which tensor it holds, where in the shard, and the XXH3-64
//                          checksums of its blocks (runtime/checkpoint_hash.h).
// A chunk is a contiguous range of the flattened (row-major) tensor, so any partition layout —
// DeepSpeed's contiguous stage 1/2 partitions, stage 3's per-parameter shards, Megatron-style
// per-bucket slices — is described by the ranges it produced, and a loader plans its reads from the
// ranges alone (runtime/checkpoint_plan.h).
//
// The parsers are strict: anything malformed throws CheckpointError naming the file and the JSON path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "zerorun/core/dtype.h"
#include "zerorun/core/tensor.h"
#include "zerorun/runtime/checkpoint_hash.h"

namespace zerorun::runtime {

inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr const char* kCheckpointManifestFile = "manifest.json";
inline constexpr const char* kCheckpointLatestFile = "latest";
// The conventional slot names (any other name is an optimizer slot).
inline constexpr const char* kSlotParam = "param";  // the model-dtype (16-bit or fp32) weights
inline constexpr const char* kSlotFp32 = "fp32";    // fp32 master weights

std::string CheckpointShardFile(int rank);  // "rank00003.safetensors"
std::string CheckpointIndexFile(int rank);  // "rank00003.json"
// The chunk's tensor name inside a shard: "<slot>/<tensor>/<offset>".
std::string CheckpointChunkKey(std::string_view slot, std::string_view tensor, int64_t offset);

struct CheckpointSlot {
  std::string name;
  DType dtype = DType::kF32;
};

// One tensor of the model (a parameter) and the slots saved for it; every slot has the tensor's shape.
struct CheckpointTensor {
  std::string name;  // dotted parameter name
  Shape shape;       // global shape
  std::vector<CheckpointSlot> slots;
  int64_t numel() const { return NumElements(shape); }
  const CheckpointSlot* FindSlot(std::string_view slot) const;
};

// manifest.json.
struct CheckpointManifest {
  int format_version = kCheckpointFormatVersion;
  std::string tag;
  std::string save_id;  // unique per save; repeated in every rank index (detects mixed-up files)
  int world_size = 1;
  int zero_stage = 0;
  DType model_dtype = DType::kF32;
  std::string optimizer;  // optimizer type ("" when none)
  uint64_t checksum_block_bytes = kDefaultChecksumBlockBytes;
  std::vector<CheckpointTensor> tensors;  // in the model's canonical parameter order
  // JSON objects, kept as text: the step state (runtime/checkpoint_state.h), the caller's client
  // state, and the effective config (EffectiveConfigJson) of the run that saved.
  std::string state_json = "{}";
  std::string client_state_json = "{}";
  std::string config_json = "{}";

  const CheckpointTensor* FindTensor(std::string_view name) const;
};

// One stored chunk: elements [offset, offset + numel) of the flattened `slot` of `tensor`, stored in
// the slot's dtype as the shard's safetensors tensor `key` (a 1-D tensor of numel elements).
struct CheckpointChunk {
  std::string tensor;
  std::string slot;
  int64_t offset = 0;
  int64_t numel = 0;
  std::string key;
  uint64_t data_begin = 0;  // safetensors data_offsets, relative to the shard's data region
  uint64_t data_end = 0;
  std::vector<uint64_t> hashes;  // XXH3-64 per checksum block of [data_begin, data_end)
};

// rankNNNNN.json.
struct CheckpointRankIndex {
  int format_version = kCheckpointFormatVersion;
  std::string tag;
  std::string save_id;
  int rank = 0;
  int world_size = 1;
  std::string shard;         // the shard's file name (CheckpointShardFile(rank))
  uint64_t shard_bytes = 0;  // its size in bytes
  uint64_t data_begin = 0;   // file offset of its data region (8 + header length)
  std::vector<CheckpointChunk> chunks;
};

std::string CheckpointManifestToJson(const CheckpointManifest& manifest);
// `source` names the input in errors (usually the file path).
CheckpointManifest CheckpointManifestFromJson(const std::string& text, const std::string& source);
std::string CheckpointRankIndexToJson(const CheckpointRankIndex& index);
CheckpointRankIndex CheckpointRankIndexFromJson(const std::string& text, const std::string& source);

// InvalidArgument unless `tag` can name a checkpoint directory: non-empty, at most 255 bytes, no '/',
// NUL or control characters, not starting with '.', and not "latest".
void ValidateCheckpointTag(const std::string& tag);

}  // namespace zerorun::runtime

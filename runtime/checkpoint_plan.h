// Reshard planning, after PyTorch Distributed Checkpoint's planner: the saver wrote each tensor slot as
// chunks with global element offsets; a loader states which element ranges it wants for its own
// layout (any world size, any ZeRO stage, any partitioning), and the planner answers which bytes of
// which rank's shard to read, and which checksum blocks those bytes fall in. Pure functions: no I/O,
// no communicator; exhaustively tested (tests/checkpoint/plan_test.cc).
//
// Vocabulary: a *tensor* here is one slot of one saved tensor (e.g. "h.0.w"'s "exp_avg"), flattened;
// its *chunks* tile [0, numel) (checked by CheckChunkCoverage); a *want* is [offset, offset + numel)
// of one tensor and where it lands in the caller's destination; a *read* is the part of one want that
// lies in one chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zerorun::runtime {

struct PlanChunk {
  int rank = 0;              // whose shard holds it
  int64_t offset = 0;        // first global element
  int64_t numel = 0;
  uint64_t file_offset = 0;  // absolute byte offset of its first element in that shard
};

struct PlanTensor {
  std::string name;        // for messages ("h.0.w (exp_avg)")
  int64_t numel = 0;
  uint64_t elem_bytes = 4;  // stored element size
  std::vector<PlanChunk> chunks;  // any order
};

struct PlanWant {
  size_t tensor = 0;       // index into the tensors
  int64_t offset = 0;      // first global element wanted
  int64_t numel = 0;
  int64_t dst_offset = 0;  // element of the destination that receives element `offset`
};

struct PlanRead {
  size_t want = 0;          // index into the wants
  size_t tensor = 0;
  size_t chunk = 0;         // index into tensors[tensor].chunks
  int rank = 0;
  int64_t offset = 0;       // first global element read
  int64_t numel = 0;
  int64_t dst_offset = 0;   // where element `offset` lands in the want's destination
  uint64_t file_offset = 0; // absolute byte offset of element `offset` in the rank's shard
  uint64_t bytes = 0;       // numel × elem_bytes
  // The checksum blocks of the chunk that hold these bytes: [block_begin, block_end), counted from
  // the chunk's first byte in units of block_bytes. A verifying reader reads exactly these blocks.
  uint64_t block_begin = 0;
  uint64_t block_end = 0;
};

// "" when the chunks of `t` tile [0, t.numel) exactly (empty chunks allowed anywhere); otherwise what
// is wrong, naming the tensor, the element range and the ranks: "elements [a, b) are saved by no
// rank", "elements [a, b) are saved twice (ranks 1 and 3)", "a chunk of rank 2 ends at e, past the
// tensor's n elements".
std::string CheckChunkCoverage(const PlanTensor& t);

// The reads that fill every want, sorted by (rank, file_offset) so each shard is read front to back.
// Every wanted element is read exactly once. Throws InvalidArgument when a want names no tensor or
// leaves [0, numel), CheckpointError (naming the tensor and elements) when the chunks do not cover
// it. REQUIRES: block_bytes > 0 and a multiple of every elem_bytes; the chunks of every wanted tensor
// pass CheckChunkCoverage (otherwise the reads are unspecified, though never out of the chunks).
std::vector<PlanRead> PlanReads(const std::vector<PlanTensor>& tensors, const std::vector<PlanWant>& wants,
                                uint64_t block_bytes);

}  // namespace zerorun::runtime

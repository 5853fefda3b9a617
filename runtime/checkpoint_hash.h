// Checkpoint checksums: XXH3-64 (xxHash >= 0.8, seed 0, from Debian's libxxhash) of each fixed-size
// block of a tensor chunk's bytes. Blocks let a loader that reads only part of a chunk (resharding)
// verify exactly the blocks it touched; a chunk of B bytes has ceil(B / block_bytes) blocks, the last
// one possibly short, and a zero-byte chunk has none. Hashes are written as 16 lowercase hex digits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zerorun::runtime {

inline constexpr uint64_t kDefaultChecksumBlockBytes = uint64_t{4} << 20;  // 4 MiB

// XXH3-64 of `bytes` bytes (seed 0).
uint64_t Xxh3(const void* data, size_t bytes);

// Block hashes of a buffer: element k is Xxh3 of bytes [k·block_bytes, min((k+1)·block_bytes, bytes)).
// REQUIRES: block_bytes > 0.
std::vector<uint64_t> HashBlocks(const void* data, size_t bytes, uint64_t block_bytes);

// The same, for data that arrives in pieces of any size (a streamed chunk): Update() as often as
// needed, then Finish(). Finish() equals HashBlocks over the concatenation of all pieces.
class BlockHasher {
 public:
  explicit BlockHasher(uint64_t block_bytes);
  ~BlockHasher();
  BlockHasher(const BlockHasher&) = delete;
  BlockHasher& operator=(const BlockHasher&) = delete;
  void Update(const void* data, size_t bytes);
  std::vector<uint64_t> Finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
  uint64_t block_bytes_;
  uint64_t in_block_ = 0;  // bytes of the current block hashed so far
  std::vector<uint64_t> hashes_;
};

std::string HashToHex(uint64_t h);
// False when `hex` is not exactly 16 hex digits.
bool HashFromHex(std::string_view hex, uint64_t* out);

}  // namespace zerorun::runtime

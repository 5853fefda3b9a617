// XXH3-64 block hashing over libxxhash's one-shot and streaming APIs.
#include "zerorun/runtime/checkpoint_hash.h"

#include <xxhash.h>

#include <algorithm>

#include "zerorun/core/error.h"

static_assert(XXH_VERSION_NUMBER >= 800, "XXH3 is stable from xxHash 0.8.0");

namespace zerorun::runtime {

uint64_t Xxh3(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

std::vector<uint64_t> HashBlocks(const void* data, size_t bytes, uint64_t block_bytes) {
  ZR_CHECK(block_bytes > 0);
  std::vector<uint64_t> out;
  out.reserve(bytes / block_bytes + 1);
  const char* p = static_cast<const char*>(data);
  for (uint64_t at = 0; at < bytes; at += block_bytes) {
    out.push_back(Xxh3(p + at, static_cast<size_t>(std::min<uint64_t>(block_bytes, bytes - at))));
  }
  return out;
}

struct BlockHasher::State {
  XXH3_state_t* s = nullptr;
  State() : s(XXH3_createState()) { ZR_CHECK(s != nullptr, "XXH3_createState failed"); }
  ~State() { XXH3_freeState(s); }
};

BlockHasher::BlockHasher(uint64_t block_bytes) : state_(std::make_unique<State>()), block_bytes_(block_bytes) {
  ZR_CHECK(block_bytes > 0);
  XXH3_64bits_reset(state_->s);
}

BlockHasher::~BlockHasher() = default;

void BlockHasher::Update(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(bytes, block_bytes_ - in_block_));
    XXH3_64bits_update(state_->s, p, n);
    in_block_ += n;
    p += n;
    bytes -= n;
    if (in_block_ == block_bytes_) {
      hashes_.push_back(XXH3_64bits_digest(state_->s));
      XXH3_64bits_reset(state_->s);
      in_block_ = 0;
    }
  }
}

std::vector<uint64_t> BlockHasher::Finish() {
  if (in_block_ > 0) hashes_.push_back(XXH3_64bits_digest(state_->s));
  in_block_ = 0;
  XXH3_64bits_reset(state_->s);
  std::vector<uint64_t> out = std::move(hashes_);
  hashes_.clear();
  return out;
}

std::string HashToHex(uint64_t h) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<size_t>(i)] = kDigits[h & 0xf];
    h >>= 4;
  }
  return out;
}

bool HashFromHex(std::string_view hex, uint64_t* out) {
  if (hex.size() != 16) return false;
  uint64_t v = 0;
  for (char c : hex) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace zerorun::runtime

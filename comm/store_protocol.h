// Private: the TCP store's wire format, shared by client (tcp_store.cc) and server (store_server.cc).
//
// frame   := u32 payload_bytes (little endian) · payload
// request := u8 opcode · fields      reply := u8 status · fields
// fields are i64 (8 bytes LE), u32 (4 bytes LE) or str (u32 length · bytes). Requests and their fields:
//   HELLO u32 magic, str token | SET str key, str value | GET str key, i64 timeout_ms | ADD str key,
//   i64 delta | CAS str key, str expected, str desired | DELETE str key | CHECK u32 n, n×str |
//   WAIT u32 n, n×str, i64 timeout_ms | NUM_KEYS | SET_ON_DISC str key, str value | CLEAR_ON_DISC
// Replies: OK (+ str value for GET/CAS, i64 for ADD/DELETE/CHECK/NUM_KEYS), TIMEOUT, ERROR str message, INVALID str message.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace zerorun::comm::proto {

inline constexpr uint32_t kMagic = 0x3153525au;  // "ZRS1"
inline constexpr size_t kMaxHelloBytes = 8192;

enum Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCas = 5,
  kDelete = 6,
  kCheck = 7,
  kWait = 8,
  kNumKeys = 9,
  kSetOnDisc = 10,
  kClearOnDisc = 11,
};
enum Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2, kInvalid = 3 };  // kInvalid: bad argument

class Writer {
 public:
  explicit Writer(uint8_t tag) { buf_.resize(4); buf_.push_back(static_cast<char>(tag)); }
  Writer& U32(uint32_t v) {
    char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    buf_.append(b, 4);
    return *this;
  }
  Writer& I64(int64_t v) {
    uint64_t u = static_cast<uint64_t>(v);
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((u >> (8 * i)) & 0xff);
    buf_.append(b, 8);
    return *this;
  }
  Writer& Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    buf_.append(s.data(), s.size());
    return *this;
  }
  // The complete frame, length prefix filled in.
  std::string Finish() {
    uint32_t n = static_cast<uint32_t>(buf_.size() - 4);
    for (int i = 0; i < 4; ++i) buf_[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return std::move(buf_);
  }

 private:
  std::string buf_;
};

// Reads fields from one payload; every read checks bounds and sets ok() false instead of overrunning.
class Reader {
 public:
  explicit Reader(std::string_view payload) : p_(payload) {}
  bool ok() const { return ok_; }
  bool AtEnd() const { return pos_ == p_.size(); }
  uint8_t U8() {
    if (!Need(1)) return 0;
    return static_cast<uint8_t>(p_[pos_++]);
  }
  uint32_t U32() {
    if (!Need(4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return v;
  }
  int64_t I64() {
    if (!Need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return static_cast<int64_t>(v);
  }
  std::string Str(size_t max_bytes) {
    uint32_t n = U32();
    if (!ok_ || n > max_bytes || !Need(n)) {
      ok_ = false;
      return {};
    }
    std::string s(p_.substr(pos_, n));
    pos_ += n;
    return s;
  }

 private:
  bool Need(size_t n) {
    if (!ok_ || p_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  std::string_view p_;
  size_t pos_ = 0;
  bool ok_ = true;
};

inline uint32_t FrameLength(const char* b) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(b[i])) << (8 * i);
  return v;
}

}  // namespace zerorun::comm::proto

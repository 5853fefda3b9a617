// Private: the rendezvous store server's state machine without sockets — the key/value map, each
// connection's input/output buffers, frame parsing, request handling, parked GET/WAIT requests and
// their deadlines, on-disconnect keys. StoreServer (store_server.cc) owns one and moves bytes
// between it and the sockets; the protocol fuzzer (tests/fuzz/store_protocol_fuzz.cc) drives it
// directly. Invariant after every call: no connection buffers more than the limits below.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zerorun/comm/tcp_store.h"

namespace zerorun::comm::detail {

inline constexpr double kStoreHelloDeadlineS = 10.0;
inline constexpr size_t kStoreMaxFrameBytes = 2 * kStoreMaxValueBytes + (1u << 20);
inline constexpr size_t kStoreMaxOutBytes = 4 * kStoreMaxValueBytes;

struct StorePending {
  uint8_t op = 0;
  std::vector<std::string> keys;
  double deadline = 0;
};

struct StoreConn {
  int fd = -1;
  std::string peer;
  std::string in;
  std::string out;
  bool authed = false;
  bool dead = false;  // close once `out` is flushed (or at once when `hard`)
  bool hard = false;
  double hello_deadline = 0;
  std::optional<StorePending> pending;
  std::optional<std::pair<std::string, std::string>> on_disconnect;
};

class StoreState {
 public:
  explicit StoreState(std::string token) : token_(std::move(token)) {}

  std::list<StoreConn>& conns() { return conns_; }
  const std::map<std::string, std::string>& kv() const { return kv_; }
  int64_t refused() const { return refused_.load(); }

  // A new connection accepted at `now`.
  StoreConn& Add(int fd, std::string peer, double now);
  // Handles every complete frame in c.in while c has no parked request; returns whether a request
  // of an authenticated client was handled (waiters may need waking). Drops c on garbage.
  bool ParseFrames(StoreConn& c);
  // After a mutation: answers parked requests whose keys all exist now.
  void WakeWaiters();
  // Drops unauthenticated connections past their HELLO deadline and answers parked requests past
  // theirs with TIMEOUT. The earliest deadline still pending is returned through `next` (unchanged
  // when none is earlier).
  void ExpireDeadlines(double now, double* next);
  // Closes (calling `close_fd(fd)`) and removes connections that are hard-dead, or dead with their
  // output flushed; sets their on-disconnect keys. Returns whether any was removed.
  template <typename CloseFd>
  bool Reap(CloseFd close_fd) {
    bool closed_any = false;
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->hard || (it->dead && it->out.empty())) {
        if (it->fd >= 0) close_fd(it->fd);
        it->fd = -1;
        SetOnDisconnect(*it);
        it = conns_.erase(it);
        closed_any = true;
      } else {
        ++it;
      }
    }
    if (closed_any) WakeWaiters();  // on-disconnect keys may have appeared
    return closed_any;
  }

 private:
  bool AllExist(const std::vector<std::string>& keys) const;
  void Complete(StoreConn& c);
  void SetOnDisconnect(StoreConn& c);
  bool Handle(StoreConn& c, std::string_view payload);

  std::string token_;
  std::list<StoreConn> conns_;
  std::map<std::string, std::string> kv_;
  std::atomic<int64_t> refused_{0};
};

}  // namespace zerorun::comm::detail

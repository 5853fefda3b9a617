// libFuzzer target for the rendezvous store's wire protocol, server side: the state machine of
// comm/store_server_state.h (frame parsing, HELLO and the job token, every request, parked GET/WAIT,
// deadlines, on-disconnect keys, connections closing) driven without sockets by a script of events.
// Whatever arrives, nothing may crash, allocate without bound or leave a connection buffering more
// than the limits, and every byte the server queues for a client must be a well-formed reply frame.
//
// Input: a sequence of events, each `op len bytes...`: op & 3 picks one of 4 connections, op >> 2
// the action (0: bytes arrive, 1: a valid HELLO then the bytes, 2: the connection closes, 3: time
// passes and deadlines expire, 4+: the client reads what was queued); len (one byte) bytes follow.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "zerorun/comm/store_protocol.h"
#include "zerorun/comm/store_server_state.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"

namespace zc = zerorun::comm;

namespace {

// Every frame queued for a client: u32 length >= 1, a known status byte, within the limits.
void CheckReplies(const std::string& out) {
  size_t pos = 0;
  while (pos < out.size()) {
    if (out.size() - pos < 4) __builtin_trap();
    uint32_t len = zc::proto::FrameLength(out.data() + pos);
    if (len == 0 || len > zc::kStoreMaxValueBytes + 64 || out.size() - pos - 4 < len) __builtin_trap();
    if (static_cast<uint8_t>(out[pos + 4]) > zc::proto::kInvalid) __builtin_trap();
    pos += 4 + len;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  zerorun::SetLogLevel(zerorun::LogLevel::kError);  // every dropped connection is a warning otherwise
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zc::detail::StoreState st("token");
  std::vector<zc::detail::StoreConn*> conns;
  double now = zerorun::NowSeconds();
  for (int i = 0; i < 4; ++i) conns.push_back(&st.Add(-1, "fuzz:" + std::to_string(i), now));
  const std::string hello = zc::proto::Writer(zc::proto::kHello).U32(zc::proto::kMagic).Str("token").Finish();
  size_t pos = 0;
  while (pos + 2 <= size) {
    const uint8_t op = data[pos], len = data[pos + 1];
    pos += 2;
    const std::string bytes(reinterpret_cast<const char*>(data + pos), std::min<size_t>(len, size - pos));
    pos += bytes.size();
    const size_t which = op & 3;
    if (which >= conns.size()) continue;
    zc::detail::StoreConn* c = conns[which];
    switch (op >> 2) {
      case 0:
      case 1:
        if (c == nullptr) {  // a new connection in that slot
          c = conns[which] = &st.Add(-1, "fuzz:new", now);
        }
        if ((op >> 2) == 1) c->in += hello;
        c->in += bytes;
        if (st.ParseFrames(*c)) st.WakeWaiters();
        break;
      case 2:
        if (c) c->dead = c->hard = true;
        break;
      case 3: {
        now += static_cast<double>(len) * 0.1;
        double next = now + 1;
        st.ExpireDeadlines(now, &next);
        break;
      }
      default:
        if (c) {
          CheckReplies(c->out);
          c->out.clear();  // the client read it
        }
        break;
    }
    for (auto& conn : st.conns()) {
      if (!conn.dead && conn.out.size() > zc::detail::kStoreMaxOutBytes) __builtin_trap();
      CheckReplies(conn.out);
    }
    // closed connections disappear (their on-disconnect keys are set); forget their slots
    std::vector<const zc::detail::StoreConn*> alive;
    st.Reap([](int) {});
    for (auto& slot : conns) {
      bool found = false;
      for (auto& conn : st.conns()) found = found || &conn == slot;
      if (!found) slot = nullptr;
    }
  }
  if (st.kv().size() > size) __builtin_trap();  // each key needs bytes of its own
  return 0;
}

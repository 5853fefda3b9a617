// StoreServer: one thread, one poll() loop, non-blocking sockets. Each connection has an input and an
// output buffer and at most one parked blocking request (GET or WAIT with a deadline); a mutation wakes
// the parked requests whose keys now exist. Nothing a client sends can block the loop: reads and
// writes never block, frames are size-checked before they are buffered, and bad input closes only
// that connection.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

#include "zerorun/comm/store_protocol.h"
#include "zerorun/comm/store_server_state.h"
#include "zerorun/comm/tcp_store.h"
#include "zerorun/core/error.h"
#include "zerorun/core/limits.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"

namespace zerorun::comm {

namespace detail {

namespace {

std::string OkFrame() { return proto::Writer(proto::kOk).Finish(); }
std::string OkStr(const std::string& s) { return proto::Writer(proto::kOk).Str(s).Finish(); }
std::string OkI64(int64_t v) { return proto::Writer(proto::kOk).I64(v).Finish(); }
std::string ErrFrame(const std::string& m) { return proto::Writer(proto::kError).Str(m).Finish(); }
std::string TimeoutFrame() { return proto::Writer(proto::kTimeout).Finish(); }

}  // namespace

StoreConn& StoreState::Add(int fd, std::string peer, double now) {
  StoreConn c;
  c.fd = fd;
  c.peer = std::move(peer);
  c.hello_deadline = now + kStoreHelloDeadlineS;
  conns_.push_back(std::move(c));
  return conns_.back();
}

bool StoreState::AllExist(const std::vector<std::string>& keys) const {
  for (const auto& k : keys) {
    if (!kv_.count(k)) return false;
  }
  return true;
}

void StoreState::Complete(StoreConn& c) {
  const StorePending& p = *c.pending;
  c.out += p.op == proto::kGet ? OkStr(kv_.at(p.keys[0])) : OkFrame();
  c.pending.reset();
}

void StoreState::WakeWaiters() {
  for (auto& c : conns_) {
    if (c.pending && !c.dead && AllExist(c.pending->keys)) Complete(c);
  }
}

void StoreState::SetOnDisconnect(StoreConn& c) {
  if (c.on_disconnect) {
    const auto& [k, v] = *c.on_disconnect;
    if (!kv_.count(k)) {
      ZR_DEBUG("store server: client {} disconnected; setting '{}'", c.peer, k);
      kv_[k] = v;
    }
    c.on_disconnect.reset();
  }
}

bool StoreState::ParseFrames(StoreConn& c) {
  bool mutated = false;
  while (!c.dead && !c.pending && c.in.size() >= 4) {
    uint32_t len = proto::FrameLength(c.in.data());
    size_t limit = c.authed ? kStoreMaxFrameBytes : proto::kMaxHelloBytes + 64;
    if (len == 0 || len > limit) {
      ZR_WARN("store server: dropping {}: frame of {} bytes (limit {})", c.peer, len, limit);
      if (!c.authed) ++refused_;
      c.dead = c.hard = true;
      break;
    }
    if (c.in.size() < 4 + static_cast<size_t>(len)) break;
    std::string_view payload(c.in.data() + 4, len);
    bool was_authed = c.authed;
    if (!Handle(c, payload)) {
      ZR_WARN("store server: dropping {}: malformed request", c.peer);
      c.dead = c.hard = true;
      if (!was_authed) ++refused_;
      break;
    }
    if (was_authed) mutated = true;
    c.in.erase(0, 4 + static_cast<size_t>(len));
  }
  if (c.out.size() > kStoreMaxOutBytes) c.dead = c.hard = true;  // unread replies piling up
  return mutated;
}

void StoreState::ExpireDeadlines(double now, double* next) {
  for (auto& c : conns_) {
    if (!c.authed && !c.dead && now > c.hello_deadline) {
      ZR_WARN("store server: dropping {}: no HELLO within {} s", c.peer, kStoreHelloDeadlineS);
      c.dead = c.hard = true;
      ++refused_;
    }
    if (c.pending && now >= c.pending->deadline) {
      c.pending.reset();
      c.out += TimeoutFrame();
    }
    if (!c.authed && !c.dead) *next = std::min(*next, c.hello_deadline);
    if (c.pending) *next = std::min(*next, c.pending->deadline);
  }
}

// Handles one request frame; returns false when the connection must be dropped (garbage).
bool StoreState::Handle(StoreConn& c, std::string_view payload) {
  proto::Reader r(payload);
  uint8_t op = r.U8();
  if (!c.authed) {
    if (op != proto::kHello) return false;
    uint32_t magic = r.U32();
    std::string token = r.Str(proto::kMaxHelloBytes);
    if (!r.ok() || !r.AtEnd() || magic != proto::kMagic) return false;
    if (token != token_) {
      ZR_WARN("store server: refused connection from {}: wrong job token", c.peer);
      c.out += ErrFrame("job token does not match (ZERORUN_JOB_TOKEN)");
      c.dead = true;
      ++refused_;
      return true;
    }
    c.authed = true;
    c.out += OkFrame();
    return true;
  }
  auto key = [&] { return r.Str(kStoreMaxKeyBytes); };
  switch (op) {
    case proto::kSet: {
      std::string k = key(), v = r.Str(kStoreMaxValueBytes);
      if (!r.ok() || !r.AtEnd() || k.empty()) return false;
      kv_[k] = std::move(v);
      c.out += OkFrame();
      WakeWaiters();
      return true;
    }
    case proto::kGet:
    case proto::kWait: {
      StorePending p;
      p.op = op;
      if (op == proto::kGet) {
        p.keys.push_back(key());
      } else {
        uint32_t n = r.U32();
        if (!r.ok() || n > kStoreMaxKeysPerWait) return false;
        for (uint32_t i = 0; i < n; ++i) p.keys.push_back(key());
      }
      int64_t timeout_ms = r.I64();
      if (!r.ok() || !r.AtEnd() || timeout_ms < 0) return false;
      for (const auto& k : p.keys) {
        if (k.empty()) return false;
      }
      p.deadline = NowSeconds() + static_cast<double>(std::min<int64_t>(timeout_ms, int64_t{1} << 40)) * 1e-3;
      c.pending = std::move(p);
      if (AllExist(c.pending->keys)) Complete(c);
      return true;
    }
    case proto::kAdd: {
      std::string k = key();
      int64_t delta = r.I64();
      if (!r.ok() || !r.AtEnd() || k.empty()) return false;
      int64_t v = 0;
      auto it = kv_.find(k);
      if (it != kv_.end() && !it->second.empty()) {
        auto [ptr, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
        if (ec != std::errc() || ptr != it->second.data() + it->second.size()) {
          c.out += proto::Writer(proto::kInvalid).Str("Add on a key whose value is not an integer").Finish();
          return true;
        }
      }
      if (__builtin_add_overflow(v, delta, &v)) {
        c.out += proto::Writer(proto::kInvalid).Str("Add overflows a 64-bit integer").Finish();
        return true;
      }
      kv_[k] = std::to_string(v);
      c.out += OkI64(v);
      WakeWaiters();
      return true;
    }
    case proto::kCas: {
      std::string k = key(), expected = r.Str(kStoreMaxValueBytes), desired = r.Str(kStoreMaxValueBytes);
      if (!r.ok() || !r.AtEnd() || k.empty()) return false;
      auto it = kv_.find(k);
      if (it == kv_.end()) {
        if (!expected.empty()) {
          c.out += OkStr("");
          return true;
        }
        kv_[k] = desired;
        c.out += OkStr(desired);
        WakeWaiters();
        return true;
      }
      if (it->second == expected) {
        it->second = desired;
        WakeWaiters();
      }
      c.out += OkStr(it->second);
      return true;
    }
    case proto::kDelete: {
      std::string k = key();
      if (!r.ok() || !r.AtEnd()) return false;
      c.out += OkI64(kv_.erase(k) ? 1 : 0);
      return true;
    }
    case proto::kCheck: {
      uint32_t n = r.U32();
      if (!r.ok() || n > kStoreMaxKeysPerWait) return false;
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < n; ++i) keys.push_back(key());
      if (!r.ok() || !r.AtEnd()) return false;
      c.out += OkI64(AllExist(keys) ? 1 : 0);
      return true;
    }
    case proto::kNumKeys:
      if (!r.AtEnd()) return false;
      c.out += OkI64(static_cast<int64_t>(kv_.size()));
      return true;
    case proto::kSetOnDisc: {
      std::string k = key(), v = r.Str(kStoreMaxValueBytes);
      if (!r.ok() || !r.AtEnd() || k.empty()) return false;
      c.on_disconnect.emplace(std::move(k), std::move(v));
      c.out += OkFrame();
      return true;
    }
    case proto::kClearOnDisc:
      if (!r.AtEnd()) return false;
      c.on_disconnect.reset();
      c.out += OkFrame();
      return true;
    default:
      return false;
  }
}

}  // namespace detail

struct StoreServer::Impl {
  explicit Impl(const StoreServerOptions& o) : options(o), state(o.token) {}
  StoreServerOptions options;
  detail::StoreState state;
  int listen_fd = -1;
  int wake_pipe[2] = {-1, -1};
  double accept_paused_until = 0;  // after EMFILE/ENFILE: stop polling the listen socket briefly
  double next_accept_error_log = 0;
};

StoreServer::StoreServer(const StoreServerOptions& options) : impl_(std::make_unique<Impl>(options)) {
  std::string host = options.host.empty() ? "0.0.0.0" : options.host;
  std::string where = Format("{}:{}", host, options.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(options.port);
  int rc = ::getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res);
  if (rc != 0) ZR_THROW(CommError, "store server {}: cannot resolve host: {}", where, gai_strerror(rc));
  int fd = -1;
  int last_err = 0;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_err = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, options.backlog) == 0) break;
    last_err = errno;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) ZR_THROW(CommError, "{}", ErrnoMessage(Format("store server: cannot listen on {}", where), last_err));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                         : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  impl_->listen_fd = fd;
  if (::pipe2(impl_->wake_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
    ::close(fd);
    ZR_THROW(CommError, "{}", ErrnoMessage("store server: pipe2", errno));
  }
  ZR_DEBUG("store server listening on {}:{}", host, port_);
  thread_ = std::thread([this] { Run(); });
}

StoreServer::~StoreServer() { Stop(); }

void StoreServer::Stop() {
  if (stopped_.exchange(true)) return;
  char b = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wake_pipe[1], &b, 1);
  if (thread_.joinable()) thread_.join();
  for (auto& c : impl_->state.conns()) {
    if (c.fd >= 0) ::close(c.fd);
  }
  impl_->state.conns().clear();
  ::close(impl_->listen_fd);
  ::close(impl_->wake_pipe[0]);
  ::close(impl_->wake_pipe[1]);
}

int64_t StoreServer::connections_refused() const { return impl_->state.refused(); }

void StoreServer::Run() {
  Impl& s = *impl_;
  detail::StoreState& st = s.state;
  std::vector<pollfd> fds;
  std::vector<detail::StoreConn*> order;
  char scratch[65536];
  for (;;) {
    double now = NowSeconds();
    double next = now + 1.0;
    st.ExpireDeadlines(now, &next);
    st.Reap([](int fd) { ::close(fd); });
    fds.clear();
    order.clear();
    fds.push_back({s.wake_pipe[0], POLLIN, 0});
    const bool accepting = now >= s.accept_paused_until;
    fds.push_back({accepting ? s.listen_fd : -1, POLLIN, 0});  // a negative fd is ignored by poll()
    if (!accepting) next = std::min(next, s.accept_paused_until);
    for (auto& c : st.conns()) {
      short ev = 0;
      if (!c.dead) ev |= POLLIN;
      if (!c.out.empty()) ev |= POLLOUT;
      fds.push_back({c.fd, ev, 0});
      order.push_back(&c);
    }
    int wait_ms = std::max(0, static_cast<int>((next - now) * 1e3) + 1);
    int rc = ::poll(fds.data(), fds.size(), wait_ms);
    if (rc < 0 && errno != EINTR) {
      ZR_ERROR("{}", ErrnoMessage("store server: poll", errno));
      return;
    }
    if (fds[0].revents) return;  // Stop()
    if (fds[1].revents & POLLIN) {
      for (;;) {
        sockaddr_storage ss{};
        socklen_t len = sizeof(ss);
        int cfd = ::accept4(s.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
          int err = errno;
          if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
            // Out of descriptors: the pending client stays in the backlog; retry in 100 ms instead
            // of spinning on a listen socket that stays readable, and say why (every 5 s).
            s.accept_paused_until = NowSeconds() + 0.1;
            if (NowSeconds() >= s.next_accept_error_log) {
              s.next_accept_error_log = NowSeconds() + 5.0;
              ZR_ERROR("store server on port {}: {}; {} with {} connection(s) open: the store needs two per rank "
                       "(raise ulimit -n)", port_, ErrnoMessage("cannot accept a rank's connection", err),
                       OpenFileLimitText(), st.conns().size());
            }
          }
          break;
        }
        int one = 1;
        ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
        ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), serv, sizeof(serv),
                      NI_NUMERICHOST | NI_NUMERICSERV);
        st.Add(cfd, Format("{}:{}", host, serv), NowSeconds());
        ++accepted_;
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      detail::StoreConn& c = *order[i - 2];
      short re = fds[i].revents;
      if (re & (POLLERR | POLLNVAL)) {
        c.dead = c.hard = true;
        continue;
      }
      if (re & POLLOUT && !c.out.empty()) {
        ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0) {
          c.out.erase(0, static_cast<size_t>(n));
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
          c.dead = c.hard = true;
          continue;
        }
      }
      if (re & (POLLIN | POLLHUP)) {
        for (;;) {
          ssize_t n = ::recv(c.fd, scratch, sizeof(scratch), 0);
          if (n > 0) {
            c.in.append(scratch, static_cast<size_t>(n));
            size_t limit = c.authed ? detail::kStoreMaxFrameBytes + 4 : proto::kMaxHelloBytes + 64;
            if (c.in.size() > limit + sizeof(scratch)) break;  // parse what we have first
            continue;
          }
          if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.dead = c.hard = true;
          break;
        }
        if (c.in.size() > 2 * detail::kStoreMaxFrameBytes) c.dead = c.hard = true;  // flooding while parked
      }
    }
    // Parse complete frames of every connection while it has no parked blocking request.
    bool mutated = false;
    for (auto& c : st.conns()) mutated = st.ParseFrames(c) || mutated;
    if (mutated) st.WakeWaiters();
    // Reap: hard-dead at once; soft-dead (refused) once the refusal is flushed.
    st.Reap([](int fd) { ::close(fd); });
  }
}

}  // namespace zerorun::comm

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

#include <cerrno>
#include <charconv>
#include <cstring>
#include <list>
#include <map>
#include <optional>
#include <vector>

#include "zerorun/comm/store_protocol.h"
#include "zerorun/comm/tcp_store.h"
#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"

namespace zerorun::comm {

namespace {

constexpr double kHelloDeadlineS = 10.0;
constexpr size_t kMaxFrameBytes = 2 * kStoreMaxValueBytes + (1u << 20);
constexpr size_t kMaxOutBytes = 4 * kStoreMaxValueBytes;

struct Pending {
  uint8_t op = 0;
  std::vector<std::string> keys;
  double deadline = 0;
};

struct Conn {
  int fd = -1;
  std::string peer;
  std::string in;
  std::string out;
  bool authed = false;
  bool dead = false;          // close once `out` is flushed (or at once when `hard`)
  bool hard = false;
  double hello_deadline = 0;
  std::optional<Pending> pending;
  std::optional<std::pair<std::string, std::string>> on_disconnect;
};

std::string OkFrame() { return proto::Writer(proto::kOk).Finish(); }
std::string OkStr(const std::string& s) { return proto::Writer(proto::kOk).Str(s).Finish(); }
std::string OkI64(int64_t v) { return proto::Writer(proto::kOk).I64(v).Finish(); }
std::string ErrFrame(const std::string& m) { return proto::Writer(proto::kError).Str(m).Finish(); }
std::string TimeoutFrame() { return proto::Writer(proto::kTimeout).Finish(); }

}  // namespace

struct StoreServer::Impl {
  StoreServerOptions options;
  int listen_fd = -1;
  int wake_pipe[2] = {-1, -1};
  std::list<Conn> conns;
  std::map<std::string, std::string> kv;

  bool AllExist(const std::vector<std::string>& keys) const {
    for (const auto& k : keys) {
      if (!kv.count(k)) return false;
    }
    return true;
  }

  void Complete(Conn& c) {
    const Pending& p = *c.pending;
    c.out += p.op == proto::kGet ? OkStr(kv.at(p.keys[0])) : OkFrame();
    c.pending.reset();
  }

  // After a mutation: finish parked requests whose keys all exist.
  void WakeWaiters() {
    for (auto& c : conns) {
      if (c.pending && !c.dead && AllExist(c.pending->keys)) Complete(c);
    }
  }

  void Close(Conn& c, int64_t* refused) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
    if (c.on_disconnect) {
      const auto& [k, v] = *c.on_disconnect;
      if (!kv.count(k)) {
        ZR_DEBUG("store server: client {} disconnected; setting '{}'", c.peer, k);
        kv[k] = v;
      }
      c.on_disconnect.reset();
    }
    if (!c.authed && refused) ++*refused;
  }

  // Handles one request frame; returns false when the connection must be dropped (garbage).
  bool Handle(Conn& c, std::string_view payload, std::atomic<int64_t>& refused) {
    proto::Reader r(payload);
    uint8_t op = r.U8();
    if (!c.authed) {
      if (op != proto::kHello) return false;
      uint32_t magic = r.U32();
      std::string token = r.Str(proto::kMaxHelloBytes);
      if (!r.ok() || !r.AtEnd() || magic != proto::kMagic) return false;
      if (token != options.token) {
        ZR_WARN("store server: refused connection from {}: wrong job token", c.peer);
        c.out += ErrFrame("job token does not match (ZERORUN_JOB_TOKEN)");
        c.dead = true;
        ++refused;
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
        kv[k] = std::move(v);
        c.out += OkFrame();
        WakeWaiters();
        return true;
      }
      case proto::kGet:
      case proto::kWait: {
        Pending p;
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
        p.deadline = NowSeconds() + static_cast<double>(timeout_ms) * 1e-3;
        c.pending = std::move(p);
        if (AllExist(c.pending->keys)) Complete(c);
        return true;
      }
      case proto::kAdd: {
        std::string k = key();
        int64_t delta = r.I64();
        if (!r.ok() || !r.AtEnd() || k.empty()) return false;
        int64_t v = 0;
        auto it = kv.find(k);
        if (it != kv.end() && !it->second.empty()) {
          auto [ptr, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
          if (ec != std::errc() || ptr != it->second.data() + it->second.size()) {
            c.out += proto::Writer(proto::kInvalid).Str("Add on a key whose value is not an integer").Finish();
            return true;
          }
        }
        v += delta;
        kv[k] = std::to_string(v);
        c.out += OkI64(v);
        WakeWaiters();
        return true;
      }
      case proto::kCas: {
        std::string k = key(), expected = r.Str(kStoreMaxValueBytes), desired = r.Str(kStoreMaxValueBytes);
        if (!r.ok() || !r.AtEnd() || k.empty()) return false;
        auto it = kv.find(k);
        if (it == kv.end()) {
          if (!expected.empty()) {
            c.out += OkStr("");
            return true;
          }
          kv[k] = desired;
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
        c.out += OkI64(kv.erase(k) ? 1 : 0);
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
        c.out += OkI64(static_cast<int64_t>(kv.size()));
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
};

StoreServer::StoreServer(const StoreServerOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
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
  for (auto& c : impl_->conns) {
    if (c.fd >= 0) ::close(c.fd);
  }
  impl_->conns.clear();
  ::close(impl_->listen_fd);
  ::close(impl_->wake_pipe[0]);
  ::close(impl_->wake_pipe[1]);
}

void StoreServer::Run() {
  Impl& s = *impl_;
  std::vector<pollfd> fds;
  std::vector<Conn*> order;
  char scratch[65536];
  for (;;) {
    double now = NowSeconds();
    double next = now + 1.0;
    fds.clear();
    order.clear();
    fds.push_back({s.wake_pipe[0], POLLIN, 0});
    fds.push_back({s.listen_fd, POLLIN, 0});
    for (auto& c : s.conns) {
      short ev = 0;
      if (!c.dead) ev |= POLLIN;
      if (!c.out.empty()) ev |= POLLOUT;
      fds.push_back({c.fd, ev, 0});
      order.push_back(&c);
      if (!c.authed) next = std::min(next, c.hello_deadline);
      if (c.pending) next = std::min(next, c.pending->deadline);
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
        if (cfd < 0) break;
        int one = 1;
        ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
        ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), serv, sizeof(serv),
                      NI_NUMERICHOST | NI_NUMERICSERV);
        Conn c;
        c.fd = cfd;
        c.peer = Format("{}:{}", host, serv);
        c.hello_deadline = NowSeconds() + kHelloDeadlineS;
        s.conns.push_back(std::move(c));
        ++accepted_;
      }
    }
    bool mutated = false;
    for (size_t i = 2; i < fds.size(); ++i) {
      Conn& c = *order[i - 2];
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
            size_t limit = c.authed ? kMaxFrameBytes + 4 : proto::kMaxHelloBytes + 64;
            if (c.in.size() > limit + sizeof(scratch)) break;  // parse what we have first
            continue;
          }
          if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.dead = c.hard = true;
          break;
        }
        if (c.in.size() > 2 * kMaxFrameBytes) c.dead = c.hard = true;  // flooding while parked
      }
      if (c.out.size() > kMaxOutBytes) c.dead = c.hard = true;
    }
    // Parse complete frames of every connection while it has no parked blocking request.
    for (auto& c : s.conns) {
      while (!c.dead && !c.pending && c.in.size() >= 4) {
        uint32_t len = proto::FrameLength(c.in.data());
        size_t limit = c.authed ? kMaxFrameBytes : proto::kMaxHelloBytes + 64;
        if (len == 0 || len > limit) {
          ZR_WARN("store server: dropping {}: frame of {} bytes (limit {})", c.peer, len, limit);
          if (!c.authed) ++refused_;
          c.dead = c.hard = true;
          break;
        }
        if (c.in.size() < 4 + static_cast<size_t>(len)) break;
        std::string_view payload(c.in.data() + 4, len);
        bool was_authed = c.authed;
        if (!s.Handle(c, payload, refused_)) {
          ZR_WARN("store server: dropping {}: malformed request", c.peer);
          c.dead = c.hard = true;
          if (!was_authed) ++refused_;
          break;
        }
        if (was_authed) mutated = true;
        c.in.erase(0, 4 + static_cast<size_t>(len));
      }
    }
    if (mutated) s.WakeWaiters();
    // Deadlines: unauthenticated connections and parked requests.
    now = NowSeconds();
    for (auto& c : s.conns) {
      if (!c.authed && !c.dead && now > c.hello_deadline) {
        ZR_WARN("store server: dropping {}: no HELLO within {} s", c.peer, kHelloDeadlineS);
        c.dead = c.hard = true;
        ++refused_;
      }
      if (c.pending && now >= c.pending->deadline) {
        c.pending.reset();
        c.out += TimeoutFrame();
      }
    }
    // Reap: hard-dead at once; soft-dead (refused) once the refusal is flushed.
    bool closed_any = false;
    for (auto it = s.conns.begin(); it != s.conns.end();) {
      if (it->hard || (it->dead && it->out.empty())) {
        s.Close(*it, nullptr);
        it = s.conns.erase(it);
        closed_any = true;
      } else {
        ++it;
      }
    }
    if (closed_any) s.WakeWaiters();  // on-disconnect keys may have appeared
  }
}

}  // namespace zerorun::comm

// TcpStore: the client side of the rendezvous store. One blocking socket, one request in flight
// (serialised by mu_); every read and write is bounded by a deadline through poll(). Connecting
// retries with exponential backoff, because rank 0's server may start after the other ranks.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "zerorun/comm/store_protocol.h"
#include "zerorun/comm/tcp_store.h"
#include "zerorun/core/error.h"
#include "zerorun/core/limits.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"

namespace zerorun::comm {

namespace {

constexpr Millis kReplyGrace{5000};  // at least this much later than the server's own deadline we give up

enum class IoResult { kOk, kTimeout, kClosed, kError };

// Waits for `events` on fd until `deadline` (NowSeconds()); kOk when ready. Polls at least once even
// when the deadline has passed: a process that was stopped (SIGSTOP, a debugger, swapping) past its
// deadline finds the reply that arrived meanwhile instead of calling it a timeout.
IoResult PollUntil(int fd, short events, double deadline) {
  for (;;) {
    double left = deadline - NowSeconds();
    int ms = left <= 0 ? 0 : static_cast<int>(std::min(left, 3600.0) * 1e3) + 1;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return IoResult::kError;
    if (rc > 0) return IoResult::kOk;
    if (left <= 0) return IoResult::kTimeout;
  }
}

IoResult WriteAll(int fd, const std::string& data, double deadline) {
  size_t off = 0;
  while (off < data.size()) {
    IoResult r = PollUntil(fd, POLLOUT, deadline);
    if (r != IoResult::kOk) return r;
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return errno == EPIPE || errno == ECONNRESET ? IoResult::kClosed : IoResult::kError;
    }
  }
  return IoResult::kOk;
}

IoResult ReadExact(int fd, char* out, size_t bytes, double deadline) {
  size_t off = 0;
  while (off < bytes) {
    IoResult r = PollUntil(fd, POLLIN, deadline);
    if (r != IoResult::kOk) return r;
    ssize_t n = ::recv(fd, out + off, bytes - off, MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n == 0) {
      return IoResult::kClosed;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return errno == ECONNRESET ? IoResult::kClosed : IoResult::kError;
    }
  }
  return IoResult::kOk;
}

std::string JoinKeys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

void CheckKeyArg(const std::string& key, const std::string& where) {
  if (key.empty()) ZR_THROW(InvalidArgument, "store {}: empty key", where);
  if (key.size() > kStoreMaxKeyBytes) {
    ZR_THROW(InvalidArgument, "store {}: key '{}...' is {} bytes (limit {})", where, key.substr(0, 64),
             key.size(), kStoreMaxKeyBytes);
  }
}

void CheckValueArg(const std::string& key, const std::string& value, const std::string& where) {
  if (value.size() > kStoreMaxValueBytes) {
    ZR_THROW(InvalidArgument, "store {}: value for key '{}' is {} bytes (limit {})", where, key,
             value.size(), kStoreMaxValueBytes);
  }
}

}  // namespace

struct TcpStore::Reply {
  uint8_t status = 0;
  std::string payload;  // after the status byte
};

TcpStore::TcpStore(const TcpStoreOptions& options) : options_(options) {
  set_timeout(options.timeout);
  std::lock_guard<std::mutex> lock(mu_);
  Connect();
}

TcpStore::~TcpStore() { CloseConnection(); }

void TcpStore::CloseConnection() {
  std::lock_guard<std::mutex> lock(fd_mu_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TcpStore::Interrupt() {
  std::lock_guard<std::mutex> lock(fd_mu_);
  interrupted_ = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);  // wakes a poll() in Call; the owner closes the fd
}

// A frozen server is tolerated as long as a blocking call may wait anyway (the comm timeout for
// the stores InitFromEnv creates), and never less than kReplyGrace.
Millis TcpStore::ReplyGrace() const { return std::max(kReplyGrace, timeout()); }

std::string TcpStore::Describe() const { return Format("{}:{}", options_.host, options_.port); }

void TcpStore::Connect() {
  const std::string where = Describe();
  double deadline = NowSeconds() + std::chrono::duration<double>(options_.connect_timeout).count();
  double backoff = 0.01;
  std::string last = "no attempt";
  int attempts = 0;
  const double start = NowSeconds();
  double next_note = start + 10.0;  // waiting is normal (rank 0 starts late); a long wait is said
  for (;;) {
    ++attempts;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    std::string port = std::to_string(options_.port);
    int rc = ::getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) {
      last = Format("cannot resolve host: {}", gai_strerror(rc));
    } else {
      for (addrinfo* a = res; a && fd_ < 0; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
          int err = errno;
          ::freeaddrinfo(res);
          ZR_THROW(CommError, "store {}: {} ({}); raise the limit (ulimit -n)", where, ErrnoMessage("cannot open a socket", err),
                   OpenFileLimitText());
        }
        if (fd < 0) {
          last = ErrnoMessage("socket", errno);
          continue;
        }
        int c = ::connect(fd, a->ai_addr, a->ai_addrlen);
        if (c != 0 && errno == EINPROGRESS) {
          double d = std::min(deadline, NowSeconds() + 5.0);
          if (PollUntil(fd, POLLOUT, d) == IoResult::kOk) {
            int err = 0;
            socklen_t len = sizeof(err);
            ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            c = err == 0 ? 0 : -1;
            errno = err;
          } else {
            errno = ETIMEDOUT;
          }
        }
        if (c != 0) {
          last = ErrnoMessage("connect", errno);
          ::close(fd);
          continue;
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        // Authenticate: HELLO with the job token; the server answers OK or ERROR and closes.
        std::string hello = proto::Writer(proto::kHello).U32(proto::kMagic).Str(options_.token).Finish();
        double hd = std::min(deadline, NowSeconds() + 10.0);
        char hdr[4];
        IoResult r = WriteAll(fd, hello, hd);
        if (r == IoResult::kOk) r = ReadExact(fd, hdr, 4, hd);
        std::string payload;
        if (r == IoResult::kOk) {
          uint32_t len = proto::FrameLength(hdr);
          if (len == 0 || len > proto::kMaxHelloBytes) {
            ::close(fd);
            ::freeaddrinfo(res);
            ZR_THROW(CommError, "store {}: not a zerorun store (bad reply to HELLO)", where);
          }
          payload.resize(len);
          r = ReadExact(fd, payload.data(), len, hd);
        }
        if (r != IoResult::kOk) {
          last = r == IoResult::kTimeout ? "no answer to HELLO within 10 s (is something else listening on that port?)"
                                         : "connection closed during the handshake";
          ::close(fd);
          continue;
        }
        proto::Reader rd(payload);
        if (rd.U8() != proto::kOk) {
          std::string msg = rd.Str(proto::kMaxHelloBytes);
          ::close(fd);
          ::freeaddrinfo(res);
          ZR_THROW(CommError, "store {}: connection refused by the server: {} (the port belongs to another job, "
                   "or this rank was given a different ZERORUN_JOB_TOKEN than rank 0)", where, msg);
        }
        std::lock_guard<std::mutex> fd_lock(fd_mu_);
        fd_ = fd;
      }
      ::freeaddrinfo(res);
    }
    if (fd_ >= 0) {
      ZR_DEBUG("store: connected to {} after {} attempt(s)", where, attempts);
      return;
    }
    if (NowSeconds() + backoff > deadline) {
      ZR_THROW(CommError, "store {}: could not connect within {} ms ({} attempts; last error: {})", where,
               options_.connect_timeout.count(), attempts, last);
    }
    if (NowSeconds() >= next_note) {
      ZR_WARN("store {}: still not reachable after {} s ({}); retrying for up to {} s more", where,
              static_cast<int64_t>(NowSeconds() - start), last, static_cast<int64_t>(deadline - NowSeconds()));
      next_note = NowSeconds() + 60.0;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(backoff * 2, 1.0);
  }
}

TcpStore::Reply TcpStore::Call(const std::string& request, const std::string& key, Millis reply_timeout) {
  return CallUntil(request, key, NowSeconds() + std::chrono::duration<double>(reply_timeout).count(), reply_timeout);
}

TcpStore::Reply TcpStore::CallUntil(const std::string& request, const std::string& key, double deadline,
                                    Millis shown_timeout) {
  const std::string where = Describe();
  {
    std::lock_guard<std::mutex> lock(fd_mu_);
    if (interrupted_) ZR_THROW(CommError, "store {}: the connection was shut down by this process (key {})", where, key);
  }
  if (fd_ < 0) {
    // A lost or desynchronised connection is not silently replaced: the server may be gone, and
    // this client's on-disconnect registration died with the old connection.
    ZR_THROW(CommError, "store {}: the connection was lost earlier (key {})", where, key);
  }
  auto fail = [&](IoResult r, const char* phase) {
    int err = errno;
    CloseConnection();
    if (r == IoResult::kTimeout) {
      ZR_THROW(StoreUnresponsiveError, "store {}: the server did not answer within {} ms while {} (key {}); the "
               "process hosting it (rank 0) is frozen or its host is unreachable", where, shown_timeout.count(), phase, key);
    }
    if (r == IoResult::kClosed) {
      ZR_THROW(CommError, "store {}: the server closed the connection while {} (key {})", where, phase, key);
    }
    ZR_THROW(CommError, "store {}: {} while {} (key {})", where, ErrnoMessage("socket error", err), phase, key);
  };
  IoResult r = WriteAll(fd_, request, deadline);
  if (r != IoResult::kOk) fail(r, "sending");
  // The server gets the whole reply timeout from when the request left: a process stopped (SIGSTOP, a
  // debugger, swapping) after its caller took the time but before sending would otherwise find the
  // deadline gone before the server had even seen the request (seen in CI, once in ~20k calls).
  deadline = std::max(deadline, NowSeconds() + std::chrono::duration<double>(shown_timeout).count());
  char hdr[4];
  r = ReadExact(fd_, hdr, 4, deadline);
  if (r != IoResult::kOk) fail(r, "waiting for the reply");
  uint32_t len = proto::FrameLength(hdr);
  if (len == 0 || len > kStoreMaxValueBytes + 64) {
    CloseConnection();
    ZR_THROW(CommError, "store {}: malformed reply of {} bytes (key {})", where, len, key);
  }
  Reply reply;
  std::string payload(len, '\0');
  r = ReadExact(fd_, payload.data(), len, deadline);
  if (r != IoResult::kOk) fail(r, "reading the reply");
  reply.status = static_cast<uint8_t>(payload[0]);
  reply.payload = payload.substr(1);
  if (reply.status == proto::kInvalid) {
    proto::Reader rd(reply.payload);
    ZR_THROW(InvalidArgument, "store {}: key {}: {}", where, key, rd.Str(kStoreMaxValueBytes));
  }
  if (reply.status == proto::kError) {
    proto::Reader rd(reply.payload);
    ZR_THROW(CommError, "store {}: server error for key {}: {}", where, key, rd.Str(kStoreMaxValueBytes));
  }
  return reply;
}

void TcpStore::Set(const std::string& key, const std::string& value) {
  CheckKeyArg(key, Describe());
  CheckValueArg(key, value, Describe());
  std::lock_guard<std::mutex> lock(mu_);
  Call(proto::Writer(proto::kSet).Str(key).Str(value).Finish(), "'" + key + "'", timeout());
}

std::string TcpStore::Get(const std::string& key, Millis timeout) {
  CheckKeyArg(key, Describe());
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(proto::Writer(proto::kGet).Str(key).I64(timeout.count()).Finish(), "'" + key + "'",
                 timeout + ReplyGrace());
  if (r.status == proto::kTimeout) {
    ZR_THROW(TimeoutError, "store {}: timed out after {} ms waiting for key '{}'", Describe(), timeout.count(),
             key);
  }
  proto::Reader rd(r.payload);
  return rd.Str(kStoreMaxValueBytes);
}

int64_t TcpStore::Add(const std::string& key, int64_t delta) {
  CheckKeyArg(key, Describe());
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(proto::Writer(proto::kAdd).Str(key).I64(delta).Finish(), "'" + key + "'", timeout());
  proto::Reader rd(r.payload);
  return rd.I64();
}

std::string TcpStore::CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) {
  CheckKeyArg(key, Describe());
  CheckValueArg(key, expected, Describe());
  CheckValueArg(key, desired, Describe());
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(proto::Writer(proto::kCas).Str(key).Str(expected).Str(desired).Finish(), "'" + key + "'",
                 timeout());
  proto::Reader rd(r.payload);
  return rd.Str(kStoreMaxValueBytes);
}

bool TcpStore::Delete(const std::string& key) {
  CheckKeyArg(key, Describe());
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(proto::Writer(proto::kDelete).Str(key).Finish(), "'" + key + "'", timeout());
  proto::Reader rd(r.payload);
  return rd.I64() != 0;
}

bool TcpStore::Check(const std::vector<std::string>& keys) {
  if (keys.size() > kStoreMaxKeysPerWait) ZR_THROW(InvalidArgument, "store {}: Check of {} keys (limit {})", Describe(), keys.size(), kStoreMaxKeysPerWait);
  proto::Writer w(proto::kCheck);
  w.U32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    CheckKeyArg(k, Describe());
    w.Str(k);
  }
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(w.Finish(), JoinKeys(keys), timeout());
  proto::Reader rd(r.payload);
  return rd.I64() != 0;
}

void TcpStore::Wait(const std::vector<std::string>& keys, Millis timeout) {
  if (keys.size() > kStoreMaxKeysPerWait) ZR_THROW(InvalidArgument, "store {}: Wait on {} keys (limit {})", Describe(), keys.size(), kStoreMaxKeysPerWait);
  proto::Writer w(proto::kWait);
  w.U32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    CheckKeyArg(k, Describe());
    w.Str(k);
  }
  w.I64(timeout.count());
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(w.Finish(), JoinKeys(keys), timeout + ReplyGrace());
  if (r.status == proto::kTimeout) {
    ZR_THROW(TimeoutError, "store {}: timed out after {} ms waiting for keys {}", Describe(), timeout.count(),
             JoinKeys(keys));
  }
}

int64_t TcpStore::NumKeys() {
  std::lock_guard<std::mutex> lock(mu_);
  Reply r = Call(proto::Writer(proto::kNumKeys).Finish(), "(num_keys)", timeout());
  proto::Reader rd(r.payload);
  return rd.I64();
}

void TcpStore::SetOnDisconnect(const std::string& key, const std::string& value) {
  CheckKeyArg(key, Describe());
  CheckValueArg(key, value, Describe());
  std::lock_guard<std::mutex> lock(mu_);
  Call(proto::Writer(proto::kSetOnDisc).Str(key).Str(value).Finish(), "'" + key + "'", timeout());
}

void TcpStore::ClearOnDisconnect() {
  std::lock_guard<std::mutex> lock(mu_);
  Call(proto::Writer(proto::kClearOnDisc).Finish(), "(on-disconnect)", timeout());
}

std::map<std::string, std::string> TcpStore::GetExisting(const std::vector<std::string>& keys, Millis timeout) {
  for (const auto& k : keys) CheckKeyArg(k, Describe());
  std::lock_guard<std::mutex> lock(mu_);
  const double deadline = NowSeconds() + std::chrono::duration<double>(timeout).count();
  std::map<std::string, std::string> out;
  for (const auto& k : keys) {  // GET with a zero wait: the server answers at once, value or TIMEOUT
    Reply r = CallUntil(proto::Writer(proto::kGet).Str(k).I64(0).Finish(), "'" + k + "'", deadline, timeout);
    if (r.status == proto::kTimeout) continue;
    proto::Reader rd(r.payload);
    out[k] = rd.Str(kStoreMaxValueBytes);
  }
  return out;
}

std::unique_ptr<Store> TcpStore::Clone() {
  TcpStoreOptions o = options_;
  o.timeout = timeout();
  return std::make_unique<TcpStore>(o);
}

}  // namespace zerorun::comm

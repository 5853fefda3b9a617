// The TCP rendezvous store. StoreServer runs inside rank 0 at MASTER_ADDR:MASTER_PORT (as torch's
// TCPStore); TcpStore is the client every rank (rank 0 included) connects with, retrying with
// exponential backoff until a deadline.
//
// Wire format (comm/store_protocol.h): length-prefixed frames; the first frame of a connection must be
// HELLO carrying the job token (ZERORUN_JOB_TOKEN), otherwise the server answers "refused" and closes.
// The server is one thread running a poll() loop over non-blocking sockets: a slow, silent or garbage-
// sending client only ever loses its own connection (frames over the size limits, unknown opcodes,
// malformed fields, more than 10 s before HELLO, or unread replies piling up all close it).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "zerorun/comm/store.h"

namespace zerorun::comm {

inline constexpr size_t kStoreMaxKeyBytes = 4096;
inline constexpr size_t kStoreMaxValueBytes = 64u << 20;  // 64 MiB
inline constexpr size_t kStoreMaxKeysPerWait = 4096;

struct StoreServerOptions {
  // Interface to bind ("" or "0.0.0.0": all IPv4 interfaces; "::" all IPv6 interfaces).
  std::string host = "";
  // Port to listen on; 0 picks a free port (see StoreServer::port()).
  int port = 0;
  // Every client must present this token in its first message. "" accepts only an empty token.
  std::string token = "";
  // Listen backlog.
  int backlog = 1024;
};

// Owns the listening socket and the server thread. Starting binds and listens (SO_REUSEADDR) before
// returning, so clients may connect right away; a bind failure throws CommError naming host:port.
// Destruction (or Stop) closes every connection; clients blocked in Get/Wait then get a CommError.
class StoreServer {
 public:
  explicit StoreServer(const StoreServerOptions& options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  void Stop();
  // Counters for tests and diagnostics.
  int64_t connections_accepted() const { return accepted_.load(); }
  int64_t connections_refused() const;  // bad token or garbage

 private:
  struct Impl;
  void Run();
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int64_t> accepted_{0};
  std::atomic<bool> stopped_{false};
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  // Sent in the HELLO frame; must equal the server's.
  std::string token = "";
  // How long to keep retrying the connection (backoff 10 ms doubling to 1 s) before CommError.
  Millis connect_timeout{60'000};
  // Default timeout of blocking calls (Get, Wait) and of every reply.
  Millis timeout{300'000};
};

// One connection; calls are serialised by a mutex (use Clone() for a second connection when one
// thread blocks in Wait while others must keep going).
//
// A server that stops answering (its process frozen) is waited for max(5 s, timeout()) beyond the
// call's own wait, then the call throws StoreUnresponsiveError and the connection is closed; a
// connection the server closed throws CommError. A client that was itself frozen reads a reply that
// arrived meanwhile instead of calling it a timeout.
class TcpStore final : public Store {
 public:
  explicit TcpStore(const TcpStoreOptions& options);
  ~TcpStore() override;

  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key, Millis timeout) override;
  using Store::Get;
  int64_t Add(const std::string& key, int64_t delta) override;
  std::string CompareSet(const std::string& key, const std::string& expected,
                         const std::string& desired) override;
  bool Delete(const std::string& key) override;
  bool Check(const std::vector<std::string>& keys) override;
  void Wait(const std::vector<std::string>& keys, Millis timeout) override;
  using Store::Wait;
  int64_t NumKeys() override;
  void SetOnDisconnect(const std::string& key, const std::string& value) override;
  void ClearOnDisconnect() override;
  std::unique_ptr<Store> Clone() override;
  std::map<std::string, std::string> GetExisting(const std::vector<std::string>& keys, Millis timeout) override;
  void Interrupt() override;
  std::string Describe() const override;

 private:
  struct Reply;
  Reply Call(const std::string& request, const std::string& key, Millis reply_timeout);
  Reply CallUntil(const std::string& request, const std::string& key, double deadline, Millis shown_timeout);
  void Connect();
  void CloseConnection();
  Millis ReplyGrace() const;
  TcpStoreOptions options_;
  std::mutex mu_;      // one request in flight
  std::mutex fd_mu_;   // fd_ against Interrupt() from another thread
  int fd_ = -1;
  bool interrupted_ = false;
};

}  // namespace zerorun::comm

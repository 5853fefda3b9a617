// The rendezvous key/value store: how ranks find each other (UCX worker addresses, the NCCL unique
// id), agree on small facts (Split's membership) and learn of failures (the abort key). Modelled on
// c10d's Store: set/get/add/compare-set/delete/wait with a timeout on every blocking call.
//
// Implementations: TcpStore (comm/tcp_store.h; the real one, a server inside rank 0), HashStore (in
// memory, for the `local` backend and tests), PrefixStore (a namespaced view of another store, so
// several groups and restart generations share one server without seeing each other's keys).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "zerorun/core/error.h"

namespace zerorun::comm {

using Millis = std::chrono::milliseconds;

// The store's server did not answer a request in time: the process hosting it (the job's rank 0) is
// frozen (stopped, swapping, in a debugger) or its host is unreachable. The client's connection is
// closed. A TimeoutError, but distinct from "the key did not appear in time", which the server
// itself reports.
class StoreUnresponsiveError final : public TimeoutError {
 public:
  using TimeoutError::TimeoutError;
};

// Keys are non-empty byte strings; values are arbitrary byte strings (binary-safe).
//
// Thread safety: every method may be called from several threads at once.
// Errors: TimeoutError (a CommError) when a blocking call runs past its timeout; CommError when the
// store cannot be reached or its connection closed; StoreUnresponsiveError when the server stopped
// answering (TcpStore tolerates that for max(5 s, timeout()) beyond the call's own wait);
// InvalidArgument for an empty key or an over-long key/value. Every message names the key (and,
// for TcpStore, host:port).
class Store {
 public:
  virtual ~Store() = default;

  virtual void Set(const std::string& key, const std::string& value) = 0;
  // Waits up to `timeout` for `key` to exist, then returns its value.
  virtual std::string Get(const std::string& key, Millis timeout) = 0;
  std::string Get(const std::string& key) { return Get(key, timeout()); }
  // Atomically adds `delta` to the integer stored at `key` (absent counts as 0); returns the new value.
  // A value that is not a decimal integer is an InvalidArgument.
  virtual int64_t Add(const std::string& key, int64_t delta) = 0;
  // Atomically: if the key's current value equals `expected` (absent equals only ""), store `desired`.
  // Returns the value stored after the call (== desired on success). Absent and expected != "":
  // nothing is stored and "" is returned.
  virtual std::string CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) = 0;
  // Returns whether the key existed.
  virtual bool Delete(const std::string& key) = 0;
  // Non-blocking: whether every key exists.
  virtual bool Check(const std::vector<std::string>& keys) = 0;
  // Waits until every key exists; TimeoutError naming the missing keys after `timeout`.
  virtual void Wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  void Wait(const std::vector<std::string>& keys) { Wait(keys, timeout()); }
  // Number of keys in the whole store (a PrefixStore counts the whole store too, as c10d does).
  virtual int64_t NumKeys() = 0;

  // Liveness: when this client's connection to the server ends without ClearOnDisconnect (the
  // process died), the server stores `value` at `key` unless the key already exists. HashStore has no
  // connection and ignores it. One registration per client; a new one replaces the old.
  virtual void SetOnDisconnect(const std::string& key, const std::string& value) = 0;
  virtual void ClearOnDisconnect() = 0;

  // A second client of the same store (a new connection for TcpStore), for a thread that blocks in
  // Wait while others keep using this one. Same prefix for a PrefixStore.
  virtual std::unique_ptr<Store> Clone() = 0;

  // Diagnostics: the values of those `keys` that exist now (missing ones are left out of the
  // result), never waiting for a missing key. The whole call takes at most about `timeout`, even
  // when the server does not answer (StoreUnresponsiveError). Reads heartbeats after a timeout.
  virtual std::map<std::string, std::string> GetExisting(const std::vector<std::string>& keys, Millis timeout);
  // Makes a call blocked on this client in another thread fail promptly with CommError, and every
  // later call too (TcpStore shuts its connection down). For shutdown paths that must not wait for
  // an unresponsive server. Safe from any thread; a no-op for HashStore.
  virtual void Interrupt() {}

  // Where the store lives, for messages ("host:port", "in-memory").
  virtual std::string Describe() const = 0;

  Millis timeout() const { return timeout_; }
  void set_timeout(Millis t) { timeout_ = t; }

 protected:
  Millis timeout_{300'000};
};

// An in-memory store shared by threads of one process (the `local` backend's rendezvous).
class HashStore final : public Store {
 public:
  HashStore();
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
  void SetOnDisconnect(const std::string&, const std::string&) override {}
  void ClearOnDisconnect() override {}
  std::unique_ptr<Store> Clone() override;
  std::string Describe() const override { return "in-memory store"; }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, std::string> kv;
  };
  explicit HashStore(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

// A view of `base` where every key is "<prefix>/<key>". Owns a share of the base store.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
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
  void Interrupt() override { base_->Interrupt(); }
  std::string Describe() const override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string Key(const std::string& key) const;
  std::vector<std::string> Keys(const std::vector<std::string>& keys) const;
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace zerorun::comm

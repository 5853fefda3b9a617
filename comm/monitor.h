// Monitor: one per process, the liveness side of a multi-process job. Through its own store
// connection it
//   - registers an on-disconnect key ("abort" in the job's generation prefix): when this process dies
//     the store server writes "rank R (host H, pid P) died ..." there;
//   - watches that key, and when any rank's death (or a rank's explicit abort) appears, aborts every
//     registered communicator with a CommError carrying the message, within about 100 ms;
//   - publishes each registered group's heartbeat "<group>/hb/<rank>" = "<seq> <op> <unix_ms>" about
//     every 500 ms, which a timing-out rank reads to name the ranks that did not arrive or stopped.
// Losing the store connection itself (rank 0, which hosts the server, died) also aborts everything.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zerorun/comm/store.h"

namespace zerorun::comm {

class Communicator;

class Monitor {
 public:
  // `store` is the job's generation-prefixed store; the monitor clones it (a second connection).
  Monitor(Store& store, int rank, std::string host);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Heartbeats of `comm` go to "<comm->name()>/hb/<comm->rank()>" in the generation store.
  void Register(Communicator* comm);
  void Unregister(Communicator* comm);
  // Writes the abort key (first writer wins) so every rank's communicators abort with `reason`.
  void AbortJob(const std::string& reason);
  // Clean shutdown: stops the thread and clears the on-disconnect key so exiting is not a death.
  void Stop();
  // The abort message seen so far ("" if none).
  std::string abort_reason() const;
  // A communicator of this process failed (e.g. timed out): a clean check-out is not expected.
  void NoteLocalFailure() { local_failure_ = true; }
  bool local_failure() const { return local_failure_.load(); }

 private:
  void Run();
  void AbortAll(const std::string& reason);

  std::shared_ptr<Store> store_;
  int rank_;
  std::string host_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Entry {
    Communicator* comm;
    std::shared_ptr<Store> store;
  };
  std::vector<Entry> entries_;
  std::string abort_reason_;
  bool stop_ = false;
  std::atomic<bool> local_failure_{false};
  std::thread thread_;
};

}  // namespace zerorun::comm

// Monitor: one per process, the liveness side of a multi-process job. Through its own store
// connection it
//   - registers an on-disconnect key ("abort" in the job's generation prefix): when this process dies
//     its connection closes and the store server writes "rank R (host H, pid P) died ..." there;
//   - watches that key, and when any rank's death (or a rank's explicit abort) appears, aborts every
//     registered communicator with a CommError carrying the message, within about 100 ms;
//   - publishes this process's heartbeat "alive/<rank>" = "<unix_ms>" and each registered group's
//     heartbeat "<group>/hb/<rank>" = "<seq> <op> <unix_ms>" about
//     every 500 ms, which a timing-out rank reads to tell a FROZEN peer (connection open, no
//     heartbeat) from one that is alive but did not arrive;
//   - watches for ranks that left the job cleanly ("left/<rank>" = the world group's last op, written
//     at check-out) while this rank has entered a world collective they never joined, or has waited
//     through two checks (0.5 s apart) on a world send/recv with one of them, and aborts the job
//     naming them (a rank that returned early);
//   - tells the two ways of losing the store host apart: its connection closed (rank 0 died) or it
//     stopped answering for the comm timeout (rank 0 is FROZEN or unreachable). A store host frozen
//     for less than the comm timeout is waited for.
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

// What the other ranks' process heartbeats ("alive/<rank>", written by their monitors every 0.5 s)
// say about `ranks`, for a rendezvous or backend setup that timed out: "rank 1: FROZEN (no heartbeat
// for 12 s)", "rank 2: never connected to the store", "rank 3: alive". Bounded (2 s) even when the
// store does not answer.
std::string DescribeRankLiveness(Store& gen_store, const std::vector<int>& ranks);

class Monitor {
 public:
  // `store` is the job's generation-prefixed store; the monitor clones it (a second connection).
  Monitor(Store& store, int rank, std::string host);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // Heartbeats of `comm` go to "<comm->name()>/hb/<comm->rank()>" in the generation store.
  void Register(Communicator* comm);
  // Before `comm` goes away. Remembers the world group's last op (for "left/<rank>") and, if the
  // communicator failed, its error (see local_failure_reason()).
  void Unregister(Communicator* comm);
  // Writes the abort key (first writer wins) so every rank's communicators abort with `reason`.
  void AbortJob(const std::string& reason);
  // Clean shutdown: stops the thread and clears the on-disconnect key so exiting is not a death.
  // Bounded even when the store host is frozen (the blocked call is interrupted after 5 s).
  void Stop();
  // The abort message seen so far ("" if none).
  std::string abort_reason() const;
  // A communicator of this process failed (e.g. timed out): a clean check-out is not expected.
  void NoteLocalFailure() { local_failure_ = true; }
  bool local_failure() const { return local_failure_.load(); }
  // The first error of a communicator of this process that failed ("" if none or unknown).
  std::string local_failure_reason() const;
  // The store host could not be reached any more (died or frozen): skip every further store call.
  bool store_lost() const { return store_lost_.load(); }
  // "<seq> <op>" of the world group when it was unregistered ("0 none" before).
  std::string world_final_op() const;

 private:
  void Run();
  void Beat();
  void CheckLeftRanks();
  std::string LeftPeerOfPendingP2P(const Communicator& world);
  void AbortAll(const std::string& reason);
  std::string StoreHostName() const;

  std::shared_ptr<Store> store_;
  int rank_;
  std::string host_;
  mutable std::mutex mu_;
  std::mutex write_mu_;  // orders group heartbeat writes (Beat) before Unregister's last one
  std::condition_variable cv_;
  struct Entry {
    Communicator* comm;
    std::shared_ptr<Store> store;
  };
  std::vector<Entry> entries_;
  std::string abort_reason_;
  std::string local_failure_reason_;
  std::string world_final_op_ = "0 none";
  std::string store_host_ = "?";  // host of rank 0, from the world group
  int world_size_ = 0;
  int64_t left_seen_ = 0;         // check-outs counted so far
  std::vector<std::pair<int, uint64_t>> left_;  // (rank, last world seq) of ranks that left
  std::vector<uint64_t> p2p_waiting_on_left_;    // world send/recv seqs pending on a left rank at the last check
  bool stop_ = false;
  bool thread_done_ = false;
  std::atomic<double> call_since_{0};  // NowSeconds() when the thread's current store call began, 0 if none
  std::atomic<bool> local_failure_{false};
  std::atomic<bool> store_lost_{false};
  std::thread thread_;
};

}  // namespace zerorun::comm

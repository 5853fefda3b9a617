// Monitor: heartbeats out; deaths, frozen store hosts and ranks that left early in (see monitor.h).
#include "zerorun/comm/monitor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"

namespace zerorun::comm {

namespace {
constexpr const char* kAbortKey = "abort";
constexpr const char* kCheckoutKey = "checkout";  // Session (init.cc) counts check-outs here
constexpr double kHeartbeatPeriodS = 0.5;
constexpr Millis kWatchSlice{100};
constexpr double kInterruptAfterS = 5.0;  // Stop(): a store call blocked this long is interrupted

// "<seq> <op> <unix_ms>" (Communicator::HeartbeatValue) → seq and op.
std::pair<uint64_t, std::string> ParseBeat(const std::string& v) {
  std::istringstream is(v);
  uint64_t seq = 0;
  std::string op = "none";
  is >> seq >> op;
  return {seq, op};
}

bool IsCollective(const std::string& op) { return op != "send" && op != "recv" && op != "none"; }

double WallMs() {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

constexpr double kFrozenAfterMs = 3000;  // six missed process heartbeats
}  // namespace

std::string DescribeRankLiveness(Store& gen_store, const std::vector<int>& ranks) {
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back(Format("alive/{}", r));
  std::map<std::string, std::string> beats;
  try {
    beats = gen_store.GetExisting(keys, Millis(2000));
  } catch (const StoreUnresponsiveError&) {
    return "the rendezvous store did not answer within 2 s: rank 0, which hosts it, is FROZEN or unreachable";
  } catch (const Error& e) {
    return Format("could not read heartbeats: {}", e.what());
  }
  std::string out;
  const double now = WallMs();
  for (int r : ranks) {
    auto it = beats.find(Format("alive/{}", r));
    std::string state;
    if (it == beats.end()) {
      state = "never connected to the store (not started, failed or stuck before comm::InitFromEnv, or frozen then)";
    } else {
      const double age_ms = now - std::atof(it->second.c_str());
      state = age_ms > kFrozenAfterMs
                  ? Format("FROZEN (no heartbeat for {} s, its store connection open: stopped, in a debugger, "
                           "swapping)", static_cast<int64_t>(age_ms / 1e3))
                  : std::string("alive (busy elsewhere?)");
    }
    out += Format("{}rank {}: {}", out.empty() ? "" : "; ", r, state);
  }
  return out;
}

Monitor::Monitor(Store& store, int rank, std::string host)
    : store_(store.Clone()), rank_(rank), host_(std::move(host)) {
  store_->SetOnDisconnect(kAbortKey, Format("rank {} (host {}, pid {}) died: its connection to the rendezvous store closed "
                                            "(killed, crashed, or exited without shutting down its communicator)",
                                            rank_, host_, ::getpid()));
  thread_ = std::thread([this] { Run(); });
}

Monitor::~Monitor() { Stop(); }

void Monitor::Register(Communicator* comm) {
  auto group = std::make_shared<PrefixStore>(comm->name(), store_);
  try {  // the first heartbeat at once, so even a rank that stops right away has one
    if (!store_lost_) group->Set(Format("hb/{}", comm->rank()), comm->HeartbeatValue());
  } catch (const Error& e) {
    ZR_WARN("heartbeat of group '{}': {}", comm->name(), e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (comm->name() == "world") {
    world_size_ = comm->size();
    if (!comm->hosts().empty()) store_host_ = comm->hosts()[0];
  }
  entries_.push_back({comm, std::move(group)});
  if (!abort_reason_.empty()) comm->Abort(abort_reason_);
}

void Monitor::Unregister(Communicator* comm) {
  std::lock_guard<std::mutex> write(write_mu_);
  std::shared_ptr<Store> group;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm->name() == "world") {
      auto [seq, op] = ParseBeat(comm->HeartbeatValue());
      world_final_op_ = Format("{} {}", seq, op);
    }
    if (comm->aborted() && local_failure_reason_.empty()) local_failure_reason_ = comm->abort_reason();
    for (const Entry& e : entries_) {
      if (e.comm == comm) group = e.store;
    }
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.comm == comm; }),
                   entries_.end());
  }
  // A clean end: the last heartbeat says so, so a peer that times out waiting for this rank reads
  // "left the job", not FROZEN.
  if (group && !comm->aborted() && !store_lost_) {
    try {
      group->Set(Format("hb/{}", comm->rank()), comm->HeartbeatValue() + " left");
    } catch (const Error& e) {
      ZR_DEBUG("last heartbeat of group '{}': {}", comm->name(), e.what());
    }
  }
}

std::string Monitor::abort_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abort_reason_;
}

std::string Monitor::local_failure_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return local_failure_reason_;
}

std::string Monitor::world_final_op() const {
  std::lock_guard<std::mutex> lock(mu_);
  return world_final_op_;
}

std::string Monitor::StoreHostName() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (store_host_ == "?") return "rank 0 (the rendezvous store host)";  // before the world group exists
  return Format("rank 0 (host {}, the rendezvous store host)", store_host_);
}

void Monitor::AbortAll(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abort_reason_.empty()) abort_reason_ = reason;
  for (auto& e : entries_) e.comm->Abort(abort_reason_);
}

void Monitor::AbortJob(const std::string& reason) {
  std::string winner = reason;
  if (!store_lost_) {
    try {
      std::string stored = store_->CompareSet(kAbortKey, "", reason);
      if (!stored.empty()) winner = stored;  // another rank's reason came first
    } catch (const Error& e) {
      ZR_WARN("could not publish the abort reason: {}", e.what());
    }
  }
  AbortAll(winner);
}

void Monitor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  // The thread notices within one watch slice, unless it is blocked on a store host that stopped
  // answering: then its call is interrupted (the server would otherwise hold this exit for the comm
  // timeout).
  bool interrupted = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (!thread_done_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      const double since = call_since_;
      if (!thread_done_ && !interrupted && since > 0 && NowSeconds() - since > kInterruptAfterS) {
        lock.unlock();
        store_->Interrupt();
        interrupted = true;
        lock.lock();
      }
    }
  }
  if (thread_.joinable()) thread_.join();
  if (interrupted || store_lost_) return;  // nothing to tell a store we cannot reach
  try {
    store_->ClearOnDisconnect();
  } catch (const Error&) {
  }
}

void Monitor::Beat() {
  store_->Set(Format("alive/{}", rank_), Format("{}", static_cast<int64_t>(WallMs())));
  std::lock_guard<std::mutex> write(write_mu_);  // never after Unregister's last heartbeat
  std::vector<Entry> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries = entries_;
  }
  // A comm is alive while listed (it unregisters before destruction), so it is only touched under
  // the lock; the store write happens outside it.
  for (auto& e : entries) {
    std::string v;
    int rank = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      bool still = std::any_of(entries_.begin(), entries_.end(), [&](const Entry& x) { return x.comm == e.comm; });
      if (!still) continue;
      v = e.comm->HeartbeatValue();
      rank = e.comm->rank();
    }
    e.store->Set(Format("hb/{}", rank), v);
  }
}

// A send/recv of the world group waiting on a rank that left never completes. A message that rank
// sent just before leaving may still be on its way, so an op counts only once it was pending at two
// checks in a row (0.5 s apart). Returns the abort reason, or "".
std::string Monitor::LeftPeerOfPendingP2P(const Communicator& world) {
  std::vector<uint64_t> waiting;
  std::string reason;
  for (const Communicator::PendingP2P& p : world.PendingP2POps()) {
    auto left = std::find_if(left_.begin(), left_.end(), [&](const auto& l) { return l.first == p.peer; });
    if (left == left_.end()) continue;
    waiting.push_back(p.seq);
    const bool seen = std::find(p2p_waiting_on_left_.begin(), p2p_waiting_on_left_.end(), p.seq) !=
                      p2p_waiting_on_left_.end();
    if (!seen || !reason.empty()) continue;
    const bool send = p.op == OpType::kSend;
    reason = Format("rank {} (host {}) left the job: it finished cleanly after op #{} of group 'world', but rank {} "
                    "waits in {} #{} {} it, which rank {} will never match (did that rank return early, or skip a "
                    "send/recv in rank-conditional code?)",
                    p.peer, p.peer < static_cast<int>(world.hosts().size()) ? world.hosts()[static_cast<size_t>(p.peer)] : "?",
                    left->second, rank_, send ? "send" : "recv", p.seq, send ? "to" : "from", p.peer);
  }
  p2p_waiting_on_left_ = std::move(waiting);
  return reason;
}

// A rank that checked out cleanly after world op #s never joins op #s+1: a rank of this process
// waiting in a later world collective would only time out. Abort the job now, naming the rank.
void Monitor::CheckLeftRanks() {
  int world = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    world = world_size_;
  }
  if (world <= 1) return;
  auto count = store_->GetExisting({kCheckoutKey}, store_->timeout());
  int64_t n = count.empty() ? 0 : std::atoll(count.begin()->second.c_str());
  if (n > left_seen_) {
    left_seen_ = n;
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) {
      bool known = std::any_of(left_.begin(), left_.end(), [&](const auto& p) { return p.first == r; });
      if (r != rank_ && !known) keys.push_back(Format("left/{}", r));
    }
    for (const auto& [k, v] : store_->GetExisting(keys, store_->timeout())) {
      left_.emplace_back(std::atoi(k.c_str() + 5), ParseBeat(v).first);
    }
  }
  if (left_.empty()) return;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_) {
      if (e.comm->name() != "world") continue;
      reason = LeftPeerOfPendingP2P(*e.comm);
      if (!reason.empty()) break;
      auto [seq, op] = ParseBeat(e.comm->HeartbeatValue());
      if (!IsCollective(op)) break;
      for (const auto& [r, left_seq] : left_) {
        if (seq <= left_seq) continue;
        reason = Format("rank {} (host {}) left the job: it finished cleanly after op #{} of group 'world', but rank {} "
                        "is in {} #{}, which rank {} will never join (did that rank return early, or skip a "
                        "collective in rank-conditional code?)",
                        r, r < static_cast<int>(e.comm->hosts().size()) ? e.comm->hosts()[static_cast<size_t>(r)] : "?",
                        left_seq, rank_, op, seq, r);
        break;
      }
      break;
    }
  }
  if (!reason.empty()) {
    ZR_ERROR("aborting the job: {}", reason);
    AbortJob(reason);
  }
}

void Monitor::Run() {
  SetThreadLogRank(rank_);
  double next_beat = 0;
  auto stopping = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  };
  auto fail = [&](const std::string& reason) {
    ZR_ERROR("aborting communicators: {}", reason);
    AbortAll(reason);
  };
  for (;;) {
    if (stopping()) break;
    call_since_ = NowSeconds();
    try {
      if (NowSeconds() >= next_beat) {
        Beat();
        CheckLeftRanks();
        next_beat = NowSeconds() + kHeartbeatPeriodS;
        call_since_ = NowSeconds();
      }
      std::string reason;
      try {
        reason = store_->Get(kAbortKey, kWatchSlice);  // parks on the server: one round trip per slice
      } catch (const StoreUnresponsiveError&) {
        throw;
      } catch (const TimeoutError&) {
        continue;  // no abort yet
      }
      fail(reason);
      break;
    } catch (const StoreUnresponsiveError& e) {
      if (stopping()) break;
      store_lost_ = true;
      fail(Format("{} is FROZEN or unreachable: the rendezvous store it hosts has not answered for {} s although "
                  "its connection is open (the process is stopped (SIGSTOP, a suspended job), in a debugger, "
                  "swapping, or its host is cut off)",
                  StoreHostName(), static_cast<int64_t>(NowSeconds() - call_since_)));
      break;
    } catch (const CommError& e) {
      if (stopping()) break;
      store_lost_ = true;
      fail(Format("{} died: its rendezvous store connection closed ({})", StoreHostName(), e.what()));
      break;
    } catch (const Error& e) {  // e.g. a malformed counter: keep watching
      ZR_WARN("monitor: {}", e.what());
      std::this_thread::sleep_for(kWatchSlice);
    }
  }
  call_since_ = 0;
  std::lock_guard<std::mutex> lock(mu_);
  thread_done_ = true;
  cv_.notify_all();
}

}  // namespace zerorun::comm

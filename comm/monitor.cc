// Monitor: heartbeats out, deaths in (see monitor.h).
#include "zerorun/comm/monitor.h"

#include <unistd.h>

#include <algorithm>

#include "zerorun/comm/communicator.h"
#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"

namespace zerorun::comm {

namespace {
constexpr const char* kAbortKey = "abort";
constexpr double kHeartbeatPeriodS = 0.5;
constexpr Millis kWatchSlice{100};
}  // namespace

Monitor::Monitor(Store& store, int rank, std::string host)
    : store_(store.Clone()), rank_(rank), host_(std::move(host)) {
  store_->SetOnDisconnect(kAbortKey, Format("rank {} (host {}, pid {}) died: its connection to the rendezvous store closed",
                                            rank_, host_, ::getpid()));
  thread_ = std::thread([this] { Run(); });
}

Monitor::~Monitor() { Stop(); }

void Monitor::Register(Communicator* comm) {
  auto group = std::make_shared<PrefixStore>(comm->name(), store_);
  try {  // the first heartbeat at once, so even a rank that stops right away has one
    group->Set(Format("hb/{}", comm->rank()), comm->HeartbeatValue());
  } catch (const Error& e) {
    ZR_WARN("heartbeat of group '{}': {}", comm->name(), e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  entries_.push_back({comm, std::move(group)});
  if (!abort_reason_.empty()) comm->Abort(abort_reason_);
}

void Monitor::Unregister(Communicator* comm) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.comm == comm; }),
                 entries_.end());
}

std::string Monitor::abort_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abort_reason_;
}

void Monitor::AbortAll(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abort_reason_.empty()) abort_reason_ = reason;
  for (auto& e : entries_) e.comm->Abort(abort_reason_);
}

void Monitor::AbortJob(const std::string& reason) {
  try {
    store_->CompareSet(kAbortKey, "", reason);
  } catch (const Error& e) {
    ZR_WARN("could not publish the abort reason: {}", e.what());
  }
  AbortAll(reason);
}

void Monitor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  try {
    store_->ClearOnDisconnect();
  } catch (const Error&) {
  }
}

void Monitor::Run() {
  SetThreadLogRank(rank_);
  double next_beat = 0;
  bool failed = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return;
      if (failed) {  // nothing more to watch; wait for Stop
        cv_.wait(lock, [&] { return stop_; });
        return;
      }
    }
    try {
      if (NowSeconds() >= next_beat) {
        std::vector<Entry> entries;
        {
          std::lock_guard<std::mutex> lock(mu_);
          entries = entries_;
        }
        // A comm is alive while listed (it unregisters before destruction), so it is only touched
        // under the lock; the store write happens outside it.
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
        next_beat = NowSeconds() + kHeartbeatPeriodS;
      }
      try {
        store_->Wait({kAbortKey}, kWatchSlice);
        std::string reason = store_->Get(kAbortKey, Millis(1000));
        ZR_ERROR("aborting communicators: {}", reason);
        AbortAll(reason);
        failed = true;
      } catch (const TimeoutError&) {
      }
    } catch (const CommError& e) {
      bool stopping;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping = stop_;
      }
      if (stopping) return;
      std::string reason = Format("rank 0 (the rendezvous store host) is unreachable, it probably died: {}", e.what());
      ZR_ERROR("aborting communicators: {}", reason);
      AbortAll(reason);
      failed = true;
    }
  }
}

}  // namespace zerorun::comm

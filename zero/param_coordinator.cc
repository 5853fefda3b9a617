// ParamCoordinator: gather/release with reference counts, trace-driven prefetch.
#include "zerorun/zero/param_coordinator.h"

#include <algorithm>

#include "zerorun/core/device.h"
#include "zerorun/core/error.h"
#include "zerorun/core/timer.h"
#include "zerorun/zero/partition.h"

namespace zerorun::zero {

struct ParamCoordinator::Slot {
  State state = State::kReleased;
  int users = 0;
  bool persistent = false;
  bool prefetched = false;  // gathered ahead of its first Acquire
  int64_t shard_numel = 0;
  Tensor full;              // (W * shard_numel) model dtype while in flight or resident
  Tensor staging;           // an offloaded shard's copy on the device while its gather is in flight
  comm::Work work;
};

ParamCoordinator::ParamCoordinator(std::vector<Param> params, comm::Communicator& comm, const Stage3Options& options,
                                   ShardStore* shards)
    : comm_(comm), opt_(options), shards_(shards), params_(std::move(params)), slots_(params_.size()) {
  for (size_t i = 0; i < params_.size(); ++i) {
    Slot& s = slots_[i];
    s.shard_numel = CeilDiv(params_[i].numel, comm_.size());
    const Param& p = params_[i];
    const int64_t n = p.unit >= 0 ? (shards_ ? shards_->layout().unit_numels.at(static_cast<size_t>(p.unit)) : -1)
                                  : p.shard.numel();
    ZR_CHECK(n == s.shard_numel, "shard of parameter {} has {} elements, expected {}", i, n, s.shard_numel);
    s.persistent = params_[i].numel <= opt_.persistence_threshold;
  }
  // Persistent parameters are gathered once up front and stay.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (slots_[i].persistent) Submit(static_cast<int>(i));
  }
  for (auto& s : slots_) {
    if (s.persistent) Wait(s);
  }
}

ParamCoordinator::~ParamCoordinator() {
  try {
    Reset();
  } catch (...) {
  }
}

bool ParamCoordinator::persistent(int id) const { return slots_.at(static_cast<size_t>(id)).persistent; }

namespace {
const char* PurposeName(int64_t p) {
  switch (p) {
    case 1: return "a module's forward";
    case 2: return "a module's backward";
    case 3: return "GatherParameters()";
    case 4: return "start-up";
    case 5: return "Save16BitModel()";
  }
  return "?";
}
}  // namespace

void ParamCoordinator::CheckSameOnAllRanks(int id) {
  const int n = comm_.size();
  int64_t mine[2] = {id, static_cast<int64_t>(purpose_)};
  std::vector<int64_t> all(static_cast<size_t>(2 * n));
  comm_.AllGather(mine, all.data(), 2, DType::kI64).Wait();
  bool same = true;
  for (int r = 0; r < n; ++r) same = same && all[2 * r] == mine[0] && all[2 * r + 1] == mine[1];
  if (same) return;
  auto name = [&](int64_t pid) {
    return namer_ ? namer_(static_cast<int>(pid)) : Format("parameter {}", pid);
  };
  std::string who;
  for (int r = 0; r < n; ++r) {
    who += Format("\n  rank {} gathers {} for {}", r, name(all[2 * r]), PurposeName(all[2 * r + 1]));
  }
  ZR_THROW(CommError, "ZeRO-3: the ranks issued different parameter gathers (collective sequences diverged; "
           "is some model code, a save or a generate step run on some ranks only? every rank must run it):{}", who);
}

void ParamCoordinator::CheckSignature(int id) {
  // Both extremes in one all-reduce: max of the signature and max of its negation (= -min).
  const int64_t sig = static_cast<int64_t>(id) * 8 + static_cast<int64_t>(purpose_);
  int64_t v[2] = {sig, -sig};
  comm_.AllReduce(v, 2, DType::kI64, comm::ReduceOp::kMax).Wait();
  if (v[0] == sig && -v[1] == sig) return;
  CheckSameOnAllRanks(id);  // every rank saw the mismatch and joins this exchange, which throws
  ZR_THROW(CommError, "ZeRO-3: the ranks issued different parameter gathers (signatures {}..{})", -v[1], v[0]);
}

void ParamCoordinator::Submit(int id) {
  Slot& s = slots_[static_cast<size_t>(id)];
  if (s.state != State::kReleased) return;
  if (comm_.size() > 1) {
    if (opt_.sanity_checks) {
      CheckSameOnAllRanks(id);
    } else if (check_pending_) {
      CheckSignature(id);
    }
  }
  check_pending_ = false;
  const Param& p = params_[static_cast<size_t>(id)];
  const DType dtype = p.unit >= 0 ? shards_->layout().dtype : p.shard.dtype();
  s.full = Tensor::Empty({s.shard_numel * comm_.size()}, dtype, comm_.device(), MemCategory::kParams);
  s.work = comm_.AllGather(GatherSource(id, s), s.full.data(), static_cast<size_t>(s.shard_numel), dtype);
  s.state = State::kInFlight;
  resident_numel_ += s.shard_numel * comm_.size();
  ++gathers_;
}

const void* ParamCoordinator::GatherSource(int id, Slot& s) {
  const Param& p = params_[static_cast<size_t>(id)];
  if (p.unit < 0) return p.shard.data();
  const DType dtype = shards_->layout().dtype;
  if (!s.staging.defined()) s.staging = Tensor::Empty({s.shard_numel}, dtype, comm_.device(), MemCategory::kParams);
  const void* host = shards_->Acquire(p.unit, StateAccess::kRead);
  CopyBytes(s.staging.data(), comm_.device(), host, shards_->device(), s.staging.nbytes());
  shards_->Release(p.unit);
  return s.staging.data();
}

void ParamCoordinator::Wait(Slot& s) {
  if (s.state != State::kInFlight) return;
  Stopwatch watch;
  s.work.Wait();
  wait_ms_ += watch.ElapsedMs();
  s.state = State::kResident;
  s.staging = Tensor();
}

void ParamCoordinator::Free(Slot& s) {
  if (s.state == State::kInFlight) Wait(s);
  if (s.state == State::kResident) resident_numel_ -= s.shard_numel * comm_.size();
  s.full = Tensor();
  s.staging = Tensor();
  s.state = State::kReleased;
  s.prefetched = false;
}

void ParamCoordinator::BeginPass() {
  // A recorded pass becomes the trace the next passes follow.
  recording_ = trace_.empty();
  cursor_ = 0;
  check_pending_ = true;
}

void ParamCoordinator::Enter(int module, const std::vector<int>& param_ids) {
  if (!recording_) {
    if (cursor_ < trace_.size() && trace_[cursor_].module == module) {
      // What this module needs now leaves before what is fetched ahead of it.
      for (int id : param_ids) Submit(id);
      PrefetchFrom(++cursor_);
      return;
    }
    // The pass left the recorded order: forget the rest and record from here.
    trace_.resize(cursor_);
    recording_ = true;
  }
  trace_.push_back({module, param_ids});
  cursor_ = trace_.size();
}

void ParamCoordinator::PrefetchFrom(size_t position) {
  // Elements gathered for upcoming modules and not yet used. The module being entered (position - 1)
  // is not upcoming: its parameters, prefetched earlier, are about to be acquired.
  const std::vector<int>& current = trace_[position - 1].params;
  int64_t ahead = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].prefetched && std::find(current.begin(), current.end(), static_cast<int>(i)) == current.end()) {
      ahead += slots_[i].shard_numel * comm_.size();
    }
  }
  // Gathers ahead, in trace order, until prefetch_numel elements are ahead or max_live is reached.
  size_t k = position, i = 0;
  for (; k < trace_.size() && ahead < opt_.prefetch_numel; ++k, i = 0) {
    const std::vector<int>& ids = trace_[k].params;
    for (; i < ids.size(); ++i) {
      Slot& s = slots_[static_cast<size_t>(ids[i])];
      if (s.state != State::kReleased) continue;
      const int64_t size = s.shard_numel * comm_.size();
      if (ahead + size > opt_.prefetch_numel || resident_numel_ + size > opt_.max_live_numel) break;
      Submit(ids[i]);
      s.prefetched = true;
      ahead += size;
    }
    if (i < ids.size()) break;
  }
  if (shards_ == nullptr) return;
  // Offloaded shards: start reading what the next window will gather — the parameters after the last
  // one gathered, up to another prefetch_numel elements — so their reads overlap this module's
  // computation (the store skips what it has no free buffer for). Reads never decide what is gathered
  // when: every rank still submits the same gathers in the same order.
  int64_t hinted = 0;
  for (; k < trace_.size(); ++k, i = 0) {
    const std::vector<int>& ids = trace_[k].params;
    for (; i < ids.size(); ++i) {
      const Slot& s = slots_[static_cast<size_t>(ids[i])];
      const int unit = params_[static_cast<size_t>(ids[i])].unit;
      if (s.state != State::kReleased || unit < 0) continue;
      hinted += s.shard_numel * comm_.size();
      if (hinted > opt_.prefetch_numel) return;
      shards_->Prefetch(unit);
    }
  }
}

Tensor ParamCoordinator::Acquire(int id) {
  Slot& s = slots_.at(static_cast<size_t>(id));
  if (s.prefetched) {
    ++prefetch_hits_;
    s.prefetched = false;
  }
  if (s.state == State::kReleased) Submit(id);
  Wait(s);
  ++s.users;
  return s.full.View(0, {params_[static_cast<size_t>(id)].numel});
}

bool ParamCoordinator::ReusedSoon(int id) const {
  if (recording_ || opt_.max_reuse_distance <= 0) return false;
  int64_t fetched = 0;
  for (size_t k = cursor_; k < trace_.size(); ++k) {
    for (int p : trace_[k].params) {
      if (p == id) return true;
      fetched += slots_[static_cast<size_t>(p)].shard_numel * comm_.size();
      if (fetched > opt_.max_reuse_distance) return false;
    }
  }
  return false;
}

bool ParamCoordinator::Release(int id) {
  Slot& s = slots_.at(static_cast<size_t>(id));
  ZR_CHECK(s.users > 0, "parameter {} released more often than acquired", id);
  if (--s.users == 0 && !s.persistent && !(resident_numel_ <= opt_.max_live_numel && ReusedSoon(id))) Free(s);
  return s.state != State::kReleased;
}

void ParamCoordinator::RefreshPersistent() {
  std::vector<comm::Work> works;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.persistent) {
      if (s.users == 0 && s.state != State::kReleased) Free(s);
      continue;
    }
    works.push_back(comm_.AllGather(GatherSource(static_cast<int>(i), s), s.full.data(),
                                    static_cast<size_t>(s.shard_numel), s.full.dtype()));
  }
  for (auto& w : works) w.Wait();
  for (Slot& s : slots_) s.staging = Tensor();
}

void ParamCoordinator::Reset() {
  for (Slot& s : slots_) {
    if (s.state == State::kInFlight) {
      try {
        s.work.Wait();
        s.state = State::kResident;
      } catch (...) {
        s.state = State::kResident;
      }
    }
    s.users = 0;
    if (!s.persistent) Free(s);
  }
  cursor_ = 0;
}

}  // namespace zerorun::zero

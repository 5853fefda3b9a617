// LocalCommunicator: a two-phase rendezvous per collective.
//   post:   rank r publishes (seq, send, recv) and waits until every rank posted seq;
//   read:   r computes its result into private scratch from the other ranks' published buffers;
//   done:   r marks seq done and waits until every rank is done reading (buffers may now change);
//   write:  r copies its scratch into its recv buffer.
// Scratch makes in-place calls safe: nobody writes a buffer another rank may still read.
#include "zerorun/comm/local/local_comm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <tuple>

#include "zerorun/comm/reduce.h"
#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"

namespace zerorun::comm {

namespace {

struct LocalGroup {
  explicit LocalGroup(int n) : size(n), posted(static_cast<size_t>(n)), done(static_cast<size_t>(n), 0), left(static_cast<size_t>(n), false) {}
  struct Posted {
    uint64_t seq = 0;
    const void* send = nullptr;
    void* recv = nullptr;
  };
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Posted> posted;
  std::vector<uint64_t> done;
  std::vector<bool> left;
  std::map<std::tuple<int, int, int>, std::deque<std::string>> mailbox;  // (src, dst, tag)
  std::map<std::string, std::shared_ptr<LocalGroup>> subgroups;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank, std::string name, const CommOptions& options)
      : Communicator("local", std::move(name), rank, group->size, options), group_(std::move(group)), options_(options) {
    set_hosts(std::vector<std::string>(static_cast<size_t>(size()), "localhost"));
  }

  ~LocalCommunicator() override {
    StopExecutor();
    std::lock_guard<std::mutex> lock(group_->mu);
    group_->left[static_cast<size_t>(rank())] = true;
    group_->cv.notify_all();
  }

 protected:
  void Execute(OpDesc& op) override;
  std::unique_ptr<Communicator> CreateSubgroup(const std::string& new_name, const std::vector<int>& members,
                                               int new_rank) override;

 private:
  // Waits (lock held) until pred() or failure; on failure throws naming the ranks for which
  // `behind(q)` holds.
  template <typename Pred, typename Behind>
  void WaitFor(std::unique_lock<std::mutex>& lock, const OpDesc& op, const char* phase, Pred pred, Behind behind);
  std::string Laggards(const OpDesc& op, const std::function<bool(int)>& behind);

  std::shared_ptr<LocalGroup> group_;
  CommOptions options_;
};

std::string LocalCommunicator::Laggards(const OpDesc& op, const std::function<bool(int)>& behind) {
  std::string s;
  for (int q = 0; q < size(); ++q) {
    if (!behind(q)) continue;
    s += Format("{}{} (last called #{})", s.empty() ? "" : ", ", PeerName(q), group_->posted[static_cast<size_t>(q)].seq);
  }
  return s;
}

template <typename Pred, typename Behind>
void LocalCommunicator::WaitFor(std::unique_lock<std::mutex>& lock, const OpDesc& op, const char* phase, Pred pred,
                                Behind behind) {
  while (!pred()) {
    for (int q = 0; q < size(); ++q) {
      if (group_->left[static_cast<size_t>(q)] && behind(q)) {
        ZR_THROW(CommError, "{}: {} left the group (its communicator was destroyed) and did not {}",
                 op.Describe(rank(), size(), name()), PeerName(q), phase);
      }
    }
    if (aborted()) {
      lock.unlock();
      ThrowAborted();
    }
    if (NowSeconds() > op.deadline) {
      std::string who = Laggards(op, behind);
      lock.unlock();
      ThrowTimeout(op, Format("ranks that did not {}: {}", phase, who.empty() ? std::string("(none)") : who));
    }
    group_->cv.wait_for(lock, std::chrono::milliseconds(20));
  }
}

void LocalCommunicator::Execute(OpDesc& op) {
  LocalGroup& g = *group_;
  const int n = size();
  const int r = rank();
  const size_t es = DTypeSize(op.dtype);

  if (op.op == OpType::kSend) {
    std::string data(static_cast<const char*>(op.send), op.count * es);
    std::lock_guard<std::mutex> lock(g.mu);
    g.mailbox[{r, op.root, op.tag}].push_back(std::move(data));
    g.cv.notify_all();
    return;
  }
  if (op.op == OpType::kRecv) {
    // The closure outlives `op` (the executor moves it), so it captures values.
    const int src = op.root, tag = op.tag;
    void* dst = op.recv;
    const size_t want = op.count * es;
    const std::string what = op.Describe(r, n, name());
    op.poll = [this, &g, r, src, tag, dst, want, what] {
      std::lock_guard<std::mutex> lock(g.mu);
      auto it = g.mailbox.find({src, r, tag});
      if (it == g.mailbox.end() || it->second.empty()) {
        if (g.left[static_cast<size_t>(src)]) {
          ZR_THROW(CommError, "{}: {} left the group without sending", what, PeerName(src));
        }
        return false;
      }
      std::string& m = it->second.front();
      if (m.size() != want) {
        ZR_THROW(CommError, "{}: message size mismatch: {} sent {} bytes, {} expected", what, PeerName(src),
                 m.size(), want);
      }
      if (want) std::memcpy(dst, m.data(), want);
      it->second.pop_front();
      return true;
    };
    return;
  }

  // Collectives: post, read, done, write.
  std::unique_lock<std::mutex> lock(g.mu);
  g.posted[static_cast<size_t>(r)] = {op.seq, op.send, op.recv};
  g.cv.notify_all();
  WaitFor(
      lock, op, "arrive",
      [&] {
        for (const auto& p : g.posted) {
          if (p.seq < op.seq) return false;
        }
        return true;
      },
      [&](int q) { return g.posted[static_cast<size_t>(q)].seq < op.seq; });
  std::vector<LocalGroup::Posted> peers = g.posted;
  lock.unlock();

  std::vector<char> out;  // this rank's result, written after everyone finished reading
  size_t out_bytes = 0;
  auto reduce_range = [&](size_t offset_elems, size_t count) {
    std::vector<char> acc(count * DTypeSize(AccumType(op.dtype)));
    out.resize(count * es);
    out_bytes = count * es;
    if (count == 0) return;
    ToAccum(acc.data(), static_cast<const char*>(peers[0].send) + offset_elems * es, count, op.dtype);
    for (int q = 1; q < n; ++q) {
      ReduceIntoAccum(acc.data(), acc.data(), static_cast<const char*>(peers[static_cast<size_t>(q)].send) + offset_elems * es,
                      count, op.dtype, op.reduce);
    }
    FinishFromAccum(out.data(), acc.data(), count, op.dtype, op.reduce, n);
  };
  switch (op.op) {
    case OpType::kAllReduce:
      reduce_range(0, op.count);
      break;
    case OpType::kReduce:
      if (r == op.root) reduce_range(0, op.count);
      break;
    case OpType::kReduceScatter:
      reduce_range(static_cast<size_t>(r) * op.count, op.count);
      break;
    case OpType::kAllGather:
      out_bytes = static_cast<size_t>(n) * op.count * es;
      out.resize(out_bytes);
      for (int q = 0; q < n && op.count; ++q) {
        std::memcpy(out.data() + static_cast<size_t>(q) * op.count * es, peers[static_cast<size_t>(q)].send, op.count * es);
      }
      break;
    case OpType::kBroadcast:
      if (r != op.root && op.count) {
        out_bytes = op.count * es;
        out.assign(static_cast<const char*>(peers[static_cast<size_t>(op.root)].send),
                   static_cast<const char*>(peers[static_cast<size_t>(op.root)].send) + out_bytes);
      }
      break;
    default:
      break;  // barrier
  }

  lock.lock();
  g.done[static_cast<size_t>(r)] = op.seq;
  g.cv.notify_all();
  WaitFor(
      lock, op, "finish reading",
      [&] {
        for (uint64_t d : g.done) {
          if (d < op.seq) return false;
        }
        return true;
      },
      [&](int q) { return g.done[static_cast<size_t>(q)] < op.seq; });
  lock.unlock();
  if (out_bytes) std::memcpy(op.recv, out.data(), out_bytes);
}

std::unique_ptr<Communicator> LocalCommunicator::CreateSubgroup(const std::string& new_name,
                                                                const std::vector<int>& members, int new_rank) {
  std::shared_ptr<LocalGroup> sub;
  {
    std::lock_guard<std::mutex> lock(group_->mu);
    auto& slot = group_->subgroups[new_name];
    if (!slot) slot = std::make_shared<LocalGroup>(static_cast<int>(members.size()));
    sub = slot;
  }
  CommOptions o = options_;
  o.timeout = timeout();
  return std::make_unique<LocalCommunicator>(sub, new_rank, new_name, o);
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> CreateLocalCommunicators(int world_size, const CommOptions& options) {
  if (world_size < 1) ZR_THROW(InvalidArgument, "local backend: world size {} must be >= 1", world_size);
  auto group = std::make_shared<LocalGroup>(world_size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r) comms.push_back(std::make_unique<LocalCommunicator>(group, r, "world", options));
  return comms;
}

void RunLocalRanks(int world_size, const std::function<void(Communicator&)>& fn, const CommOptions& options) {
  auto comms = CreateLocalCommunicators(world_size, options);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      SetThreadLogRank(r);
      try {
        fn(*comms[static_cast<size_t>(r)]);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        comms[static_cast<size_t>(r)].reset();  // the others see this rank leave
      }
      SetThreadLogRank(-1);
    });
  }
  for (auto& t : threads) t.join();
  comms.clear();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace zerorun::comm

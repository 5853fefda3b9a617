// The shared-memory segment, its step counters and the collectives over it (see shm_group.h).
#include "zerorun/comm/shm/shm_group.h"

#include <fcntl.h>
#include <sched.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "zerorun/comm/reduce.h"
#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/timer.h"

namespace zerorun::comm::shm {

namespace {

constexpr size_t kLine = 64;
constexpr size_t kPage = 4096;
constexpr size_t kBlock = 2048;  // elements folded at a time (the partial stays in L1)
constexpr uint64_t kMagic = 0x7a65726f72756e31ull;  // "zerorun1"

inline int Mod(int a, int n) { return ((a % n) + n) % n; }
inline bool Reached(uint32_t have, uint32_t want) { return static_cast<int32_t>(have - want) >= 0; }
inline size_t RoundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

struct alignas(kLine) ShmGroup::Control {
  std::atomic<uint32_t> step{0};      // steps this rank published (futex word)
  std::atomic<uint32_t> sleepers{0};  // ranks in FUTEX_WAIT on `step`
  char pad[kLine - 8];
};
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free);

struct SegmentHeader {
  uint64_t magic;
  uint64_t size;
  uint64_t slot_bytes;
  uint64_t bytes;
};

namespace {
size_t ControlOffset() { return RoundUp(sizeof(SegmentHeader), kLine); }
size_t DataOffset(int size) { return RoundUp(ControlOffset() + static_cast<size_t>(size) * kLine, kPage); }
size_t SegmentBytes(int size, size_t slot) { return DataOffset(size) + static_cast<size_t>(size) * 2 * slot; }
}  // namespace

std::string SegmentNamePrefix(const std::string& job_token, const std::string& restart, const std::string& group) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "zerorun-%016llx-",
                static_cast<unsigned long long>(Fnv1a(job_token + '\0' + restart + '\0' + group)));
  return buf;
}

std::unique_ptr<ShmGroup> ShmGroup::Create(Store& group_store, Store& gen_store, const std::string& name_prefix, int rank,
                                           int size, Millis timeout, const ShmOptions& options) {
  const size_t slot = RoundUp(std::max<size_t>(options.slot_bytes, kPage), kPage);
  const size_t bytes = SegmentBytes(size, slot);
  std::string name;
  auto Unlink = [&] {
    if (!name.empty()) ::shm_unlink(name.c_str());
  };
  void* base = MAP_FAILED;
  try {
    int fd = -1;
    // The name exists in /dev/shm only between rank 0's creation and the last rank's open (then it is
    // unlinked, before anyone maps it): rank 0 creates it once every rank is waiting to open it, so a
    // rank killed in that window of a few store round trips is the only way to leave it behind.
    if (rank == 0) {
      name = "/" + name_prefix + std::to_string(::getpid());
      group_store.Set("shm/name", name);  // before it exists: a peer can unlink it should this rank die
      for (int p = 1; p < size; ++p) group_store.Get(Format("shm/waiting/{}", p), timeout);
      fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0) ZR_THROW(CommError, "shm: cannot create the segment {} in /dev/shm: {}", name, std::strerror(errno));
      if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
        int e = errno;
        ::close(fd);
        ZR_THROW(CommError, "shm: cannot size the segment {} to {} bytes (is /dev/shm full?): {}", name, bytes,
                 std::strerror(e));
      }
      auto* h = static_cast<SegmentHeader*>(::mmap(nullptr, sizeof(SegmentHeader), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      if (h == MAP_FAILED) {
        int e = errno;
        ::close(fd);
        ZR_THROW(CommError, "shm: cannot map the segment {}: {}", name, std::strerror(e));
      }
      h->magic = kMagic;
      h->size = static_cast<uint64_t>(size);
      h->slot_bytes = slot;
      h->bytes = bytes;
      ::munmap(h, sizeof(SegmentHeader));
      group_store.Set("shm/created", "1");
    } else {
      name = group_store.Get("shm/name", timeout);
      group_store.Set(Format("shm/waiting/{}", rank), "1");
      group_store.Get("shm/created", timeout);
      fd = ::shm_open(name.c_str(), O_RDWR, 0600);
      if (fd < 0) ZR_THROW(CommError, "shm: rank {} cannot open the segment {} of rank 0: {}", rank, name, std::strerror(errno));
    }
    // The last rank to open it unlinks it: from then on only the descriptors and mappings hold it.
    if (group_store.Add("shm/opened", 1) == size) ::shm_unlink(name.c_str());
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
      ::close(fd);
      ZR_THROW(CommError, "shm: the segment {} has {} bytes, {} expected (ranks disagree on ZERORUN_SHM_SLOT_BYTES?)",
               name, static_cast<long long>(st.st_size), bytes);
    }
    // MAP_POPULATE: the page faults happen here, not in the first collective.
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    int e = errno;
    ::close(fd);
    if (base == MAP_FAILED) ZR_THROW(CommError, "shm: cannot map the segment {} ({} bytes): {}", name, bytes, std::strerror(e));
    const double deadline = NowSeconds() + static_cast<double>(timeout.count()) / 1e3;
    while (group_store.Add("shm/opened", 0) < size) {
      if (gen_store.Check({"abort"})) ZR_THROW(CommError, "shm: the job aborted while the segment {} was being opened", name);
      if (NowSeconds() > deadline) {
        ZR_THROW(TimeoutError, "shm: not every rank opened the segment {} within {} ms", name, timeout.count());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  } catch (...) {
    Unlink();
    if (base != MAP_FAILED) ::munmap(base, bytes);
    throw;
  }
  auto* h = static_cast<SegmentHeader*>(base);
  if (h->magic != kMagic || h->size != static_cast<uint64_t>(size) || h->slot_bytes != slot) {
    ::munmap(base, bytes);
    ZR_THROW(CommError, "shm: the segment {} has an unexpected header (size {}, slot {})", name, h->size, h->slot_bytes);
  }
  ZR_DEBUG("shm: rank {}/{} mapped {} ({} bytes, slots of {} bytes)", rank, size, name, bytes, slot);
  return std::unique_ptr<ShmGroup>(new ShmGroup(rank, size, slot, name, base, bytes));
}

ShmGroup::ShmGroup(int rank, int size, size_t slot_bytes, std::string name, void* base, size_t bytes)
    : rank_(rank), size_(size), slot_bytes_(slot_bytes), name_(std::move(name)), base_(base), bytes_(bytes) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  // Ranks outnumbering cores: a spinning rank keeps the one it waits for off the core, so yield almost at once.
  spin_us_ = cpus > 0 && size_ > cpus ? 1 : 50;
  acc_.reset(new char[(static_cast<size_t>(size_) + 1) * kBlock * 8]);
  tree_.resize(static_cast<size_t>(size_));
  srcs_.resize(static_cast<size_t>(size_));
}

ShmGroup::~ShmGroup() { ::munmap(base_, bytes_); }

ShmGroup::Control* ShmGroup::Ctl(int r) const {
  return reinterpret_cast<Control*>(static_cast<char*>(base_) + ControlOffset() + static_cast<size_t>(r) * kLine);
}

char* ShmGroup::Slot(int r, int s) const {
  return static_cast<char*>(base_) + DataOffset(size_) + (static_cast<size_t>(r) * 2 + static_cast<size_t>(s)) * slot_bytes_;
}

uint32_t ShmGroup::Publish() {
  Control* c = Ctl(rank_);
  ++step_;
  c->step.store(step_, std::memory_order_seq_cst);
  if (c->sleepers.load(std::memory_order_seq_cst) != 0) Futex(&c->step, FUTEX_WAKE, INT32_MAX, nullptr);
  return step_;
}

void ShmGroup::WaitOne(int peer, uint32_t t, const LivenessCheck& live) {
  Control* c = Ctl(peer);
  auto Done = [&] { return Reached(c->step.load(std::memory_order_acquire), t); };
  if (Done()) return;
  // Spin first (the peer is usually running: a yield would hand the core to another process of a
  // loaded machine for a whole time slice), for about spin_us_ microseconds.
  const double spin_until = NowSeconds() + spin_us_ * 1e-6;
  for (int i = 1;; ++i) {
    CpuRelax();
    if (Done()) return;
    if (i % 64 == 0 && NowSeconds() > spin_until) break;
  }
  // Then yield the CPU between checks (a peer sharing this core gets to run at once; ranks are often
  // oversubscribed), and after ~2 ms of that sleep on the futex, 2 ms at a time.
  const double start = NowSeconds();
  for (int i = 1;; ++i) {
    ::sched_yield();
    if (Done()) return;
    if (i % 32 == 0) {
      live(peer);
      if (NowSeconds() - start > 2e-3) break;
    }
  }
  const timespec ts{0, 2'000'000};  // 2 ms: the liveness check runs at least this often
  for (;;) {
    live(peer);
    c->sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint32_t v = c->step.load(std::memory_order_seq_cst);
    if (!Reached(v, t)) Futex(&c->step, FUTEX_WAIT, v, &ts);
    c->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (Done()) return;
  }
}

void ShmGroup::WaitAll(uint32_t t, const LivenessCheck& live) {
  for (int i = 1; i < size_; ++i) WaitOne(Mod(rank_ + i, size_), t, live);
}

int ShmGroup::AcquireSlot(const LivenessCheck& live) {
  const int s = next_slot_;
  next_slot_ ^= 1;
  WaitAll(release_[s], live);
  return s;
}

void ShmGroup::Barrier(const LivenessCheck& live) { WaitAll(Publish(), live); }

// ---- folds -----------------------------------------------------------------------------------------

void ShmGroup::Fold(char* dst, const char* const* srcs, size_t m, DType dt, ReduceOp op) {
  const int n = size_;
  const size_t es = DTypeSize(dt);
  bool aliased = false;
  for (int p = 0; p < n; ++p) aliased |= srcs[p] == dst;
  if (!Is16Bit(dt) && !aliased) {  // the partial lives in dst (an L1-sized block at a time)
    for (size_t i = 0; i < m; i += kBlock) {
      const size_t b = std::min(kBlock, m - i), o = i * es;
      ReduceBuffers(dst + o, srcs[0] + o, srcs[1] + o, b, dt, op, n == 2 ? n : 0);
      for (int p = 2; p < n; ++p) ReduceBuffers(dst + o, dst + o, srcs[p] + o, b, dt, op, p == n - 1 ? n : 0);
    }
    return;
  }
  // 16-bit (accumulated in fp32, rounded once) or dst is one of the sources: the partial lives in acc_.
  char* acc = acc_.get();
  for (size_t i = 0; i < m; i += kBlock) {
    const size_t b = std::min(kBlock, m - i), o = i * es;
    ToAccum(acc, srcs[0] + o, b, dt);
    for (int p = 1; p < n; ++p) ReduceIntoAccum(acc, acc, srcs[p] + o, b, dt, op);
    FinishFromAccum(dst + o, acc, b, dt, op, n);
  }
}

void ShmGroup::FoldTree(char* dst, const char* const* srcs, size_t m, DType dt, ReduceOp op) {
  const int n = size_;
  const DType at = AccumType(dt);
  const size_t es = DTypeSize(dt), as = DTypeSize(at);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int extra = n - p2;
  auto Acc = [&](int v) { return acc_.get() + static_cast<size_t>(v) * kBlock * as; };
  if (!Is16Bit(dt) && p2 > 1) {
    // Same operations in the same order, straight from the slots: a leaf is its source, every inner
    // node is written once (no copies into the accumulation blocks), the root into dst.
    const char** cur = tree_.data();
    for (size_t i = 0; i < m; i += kBlock) {
      const size_t b = std::min(kBlock, m - i), o = i * es;
      for (int v = 0; v < p2; ++v) {
        cur[v] = srcs[v] + o;
        if (v < extra) {
          ReduceBuffers(Acc(v), srcs[v] + o, srcs[v + p2] + o, b, dt, op, 0);
          cur[v] = Acc(v);
        }
      }
      for (int mask = 1; mask < p2; mask <<= 1) {
        const bool root = mask * 2 == p2;
        for (int v = 0; v < p2; v += 2 * mask) {
          char* out = root ? dst + o : Acc(v);
          ReduceBuffers(out, cur[v], cur[v + mask], b, dt, op, root ? n : 0);
          cur[v] = out;
        }
      }
    }
    return;
  }
  for (size_t i = 0; i < m; i += kBlock) {
    const size_t b = std::min(kBlock, m - i), o = i * es;
    for (int v = 0; v < p2; ++v) {
      ToAccum(Acc(v), srcs[v] + o, b, dt);
      if (v < extra) ReduceIntoAccum(Acc(v), Acc(v), srcs[v + p2] + o, b, dt, op);
    }
    for (int mask = 1; mask < p2; mask <<= 1) {
      for (int v = 0; v < p2; v += 2 * mask) ReduceBuffers(Acc(v), Acc(v), Acc(v + mask), b, at, op, 0);
    }
    FinishFromAccum(dst + o, Acc(0), b, dt, op, n);
  }
}

// ---- collectives -----------------------------------------------------------------------------------

void ShmGroup::AllReduceOneShot(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                                const LivenessCheck& live) {
  const size_t es = DTypeSize(dt);
  const size_t per = std::max<size_t>(1, slot_bytes_ / es);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  std::vector<const char*>& srcs = srcs_;
  for (size_t first = 0; first < count; first += per) {
    const size_t m = std::min(per, count - first);
    const int s = AcquireSlot(live);
    CopyBytes(Slot(rank_, s), in + first * es, m * es);
    WaitAll(Publish(), live);
    for (int p = 0; p < size_; ++p) srcs[static_cast<size_t>(p)] = Slot(p, s);
    FoldTree(out + first * es, srcs.data(), m, dt, op);
    ReleaseSlot(s, Publish());
  }
}

void ShmGroup::Columns(Mode mode, const void* send, void* recv, size_t count, DType dt, ReduceOp op, int root,
                       const LivenessCheck& live) {
  const int n = size_, r = rank_;
  const size_t es = DTypeSize(dt);
  // Chunks as the UCX ring cuts them (all-reduce, reduce: count split n ways; reduce-scatter: n
  // chunks of `count`), segments of `seg` elements; column k is segment k of every chunk.
  const size_t base = mode == Mode::kReduceScatter ? count : count / static_cast<size_t>(n);
  const size_t rem = mode == Mode::kReduceScatter ? 0 : count % static_cast<size_t>(n);
  auto Off = [&](int c) { return static_cast<size_t>(c) * base + std::min(static_cast<size_t>(c), rem); };
  auto Len = [&](int c) { return base + (static_cast<size_t>(c) < rem ? 1 : 0); };
  const size_t max_len = base + (rem ? 1 : 0);
  size_t seg = slot_bytes_ / (static_cast<size_t>(n) * es);
  if (seg >= 64) seg &= ~size_t{15};  // keep positions 64-byte aligned
  seg = std::max<size_t>(seg, 1);
  const size_t columns = (max_len + seg - 1) / seg;
  auto SegLen = [&](int c, size_t k) { return k * seg < Len(c) ? std::min(seg, Len(c) - k * seg) : size_t{0}; };
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  std::vector<const char*>& srcs = srcs_;
  for (size_t k = 0; k < columns; ++k) {
    const int s = AcquireSlot(live);
    char* mine = Slot(r, s);
    for (int c = 0; c < n; ++c) {  // position r is read by this rank only: straight from the input
      const size_t m = SegLen(c, k);
      if (m && c != r) CopyBytes(mine + static_cast<size_t>(c) * seg * es, in + (Off(c) + k * seg) * es, m * es);
    }
    WaitAll(Publish(), live);
    // This rank's chunk: the ring's order, rank r+1 first, this rank last.
    const size_t m = SegLen(r, k);
    const size_t pos = static_cast<size_t>(r) * seg * es;
    for (int i = 0; i < n - 1; ++i) srcs[static_cast<size_t>(i)] = Slot(Mod(r + 1 + i, n), s) + pos;
    srcs[static_cast<size_t>(n - 1)] = in + (Off(r) + k * seg) * es;
    char* dst = nullptr;
    if (mode == Mode::kReduceScatter) {
      dst = out + k * seg * es;
    } else if (mode == Mode::kAllReduce || (mode == Mode::kReduce && r == root)) {
      dst = out + (Off(r) + k * seg) * es;
    } else {
      dst = mine + pos;  // reduce, not root: the root copies it from this rank's slot
    }
    if (m) Fold(dst, srcs.data(), m, dt, op);
    if (mode == Mode::kReduceScatter) {
      ReleaseSlot(s, Publish());
      continue;
    }
    const bool gather = mode == Mode::kAllReduce || r == root;
    if (m && dst != mine + pos && mode == Mode::kAllReduce) CopyBytes(mine + pos, dst, m * es);
    WaitAll(Publish(), live);
    if (gather) {
      for (int i = 1; i < n; ++i) {
        const int p = Mod(r + i, n);
        const size_t mp = SegLen(p, k);
        if (mp) CopyBytes(out + (Off(p) + k * seg) * es, Slot(p, s) + static_cast<size_t>(p) * seg * es, mp * es);
      }
    }
    ReleaseSlot(s, Publish());
  }
}

void ShmGroup::AllReducePipelined(const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                                  const LivenessCheck& live) {
  Columns(Mode::kAllReduce, send, recv, count, dt, op, 0, live);
}

void ShmGroup::ReduceScatter(const void* send, void* recv, size_t recv_count, DType dt, ReduceOp op,
                             const LivenessCheck& live) {
  Columns(Mode::kReduceScatter, send, recv, recv_count, dt, op, 0, live);
}

void ShmGroup::Reduce(const void* send, void* recv, size_t count, DType dt, ReduceOp op, int root,
                      const LivenessCheck& live) {
  Columns(Mode::kReduce, send, recv, count, dt, op, root, live);
}

void ShmGroup::AllGather(const void* send, void* recv, size_t send_count, DType dt, const LivenessCheck& live) {
  const int n = size_, r = rank_;
  const size_t es = DTypeSize(dt);
  const size_t seg = std::max<size_t>(1, slot_bytes_ / es);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  char* own_out = out + static_cast<size_t>(r) * send_count * es;
  if (own_out != in) CopyBytes(own_out, in, send_count * es);
  for (size_t first = 0; first < send_count; first += seg) {
    const size_t m = std::min(seg, send_count - first);
    const int s = AcquireSlot(live);
    CopyBytes(Slot(r, s), own_out + first * es, m * es);
    WaitAll(Publish(), live);
    for (int i = 1; i < n; ++i) {
      const int p = Mod(r + i, n);
      CopyBytes(out + (static_cast<size_t>(p) * send_count + first) * es, Slot(p, s), m * es);
    }
    ReleaseSlot(s, Publish());
  }
}

void ShmGroup::Broadcast(void* buf, size_t count, DType dt, int root, const LivenessCheck& live) {
  const size_t es = DTypeSize(dt);
  const size_t seg = std::max<size_t>(1, slot_bytes_ / es);
  char* data = static_cast<char*>(buf);
  for (size_t first = 0; first < count; first += seg) {
    const size_t m = std::min(seg, count - first);
    const int s = AcquireSlot(live);
    if (rank_ == root) CopyBytes(Slot(root, s), data + first * es, m * es);
    const uint32_t staged = Publish();
    if (rank_ != root) {
      WaitOne(root, staged, live);
      CopyBytes(data + first * es, Slot(root, s), m * es);
    }
    ReleaseSlot(s, Publish());
  }
}

}  // namespace zerorun::comm::shm

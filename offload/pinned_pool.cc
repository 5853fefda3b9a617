// PinnedBuffer (mmap + mlock, accounted as pinned host memory) and PinnedPool (fixed-size leases).
#include "zerorun/offload/pinned_pool.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"
#include "zerorun/core/memory.h"

namespace zerorun::offload {
namespace {

constexpr int64_t kPage = 4096;
constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr int64_t kHugeFrom = int64_t{4} << 20;

int64_t RoundUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

std::string MemlockLimitText() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return "unknown";
  if (rl.rlim_cur == RLIM_INFINITY) return "unlimited";
  return FormatBytes(static_cast<double>(rl.rlim_cur));
}

// An anonymous mapping of `bytes`, aligned to `align` (a multiple of the page size).
void* MapAligned(int64_t bytes, int64_t align) {
  const auto total = static_cast<size_t>(bytes + (align > kPage ? align : 0));
  void* raw = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + static_cast<uintptr_t>(align) - 1) / static_cast<uintptr_t>(align) *
                            static_cast<uintptr_t>(align);
  // Trim the unaligned head and the tail beyond the buffer.
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = aligned + static_cast<uintptr_t>(bytes);
  const uintptr_t map_end = start + total;
  if (map_end > end) ::munmap(reinterpret_cast<void*>(end), map_end - end);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

PinnedBuffer::PinnedBuffer(int64_t bytes, bool huge_pages) {
  ZR_CHECK(bytes > 0, "pinned buffer of {} bytes", bytes);
  const bool huge = huge_pages && bytes >= kHugeFrom;
  bytes_ = RoundUp(bytes, huge ? kHugePage : kPage);
  data_ = MapAligned(bytes_, huge ? kHugePage : kPage);
  if (data_ == nullptr) {
    const int err = errno;
    bytes_ = 0;
    throw OutOfMemoryError(ErrnoMessage(Format("pinned host buffer of {}", FormatBytes(static_cast<double>(bytes))),
                                        err));
  }
  // Advisory either way; without huge pages, say so (THP "always" would otherwise still use them).
  ::madvise(data_, static_cast<size_t>(bytes_), huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  if (::mlock(data_, static_cast<size_t>(bytes_)) == 0) {
    locked_ = true;
  } else {
    const int err = errno;
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      ZR_WARN("pinned host buffers are not page-locked ({}; RLIMIT_MEMLOCK is {}): I/O still works, but the kernel "
              "pins pages per request and a device copy stages through pageable memory. Raise the limit "
              "(ulimit -l, or LimitMEMLOCK) to lock them",
              ErrnoMessage("mlock", err), MemlockLimitText());
    }
    std::memset(data_, 0, static_cast<size_t>(bytes_));  // fault the pages in now, not during I/O
  }
  account_ = &MemoryAccount::Current();
  account_->Charge(MemCategory::kPinned, bytes_);
}

PinnedBuffer::~PinnedBuffer() { Free(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      locked_(std::exchange(o.locked_, false)),
      account_(std::exchange(o.account_, nullptr)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    Free();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    locked_ = std::exchange(o.locked_, false);
    account_ = std::exchange(o.account_, nullptr);
  }
  return *this;
}

void PinnedBuffer::Free() {
  if (data_ == nullptr) return;
  ::munmap(data_, static_cast<size_t>(bytes_));  // also unlocks
  account_->Release(MemCategory::kPinned, bytes_);
  data_ = nullptr;
  bytes_ = 0;
  locked_ = false;
}

// ---- PinnedPool ------------------------------------------------------------------------------------

PinnedPool::PinnedPool(int64_t buffer_bytes, int num_buffers, bool huge_pages)
    : buffer_bytes_(RoundUp(buffer_bytes, kDirectIoAlignment)), num_buffers_(num_buffers) {
  ZR_CHECK(buffer_bytes > 0 && num_buffers > 0, "pinned pool of {} x {} bytes", num_buffers, buffer_bytes);
  memory_ = PinnedBuffer(buffer_bytes_ * num_buffers_, huge_pages);
  for (int i = num_buffers_ - 1; i >= 0; --i) free_.push_back(i);  // hand out index 0 first
}

PinnedPool::~PinnedPool() {
  std::lock_guard<std::mutex> lock(mu_);
  ZR_CHECK(static_cast<int>(free_.size()) == num_buffers_, "pinned pool destroyed with {} buffer(s) still leased",
           num_buffers_ - static_cast<int>(free_.size()));
}

PinnedPool::Lease PinnedPool::TryAcquire() {
  std::lock_guard<std::mutex> lock(mu_);
  Lease l;
  if (free_.empty()) return l;
  l.pool_ = this;
  l.index_ = free_.back();
  free_.pop_back();
  l.data_ = memory_.as<char>() + static_cast<int64_t>(l.index_) * buffer_bytes_;
  return l;
}

PinnedPool::Lease PinnedPool::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !free_.empty(); });
  Lease l;
  l.pool_ = this;
  l.index_ = free_.back();
  free_.pop_back();
  l.data_ = memory_.as<char>() + static_cast<int64_t>(l.index_) * buffer_bytes_;
  return l;
}

void PinnedPool::Return(int index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(index);
  }
  cv_.notify_one();
}

int PinnedPool::num_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(free_.size());
}

std::vector<IoRegion> PinnedPool::Regions() const {
  std::vector<IoRegion> r;
  for (int i = 0; i < num_buffers_; ++i) r.push_back({memory_.as<char>() + int64_t{i} * buffer_bytes_, buffer_bytes_});
  return r;
}

PinnedPool::Lease::Lease(Lease&& o) noexcept
    : pool_(std::exchange(o.pool_, nullptr)), data_(std::exchange(o.data_, nullptr)), index_(std::exchange(o.index_, -1)) {}

PinnedPool::Lease& PinnedPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    Release();
    pool_ = std::exchange(o.pool_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    index_ = std::exchange(o.index_, -1);
  }
  return *this;
}

int64_t PinnedPool::Lease::size() const { return pool_ ? pool_->buffer_bytes_ : 0; }

void PinnedPool::Lease::Release() {
  if (pool_ == nullptr) return;
  pool_->Return(index_);
  pool_ = nullptr;
  data_ = nullptr;
  index_ = -1;
}

}  // namespace zerorun::offload

// MemoryAccount: atomic counters with CAS-updated peaks.
#include "zerorun/core/memory.h"

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"

namespace zerorun {
namespace {

const char* const kCategoryNames[kNumMemCategories] = {"params",      "grads",            "master", "optimizer",
                                                       "buckets",     "activations",      "host_activations",
                                                       "pinned",      "nvme",             "other"};

void RaisePeak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t old = peak.load(std::memory_order_relaxed);
  while (value > old && !peak.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
}

thread_local MemoryAccount* t_account = nullptr;

}  // namespace

const char* MemCategoryName(MemCategory c) {
  int i = static_cast<int>(c);
  ZR_CHECK(i >= 0 && i < kNumMemCategories, "bad memory category {}", i);
  return kCategoryNames[i];
}

MemCategory ParseMemCategory(std::string_view name) {
  for (int i = 0; i < kNumMemCategories; ++i) {
    if (name == kCategoryNames[i]) return static_cast<MemCategory>(i);
  }
  ZR_THROW(InvalidArgument, "unknown memory category '{}'", name);
}

void MemoryAccount::Charge(MemCategory c, int64_t bytes) {
  size_t i = Index(c);
  int64_t now = current_[i].fetch_add(bytes, std::memory_order_relaxed) + bytes;
  RaisePeak(peak_[i], now);
  if (c != MemCategory::kNvme) {
    int64_t total = total_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    RaisePeak(peak_total_, total);
  }
}

void MemoryAccount::Release(MemCategory c, int64_t bytes) {
  current_[Index(c)].fetch_sub(bytes, std::memory_order_relaxed);
  if (c != MemCategory::kNvme) total_.fetch_sub(bytes, std::memory_order_relaxed);
}

void MemoryAccount::ResetPeaks() {
  for (int i = 0; i < kNumMemCategories; ++i) peak_[i].store(current_[i].load());
  peak_total_.store(total_.load());
}

MemoryAccount::Snapshot MemoryAccount::Snap() const {
  Snapshot s;
  for (int i = 0; i < kNumMemCategories; ++i) {
    s.current[i] = current_[i].load(std::memory_order_relaxed);
    s.peak[i] = peak_[i].load(std::memory_order_relaxed);
  }
  s.current_total = total_.load(std::memory_order_relaxed);
  s.peak_total = peak_total_.load(std::memory_order_relaxed);
  return s;
}

std::string MemoryAccount::Summary() const {
  Snapshot s = Snap();
  std::string out;
  for (int i = 0; i < kNumMemCategories; ++i) {
    if (s.peak[i] == 0) continue;
    out += Format("{} {} (peak {}), ", kCategoryNames[i], FormatBytes(static_cast<double>(s.current[i])),
                  FormatBytes(static_cast<double>(s.peak[i])));
  }
  out += Format("total {} (peak {})", FormatBytes(static_cast<double>(s.current_total)),
                FormatBytes(static_cast<double>(s.peak_total)));
  return out;
}

MemoryAccount& MemoryAccount::Process() {
  static MemoryAccount* process = new MemoryAccount("process");  // never destroyed: used at exit
  return *process;
}

MemoryAccount& MemoryAccount::Current() { return t_account != nullptr ? *t_account : Process(); }

ScopedMemoryAccount::ScopedMemoryAccount(MemoryAccount* account) : previous_(t_account) { t_account = account; }
ScopedMemoryAccount::~ScopedMemoryAccount() { t_account = previous_; }

}  // namespace zerorun

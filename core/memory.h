// Memory accounting by category. Every allocation zerorun makes is charged to a MemoryAccount under
// one of the categories below; reports and summaries use these names. Current and peak bytes are
// kept per category and in total, lock-free, cheap enough to stay on.
//
// Each process has a default account; with the `local` backend several ranks share a process, so
// each rank thread installs its own account (ScopedMemoryAccount) and allocations on that thread are
// charged to it. `nvme` counts bytes on disk and is excluded from the memory totals.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace zerorun {

enum class MemCategory : uint8_t {
  kParams = 0,    // 16-bit (or fp32) working parameters
  kGrads,         // parameter gradients
  kMaster,        // fp32 master weights
  kOptimizer,     // optimizer state (moments, ...)
  kBuckets,       // communication buckets
  kActivations,   // activations saved for backward, and scratch
  kHostActivations,  // activation-checkpoint inputs kept in host memory (cpu_checkpointing)
  kPinned,        // pinned host staging buffers
  kNvme,          // bytes on NVMe (not memory)
  kOther,
  kCount
};
inline constexpr int kNumMemCategories = static_cast<int>(MemCategory::kCount);

// "params", "grads", "master", "optimizer", "buckets", "activations", "host_activations", "pinned",
// "nvme", "other".
const char* MemCategoryName(MemCategory c);
// Inverse of MemCategoryName; throws InvalidArgument.
MemCategory ParseMemCategory(std::string_view name);

// An account owned by a shared_ptr (make_shared) is kept alive by the storages charged to it, so a
// tensor that outlives its owner (a parameter's view into a destroyed engine's buffer) releases into
// live memory; one on the stack must outlive its storages.
class MemoryAccount : public std::enable_shared_from_this<MemoryAccount> {
 public:
  struct Snapshot {
    std::array<int64_t, kNumMemCategories> current{};
    std::array<int64_t, kNumMemCategories> peak{};
    int64_t current_total = 0;  // all categories but nvme
    int64_t peak_total = 0;
  };

  explicit MemoryAccount(std::string name = "") : name_(std::move(name)) {}
  MemoryAccount(const MemoryAccount&) = delete;
  MemoryAccount& operator=(const MemoryAccount&) = delete;

  void Charge(MemCategory c, int64_t bytes);
  void Release(MemCategory c, int64_t bytes);
  int64_t Current(MemCategory c) const { return current_[Index(c)].load(std::memory_order_relaxed); }
  int64_t Peak(MemCategory c) const { return peak_[Index(c)].load(std::memory_order_relaxed); }
  int64_t CurrentTotal() const { return total_.load(std::memory_order_relaxed); }
  int64_t PeakTotal() const { return peak_total_.load(std::memory_order_relaxed); }
  // Sets every peak to the current value (e.g. at the start of a step).
  void ResetPeaks();
  Snapshot Snap() const;
  const std::string& name() const { return name_; }
  // One line: "params 1.00 MiB (peak 1.00 MiB), grads ..., total ...".
  std::string Summary() const;

  // The process-wide default account.
  static MemoryAccount& Process();
  // The account allocations on this thread are charged to (Process() unless a scope installed one).
  static MemoryAccount& Current();

 private:
  friend class ScopedMemoryAccount;
  static size_t Index(MemCategory c) { return static_cast<size_t>(c); }
  std::string name_;
  std::array<std::atomic<int64_t>, kNumMemCategories> current_{};
  std::array<std::atomic<int64_t>, kNumMemCategories> peak_{};
  std::atomic<int64_t> total_{0};
  std::atomic<int64_t> peak_total_{0};
};

// Installs `account` as this thread's current account for the scope's lifetime.
class ScopedMemoryAccount {
 public:
  explicit ScopedMemoryAccount(MemoryAccount* account);
  ~ScopedMemoryAccount();
  ScopedMemoryAccount(const ScopedMemoryAccount&) = delete;
  ScopedMemoryAccount& operator=(const ScopedMemoryAccount&) = delete;

 private:
  MemoryAccount* previous_;
};

}  // namespace zerorun

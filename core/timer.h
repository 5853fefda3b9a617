// Wall-clock timing: a Stopwatch, and Timers — named accumulators for breakdowns such as DeepSpeed's
// `wall_clock_breakdown` (forward, backward, reduction, step). Times are monotonic.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace zerorun {

// Seconds on the monotonic clock since an arbitrary origin.
double NowSeconds();

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void Restart() { start_ = std::chrono::steady_clock::now(); }
  double ElapsedSeconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double ElapsedMs() const { return ElapsedSeconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Named accumulators. Start/Stop pairs add to a timer's total and count. Thread-safe.
class Timers {
 public:
  struct Entry {
    double total_ms = 0;
    int64_t count = 0;
  };
  void Start(const std::string& name);
  // Returns the milliseconds of this interval. Stopping a timer that is not running is a no-op (0).
  double Stop(const std::string& name);
  void Add(const std::string& name, double ms);
  Entry Get(const std::string& name) const;
  // Every timer, by name; Reset() clears totals (e.g. after each progress line).
  std::map<std::string, Entry> All() const;
  void Reset();
  // "forward: 12.34 ms | backward: 20.00 ms" for the given names (those that exist), in order.
  std::string Format(const std::vector<std::string>& names) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, double> running_;  // name -> start time (s)
};

// Adds the lifetime of the scope to `timers[name]`.
class ScopedTimer {
 public:
  ScopedTimer(Timers& timers, std::string name) : timers_(timers), name_(std::move(name)) {}
  ~ScopedTimer() { timers_.Add(name_, watch_.ElapsedMs()); }

 private:
  Timers& timers_;
  std::string name_;
  Stopwatch watch_;
};

}  // namespace zerorun

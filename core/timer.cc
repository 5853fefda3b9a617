// Timers: a mutex-guarded map; intervals measured with steady_clock.
#include "zerorun/core/timer.h"

#include <cstdio>

namespace zerorun {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Timers::Start(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  running_[name] = NowSeconds();
}

double Timers::Stop(const std::string& name) {
  double now = NowSeconds();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(name);
  if (it == running_.end()) return 0;
  double ms = (now - it->second) * 1e3;
  running_.erase(it);
  Entry& e = entries_[name];
  e.total_ms += ms;
  e.count += 1;
  return ms;
}

void Timers::Add(const std::string& name, double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[name];
  e.total_ms += ms;
  e.count += 1;
}

Timers::Entry Timers::Get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  return it == entries_.end() ? Entry{} : it->second;
}

std::map<std::string, Timers::Entry> Timers::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

void Timers::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

std::string Timers::Format(const std::vector<std::string>& names) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& n : names) {
    auto it = entries_.find(n);
    if (it == entries_.end()) continue;
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s%s: %.2f ms", out.empty() ? "" : " | ", n.c_str(), it->second.total_ms);
    out += buf;
  }
  return out;
}

}  // namespace zerorun

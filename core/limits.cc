// RLIMIT_NOFILE queries and the raise-to-need rule (see limits.h).
#include "zerorun/core/limits.h"

#include <sys/resource.h>

#include "zerorun/core/format.h"

namespace zerorun {

namespace {
uint64_t ToU64(rlim_t v) { return v == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(v); }
std::string Show(uint64_t v) { return v == UINT64_MAX ? std::string("unlimited") : std::to_string(v); }
}  // namespace

OpenFileLimit GetOpenFileLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return {UINT64_MAX, UINT64_MAX};
  return {ToU64(rl.rlim_cur), ToU64(rl.rlim_max)};
}

std::string OpenFileLimitText() {
  OpenFileLimit l = GetOpenFileLimit();
  return Format("ulimit -n is {} (hard limit {})", Show(l.soft), Show(l.hard));
}

bool RaiseOpenFileLimit(uint64_t need) {
  OpenFileLimit l = GetOpenFileLimit();
  if (l.soft >= need) return true;
  if (l.hard < need) return false;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
  rl.rlim_cur = static_cast<rlim_t>(need);
  return ::setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

}  // namespace zerorun

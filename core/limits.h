// Process resource limits a job depends on, checked up front so a low limit is a clear error
// instead of a failure deep inside a transport. Today: the open-file limit (RLIMIT_NOFILE), which
// the rendezvous store (two connections per rank on rank 0), UCX and the launcher's pipes consume.
#pragma once

#include <cstdint>
#include <string>

namespace zerorun {

struct OpenFileLimit {
  uint64_t soft = 0;  // what `ulimit -n` shows; RLIM_INFINITY as UINT64_MAX
  uint64_t hard = 0;  // how far an unprivileged process may raise `soft`
};
OpenFileLimit GetOpenFileLimit();

// "ulimit -n is 1024 (hard limit 4096)" for messages.
std::string OpenFileLimitText();

// Makes the soft limit at least `need` when the hard limit allows (raising it only as far as
// needed, never lowering it). Returns false, changing nothing, when the hard limit is below `need`.
bool RaiseOpenFileLimit(uint64_t need);

}  // namespace zerorun

// Abort path of ZR_CHECK and errno formatting.
#include "zerorun/core/error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace zerorun {

std::string ErrnoMessage(const std::string& what, int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer (which may or may not be buf).
  const char* msg = strerror_r(err, buf, sizeof buf);
  return what + ": " + msg;
}

namespace detail {

void CheckFailed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "zerorun: check failed at %s:%d: %s%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail
}  // namespace zerorun

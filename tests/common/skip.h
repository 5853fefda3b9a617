// ZR_TEST_SKIP(reason): ends the current doctest test case and makes CTest report its test as
// skipped, not passed: it prints "[zerorun-skip] <reason>", which matches the SKIP_REGULAR_EXPRESSION
// that cmake/ZerorunDiscoverTests.cmake sets on every registered test. `reason` is streamed (<<).
//
// ZR_TEST_SKIP_UNLESS_CI(reason): the same for a dependency that CI installs and starts (sshd, pdsh,
// Slurm and munge, OpenMPI, root, the trainer binary): with ZERORUN_NO_SKIP=1, which .ci/run sets,
// the test fails instead, so in CI these tests run. Call either at the top of a test case, before
// any check (a skip marker would hide a failure printed before it).
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#define ZR_TEST_SKIP_MARKER "[zerorun-skip] "

#define ZR_TEST_SKIP(reason)                                                   \
  do {                                                                         \
    std::ostringstream zr_skip_os_;                                            \
    zr_skip_os_ << reason;                                                     \
    std::printf(ZR_TEST_SKIP_MARKER "%s\n", zr_skip_os_.str().c_str());        \
    std::fflush(stdout);                                                       \
    return;                                                                    \
  } while (0)

namespace zerorun::test {
inline bool SkipsForbidden() {
  const char* v = std::getenv("ZERORUN_NO_SKIP");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}
}  // namespace zerorun::test

#define ZR_TEST_SKIP_UNLESS_CI(reason)                                                              \
  do {                                                                                              \
    if (::zerorun::test::SkipsForbidden()) {                                                        \
      std::ostringstream zr_skip_why_;                                                              \
      zr_skip_why_ << reason;                                                                       \
      FAIL("would be skipped, but ZERORUN_NO_SKIP is set (CI installs everything): " << zr_skip_why_.str()); \
    }                                                                                               \
    ZR_TEST_SKIP(reason);                                                                           \
  } while (0)

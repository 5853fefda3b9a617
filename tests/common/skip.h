// ZR_TEST_SKIP(reason): ends the current doctest test case and makes CTest report its test as
// skipped, not passed: it prints "[zerorun-skip] <reason>", which matches the SKIP_REGULAR_EXPRESSION
// that cmake/ZerorunDiscoverTests.cmake sets on every registered test. `reason` is streamed (<<).
#pragma once

#include <cstdio>
#include <sstream>

#define ZR_TEST_SKIP_MARKER "[zerorun-skip] "

#define ZR_TEST_SKIP(reason)                                                   \
  do {                                                                         \
    std::ostringstream zr_skip_os_;                                            \
    zr_skip_os_ << reason;                                                     \
    std::printf(ZR_TEST_SKIP_MARKER "%s\n", zr_skip_os_.str().c_str());        \
    std::fflush(stdout);                                                       \
    return;                                                                    \
  } while (0)

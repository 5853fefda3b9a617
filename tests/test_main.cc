// The shared doctest main for every zr_test_* binary. Sets the log level to warnings unless the
// environment asks for more, so test output stays readable.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  setenv("ZERORUN_LOG_LEVEL", "warning", /*overwrite=*/0);
  doctest::Context context(argc, argv);
  return context.run();
}

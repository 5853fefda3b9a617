// Hostfile, include/exclude and range-list parsing: DeepSpeed's own test cases (reference §10.6,
// cases 54-58 and 63) plus the error messages' contents.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "zerorun/core/error.h"
#include "zerorun/launcher/hostfile.h"
#include "zerorun/launcher/options.h"

using namespace zerorun::launcher;
using zerorun::InvalidArgument;

namespace {
// The message ParseHostfile(text, "hf") throws, "" if it parses.
std::string HostfileError(const std::string& text) {
  try {
    ParseHostfile(text, "hf");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

namespace {
Resources OneHost() { return {{"w0", {0, 1, 2, 3}}}; }
Resources TwoHosts() { return {{"w0", {0, 1, 2, 3}}, {"w1", {0, 1, 2, 3}}}; }
std::string ErrorOf(const Resources& pool, const std::string& inc, const std::string& exc) {
  try {
    FilterResources(pool, inc, exc);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_SUITE("unit") {
TEST_CASE("filter: include and exclude together are refused (case 54)") {
  CHECK_THROWS_AS(FilterResources({}, "A", "B"), InvalidArgument);
  CHECK(ErrorOf(OneHost(), "w0", "w0").find("mutually exclusive") != std::string::npos);
}

TEST_CASE("filter: one host (case 55)") {
  CHECK(FilterResources(OneHost(), "", "w0:1") == Resources{{"w0", {0, 2, 3}}});
  CHECK(FilterResources(OneHost(), "", "w0:1,2") == Resources{{"w0", {0, 3}}});
  CHECK(FilterResources(OneHost(), "w0:1", "") == Resources{{"w0", {1}}});
  CHECK(FilterResources(OneHost(), "w0:1,1", "") == Resources{{"w0", {1}}});
  CHECK(FilterResources(OneHost(), "w0:1@w0:0,1", "") == Resources{{"w0", {0, 1}}});
  CHECK(FilterResources(OneHost(), "w0", "") == OneHost());
  CHECK(FilterResources(OneHost(), "", "w0").empty());
  CHECK(FilterResources(OneHost(), "", "w0:0,1,2,3").empty());
  CHECK(FilterResources(OneHost(), "", "") == OneHost());
}

TEST_CASE("filter: two hosts, unknown hosts and slots (case 56)") {
  CHECK(FilterResources(TwoHosts(), "w1:0,3", "") == Resources{{"w1", {0, 3}}});
  CHECK(FilterResources(TwoHosts(), "", "w1") == Resources{{"w0", {0, 1, 2, 3}}});
  CHECK(FilterResources(TwoHosts(), "", "w0:0,1@w1:3") == Resources{{"w0", {2, 3}}, {"w1", {0, 1, 2}}});
  // hostfile order is kept whatever the spec order
  CHECK(FilterResources(TwoHosts(), "w1:2@w0:3", "") == Resources{{"w0", {3}}, {"w1", {2}}});
  CHECK(ErrorOf(TwoHosts(), "jeff", "").find("host 'jeff' is not in the hostfile") != std::string::npos);
  CHECK(ErrorOf(TwoHosts(), "", "jeff").find("'jeff'") != std::string::npos);
  CHECK(ErrorOf(TwoHosts(), "w1:4", "").find("has no slot 4") != std::string::npos);
  CHECK(ErrorOf(TwoHosts(), "", "w1:4").find("has no slot 4") != std::string::npos);
  CHECK(ErrorOf(TwoHosts(), "w1@w0:1@5", "").find("host '5'") != std::string::npos);
  CHECK(ErrorOf(TwoHosts(), "w0:x", "").find("slot 'x'") != std::string::npos);
  CHECK(ErrorOf(TwoHosts(), "w0@@w1", "").find("empty host") != std::string::npos);
}

TEST_CASE("hostfile: comments, blank lines, IP hosts (case 58)") {
  const char* text =
      "\n"
      "# a comment\n"
      "worker-1 slots=2\n"
      "   worker-2 slots=2   \n"
      "\n"
      "localhost slots=1 trailing text is tolerated\n"
      "123.23.12.10 slots=2\n";
  Resources r = ParseHostfile(text, "hosts");
  CHECK(r == Resources{{"worker-1", {0, 1}}, {"worker-2", {0, 1}}, {"localhost", {0}}, {"123.23.12.10", {0, 1}}});
}

TEST_CASE("hostfile: errors name the file and line (case 58)") {
  CHECK(HostfileError("worker-1 slots=2\nworker-1 slots=2\n") == "hf:2: host 'worker-1' is listed twice");
  CHECK(HostfileError("this is bad slots=1\n").find("hf:1: bad hostfile line") == 0);
  CHECK(HostfileError("missingslots\n").find("hf:1: bad hostfile line") == 0);
  CHECK(HostfileError("").find("no entries") != std::string::npos);
  CHECK(HostfileError("# only a comment\n\n").find("no entries") != std::string::npos);
  CHECK(HostfileError("worker-1 slots=2\nbad line\nworker-2 slots=2\n").find("hf:2:") == 0);
  CHECK(HostfileError("w slots=-1\n").find("hf:1:") == 0);
  CHECK(HostfileError("w slots=\n").find("hf:1:") == 0);
}

TEST_CASE("hostfile: slot counts are bounded; leading zeros are fine (issue 13 item 4)") {
  // each once crashed (bad_alloc), ran for 20 s, or said "expected 'HOSTNAME slots=N'"
  for (const char* n : {"999999999", "99999999", "2147483647", "99999999999999999999999", "1025"}) {
    INFO(n);
    CHECK(HostfileError(std::string("node1 slots=") + n + "\n") ==
          std::string("hf:1: host 'node1' slots=") + n + ": at most 1024 slots per host");
  }
  CHECK(ParseHostfile("node1 slots=1024\n", "hf")[0].slots.size() == 1024);
  CHECK(ParseHostfile("node1 slots=0007\n", "hf")[0].slots.size() == 7);
  CHECK(ParseHostfile("a slots=0\nb slots=1\n", "hf").size() == 2);  // slots=0: a host with nothing to run
  // a huge line is quoted shortened, not echoed whole
  std::string err = HostfileError(std::string(100000, 'x') + "\n");
  CHECK(err.find("hf:1: bad hostfile line") == 0);
  CHECK(err.size() < 400);
}

TEST_CASE("hostfile: a file too large to be a hostfile is refused before parsing") {
  std::string path = "/tmp/zr_hostfile_big_" + std::to_string(getpid());
  {
    std::ofstream out(path);
    std::string line = "host slots=1 " + std::string(1000, 'x') + "\n";
    for (size_t n = 0; n <= kMaxHostfileBytes; n += line.size()) out << line;
  }
  CHECK_THROWS_WITH_AS(LoadHostfile(path), doctest::Contains("larger than 16 MiB"), InvalidArgument);
  std::remove(path.c_str());
}

TEST_CASE("hostfile: an unreadable file is an IoError naming it") {
  CHECK_THROWS_WITH_AS(LoadHostfile("/nonexistent/hostfile"), doctest::Contains("/nonexistent/hostfile"), zerorun::IoError);
}

TEST_CASE("range lists (case 63)") {
  CHECK(ParseRangeList("0,2-4,6,8-9") == std::vector<int>{0, 2, 3, 4, 6, 8, 9});
  CHECK(ParseRangeList("5") == std::vector<int>{5});
  CHECK_THROWS_AS(ParseRangeList("0,2-6,5-9"), InvalidArgument);
  CHECK_THROWS_AS(ParseRangeList("8,2-6"), InvalidArgument);
  CHECK_THROWS_AS(ParseRangeList("1,6-2"), InvalidArgument);
  CHECK_THROWS_AS(ParseRangeList("1,,2"), InvalidArgument);
  CHECK_THROWS_AS(ParseRangeList("a"), InvalidArgument);
  CHECK_THROWS_AS(ParseRangeList("0-999999999"), InvalidArgument);
  CHECK(FormatRangeList({0, 1, 2, 5, 7, 8}) == "0-2,5,7,8");
  CHECK(FormatRangeList({}) == "");
}
}

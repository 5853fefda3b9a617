// comm::InitFromEnv when the rendezvous cannot be set up (issue 13 item 1: each of these crashed
// with SIGSEGV in the session teardown), the open-file limit check, and garbage in the environment.
// Each case runs in its own CTest process; the environment is restored afterwards anyway.
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "tests/common/multiproc.h"
#include "zerorun/comm/init.h"
#include "zerorun/comm/tcp_store.h"
#include "zerorun/core/error.h"
#include "zerorun/core/limits.h"

using namespace zerorun;
using namespace zerorun::comm;

namespace {

// Sets variables for its lifetime and restores what was there before.
class EnvGuard {
 public:
  explicit EnvGuard(const std::map<std::string, std::string>& vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_[k] = old ? std::optional<std::string>(old) : std::nullopt;
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~EnvGuard() {
    for (const auto& [k, v] : saved_) {
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

std::string InitError(const std::map<std::string, std::string>& vars) {
  EnvGuard env(vars);
  try {
    InitFromEnv();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("init: a port already in use is an error naming MASTER_PORT (not SIGSEGV)") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // as the repro: a listener on 127.0.0.1 only
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  std::string m = InitError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", port}, {"MASTER_ADDR", "127.0.0.1"},
                             {"ZERORUN_JOB_TOKEN", "t"}});
  INFO(m);
  CHECK(m.find("rank 0 cannot host the rendezvous store on port " + port + " (MASTER_PORT)") != std::string::npos);
  CHECK(m.find("Address already in use") != std::string::npos);
  CHECK(m.find("--master_port") != std::string::npos);
  ::close(fd);
}

TEST_CASE("init: an unreachable store is an error naming the address and rank 0 (not SIGSEGV)") {
  const std::string port = std::to_string(zerorun::test::PickFreePort());
  std::string m = InitError({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", port}, {"MASTER_ADDR", "127.0.0.1"},
                             {"ZERORUN_JOB_TOKEN", "t"}, {"ZERORUN_STORE_CONNECT_TIMEOUT", "1"}});
  INFO(m);
  CHECK(m.find("rank 1 cannot join the rendezvous at 127.0.0.1:" + port + " (MASTER_ADDR:MASTER_PORT)") != std::string::npos);
  CHECK(m.find("the store that rank 0 hosts") != std::string::npos);
  CHECK(m.find("could not connect within 1000 ms") != std::string::npos);
}

TEST_CASE("init: a wrong job token against a live store is an error saying so (not SIGSEGV)") {
  StoreServerOptions so;
  so.host = "127.0.0.1";
  so.token = "the-right-token";
  StoreServer server(so);
  std::string m = InitError({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", std::to_string(server.port())},
                             {"MASTER_ADDR", "127.0.0.1"}, {"ZERORUN_JOB_TOKEN", "another-job"}});
  INFO(m);
  CHECK(m.find("job token does not match (ZERORUN_JOB_TOKEN)") != std::string::npos);
  CHECK(m.find("another job") != std::string::npos);
  CHECK(server.connections_refused() >= 1);
}

TEST_CASE("init: garbage in the environment is refused naming the variable") {
  CHECK(InitError({{"WORLD_SIZE", "two"}}).find("WORLD_SIZE='two'") != std::string::npos);
  CHECK(InitError({{"WORLD_SIZE", "2"}, {"RANK", "5"}, {"MASTER_PORT", "1234"}}).find("RANK='5'") != std::string::npos);
  CHECK(InitError({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_PORT", "99999"}}).find("MASTER_PORT='99999'") !=
        std::string::npos);
  for (const char* t : {"inf", "1e300", "-3", "abc", "nan", "0"}) {
    INFO(t);
    EnvGuard env(std::map<std::string, std::string>{{"ZERORUN_COMM_TIMEOUT", t}});
    CHECK_THROWS_WITH_AS(DefaultCommTimeout(), doctest::Contains("ZERORUN_COMM_TIMEOUT"), InvalidArgument);
  }
  EnvGuard env(std::map<std::string, std::string>{{"ZERORUN_COMM_TIMEOUT", "2.5"}});
  CHECK(DefaultCommTimeout().count() == 2500);
}

TEST_CASE("init: the open-file limit is raised to what the job needs, or refused naming both") {
  // rank 0 hosts the store: two connections per rank on top of what every rank needs
  CHECK(RequiredOpenFiles(4, true) > RequiredOpenFiles(4, false));
  CHECK(RequiredOpenFiles(64, false) > RequiredOpenFiles(4, false));
  CHECK(RequiredOpenFiles(4, true) - RequiredOpenFiles(4, false) == 3 + 2 * 4);
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  const auto need = static_cast<rlim_t>(RequiredOpenFiles(4, true));
  if (saved.rlim_max >= need) {  // soft below the need, hard above it: raised, only as far as needed
    rlimit low = saved;
    low.rlim_cur = 16;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
    CHECK_NOTHROW(CheckOpenFileLimit(4, true, "rank 0"));
    CHECK(GetOpenFileLimit().soft == need);
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  }
  // more than the hard limit allows: an error with the need and both limits
  const int huge_world = 1 << 20;
  try {
    CheckOpenFileLimit(huge_world, true, "rank 0");
    CHECK(GetOpenFileLimit().hard >= static_cast<uint64_t>(RequiredOpenFiles(huge_world, true)));
  } catch (const CommError& e) {
    std::string m = e.what();
    CHECK(m.find(Format("rank 0 needs at least {} open files for a {}-rank job", RequiredOpenFiles(huge_world, true),
                        huge_world)) != std::string::npos);
    CHECK(m.find("ulimit -n is ") != std::string::npos);
    CHECK(m.find("hard limit") != std::string::npos);
  }
  CHECK(GetOpenFileLimit().soft == saved.rlim_cur);  // a refusal changes nothing
}

}  // TEST_SUITE

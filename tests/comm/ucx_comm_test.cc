// The `ucx` backend across real processes (fork/exec harness, rendezvous through InitFromEnv):
// closed-form results over shared memory and TCP at 2, 3 and 4 ranks, the ring forced onto tiny
// messages, split groups; faults: a SIGKILLed rank is named by every survivor within seconds, a
// SIGSTOPped rank makes the others time out naming the collective and the missing rank.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/comm/collectives_check.h"
#include "tests/common/multiproc.h"
#include "tests/common/skip.h"
#include "zerorun/comm/init.h"
#include "zerorun/core/error.h"
#include "zerorun/core/timer.h"

using namespace zerorun;
using namespace zerorun::comm;
using namespace zerorun::comm::testing;
using zerorun::test::AllSucceeded;
using zerorun::test::MultiprocOptions;
using zerorun::test::RunMultiproc;

namespace {

std::string HostName() {
  char buf[256] = "?";
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

InitOptions Backend(const std::string& name) {
  InitOptions o;
  o.backend = name;
  return o;
}
InitOptions Ucx() { return Backend("ucx"); }

void CheckWorld(int expected_size) {
  auto comm = InitFromEnv(Ucx());
  REQUIRE(comm->size() == expected_size);
  CHECK(comm->backend_name() == "ucx");
  CheckAllCollectives(*comm, {0, 1, 7, 4099});
  CheckSendRecv(*comm, 4099);
  // A message large enough for many ring segments (pipelining across steps).
  const size_t big = 300000;
  for (DType t : {DType::kF32, DType::kBF16}) {
    auto buf = Filled(t, comm->rank(), big);
    comm->AllReduce(buf.data(), big, t, ReduceOp::kSum).Wait();
    CheckRange("large all_reduce", t, buf.data(), big, [&](size_t i) { return Expected(t, ReduceOp::kSum, expected_size, i); });
  }
  // Sub-groups: even and odd ranks.
  auto sub = comm->Split(comm->rank() % 2, comm->rank());
  REQUIRE(sub);
  int64_t v = comm->rank();
  sub->AllReduce(&v, 1, DType::kI64, ReduceOp::kSum).Wait();
  int64_t want = 0;
  for (int q = comm->rank() % 2; q < expected_size; q += 2) want += q;
  CHECK(v == want);
  CHECK(comm->Stats()[OpType::kAllReduce].bytes_sent > 0);
  comm->Barrier().Wait();
}

MultiprocOptions Options(int n, const std::string& tls) {
  MultiprocOptions o;
  o.world_size = n;
  o.deadline_s = 60;
  o.env["UCX_TLS"] = tls;
  o.env["ZERORUN_COMM_TIMEOUT"] = "30";
  o.env["ZERORUN_UCX_SEGMENT_BYTES"] = "16384";  // many segments even for test-sized buffers
  o.env["ZERORUN_SHM"] = "0";  // the UCX algorithms (one host would otherwise select shm: shm_comm_test.cc)
  return o;
}

}  // namespace

TEST_SUITE("multiproc") {

TEST_CASE("ucx: collectives over shared memory at 2 3 and 4 ranks") {
  for (int n : {2, 3, 4}) {
    INFO("world size " << n);
    CHECK(AllSucceeded(RunMultiproc(Options(n, "sm,self"), [n](int, int) { CheckWorld(n); })));
  }
}

TEST_CASE("ucx: collectives over tcp at 2 and 3 ranks") {
  for (int n : {2, 3}) {
    INFO("world size " << n);
    CHECK(AllSucceeded(RunMultiproc(Options(n, "tcp,self"), [n](int, int) { CheckWorld(n); })));
  }
}

TEST_CASE("ucx: the ring on tiny messages at 3 ranks") {
  MultiprocOptions o = Options(3, "sm,self");
  o.env["ZERORUN_UCX_SMALL_BYTES"] = "0";  // every all-reduce takes the ring, even 1 element
  o.env["ZERORUN_UCX_SEGMENT_BYTES"] = "64";
  CHECK(AllSucceeded(RunMultiproc(o, [](int, int) {
    auto comm = InitFromEnv(Ucx());
    CheckAllCollectives(*comm, {1, 2, 3, 7, 1000}, {DType::kF32, DType::kF16, DType::kI64}, {ReduceOp::kSum, ReduceOp::kAvg});
  })));
}

TEST_CASE("ucx: a SIGKILLed rank is named by every survivor within seconds") {
  MultiprocOptions o = Options(3, "sm,self");
  o.env["ZERORUN_COMM_TIMEOUT"] = "60";
  o.deadline_s = 40;
  const std::string host = HostName();
  auto results = RunMultiproc(o, [&](int rank, int) {
    auto comm = InitFromEnv(Ucx());
    std::vector<float> buf(1 << 20, 1.0f);
    Stopwatch sw;
    try {
      for (int i = 0; i < 3; ++i) comm->AllReduce(buf.data(), buf.size(), DType::kF32, ReduceOp::kSum).Wait();
      if (rank == 2) {
        comm->AllReduce(buf.data(), buf.size(), DType::kF32, ReduceOp::kSum);  // in flight ...
        ::kill(::getpid(), SIGKILL);                                           // ... when it dies
      }
      for (int i = 0; i < 1000; ++i) comm->AllReduce(buf.data(), buf.size(), DType::kF32, ReduceOp::kSum).Wait();
      FAIL_CHECK("no error after the peer died");
    } catch (const TimeoutError& e) {
      FAIL_CHECK("timed out instead of detecting the death: " << std::string(e.what()));
    } catch (const CommError& e) {
      std::string m = e.what();
      INFO(m);
      CHECK(m.find("rank 2") != std::string::npos);
      CHECK(m.find(host) != std::string::npos);
      CHECK(sw.ElapsedSeconds() < 10);
    }
  });
  if (!zerorun::test::IsMultiprocChild()) {
    REQUIRE(results.size() == 3);
    CHECK(results[2].term_signal == SIGKILL);
    CHECK((results[0].exited && results[0].exit_code == 0));
    CHECK((results[1].exited && results[1].exit_code == 0));
  }
}

TEST_CASE("ucx: the death of rank 0 (the store host) is reported too") {
  MultiprocOptions o = Options(3, "sm,self");
  o.deadline_s = 40;
  auto results = RunMultiproc(o, [&](int rank, int) {
    auto comm = InitFromEnv(Ucx());
    float v = 1;
    Stopwatch sw;
    try {
      comm->AllReduce(&v, 1, DType::kF32, ReduceOp::kSum).Wait();
      if (rank == 0) ::kill(::getpid(), SIGKILL);
      for (int i = 0; i < 100000; ++i) comm->AllReduce(&v, 1, DType::kF32, ReduceOp::kSum).Wait();
      FAIL_CHECK("no error after rank 0 died");
    } catch (const CommError& e) {
      std::string m = e.what();
      INFO(m);
      CHECK(m.find("rank 0") != std::string::npos);
      CHECK(sw.ElapsedSeconds() < 10);
    }
  });
  if (!zerorun::test::IsMultiprocChild()) {
    CHECK(results[0].term_signal == SIGKILL);
    CHECK((results[1].exited && results[1].exit_code == 0));
    CHECK((results[2].exited && results[2].exit_code == 0));
  }
}

TEST_CASE("ucx: a SIGSTOPped rank makes the others time out naming it") {
  MultiprocOptions o = Options(3, "sm,self");
  o.deadline_s = 40;
  o.linger_s = 2;
  auto results = RunMultiproc(o, [&](int rank, int) {
    auto comm = InitFromEnv(Ucx());  // set-up under the default 30 s (a loaded machine can be slow here)
    float v = 1;
    comm->AllReduce(&v, 1, DType::kF32, ReduceOp::kSum).Wait();
    comm->set_timeout(Millis(3000));  // only the op the stopped rank misses is bounded by 3 s
    if (rank == 1) ::raise(SIGSTOP);
    try {
      comm->AllReduce(&v, 1, DType::kF32, ReduceOp::kSum).Wait();
      FAIL_CHECK("no timeout");
    } catch (const TimeoutError& e) {
      std::string m = e.what();
      INFO(m);
      CHECK(m.find("all_reduce #2") != std::string::npos);
      CHECK(m.find("did not arrive: rank 1 (host") != std::string::npos);
      CHECK(m.find("FROZEN: no heartbeat for") != std::string::npos);  // stopped, not dead
      CHECK(m.find("died") == std::string::npos);
    }
  });
  if (!zerorun::test::IsMultiprocChild()) {
    CHECK((results[0].exited && results[0].exit_code == 0));
    CHECK((results[2].exited && results[2].exit_code == 0));
    CHECK(results[1].term_signal == SIGKILL);  // reaped by the harness
  }
}

}  // TEST_SUITE

TEST_SUITE("unit") {

TEST_CASE("init: a single process without WORLD_SIZE gets a one-rank communicator") {
  if (zerorun::test::IsMultiprocChild()) return;
  const char* saved = std::getenv("WORLD_SIZE");
  if (saved) ZR_TEST_SKIP("WORLD_SIZE is set (running under a launcher): not this test's situation");
  auto comm = InitFromEnv();
  CHECK(comm->size() == 1);
  CHECK(comm->rank() == 0);
  float v = 3;
  comm->AllReduce(&v, 1, DType::kF32, ReduceOp::kAvg).Wait();
  CHECK(v == 3);
  CHECK_THROWS_AS(InitFromEnv(Backend("bogus")), InvalidArgument);
}

}  // TEST_SUITE

TEST_SUITE("multiproc") {

TEST_CASE("ucx: a 16-bit reduce sends 16-bit partials (each non-root rank sends count elements once)") {
  const int n = 3;
  CHECK(AllSucceeded(RunMultiproc(Options(n, "sm,self"), [](int, int) {
    auto comm = InitFromEnv(Ucx());
    const size_t count = 5000;
    auto buf = Filled(DType::kBF16, comm->rank(), count);
    std::vector<uint16_t> out(count);
    comm->ResetStats();
    comm->Reduce(buf.data(), comm->rank() == 1 ? out.data() : nullptr, count, DType::kBF16, ReduceOp::kSum, 1).Wait();
    if (comm->rank() == 1) {
      CheckRange("bf16 reduce", DType::kBF16, out.data(), count,
                 [&](size_t i) { return Expected(DType::kBF16, ReduceOp::kSum, comm->size(), i); });
    }
    const int64_t sent = comm->Stats()[OpType::kReduce].bytes_sent;
    CHECK(sent == (comm->rank() == 1 ? 0 : static_cast<int64_t>(count * 2)));
    comm->Barrier().Wait();
  })));
}

}  // TEST_SUITE

// The `local` backend (ranks as threads) and, through it, the funnel shared by every backend:
// closed-form results for every collective, dtype, op, world size 1..8 and awkward counts; Split;
// accounting and the comms_logger; timeouts naming the ranks that did not arrive; a rank that dies.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/comm/collectives_check.h"
#include "zerorun/comm/local/local_comm.h"
#include "zerorun/comm/reduce.h"
#include "zerorun/core/error.h"
#include "zerorun/core/tensor.h"
#include "zerorun/core/timer.h"

using namespace zerorun;
using namespace zerorun::comm;
using namespace zerorun::comm::testing;

TEST_SUITE("unit") {

TEST_CASE("local: every collective, dtype and op for world sizes 1..8") {
  for (int n = 1; n <= 8; ++n) {
    RunLocalRanks(n, [](Communicator& comm) {
      CheckAllCollectives(comm, {0, 1, 7, 4099});
      CheckSendRecv(comm, 4099);
    });
  }
}

TEST_CASE("local: large all_reduce (1M elements)") {
  const size_t count = size_t{1} << 20;
  RunLocalRanks(3, [&](Communicator& comm) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      auto buf = Filled(t, comm.rank(), count);
      comm.AllReduce(buf.data(), count, t, ReduceOp::kSum).Wait();
      CheckRange("all_reduce 1M", t, buf.data(), count, [&](size_t i) { return Expected(t, ReduceOp::kSum, 3, i); });
    }
  });
}

TEST_CASE("local: reduction kernels round 16-bit once") {
  // 1 + 2^-11 + 2^-11 in fp16: rounding each partial sum loses both halves; one rounding keeps 2^-10.
  const float tiny = 1.0f / 2048;
  uint16_t a[1] = {FloatToHalfBits(1.0f)}, b[1] = {FloatToHalfBits(tiny)};
  float acc[1];
  ToAccum(acc, a, 1, DType::kF16);
  ReduceIntoAccum(acc, acc, b, 1, DType::kF16, ReduceOp::kSum);
  ReduceIntoAccum(acc, acc, b, 1, DType::kF16, ReduceOp::kSum);
  uint16_t out[1];
  FinishFromAccum(out, acc, 1, DType::kF16, ReduceOp::kSum, 0);
  CHECK(HalfBitsToFloat(out[0]) == 1.0f + 2 * tiny);
  RunLocalRanks(3, [&](Communicator& comm) {
    uint16_t v = FloatToHalfBits(comm.rank() == 0 ? 1.0f : tiny);
    comm.AllReduce(&v, 1, DType::kF16, ReduceOp::kSum).Wait();
    CHECK(HalfBitsToFloat(v) == 1.0f + 2 * tiny);
  });
}

TEST_CASE("local: split into sub-groups ordered by key") {
  RunLocalRanks(7, [](Communicator& comm) {
    const int r = comm.rank();
    // colors r % 3, key -r: inside a color, higher old ranks come first.
    auto sub = comm.Split(r % 3, -r);
    REQUIRE(sub != nullptr);
    std::vector<int> members;
    for (int q = 6; q >= 0; --q) {
      if (q % 3 == r % 3) members.push_back(q);
    }
    CHECK(sub->size() == static_cast<int>(members.size()));
    CHECK(members[static_cast<size_t>(sub->rank())] == r);
    int64_t v = r;
    sub->AllReduce(&v, 1, DType::kI64, ReduceOp::kSum).Wait();
    int64_t want = 0;
    for (int q : members) want += q;
    CHECK(v == want);
    // Sub-groups of a sub-group, and opting out with kNoColor.
    auto sub2 = sub->Split(sub->rank() == 0 ? Communicator::kNoColor : 0, 0);
    CHECK((sub2 == nullptr) == (sub->rank() == 0));
    if (sub2) {
      CHECK(sub2->size() == sub->size() - 1);
      sub2->Barrier().Wait();
    }
    comm.Barrier().Wait();
  });
}

TEST_CASE("local: byte accounting per op and the comms logger") {
  RunLocalRanks(4, [](Communicator& comm) {
    CommsLoggerOptions log;
    log.enabled = true;
    comm.SetCommsLogger(log);
    std::vector<float> buf(1000, 1.0f);
    comm.AllReduce(buf.data(), 1000, DType::kF32, ReduceOp::kSum).Wait();
    comm.AllReduce(buf.data(), 1000, DType::kF32, ReduceOp::kSum).Wait();
    std::vector<float> out(4000);
    comm.AllGather(buf.data(), out.data(), 1000, DType::kF32).Wait();
    CommStats s = comm.Stats();
    CHECK(s[OpType::kAllReduce].calls == 2);
    CHECK(s[OpType::kAllReduce].payload_bytes == 8000);
    CHECK(s[OpType::kAllReduce].bytes_sent == 2 * (2 * 3 * 4000 / 4));  // 2(n-1)/n per call
    CHECK(s[OpType::kAllGather].calls == 1);
    CHECK(s[OpType::kAllGather].payload_bytes == 16000);
    CHECK(s[OpType::kAllGather].bytes_received == 3 * 4000);
    CHECK(s.Total().calls == 3);
    auto recs = comm.Records();
    REQUIRE(recs.size() == 3);
    CHECK(recs[0].op == OpType::kAllReduce);
    CHECK(recs[0].seq == 1);
    CHECK(recs[2].size_bytes == 16000);
    CHECK(recs[1].busbw_gbps == doctest::Approx(recs[1].algbw_gbps * 1.5));
    CHECK(comm.LogSummary().find("all_gather") != std::string::npos);
    comm.ResetStats();
    CHECK(comm.Stats().Total().calls == 0);
  });
}

TEST_CASE("local: async works complete in order and tensors are accepted") {
  RunLocalRanks(3, [](Communicator& comm) {
    std::vector<Tensor> ts;
    std::vector<Work> works;
    for (int i = 0; i < 5; ++i) {
      ts.push_back(Tensor::FromVector(std::vector<float>(10, static_cast<float>(comm.rank() + i)), {10}));
      works.push_back(comm.AllReduce(ts.back(), ReduceOp::kSum));
    }
    for (auto& w : works) w.Wait();
    for (int i = 0; i < 5; ++i) CHECK(ts[static_cast<size_t>(i)].ToVector()[3] == static_cast<float>(3 + 3 * i));
    CHECK(works[4].IsCompleted());
    Tensor out = Tensor::Empty({30}, DType::kF32);
    comm.AllGather(ts[0], out).Wait();
    CHECK(out.ToVector()[25] == 3.0f);
    CHECK_THROWS_AS(comm.AllGather(ts[0], ts[1]), InvalidArgument);
  });
}

TEST_CASE("local: an op nobody waits for or polls still runs right after ops ran inline") {
  // While Work::Wait runs ops on the caller's thread, Submit does not wake the executor
  // (comm/communicator.cc, kInlineWindow); the executor polls instead and takes an op that stayed
  // unclaimed for kDeferGrace (1 ms). Without that poll this op would never start. Forced on: by default
  // it is only on where ranks outnumber CPUs.
  ::setenv("ZERORUN_COMM_DEFER", "1", 1);
  struct Unset {
    ~Unset() { ::unsetenv("ZERORUN_COMM_DEFER"); }
  } unset;
  RunLocalRanks(2, [](Communicator& comm) {
    std::vector<float> x(256, 1.0f);
    for (int i = 0; i < 50; ++i) comm.AllReduce(x.data(), x.size(), DType::kF32, ReduceOp::kMax).Wait();
    std::vector<float> y(256, static_cast<float>(comm.rank() + 1));
    Work w = comm.AllReduce(y.data(), y.size(), DType::kF32, ReduceOp::kSum);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(w.IsCompleted());  // the first look: IsCompleted itself wakes the executor for a deferred op
    w.Wait();
    CHECK(y[7] == 3.0f);
    // Ops queued behind each other and waited for last-first run in submission order.
    std::vector<float> a(64, 1.0f), b(64, 2.0f);
    Work wa = comm.AllReduce(a.data(), a.size(), DType::kF32, ReduceOp::kSum);
    Work wb = comm.AllReduce(b.data(), b.size(), DType::kF32, ReduceOp::kSum);
    wb.Wait();
    CHECK(wa.IsCompleted());
    CHECK(a[0] == 2.0f);
    CHECK(b[63] == 4.0f);
  });
}

TEST_CASE("local: bad arguments are refused before any rank waits") {
  RunLocalRanks(2, [](Communicator& comm) {
    int8_t b[4] = {};
    float f[4] = {};
    CHECK_THROWS_AS(comm.AllReduce(b, 4, DType::kI8, ReduceOp::kSum), InvalidArgument);
    CHECK_THROWS_AS(comm.Broadcast(f, 4, DType::kF32, 2), InvalidArgument);
    CHECK_THROWS_AS(comm.Send(f, 4, DType::kF32, comm.rank()), InvalidArgument);
    CHECK_THROWS_AS(comm.AllReduce(nullptr, f, 4, DType::kF32, ReduceOp::kSum), InvalidArgument);
    CHECK_THROWS_AS(comm.AllReduce(f, f + 1, 2, DType::kF32, ReduceOp::kSum), InvalidArgument);
    CHECK(comm.last_seq() == 0);  // refused calls consume no sequence number
    comm.AllReduce(f, 4, DType::kF32, ReduceOp::kSum).Wait();
    CHECK(comm.last_seq() == 1);
  });
}

TEST_CASE("local: a rank that does not call times out the others naming it") {
  CommOptions o;
  o.timeout = Millis(300);
  std::atomic<int> named{0};
  Stopwatch sw;
  RunLocalRanks(
      4,
      [&](Communicator& comm) {
        float v = 1;
        comm.AllReduce(&v, 1, DType::kF32, ReduceOp::kSum).Wait();
        if (comm.rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(800));
          return;  // skips the second all-reduce (rank-conditional code)
        }
        try {
          comm.AllReduce(&v, 1, DType::kF32, ReduceOp::kSum).Wait();
          FAIL_CHECK("no timeout");
        } catch (const TimeoutError& e) {
          std::string m = e.what();
          INFO(m);
          CHECK(m.find("all_reduce #2") != std::string::npos);
          CHECK(m.find("did not arrive") != std::string::npos);
          CHECK(m.find("rank 2") != std::string::npos);
          CHECK(m.find("rank 1 ") == std::string::npos);  // only the missing one is named
          ++named;
        }
        // The communicator is aborted: later ops fail at once with the first error.
        CHECK_THROWS_AS(comm.Barrier().Wait(), CommError);
      },
      o);
  CHECK(named.load() == 3);
  CHECK(sw.ElapsedSeconds() < 10);
}

TEST_CASE("local: set_timeout bounds later ops and later splits, not the ones that ran before") {
  CommOptions o;
  o.timeout = Millis(60000);
  std::atomic<int> timed_out{0};
  Stopwatch sw;
  RunLocalRanks(
      2,
      [&](Communicator& comm) {
        CHECK(comm.timeout() == Millis(60000));
        CHECK_THROWS_AS(comm.set_timeout(Millis(0)), InvalidArgument);
        CHECK(comm.timeout() == Millis(60000));  // a refused value changes nothing
        float v = 1;
        if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(700));
        comm.AllReduce(&v, 1, DType::kF32, ReduceOp::kSum).Wait();  // 0.7 s late: fine under 60 s
        comm.set_timeout(Millis(20000));
        auto sub = comm.Split(0, comm.rank());  // under the parent's new timeout, which it inherits
        CHECK(sub->timeout() == Millis(20000));
        sub->set_timeout(Millis(250));  // only the op rank 1 skips is bounded this tightly
        if (comm.rank() == 1) {  // skips the next all-reduce, its communicators alive past the timeout
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          return;
        }
        try {
          sub->AllReduce(&v, 1, DType::kF32, ReduceOp::kSum).Wait();
          FAIL_CHECK("no timeout");
        } catch (const TimeoutError& e) {
          std::string m = e.what();
          INFO(m);
          CHECK(m.find("timed out after 0.25 s") != std::string::npos);
          ++timed_out;
        }
      },
      o);
  CHECK(timed_out.load() == 1);
  CHECK(sw.ElapsedSeconds() < 10);
}

TEST_CASE("local: a rank that dies fails the others promptly") {
  CommOptions o;
  o.timeout = Millis(60000);
  Stopwatch sw;
  std::atomic<int> named{0};
  CHECK_THROWS_WITH_AS(
      RunLocalRanks(
          3,
          [&](Communicator& comm) {
            if (comm.rank() == 1) throw DataError("rank 1 fails");
            float v = 1;
            try {
              comm.AllReduce(&v, 1, DType::kF32, ReduceOp::kSum).Wait();
            } catch (const CommError& e) {
              if (std::string(e.what()).find("rank 1") != std::string::npos) ++named;
            }
          },
          o),
      "rank 1 fails", DataError);
  CHECK(named.load() == 2);
  CHECK(sw.ElapsedSeconds() < 10);
}

TEST_CASE("local: Work::Wait with a timeout aborts the communicator") {
  CommOptions o;
  o.timeout = Millis(5000);
  RunLocalRanks(
      2,
      [](Communicator& comm) {
        float v = 1;
        if (comm.rank() == 0) {
          Work w = comm.AllReduce(&v, 1, DType::kF32, ReduceOp::kSum);
          CHECK_THROWS_AS(w.Wait(Millis(100)), TimeoutError);
          CHECK(comm.aborted());
          CHECK_THROWS_AS(w.Wait(), CommError);
        }
      },
      o);
}

}  // TEST_SUITE

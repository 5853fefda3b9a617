// A device communicator given host buffers (the engine's small agreement collectives) stages them
// through device memory (comm/device_staging.h), as the NCCL backend does; here through the fake
// device communicator, which refuses any host pointer that reaches the transport.
#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "fake_device.h"
#include "zerorun/comm/device_staging.h"
#include "zerorun/comm/local/local_comm.h"

using namespace zerorun;
using zrtest::fake::FakeCudaDevice;

TEST_SUITE("unit") {

TEST_CASE("device communicator: host buffers are staged through device memory, in place or not, every op kind") {
  FakeCudaDevice fake;
  comm::RunLocalRanks(3, [&](comm::Communicator& local) {
    auto c = zrtest::fake::MakeFakeDeviceComm(local);
    const int r = c->rank(), w = c->size();
    // In-place all-reduce of a host scalar (the overflow flag) and of host doubles (sums of squares).
    int32_t flag = r == 1 ? 1 : 0;
    c->AllReduce(&flag, 1, DType::kI32, comm::ReduceOp::kMax).Wait();
    CHECK(flag == 1);
    std::vector<double> sums = {1.0 * r, 2.0 * r};
    c->AllReduce(sums.data(), sums.size(), DType::kF64, comm::ReduceOp::kSum).Wait();
    CHECK(sums == std::vector<double>{3.0, 6.0});
    // Out-of-place all-gather, and in place (send inside recv at rank * count).
    int64_t mine[2] = {r, 10 + r};
    std::vector<int64_t> all(static_cast<size_t>(2 * w));
    c->AllGather(mine, all.data(), 2, DType::kI64).Wait();
    CHECK(all == std::vector<int64_t>{0, 10, 1, 11, 2, 12});
    std::vector<int64_t> inplace(static_cast<size_t>(2 * w), -1);
    inplace[static_cast<size_t>(2 * r)] = r, inplace[static_cast<size_t>(2 * r + 1)] = 10 + r;
    c->AllGather(inplace.data() + 2 * r, inplace.data(), 2, DType::kI64).Wait();
    CHECK(inplace == all);
    // In-place reduce-scatter (recv inside send).
    std::vector<float> rs(static_cast<size_t>(2 * w));
    std::iota(rs.begin(), rs.end(), static_cast<float>(r));
    c->ReduceScatter(rs.data(), rs.data() + 2 * r, 2, DType::kF32, comm::ReduceOp::kSum).Wait();
    CHECK(rs[static_cast<size_t>(2 * r)] == static_cast<float>(3 * (2 * r) + 3));
    // Broadcast of host bytes (the save path's error text).
    std::vector<char> text(5, r == 0 ? 'x' : '.');
    c->Broadcast(text.data(), text.size(), DType::kU8, 0).Wait();
    CHECK(std::string(text.begin(), text.end()) == "xxxxx");
  });
  CHECK(fake.violation_count() == 0);
  CHECK(fake.counts().collectives == 3 * 6);
}

TEST_CASE("device staging: bytes each op reads and writes") {
  comm::OpDesc op;
  op.count = 4;
  op.dtype = DType::kF32;
  op.op = comm::OpType::kAllGather;
  CHECK(comm::SendBytes(op, 3, 0) == 16);
  CHECK(comm::RecvBytes(op, 3, 0) == 48);
  op.op = comm::OpType::kReduceScatter;
  CHECK(comm::SendBytes(op, 3, 0) == 48);
  CHECK(comm::RecvBytes(op, 3, 0) == 16);
  op.op = comm::OpType::kReduce;
  op.root = 1;
  CHECK(comm::RecvBytes(op, 3, 0) == 0);
  CHECK(comm::RecvBytes(op, 3, 1) == 16);
  op.op = comm::OpType::kBroadcast;
  CHECK(comm::SendBytes(op, 3, 0) == 0);
  CHECK(comm::SendBytes(op, 3, 1) == 16);
}

}  // TEST_SUITE

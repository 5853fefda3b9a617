// The `nccl` backend on real GPUs: rendezvous through the store (InitFromEnv), every collective on
// device buffers with closed-form data checked on the host, split groups, and accounting. One rank
// per GPU (NCCL does not allow two ranks on one device): world size = min(GPUs, 4); with one GPU the
// single-rank paths still run the whole NCCL setup. Skipped (CTest: skipped) when no GPU is visible.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/common/multiproc.h"
#include "tests/common/skip.h"
#include "zerorun/comm/init.h"
#include "zerorun/core/dtype.h"
#include "zerorun/core/error.h"

using namespace zerorun;
using namespace zerorun::comm;

namespace {

int GpuCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

template <typename T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : count(n) { REQUIRE(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
  void Upload(const std::vector<T>& v) { REQUIRE(cudaMemcpy(ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess); }
  std::vector<T> Download() const {
    std::vector<T> v(count);
    REQUIRE(cudaMemcpy(v.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
  T* ptr = nullptr;
  size_t count;
};

float Value(int rank, size_t i) { return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3 + 1) % 17) - 8); }

void RunAll(int n) {
  InitOptions io;
  io.backend = "nccl";
  auto comm = InitFromEnv(io);
  REQUIRE(comm->size() == n);
  CHECK(comm->device().is_cuda());
  const int r = comm->rank();
  for (size_t count : {size_t{1}, size_t{7}, size_t{4099}, size_t{1} << 20}) {
    std::vector<float> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = Value(r, i);
    DeviceBuffer<float> buf(count);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      buf.Upload(host);
      comm->AllReduce(buf.ptr, count, DType::kF32, op).Wait();
      auto got = buf.Download();
      size_t bad = 0;
      for (size_t i = 0; i < count; ++i) {
        float sum = 0, mx = -100, mn = 100;
        for (int q = 0; q < n; ++q) {
          sum += Value(q, i);
          mx = std::max(mx, Value(q, i));
          mn = std::min(mn, Value(q, i));
        }
        float want = op == ReduceOp::kSum ? sum : op == ReduceOp::kMax ? mx : op == ReduceOp::kMin ? mn : sum / static_cast<float>(n);
        bad += op == ReduceOp::kAvg ? std::abs(got[i] - want) > 1e-6f : got[i] != want;
      }
      INFO("all_reduce " << ReduceOpName(op) << " count " << count);
      CHECK(bad == 0);
    }
    // all_gather then reduce_scatter (sum of the gathered copies = n · each rank's slice sum).
    DeviceBuffer<float> gathered(count * static_cast<size_t>(n));
    buf.Upload(host);
    comm->AllGather(buf.ptr, gathered.ptr, count, DType::kF32).Wait();
    auto g = gathered.Download();
    size_t bad = 0;
    for (size_t j = 0; j < g.size(); ++j) bad += g[j] != Value(static_cast<int>(j / count), j % count);
    CHECK(bad == 0);
    DeviceBuffer<float> scattered(count);
    comm->ReduceScatter(gathered.ptr, scattered.ptr, count, DType::kF32, ReduceOp::kSum).Wait();
    auto s = scattered.Download();
    bad = 0;
    for (size_t i = 0; i < count; ++i) bad += s[i] != static_cast<float>(n) * Value(r, i);
    CHECK(bad == 0);
    // broadcast from the last rank, reduce to rank 0
    buf.Upload(host);
    comm->Broadcast(buf.ptr, count, DType::kF32, n - 1).Wait();
    auto b = buf.Download();
    bad = 0;
    for (size_t i = 0; i < count; ++i) bad += b[i] != Value(n - 1, i);
    CHECK(bad == 0);
  }
  // bf16 sums of small integers are exact.
  std::vector<uint16_t> h16(4099);
  for (size_t i = 0; i < h16.size(); ++i) h16[i] = FloatToBF16Bits(Value(r, i));
  DeviceBuffer<uint16_t> b16(h16.size());
  b16.Upload(h16);
  comm->AllReduce(b16.ptr, h16.size(), DType::kBF16, ReduceOp::kSum).Wait();
  auto out16 = b16.Download();
  size_t bad = 0;
  for (size_t i = 0; i < out16.size(); ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += Value(q, i);
    bad += BF16BitsToFloat(out16[i]) != want;
  }
  CHECK(bad == 0);
  comm->Barrier().Wait();
  auto sub = comm->Split(0, -r);  // one group, reversed order
  REQUIRE(sub);
  CHECK(sub->rank() == n - 1 - r);
  sub->Barrier().Wait();
  CHECK(comm->Stats()[OpType::kAllReduce].calls >= 16);
}

}  // namespace

TEST_SUITE("gpu") {

TEST_CASE("nccl: collectives on device memory at min(GPUs 4) ranks") {
  const int gpus = zerorun::test::IsMultiprocChild() ? 1 : GpuCount();
  if (gpus == 0) ZR_TEST_SKIP("no GPU visible");
  zerorun::test::MultiprocOptions o;
  o.world_size = zerorun::test::IsMultiprocChild() ? 1 : std::min(gpus, 4);
  o.deadline_s = 240;
  o.env["ZERORUN_COMM_TIMEOUT"] = "120";
  CHECK(zerorun::test::AllSucceeded(zerorun::test::RunMultiproc(o, [](int, int world) { RunAll(world); })));
}

}  // TEST_SUITE

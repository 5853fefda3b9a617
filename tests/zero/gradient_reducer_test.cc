// GradientReducer on the local backend: averaged all-reduce of the full gradient (stages 0/1) and
// scatter-reduction into partition accumulators (stage 2), with closed-form expected values every rank
// computes itself, every bucket size, prescale/predivide, comm dtype staging, and the per-rank
// gradient traffic of the scatter mode: each element not owned is sent once.
#include <doctest/doctest.h>

#include <cmath>
#include <mutex>

#include "zerorun/comm/local/local_comm.h"
#include "zerorun/zero/gradient_reducer.h"

namespace z = zerorun::zero;
using zerorun::DType;
using zerorun::Tensor;
namespace comm = zerorun::comm;

namespace {
// Rank r's gradient of flat element i.
float G(int r, int64_t i) { return static_cast<float>((r + 1) * 0.25 + (i % 7) * 0.5); }
}  // namespace

TEST_SUITE("unit") {

TEST_CASE("gradient reducer: all-reduce mode averages the whole flat gradient") {
  const std::vector<int64_t> numels = {5, 0, 17, 3, 40};
  for (int world : {1, 2, 3, 4}) {
    for (int64_t bucket : {1, 7, 30, 1000}) {
      for (int variant = 0; variant < 3; ++variant) {
        comm::RunLocalRanks(world, [&](comm::Communicator& c) {
          z::FlatGroupLayout l = z::LayoutFlatGroup(numels, world);
          Tensor grads = Tensor::Zeros({l.padded_numel}, DType::kF32);
          for (int64_t i = 0; i < l.data_numel; ++i) grads.data_as<float>()[i] = G(c.rank(), i);
          z::GradReduceOptions o;
          o.bucket_numel = bucket;
          o.comm_dtype = DType::kF32;
          if (variant == 1) o.prescale = true;
          if (variant == 2) o.predivide = 2.0;
          z::GradientReducer red(l, DType::kF32, c, o, grads, Tensor());
          // Backward order: last parameter first.
          for (int p = static_cast<int>(numels.size()) - 1; p >= 0; --p) red.MarkReady(p);
          red.Finish();
          for (int64_t i = 0; i < l.data_numel; ++i) {
            double want = 0;
            for (int r = 0; r < world; ++r) want += G(r, i);
            want /= world;
            CHECK(grads.data_as<float>()[i] == doctest::Approx(want).epsilon(1e-6));
          }
        });
      }
    }
  }
}

TEST_CASE("gradient reducer: scatter mode delivers each partition to its owner and accumulates") {
  const std::vector<int64_t> numels = {9, 4, 31, 1, 12};
  for (int world : {1, 2, 3, 5}) {
    for (int64_t bucket : {3, 16, 100}) {
      std::mutex mu;
      std::vector<int64_t> sent(static_cast<size_t>(world));
      comm::RunLocalRanks(world, [&](comm::Communicator& c) {
        z::FlatGroupLayout l = z::LayoutFlatGroup(numels, world);
        Tensor part = Tensor::Zeros({l.partition_numel}, DType::kF32);
        z::GradReduceOptions o;
        o.mode = z::GradReduceOptions::Mode::kScatter;
        o.bucket_numel = bucket;
        o.comm_dtype = DType::kF32;
        z::GradientReducer red(l, DType::kF32, c, o, Tensor(), part);
        c.ResetStats();
        for (int micro = 0; micro < 2; ++micro) {  // two micro-steps accumulate
          for (int p = static_cast<int>(numels.size()) - 1; p >= 0; --p) {
            Tensor g = red.GradView(p, {numels[static_cast<size_t>(p)]});
            for (int64_t k = 0; k < g.numel(); ++k) g.data_as<float>()[k] += G(c.rank(), l.offsets[p] + k);
            red.MarkReady(p);
          }
          red.Finish();
          CHECK(red.live_bucket_bytes() == 0);
        }
        z::Range own = l.Partition(c.rank());
        for (int64_t i = own.begin; i < own.end; ++i) {
          double want = 0;
          if (i < l.data_numel) {
            for (int r = 0; r < world; ++r) want += G(r, i);
            want = 2 * want / world;
          }
          CHECK(part.data_as<float>()[i - own.begin] == doctest::Approx(want).epsilon(1e-6));
        }
        std::lock_guard<std::mutex> lock(mu);
        sent[static_cast<size_t>(c.rank())] = c.Stats().Total().bytes_sent;
      });
      if (world > 1) {
        // Reduce-scatter volume: over both micro-steps, Ψ(N-1)/N elements per rank on average.
        z::FlatGroupLayout l = z::LayoutFlatGroup(numels, world);
        int64_t total = 0;
        for (int64_t s : sent) total += s;
        CHECK(total == 2 * l.data_numel * (world - 1) * 4);
      }
    }
  }
}

TEST_CASE("gradient reducer: a bf16 wire for fp32 gradients stages through the comm dtype") {
  comm::RunLocalRanks(2, [&](comm::Communicator& c) {
    z::FlatGroupLayout l = z::LayoutFlatGroup({8}, 2);
    Tensor grads = Tensor::Zeros({l.padded_numel}, DType::kF32);
    for (int64_t i = 0; i < 8; ++i) grads.data_as<float>()[i] = c.rank() == 0 ? 1.0f + 1.0f / 1024 : 1.0f;
    z::GradReduceOptions o;
    o.comm_dtype = DType::kBF16;
    z::GradientReducer red(l, DType::kF32, c, o, grads, Tensor());
    red.MarkReady(0);
    red.Finish();
    // 1 + 2^-10 is not a bf16 value: it is rounded to 1 on the wire, so the mean is exactly 1.
    CHECK(grads.data_as<float>()[3] == 1.0f);
  });
}

}  // TEST_SUITE

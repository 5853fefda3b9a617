// The gradient-bucket path on the local backend: stage 0's all-reduce of the whole flat gradient,
// stage 1's in-place reduce-scatter into each rank's slice, stage 2's transient buckets accumulated
// into the partition, stage 3's coalesced shards — with closed-form expected values every rank computes
// itself, several bucket sizes, prescale/predivide, comm-dtype staging, one collective per bucket and
// its traffic, and the queue's backpressure (at most two buckets in flight) and synchronous mode.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <string>
#include <thread>

#include "zerorun/comm/local/local_comm.h"
#include "zerorun/zero/grad_buckets.h"

namespace z = zerorun::zero;
using zerorun::DType;
using zerorun::Tensor;
namespace comm = zerorun::comm;

namespace {
// Rank r's gradient of flat element i.
float G(int r, int64_t i) { return static_cast<float>((r + 1) * 0.25 + (i % 7) * 0.5); }

z::GradBucketOptions Options(DType comm_dtype = DType::kF32) {
  z::GradBucketOptions o;
  o.comm_dtype = comm_dtype;
  return o;
}
}  // namespace

TEST_SUITE("unit") {

TEST_CASE("grad buckets: stage 0 all-reduces the whole flat gradient, one all-reduce per bucket") {
  const std::vector<int64_t> numels = {5, 0, 17, 3, 40};
  for (int world : {1, 2, 3, 4}) {
    for (int64_t bucket : {1, 7, 30, 1000}) {
      for (int variant = 0; variant < 3; ++variant) {
        comm::RunLocalRanks(world, [&](comm::Communicator& c) {
          z::FlatGroupLayout l = z::LayoutFlatGroup(numels, world, 2, false, bucket, z::FlatBucketing::kWhole);
          Tensor grads = Tensor::Zeros({l.padded_numel}, DType::kF32);
          for (int64_t i = 0; i < l.data_numel; ++i) grads.data_as<float>()[i] = G(c.rank(), i);
          z::GradBucketOptions o = Options();
          if (variant == 1) o.prescale = true;
          if (variant == 2) o.predivide = 2.0;
          z::GradBucketQueue q(c, o);
          z::FlatGradBuckets b(l, DType::kF32, z::FlatGradBuckets::Target::kAllReduce, q, grads, Tensor());
          c.ResetStats();
          // Backward order: last parameter first.
          for (int p = static_cast<int>(numels.size()) - 1; p >= 0; --p) b.MarkReady(p);
          b.SubmitRest();
          q.Drain();
          CHECK(q.submitted() == static_cast<int64_t>(l.buckets.size()));
          CHECK(c.Stats()[comm::OpType::kAllReduce].calls == (world > 1 ? static_cast<int64_t>(l.buckets.size()) : 0));
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

TEST_CASE("grad buckets: stage 2 delivers each rank's slice of every bucket and accumulates it") {
  const std::vector<int64_t> numels = {9, 4, 31, 1, 12};
  for (int world : {1, 2, 3, 5}) {
    for (int64_t bucket : {3, 16, 100}) {
      std::mutex mu;
      std::vector<int64_t> sent(static_cast<size_t>(world)), calls(static_cast<size_t>(world));
      z::FlatGroupLayout l = z::LayoutFlatGroup(numels, world, 2, false, bucket);
      comm::RunLocalRanks(world, [&](comm::Communicator& c) {
        Tensor part = Tensor::Zeros({l.partition_numel}, DType::kF32);
        z::GradBucketQueue q(c, Options());
        z::FlatGradBuckets b(l, DType::kF32, z::FlatGradBuckets::Target::kAccumulateSlice, q, Tensor(), part);
        c.ResetStats();
        for (int micro = 0; micro < 2; ++micro) {  // two micro-steps accumulate
          for (int p = static_cast<int>(numels.size()) - 1; p >= 0; --p) {
            Tensor g = b.GradView(p);
            for (int64_t k = 0; k < g.numel(); ++k) g.data_as<float>()[k] += G(c.rank(), l.offsets[p] + k);
            b.MarkReady(p);
            CHECK(q.in_flight() <= 2);
          }
          b.SubmitRest();
          q.Drain();
          CHECK(b.live_bucket_bytes() == 0);
        }
        // Element k of the partition is flat element FlatOffset(rank, k); its parameter element (or 0).
        for (int64_t k = 0; k < l.partition_numel; ++k) {
          const int64_t flat = l.FlatOffset(c.rank(), k);
          double want = 0;
          for (size_t p = 0; p < numels.size(); ++p) {
            if (flat >= l.offsets[p] && flat < l.offsets[p] + numels[p]) {
              for (int r = 0; r < world; ++r) want += G(r, flat);
              want = 2 * want / world;
            }
          }
          CHECK(part.data_as<float>()[k] == doctest::Approx(want).epsilon(1e-6));
        }
        std::lock_guard<std::mutex> lock(mu);
        sent[static_cast<size_t>(c.rank())] = c.Stats().Total().bytes_sent;
        calls[static_cast<size_t>(c.rank())] = c.Stats()[comm::OpType::kReduceScatter].calls;
      });
      if (world > 1) {
        // One reduce-scatter per bucket and micro-step, moving the padded bucket: (W-1)/W of it per rank.
        int64_t total = 0;
        for (int64_t s : sent) total += s;
        CHECK(total == 2 * l.padded_numel * (world - 1) * 4);
        for (int64_t n : calls) CHECK(n == 2 * static_cast<int64_t>(l.buckets.size()));
      }
    }
  }
}

TEST_CASE("grad buckets: stage 1 reduce-scatters in place into each rank's slice of the full gradients") {
  const std::vector<int64_t> numels = {9, 4, 31, 1, 12};
  for (int world : {2, 3, 4}) {
    for (int64_t bucket : {5, 40}) {
      for (DType wire : {DType::kF32, DType::kBF16}) {
        comm::RunLocalRanks(world, [&](comm::Communicator& c) {
          z::FlatGroupLayout l = z::LayoutFlatGroup(numels, world, 2, false, bucket);
          Tensor grads = Tensor::Zeros({l.padded_numel}, DType::kF32);
          for (size_t p = 0; p < numels.size(); ++p) {
            for (int64_t k = 0; k < numels[p]; ++k) grads.data_as<float>()[l.offsets[p] + k] = G(c.rank(), l.offsets[p] + k);
          }
          z::GradBucketOptions o = Options(wire);
          o.predivide = 2.0;  // ×1/2, sum, ×2/W
          z::GradBucketQueue q(c, o);
          z::FlatGradBuckets b(l, DType::kF32, z::FlatGradBuckets::Target::kOwnSlice, q, grads, Tensor());
          b.SubmitRest();  // none marked: every bucket goes in fill order
          q.Drain();
          for (const z::FlatBucket& fb : l.buckets) {
            const z::Range slice = fb.Slice(c.rank());
            for (int64_t i = slice.begin; i < slice.end; ++i) {
              double want = 0;
              if (i < fb.range.begin + fb.data_numel) {
                for (int r = 0; r < world; ++r) want += G(r, i);
                want /= world;
              }
              CHECK(grads.data_as<float>()[i] == doctest::Approx(want).epsilon(wire == DType::kF32 ? 1e-6 : 1e-2));
            }
          }
        });
      }
    }
  }
}

TEST_CASE("grad buckets: a bf16 wire for fp32 gradients stages through the comm dtype") {
  comm::RunLocalRanks(2, [&](comm::Communicator& c) {
    z::FlatGroupLayout l = z::LayoutFlatGroup({8}, 2, 2, false, z::kOneBucket, z::FlatBucketing::kWhole);
    Tensor grads = Tensor::Zeros({l.padded_numel}, DType::kF32);
    for (int64_t i = 0; i < 8; ++i) grads.data_as<float>()[i] = c.rank() == 0 ? 1.0f + 1.0f / 1024 : 1.0f;
    z::GradBucketQueue q(c, Options(DType::kBF16));
    z::FlatGradBuckets b(l, DType::kF32, z::FlatGradBuckets::Target::kAllReduce, q, grads, Tensor());
    b.MarkReady(0);
    q.Drain();
    // 1 + 2^-10 is not a bf16 value: it is rounded to 1 on the wire, so the mean is exactly 1.
    CHECK(grads.data_as<float>()[3] == 1.0f);
  });
}

TEST_CASE("grad buckets: at most two buckets travel; the third is packed only after the oldest landed") {
  for (bool synchronous : {false, true}) {
    CAPTURE(synchronous);
    std::mutex mu;
    std::vector<std::string> events;  // rank 0's pack/land order
    comm::RunLocalRanks(2, [&](comm::Communicator& c) {
      z::GradBucketOptions o = Options();
      o.synchronous = synchronous;
      z::GradBucketQueue q(c, o);
      // Rank 1 is late: rank 0's first collectives cannot finish before it arrives, so only the
      // backpressure rule decides when rank 0 may pack its third bucket.
      if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::vector<float> result(5);
      for (int k = 0; k < 5; ++k) {
        q.Submit([&, k] {
          if (c.rank() == 0) {
            std::lock_guard<std::mutex> lock(mu);
            events.push_back("pack " + std::to_string(k));
          }
          z::PackedBucket p;
          p.collective = z::PackedBucket::Collective::kReduceScatter;
          p.wire = Tensor::FromVector({static_cast<float>(k), static_cast<float>(k + c.rank())}, {2});
          p.received = p.wire.View(c.rank(), {1});  // in place
          p.land = [&, k](const Tensor& received, double post) {
            result[static_cast<size_t>(k)] = static_cast<float>(received.data_as<float>()[0] * post);
            if (c.rank() == 0) {
              std::lock_guard<std::mutex> lock(mu);
              events.push_back("land " + std::to_string(k));
            }
          };
          return p;
        });
        CHECK(q.in_flight() <= (synchronous ? 0 : 2));
      }
      q.Drain();
      // Averaged (kAvg): rank r receives the mean of element r over both ranks: k, then k + 1/2.
      for (int k = 0; k < 5; ++k) CHECK(result[static_cast<size_t>(k)] == doctest::Approx(k + 0.5 * c.rank()));
    });
    auto at = [&](const std::string& e) { return std::find(events.begin(), events.end(), e) - events.begin(); };
    REQUIRE(events.size() == 10);
    for (int k = 2; k < 5; ++k) CHECK(at("land " + std::to_string(k - 2)) < at("pack " + std::to_string(k)));
    if (synchronous) {
      for (int k = 1; k < 5; ++k) CHECK(at("land " + std::to_string(k - 1)) < at("pack " + std::to_string(k)));
    }
  }
}

TEST_CASE("grad buckets: stage 3 packs shards rank by rank; the bucket size changes neither result nor bytes") {
  const std::vector<int64_t> numels = {10, 1, 7, 33};
  for (int world : {1, 2, 3}) {
    std::vector<std::vector<float>> shards_by_bucket;
    std::vector<int64_t> bytes_by_bucket;
    for (int64_t bucket : {1, 20, 1000}) {
      std::mutex mu;
      std::vector<std::vector<float>> got(static_cast<size_t>(world));
      int64_t bytes = 0, calls = 0;
      comm::RunLocalRanks(world, [&](comm::Communicator& c) {
        std::vector<Tensor> grad_shards;
        for (int64_t n : numels) grad_shards.push_back(Tensor::Zeros({z::CeilDiv(n, world)}, DType::kF32));
        z::GradBucketQueue q(c, Options());
        z::ShardGradBuckets b(numels, grad_shards, bucket, q);
        c.ResetStats();
        for (int id = static_cast<int>(numels.size()) - 1; id >= 0; --id) {
          std::vector<float> full(static_cast<size_t>(numels[static_cast<size_t>(id)]));
          for (size_t i = 0; i < full.size(); ++i) full[i] = G(c.rank(), 100 * id + static_cast<int64_t>(i));
          b.Add(id, Tensor::FromVector(full, {static_cast<int64_t>(full.size())}));
        }
        b.SubmitOpen();
        q.Drain();
        std::vector<float> mine;
        for (size_t id = 0; id < numels.size(); ++id) {
          const z::Stage3Shard sh = z::ShardParamStage3(numels[id], world, c.rank());
          for (int64_t k = 0; k < sh.shard_numel; ++k) {
            const float v = grad_shards[id].data_as<float>()[k];
            double want = 0;
            if (sh.real.begin + k < sh.real.end) {
              for (int r = 0; r < world; ++r) want += G(r, 100 * static_cast<int64_t>(id) + sh.real.begin + k);
              want /= world;
            }
            CHECK(v == doctest::Approx(want).epsilon(1e-6));
            mine.push_back(v);
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        got[static_cast<size_t>(c.rank())] = mine;
        bytes += c.Stats()[comm::OpType::kReduceScatter].bytes_sent;
        if (c.rank() == 0) calls = c.Stats()[comm::OpType::kReduceScatter].calls;
      });
      if (world > 1) {
        if (bucket == 1) CHECK(calls == static_cast<int64_t>(numels.size()));  // every parameter alone
        if (bucket == 1000) CHECK(calls == 1);                                 // everything in one
      }
      std::vector<float> all;
      for (const auto& g : got) all.insert(all.end(), g.begin(), g.end());
      shards_by_bucket.push_back(all);
      bytes_by_bucket.push_back(bytes);
    }
    CHECK(shards_by_bucket[1] == shards_by_bucket[0]);
    CHECK(shards_by_bucket[2] == shards_by_bucket[0]);
    CHECK(bytes_by_bucket[1] == bytes_by_bucket[0]);
    CHECK(bytes_by_bucket[2] == bytes_by_bucket[0]);
  }
}

}  // TEST_SUITE

// Communication overlaps computation, shown by ordering rather than timing: a parameter-free probe
// between layers 2 and 3 of a four-layer chain records what the communicator has been handed
// (last_seq) and has finished (Stats) at the moment the probe's forward and backward run. Backward
// visits L4, L3, probe, L2, L1, so at the probe's backward the gradient buckets of L4 and L3 must
// already be travelling and those of L2 and L1 not yet; at stage 3, from the second pass on, the
// gathers of L3 must already have been submitted when the probe's forward runs (prefetch along the
// recorded trace). The comms_logger records (op, sequence number, size) tell which op was which.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "zerorun/comm/local/local_comm.h"
#include "zerorun/runtime/config/config.h"
#include "zerorun/runtime/engine.h"
#include "zerorun/runtime/nn/linear.h"
#include "zerorun/runtime/nn/loss.h"

using namespace zerorun;

namespace {

// What the communicator had been handed and had finished at one moment.
struct Look {
  uint64_t seq = 0;                // last sequence number submitted by this rank
  int64_t done_allreduce = 0;       // completed AllReduce calls
  int64_t done_reduce_scatter = 0;  // completed ReduceScatter calls
};

Look LookAt(const comm::Communicator& c) {
  comm::CommStats st = c.Stats();
  return {c.last_seq(), st[comm::OpType::kAllReduce].calls,
          st[comm::OpType::kReduceScatter].calls};
}

// Passes its input through and records a Look in each direction.
class Probe final : public nn::Module {
 public:
  explicit Probe(const comm::Communicator& c) : Module("Probe"), comm_(c) {}
  std::vector<Look> forward, backward;

 protected:
  Tensor OnForward(const Tensor& x) override {
    forward.push_back(LookAt(comm_));
    return x;
  }
  Tensor OnBackward(const Tensor& dy) override {
    backward.push_back(LookAt(comm_));
    return dy;
  }

 private:
  const comm::Communicator& comm_;
};

// L1 -> L2 -> probe -> L3 -> L4, loss = mean of the squared outputs. dims: the five feature sizes.
class Chain final : public nn::LossModule {
 public:
  Chain(const std::vector<int64_t>& dims, const comm::Communicator& c, bool bias) : LossModule("Chain"), comm_(c) {
    nn::LinearOptions lo;
    lo.bias = bias;
    for (int k = 0; k < 4; ++k) {
      if (k == 2) probe = AddModule("probe", std::make_unique<Probe>(c));
      layers[k] = AddModule(Format("l{}", k + 1), std::make_unique<nn::Linear>(dims[static_cast<size_t>(k)],
                                                                              dims[static_cast<size_t>(k + 1)], lo));
    }
  }
  Probe* probe = nullptr;
  nn::Linear* layers[4] = {};
  std::vector<Look> forward_begin, backward_begin;

 protected:
  float OnForwardLoss(const Tensor& inputs, const Tensor&) override {
    forward_begin.push_back(LookAt(comm_));
    Tensor h = layers[1]->Forward(layers[0]->Forward(inputs));
    y_ = layers[3]->Forward(layers[2]->Forward(probe->Forward(h)));
    double sum = 0;
    const float* y = y_.data_as<float>();
    for (int64_t i = 0; i < y_.numel(); ++i) sum += static_cast<double>(y[i]) * y[i];
    return static_cast<float>(sum / static_cast<double>(y_.numel()));
  }
  void OnBackwardLoss(float grad_scale) override {
    backward_begin.push_back(LookAt(comm_));
    Tensor dy = NewActivation(y_.shape(), DType::kF32);
    const float* y = y_.data_as<float>();
    float* d = dy.data_as<float>();
    for (int64_t i = 0; i < y_.numel(); ++i) d[i] = grad_scale * 2.0f * y[i] / static_cast<float>(y_.numel());
    y_ = Tensor();
    Tensor h = probe->Backward(layers[2]->Backward(layers[3]->Backward(dy)));
    layers[0]->Backward(layers[1]->Backward(h));
  }
  void OnReleaseActivations() override { y_ = Tensor(); }

 private:
  const comm::Communicator& comm_;
  Tensor y_;
};

runtime::Config ChainConfig(int world, int stage, int gas, const std::string& zero_extra) {
  runtime::LoadOptions lo;
  lo.world_size = world;
  lo.log_warnings = false;
  return runtime::LoadConfigString(
      Format(R"({{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": {},
        "optimizer": {{"type": "AdamW", "params": {{"lr": 0.01}}}},
        "zero_optimization": {{"stage": {} {}}}}})",
             gas, stage, zero_extra),
      lo);
}

// The micro-batch (2, d0) of `rank` at micro-step `step`: fixed, different per rank and step.
Tensor Inputs(int64_t d0, int rank, int step) {
  std::vector<float> v(static_cast<size_t>(2 * d0));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.7f * static_cast<float>(i) + 1.3f * rank + 0.37f * step);
  return Tensor::FromVector(v, {2, d0});
}

// Sizes (elements of fp32) of the completed ops of type `op` with sequence numbers in (after, upto],
// as text ("72 48 24") so that a failing check prints them.
std::string Str(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t n : v) s += (s.empty() ? "" : " ") + std::to_string(n);
  return s;
}
std::vector<int64_t> OpSizes(const std::vector<comm::CommRecord>& records, comm::OpType op, uint64_t after,
                             uint64_t upto) {
  std::vector<int64_t> out;
  for (const comm::CommRecord& r : records) {
    if (r.op == op && r.seq > after && r.seq <= upto) out.push_back(static_cast<int64_t>(r.size_bytes / 4));
  }
  return out;
}

comm::CommsLoggerOptions Logging() {
  comm::CommsLoggerOptions o;
  o.enabled = true;
  return o;
}

int64_t Padded(int64_t numel, int world) { return (numel + world - 1) / world * world; }

}  // namespace

TEST_SUITE("unit") {

// Stages 0-2 keep one flat buffer per parameter group; four bias-free Linear(8, 8) layers (one group)
// hold 64 elements each, and a 64-element bucket holds exactly one layer. Stage 0 all-reduces a
// bucket's 64 elements (one op); stages 1 and 2 reduce-scatter the bucket padded to a multiple of 2W
// (one op: 64 elements at W = 2, 66 at W = 3).
TEST_CASE("stages 0-2: at the probe's backward the buckets of L4 and L3 are submitted, those of L2 and L1 not") {
  for (int stage = 0; stage <= 2; ++stage) {
    for (int world : {2, 3}) {
      CAPTURE(stage);
      CAPTURE(world);
      const int64_t layer = 64;
      // The op size for one layer's bucket.
      const int64_t bucket = stage == 0 ? layer : (layer + 2 * world - 1) / (2 * world) * (2 * world);
      const std::vector<int64_t> before_probe = {bucket, bucket}, after_probe = {bucket, bucket};
      const comm::OpType op = stage == 0 ? comm::OpType::kAllReduce : comm::OpType::kReduceScatter;
      const int gas = 2;
      comm::RunLocalRanks(world, [&](comm::Communicator& c) {
        Chain model({8, 8, 8, 8, 8}, c, /*bias=*/false);
        model.Initialize(3);
        runtime::Engine engine(model, ChainConfig(world, stage, gas, R"(, "reduce_bucket_size": 64)"), c);
        c.SetCommsLogger(Logging());
        std::vector<uint64_t> backward_end;
        for (int step = 0; step < 4; ++step) {
          engine.Forward(Inputs(8, c.rank(), step), Tensor());
          engine.Backward();
          backward_end.push_back(c.last_seq());
          engine.Step();
        }
        c.Drain();
        const std::vector<comm::CommRecord> records = c.Records();
        for (int step = 0; step < 4; ++step) {
          CAPTURE(step);
          const bool reducing = stage == 2 || step % gas == gas - 1;  // stages 0/1: boundary micro-steps only
          const uint64_t begin = model.backward_begin[step].seq;
          const uint64_t at_probe = model.probe->backward[step].seq;
          CHECK(model.probe->forward[step].seq == model.forward_begin[step].seq);  // forward sends nothing
          CHECK(model.forward_begin[step].seq == begin);
          if (!reducing) {
            CHECK(at_probe == begin);
            CHECK(backward_end[step] == begin);
            continue;
          }
          CHECK(at_probe - begin == before_probe.size());
          CHECK(backward_end[step] - at_probe == after_probe.size());
          CHECK(Str(OpSizes(records, op, begin, at_probe)) == Str(before_probe));
          CHECK(Str(OpSizes(records, op, at_probe, backward_end[step])) == Str(after_probe));
        }
      });
    }
  }
}

// Stage 3 with every parameter sharded (persistence threshold 0) and released after each use
// (max_reuse_distance 0). Layers 4->6->8->10->3 give every parameter a distinct gathered size
// (W·ceil(n/W) elements), so the all-gather records say which parameter each one fetched.
TEST_CASE("stage 3: L3's gathers are submitted before the probe's forward when prefetching, not without") {
  const std::vector<int64_t> dims = {4, 6, 8, 10, 3};
  for (int world : {2, 3}) {
    for (bool prefetch : {true, false}) {
      CAPTURE(world);
      CAPTURE(prefetch);
      // Gathered sizes of L(k+1)'s weight and bias.
      auto gathered = [&](int k) {
        return std::vector<int64_t>{Padded(dims[k] * dims[k + 1], world), Padded(dims[k + 1], world)};
      };
      auto layer = [&](int k) { return gathered(k)[0] + gathered(k)[1]; };
      // The prefetch bucket covers exactly one layer (L3); the gradient bucket exactly L4.
      const std::string zero = Format(R"(, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
          "stage3_prefetch_bucket_size": {}, "reduce_bucket_size": {})",
                                      prefetch ? layer(2) : 0, layer(3));
      comm::RunLocalRanks(world, [&](comm::Communicator& c) {
        Chain model(dims, c, /*bias=*/true);
        model.Initialize(5);
        runtime::Engine engine(model, ChainConfig(world, 3, 1, zero), c);
        c.SetCommsLogger(Logging());
        const int steps = 3;
        for (int step = 0; step < steps; ++step) {
          engine.Forward(Inputs(4, c.rank(), step), Tensor());
          engine.Backward();
          engine.Step();
        }
        c.Drain();
        const std::vector<comm::CommRecord> records = c.Records();
        for (int step = 0; step < steps; ++step) {
          CAPTURE(step);
          // Forward: the first pass records the trace and gathers L1 and L2 on demand; later passes
          // with prefetching have L3's gathers in flight too, and never L4's.
          std::vector<int64_t> expect = gathered(0);
          for (int64_t n : gathered(1)) expect.push_back(n);
          if (prefetch && step > 0) {
            for (int64_t n : gathered(2)) expect.push_back(n);
          }
          std::vector<int64_t> got = OpSizes(records, comm::OpType::kAllGather, model.forward_begin[step].seq,
                                             model.probe->forward[step].seq);
          std::sort(expect.begin(), expect.end());
          std::sort(got.begin(), got.end());
          CHECK(Str(got) == Str(expect));
          // Backward: gradients collect into a bucket until it holds reduce_bucket_size padded
          // elements. L4's weight alone falls short, with its bias it is exactly full: L4 leaves as one
          // reduce-scatter; L3's weight alone exceeds the size and leaves next, before the probe.
          const uint64_t begin = model.backward_begin[step].seq;
          const uint64_t at_probe = model.probe->backward[step].seq;
          const uint64_t end = step + 1 < steps ? model.forward_begin[step + 1].seq : c.last_seq();
          CHECK(Str(OpSizes(records, comm::OpType::kReduceScatter, begin, at_probe)) ==
                Str({layer(3), gathered(2)[0]}));
          int64_t rest = 0;
          for (int64_t n : OpSizes(records, comm::OpType::kReduceScatter, at_probe, end)) rest += n;
          CHECK(rest == gathered(2)[1] + layer(1) + layer(0));
          // With prefetching, L2's gather for its backward has left by the time the probe's backward
          // runs (somewhere after L2's forward); without, it leaves when L2's backward begins.
          std::vector<int64_t> between = OpSizes(records, comm::OpType::kAllGather, model.probe->forward[step].seq,
                                                 at_probe);
          CAPTURE(Str(between));
          CHECK(std::count(between.begin(), between.end(), gathered(1)[0]) == (prefetch && step > 0 ? 1 : 0));
        }
      });
    }
  }
}

// "overlap_comm": false written in the config: each bucket's reduction is waited for when the bucket
// becomes ready, on the backward thread (DeepSpeed without overlap). When the probe's backward runs,
// the reductions of L4's and L3's buckets have therefore completed, not just been submitted (Stats
// counts ops at completion). The arithmetic is the same, so the parameters match the default
// (overlapped) run bit for bit.
TEST_CASE("overlap_comm false: buckets are reduced synchronously as they fill; same parameters as overlapped") {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {2, 3}) {
      CAPTURE(stage);
      CAPTURE(world);
      const std::vector<int64_t> dims = stage == 3 ? std::vector<int64_t>{4, 6, 8, 10, 3}
                                                   : std::vector<int64_t>{8, 8, 8, 8, 8};
      // Reductions of L4's and L3's buckets (see the cases above): stage 0 one all-reduce per 64-element
      // layer; stages 1/2 one reduce-scatter per layer's bucket; stage 3 two reduce-scatters (L4 alone,
      // then L3's weight).
      const int64_t expect = 2;
      const int64_t l4 = Padded(30, world) + Padded(3, world);
      std::string zero = stage == 3 ? Format(R"(, "stage3_param_persistence_threshold": 0, "reduce_bucket_size": {})", l4)
                                    : std::string(R"(, "reduce_bucket_size": 64)");
      std::vector<std::vector<float>> params[2];
      for (int explicit_off = 0; explicit_off <= 1; ++explicit_off) {
        CAPTURE(explicit_off);
        params[explicit_off].resize(static_cast<size_t>(world));
        const std::string z = zero + (explicit_off ? R"(, "overlap_comm": false)" : "");
        comm::RunLocalRanks(world, [&](comm::Communicator& c) {
          Chain model(dims, c, /*bias=*/stage == 3);
          model.Initialize(11);
          runtime::Engine engine(model, ChainConfig(world, stage, 1, z), c);
          for (int step = 0; step < 3; ++step) {
            engine.Forward(Inputs(dims[0], c.rank(), step), Tensor());
            engine.Backward();
            engine.Step();
            const Look& b = model.backward_begin[static_cast<size_t>(step)];
            const Look& p = model.probe->backward[static_cast<size_t>(step)];
            const int64_t done = stage == 0 ? p.done_allreduce - b.done_allreduce
                                            : p.done_reduce_scatter - b.done_reduce_scatter;
            if (explicit_off) {
              CHECK(done == expect);
              CHECK(static_cast<int64_t>(p.seq - b.seq) >= expect);
            }
          }
          std::vector<float> flat;
          for (const Tensor& t : engine.GatherParameters()) {
            std::vector<float> v = t.ToVector();
            flat.insert(flat.end(), v.begin(), v.end());
          }
          params[explicit_off][static_cast<size_t>(c.rank())] = flat;
        });
      }
      for (int r = 0; r < world; ++r) {
        const auto& a = params[0][static_cast<size_t>(r)];
        const auto& b = params[1][static_cast<size_t>(r)];
        REQUIRE(a.size() == b.size());
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
      }
      CHECK(params[1][0] == params[1][world - 1]);  // every rank holds the same parameters
    }
  }
}

}  // TEST_SUITE

// PartitionOptimizer with a closed-form test rule: spans cut at segment, sub-group and progress
// boundaries update exactly the elements a single loop would (bitwise, whatever sub_group_size); the
// master copy and the 16-bit working copy; fp32 training without a master; the store driven
// sub-group by sub-group with the next one prefetched (a recording store through the factory seam);
// and a tensor-norm rule whose tensors are split across two ranks equal to one rank holding them whole.
#include <doctest/doctest.h>

#include <cmath>
#include <algorithm>
#include <mutex>
#include <tuple>
#include <string>
#include <vector>

#include "zerorun/comm/local/local_comm.h"
#include "zerorun/core/dtype.h"
#include "zerorun/zero/partition_optimizer.h"

namespace z = zerorun::zero;
namespace zk = zerorun::kernels;
namespace comm = zerorun::comm;
using zerorun::DType;

namespace {

float G(int64_t i) { return static_cast<float>(std::sin(0.37 * static_cast<double>(i)) + 0.1); }
float P0(int64_t i) { return static_cast<float>(std::cos(0.11 * static_cast<double>(i))); }

// m <- m/2 + g·scale, p <- p - lr·m (lr per group: 0.1, 0.2, ...). Norm pass: m <- g·scale, sums of
// p² and m², trust = |p| / |m|, p <- p - 0.01·trust·m.
class TestRule final : public z::UpdateRule {
 public:
  explicit TestRule(bool norms) : norms_(norms) {}
  std::vector<std::string> StateNames() const override { return {"m"}; }
  float InitialState(int group, int) const override { return 0.25f * static_cast<float>(group); }
  bool NeedsTensorNorms() const override { return norms_; }
  void Update(int group, const zk::OptimSpan& s, float* const* state) override {
    const float* g = static_cast<const float*>(s.grads);
    for (int64_t i = 0; i < s.n; ++i) {
      state[0][i] = 0.5f * state[0][i] + g[i] * s.grad_scale;
      s.params[i] -= 0.1f * static_cast<float>(group + 1) * state[0][i];
    }
    Copy(s);
  }
  zk::LambNorms Moments(int, const zk::OptimSpan& s, float* const* state) override {
    zk::LambNorms n;
    const float* g = static_cast<const float*>(s.grads);
    for (int64_t i = 0; i < s.n; ++i) {
      state[0][i] = g[i] * s.grad_scale;
      n.param_sq += static_cast<double>(s.params[i]) * s.params[i];
      n.update_sq += static_cast<double>(state[0][i]) * state[0][i];
    }
    return n;
  }
  float TrustRatio(int, const zk::LambNorms& w) const override {
    return w.update_sq > 0 ? static_cast<float>(std::sqrt(w.param_sq / w.update_sq)) : 1.0f;
  }
  void Apply(int, const zk::OptimSpan& s, float* const* state, float trust) override {
    for (int64_t i = 0; i < s.n; ++i) s.params[i] -= 0.01f * trust * state[0][i];
    Copy(s);
  }

 private:
  static void Copy(const zk::OptimSpan& s) {
    if (s.param_copy) zerorun::Convert(s.params, DType::kF32, s.param_copy, s.copy_dtype, static_cast<size_t>(s.n));
  }
  bool norms_;
};

// A resident store that records what the optimizer asks of it.
class RecordingStore final : public z::StateStore {
 public:
  RecordingStore(z::StateStoreLayout l, std::vector<std::string>* log)
      : inner_(z::MakeResidentStateStore(std::move(l), zerorun::Device::CPU())), log_(log) {}
  const z::StateStoreLayout& layout() const override { return inner_->layout(); }
  std::string placement() const override { return "recording"; }
  zerorun::Device device() const override { return inner_->device(); }
  int64_t alignment_bytes() const override { return inner_->alignment_bytes(); }
  void Prefetch(int i, z::StateAccess a) override { log_->push_back("prefetch " + std::to_string(i)); inner_->Prefetch(i, a); }
  z::SubGroupState Acquire(int i, z::StateAccess a) override {
    log_->push_back("acquire " + std::to_string(i));
    return inner_->Acquire(i, a);
  }
  void Release(int i) override {
    log_->push_back("release " + std::to_string(i));
    inner_->Release(i);
  }
  void Flush() override { log_->push_back("flush"); }
  int64_t resident_bytes() const override { return inner_->resident_bytes(); }

 private:
  std::unique_ptr<z::StateStore> inner_;
  std::vector<std::string>* log_;
};

// Two groups: group 0 of 23 elements in two segments (non-contiguous buffers), group 1 of 7.
struct Buffers {
  std::vector<float> g0a, g0b, g1;
  std::vector<uint16_t> p0a, p0b, p1;  // bf16 working copies
  Buffers() : g0a(10), g0b(13), g1(7), p0a(10), p0b(13), p1(7) {
    for (int64_t i = 0; i < 10; ++i) g0a[i] = G(i);
    for (int64_t i = 0; i < 13; ++i) g0b[i] = G(10 + i);
    for (int64_t i = 0; i < 7; ++i) g1[i] = G(100 + i);
    auto bf = [](float v) {
      uint16_t b;
      zerorun::Convert(&v, DType::kF32, &b, DType::kBF16, 1);
      return b;
    };
    for (int64_t i = 0; i < 10; ++i) p0a[i] = bf(P0(i));
    for (int64_t i = 0; i < 13; ++i) p0b[i] = bf(P0(10 + i));
    for (int64_t i = 0; i < 7; ++i) p1[i] = bf(P0(100 + i));
  }
  std::vector<z::PartitionGroupSpec> Specs(std::vector<int64_t> progress = {}) {
    z::PartitionGroupSpec a;
    a.numel = 23;
    a.segments = {{0, 10, g0a.data(), p0a.data()}, {10, 13, g0b.data(), p0b.data()}};
    a.units = {4, 6, 5, 8};
    a.progress_points = std::move(progress);
    a.tensors = {{0, 12, 0}, {12, 11, 1}};
    a.num_tensors = 2;
    z::PartitionGroupSpec b;
    b.numel = 7;
    b.segments = {{0, 7, g1.data(), p1.data()}};
    b.units = {7};
    b.tensors = {{0, 7, 0}};
    b.num_tensors = 1;
    return {a, b};
  }
  std::vector<float> Params() const {
    std::vector<float> out;
    for (const auto* v : {&p0a, &p0b, &p1}) {
      std::vector<float> f(v->size());
      zerorun::Convert(v->data(), DType::kBF16, f.data(), DType::kF32, f.size());
      out.insert(out.end(), f.begin(), f.end());
    }
    return out;
  }
};

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("partition optimizer: any sub_group_size updates exactly what one loop does") {
  std::vector<std::vector<float>> results;
  for (int64_t sub : {int64_t{0}, int64_t{9}, int64_t{1'000'000'000}}) {
    CAPTURE(sub);
    Buffers b;
    TestRule rule(false);
    z::PartitionOptimizerOptions o;
    o.grad_dtype = DType::kF32;
    o.param_dtype = DType::kBF16;
    o.sub_group_size = sub;
    z::PartitionOptimizer opt(b.Specs({3, 15}), rule, o);
    opt.Initialize();
    std::vector<std::pair<int, int64_t>> progress;
    for (int step = 0; step < 2; ++step) {
      progress.clear();
      opt.Step(0.5f, [&](int g, int64_t end) { progress.push_back({g, end}); });
    }
    // Progress per group only moves forward, passes the progress points, and ends at the group's end.
    int64_t last[2] = {0, 0};
    bool saw3 = false, saw15 = false;
    for (auto [g, end] : progress) {
      CHECK(end >= last[g]);
      last[g] = end;
      saw3 = saw3 || (g == 0 && end == 3);
      saw15 = saw15 || (g == 0 && end == 15);
    }
    CHECK(last[0] == 23);
    CHECK(last[1] == 7);
    CHECK(saw3);
    CHECK(saw15);
    // The closed form, element by element: master starts at the bf16 value; m at 0.25·group.
    std::vector<float> want;
    for (int64_t i = 0; i < 30; ++i) {
      const int group = i < 23 ? 0 : 1;
      const int64_t flat = i < 23 ? i : 100 + (i - 23);
      uint16_t init;
      float p0 = P0(flat), master = 0;
      zerorun::Convert(&p0, DType::kF32, &init, DType::kBF16, 1);
      zerorun::Convert(&init, DType::kBF16, &master, DType::kF32, 1);
      float m = 0.25f * static_cast<float>(group);
      for (int step = 0; step < 2; ++step) {
        m = 0.5f * m + G(flat) * 0.5f;
        master -= 0.1f * static_cast<float>(group + 1) * m;
      }
      want.push_back(master);
    }
    // Master weights in the store.
    std::vector<float> master(23);
    z::ReadState(opt.store(), 0, 0, {0, 23}, master.data());
    for (int64_t i = 0; i < 23; ++i) CHECK(master[static_cast<size_t>(i)] == want[static_cast<size_t>(i)]);
    std::vector<float> got = b.Params();
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-2));
    results.push_back(got);
  }
  CHECK(results[1] == results[0]);
  CHECK(results[2] == results[0]);
}

TEST_CASE("partition optimizer: fp32 training keeps no master; the parameters are updated in place") {
  std::vector<float> g(5, 1.0f), p = {1, 2, 3, 4, 5};
  z::PartitionGroupSpec s;
  s.numel = 5;
  s.segments = {{0, 5, g.data(), p.data()}};
  s.units = {5};
  TestRule rule(false);
  z::PartitionOptimizerOptions o;
  o.grad_dtype = o.param_dtype = DType::kF32;
  o.master_copy = false;
  z::PartitionOptimizer opt({s}, rule, o);
  opt.Initialize();
  CHECK(opt.store().layout().slots.size() == 1);  // "m" only
  CHECK(opt.store().layout().SlotIndex("master") == -1);
  opt.Step(1.0f, nullptr);
  for (int i = 0; i < 5; ++i) CHECK(p[static_cast<size_t>(i)] == doctest::Approx(i + 1 - 0.1f));
}

TEST_CASE("partition optimizer: local checks, and the store stepped sub-group by sub-group with prefetch") {
  Buffers b;
  TestRule rule(false);
  std::vector<std::string> log;
  z::PartitionOptimizerOptions o;
  o.param_dtype = DType::kBF16;
  o.sub_group_size = 9;  // group 0: [0, 10), [10, 23); group 1: [0, 7)
  o.store_factory = [&](z::StateStoreLayout l) { return std::make_unique<RecordingStore>(std::move(l), &log); };
  z::PartitionOptimizer opt(b.Specs(), rule, o);
  CHECK(opt.store().placement() == "recording");
  opt.Initialize();
  log.clear();
  CHECK(opt.LocalAllFinite());
  std::vector<double> sums = opt.LocalSumSquares();
  double want0 = 0;
  for (int64_t i = 0; i < 23; ++i) want0 += static_cast<double>(G(i)) * G(i);
  CHECK(sums[0] == doctest::Approx(want0).epsilon(1e-6));
  b.g0b[4] = std::nanf("");  // element 14: tensor 1 of group 0
  CHECK_FALSE(opt.LocalAllFinite());
  CHECK(opt.NonFiniteTensors(8) == std::vector<std::pair<int, int64_t>>{{0, 1}});
  b.g0b[4] = 0.0f;
  opt.Step(1.0f, nullptr);
  CHECK(log == std::vector<std::string>{"prefetch 0", "prefetch 1", "acquire 0", "release 0", "prefetch 2", "acquire 1",
                                        "release 1", "acquire 2", "release 2", "flush"});
}

TEST_CASE("partition optimizer: tensor norms agreed across ranks equal one rank holding whole tensors") {
  // Group of two tensors (12 and 11 elements) split as rank 0 = [0, 14), rank 1 = [14, 23).
  auto run = [](int world) {
    std::vector<std::vector<float>> params(static_cast<size_t>(world));
    std::mutex mu;
    comm::RunLocalRanks(world, [&](comm::Communicator& c) {
      const int64_t begin = world == 1 ? 0 : (c.rank() == 0 ? 0 : 14), end = world == 1 ? 23 : (c.rank() == 0 ? 14 : 23);
      const int64_t n = end - begin;
      std::vector<float> g(static_cast<size_t>(n)), p(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        g[static_cast<size_t>(i)] = G(begin + i);
        p[static_cast<size_t>(i)] = P0(begin + i);
      }
      z::PartitionGroupSpec s;
      s.numel = n;
      s.segments = {{0, n, g.data(), p.data()}};
      s.units = {n};
      s.num_tensors = 2;
      for (auto [t, tb, te] : {std::tuple<int64_t, int64_t, int64_t>{0, 0, 12}, {1, 12, 23}}) {
        const int64_t b = std::max(tb, begin), e = std::min(te, end);
        if (e > b) s.tensors.push_back({b - begin, e - b, t});
      }
      TestRule rule(true);
      z::PartitionOptimizerOptions o;
      o.master_copy = false;
      o.sub_group_size = 5;
      o.norm_comm = &c;
      z::PartitionOptimizer opt({s}, rule, o);
      opt.Initialize();
      opt.Step(2.0f, nullptr);
      std::lock_guard<std::mutex> lock(mu);
      params[static_cast<size_t>(c.rank())] = p;
    });
    std::vector<float> all;
    for (const auto& p : params) all.insert(all.end(), p.begin(), p.end());
    return all;
  };
  const std::vector<float> whole = run(1), split = run(2);
  REQUIRE(whole.size() == 23);
  REQUIRE(split.size() == 23);
  for (size_t i = 0; i < whole.size(); ++i) CHECK(split[i] == doctest::Approx(whole[i]).epsilon(1e-6));
  CHECK(whole[0] != doctest::Approx(P0(0)));  // it did update
}

}  // TEST_SUITE

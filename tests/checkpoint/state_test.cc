// The non-tensor step state: JSON round trips that are exact to the bit (counters, uint64 seeds,
// random doubles including subnormals and -0), refusals (non-finite values, malformed state), and
// behavioural round trips: a restored loss scaler, LR scheduler, data sampler and dropout RNG continue
// exactly as the originals do — the sampler also onto another world size.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <set>

#include "ckpt_test_util.h"
#include "zerorun/runtime/data/dataset.h"
#include "zerorun/runtime/nn/dropout.h"
#include "zerorun/runtime/nn/linear.h"
#include "zerorun/runtime/nn/sequential.h"

using namespace ckpttest;

namespace {

TrainingState FullState() {
  TrainingState s;
  s.global_steps = 123;
  s.global_samples = 123 * 64;
  s.micro_steps = 492;
  s.skipped_steps = 3;
  s.loss_scaler = LossScalerCheckpoint{true, {32768.0, 120, 117, 1}};
  s.lr_scheduler = LrSchedulerCheckpoint{"WarmupCosineLR", 119};
  data::SamplerCursor cursor{2, 17};
  s.sampler = SamplerCheckpoint{cursor, 4, 128, 3, 0xfedcba9876543210ull, true, false, 999};
  s.rng = RngCheckpoint{0xffffffffffffffffull, {{"", 0}, {"h.0.drop", 492}, {"h.1.drop", uint64_t{1} << 40}}};
  s.optimizer_scalars = {{"group0.step", 120}, {"group0.lr", 0.1}, {"group1.lr", 1.0 / 3.0}, {"group0.beta2", 0.999}};
  return s;
}

class Groups final : public HyperTarget {
 public:
  explicit Groups(int n) : lr_(static_cast<size_t>(n), 0.0) {}
  int NumGroups() const override { return static_cast<int>(lr_.size()); }
  double GetLr(int g) const override { return lr_[static_cast<size_t>(g)]; }
  void SetLr(int g, double lr) override { lr_[static_cast<size_t>(g)] = lr; }
  bool HasBetas() const override { return false; }
  std::pair<double, double> GetBetas(int) const override { return {0, 0}; }
  void SetBetas(int, double, double) override {}

 private:
  std::vector<double> lr_;
};

std::unique_ptr<data::TokenDataset> Corpus() {
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 5; ++d) {
    std::vector<int32_t> doc(static_cast<size_t>(37 + 23 * d));
    for (size_t i = 0; i < doc.size(); ++i) doc[i] = static_cast<int32_t>((i * 7 + static_cast<size_t>(d)) % 50);
    docs.push_back(doc);
  }
  return data::MakeInMemoryDataset(docs);
}

std::unique_ptr<nn::Sequential> DropoutNet() {
  auto net = std::make_unique<nn::Sequential>();
  net->Append(std::make_unique<nn::Linear>(6, 5));
  net->Append(std::make_unique<nn::Dropout>(0.5f));
  net->Append(std::make_unique<nn::Linear>(5, 4));
  net->Append(std::make_unique<nn::Dropout>(0.3f));
  net->Initialize(77);
  return net;
}

// Through JSON, as a checkpoint carries it.
TrainingState ThroughJson(const TrainingState& s) { return TrainingStateFromJson(TrainingStateToJson(s), "m.json"); }

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("training state: JSON round trip is exact, doubles bit for bit") {
  TrainingState s = FullState();
  CHECK(ThroughJson(s) == s);
  // Random finite doubles over the whole exponent range, plus the awkward ones.
  Rng rng(5, 5);
  std::vector<double> values = {0.1, 1.0 / 3.0, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
                                65504.0, 0.0009765625, 1e-7, 6.02214076e23};
  for (int i = 0; i < 2000; ++i) {
    const uint64_t bits = (static_cast<uint64_t>(rng.NextU32()) << 32) | rng.NextU32();
    const double d = std::bit_cast<double>(bits);
    if (std::isfinite(d)) values.push_back(d);
  }
  TrainingState t;
  for (size_t i = 0; i < values.size(); ++i) t.optimizer_scalars.emplace_back("v" + std::to_string(i), values[i]);
  TrainingState back = ThroughJson(t);
  REQUIRE(back.optimizer_scalars.size() == values.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    mismatches += std::bit_cast<uint64_t>(back.optimizer_scalars[i].second) != std::bit_cast<uint64_t>(values[i]);
  }
  CHECK(mismatches == 0);
  // Optional pieces stay absent.
  TrainingState empty;
  TrainingState e = ThroughJson(empty);
  CHECK_FALSE(e.loss_scaler.has_value());
  CHECK_FALSE(e.sampler.has_value());
  CHECK(e == empty);
}

TEST_CASE("training state: non-finite values are refused, malformed state named by path") {
  TrainingState s;
  s.optimizer_scalars = {{"group0.lr", std::nan("")}};
  CHECK(Contains(ErrorOf<InvalidArgument>([&] { TrainingStateToJson(s); }), "optimizer_scalars.group0.lr is nan"));
  s.optimizer_scalars = {{"a", 1.0}, {"a", 2.0}};
  CHECK(Contains(ErrorOf<InvalidArgument>([&] { TrainingStateToJson(s); }), "'a' is empty or appears twice"));
  TrainingState l;
  l.loss_scaler = LossScalerCheckpoint{true, {INFINITY, 1, -1, 2}};
  CHECK(Contains(ErrorOf<InvalidArgument>([&] { TrainingStateToJson(l); }), "loss_scaler.cur_scale is inf"));

  const std::string good = TrainingStateToJson(FullState());
  auto err = [](const std::string& j) { return ErrorOf<CheckpointError>([&] { TrainingStateFromJson(j, "/c/manifest.json"); }); };
  CHECK(Contains(err("{}"), "/c/manifest.json: state: missing key \"global_steps\""));
  std::string bad = good;
  bad.replace(bad.find("\"cur_hysteresis\":1"), 18, "\"cur_hysteresis\":\"1\"");
  CHECK(Contains(err(bad), "state.loss_scaler.cur_hysteresis: expected an integer"));
  bad = good;
  bad.replace(bad.find("\"h.0.drop\":492"), 14, "\"h.0.drop\":-4");
  CHECK(Contains(err(bad), "state.rng.calls.h.0.drop: expected a non-negative integer"));
}

TEST_CASE("loss scaler: a restored scaler continues exactly, hysteresis and window included") {
  LossScalerOptions o;
  o.initial_scale_power = 8;
  o.scale_window = 3;
  o.hysteresis = 2;
  o.min_scale = 1.0;
  // Overflow pattern: a burst that uses hysteresis, clean steps that grow the scale, more bursts.
  const std::vector<bool> pattern = {false, true, false, true, true, false, false, false, false, true,
                                     true,  true, false, false, false, false, true, false, true, true};
  for (size_t cut = 0; cut <= pattern.size(); ++cut) {
    CAPTURE(cut);
    LossScaler a(o);
    for (size_t i = 0; i < cut; ++i) a.Update(pattern[i]);
    TrainingState s;
    s.loss_scaler = CaptureLossScaler(a);
    LossScaler b(o);
    RestoreLossScaler(b, *ThroughJson(s).loss_scaler);
    CHECK(b.scale() == a.scale());
    CHECK(b.hysteresis_left() == a.hysteresis_left());
    for (size_t i = cut; i < pattern.size(); ++i) {
      CHECK(a.Update(pattern[i]) == b.Update(pattern[i]));
      CHECK(a.scale() == b.scale());
      CHECK(a.iteration() == b.iteration());
      CHECK(a.last_overflow_iteration() == b.last_overflow_iteration());
      CHECK(a.hysteresis_left() == b.hysteresis_left());
    }
  }
  LossScaler fixed = LossScaler::Static(4.0);
  CHECK(Contains(ErrorOf<CheckpointError>([&] { RestoreLossScaler(fixed, CaptureLossScaler(LossScaler(o))); }),
                 "the checkpoint's loss scaler is dynamic but this run's is static"));
}

TEST_CASE("LR scheduler: a restored schedule writes the same learning rates from then on") {
  LrScheduleOptions o;
  o.type = "WarmupCosineLR";
  o.warmup_num_steps = 5;
  o.total_num_steps = 40;
  o.warmup_min_ratio = 0.1;
  for (int cut : {0, 3, 5, 17}) {
    Groups ga(2), gb(2);
    ga.SetLr(0, 0.01);
    ga.SetLr(1, 0.002);
    gb.SetLr(0, 0.01);
    gb.SetLr(1, 0.002);
    std::unique_ptr<LrScheduler> a = MakeLrScheduler(o, ga);
    for (int i = 0; i < cut; ++i) a->Step();
    TrainingState s;
    s.lr_scheduler = CaptureLrScheduler(*a);
    std::unique_ptr<LrScheduler> b = MakeLrScheduler(o, gb);
    RestoreLrScheduler(*b, *ThroughJson(s).lr_scheduler);
    for (int i = 0; i < 30; ++i) {
      CHECK(a->GetLr() == b->GetLr());
      CHECK(ga.GetLr(1) == gb.GetLr(1));
      a->Step();
      b->Step();
    }
  }
  Groups g(1);
  g.SetLr(0, 0.1);
  LrScheduleOptions w;
  w.type = "WarmupLR";
  std::unique_ptr<LrScheduler> other = MakeLrScheduler(w, g);
  CHECK(Contains(ErrorOf<CheckpointError>([&] { RestoreLrScheduler(*other, {"WarmupCosineLR", 3}); }),
                 "the checkpoint's LR scheduler is WarmupCosineLR but this run's is WarmupLR"));
}

namespace {
int64_t NumWindows(const data::TokenDataset& ds, const data::SamplerOptions& o) {
  return data::DistributedSampler(ds, o).num_windows();
}
}  // namespace

TEST_CASE("data sampler: same topology gives the identical next batches; another world size misses no window") {
  std::unique_ptr<data::TokenDataset> ds = Corpus();
  data::SamplerOptions o;
  o.batch_size = 2;
  o.seq_len = 4;
  o.world_size = 3;
  o.seed = 99;
  for (int rank = 0; rank < 3; ++rank) {
    o.rank = rank;
    data::DistributedSampler a(*ds, o);
    for (int i = 0; i < 5; ++i) a.Next();
    TrainingState s;
    s.sampler = CaptureSampler(a);
    data::DistributedSampler b(*ds, o);
    RestoreSampler(b, *ThroughJson(s).sampler);
    for (int i = 0; i < 2 * a.batches_per_epoch(); ++i) {
      data::Batch x = a.Next(), y = b.Next();
      CHECK(x.inputs == y.inputs);
      CHECK(x.targets == y.targets);
    }
  }

  // Saved at 3 ranks x 2 after 4 batches (24 windows of the epoch consumed), resumed at 2 ranks x 3
  // and at 4 ranks x 1: the windows seen before and after are disjoint and together all of the epoch.
  data::SamplerOptions old_o = o;
  old_o.rank = 0;
  data::DistributedSampler old0(*ds, old_o);
  const int64_t consumed_batches = 4;
  std::set<int64_t> before;
  for (int r = 0; r < 3; ++r) {
    data::SamplerOptions ro = old_o;
    ro.rank = r;
    data::DistributedSampler s(*ds, ro);
    for (int64_t b = 0; b < consumed_batches; ++b) {
      for (int64_t w : s.WindowsOfBatch(0, b)) CHECK(before.insert(w).second);
    }
  }
  for (int i = 0; i < consumed_batches; ++i) old0.Next();
  const SamplerCheckpoint saved = *ThroughJson(TrainingState{0, 0, 0, 0, {}, {}, CaptureSampler(old0), {}, {}}).sampler;
  for (auto [B, W] : {std::pair<int64_t, int>{3, 2}, std::pair<int64_t, int>{1, 4}}) {
    CAPTURE(B);
    CAPTURE(W);
    std::multiset<int64_t> after;  // with repeats: the epoch is padded to whole ranks (DeepSpeed's sampler)
    int64_t per_rank = 0;
    for (int r = 0; r < W; ++r) {
      data::SamplerOptions no = o;
      no.batch_size = B;
      no.world_size = W;
      no.rank = r;
      data::DistributedSampler s(*ds, no);
      RestoreSampler(s, saved);
      CHECK(s.cursor().epoch == 0);
      CHECK(s.cursor().batch * B * W == consumed_batches * 2 * 3);
      per_rank = s.windows_per_rank();
      for (int64_t b = s.cursor().batch; b < s.batches_per_epoch(); ++b) {
        for (int64_t w : s.WindowsOfBatch(0, b)) after.insert(w);
      }
    }
    // Every position of the padded epoch once: no window missed, and the only repeats are the padding
    // (positions N..S·W-1 repeat the order's first windows, which were consumed before the save).
    std::set<int64_t> all(before.begin(), before.end());
    all.insert(after.begin(), after.end());
    CHECK(static_cast<int64_t>(all.size()) == NumWindows(*ds, o));
    CHECK(static_cast<int64_t>(before.size() + after.size()) == per_rank * W);
    CHECK(static_cast<int64_t>(after.size() - (all.size() - before.size())) == per_rank * W - NumWindows(*ds, o));
  }
  // 24 consumed windows are not a whole number of 5 x 1 batches; another seed or T is another stream.
  data::SamplerOptions five = o;
  five.batch_size = 5;
  five.world_size = 1;
  five.rank = 0;
  data::DistributedSampler s5(*ds, five);
  CHECK(Contains(ErrorOf<CheckpointError>([&] { RestoreSampler(s5, saved); }), "not a whole number of the new global batch 5 x 1"));
  data::SamplerOptions seeded = old_o;
  seeded.seed = 100;
  data::DistributedSampler sd(*ds, seeded);
  CHECK(Contains(ErrorOf<CheckpointError>([&] { RestoreSampler(sd, saved); }), "seed was 99 when the checkpoint was saved and is 100 now"));
  data::SamplerOptions longer = old_o;
  longer.seq_len = 5;
  data::DistributedSampler sl(*ds, longer);
  CHECK(Contains(ErrorOf<CheckpointError>([&] { RestoreSampler(sl, saved); }), "seq_len was 4"));
}

TEST_CASE("dropout RNG: a restored model draws the same masks as the original from then on") {
  std::unique_ptr<nn::Sequential> a = DropoutNet();
  Tensor x = Tensor::FromVector(std::vector<float>(3 * 6, 0.5f), {3, 6});
  for (int i = 0; i < 4; ++i) {
    a->Forward(x);
    a->ResetPass();
  }
  TrainingState s;
  s.rng = CaptureRng(*a);
  std::unique_ptr<nn::Sequential> b = DropoutNet();
  b->SetRngSeed(1);  // restored below, with the counters
  RestoreRng(*b, *ThroughJson(s).rng);
  std::unique_ptr<nn::Sequential> fresh = DropoutNet();
  bool differs_from_fresh = false;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> ya = a->Forward(x).ToVector(), yb = b->Forward(x).ToVector(), yf = fresh->Forward(x).ToVector();
    CHECK(ya == yb);
    differs_from_fresh = differs_from_fresh || ya != yf;
    a->ResetPass();
    b->ResetPass();
    fresh->ResetPass();
  }
  CHECK(differs_from_fresh);  // the counters matter: a fresh model draws other masks

  RngCheckpoint wrong = *s.rng;
  wrong.calls.back().first = "9";
  CHECK(Contains(ErrorOf<CheckpointError>([&] { RestoreRng(*b, wrong); }), "has no module '3'"));
  wrong = *s.rng;
  wrong.calls.emplace_back("4", 1);
  CHECK(Contains(ErrorOf<CheckpointError>([&] { RestoreRng(*b, wrong); }), "names module '4', which this model lacks"));
}

}  // TEST_SUITE

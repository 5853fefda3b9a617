// Loss-spike statistics: a z-score over the last `window` accepted steps of the loss and the global
// gradient norm; non-finite values always spike; the window round-trips through JSON bit for bit (a
// rollback restores the window of its checkpoint).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "zerorun/core/error.h"
#include "zerorun/runtime/spike_guard.h"

using namespace zerorun;
using namespace zerorun::runtime;

namespace {

SpikeGuard Guard(double threshold, int64_t window) {
  SpikeGuardOptions o;
  o.threshold = threshold;
  o.window = window;
  return SpikeGuard(o);
}

// Steps 1..n of a noisy declining curve: loss 2 - 0.01 s ± 0.02, norm 1 ± 0.05.
void Feed(SpikeGuard& g, int64_t first, int64_t last) {
  for (int64_t s = first; s <= last; ++s) {
    const double wiggle = (s % 2 == 0 ? 1.0 : -1.0);
    g.Accept(s, 2.0 - 0.01 * static_cast<double>(s) + 0.02 * wiggle, 1.0 + 0.05 * wiggle);
  }
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("spike guard: a jump past the threshold spikes, ordinary noise does not, nothing before the window is full") {
  SpikeGuard g = Guard(6.0, 10);
  Feed(g, 1, 9);
  CHECK(!g.full());
  CHECK(!g.Judge(50.0, 1.0).spike);  // 9 of 10 steps: no statistics yet
  Feed(g, 10, 10);
  CHECK(g.full());
  // Window: steps 1..10, loss mean 1.945, sd ~0.033; norm mean 1, sd ~0.053.
  SpikeVerdict calm = g.Judge(1.93, 1.04);
  CHECK(!calm.spike);
  SpikeVerdict v = g.Judge(2.4, 1.0);
  CHECK(v.spike);
  CHECK(v.metric == "loss");
  CHECK(v.mean == doctest::Approx(1.945));
  CHECK(v.zscore > 6.0);
  CHECK(v.zscore == doctest::Approx((2.4 - v.mean) / v.stddev));
  CHECK(v.Describe().find("loss 2.4 is") != std::string::npos);
  // A loss far *below* the mean is not a spike (only rises are).
  CHECK(!g.Judge(0.5, 1.0).spike);
  // The norm alone can spike.
  SpikeVerdict n = g.Judge(1.94, 3.0);
  CHECK(n.spike);
  CHECK(n.metric == "grad_norm");
  // A norm of -1 (not computed) is not judged.
  CHECK(!g.Judge(1.94, -1.0).spike);
  // The threshold is what decides: the same step under a looser guard passes.
  SpikeGuard loose = Guard(50.0, 10);
  Feed(loose, 1, 10);
  CHECK(!loose.Judge(2.4, 1.0).spike);
}

TEST_CASE("spike guard: non-finite loss or norm spikes even before the window is full") {
  SpikeGuard g = Guard(6.0, 10);
  Feed(g, 1, 3);
  SpikeVerdict v = g.Judge(std::numeric_limits<double>::quiet_NaN(), 1.0);
  CHECK(v.spike);
  CHECK(v.metric == "loss");
  CHECK(std::isinf(v.zscore));
  CHECK(v.Describe() == "loss is nan");
  SpikeVerdict n = g.Judge(1.9, std::numeric_limits<double>::infinity());
  CHECK(n.spike);
  CHECK(n.metric == "grad_norm");
}

TEST_CASE("spike guard: a flat series keeps a floor under its sd (min_relative_std) so rounding noise passes") {
  SpikeGuard g = Guard(6.0, 5);
  for (int64_t s = 1; s <= 5; ++s) g.Accept(s, 1.0, 1.0);
  CHECK(!g.Judge(1.0 + 1e-5, 1.0).spike);  // sd floor 1e-3: z = 0.01
  CHECK(g.Judge(1.01, 1.0).spike);          // z = 10
  SpikeGuardOptions o;
  o.threshold = 6;
  o.window = 5;
  o.min_relative_std = 0;
  SpikeGuard strict(o);
  for (int64_t s = 1; s <= 5; ++s) strict.Accept(s, 1.0, 1.0);
  CHECK(strict.Judge(1.0 + 1e-5, 1.0).spike);  // no floor, sd 0: any rise
  CHECK(!strict.Judge(1.0, 1.0).spike);
}

TEST_CASE("spike guard: the window of a checkpoint's step, restored later, decides as it did then") {
  SpikeGuard a = Guard(4.0, 8);
  Feed(a, 1, 14);
  const std::string at14 = a.ToJson();  // what a checkpoint of step 14 stores
  Feed(a, 15, 30);                      // training went on (the window moved)
  SpikeGuard fresh = Guard(4.0, 8);
  Feed(fresh, 1, 14);
  a.FromJson(at14, "ckpt");  // the rollback
  CHECK(a.accepted() == 8);
  for (double loss : {1.5, 1.9, 2.0, 2.5}) {
    CHECK(a.Judge(loss, 1.0).spike == fresh.Judge(loss, 1.0).spike);
    CHECK(a.Judge(loss, 1.0).zscore == fresh.Judge(loss, 1.0).zscore);
  }
  CHECK(a.Judge(2.5, 1.0).spike);
  CHECK_THROWS_AS(a.Accept(14, 1.0, 1.0), InvalidArgument);  // steps must increase
  a.Accept(15, 1.8, 1.0);
  fresh.Accept(15, 1.8, 1.0);
  CHECK(a.ToJson() == fresh.ToJson());
}

TEST_CASE("spike guard: the window round-trips through JSON bit for bit; malformed JSON names the path") {
  SpikeGuard a = Guard(3.0, 6);
  Feed(a, 1, 9);
  a.Accept(10, 1.0 / 3.0, 0.1 + 0.2);  // doubles that print long
  SpikeGuard b = Guard(3.0, 6);
  b.FromJson(a.ToJson(), "test");
  CHECK(b.ToJson() == a.ToJson());
  CHECK(b.accepted() == 6);
  CHECK(b.Judge(1.95, 1.0).zscore == a.Judge(1.95, 1.0).zscore);
  // A smaller window keeps the newest entries.
  SpikeGuard c = Guard(3.0, 3);
  c.FromJson(a.ToJson(), "test");
  CHECK(c.accepted() == 3);
  CHECK(c.ToJson().find("\"steps\":[8,9,10]") != std::string::npos);  // the three newest
  const std::string good = a.ToJson();
  CHECK_THROWS_WITH_AS(b.FromJson("{\"steps\": [1, 2], \"loss\": [1.0], \"grad_norm\": [1, 1]}", "ckpt/x"),
                       doctest::Contains("ckpt/x: steps, loss and grad_norm have 2, 1 and 2 entries"), CheckpointError);
  CHECK_THROWS_WITH_AS(b.FromJson("{\"steps\": [2, 1], \"loss\": [1, 1], \"grad_norm\": [1, 1]}", "ckpt/x"),
                       doctest::Contains("steps[1]: steps must increase"), CheckpointError);
  CHECK_THROWS_WITH_AS(b.FromJson("{\"steps\": [1], \"loss\": [\"a\"], \"grad_norm\": [1]}", "ckpt/x"),
                       doctest::Contains("loss[0]: expected a number"), CheckpointError);
  CHECK_THROWS_AS(b.FromJson("{\"steps\": [1]", "ckpt/x"), CheckpointError);
  CHECK(b.ToJson() == good);  // a refused input changed nothing
  CHECK_THROWS_AS(Guard(0, 5), InvalidArgument);
  CHECK_THROWS_AS(Guard(3, 1), InvalidArgument);
}

}  // TEST_SUITE

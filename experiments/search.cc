#include "zerorun/experiments/search.h"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "zerorun/core/error.h"

namespace zerorun::experiments {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Grid points as a person would write them: 12 significant digits (0.1, not 0.10000000000000003).
double Tidy(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return std::strtod(buf, nullptr);
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A generator for trial `index` of a sweep seeded `seed`; `salt` separates uses within a trial.
class TrialRng {
 public:
  TrialRng(uint64_t seed, int64_t index, uint64_t salt)
      : gen_(SplitMix(SplitMix(seed) ^ SplitMix(static_cast<uint64_t>(index) * 0x632BE59BD9B4E019ull + salt))) {}
  double Uniform() { return static_cast<double>(gen_() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double Normal() {  // Box-Muller
    double u1 = std::max(Uniform(), 1e-300), u2 = Uniform();
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * kPi * u2);
  }

 private:
  std::mt19937_64 gen_;
};

// The search coordinate's interval of a sampled parameter.
void InternalBounds(const ParamSpec& p, double* a, double* b) {
  switch (p.kind) {
    case ParamKind::kChoices: *a = 0; *b = static_cast<double>(p.choices.size()) - 1; return;
    case ParamKind::kUniform: *a = p.lo; *b = p.hi; return;
    case ParamKind::kLogUniform: *a = std::log(p.lo); *b = std::log(p.hi); return;
    case ParamKind::kInt:
      if (p.log) *a = std::log(p.lo - 0.4999), *b = std::log(p.hi + 0.4999);
      else *a = p.lo - 0.4999, *b = p.hi + 0.4999;
      return;
    case ParamKind::kExpr: break;
  }
  ZR_CHECK(false, "no search coordinate for a derived value");
}

double SampleUniformInternal(const ParamSpec& p, TrialRng& rng) {
  if (p.kind == ParamKind::kChoices) {
    return std::min(std::floor(rng.Uniform() * static_cast<double>(p.choices.size())),
                    static_cast<double>(p.choices.size()) - 1);
  }
  double a, b;
  InternalBounds(p, &a, &b);
  return a + (b - a) * rng.Uniform();
}

// ---- grid --------------------------------------------------------------------------------------
std::vector<double> GridCoordinates(const ParamSpec& p) {
  std::vector<double> xs;
  if (p.kind == ParamKind::kChoices) {
    for (size_t i = 0; i < p.choices.size(); ++i) xs.push_back(static_cast<double>(i));
    return xs;
  }
  if (p.kind == ParamKind::kInt && p.grid_points == 0) {
    for (double v = p.lo; v <= p.hi; v += 1) xs.push_back(p.log ? std::log(v) : v);
    return xs;
  }
  const bool logscale = p.kind == ParamKind::kLogUniform || (p.kind == ParamKind::kInt && p.log);
  double a = logscale ? std::log(p.lo) : p.lo, b = logscale ? std::log(p.hi) : p.hi;
  int64_t n = p.grid_points;
  for (int64_t i = 0; i < n; ++i) {
    double x = n == 1 ? (a + b) / 2 : a + (b - a) * static_cast<double>(i) / static_cast<double>(n - 1);
    double v = p.kind == ParamKind::kInt ? std::round(logscale ? std::exp(x) : x) : Tidy(logscale ? std::exp(x) : x);
    x = logscale ? std::log(v) : v;
    if (p.kind == ParamKind::kInt && !xs.empty() && std::fabs(xs.back() - x) < 1e-12) continue;  // distinct integers
    xs.push_back(x);
  }
  return xs;
}

class GridSearch final : public SearchStrategy {
 public:
  explicit GridSearch(const SweepSpec& spec) : spec_(spec) {
    for (const ParamSpec& p : spec.params) axes_.push_back(p.Sampled() ? GridCoordinates(p) : std::vector<double>{0});
    total_ = GridSize(spec);
    if (spec.trials > 0) total_ = std::min(total_, spec.trials);
  }
  int64_t NumTrials() const override { return total_; }
  Point Suggest(int64_t index, const std::vector<Observation>&) override {
    Point pt(spec_.params.size());
    int64_t rest = index;
    for (size_t i = spec_.params.size(); i-- > 0;) {
      const int64_t n = static_cast<int64_t>(axes_[i].size());
      if (spec_.params[i].Sampled()) pt[i] = ValueAt(spec_.params[i], axes_[i][static_cast<size_t>(rest % n)]);
      rest /= n;
    }
    return pt;
  }

 private:
  const SweepSpec& spec_;
  std::vector<std::vector<double>> axes_;
  int64_t total_ = 0;
};

// ---- random ------------------------------------------------------------------------------------
Point RandomPoint(const SweepSpec& spec, int64_t index) {
  Point pt(spec.params.size());
  for (size_t i = 0; i < spec.params.size(); ++i) {
    if (!spec.params[i].Sampled()) continue;
    TrialRng rng(spec.seed, index, i + 1);
    pt[i] = ValueAt(spec.params[i], SampleUniformInternal(spec.params[i], rng));
  }
  return pt;
}

class RandomSearch final : public SearchStrategy {
 public:
  explicit RandomSearch(const SweepSpec& spec) : spec_(spec) {}
  int64_t NumTrials() const override { return spec_.trials; }
  Point Suggest(int64_t index, const std::vector<Observation>&) override { return RandomPoint(spec_, index); }

 private:
  const SweepSpec& spec_;
};

// ---- TPE ---------------------------------------------------------------------------------------
// A truncated Parzen estimator on [a, b]: Gaussians at `mus` with per-point widths, plus a prior
// Gaussian at the centre as wide as the interval (weight one observation).
struct Parzen {
  std::vector<double> mu, sigma;
  double a = 0, b = 1;

  Parzen(std::vector<double> xs, double lo, double hi) : a(lo), b(hi) {
    const double width = std::max(b - a, 1e-12);
    std::sort(xs.begin(), xs.end());
    const double min_sigma = width / std::min(100.0, 1.0 + static_cast<double>(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i) {
      double left = i > 0 ? xs[i] - xs[i - 1] : xs[i] - a;
      double right = i + 1 < xs.size() ? xs[i + 1] - xs[i] : b - xs[i];
      mu.push_back(xs[i]);
      sigma.push_back(std::clamp(std::max(left, right), min_sigma, width));
    }
    mu.push_back((a + b) / 2);
    sigma.push_back(width);
  }
  static double Phi(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }
  double Density(double x) const {
    double sum = 0;
    for (size_t i = 0; i < mu.size(); ++i) {
      double z = (x - mu[i]) / sigma[i];
      double mass = Phi((b - mu[i]) / sigma[i]) - Phi((a - mu[i]) / sigma[i]);
      sum += std::exp(-0.5 * z * z) / (sigma[i] * std::sqrt(2 * kPi) * std::max(mass, 1e-12));
    }
    return sum / static_cast<double>(mu.size());
  }
  double Sample(TrialRng& rng) const {
    size_t k = std::min(mu.size() - 1, static_cast<size_t>(rng.Uniform() * static_cast<double>(mu.size())));
    for (int tries = 0; tries < 64; ++tries) {
      double x = mu[k] + sigma[k] * rng.Normal();
      if (x >= a && x <= b) return x;
    }
    return std::clamp(mu[k], a, b);
  }
};

class TpeSearch final : public SearchStrategy {
 public:
  explicit TpeSearch(const SweepSpec& spec) : spec_(spec) {}
  int64_t NumTrials() const override { return spec_.trials; }
  Point Suggest(int64_t index, const std::vector<Observation>& history) override {
    std::vector<const Observation*> obs;
    for (const Observation& o : history) {
      if (std::isfinite(o.loss)) obs.push_back(&o);
    }
    if (static_cast<int64_t>(obs.size()) < spec_.tpe.startup_trials) return RandomPoint(spec_, index);
    std::stable_sort(obs.begin(), obs.end(), [](const Observation* x, const Observation* y) { return x->loss < y->loss; });
    size_t n_good = std::max<size_t>(1, static_cast<size_t>(std::ceil(spec_.tpe.gamma * static_cast<double>(obs.size()))));
    n_good = std::min(n_good, obs.size() - 1);
    Point pt(spec_.params.size());
    for (size_t i = 0; i < spec_.params.size(); ++i) {
      const ParamSpec& p = spec_.params[i];
      if (!p.Sampled()) continue;
      TrialRng rng(spec_.seed, index, 1000 + i);
      std::vector<double> good, bad;
      for (size_t j = 0; j < obs.size(); ++j) (j < n_good ? good : bad).push_back(obs[j]->point[i].internal);
      double best_x = 0, best_score = -INFINITY;
      if (p.kind == ParamKind::kChoices) {
        const size_t k = p.choices.size();
        std::vector<double> lg(k, 1.0 / static_cast<double>(k)), lb(k, 1.0 / static_cast<double>(k));
        for (double x : good) lg[static_cast<size_t>(x)] += 1;
        for (double x : bad) lb[static_cast<size_t>(x)] += 1;
        double sum_g = 1 + static_cast<double>(good.size()), sum_b = 1 + static_cast<double>(bad.size());
        for (int64_t c = 0; c < spec_.tpe.candidates; ++c) {
          double u = rng.Uniform() * sum_g;
          size_t pick = 0;
          while (pick + 1 < k && u >= lg[pick]) u -= lg[pick++];
          double score = std::log(lg[pick] / sum_g) - std::log(lb[pick] / sum_b);
          if (score > best_score) best_score = score, best_x = static_cast<double>(pick);
        }
      } else {
        double a, b;
        InternalBounds(p, &a, &b);
        Parzen l(good, a, b), g(bad, a, b);
        for (int64_t c = 0; c < spec_.tpe.candidates; ++c) {
          double x = l.Sample(rng);
          double score = std::log(std::max(l.Density(x), 1e-300)) - std::log(std::max(g.Density(x), 1e-300));
          if (score > best_score) best_score = score, best_x = x;
        }
      }
      pt[i] = ValueAt(p, best_x);
    }
    return pt;
  }

 private:
  const SweepSpec& spec_;
};

}  // namespace

std::string NumberJson(double x) {
  if (std::isfinite(x) && x == std::round(x) && std::fabs(x) < 1e15) return Format("{}", static_cast<int64_t>(x));
  // RapidJSON's shortest round-trip form, so that a value read back from a results file and written
  // again is the same text.
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.Double(x);
  return sb.GetString();
}


ParamValue ValueAt(const ParamSpec& p, double internal) {
  ParamValue v;
  double a, b;
  InternalBounds(p, &a, &b);
  internal = std::clamp(internal, a, b);
  switch (p.kind) {
    case ParamKind::kChoices: {
      size_t idx = static_cast<size_t>(std::lround(internal));
      v.json = p.choices[idx];
      v.internal = static_cast<double>(idx);
      rapidjson::Document d;
      d.Parse(v.json.c_str());
      v.number = d.IsNumber() ? d.GetDouble() : d.IsBool() ? (d.GetBool() ? 1 : 0) : static_cast<double>(idx);
      return v;
    }
    case ParamKind::kUniform:
      v.number = internal;
      break;
    case ParamKind::kLogUniform: {
      v.number = std::clamp(std::exp(internal), p.lo, p.hi);
      const double tidy = Tidy(v.number);  // a grid point's exp(log(0.001)) is 0.001, not 0.0010000000000000002
      if (std::log(tidy) == internal) v.number = tidy;
      break;
    }
    case ParamKind::kInt:
      v.number = std::clamp(std::round(p.log ? std::exp(internal) : internal), p.lo, p.hi);
      internal = p.log ? std::log(v.number) : v.number;
      break;
    case ParamKind::kExpr:
      ZR_CHECK(false, "derived values are computed by the sweep");
  }
  v.internal = internal;
  v.json = NumberJson(v.number);
  return v;
}

int64_t GridSize(const SweepSpec& spec) {
  int64_t total = 1;
  for (const ParamSpec& p : spec.params) {
    if (!p.Sampled()) continue;
    total *= static_cast<int64_t>(GridCoordinates(p).size());
    if (total > 10000000) ZR_THROW(InvalidArgument, "{}: the grid has more than 10^7 points", spec.source);
  }
  return total;
}

std::unique_ptr<SearchStrategy> MakeSearchStrategy(const SweepSpec& spec) {
  switch (spec.strategy) {
    case Strategy::kGrid: return std::make_unique<GridSearch>(spec);
    case Strategy::kRandom: return std::make_unique<RandomSearch>(spec);
    case Strategy::kTpe: return std::make_unique<TpeSearch>(spec);
  }
  return nullptr;
}

}  // namespace zerorun::experiments

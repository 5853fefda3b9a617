// Loss-spike statistics (see spike_guard.h).
#include "zerorun/runtime/spike_guard.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "zerorun/core/error.h"
#include "zerorun/runtime/checkpoint_json.h"

namespace zerorun::runtime {

std::string SpikeVerdict::Describe() const {
  char buf[160];
  if (!std::isfinite(value)) {
    std::snprintf(buf, sizeof buf, "%s is %g", metric.c_str(), value);
  } else {
    std::snprintf(buf, sizeof buf, "%s %.6g is %.1f sigma above the window's mean %.6g (sd %.3g)", metric.c_str(), value,
                  zscore, mean, stddev);
  }
  return buf;
}

SpikeGuard::SpikeGuard(const SpikeGuardOptions& options) : options_(options) {
  if (!(options.threshold > 0) || !std::isfinite(options.threshold)) {
    ZR_THROW(InvalidArgument, "spike guard: threshold {} must be a positive number of standard deviations", options.threshold);
  }
  if (options.window < 2) ZR_THROW(InvalidArgument, "spike guard: window {} must be at least 2 steps", options.window);
  if (!(options.min_relative_std >= 0)) {
    ZR_THROW(InvalidArgument, "spike guard: min_relative_std {} must be >= 0", options.min_relative_std);
  }
}

SpikeVerdict SpikeGuard::JudgeOne(const char* metric, double value, double Entry::*field) const {
  SpikeVerdict v;
  v.metric = metric;
  v.value = value;
  if (!std::isfinite(value)) {
    v.spike = true;
    v.zscore = std::numeric_limits<double>::infinity();
    return v;
  }
  if (!full()) return v;
  double sum = 0;
  for (const Entry& e : history_) sum += e.*field;
  const double n = static_cast<double>(history_.size());
  v.mean = sum / n;
  double sq = 0;
  for (const Entry& e : history_) sq += (e.*field - v.mean) * (e.*field - v.mean);
  v.stddev = std::max(std::sqrt(sq / (n - 1)), options_.min_relative_std * std::fabs(v.mean));
  if (v.stddev > 0) {
    v.zscore = (value - v.mean) / v.stddev;
  } else {  // a constant series (and min_relative_std 0 or mean 0): any rise is a spike
    v.zscore = value > v.mean ? std::numeric_limits<double>::infinity() : 0.0;
  }
  v.spike = v.zscore > options_.threshold;
  return v;
}

SpikeVerdict SpikeGuard::Judge(double loss, double grad_norm) const {
  SpikeVerdict v = JudgeOne("loss", loss, &Entry::loss);
  if (v.spike || grad_norm < 0) return v;
  // A step whose grad norm was not computed is never in the window with one (zerorun-train computes it
  // every step or never), so the window's norms are all real here.
  if (!history_.empty() && history_.back().grad_norm < 0) return v;
  SpikeVerdict g = JudgeOne("grad_norm", grad_norm, &Entry::grad_norm);
  return g.spike ? g : v;
}

void SpikeGuard::Accept(int64_t step, double loss, double grad_norm) {
  if (!history_.empty() && step <= history_.back().step) {
    ZR_THROW(InvalidArgument, "spike guard: step {} accepted after step {}", step, history_.back().step);
  }
  history_.push_back({step, loss, grad_norm});
  while (static_cast<int64_t>(history_.size()) > options_.window) history_.pop_front();
}

std::string SpikeGuard::ToJson() const {
  using namespace ckpt_json;
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  Key(w, "steps");
  w.StartArray();
  for (const Entry& e : history_) w.Int64(e.step);
  w.EndArray();
  Key(w, "loss");
  w.StartArray();
  for (const Entry& e : history_) w.Double(e.loss);
  w.EndArray();
  Key(w, "grad_norm");
  w.StartArray();
  for (const Entry& e : history_) w.Double(e.grad_norm);
  w.EndArray();
  w.EndObject();
  return buf.GetString();
}

void SpikeGuard::FromJson(const std::string& json, const std::string& source) {
  using namespace ckpt_json;
  rapidjson::Document doc = Parse(json, source);
  const At at{source, ""};
  const Value& obj = Object(doc, at);
  const Value& steps = Array(Member(obj, at, "steps"), at.Child("steps"));
  const Value& loss = Array(Member(obj, at, "loss"), at.Child("loss"));
  const Value& norm = Array(Member(obj, at, "grad_norm"), at.Child("grad_norm"));
  if (loss.Size() != steps.Size() || norm.Size() != steps.Size()) {
    Fail(at, Format("steps, loss and grad_norm have {}, {} and {} entries", steps.Size(), loss.Size(), norm.Size()));
  }
  std::deque<Entry> h;
  for (rapidjson::SizeType i = 0; i < steps.Size(); ++i) {
    if (!steps[i].IsInt64()) Fail(at.Child("steps").Index(i), "expected an integer");
    if (!loss[i].IsNumber()) Fail(at.Child("loss").Index(i), "expected a number");
    if (!norm[i].IsNumber()) Fail(at.Child("grad_norm").Index(i), "expected a number");
    Entry e{steps[i].GetInt64(), loss[i].GetDouble(), norm[i].GetDouble()};
    if (!h.empty() && e.step <= h.back().step) Fail(at.Child("steps").Index(i), "steps must increase");
    h.push_back(e);
  }
  while (static_cast<int64_t>(h.size()) > options_.window) h.pop_front();
  history_ = std::move(h);
}

std::string SpikeGuard::ToClientState() const { return "{\"spike_guard\": " + ToJson() + "}"; }

bool SpikeGuard::FromClientState(const std::string& client_state_json, const std::string& source) {
  using namespace ckpt_json;
  rapidjson::Document doc = Parse(client_state_json, source);
  const Value* g = doc.IsObject() ? OptionalMember(doc, "spike_guard") : nullptr;
  if (g == nullptr) {
    history_.clear();
    return false;
  }
  FromJson(ToText(*g), source + ": spike_guard");
  return true;
}

}  // namespace zerorun::runtime

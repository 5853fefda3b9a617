#include "zerorun/experiments/results.h"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "zerorun/core/error.h"

namespace zerorun::experiments {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void Num(Writer& w, double x) {
  if (std::isfinite(x)) w.Double(x);
  else w.Null();
}

RunStatus StatusFromName(const std::string& s, const std::string& source) {
  for (RunStatus st : {RunStatus::kOk, RunStatus::kStopped, RunStatus::kDiverged, RunStatus::kFailed}) {
    if (s == RunStatusName(st)) return st;
  }
  ZR_THROW(InvalidArgument, "{}: unknown status '{}'", source, s);
}

double NumOr(const rapidjson::Value& v, const char* key, double def) {
  auto it = v.FindMember(key);
  if (it == v.MemberEnd() || !it->value.IsNumber()) return it != v.MemberEnd() && it->value.IsNull() ? NAN : def;
  return it->value.GetDouble();
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

}  // namespace

const char* RunStatusName(RunStatus s) {
  switch (s) {
    case RunStatus::kOk: return "ok";
    case RunStatus::kStopped: return "stopped";
    case RunStatus::kDiverged: return "diverged";
    case RunStatus::kFailed: return "failed";
  }
  return "?";
}

std::string TrialToJson(const SweepSpec& spec, const TrialRecord& t) {
  rapidjson::StringBuffer sb;
  Writer w(sb);
  w.StartObject();
  w.Key("trial");
  w.Int64(t.id);
  w.Key("status");
  w.String(RunStatusName(t.status));
  w.Key("objective");
  Num(w, t.objective);
  w.Key("reason");
  w.String(t.reason.c_str());
  w.Key("params");
  w.StartObject();
  for (size_t i = 0; i < spec.params.size() && i < t.point.size(); ++i) {
    w.Key(spec.params[i].name.c_str());
    w.RawValue(t.point[i].json.c_str(), t.point[i].json.size(), rapidjson::kObjectType);
  }
  w.EndObject();
  w.Key("internal");
  w.StartArray();
  for (const ParamValue& v : t.point) Num(w, v.internal);
  w.EndArray();
  w.Key("numbers");
  w.StartArray();
  for (const ParamValue& v : t.point) Num(w, v.number);
  w.EndArray();
  w.Key("flags");
  w.StartArray();
  for (const std::string& f : t.flags) w.String(f.c_str());
  w.EndArray();
  w.Key("runs");
  w.StartArray();
  for (const RunRecord& r : t.runs) {
    w.StartObject();
    w.Key("seed");
    w.Uint64(r.seed);
    w.Key("status");
    w.String(RunStatusName(r.status));
    w.Key("reason");
    w.String(r.reason.c_str());
    w.Key("objective");
    Num(w, r.objective);
    w.Key("tokens_per_second");
    Num(w, r.tokens_per_second);
    w.Key("wall_seconds");
    Num(w, r.wall_seconds);
    w.Key("curve");
    w.StartArray();
    for (const auto& [s, l] : r.curve) {
      w.StartArray();
      w.Int64(s);
      Num(w, l);
      w.EndArray();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return sb.GetString();
}

TrialRecord TrialFromJson(const SweepSpec& spec, const std::string& text, const std::string& source) {
  rapidjson::Document d;
  d.Parse(text.c_str(), text.size());
  auto bad = [&](const std::string& what) { ZR_THROW(InvalidArgument, "{}: not a trial record of this sweep: {}", source, what); };
  if (d.HasParseError() || !d.IsObject()) bad("not a JSON object");
  TrialRecord t;
  if (!d.HasMember("trial") || !d["trial"].IsInt64()) bad("no \"trial\"");
  t.id = d["trial"].GetInt64();
  if (!d.HasMember("status") || !d["status"].IsString()) bad("no \"status\"");
  t.status = StatusFromName(d["status"].GetString(), source);
  t.objective = NumOr(d, "objective", NAN);
  if (d.HasMember("reason") && d["reason"].IsString()) t.reason = d["reason"].GetString();
  if (!d.HasMember("params") || !d["params"].IsObject() || !d.HasMember("internal") || !d["internal"].IsArray() ||
      !d.HasMember("numbers") || !d["numbers"].IsArray() || d["internal"].Size() != spec.params.size() ||
      d["numbers"].Size() != spec.params.size()) {
    bad("its parameters do not match the spec's");
  }
  for (size_t i = 0; i < spec.params.size(); ++i) {
    auto it = d["params"].FindMember(spec.params[i].name.c_str());
    if (it == d["params"].MemberEnd()) bad(Format("no value for parameter '{}'", spec.params[i].name));
    rapidjson::StringBuffer sb;
    rapidjson::Writer<rapidjson::StringBuffer> w(sb);
    it->value.Accept(w);
    ParamValue v;
    v.json = sb.GetString();
    const auto& in = d["internal"][static_cast<rapidjson::SizeType>(i)];
    const auto& nu = d["numbers"][static_cast<rapidjson::SizeType>(i)];
    v.internal = in.IsNumber() ? in.GetDouble() : NAN;
    v.number = nu.IsNumber() ? nu.GetDouble() : NAN;
    t.point.push_back(v);
  }
  if (d.HasMember("flags") && d["flags"].IsArray()) {
    for (const auto& f : d["flags"].GetArray()) {
      if (f.IsString()) t.flags.push_back(f.GetString());
    }
  }
  if (d.HasMember("runs") && d["runs"].IsArray()) {
    for (const auto& r : d["runs"].GetArray()) {
      if (!r.IsObject()) bad("a run is not an object");
      RunRecord rr;
      rr.seed = r.HasMember("seed") && r["seed"].IsUint64() ? r["seed"].GetUint64() : 0;
      rr.status = StatusFromName(r.HasMember("status") && r["status"].IsString() ? r["status"].GetString() : "?", source);
      if (r.HasMember("reason") && r["reason"].IsString()) rr.reason = r["reason"].GetString();
      rr.objective = NumOr(r, "objective", NAN);
      rr.tokens_per_second = NumOr(r, "tokens_per_second", 0);
      rr.wall_seconds = NumOr(r, "wall_seconds", 0);
      if (r.HasMember("curve") && r["curve"].IsArray()) {
        for (const auto& p : r["curve"].GetArray()) {
          if (p.IsArray() && p.Size() == 2 && p[0].IsInt64()) {
            rr.curve.emplace_back(p[0].GetInt64(), p[1].IsNumber() ? p[1].GetDouble() : NAN);
          }
        }
      }
      t.runs.push_back(std::move(rr));
    }
  }
  return t;
}

void SortTrials(const SweepSpec& spec, std::vector<TrialRecord>* trials) {
  const bool max = spec.objective.maximize;
  std::stable_sort(trials->begin(), trials->end(), [max](const TrialRecord& a, const TrialRecord& b) {
    if (a.status != b.status) return a.status < b.status;
    bool fa = std::isfinite(a.objective), fb = std::isfinite(b.objective);
    if (fa != fb) return fa;
    if (fa && a.objective != b.objective) return max ? a.objective > b.objective : a.objective < b.objective;
    return a.id < b.id;
  });
}

std::string ResultsCsv(const SweepSpec& spec, const std::vector<TrialRecord>& sorted) {
  std::string out = "rank,trial,status,objective";
  for (const ParamSpec& p : spec.params) out += "," + CsvField(p.name);
  out += ",runs,seeds,steps,tokens_per_second,wall_seconds,reason\n";
  int64_t rank = 0;
  for (const TrialRecord& t : sorted) {
    out += Format("{},{},{},{}", ++rank, t.id, RunStatusName(t.status),
                  std::isfinite(t.objective) ? NumberJson(t.objective) : std::string());
    for (size_t i = 0; i < spec.params.size(); ++i) out += "," + CsvField(i < t.point.size() ? t.point[i].json : "");
    std::string seeds;
    int64_t steps = 0;
    double tps = 0, wall = 0;
    for (const RunRecord& r : t.runs) {
      seeds += (seeds.empty() ? "" : " ") + std::to_string(r.seed);
      steps = std::max<int64_t>(steps, r.curve.empty() ? 0 : r.curve.back().first);
      tps += r.tokens_per_second / static_cast<double>(t.runs.size());
      wall += r.wall_seconds;
    }
    out += Format(",{},{},{},{},{},{}\n", t.runs.size(), seeds, steps, NumberJson(std::round(tps * 10) / 10),
                  NumberJson(std::round(wall * 100) / 100), CsvField(t.reason));
  }
  return out;
}

void WriteFileAtomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) ZR_THROW(IoError, "cannot write '{}': {}", tmp, std::strerror(errno));
    out << text;
    out.flush();
    if (!out) ZR_THROW(IoError, "cannot write '{}': {}", tmp, std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ZR_THROW(IoError, "cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno));
  }
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ZR_THROW(IoError, "cannot read '{}': {}", path, std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace zerorun::experiments

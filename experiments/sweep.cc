// The sweep loop: keep up to `parallel` runs going; read each run's log as it grows and hand its
// progress lines to the early stopper; when a run ends, score it from its summary; when a trial's
// runs are all done, record it and rewrite the results files.
#include "zerorun/experiments/sweep.h"

#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <memory>
#include <thread>

#include "zerorun/core/error.h"
#include "zerorun/experiments/expr.h"
#include "zerorun/experiments/json_path.h"
#include "zerorun/experiments/process.h"
#include "zerorun/experiments/results.h"

namespace zerorun::experiments {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string Pretty(const rapidjson::Value& v) {
  rapidjson::StringBuffer sb;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(sb);
  w.SetIndent(' ', 2);
  v.Accept(w);
  return std::string(sb.GetString()) + "\n";
}

double NumberAt(const rapidjson::Value& doc, const char* key, double def) {
  const rapidjson::Value* v = GetJsonPath(doc, key);
  return v && v->IsNumber() ? v->GetDouble() : def;
}

std::string TrialDir(const std::string& trials_root, int64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04lld", static_cast<long long>(id));
  return trials_root + "/" + buf;
}

// A progress line of zerorun-train: "step    10/300 | loss 3.1234 ...".
bool ParseProgress(const std::string& line, int64_t* step, double* loss) {
  size_t p = line.find("step ");
  if (p == std::string::npos) return false;
  const char* s = line.c_str() + p + 5;
  char* end = nullptr;
  long long n = std::strtoll(s, &end, 10);
  if (end == s || *end != '/') return false;
  size_t l = line.find("| loss ", static_cast<size_t>(end - line.c_str()));
  if (l == std::string::npos) return false;
  const char* ls = line.c_str() + l + 7;
  char* lend = nullptr;
  double x = std::strtod(ls, &lend);
  if (lend == ls) return false;
  *step = n;
  *loss = x;
  return true;
}

std::string LastLine(const std::string& log) {
  size_t end = log.find_last_not_of("\n \t");
  if (end == std::string::npos) return "";
  size_t start = log.rfind('\n', end);
  std::string line = log.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
  return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

double Objective(const ObjectiveSpec& o, const Curve& curve) {
  if (curve.empty()) return NAN;
  if (o.metric == "final_loss") return curve.back().second;
  if (o.metric == "best_loss") {
    double b = INFINITY;
    for (const auto& [s, l] : curve) b = std::min(b, l);
    return b;
  }
  if (o.metric == "mean_last_k") {
    size_t k = std::min(curve.size(), static_cast<size_t>(o.k));
    double sum = 0;
    for (size_t i = curve.size() - k; i < curve.size(); ++i) sum += curve[i].second;
    return sum / static_cast<double>(k);
  }
  return NAN;
}

// A run in flight.
struct Live {
  int64_t trial_index = 0;  // into the trials vector
  int64_t repeat = 0;
  pid_t pid = -1;
  std::string dir, log_path, key;
  Clock::time_point start;
  size_t log_read = 0;
  std::string partial;  // an unfinished last line
  Curve curve;          // from progress lines
  std::string stop_reason;
  bool diverged = false;
};

class SweepRunner {
 public:
  SweepRunner(const SweepSpec& spec, const SweepOptions& opts)
      : spec_(spec),
        opts_(opts),
        trials_root_(opts.trials_dir.empty() ? opts.out_dir + "/trials" : opts.trials_dir),
        strategy_(MakeSearchStrategy(spec)),
        stopper_(MakeEarlyStopper(spec.early_stopping)) {}

  SweepOutcome Run() {
    PrepareDirectory();
    const int64_t total = strategy_->NumTrials();
    MakeTrialSetup(spec_, strategy_->Suggest(0, {}));  // a spec the base config cannot take fails here, before any run
    LoadFinished(total);
    int64_t cores = opts_.cores > 0 ? opts_.cores : std::max<int64_t>(1, std::thread::hardware_concurrency());
    parallel_ = spec_.parallel > 0 ? spec_.parallel : std::max<int64_t>(1, cores / spec_.world_size);
    threads_ = std::max<int64_t>(1, cores / (parallel_ * spec_.world_size));
    Log(Format("sweep {}: {} search, {} trial(s) x {} run(s), {} at once, results in {}{}", spec_.source,
               StrategyName(spec_.strategy), total, spec_.repeats, parallel_, opts_.out_dir,
               reused_ > 0 ? Format(" ({} finished trial(s) kept)", reused_) : std::string()));
    int64_t next_trial = 0;
    for (;;) {
      const bool interrupted = opts_.interrupt && opts_.interrupt->load();
      if (interrupted) break;
      // Start runs while there are free slots: first the pending repeats of started trials.
      while (static_cast<int64_t>(live_.size()) < parallel_) {
        if (!pending_.empty()) {
          auto [ti, r] = pending_.front();
          pending_.erase(pending_.begin());
          Start(ti, r);
          continue;
        }
        while (next_trial < total && finished_ids_.count(next_trial)) ++next_trial;
        if (next_trial >= total || NoImprovementStop()) break;
        BeginTrial(next_trial++);
      }
      if (live_.empty() && pending_.empty()) break;
      Poll();
      if (!live_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(opts_.poll_ms));
    }
    SweepOutcome out;
    if (opts_.interrupt && opts_.interrupt->load()) {
      out.interrupted = true;
      for (Live& l : live_) StopProcessGroup(l.pid, 2000);
      Log(Format("interrupted: {} run(s) stopped; they run again when the same command is repeated", live_.size()));
      live_.clear();
    }
    out.ran = ran_;
    for (TrialRecord& t : trials_) {
      if (t.status != RunStatus::kFailed || !t.runs.empty() || t.reused) {
        if (finished_ids_.count(t.id)) out.trials.push_back(t);
      }
    }
    SortTrials(spec_, &out.trials);
    for (size_t i = 0; i < out.trials.size(); ++i) {
      if (out.trials[i].status == RunStatus::kOk && std::isfinite(out.trials[i].objective)) {
        out.best = static_cast<int64_t>(i);
        break;
      }
    }
    return out;
  }

 private:
  void Log(const std::string& line) {
    if (opts_.log) opts_.log(line);
    else std::printf("%s\n", line.c_str()), std::fflush(stdout);
  }

  void PrepareDirectory() {
    std::error_code ec;
    fs::create_directories(trials_root_, ec);
    if (!ec) fs::create_directories(opts_.out_dir, ec);
    if (ec) ZR_THROW(IoError, "cannot create the results directory '{}': {}", opts_.out_dir, ec.message());
    const std::string marker = opts_.out_dir + "/sweep.json";
    if (fs::exists(marker)) {
      std::string saved = ReadWholeFile(marker);
      rapidjson::Document d;
      d.Parse(saved.c_str());
      std::string canon = d.IsObject() && d.HasMember("canonical") && d["canonical"].IsString() ? d["canonical"].GetString() : "";
      if (canon != spec_.canonical) {
        ZR_THROW(InvalidArgument,
                 "results directory '{}' holds a sweep of a different spec (only \"trials\", \"parallel\", "
                 "\"trial_timeout_s\" and \"stop_after_no_improvement\" may change between runs of one sweep); use another --out, or delete it",
                 opts_.out_dir);
      }
    }
    rapidjson::Document d;
    d.SetObject();
    auto& a = d.GetAllocator();
    d.AddMember("spec", rapidjson::Value(spec_.source.c_str(), a), a);
    d.AddMember("canonical", rapidjson::Value(spec_.canonical.c_str(), a), a);
    WriteFileAtomic(marker, Pretty(d));
  }

  void LoadFinished(int64_t total) {
    std::error_code ec;
    for (int64_t id = 0; id < total; ++id) {
      const std::string dir = TrialDir(trials_root_, id);
      const std::string result = dir + "/result.json";
      if (!fs::exists(result, ec)) continue;
      TrialRecord t = TrialFromJson(spec_, ReadWholeFile(result), result);
      t.reused = true;
      for (const RunRecord& r : t.runs) ReplayStopper(Format("{}/{}", id, &r - t.runs.data()), r);
      finished_ids_.insert(id);
      trials_.push_back(std::move(t));
      ++reused_;
    }
    SortById();
  }

  // stop_after_no_improvement: the finished trials since the best one (in trial order) reached N.
  bool NoImprovementStop() {
    if (spec_.stop_after_no_improvement <= 0) return false;
    int64_t since = 0;
    double best = NAN;
    for (const TrialRecord& t : trials_) {
      if (!finished_ids_.count(t.id)) continue;
      const bool better = t.status == RunStatus::kOk && std::isfinite(t.objective) &&
                          (std::isnan(best) || (spec_.objective.maximize ? t.objective > best : t.objective < best));
      if (better) best = t.objective, since = 0;
      else ++since;
    }
    if (since < spec_.stop_after_no_improvement) return false;
    if (!no_improvement_logged_) {
      Log(Format("no better trial in the last {}: no new trials (stop_after_no_improvement)", since));
      no_improvement_logged_ = true;
    }
    return true;
  }

  void ReplayStopper(const std::string& key, const RunRecord& r) {
    if (!stopper_) return;
    for (const auto& [s, l] : r.curve) {
      if (!stopper_->Report(key, s, l).empty()) break;
    }
    if (r.status == RunStatus::kOk) stopper_->Completed(key, r.curve);
  }

  void SortById() {
    std::sort(trials_.begin(), trials_.end(), [](const TrialRecord& a, const TrialRecord& b) { return a.id < b.id; });
  }

  std::vector<Observation> History() const {
    std::vector<Observation> h;
    for (const TrialRecord& t : trials_) {
      if (!finished_ids_.count(t.id)) continue;
      double loss = spec_.objective.maximize ? -t.objective : t.objective;
      if (t.status == RunStatus::kDiverged || t.status == RunStatus::kFailed) loss = INFINITY;
      h.push_back({t.point, loss});
    }
    return h;
  }

  void BeginTrial(int64_t id) {
    const std::string dir = TrialDir(trials_root_, id);
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) ZR_THROW(IoError, "cannot create '{}': {}", dir, ec.message());
    TrialRecord t;
    t.id = id;
    // A trial begun by an earlier invocation keeps its point (a model-based strategy could propose another now).
    Point sampled;
    const std::string params_path = dir + "/params.json";
    if (fs::exists(params_path, ec)) {
      try {
        sampled = TrialFromJson(spec_, ReadWholeFile(params_path), params_path).point;
      } catch (const InvalidArgument&) {
        sampled.clear();
      }
    }
    if (sampled.empty()) sampled = strategy_->Suggest(id, History());
    TrialSetup setup = MakeTrialSetup(spec_, sampled);
    t.point = setup.point;
    t.flags = setup.flags;
    WriteFileAtomic(params_path, TrialToJson(spec_, t) + "\n");
    WriteFileAtomic(dir + "/config.json", setup.config_json);
    trials_.push_back(std::move(t));
    const int64_t index = static_cast<int64_t>(trials_.size()) - 1;
    for (int64_t r = 0; r < spec_.repeats; ++r) pending_.push_back({index, r});
  }

  uint64_t SeedOf(int64_t id, int64_t repeat) const {
    return (spec_.seed * 1000003ull + static_cast<uint64_t>(id * spec_.repeats + repeat) + 1) % 2147483647ull;
  }

  void Start(int64_t index, int64_t repeat) {
    TrialRecord& t = trials_[static_cast<size_t>(index)];
    if (static_cast<int64_t>(t.runs.size()) < spec_.repeats) t.runs.resize(static_cast<size_t>(spec_.repeats));
    Live l;
    l.trial_index = index;
    l.repeat = repeat;
    l.key = Format("{}/{}", t.id, repeat);
    const std::string tdir = TrialDir(trials_root_, t.id);
    l.dir = Format("{}/run{}", tdir, repeat);
    std::error_code ec;
    fs::remove_all(l.dir, ec);  // a run cut short by an earlier invocation starts over
    fs::create_directories(l.dir, ec);
    if (ec) ZR_THROW(IoError, "cannot create '{}': {}", l.dir, ec.message());
    l.log_path = l.dir + "/log.txt";
    std::vector<std::string> argv = spec_.command.empty() ? std::vector<std::string>{opts_.default_trainer} : spec_.command;
    argv.insert(argv.end(), {"--deepspeed_config", RunConfig(tdir, l.dir), "--summary", l.dir + "/summary.{rank}.json"});
    const uint64_t seed = spec_.seed_flag.empty() ? 0 : SeedOf(t.id, repeat);  // 0: none passed
    t.runs[static_cast<size_t>(repeat)].seed = seed;
    if (!spec_.seed_flag.empty()) argv.insert(argv.end(), {spec_.seed_flag, std::to_string(seed)});
    argv.insert(argv.end(), spec_.extra_args.begin(), spec_.extra_args.end());
    argv.insert(argv.end(), t.flags.begin(), t.flags.end());
    EnvVars env = {{"ZERORUN_SWEEP_TRIAL", std::to_string(t.id)}, {"ZERORUN_SWEEP_RUN_DIR", l.dir}};
    if (!std::getenv("ZERORUN_NUM_THREADS")) env.push_back({"ZERORUN_NUM_THREADS", std::to_string(threads_)});
    l.pid = SpawnToLog(argv, l.log_path, env);
    l.start = Clock::now();
    ++ran_;
    live_.push_back(std::move(l));
  }

  // The trial's config, or, when it turns on csv_monitor or tensorboard, a copy for the run that
  // writes them into the run's directory (metrics/).
  static std::string RunConfig(const std::string& trial_dir, const std::string& run_dir) {
    const std::string path = trial_dir + "/config.json";
    rapidjson::Document d;
    d.Parse(ReadWholeFile(path).c_str());
    bool monitors = false;
    for (const char* m : {"csv_monitor", "tensorboard"}) {
      const rapidjson::Value* on = GetJsonPath(d, std::string(m) + ".enabled");
      if (!on || !on->IsTrue()) continue;
      monitors = true;
      SetJsonPath(d, std::string(m) + ".output_path", "\"" + run_dir + "/metrics/\"");
    }
    if (!monitors) return path;
    WriteFileAtomic(run_dir + "/config.json", Pretty(d));
    return run_dir + "/config.json";
  }

  // Reads what the run's log gained; feeds progress lines to the stopper.
  void ReadLog(Live& l) {
    FILE* f = std::fopen(l.log_path.c_str(), "rb");
    if (!f) return;
    std::fseek(f, static_cast<long>(l.log_read), SEEK_SET);
    char buf[8192];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
      l.log_read += n;
      l.partial.append(buf, n);
      size_t nl;
      while ((nl = l.partial.find('\n')) != std::string::npos) {
        std::string line = l.partial.substr(0, nl);
        l.partial.erase(0, nl + 1);
        int64_t step;
        double loss;
        if (!l.stop_reason.empty() || !ParseProgress(line, &step, &loss)) continue;
        if (!l.curve.empty() && step <= l.curve.back().first) continue;
        l.curve.emplace_back(step, loss);
        if (!std::isfinite(loss)) {
          l.diverged = true;
          l.stop_reason = Format("loss is not finite at step {}", step);
        } else if (stopper_) {
          l.stop_reason = stopper_->Report(l.key, step, loss);
        }
      }
    }
    std::fclose(f);
  }

  void Poll() {
    for (size_t i = 0; i < live_.size();) {
      Live& l = live_[i];
      std::string how;
      bool exited = PollExited(l.pid, &how);
      ReadLog(l);
      const double elapsed = std::chrono::duration<double>(Clock::now() - l.start).count();
      bool timed_out = !exited && spec_.trial_timeout_s > 0 && elapsed > spec_.trial_timeout_s;
      if (!exited && (timed_out || !l.stop_reason.empty())) {
        StopProcessGroup(l.pid, 3000);
        exited = true;
        how = timed_out ? Format("ran past trial_timeout_s ({} s)", spec_.trial_timeout_s) : "stopped";
        if (timed_out && l.stop_reason.empty()) l.stop_reason = "";
      }
      if (!exited) {
        ++i;
        continue;
      }
      if (!how.empty() && how != "stopped" && l.stop_reason.empty() && !timed_out) ReadLog(l);
      Finish(l, how, timed_out, elapsed);
      live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  // Scores a run that ended. A run the stopper (or a non-finite loss) ended counts as stopped at that
  // step even when the process had already finished: the decision, not the race, sets the result.
  void Finish(Live& l, const std::string& how, bool timed_out, double elapsed) {
    TrialRecord& t = trials_[static_cast<size_t>(l.trial_index)];
    RunRecord& r = t.runs[static_cast<size_t>(l.repeat)];
    r.wall_seconds = elapsed;
    r.objective = NAN;
    std::string log;
    try {
      log = ReadWholeFile(l.log_path);
    } catch (const IoError&) {
    }
    if (!l.stop_reason.empty()) {
      r.curve = l.curve;
      r.status = l.diverged ? RunStatus::kDiverged : RunStatus::kStopped;
      r.reason = l.stop_reason;
      if (!l.diverged) r.objective = Objective(spec_.objective, r.curve);
    } else if (timed_out) {
      r.curve = l.curve;
      r.status = RunStatus::kFailed;
      r.reason = how;
    } else if (!how.empty()) {
      r.curve = l.curve;
      r.status = RunStatus::kFailed;
      std::string last = LastLine(log);
      r.reason = how + (last.empty() ? "" : ": " + last);
    } else {
      ScoreSummary(l, &r, log);
    }
    if (stopper_ && r.status == RunStatus::kOk) stopper_->Completed(l.key, r.curve);
    WriteFileAtomic(l.dir + "/run.json", Format("{\"status\": \"{}\"}\n", RunStatusName(r.status)));
    bool done = true;
    for (const Live& other : live_) done &= !(other.trial_index == l.trial_index && &other != &l);
    for (const auto& [ti, rep] : pending_) done &= ti != l.trial_index;
    if (done) CompleteTrial(t);
  }

  void ScoreSummary(const Live& l, RunRecord* r, const std::string& log) {
    const std::string path = l.dir + "/summary.0.json";
    std::string text;
    try {
      text = ReadWholeFile(path);
    } catch (const IoError&) {
      r->status = RunStatus::kFailed;
      r->reason = "the trainer exited 0 without writing a summary (" + path + ")";
      (void)log;
      return;
    }
    rapidjson::Document d;
    d.Parse(text.c_str());
    if (d.HasParseError() || !d.IsObject()) {
      r->status = RunStatus::kFailed;
      r->reason = "the summary " + path + " is not a JSON object";
      return;
    }
    r->curve.clear();
    if (d.HasMember("losses") && d["losses"].IsArray()) {
      int64_t step = 0;
      for (const auto& v : d["losses"].GetArray()) r->curve.emplace_back(++step, v.IsNumber() ? v.GetDouble() : NAN);
    }
    r->tokens_per_second = NumberAt(d, "tokens_per_second", 0);
    for (const auto& [s, loss] : r->curve) {
      if (!std::isfinite(loss)) {
        r->status = RunStatus::kDiverged;
        r->reason = Format("loss is not finite at step {}", s);
        return;
      }
    }
    rapidjson::Document cfg;
    cfg.Parse(ReadWholeFile(TrialDir(trials_root_, trials_[static_cast<size_t>(l.trial_index)].id) + "/config.json").c_str());
    const rapidjson::Value* fp16 = GetJsonPath(cfg, "fp16.enabled");
    const int64_t steps = static_cast<int64_t>(NumberAt(d, "steps", 0)), skipped = static_cast<int64_t>(NumberAt(d, "skipped_steps", 0));
    if (fp16 && fp16->IsTrue()) {
      double min_scale = NumberAt(cfg, "fp16.min_loss_scale", 1);
      double scale = NumberAt(d, "loss_scale", 1);
      if (skipped > 0 && scale <= min_scale) {
        r->status = RunStatus::kDiverged;
        r->reason = Format("loss scale at its minimum ({}) after {} skipped step(s) of {}", min_scale, skipped, steps);
        return;
      }
    }
    if (steps > 0 && skipped == steps) {
      r->status = RunStatus::kDiverged;
      r->reason = Format("all {} steps were skipped (gradients never finite)", steps);
      return;
    }
    const std::string& m = spec_.objective.metric;
    if (m == "tokens_per_second") r->objective = r->tokens_per_second;
    else if (m.rfind("summary.", 0) == 0) {
      const rapidjson::Value* v = GetJsonPath(d, m.substr(8));
      r->objective = v && v->IsNumber() ? v->GetDouble() : NAN;
      if (!v || !v->IsNumber()) {
        r->status = RunStatus::kFailed;
        r->reason = Format("the summary has no number at '{}'", m.substr(8));
        return;
      }
    } else {
      r->objective = Objective(spec_.objective, r->curve);
    }
    if (!std::isfinite(r->objective)) {
      r->status = RunStatus::kDiverged;
      r->reason = "the objective is not finite";
      return;
    }
    r->status = RunStatus::kOk;
    r->reason.clear();
  }

  void CompleteTrial(TrialRecord& t) {
    t.status = RunStatus::kOk;
    t.reason.clear();
    double sum = 0;
    int64_t n = 0;
    for (const RunRecord& r : t.runs) {
      if (r.status > t.status) {
        t.status = r.status;
        t.reason = Format("run seed {}: {}", r.seed, r.reason);
      }
      if (std::isfinite(r.objective)) sum += r.objective, ++n;
    }
    if (t.runs.size() == 1 && !t.reason.empty()) t.reason = t.runs[0].reason;
    t.objective = n > 0 ? sum / static_cast<double>(n) : NAN;
    if (t.status == RunStatus::kDiverged || t.status == RunStatus::kFailed) t.objective = NAN;
    const std::string dir = TrialDir(trials_root_, t.id);
    WriteFileAtomic(dir + "/result.json", TrialToJson(spec_, t) + "\n");
    finished_ids_.insert(t.id);
    std::string params;
    for (size_t i = 0; i < spec_.params.size(); ++i) params += Format("{}{}={}", i ? " " : "", spec_.params[i].name, t.point[i].json);
    double wall = 0;
    for (const RunRecord& r : t.runs) wall += r.wall_seconds;
    Log(Format("trial {} {}: objective {} ({}) in {} s{}", t.id, RunStatusName(t.status),
               std::isfinite(t.objective) ? NumberJson(t.objective) : std::string("-"), params,
               NumberJson(std::round(wall * 10) / 10), t.reason.empty() ? "" : " — " + t.reason));
    WriteResults();
  }

  void WriteResults() {
    std::vector<TrialRecord> done;
    for (const TrialRecord& t : trials_) {
      if (finished_ids_.count(t.id)) done.push_back(t);
    }
    SortTrials(spec_, &done);
    WriteFileAtomic(opts_.out_dir + "/results.csv", ResultsCsv(spec_, done));
    std::string jsonl;
    for (const TrialRecord& t : done) jsonl += TrialToJson(spec_, t) + "\n";
    WriteFileAtomic(opts_.out_dir + "/results.jsonl", jsonl);
    for (const TrialRecord& t : done) {
      if (t.status != RunStatus::kOk || !std::isfinite(t.objective)) continue;
      const std::string dir = TrialDir(trials_root_, t.id);
      WriteFileAtomic(opts_.out_dir + "/best_config.json", ReadWholeFile(dir + "/config.json"));
      WriteFileAtomic(opts_.out_dir + "/best.json", TrialToJson(spec_, t) + "\n");
      break;
    }
  }

  const SweepSpec& spec_;
  const SweepOptions& opts_;
  const std::string trials_root_;
  std::unique_ptr<SearchStrategy> strategy_;
  std::unique_ptr<EarlyStopper> stopper_;
  std::vector<TrialRecord> trials_;
  std::set<int64_t> finished_ids_;
  std::vector<std::pair<int64_t, int64_t>> pending_;  // (index into trials_, repeat)
  std::vector<Live> live_;
  int64_t parallel_ = 1, threads_ = 1, ran_ = 0, reused_ = 0;
  bool no_improvement_logged_ = false;
};

}  // namespace

TrialSetup MakeTrialSetup(const SweepSpec& spec, const Point& sampled) {
  rapidjson::Document doc;
  doc.Parse(spec.base_config.c_str());
  ZR_CHECK(doc.IsObject(), "base config is not an object");
  TrialSetup out;
  out.point = sampled;
  out.point.resize(spec.params.size());
  auto apply = [&](size_t i) {
    const ParamSpec& p = spec.params[i];
    const std::string& json = out.point[i].json;
    if (!p.path.empty()) {
      try {
        SetJsonPath(doc, p.path, json);
      } catch (const InvalidArgument& e) {
        ZR_THROW(InvalidArgument, "{}: params.{}: {}", spec.source, p.name, e.what());
      }
    } else if (json == "true") {
      out.flags.push_back(p.flag);
    } else if (json != "false") {
      std::string value = json;
      if (value.size() >= 2 && value.front() == '"') {
        rapidjson::Document d;
        d.Parse(value.c_str());
        value = d.IsString() ? d.GetString() : value;
      }
      out.flags.push_back(p.flag);
      out.flags.push_back(value);
    }
  };
  for (size_t i = 0; i < spec.params.size(); ++i) {
    if (spec.params[i].Sampled()) apply(i);
  }
  // Names for derived values: constants, the sampled values, and the batch geometry of the config.
  std::map<std::string, double> names = spec.constants;
  for (size_t i = 0; i < spec.params.size(); ++i) {
    if (spec.params[i].Sampled()) names[spec.params[i].name] = out.point[i].number;
  }
  const double ws = static_cast<double>(spec.world_size);
  double gas = NumberAt(doc, "gradient_accumulation_steps", NAN), mb = NumberAt(doc, "train_micro_batch_size_per_gpu", NAN);
  double tbs = NumberAt(doc, "train_batch_size", NAN);
  if (std::isnan(gas)) gas = (!std::isnan(tbs) && !std::isnan(mb)) ? tbs / (mb * ws) : 1;
  if (std::isnan(mb) && !std::isnan(tbs)) mb = tbs / (gas * ws);
  if (std::isnan(tbs) && !std::isnan(mb)) tbs = mb * gas * ws;
  names["world_size"] = ws;
  names["gradient_accumulation_steps"] = gas;
  if (!std::isnan(mb)) names["micro_batch"] = mb;
  if (!std::isnan(tbs)) names["train_batch_size"] = names["global_batch"] = tbs;
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const ParamSpec& p = spec.params[i];
    if (p.Sampled()) continue;
    double v = EvalExpr(p.expr, names, Format("{}: params.{}.expr", spec.source, p.name));
    names[p.name] = v;
    out.point[i].number = v;
    out.point[i].internal = v;
    out.point[i].json = NumberJson(v);
    apply(i);
  }
  out.config_json = Pretty(doc);
  return out;
}

std::vector<TrialRecord> LoadSweepResults(const SweepSpec& spec, const std::string& out_dir, const std::string& trials_dir) {
  std::vector<TrialRecord> out;
  std::error_code ec;
  const std::string root = trials_dir.empty() ? out_dir + "/trials" : trials_dir;
  if (!fs::is_directory(root, ec)) ZR_THROW(InvalidArgument, "'{}' is not a sweep's results directory (no {})", out_dir, root);
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string result = e.path().string() + "/result.json";
    if (fs::exists(result, ec)) out.push_back(TrialFromJson(spec, ReadWholeFile(result), result));
  }
  SortTrials(spec, &out);
  return out;
}

SweepOutcome RunSweep(const SweepSpec& spec, const SweepOptions& opts) { return SweepRunner(spec, opts).Run(); }

}  // namespace zerorun::experiments

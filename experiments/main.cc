// `zerorun-sweep SPEC`: runs (or resumes) a hyper-parameter sweep and writes its results and
// report; `zerorun sweep SPEC` is the same. User guide: docs/experiments.md.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/experiments/autotune.h"
#include "zerorun/experiments/report.h"
#include "zerorun/experiments/results.h"
#include "zerorun/experiments/search.h"
#include "zerorun/experiments/spec.h"
#include "zerorun/experiments/sweep.h"

namespace ze = zerorun::experiments;

namespace {

const char* kUsage = R"(usage: zerorun-sweep SPEC [--out DIR] [--trainer PATH] [--report-only] [--dry-run]
       zerorun-sweep --autotune DS_CONFIG [--out DIR] [--trainer PATH] [--params P] [--budget BYTES]
                     [--world_size N] [-- TRAINER_ARGS...]

Runs the hyper-parameter sweep SPEC describes (a JSON file: base config, search space, strategy,
objective; docs/experiments.md) and writes DIR: each trial's config, log and summary, results.csv
and results.jsonl (best first), best_config.json and report.html. Running the same command again
continues the sweep: finished trials are kept, unfinished ones run again.

  --out DIR        results directory (default: SPEC without .json, plus .results)
  --trainer PATH   the trainer when SPEC has no "command" (default: zerorun-train beside this program)
  --report-only    rewrite report.html from DIR's finished trials, run nothing
  --dry-run        print each trial's point and flags (grid and random; nothing runs)
  --help           this text

--autotune runs DeepSpeed's autotuning as DS_CONFIG's "autotuning" section asks: the highest throughput
(or lowest latency) over ZeRO stage x micro batch x reduce_bucket_size, stages whose model states do
not fit BYTES per rank (default: this machine's available memory / N) pruned by the memory estimator
for P parameters (default: autotuning.model_info.num_params); results in autotuning.results_dir (or
DIR), trials in autotuning.exps_dir, the best config in ds_config_optimal.json.
)";

// "1.3e9", "350M", "4K", "1B" -> elements; "24GiB", "512MiB", "80GB", "1e10" -> bytes. -1 when bad.
int64_t ParseSize(const std::string& text, bool bytes) {
  char* end = nullptr;
  double x = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(x >= 0)) return -1;
  std::string unit(end);
  double mul = 1;
  if (bytes) {
    if (unit == "KiB") mul = 1024.0;
    else if (unit == "MiB") mul = 1024.0 * 1024;
    else if (unit == "GiB") mul = 1024.0 * 1024 * 1024;
    else if (unit == "KB") mul = 1e3;
    else if (unit == "MB") mul = 1e6;
    else if (unit == "GB") mul = 1e9;
    else if (!unit.empty()) return -1;
  } else {
    if (unit == "K") mul = 1e3;
    else if (unit == "M") mul = 1e6;
    else if (unit == "B") mul = 1e9;
    else if (!unit.empty()) return -1;
  }
  return static_cast<int64_t>(x * mul);
}

std::atomic<bool> g_interrupt{false};
void OnSignal(int) { g_interrupt.store(true); }

std::string SelfDir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string spec_path, out, trainer, autotune;
  bool report_only = false, dry_run = false;
  ze::AutotuneOptions at;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      at.trainer_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "zerorun-sweep: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--out") {
      out = value();
    } else if (a == "--trainer") {
      trainer = value();
    } else if (a == "--autotune") {
      autotune = value();
    } else if (a == "--params" || a == "--budget" || a == "--world_size") {
      std::string v = value();
      int64_t x = a == "--world_size" ? std::atoll(v.c_str()) : ParseSize(v, a == "--budget");
      if (x <= 0) {
        std::fprintf(stderr, "zerorun-sweep: %s: bad value '%s'\n", a.c_str(), v.c_str());
        return 2;
      }
      (a == "--params" ? at.num_params : a == "--budget" ? at.budget_bytes : at.world_size) = x;
    } else if (a == "--report-only") {
      report_only = true;
    } else if (a == "--dry-run") {
      dry_run = true;
    } else if (a.rfind("--", 0) == 0 || !spec_path.empty()) {
      std::fprintf(stderr, "zerorun-sweep: unknown argument '%s'\n\n%s", a.c_str(), kUsage);
      return 2;
    } else {
      spec_path = a;
    }
  }
  if (!autotune.empty()) {
    if (!spec_path.empty()) {
      std::fprintf(stderr, "zerorun-sweep: give either SPEC or --autotune DS_CONFIG\n");
      return 2;
    }
    try {
      ze::AutotunePlan plan = ze::PlanAutotuning(ze::ReadWholeFile(autotune), autotune, at);
      for (const std::string& n : plan.notes) std::printf("autotuning: %s\n", n.c_str());
      struct sigaction sa = {};
      sa.sa_handler = OnSignal;
      sigaction(SIGINT, &sa, nullptr);
      sigaction(SIGTERM, &sa, nullptr);
      ze::SweepOptions opts;
      opts.out_dir = out.empty() ? plan.results_dir : out;
      opts.trials_dir = !out.empty() && plan.exps_dir[0] != '/' ? out + "/" + plan.exps_dir : plan.exps_dir;
      opts.default_trainer = trainer.empty() ? SelfDir() + "/zerorun-train" : trainer;
      opts.interrupt = &g_interrupt;
      ze::SweepOutcome o = ze::RunSweep(plan.spec, opts);
      ze::WriteReport(plan.spec, opts.out_dir, opts.out_dir + "/report.html", opts.trials_dir);
      if (o.best < 0) {
        std::fprintf(stderr, "zerorun-sweep: autotuning: no experiment succeeded (see %s/results.csv)\n", opts.out_dir.c_str());
        return 1;
      }
      const ze::TrialRecord& b = o.trials[static_cast<size_t>(o.best)];
      ze::WriteFileAtomic(opts.out_dir + "/ds_config_optimal.json", ze::ReadWholeFile(opts.out_dir + "/best_config.json"));
      std::printf("autotuning: best of %zu experiment(s): zero stage %s, micro batch %s, reduce_bucket_size %s: %s %s; "
                  "config %s/ds_config_optimal.json\n",
                  o.trials.size(), b.point[0].json.c_str(), b.point[1].json.c_str(), b.point[2].json.c_str(),
                  plan.spec.objective.maximize ? "tokens/s" : "seconds", ze::NumberJson(b.objective).c_str(),
                  opts.out_dir.c_str());
      return o.interrupted ? 130 : 0;
    } catch (const zerorun::InvalidArgument& e) {
      std::fprintf(stderr, "zerorun-sweep: %s\n", e.what());
      return 2;
    } catch (const zerorun::Error& e) {
      std::fprintf(stderr, "zerorun-sweep: error: %s\n", e.what());
      return 1;
    }
  }
  if (spec_path.empty()) {
    std::fprintf(stderr, "zerorun-sweep: no SPEC given\n\n%s", kUsage);
    return 2;
  }
  if (out.empty()) {
    out = spec_path.size() > 5 && spec_path.substr(spec_path.size() - 5) == ".json" ? spec_path.substr(0, spec_path.size() - 5)
                                                                                     : spec_path;
    out += ".results";
  }
  try {
    ze::SweepSpec spec = ze::LoadSweepSpec(spec_path);
    if (dry_run) {
      if (spec.strategy == ze::Strategy::kTpe) {
        std::fprintf(stderr, "zerorun-sweep: --dry-run lists grid and random points only (TPE depends on results)\n");
        return 2;
      }
      auto strategy = ze::MakeSearchStrategy(spec);
      for (int64_t i = 0; i < strategy->NumTrials(); ++i) {
        ze::TrialSetup s = ze::MakeTrialSetup(spec, strategy->Suggest(i, {}));
        std::string line = std::to_string(i) + ":";
        for (size_t p = 0; p < spec.params.size(); ++p) line += " " + spec.params[p].name + "=" + s.point[p].json;
        for (const std::string& f : s.flags) line += " " + f;
        std::printf("%s\n", line.c_str());
      }
      return 0;
    }
    if (!report_only) {
      struct sigaction sa = {};
      sa.sa_handler = OnSignal;
      sigaction(SIGINT, &sa, nullptr);
      sigaction(SIGTERM, &sa, nullptr);
      ze::SweepOptions opts;
      opts.out_dir = out;
      opts.default_trainer = trainer.empty() ? SelfDir() + "/zerorun-train" : trainer;
      opts.interrupt = &g_interrupt;
      ze::SweepOutcome o = ze::RunSweep(spec, opts);
      int64_t counts[4] = {0, 0, 0, 0};
      for (const ze::TrialRecord& t : o.trials) ++counts[static_cast<int>(t.status)];
      std::printf("%zu trial(s): %lld ok, %lld stopped early, %lld diverged, %lld failed; %lld run(s) this time\n",
                  o.trials.size(), static_cast<long long>(counts[0]), static_cast<long long>(counts[1]),
                  static_cast<long long>(counts[2]), static_cast<long long>(counts[3]), static_cast<long long>(o.ran));
      if (o.best >= 0) {
        const ze::TrialRecord& b = o.trials[static_cast<size_t>(o.best)];
        std::string flags;
        for (const std::string& f : b.flags) flags += " " + f;
        std::printf("best: trial %lld, objective %s; config %s/best_config.json%s%s\n", static_cast<long long>(b.id),
                    ze::NumberJson(b.objective).c_str(), out.c_str(), flags.empty() ? "" : ", flags:", flags.c_str());
      }
      if (o.interrupted) {
        ze::WriteReport(spec, out, out + "/report.html");
        return 130;
      }
    }
    ze::WriteReport(spec, out, out + "/report.html");
    std::printf("report: %s/report.html\n", out.c_str());
    return 0;
  } catch (const zerorun::InvalidArgument& e) {
    std::fprintf(stderr, "zerorun-sweep: %s\n", e.what());
    return 2;
  } catch (const zerorun::Error& e) {
    std::fprintf(stderr, "zerorun-sweep: error: %s\n", e.what());
    return 1;
  }
}

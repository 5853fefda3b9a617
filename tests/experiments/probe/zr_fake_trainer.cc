// A stand-in for zerorun-train in the sweep tests: its "training" is a known function.
//   f = (x - 0.3)^2 + (y + 0.2)^2 + 1, with x = fake.x, y = fake.y from --deepspeed_config (or --x/--y);
//   loss(step) = f + 2 exp(-step / 8) (+ seed noise 1e-3 * (seed % 7) when fake.noise is true).
// Prints "step N/M | loss L" every step and writes zerorun-train's summary keys to --summary.
// Misbehaves on request: fake.crash_above (exit 3 when x is above it), fake.nan_below (a NaN loss from
// step 3 when y is below it), fake.fp16_stuck (every step skipped, loss scale 1), fake.sleep_ms per step,
// fake.oom_above (exit 1 "out of memory" when the micro batch is above it).
// tokens/s = 1000 + 100 x + 10 micro_batch - 50 zero_stage (what the autotuning test maximises).
#include <rapidjson/document.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  std::string config, summary;
  double x = 0, y = 0;
  bool have_x = false, have_y = false;
  long steps = 30, seed = 0;
  std::string window;  // --profile_window A:B
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i];
    if (a.rfind("--local_rank=", 0) == 0) {  // the zerorun launcher's, as DeepSpeed's passes it
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "zr_fake_trainer: %s needs a value\n", a.c_str());
      return 2;
    }
    std::string v = argv[i + 1];
    if (a == "--deepspeed_config") config = v;
    else if (a == "--summary") summary = v;
    else if (a == "--seed") seed = std::atol(v.c_str());
    else if (a == "--steps") steps = std::atol(v.c_str());
    else if (a == "--profile_window") window = v;
    else if (a == "--x") x = std::atof(v.c_str()), have_x = true;
    else if (a == "--y") y = std::atof(v.c_str()), have_y = true;
    else {
      std::fprintf(stderr, "zr_fake_trainer: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  std::ifstream in(config);
  std::stringstream ss;
  ss << in.rdbuf();
  rapidjson::Document d;
  d.Parse(ss.str().c_str());
  if (d.HasParseError() || !d.IsObject()) {
    std::fprintf(stderr, "zr_fake_trainer: bad config %s\n", config.c_str());
    return 2;
  }
  auto num = [&](const char* key, double def) {
    if (!d.HasMember("fake") || !d["fake"].HasMember(key) || !d["fake"][key].IsNumber()) return def;
    return d["fake"][key].GetDouble();
  };
  auto flag = [&](const char* key) { return d.HasMember("fake") && d["fake"].HasMember(key) && d["fake"][key].IsTrue(); };
  if (!have_x) x = num("x", 0);
  if (!have_y) y = num("y", 0);
  const double f = (x - 0.3) * (x - 0.3) + (y + 0.2) * (y + 0.2) + 1 + (flag("noise") ? 1e-3 * static_cast<double>(seed % 7) : 0);
  const double sleep_ms = num("sleep_ms", 0);
  auto top = [&](const char* key, const char* sub, double def) {
    if (!d.HasMember(key)) return def;
    const rapidjson::Value& v = sub ? (d[key].IsObject() && d[key].HasMember(sub) ? d[key][sub] : d[key]) : d[key];
    return v.IsNumber() ? v.GetDouble() : def;
  };
  const double micro = top("train_micro_batch_size_per_gpu", nullptr, 1);
  const double stage = d.HasMember("zero_optimization") && d["zero_optimization"].HasMember("stage") ? top("zero_optimization", "stage", 0) : 0;
  if (micro > num("oom_above", INFINITY)) {
    std::fprintf(stderr, "zr_fake_trainer: out of memory at micro batch %g\n", micro);
    return 1;
  }
  std::string losses;
  double loss = 0;
  for (long s = 1; s <= steps; ++s) {
    if (x > num("crash_above", INFINITY) && s == 2) {
      std::fprintf(stderr, "zr_fake_trainer: crashing as asked (x = %g)\n", x);
      return 3;
    }
    loss = f + 2 * std::exp(-static_cast<double>(s) / 8);
    if (y < num("nan_below", -INFINITY) && s >= 3) loss = NAN;
    std::printf("step %5ld/%ld | loss %.6f | lr 0.001 | scale 1 | grad norm 1.000 | 100 tokens/s\n", s, steps, loss);
    std::fflush(stdout);
    losses += (losses.empty() ? "" : ",") + (std::isfinite(loss) ? std::to_string(loss) : std::string("null"));
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(sleep_ms * 1000)));
  }
  if (!summary.empty()) {
    size_t r = summary.find("{rank}");
    if (r != std::string::npos) summary.replace(r, 6, "0");
    std::ofstream out(summary);
    const bool stuck = flag("fp16_stuck");
    out << "{\"rank\": 0, \"steps\": " << steps << ", \"skipped_steps\": " << (stuck ? steps : 0)
        << ", \"losses\": [" << losses << "], \"final_loss\": " << (std::isfinite(loss) ? std::to_string(loss) : "null")
        << ", \"loss_scale\": 1, \"tokens_per_second\": " << 1000 + 100 * x - 10 * micro + 50 * stage << ", \"seed\": " << seed
        << ", \"extra\": {\"x_times_y\": " << x * y << "}";
    // the Slurm job this run was a step of (scripts/slurm-local.sh: one job per trial)
    if (const char* job = std::getenv("SLURM_JOB_ID")) out << ", \"slurm_job_id\": \"" << job << "\"";
    // The whole run's throughput above ranks the experiments the other way round from the steady
    // state's (as warm-up costs can): an autotuner must read the profile window's.
    if (!window.empty()) {
      out << ", \"window\": \"" << window << "\", \"window_tokens_per_second\": " << 1000 + 100 * x + 10 * micro - 50 * stage
          << ", \"window_step_ms\": " << 100 - 10 * micro + 5 * stage;
    }
    out << "}\n";
  }
  return 0;
}

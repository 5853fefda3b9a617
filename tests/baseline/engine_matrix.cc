// zr_engine_matrix: the engine's training results over ZeRO stages 0-3 x worlds 1-4 x fp32/bf16/fp16 x
// gradient accumulation 1 and 3 (the slow equivalence test's matrix: the tests' tiny GPT, global batch
// 36, reduce_bucket_size 200, on the `local` backend), one line per case:
//   stage world dtype gas | <FNV-1a 64 of rank 0's parameters as fp32 bits> | ranks <equal|DIFFER> | losses (hex floats)
// A refactoring records the table before (`--out FILE --params-dir DIR`) and compares after
// (`--against FILE --against-params DIR`): per case "bitwise" or the largest relative loss difference
// and absolute parameter difference from the recorded run; `--repeat` also runs every case twice and
// reports whether the two runs are bitwise identical.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/runtime/engine_test_util.h"

using namespace zrtest;

namespace {

struct Key {
  int stage, world;
  DType dtype;
  int64_t gas;
  std::string Name() const {
    return Format("s{} w{} {} gas{}", stage, world, DTypeName(dtype), gas);
  }
  std::string File() const { return Format("s{}_w{}_{}_gas{}.f32", stage, world, DTypeName(dtype), gas); }
};

uint64_t Fnv(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

RunResult RunCase(const Key& k, int steps) {
  RunSpec s;
  s.dtype = k.dtype;
  s.stage = k.stage;
  s.world = k.world;
  s.gas = k.gas;
  s.micro = 36 / (k.world * k.gas);
  s.steps = steps;
  s.zero_json = R"(, "stage3_param_persistence_threshold": 32, "stage3_prefetch_bucket_size": 1000)";
  return Train(s);
}

std::string Line(const Key& k, const RunResult& r) {
  bool equal = true;
  for (const auto& p : r.final_params) equal = equal && p == r.final_params[0];
  std::string losses;
  for (double l : r.losses) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %a", l);
    losses += buf;
  }
  char hash[32];
  std::snprintf(hash, sizeof hash, "%016" PRIx64, Fnv(r.final_params[0]));
  return Format("{} | {} | ranks {} |{}", k.Name(), hash, equal ? "equal" : "DIFFER", losses);
}

std::vector<double> ParseLosses(const std::string& line) {
  std::vector<double> out;
  std::istringstream in(line.substr(line.rfind('|') + 1));
  std::string tok;
  while (in >> tok) out.push_back(std::strtod(tok.c_str(), nullptr));
  return out;
}

std::vector<float> ReadParams(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<float> v;
  if (!in) return v;
  in.seekg(0, std::ios::end);
  v.resize(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20;
  std::string out_path, params_dir, against, against_params, only;
  bool repeat = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "zr_engine_matrix: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") steps = std::stoi(next());
    else if (a == "--out") out_path = next();
    else if (a == "--params-dir") params_dir = next();
    else if (a == "--against") against = next();
    else if (a == "--against-params") against_params = next();
    else if (a == "--only") only = next();  // substring of the case name, e.g. "s1 w3"
    else if (a == "--repeat") repeat = true;
    else {
      std::fprintf(stderr, "usage: zr_engine_matrix [--steps N] [--out FILE] [--params-dir DIR] [--against FILE]"
                           " [--against-params DIR] [--only TEXT] [--repeat]\n");
      return 2;
    }
  }
  std::map<std::string, std::string> before;
  if (!against.empty()) {
    std::ifstream in(against);
    if (!in) {
      std::fprintf(stderr, "zr_engine_matrix: cannot read %s\n", against.c_str());
      return 2;
    }
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      before[line.substr(0, line.find(" |"))] = line;
    }
  }
  if (!params_dir.empty()) std::filesystem::create_directories(params_dir);
  std::ofstream out;
  if (!out_path.empty()) out.open(out_path);
  int bitwise = 0, differ = 0, not_repeatable = 0;
  double worst_loss = 0, worst_param = 0;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (int world = 1; world <= 4; ++world) {
        for (int64_t gas : {1, 3}) {
          const Key k{stage, world, dt, gas};
          if (!only.empty() && k.Name().find(only) == std::string::npos) continue;
          RunResult r = RunCase(k, steps);
          const std::string line = Line(k, r);
          std::printf("%s\n", line.c_str());
          if (out) out << line << "\n";
          if (!params_dir.empty()) {
            std::ofstream f(std::filesystem::path(params_dir) / k.File(), std::ios::binary);
            f.write(reinterpret_cast<const char*>(r.final_params[0].data()),
                    static_cast<std::streamsize>(r.final_params[0].size() * sizeof(float)));
          }
          if (repeat) {
            RunResult again = RunCase(k, steps);
            const bool same = again.losses == r.losses && again.final_params == r.final_params;
            not_repeatable += same ? 0 : 1;
            std::printf("  repeat: %s\n", same ? "bitwise identical" : "DIFFERENT");
          }
          auto it = before.find(k.Name());
          if (it == before.end()) continue;
          if (it->second == line) {
            ++bitwise;
            std::printf("  vs before: bitwise\n");
            continue;
          }
          ++differ;
          const std::vector<double> old = ParseLosses(it->second);
          double rel = 0;
          for (size_t i = 0; i < old.size() && i < r.losses.size(); ++i) {
            rel = std::max(rel, std::fabs(old[i] - r.losses[i]) / std::max(1e-12, std::fabs(old[i])));
          }
          worst_loss = std::max(worst_loss, rel);
          std::string pd = "n/a";
          if (!against_params.empty()) {
            std::vector<float> op = ReadParams(std::filesystem::path(against_params) / k.File());
            if (op.size() == r.final_params[0].size()) {
              double d = 0;
              for (size_t i = 0; i < op.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(op[i] - r.final_params[0][i])));
              worst_param = std::max(worst_param, d);
              char buf[32];
              std::snprintf(buf, sizeof buf, "%.3g", d);
              pd = buf;
            }
          }
          std::printf("  vs before: DIFFERENT (max rel loss diff %.3g, max abs param diff %s)\n", rel, pd.c_str());
        }
      }
    }
  }
  if (!before.empty()) {
    std::printf("summary: %d bitwise, %d different (max rel loss diff %.3g, max abs param diff %.3g)%s\n", bitwise,
                differ, worst_loss, worst_param,
                repeat ? Format(", {} not repeatable", not_repeatable).c_str() : "");
  }
  return 0;
}

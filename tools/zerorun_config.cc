// zerorun-config: check or explain a DeepSpeed JSON config the way the engine will read it.
//   zerorun-config check FILE [--world-size N] [--allow-unknown] [--hidden-size H]
//   zerorun-config explain FILE [--world-size N] [--json] [--allow-unknown] [--hidden-size H]
//   zerorun-config schema            (the key table docs/config.md embeds)
// Exit status: 0 valid; 2 invalid config, unreadable file or bad usage (one problem per line on stderr,
// each starting with the JSON path).
#include <charconv>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>

#include "zerorun/runtime/config/config.h"

namespace {

namespace rt = zerorun::runtime;

constexpr const char* kUsage =
    "usage: zerorun-config check FILE [--world-size N] [--allow-unknown] [--hidden-size H]\n"
    "       zerorun-config explain FILE [--world-size N] [--json] [--allow-unknown] [--hidden-size H]\n"
    "       zerorun-config schema\n"
    "  check    validate FILE; exit 0 when valid (warnings on stderr), 2 when not (one error per line)\n"
    "  explain  print every effective value and its origin, the batch identity, bucket sizes, features;\n"
    "           --json prints the effective config as JSON (DeepSpeed key names, defaults filled)\n"
    "  --world-size N     data-parallel world size used to resolve the batch keys (default 1)\n"
    "  --allow-unknown    unknown keys are warnings, not errors (also ZERORUN_ALLOW_UNKNOWN_CONFIG=1)\n"
    "  --hidden-size H    model hidden size, resolves \"auto\" ZeRO bucket sizes\n";

int Usage(const std::string& problem) {
  std::cerr << "zerorun-config: " << problem << "\n" << kUsage;
  return 2;
}

bool ParsePositive(std::string_view s, int64_t* out) {
  int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || v < 1) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage("missing command");
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "schema") {
    if (argc != 2) return Usage("schema takes no arguments");
    std::cout << rt::ConfigSchemaMarkdown();
    return 0;
  }
  if (cmd != "check" && cmd != "explain") return Usage("unknown command \"" + cmd + "\"");
  std::string file;
  bool json = false;
  rt::LoadOptions options;
  options.log_warnings = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag, int64_t* out) {
      if (i + 1 >= argc) return false;
      if (!ParsePositive(argv[++i], out)) {
        std::cerr << "zerorun-config: " << flag << " expects a positive integer; found \"" << argv[i] << "\"\n";
        return false;
      }
      return true;
    };
    int64_t n = 0;
    if (a == "--world-size") {
      if (!value("--world-size", &n) || n > 1'000'000'000) return Usage("--world-size needs a positive integer");
      options.world_size = static_cast<int>(n);
    } else if (a == "--hidden-size") {
      if (!value("--hidden-size", &n)) return Usage("--hidden-size needs a positive integer");
      options.hidden_size = n;
    } else if (a == "--allow-unknown") {
      options.allow_unknown_keys = true;
    } else if (a == "--json" && cmd == "explain") {
      json = true;
    } else if (!a.empty() && a[0] == '-') {
      return Usage("unknown flag \"" + a + "\" for " + cmd);
    } else if (file.empty()) {
      file = a;
    } else {
      return Usage("more than one FILE given");
    }
  }
  if (file.empty()) return Usage("missing FILE");
  try {
    rt::Config config = rt::LoadConfigFile(file, options);
    for (const rt::ConfigIssue& w : config.warnings()) std::cerr << "warning: " << w.ToString() << "\n";
    if (cmd == "check") {
      std::cerr << file << ": valid (train_batch_size " << config.train_batch_size() << " = "
                << config.micro_batch_per_gpu() << " × " << config.gradient_accumulation_steps() << " × "
                << options.world_size << ", ZeRO stage " << config.zero_optimization.StageNumber() << ")\n";
    } else if (json) {
      std::cout << rt::EffectiveConfigJson(config);
    } else {
      std::cout << rt::ExplainConfig(config);
    }
    return 0;
  } catch (const rt::ConfigLoadError& e) {
    for (const rt::ConfigIssue& i : e.issues()) std::cerr << i.ToString() << "\n";
    for (const rt::ConfigIssue& w : e.warnings()) std::cerr << "warning: " << w.ToString() << "\n";
    return 2;
  } catch (const zerorun::Error& e) {
    std::cerr << file << ": " << e.what() << "\n";
    return 2;
  }
}

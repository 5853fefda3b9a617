// zerorun-config: check or explain a DeepSpeed JSON config the way the engine will read it.
//   zerorun-config check FILE [--world-size N] [--allow-unknown] [--hidden-size H]
//   zerorun-config explain FILE [--world-size N] [--json] [--allow-unknown] [--hidden-size H]
//   zerorun-config schema            (the key table docs/config.md embeds)
//   zerorun-config estimate --params P --world-size N [--largest-layer L] [--dtype D] [--optimizer O]
//                           [--budget B] [--activations B] [FILE]   (per-rank memory, docs/estimate.md)
// Exit status: 0 valid; 2 invalid config, one the engine refuses (check), unreadable file or bad usage
// (one problem per line on stderr, each starting with the JSON path).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "zerorun/core/format.h"
#include "zerorun/runtime/config/config.h"
#include "zerorun/runtime/engine_validate.h"
#include "zerorun/zero/estimate.h"

namespace {

namespace rt = zerorun::runtime;

constexpr const char* kUsage =
    "usage: zerorun-config check FILE [--world-size N] [--allow-unknown] [--hidden-size H]\n"
    "       zerorun-config explain FILE [--world-size N] [--json] [--allow-unknown] [--hidden-size H]\n"
    "       zerorun-config schema\n"
    "       zerorun-config estimate --params P --world-size N [--largest-layer L] [--dtype bf16|fp16|fp32]\n"
    "                               [--optimizer NAME] [--budget BYTES] [--activations BYTES] [FILE]\n"
    "  check    validate FILE as the engine will (every check its constructor makes of a config); exit 0\n"
    "           when the engine accepts it (warnings on stderr), 2 when not (one error per line)\n"
    "  explain  print every effective value and its origin, the batch identity, bucket sizes, features;\n"
    "           --json prints the effective config as JSON (DeepSpeed key names, defaults filled)\n"
    "  --world-size N     data-parallel world size used to resolve the batch keys (default 1)\n"
    "  --allow-unknown    unknown keys are warnings, not errors (also ZERORUN_ALLOW_UNKNOWN_CONFIG=1)\n"
    "  --hidden-size H    model hidden size, resolves \"auto\" ZeRO bucket sizes\n"
    "  estimate  per-rank memory of every ZeRO stage and offload choice (model states, buckets, stage-3\n"
    "           live parameters), and which fit --budget; FILE supplies dtype, optimizer, stage and the\n"
    "           bucket/prefetch/live/persistence sizes (flags given explicitly win). P, L: parameter counts\n"
    "           (1.3e9, 350M, 7B); BYTES: 24GiB, 80GB, 1e10. Also --prefetch E, --max-live E,\n"
    "           --persistence-threshold E (stage-3 elements, DeepSpeed defaults 5e7, 1e9, 1e5)\n";

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


// "1.3e9", "350M", "7B", "1200": a count of elements (K/M/B/G/T = 1e3..1e12).
std::optional<int64_t> ParseCount(std::string_view s) {
  if (s.empty()) return std::nullopt;
  double scale = 1.0;
  switch (s.back()) {
    case 'k': case 'K': scale = 1e3; break;
    case 'm': case 'M': scale = 1e6; break;
    case 'b': case 'B': case 'g': case 'G': scale = 1e9; break;
    case 't': case 'T': scale = 1e12; break;
    default: break;
  }
  if (scale != 1.0) s.remove_suffix(1);
  std::string text(s);
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < 0) return std::nullopt;
  v *= scale;
  if (v > 9.0e18 || v != std::floor(v)) return std::nullopt;
  return static_cast<int64_t>(v);
}

// "24GiB", "80GB", "512MiB", "1e10", "1e10B": bytes (KiB.. binary, KB.. decimal).
std::optional<int64_t> ParseBytes(std::string_view s) {
  static const std::pair<const char*, double> kUnits[] = {
      {"KiB", 1024.0}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024}, {"TiB", 1024.0 * 1024 * 1024 * 1024},
      {"KB", 1e3},     {"MB", 1e6},            {"GB", 1e9},                   {"TB", 1e12},
      {"B", 1.0}};
  double scale = 1.0;
  for (const auto& [unit, factor] : kUnits) {
    std::string_view u(unit);
    if (s.size() > u.size() && s.substr(s.size() - u.size()) == u) {
      s.remove_suffix(u.size());
      scale = factor;
      break;
    }
  }
  std::string text(s);
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < 0 || v * scale > 9.0e18) {
    return std::nullopt;
  }
  return static_cast<int64_t>(std::llround(v * scale));
}

int DTypeBytes(zerorun::DType d) { return d == zerorun::DType::kF32 ? 4 : 2; }

std::string Grouped(int64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string OptimizerName(rt::OptimizerKind k) {
  switch (k) {
    case rt::OptimizerKind::kAdam: return "Adam";
    case rt::OptimizerKind::kAdamW: return "AdamW";
    case rt::OptimizerKind::kLamb: return "Lamb";
    case rt::OptimizerKind::kLion: return "Lion";
    case rt::OptimizerKind::kSgd: return "SGD";
    case rt::OptimizerKind::kAdagrad: return "Adagrad";
    case rt::OptimizerKind::kNone: break;
  }
  return "";
}

zerorun::zero::OffloadTarget ToTarget(rt::OffloadDevice d) {
  using zerorun::zero::OffloadTarget;
  return d == rt::OffloadDevice::kCpu ? OffloadTarget::kCpu
         : d == rt::OffloadDevice::kNvme ? OffloadTarget::kNvme
                                         : OffloadTarget::kNone;
}

int RunEstimate(int argc, char** argv) {
  namespace z = zerorun::zero;
  std::optional<int64_t> params, largest, world, budget, activations, prefetch, max_live, persistence;
  std::optional<std::string> dtype_flag, optimizer_flag;
  std::string file;
  rt::LoadOptions options;
  options.log_warnings = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    auto count = [&](const char* flag, std::optional<int64_t>* out, int64_t min) {
      if (!next(&v)) return Usage(std::string(flag) + " needs a value");
      *out = ParseCount(v);
      if (!*out || **out < min) {
        return Usage(std::string(flag) + " expects a count" + (min > 0 ? " >= 1" : "") + " (e.g. 1.3e9, 350M); found \"" + v + "\"");
      }
      return 0;
    };
    auto bytes = [&](const char* flag, std::optional<int64_t>* out) {
      if (!next(&v)) return Usage(std::string(flag) + " needs a value");
      *out = ParseBytes(v);
      if (!*out) return Usage(std::string(flag) + " expects bytes (e.g. 24GiB, 80GB, 1e10); found \"" + v + "\"");
      return 0;
    };
    int rc = 0;
    if (a == "--params") {
      rc = count("--params", &params, 1);
    } else if (a == "--largest-layer") {
      rc = count("--largest-layer", &largest, 1);
    } else if (a == "--world-size") {
      rc = count("--world-size", &world, 1);
      if (rc == 0 && *world > 1'000'000) rc = Usage("--world-size is at most 1000000");
    } else if (a == "--prefetch") {
      rc = count("--prefetch", &prefetch, 0);
    } else if (a == "--max-live") {
      rc = count("--max-live", &max_live, 0);
    } else if (a == "--persistence-threshold") {
      rc = count("--persistence-threshold", &persistence, 0);
    } else if (a == "--budget") {
      rc = bytes("--budget", &budget);
    } else if (a == "--activations") {
      rc = bytes("--activations", &activations);
    } else if (a == "--dtype") {
      if (!next(&v)) return Usage("--dtype needs a value");
      if (v != "bf16" && v != "fp16" && v != "fp32") return Usage("--dtype expects bf16, fp16 or fp32; found \"" + v + "\"");
      dtype_flag = v;
    } else if (a == "--optimizer") {
      if (!next(&v)) return Usage("--optimizer needs a value");
      if (z::OptimizerStateBytesFor(v) < 0) {
        return Usage("--optimizer: unknown optimizer \"" + v + "\" (Adam, AdamW, Lamb, Lion, SGD, Adagrad)");
      }
      optimizer_flag = v;
    } else if (a == "--allow-unknown") {
      options.allow_unknown_keys = true;
    } else if (a == "--hidden-size") {
      std::optional<int64_t> hidden;
      rc = count("--hidden-size", &hidden, 1);
      if (rc == 0) options.hidden_size = *hidden;
    } else if (!a.empty() && a[0] == '-') {
      return Usage("unknown flag \"" + a + "\" for estimate");
    } else if (file.empty()) {
      file = a;
    } else {
      return Usage("more than one FILE given");
    }
    if (rc != 0) return rc;
  }
  if (!params) return Usage("estimate needs --params P (the model's parameter count)");
  if (!world) return Usage("estimate needs --world-size N (data-parallel ranks)");

  z::EstimateInput in;
  // With --largest-layer the model is taken as tensors of that size (stages 1/2 cut buckets from them).
  in.groups = z::ModelOfParams(*params, largest.value_or(0));
  in.world_size = static_cast<int>(*world);
  std::string dtype_text = "bf16", grad_text, comm_text, optimizer = "Adam", source = "flags and DeepSpeed defaults";
  bool sgd_momentum = true;
  int config_stage = -1;
  z::OffloadTarget config_opt = z::OffloadTarget::kNone, config_param = z::OffloadTarget::kNone;
  if (!file.empty()) {
    try {
      options.world_size = in.world_size;
      rt::Config config = rt::LoadConfigFile(file, options);
      for (const rt::ConfigIssue& w : config.warnings()) std::cerr << "warning: " << w.ToString() << "\n";
      const auto& zc = config.zero_optimization;
      dtype_text = zerorun::DTypeName(config.ModelDType());
      in.param_bytes = DTypeBytes(config.ModelDType());
      in.grad_bytes = DTypeBytes(config.GradAccumDType());
      in.comm_bytes = DTypeBytes(config.CommDType());
      grad_text = zerorun::DTypeName(config.GradAccumDType());
      comm_text = zerorun::DTypeName(config.CommDType());
      if (config.optimizer.type != rt::OptimizerKind::kNone) optimizer = OptimizerName(config.optimizer.type);
      sgd_momentum = config.optimizer.sgd.momentum != 0.0;
      config_stage = zc.StageNumber();
      config_opt = ToTarget(zc.OptimizerOffload());
      config_param = ToTarget(zc.ParamOffload());
      in.reduce_bucket_numel = zc.reduce_bucket_size;
      in.round_robin = zc.round_robin_gradients;
      in.prefetch_numel = zc.prefetch_bucket_size;
      in.max_live_numel = zc.max_live_parameters;
      in.max_reuse_distance = zc.max_reuse_distance;
      in.persistence_threshold = zc.param_persistence_threshold;
      in.sub_group_numel = zc.sub_group_size;
      if (zc.offload_optimizer) in.nvme_buffer_count = zc.offload_optimizer->buffer_count;
      if (zc.offload_param) in.param_buffer_count = zc.offload_param->buffer_count;
      source = file;
    } catch (const rt::ConfigLoadError& e) {
      for (const rt::ConfigIssue& i : e.issues()) std::cerr << i.ToString() << "\n";
      return 2;
    } catch (const zerorun::Error& e) {
      std::cerr << file << ": " << e.what() << "\n";
      return 2;
    }
  }
  if (dtype_flag) {
    dtype_text = *dtype_flag;
    in.param_bytes = in.grad_bytes = in.comm_bytes = dtype_text == "fp32" ? 4 : 2;
    grad_text = comm_text = dtype_text;
  }
  if (grad_text.empty()) grad_text = comm_text = dtype_text;
  if (optimizer_flag) {
    optimizer = *optimizer_flag;
    sgd_momentum = true;
  }
  in.optimizer_state_bytes = z::OptimizerStateBytesFor(optimizer, sgd_momentum);
  if (largest) in.largest_layer = *largest;
  if (prefetch) in.prefetch_numel = *prefetch;
  if (max_live) in.max_live_numel = *max_live;
  if (persistence) in.persistence_threshold = *persistence;

  std::vector<z::StageEstimate> rows;
  try {
    rows = z::EstimateAll(in);
  } catch (const zerorun::Error& e) {
    return Usage(e.what());
  }
  const int64_t act = activations.value_or(0);
  std::ostringstream os;
  os << "zerorun memory estimate per rank (" << source << ")\n"
     << "  model:      Ψ = " << Grouped(*params) << " parameters on N = " << in.world_size << " rank(s)\n"
     << "  precision:  " << dtype_text << " parameters, " << grad_text << " gradients, " << comm_text
     << " on the wire" << (in.param_bytes == 4 ? " (fp32: the parameters are the master copy)" : ", fp32 master")
     << "\n"
     << "  optimizer:  " << optimizer << ", " << in.optimizer_state_bytes << " bytes of fp32 state per parameter\n"
     << "  stage 3:    largest layer "
     << (largest ? Grouped(*largest) + " elements" : std::string("not given (--largest-layer): the whole model"))
     << "\n              prefetch " << Grouped(in.prefetch_numel) << ", max live " << Grouped(in.max_live_numel)
     << ", persistence threshold " << Grouped(in.persistence_threshold) << " elements\n"
     << "  reduce bucket " << Grouped(in.reduce_bucket_numel)
     << " elements (at most two buckets in flight at every stage; stage 2 also holds the buckets being\n"
     << "  filled, stage 3 the full gradients until a bucket fills)\n\n";
  const int w = 11;
  os << std::left << std::setw(40) << "choice" << std::right;
  for (const char* h : {"params", "grads", "master", "optim", "states", "buckets^", "live^", "peak"}) {
    os << std::setw(w) << h;
  }
  os << std::setw(w) << "host" << std::setw(w) << "nvme";
  if (budget) os << "  fits " << zerorun::FormatBytes(static_cast<double>(*budget));
  os << "\n";
  bool any_fit = false;
  for (const z::StageEstimate& r : rows) {
    std::string label = r.Label();
    if (r.stage == config_stage && r.offload_optimizer == config_opt && r.offload_param == config_param) {
      label += " (config)";
    }
    const int64_t peak = r.DevicePeakBytes() + act;
    // Pad to a fixed visual width: the arrows in labels are multi-byte.
    size_t glyphs = 0;
    for (unsigned char ch : label) glyphs += (ch & 0xC0) != 0x80;
    os << label << std::string(glyphs < 40 ? 40 - glyphs : 1, ' ');
    for (int64_t b : {r.params_bytes, r.grads_bytes, r.master_bytes, r.optimizer_bytes, r.ModelStateBytes(),
                      r.buckets_peak_bytes, r.live_params_peak_bytes, peak, r.host_bytes, r.nvme_bytes}) {
      os << std::setw(w) << zerorun::FormatBytes(static_cast<double>(b));
    }
    if (budget) {
      const bool fits = peak <= *budget;
      any_fit = any_fit || fits;
      os << "  " << (fits ? "yes" : "no");
    }
    os << "\n";
  }
  os << "\n  states = params + grads + master + optim, held between steps (the engine's memory accounting).\n"
     << "  ^ transient upper bounds during a step: buckets = gradient reduction buffers; live = stage-3\n"
     << "    gathered parameters (largest layer + prefetch, capped by max live; with params offloaded also\n"
     << "    the device copies of the shards being gathered).\n"
     << "  peak = states + buckets + live"
     << (activations ? " + activations " + zerorun::FormatBytes(static_cast<double>(act)) : "") << ".\n";
  if (!activations) os << "  Activations are not included (pass --activations BYTES to add them to the peak).\n";
  os << "  optimizer→cpu: fp32 master and optimizer state in host memory (the host column), and the partition's\n"
     << "    gradients, landed there as they are reduced (stages 2/3: off the device; stage 1: a copy).\n"
     << "  optimizer→nvme: both in the swap file, two slots per sub-group (nvme); in host memory buffer_count\n"
     << "    buffers of one sub-group (sub_group_size) each.\n"
     << "  params→cpu: the 16-bit shards in host memory; params→nvme: in the swap file, and in host memory\n"
     << "    offload_param.buffer_count buffers of the largest shard each. Persistent parameters stay gathered.\n";
  if (budget) {
    os << "  Budget " << zerorun::FormatBytes(static_cast<double>(*budget)) << ": "
       << (any_fit ? "the rows marked yes fit." : "no choice fits.")
       << "\n";
  }
  // DeepSpeed's own estimators, for comparison (one node of N GPUs, additional_buffer_factor 1.5).
  const int64_t layer = largest.value_or(*params);
  const int gpn = in.world_size;
  auto ds2 = [&](bool off) { return z::DeepSpeedZero2Estimate(*params, gpn, 1, off); };
  auto ds3 = [&](bool off, bool offp) { return z::DeepSpeedZero3Estimate(*params, layer, gpn, 1, off, offp); };
  auto line = [&](const char* what, z::DeepSpeedEstimate e) {
    os << "    " << std::left << std::setw(48) << what << std::right << std::setw(w)
       << zerorun::FormatBytes(static_cast<double>(e.gpu_bytes)) << " per GPU, " << std::setw(w)
       << zerorun::FormatBytes(static_cast<double>(e.cpu_bytes)) << " CPU\n";
  };
  os << "\n  DeepSpeed's estimate_zero2/3_model_states_mem_needs (fp16 Adam, 1 node × " << gpn
     << " GPUs, buffer factor 1.5):\n";
  line("zero2 offload_optimizer=none", ds2(false));
  line("zero2 offload_optimizer=cpu", ds2(true));
  line("zero3 offload_param=none offload_optimizer=none", ds3(false, false));
  line("zero3 offload_param=none offload_optimizer=cpu", ds3(true, false));
  line("zero3 offload_param=cpu  offload_optimizer=cpu", ds3(true, true));
  std::cout << os.str();
  return 0;
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
  if (cmd == "estimate") return RunEstimate(argc, argv);
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
      // Every check the engine's constructor makes of the config (offload, refused keys, no optimizer, ...).
      const std::vector<rt::ConfigIssue> problems = rt::EngineConfigProblems(config, options.world_size);
      if (!problems.empty()) {
        for (const rt::ConfigIssue& i : problems) std::cerr << i.ToString() << "\n";
        return 2;
      }
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

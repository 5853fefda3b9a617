// LoadConfigFile / LoadConfigString: parse and read, resolve and validate, then either throw one
// ConfigLoadError listing every problem or hand back the Config with its warnings and provenance.
#include "zerorun/runtime/config/config.h"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "zerorun/core/log.h"
#include "zerorun/runtime/config/config_loader.h"

namespace zerorun::runtime {

namespace {
std::string JoinIssues(const std::string& source, const std::vector<ConfigIssue>& issues) {
  std::string out = Format("invalid config {} ({} problem{}):", source.empty() ? "<string>" : source, issues.size(),
                           issues.size() == 1 ? "" : "s");
  for (const ConfigIssue& i : issues) out += "\n  " + i.ToString();
  return out;
}
}  // namespace

ConfigLoadError::ConfigLoadError(std::string source, std::vector<ConfigIssue> issues, std::vector<ConfigIssue> warnings)
    : ConfigError(JoinIssues(source, issues)),
      source_(std::move(source)),
      issues_(std::move(issues)),
      warnings_(std::move(warnings)) {}

std::string Provenance::ToString() const {
  switch (kind) {
    case Kind::kDefault: return "default";
    case Kind::kFile: return "file";
    case Kind::kAlias: return "file (alias " + detail + ")";
    case Kind::kDeprecated: return "file (translated from deprecated " + detail + ")";
    case Kind::kDerived: return "derived: " + detail;
    case Kind::kAuto: return "auto: " + detail;
  }
  return "?";
}

DType Config::ModelDType() const {
  if (fp16.enabled) return DType::kF16;
  if (bf16.enabled) return DType::kBF16;
  return DType::kF32;
}

DType Config::GradAccumDType() const { return data_types.grad_accum_dtype.value_or(ModelDType()); }

bool Config::OverlapCommDisabled() const {
  const Provenance* p = ProvenanceOf("zero_optimization.overlap_comm");
  return !zero_optimization.overlap_comm.value_or(true) && p != nullptr && p->kind != Provenance::Kind::kDerived &&
         p->kind != Provenance::Kind::kDefault;
}

const Provenance* Config::ProvenanceOf(const std::string& path) const {
  auto it = provenance_.find(path);
  if (it != provenance_.end()) return &it->second;
  // Keys inside a section that was itself translated or derived inherit its origin.
  for (size_t dot = path.rfind('.'); dot != std::string::npos; dot = path.rfind('.', dot - 1)) {
    auto p = provenance_.find(path.substr(0, dot));
    if (p != provenance_.end() && p->second.kind != Provenance::Kind::kFile) return &p->second;
    if (dot == 0) break;
  }
  return nullptr;
}

class ConfigLoader {
 public:
  static Config Load(const std::string& text, const LoadOptions& options) {
    if (options.world_size < 1) {
      ZR_THROW(InvalidArgument, "LoadConfig: world_size must be >= 1; got {}", options.world_size);
    }
    const char* env = std::getenv("ZERORUN_ALLOW_UNKNOWN_CONFIG");
    const bool allow_unknown = options.allow_unknown_keys || (env && std::string(env) == "1");
    Config config;
    config.source_ = options.source_name;
    config_detail::Collected out;
    if (config_detail::ParseAndRead(text, options.source_name, allow_unknown, config, out)) {
      config_detail::ResolveAndValidate(config, options.world_size, options.hidden_size, out);
    }
    if (out.suppressed_errors > 0) {
      out.errors.push_back({"", Format("... and {} more problems not shown", out.suppressed_errors)});
    }
    if (out.suppressed_warnings > 0) {
      out.warnings.push_back({"", Format("... and {} more warnings not shown", out.suppressed_warnings)});
    }
    if (!out.errors.empty()) throw ConfigLoadError(options.source_name, std::move(out.errors), std::move(out.warnings));
    config.warnings_ = std::move(out.warnings);
    config.provenance_ = std::move(out.provenance);
    if (options.log_warnings) {
      for (const ConfigIssue& w : config.warnings_) {
        ZR_WARN("config {}: {}", options.source_name.empty() ? "<string>" : options.source_name, w.ToString());
      }
    }
    return config;
  }
};

Config LoadConfigString(const std::string& json, const LoadOptions& options) {
  return ConfigLoader::Load(json, options);
}

Config LoadConfigFile(const std::string& path, const LoadOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) ZR_THROW(IoError, "cannot read config file {}: it is a directory", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(ErrnoMessage(Format("cannot open config file {}", path), errno));
  // Read in chunks with a cap, so /dev/zero or a runaway pipe fails instead of exhausting memory.
  constexpr size_t kMaxBytes = size_t{64} << 20;
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxBytes) ZR_THROW(IoError, "config file {} is larger than 64 MiB", path);
  }
  if (in.bad()) throw IoError(Format("cannot read config file {}", path));
  LoadOptions o = options;
  if (o.source_name.empty()) o.source_name = path;
  return ConfigLoader::Load(text, o);
}

}  // namespace zerorun::runtime

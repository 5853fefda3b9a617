// Loading a DeepSpeed JSON config into the typed, validated Config the engine reads.
//
// Contract:
// - Input is JSON with comments and trailing commas (DeepSpeed reads hjson); NaN/Infinity literals,
//   duplicate keys (any level) and syntax errors are errors (syntax errors name file:line:column).
// - Every key is checked: unknown keys are errors with a "did you mean" (warnings with
//   LoadOptions::allow_unknown_keys or env ZERORUN_ALLOW_UNKNOWN_CONFIG=1); keys DeepSpeed knows and
//   zerorun does not implement load with one warning each; deprecated keys are translated as DeepSpeed
//   does (old and new together is an error); "auto" is resolved where derivable, else refused.
// - Types follow DeepSpeed (integers may be written 5e8, not 5.5; pydantic sections also take "500"
//   and "true"/"yes"/"on"); ranges and cross-field rules are checked; the batch triple is resolved
//   exactly as DeepSpeed's _set_batch_related_parameters for LoadOptions::world_size.
// - ALL problems are collected; if any, ConfigLoadError is thrown. Its what() lists one problem per line
//   as "<json.path>: <what was expected>; found <what was found>", issues() gives them structured.
// - Every effective value records where it came from (Provenance).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/runtime/config/config_types.h"

namespace zerorun::runtime {

struct LoadOptions {
  int world_size = 1;               // data-parallel world size used to resolve the batch triple
  bool allow_unknown_keys = false;  // unknown keys become warnings (also env ZERORUN_ALLOW_UNKNOWN_CONFIG=1)
  std::string source_name;          // names the input in messages; LoadConfigFile uses the path
  int64_t hidden_size = 0;          // model hidden size; > 0 lets "auto" bucket sizes resolve (HF rules)
  bool log_warnings = true;         // also log each warning through ZR_WARN when loading
};

// One problem (or warning) at a JSON path. `path` is dotted ("zero_optimization.offload_param.device",
// list elements as "optimizer.params.betas[1]"); "" for the document root; "file:line:col" for syntax.
struct ConfigIssue {
  std::string path;
  std::string message;
  std::string ToString() const { return path.empty() ? message : path + ": " + message; }
};

class ConfigLoadError : public ConfigError {
 public:
  ConfigLoadError(std::string source, std::vector<ConfigIssue> issues, std::vector<ConfigIssue> warnings = {});
  const std::vector<ConfigIssue>& issues() const { return issues_; }
  // Warnings collected before the load failed (not part of what()).
  const std::vector<ConfigIssue>& warnings() const { return warnings_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<ConfigIssue> issues_;
  std::vector<ConfigIssue> warnings_;
};

// Where an effective value came from.
struct Provenance {
  enum class Kind { kDefault, kFile, kAlias, kDeprecated, kDerived, kAuto };
  Kind kind = Kind::kDefault;
  std::string detail;  // kAlias/kDeprecated: the key written in the file; kDerived/kAuto: how
  std::string ToString() const;  // "default", "file", "file (alias stage3_x)", "derived: ...", ...
};

class Config : public ConfigBody {
 public:
  // Resolved batch triple (always set after loading).
  int64_t train_batch_size() const { return batch.train_batch_size.value_or(0); }
  int64_t micro_batch_per_gpu() const { return batch.train_micro_batch_size_per_gpu.value_or(0); }
  int64_t gradient_accumulation_steps() const { return batch.gradient_accumulation_steps.value_or(0); }

  // The model / 16-bit training dtype: fp16, bf16 or fp32.
  DType ModelDType() const;
  // Dtype gradients are accumulated in (data_types.grad_accum_dtype or the model dtype).
  DType GradAccumDType() const;
  // Dtype gradients are reduced in (communication_data_type, resolved).
  DType CommDType() const { return communication_data_type.value_or(ModelDType()); }
  // zerorun overlaps gradient reduction with backward at every stage unless the user wrote
  // "overlap_comm": false (DeepSpeed's resolved default false for stages 0-2 does not turn it off).
  bool OverlapCommDisabled() const;

  const std::vector<ConfigIssue>& warnings() const { return warnings_; }
  // Provenance by dotted path (every leaf the schema knows, after resolution).
  const std::map<std::string, Provenance>& provenance() const { return provenance_; }
  const Provenance* ProvenanceOf(const std::string& path) const;
  const std::string& source() const { return source_; }

 private:
  friend class ConfigLoader;
  std::vector<ConfigIssue> warnings_;
  std::map<std::string, Provenance> provenance_;
  std::string source_;
};

// Throws ConfigLoadError (a ConfigError) listing every problem; IoError when the file cannot be read.
Config LoadConfigFile(const std::string& path, const LoadOptions& options = {});
Config LoadConfigString(const std::string& json, const LoadOptions& options = {});

// Human-readable: every effective value with its origin, the batch identity with numbers, bucket sizes
// in bytes for the chosen dtypes, and which features are on.
std::string ExplainConfig(const Config& config);
// The effective config as one JSON object with DeepSpeed's key names and structure: defaults filled,
// derived values (batch triple, overlap_comm, communication_data_type) included. Re-loading it with
// the same world size yields the same Config.
std::string EffectiveConfigJson(const Config& config, bool pretty = true);

// ---- what zerorun does with each key (config_dispositions.cc: one table) -------------------------------

enum class KeyUse : uint8_t {
  kActed,    // read, and doing what DeepSpeed does with it (`why`: where)
  kWarned,   // accepted; a value other than DeepSpeed's default (a section: written at all) has no effect in
             // zerorun: loading warns once, "accepted, has no effect in zerorun because <why>"
  kRefused,  // a value other than the default cannot be honoured (memory or numerics would differ):
             // ValidateForEngine fails naming the key and <why>
  kFollows,  // qualifies the key named by `why` and means what that key decides
};
struct KeyDisposition {
  const char* path;  // dotted, canonical (aliases and deprecated names map to their target)
  KeyUse use;
  const char* why;
  int issue = 0;     // > 0: the open issue that will implement the key (its row then becomes kActed)
};
// Every row, one per key the loader accepts except sections whose keys carry their own rows.
const std::vector<KeyDisposition>& KeyDispositions();
const KeyDisposition* FindKeyDisposition(std::string_view path);
const char* KeyUseName(KeyUse use);  // "acted", "warned", "refused", "follows"
// The kRefused keys `config` sets to a value other than DeepSpeed's default (and refused sections it
// contains), each naming the key, the value, why and what to write instead. Empty: nothing refused.
std::vector<ConfigIssue> UnsupportedKeys(const Config& config);

// ---- the schema (what docs/config.md documents) --------------------------------------------------------

struct SchemaEntry {
  std::string path;      // dotted JSON path ("zero_optimization.offload_param.device")
  std::string variant;   // for optimizer/scheduler params: the type they belong to ("Adam", ...), else ""
  std::string type;      // "bool", "int", "float", "string", "enum(none|cpu|nvme)", "int|null", "object", ...
  std::string default_text;  // DeepSpeed's code default as JSON text ("null", "500000000", "\"none\"")
  std::string doc;       // one-line meaning
  std::string status;    // what zerorun does: "acted", "warned: why", "refused: why", "follows X", "alias of X",
                         // "deprecated: X", "section" (its keys decide)
};
// Every key the loader accepts, in document order.
const std::vector<SchemaEntry>& ConfigSchema();
// The schema as the markdown table docs/config.md embeds.
std::string ConfigSchemaMarkdown();

}  // namespace zerorun::runtime

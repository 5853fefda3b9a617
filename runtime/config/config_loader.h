// Internal: the stages of loading a config — parse and read (config_reader.cc), resolve and validate
// (config_resolve.cc) — and what they collect along the way. Not part of the public API.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "zerorun/runtime/config/config.h"

namespace zerorun::runtime::config_detail {

struct Collected {
  std::vector<ConfigIssue> errors;
  std::vector<ConfigIssue> warnings;
  std::map<std::string, Provenance> provenance;  // by dotted path
  std::set<std::string> auto_paths;              // keys given as "auto" and accepted for resolution
  std::set<std::string> given;                   // paths present in the input (leaves and sections)
  size_t suppressed_errors = 0;    // beyond kMaxIssues
  size_t suppressed_warnings = 0;
  static constexpr size_t kMaxIssues = 200;  // bounds time and output on absurd inputs
  bool ErrorsFull() const { return errors.size() >= kMaxIssues; }
  void Error(std::string path, std::string message) {
    if (ErrorsFull()) ++suppressed_errors;
    else errors.push_back({std::move(path), std::move(message)});
  }
  void Warn(std::string path, std::string message) {
    if (warnings.size() >= kMaxIssues) ++suppressed_warnings;
    else warnings.push_back({std::move(path), std::move(message)});
  }
};

// Parses `text` (comments and trailing commas allowed, NaN/Infinity not) and reads it into `body`.
// Syntax errors, a non-object root, nesting deeper than kMaxDepth and duplicate keys are recorded in
// out.errors; returns false when the document could not be read at all.
constexpr int kMaxDepth = 64;
bool ParseAndRead(const std::string& text, const std::string& source, bool allow_unknown, ConfigBody& body,
                  Collected& out);

// Batch resolution (§1.1), "auto" resolution, derived values and cross-field rules.
void ResolveAndValidate(ConfigBody& body, int world_size, int64_t hidden_size, Collected& out);

}  // namespace zerorun::runtime::config_detail

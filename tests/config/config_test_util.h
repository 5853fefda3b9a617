// Helpers shared by the config tests: load a JSON string and collect the problems it reports.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "zerorun/runtime/config/config.h"

namespace zr_config_test {

namespace rt = zerorun::runtime;

inline rt::LoadOptions Opts(int world = 1) {
  rt::LoadOptions o;
  o.world_size = world;
  o.log_warnings = false;
  return o;
}

inline rt::Config Load(const std::string& json, int world = 1) { return rt::LoadConfigString(json, Opts(world)); }

// The issues a load reports (empty when it succeeds).
inline std::vector<rt::ConfigIssue> Errors(const std::string& json, rt::LoadOptions o) {
  try {
    rt::LoadConfigString(json, o);
  } catch (const rt::ConfigLoadError& e) {
    return e.issues();
  }
  return {};
}
inline std::vector<rt::ConfigIssue> Errors(const std::string& json, int world = 1) { return Errors(json, Opts(world)); }

// Whether some issue has exactly this path and a message containing `text`.
inline bool Has(const std::vector<rt::ConfigIssue>& issues, const std::string& path, const std::string& text = "") {
  for (const auto& i : issues) {
    if (i.path == path && i.message.find(text) != std::string::npos) return true;
  }
  return false;
}

inline std::string Dump(const std::vector<rt::ConfigIssue>& issues) {
  std::string s;
  for (const auto& i : issues) s += i.ToString() + "\n";
  return s;
}

}  // namespace zr_config_test

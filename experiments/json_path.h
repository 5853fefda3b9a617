// JSON paths into a DeepSpeed config: dot-separated keys with [i] array indices, e.g.
// "optimizer.params.betas[1]" or "zero_optimization.stage".
#pragma once

#include <rapidjson/document.h>

#include <optional>
#include <string>
#include <vector>

namespace zerorun::experiments {

struct PathStep {
  std::string key;    // an object member, or
  int64_t index = -1; // an array element (when >= 0)
};

// Throws InvalidArgument for an empty path, an empty key or a bad index.
std::vector<PathStep> ParseJsonPath(const std::string& path);

// Sets the value at `path` in `doc` (an object) to the JSON text `value_json`, creating missing
// objects on the way. Throws InvalidArgument when the path crosses a non-object, or an index is
// past the end of an existing array.
void SetJsonPath(rapidjson::Document& doc, const std::string& path, const std::string& value_json);

// The value at `path`, or null when absent.
const rapidjson::Value* GetJsonPath(const rapidjson::Value& root, const std::string& path);

}  // namespace zerorun::experiments

#include "zerorun/experiments/json_path.h"

#include <cctype>

#include "zerorun/core/error.h"

namespace zerorun::experiments {

std::vector<PathStep> ParseJsonPath(const std::string& path) {
  std::vector<PathStep> steps;
  size_t i = 0;
  auto fail = [&](const std::string& what) { ZR_THROW(InvalidArgument, "JSON path '{}': {}", path, what); };
  if (path.empty()) fail("empty");
  while (i < path.size()) {
    if (path[i] == '[') {
      size_t close = path.find(']', i);
      if (close == std::string::npos || close == i + 1) fail("an index needs digits in [ ]");
      std::string digits = path.substr(i + 1, close - i - 1);
      for (char c : digits) {
        if (!std::isdigit(static_cast<unsigned char>(c))) fail(Format("'{}' is not an array index", digits));
      }
      if (digits.size() > 9) fail("index too large");
      steps.push_back({"", std::stoll(digits)});
      i = close + 1;
      if (i < path.size() && path[i] == '.') {
        ++i;
        if (i == path.size()) fail("ends with '.'");
      }
      continue;
    }
    size_t end = path.find_first_of(".[", i);
    if (end == std::string::npos) end = path.size();
    if (end == i) fail(Format("empty key at character {}", i + 1));
    steps.push_back({path.substr(i, end - i), -1});
    i = end;
    if (i < path.size() && path[i] == '.') {
      ++i;
      if (i == path.size()) fail("ends with '.'");
    }
  }
  return steps;
}

void SetJsonPath(rapidjson::Document& doc, const std::string& path, const std::string& value_json) {
  std::vector<PathStep> steps = ParseJsonPath(path);
  auto& alloc = doc.GetAllocator();
  rapidjson::Document value(&alloc);
  value.Parse(value_json.c_str());
  ZR_CHECK(!value.HasParseError(), "value '{}' for {} is not JSON", value_json, path);
  rapidjson::Value* cur = &doc;
  std::string walked;
  for (size_t s = 0; s < steps.size(); ++s) {
    const PathStep& st = steps[s];
    const bool last = s + 1 == steps.size();
    if (st.index >= 0) {
      if (!cur->IsArray()) {
        ZR_THROW(InvalidArgument, "JSON path '{}': '{}' is not an array in the config", path, walked);
      }
      if (static_cast<uint64_t>(st.index) >= cur->Size()) {
        ZR_THROW(InvalidArgument, "JSON path '{}': index {} is past the end of '{}' ({} element(s))", path, st.index,
                 walked, cur->Size());
      }
      cur = &(*cur)[static_cast<rapidjson::SizeType>(st.index)];
      walked += Format("[{}]", st.index);
    } else {
      if (!cur->IsObject()) {
        ZR_THROW(InvalidArgument, "JSON path '{}': '{}' is not an object in the config", path,
                 walked.empty() ? "(top level)" : walked);
      }
      auto it = cur->FindMember(st.key.c_str());
      if (it == cur->MemberEnd()) {
        rapidjson::Value key(st.key.c_str(), alloc);
        rapidjson::Value child;
        if (!last) {
          if (steps[s + 1].index >= 0) {
            ZR_THROW(InvalidArgument, "JSON path '{}': '{}' does not exist, so it has no element {}", path,
                     walked.empty() ? st.key : walked + "." + st.key, steps[s + 1].index);
          }
          child.SetObject();
        }
        cur->AddMember(key, child, alloc);
        it = cur->FindMember(st.key.c_str());
      }
      cur = &it->value;
      walked += (walked.empty() ? "" : ".") + st.key;
    }
  }
  cur->CopyFrom(value, alloc);
}

const rapidjson::Value* GetJsonPath(const rapidjson::Value& root, const std::string& path) {
  const rapidjson::Value* cur = &root;
  for (const PathStep& st : ParseJsonPath(path)) {
    if (st.index >= 0) {
      if (!cur->IsArray() || static_cast<uint64_t>(st.index) >= cur->Size()) return nullptr;
      cur = &(*cur)[static_cast<rapidjson::SizeType>(st.index)];
    } else {
      if (!cur->IsObject()) return nullptr;
      auto it = cur->FindMember(st.key.c_str());
      if (it == cur->MemberEnd()) return nullptr;
      cur = &it->value;
    }
  }
  return cur;
}

}  // namespace zerorun::experiments

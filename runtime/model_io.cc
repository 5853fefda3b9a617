// LoadSafetensorsIntoModel: match the file's tensors to the model's parameters by name, check all of
// them first, then read each into its parameter (converting the dtype when it differs).
#include "zerorun/runtime/model_io.h"

#include <algorithm>
#include <set>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/runtime/safetensors.h"

namespace zerorun::runtime {

namespace {

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  const size_t shown = std::min<size_t>(names.size(), 10);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += Format(" and {} more", names.size() - shown);
  return out;
}

}  // namespace

void LoadSafetensorsIntoModel(nn::Module& model, const std::string& path, bool strict) {
  SafetensorsReader file(path);
  std::vector<nn::Parameter*> params = model.Parameters();
  std::vector<std::pair<nn::Parameter*, const SafetensorsTensorInfo*>> plan;
  std::vector<std::string> missing, unexpected;
  std::set<std::string> used;
  for (nn::Parameter* p : params) {
    const SafetensorsTensorInfo* t = file.Find(p->name());
    if (!t) {
      missing.push_back(p->name());
      continue;
    }
    used.insert(p->name());
    if (t->shape != p->shape()) {
      ZR_THROW(CheckpointError, "{}: tensor '{}' has shape {} but the model's parameter is {}", path, p->name(),
               ShapeToString(t->shape), ShapeToString(p->shape()));
    }
    if (!p->available()) {
      ZR_THROW(InvalidArgument, "{}: parameter '{}' is released (ZeRO-3 engine): load the file into the model before "
               "creating the engine", path, p->name());
    }
    if (t->dtype != p->dtype() && (!IsFloating(t->dtype) || !IsFloating(p->dtype()))) {
      ZR_THROW(CheckpointError, "{}: tensor '{}' is {} and cannot be converted to the parameter's {}", path,
               p->name(), SafetensorsDTypeName(t->dtype), DTypeName(p->dtype()));
    }
    plan.emplace_back(p, t);
  }
  for (const SafetensorsTensorInfo& t : file.tensors()) {
    if (!used.count(t.name)) unexpected.push_back(t.name);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string msg = Format("{}: the file does not match the model ({})", path, model.Describe());
    if (!missing.empty()) msg += Format("; missing: {}", JoinNames(missing));
    if (!unexpected.empty()) msg += Format("; unexpected: {}", JoinNames(unexpected));
    throw CheckpointError(msg);
  }
  for (auto [p, t] : plan) {
    if (!p->engine_data().defined()) p->AllocateData();
    file.ReadInto(*t, p->engine_data());
  }
}

}  // namespace zerorun::runtime

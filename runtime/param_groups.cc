// Parameter grouping by (name, decay, lr multiplier).
#include "zerorun/runtime/param_groups.h"

#include "zerorun/core/error.h"
#include "zerorun/core/format.h"

namespace zerorun::runtime {

std::string ParamGroup::Describe() const {
  return Format("{} ({}, lr x{}, {} tensors)", name.empty() ? "default" : name,
                weight_decay ? "weight decay" : "no weight decay", lr_scale, params.size());
}

std::vector<ParamGroup> BuildParamGroups(const std::vector<nn::Parameter*>& params, const ParamGroupOptions& options) {
  std::vector<ParamGroup> groups;
  for (nn::Parameter* p : params) {
    if (!p->requires_grad()) continue;
    const nn::ParamOptions& po = p->options();
    bool decay = po.weight_decay && !(options.no_weight_decay_for_1d && p->shape().size() < 2);
    ParamGroup* g = nullptr;
    for (ParamGroup& cand : groups) {
      if (cand.name == po.group && cand.weight_decay == decay && cand.lr_scale == po.lr_scale) {
        g = &cand;
        break;
      }
    }
    if (g == nullptr) {
      groups.push_back(ParamGroup{});
      g = &groups.back();
      g->name = po.group;
      g->weight_decay = decay;
      g->lr_scale = po.lr_scale;
    }
    g->params.push_back(p);
  }
  for (const auto& o : options.overrides) {
    bool found = false;
    for (ParamGroup& g : groups) {
      if (g.name != o.group) continue;
      found = true;
      if (o.lr) g.lr = o.lr;
      if (o.weight_decay) g.weight_decay_value = o.weight_decay;
    }
    if (!found) {
      ZR_THROW(InvalidArgument, "parameter group override names group '{}', but no trainable parameter is in it",
               o.group);
    }
  }
  return groups;
}

}  // namespace zerorun::runtime

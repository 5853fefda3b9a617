// Optimizer parameter groups: which trainable parameters share hyper-parameters. A group is keyed by
// (name, weight decay on/off, LR multiplier); its members keep the model's parameter order, which is
// the order of the group's flat buffer. The usual user choice — no weight decay on biases and norm
// gains — is one flag (`no_weight_decay_for_1d`), or per parameter via nn::ParamOptions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "zerorun/runtime/nn/parameter.h"

namespace zerorun::runtime {

struct ParamGroupOptions {
  // Parameters with fewer than two dimensions (biases, LayerNorm/RMSNorm gains) get no weight decay.
  bool no_weight_decay_for_1d = false;
  // Per named group (nn::ParamOptions::group) overrides of the optimizer's lr / weight decay.
  struct Override {
    std::string group;
    std::optional<double> lr;
    std::optional<double> weight_decay;
  };
  std::vector<Override> overrides;
};

struct ParamGroup {
  std::string name;                   // "" for the default group
  bool weight_decay = true;           // false: weight decay forced to 0
  double lr_scale = 1.0;              // multiplies the optimizer's (and scheduler's) lr
  std::optional<double> lr;           // override of the base lr
  std::optional<double> weight_decay_value;  // override of the optimizer's weight decay
  std::vector<nn::Parameter*> params;  // trainable, in model order
  std::string Describe() const;        // "default (decay, lr x1)" ...
};

// Groups `params` (the model's Parameters(), frozen ones are skipped) in order of first appearance.
// Throws InvalidArgument for an override naming a group no parameter belongs to.
std::vector<ParamGroup> BuildParamGroups(const std::vector<nn::Parameter*>& params, const ParamGroupOptions& options);

}  // namespace zerorun::runtime

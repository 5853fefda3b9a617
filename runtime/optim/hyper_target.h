// What an LR scheduler may read and write on an optimizer: per-group learning rate and, for
// optimizers that have them, betas (OneCycle cycles beta1). runtime::Optimizer implements it; tests
// and other optimizers can too.
#pragma once

#include <utility>

namespace zerorun::runtime {

class HyperTarget {
 public:
  virtual ~HyperTarget() = default;
  virtual int NumGroups() const = 0;
  virtual double GetLr(int group) const = 0;
  virtual void SetLr(int group, double lr) = 0;
  // True for optimizers with (beta1, beta2): Adam/AdamW, Lion, Lamb.
  virtual bool HasBetas() const = 0;
  // REQUIRES: HasBetas().
  virtual std::pair<double, double> GetBetas(int group) const = 0;
  virtual void SetBetas(int group, double beta1, double beta2) = 0;
};

}  // namespace zerorun::runtime

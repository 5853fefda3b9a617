// Sequential: unary modules applied in order; backward runs them in reverse. Children are named
// "0", "1", ... (or as given), like PyTorch's nn.Sequential, so parameter names read "h.3.attn.qkv.weight"
// when a GPT's blocks live in a Sequential named "h".
#pragma once

#include <memory>
#include <string>

#include "zerorun/runtime/nn/module.h"

namespace zerorun::nn {

class Sequential final : public Module {
 public:
  Sequential() : Module("Sequential") {}
  // Appends `m` named by its index; returns it.
  template <typename T>
  T* Append(std::unique_ptr<T> m) {
    std::string name = std::to_string(size_++);
    return AddModule(std::move(name), std::move(m));
  }
  int64_t size() const { return size_; }
  Module* at(int64_t i) const;

 protected:
  Tensor OnForward(const Tensor& x) override;
  Tensor OnBackward(const Tensor& dy) override;

 private:
  int64_t size_ = 0;
};

}  // namespace zerorun::nn

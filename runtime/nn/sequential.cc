// Sequential: forward in order, backward in reverse.
#include "zerorun/runtime/nn/sequential.h"

namespace zerorun::nn {

Module* Sequential::at(int64_t i) const {
  if (i < 0 || i >= static_cast<int64_t>(children().size())) {
    ZR_THROW(InvalidArgument, "{}: index {} out of range [0, {})", Describe(), i, children().size());
  }
  return children()[static_cast<size_t>(i)].second;
}

Tensor Sequential::OnForward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [name, m] : children()) h = m->Forward(h);
  return h;
}

Tensor Sequential::OnBackward(const Tensor& dy) {
  Tensor d = dy;
  const auto& c = children();
  for (auto it = c.rbegin(); it != c.rend(); ++it) d = it->second->Backward(d);
  return d;
}

}  // namespace zerorun::nn

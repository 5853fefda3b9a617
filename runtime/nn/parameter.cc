// Parameter: checked access for layers, binding and allocation for the engine.
#include "zerorun/runtime/nn/parameter.h"

#include "zerorun/core/format.h"

namespace zerorun::nn {

Parameter::Parameter(std::string local_name, Shape shape, DType dtype, Init init, ParamOptions options)
    : local_name_(std::move(local_name)),
      name_(local_name_),
      shape_(std::move(shape)),
      numel_(NumElements(shape_)),
      dtype_(dtype),
      init_(init),
      options_(std::move(options)) {
  if (!IsFloating(dtype_)) {
    ZR_THROW(InvalidArgument, "parameter '{}': dtype {} is not floating point", local_name_, DTypeName(dtype_));
  }
}

const Tensor& Parameter::data() const {
  ZR_CHECK(window_depth_ > 0,
           "parameter '{}' accessed outside the forward/backward of a module that owns it (a module may "
           "only touch its own direct parameters, inside its ForwardScope/BackwardScope)", name_);
  ZR_CHECK(available_, "parameter '{}' accessed while released (not gathered by the engine)", name_);
  ZR_CHECK(data_.defined(), "parameter '{}' has no data: call Initialize() on the root module", name_);
  return data_;
}

const Tensor& Parameter::grad() const {
  ZR_CHECK(requires_grad_, "gradient of frozen parameter '{}' accessed", name_);
  ZR_CHECK(window_depth_ > 0,
           "gradient of parameter '{}' accessed outside the forward/backward of a module that owns it", name_);
  ZR_CHECK(available_, "gradient of parameter '{}' accessed while released", name_);
  ZR_CHECK(grad_.defined(), "parameter '{}' has no grad tensor: call Initialize() or BindGrad()", name_);
  return grad_;
}

void Parameter::BindData(const Tensor& view) {
  if (!view.defined() || view.shape() != shape_ || view.dtype() != dtype_) {
    ZR_THROW(InvalidArgument, "parameter '{}' {} {}: cannot bind data to {}", name_, DTypeName(dtype_),
             ShapeToString(shape_), view.defined() ? view.ToString() : std::string("an undefined tensor"));
  }
  data_ = view;
}

void Parameter::BindGrad(const Tensor& view) {
  if (!view.defined() || view.shape() != shape_ || !IsFloating(view.dtype())) {
    ZR_THROW(InvalidArgument, "parameter '{}' {}: cannot bind grad to {}", name_, ShapeToString(shape_),
             view.defined() ? view.ToString() : std::string("an undefined tensor"));
  }
  grad_ = view;
}

void Parameter::AllocateData(Device device) {
  if (!data_.defined()) data_ = Tensor::Empty(shape_, dtype_, device, MemCategory::kParams);
}

void Parameter::AllocateGrad(Device device) {
  if (!grad_.defined()) grad_ = Tensor::Zeros(shape_, dtype_, device, MemCategory::kGrads);
}

}  // namespace zerorun::nn

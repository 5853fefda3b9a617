// Storage lifetime and accounting; tensor views, copies and conversions.
#include "zerorun/core/tensor.h"

#include <cstring>

#include "zerorun/core/format.h"

namespace zerorun {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) ZR_THROW(InvalidArgument, "negative dimension in shape {}", ShapeToString(shape));
    n *= d;
  }
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::shared_ptr<Storage> Storage::Allocate(size_t bytes, Device device, MemCategory category,
                                           MemoryAccount* account) {
  return AllocateWith(zerorun::GetAllocator(device), bytes, device, category, account);
}

std::shared_ptr<Storage> Storage::AllocateWith(Allocator& allocator, size_t bytes, Device device,
                                               MemCategory category, MemoryAccount* account) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = allocator.Allocate(bytes);
  s->bytes_ = bytes;
  s->device_ = device;
  s->category_ = category;
  s->allocator_ = &allocator;
  s->account_ = account != nullptr ? account : &MemoryAccount::Current();
  s->account_owner_ = s->account_->weak_from_this().lock();
  s->account_->Charge(category, static_cast<int64_t>(bytes));
  return s;
}

std::shared_ptr<Storage> Storage::Wrap(void* data, size_t bytes, Device device) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->bytes_ = bytes;
  s->device_ = device;
  return s;
}

Storage::~Storage() {
  if (allocator_ != nullptr) {
    allocator_->Deallocate(data_, bytes_);
    account_->Release(category_, static_cast<int64_t>(bytes_));
  }
}

Tensor Tensor::Empty(const Shape& shape, DType dtype, Device device, MemCategory category) {
  size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  return FromStorage(Storage::Allocate(bytes, device, category), 0, shape, dtype);
}

Tensor Tensor::Zeros(const Shape& shape, DType dtype, Device device, MemCategory category) {
  Tensor t = Empty(shape, dtype, device, category);
  t.Zero();
  return t;
}

Tensor Tensor::FromStorage(std::shared_ptr<Storage> storage, size_t offset_bytes, const Shape& shape,
                           DType dtype) {
  ZR_CHECK(storage != nullptr, "FromStorage: null storage");
  Tensor t;
  t.numel_ = NumElements(shape);
  size_t need = offset_bytes + static_cast<size_t>(t.numel_) * DTypeSize(dtype);
  if (need > storage->bytes()) {
    ZR_THROW(InvalidArgument, "tensor {} {} at byte offset {} does not fit in storage of {} bytes",
             DTypeName(dtype), ShapeToString(shape), offset_bytes, storage->bytes());
  }
  t.storage_ = std::move(storage);
  t.offset_bytes_ = offset_bytes;
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::FromVector(const std::vector<float>& values, const Shape& shape, DType dtype,
                          MemCategory category) {
  if (NumElements(shape) != static_cast<int64_t>(values.size())) {
    ZR_THROW(InvalidArgument, "FromVector: {} values for shape {}", values.size(), ShapeToString(shape));
  }
  Tensor t = Empty(shape, dtype, Device::CPU(), category);
  Convert(values.data(), DType::kF32, t.data(), dtype, values.size());
  return t;
}

int64_t Tensor::size(int i) const {
  int n = ndim();
  int j = i < 0 ? i + n : i;
  ZR_CHECK(j >= 0 && j < n, "dimension {} out of range for {}", i, ShapeToString(shape_));
  return shape_[static_cast<size_t>(j)];
}

Tensor Tensor::View(int64_t offset_elems, const Shape& shape) const {
  ZR_CHECK(defined(), "View of an undefined tensor");
  int64_t n = NumElements(shape);
  if (offset_elems < 0 || offset_elems + n > numel_) {
    ZR_THROW(InvalidArgument, "View {} at element {} exceeds tensor of {} elements", ShapeToString(shape),
             offset_elems, numel_);
  }
  return FromStorage(storage_, offset_bytes_ + static_cast<size_t>(offset_elems) * DTypeSize(dtype_), shape,
                     dtype_);
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  ZR_CHECK(ndim() >= 1, "Slice of a scalar tensor");
  int64_t rows = shape_[0];
  if (begin < 0 || end < begin || end > rows) {
    ZR_THROW(InvalidArgument, "Slice [{}, {}) out of range for {}", begin, end, ShapeToString(shape_));
  }
  int64_t row_elems = rows == 0 ? 0 : numel_ / rows;
  Shape s = shape_;
  s[0] = end - begin;
  return View(begin * row_elems, s);
}

Tensor Tensor::Reshape(const Shape& shape) const {
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      ZR_CHECK(infer < 0, "Reshape: more than one -1 in {}", ShapeToString(shape));
      infer = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) s[static_cast<size_t>(infer)] = known == 0 ? 0 : numel_ / known;
  if (NumElements(s) != numel_) {
    ZR_THROW(InvalidArgument, "cannot reshape {} ({} elements) to {}", ShapeToString(shape_), numel_,
             ShapeToString(shape));
  }
  return FromStorage(storage_, offset_bytes_, s, dtype_);
}

void Tensor::Zero() const {
  if (numel_ == 0) return;
  if (device().is_cpu()) {
    std::memset(data(), 0, nbytes());
    return;
  }
  // Device tensors: copy from a zeroed host buffer (rare; kernels have their own fill).
  std::vector<char> zeros(nbytes(), 0);
  CopyBytes(data(), device(), zeros.data(), Device::CPU(), nbytes());
}

void Tensor::CopyFrom(const Tensor& src) const {
  if (src.numel() != numel_) {
    ZR_THROW(InvalidArgument, "CopyFrom: {} into {}", src.ToString(), ToString());
  }
  if (numel_ == 0) return;
  if (device().is_cpu() && src.device().is_cpu()) {
    Convert(src.data(), src.dtype(), data(), dtype_, static_cast<size_t>(numel_));
    return;
  }
  if (src.dtype() != dtype_) {
    ZR_THROW(InvalidArgument, "CopyFrom across devices needs equal dtypes: {} into {}", src.ToString(), ToString());
  }
  CopyBytes(data(), device(), src.data(), src.device(), nbytes());
}

Tensor Tensor::Clone(MemCategory category) const {
  Tensor t = Empty(shape_, dtype_, device(), category);
  t.CopyFrom(*this);
  return t;
}

Tensor Tensor::To(DType dtype, MemCategory category) const {
  Tensor host = *this;
  if (!device().is_cpu()) {
    host = Empty(shape_, dtype_, Device::CPU(), category);
    host.CopyFrom(*this);
  }
  Tensor t = Empty(shape_, dtype, Device::CPU(), category);
  t.CopyFrom(host);
  return t;
}

std::vector<float> Tensor::ToVector() const {
  Tensor t = dtype_ == DType::kF32 && device().is_cpu() ? *this : To(DType::kF32);
  const float* p = static_cast<const float*>(t.data());
  return std::vector<float>(p, p + numel_);
}

std::string Tensor::ToString() const {
  if (!defined()) return "Tensor(undefined)";
  return Format("Tensor({}, {}, {})", DTypeName(dtype_), ShapeToString(shape_), device().ToString());
}

}  // namespace zerorun

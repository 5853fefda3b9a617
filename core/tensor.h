// Tensor: a contiguous, typed view into reference-counted Storage on some device.
//
// Every tensor is row-major contiguous; views (View, Slice, Reshape) share storage and never copy.
// This is what ZeRO needs: all parameters are laid into one flat buffer and each Parameter's data is
// a view at an offset. Storage charges its bytes to a MemoryAccount category for its whole lifetime.
// Thread safety: distinct tensors may be used from different threads; the data itself is unguarded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "zerorun/core/device.h"
#include "zerorun/core/dtype.h"
#include "zerorun/core/error.h"
#include "zerorun/core/memory.h"

namespace zerorun {

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);  // "[2, 3, 4]"

class Storage {
 public:
  // Allocates `bytes` on `device` from its allocator and charges `category` of `account`
  // (nullptr: MemoryAccount::Current()). Contents are uninitialised.
  static std::shared_ptr<Storage> Allocate(size_t bytes, Device device, MemCategory category,
                                           MemoryAccount* account = nullptr);
  // Same, from an explicit allocator (e.g. the pinned host allocator).
  static std::shared_ptr<Storage> AllocateWith(Allocator& allocator, size_t bytes, Device device,
                                               MemCategory category, MemoryAccount* account = nullptr);
  // Non-owning: `data` must outlive the storage. Not charged to any account.
  static std::shared_ptr<Storage> Wrap(void* data, size_t bytes, Device device);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemCategory category() const { return category_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  MemCategory category_ = MemCategory::kOther;
  Allocator* allocator_ = nullptr;  // nullptr: not owned
  MemoryAccount* account_ = nullptr;
  std::shared_ptr<MemoryAccount> account_owner_;  // keeps a shared account alive; empty for others
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  static Tensor Empty(const Shape& shape, DType dtype, Device device = Device::CPU(),
                      MemCategory category = MemCategory::kOther);
  static Tensor Zeros(const Shape& shape, DType dtype, Device device = Device::CPU(),
                      MemCategory category = MemCategory::kOther);
  // A tensor over `storage` starting at `offset_bytes`; throws InvalidArgument if it does not fit.
  static Tensor FromStorage(std::shared_ptr<Storage> storage, size_t offset_bytes, const Shape& shape,
                            DType dtype);
  // Copies host data into a new CPU tensor (tests and small constants).
  static Tensor FromVector(const std::vector<float>& values, const Shape& shape, DType dtype = DType::kF32,
                           MemCategory category = MemCategory::kOther);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Size of dimension `i`; negative i counts from the end.
  int64_t size(int i) const;
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * DTypeSize(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::CPU(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t offset_bytes() const { return offset_bytes_; }

  void* data() const { return storage_ ? static_cast<char*>(storage_->data()) + offset_bytes_ : nullptr; }
  // Typed pointer; ZR_CHECKs that T matches dtype().
  template <typename T>
  T* data_as() const {
    ZR_CHECK(DTypeOf<T>::value == dtype_, "tensor is {}, accessed as {}", DTypeName(dtype_),
             DTypeName(DTypeOf<T>::value));
    return static_cast<T*>(data());
  }

  // `shape` elements starting `offset_elems` into this tensor, sharing storage.
  Tensor View(int64_t offset_elems, const Shape& shape) const;
  // Rows [begin, end) along dimension 0.
  Tensor Slice(int64_t begin, int64_t end) const;
  // Same elements, new shape (one -1 allowed).
  Tensor Reshape(const Shape& shape) const;
  Tensor Flatten() const { return Reshape({numel_}); }

  // Fills with zero bytes (CPU, or on the device's default stream).
  void Zero() const;
  // Copies `src` (same numel) into this tensor, converting dtype if they differ. CPU<->device copies
  // need equal dtypes.
  void CopyFrom(const Tensor& src) const;
  Tensor Clone(MemCategory category = MemCategory::kOther) const;
  // A new CPU tensor of `dtype` holding this tensor's values.
  Tensor To(DType dtype, MemCategory category = MemCategory::kOther) const;
  // Values as fp32 on the host (tests, logging).
  std::vector<float> ToVector() const;

  std::string ToString() const;  // "Tensor(bf16, [2, 3], cpu)"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

}  // namespace zerorun

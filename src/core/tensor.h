// Tensor: a typed, shaped view of a Buffer.
//
// Shapes and strides count elements; strides let a tensor be a view (a slice of
// rows, a transpose) without copying. Most kernels want contiguous row-major
// tensors and say so; `contiguous()` tells them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"

namespace tessera {

using Shape = std::vector<int64_t>;

std::string shape_to_string(const Shape& shape);  // "[2, 3]"
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Buffer> buffer, size_t byte_offset, DType dtype, Shape shape);

  // A new zero-filled contiguous tensor from `allocator` (the CPU one by default).
  static Tensor empty(Shape shape, DType dtype, Allocator& allocator = cpu_allocator());
  static Tensor from_f32(const std::vector<float>& values, Shape shape);

  bool defined() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim(int axis) const;  // negative counts from the end
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return dtype_bytes(dtype_, static_cast<size_t>(numel())); }
  Device device() const { return buffer_ ? buffer_->device() : Device::cpu(); }
  bool contiguous() const;
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  void* raw_data() const;
  template <typename T>
  T* data() const { return static_cast<T*>(raw_data()); }

  // Same memory, new shape; needs a contiguous tensor and the same element count.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of dimension 0, sharing memory.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // A contiguous f32 copy on the host (converting f16/bf16/f64).
  Tensor to_f32() const;
  // A contiguous copy in `dtype` (float types only).
  Tensor to_dtype(DType dtype) const;

  std::string describe() const;  // "bf16[4096, 4096]"

 private:
  std::shared_ptr<Buffer> buffer_;
  size_t byte_offset_ = 0;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Shape strides_;
};

}  // namespace tessera

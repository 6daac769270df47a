#include "core/tensor.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"

namespace tessera {

std::string shape_to_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

static Shape row_major_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

Tensor::Tensor(std::shared_ptr<Buffer> buffer, size_t byte_offset, DType dtype, Shape shape)
    : buffer_(std::move(buffer)), byte_offset_(byte_offset), dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_) {
    if (d < 0) throw Error(ErrorKind::kInvalidArgument, "negative dimension in shape " + shape_to_string(shape_));
  }
  strides_ = row_major_strides(shape_);
  TESSERA_CHECK(buffer_ != nullptr);
  TESSERA_CHECK(byte_offset_ + nbytes() <= buffer_->size());
}

Tensor Tensor::empty(Shape shape, DType dtype, Allocator& allocator) {
  size_t bytes = dtype_bytes(dtype, static_cast<size_t>(shape_numel(shape)));
  return Tensor(allocator.allocate(bytes), 0, dtype, std::move(shape));
}

Tensor Tensor::from_f32(const std::vector<float>& values, Shape shape) {
  TESSERA_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()));
  Tensor t = empty(std::move(shape), DType::kF32);
  std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(float));
  return t;
}

int64_t Tensor::dim(int axis) const {
  int r = rank();
  int a = axis < 0 ? axis + r : axis;
  TESSERA_CHECK(a >= 0 && a < r);
  return shape_[a];
}

bool Tensor::contiguous() const { return strides_ == row_major_strides(shape_); }

void* Tensor::raw_data() const {
  TESSERA_CHECK(buffer_ != nullptr);
  return static_cast<char*>(buffer_->data()) + byte_offset_;
}

Tensor Tensor::reshape(Shape shape) const {
  TESSERA_CHECK(contiguous());
  if (shape_numel(shape) != numel()) {
    throw Error(ErrorKind::kInternal,
                fmt::format("cannot reshape {} to {}", shape_to_string(shape_), shape_to_string(shape)));
  }
  return Tensor(buffer_, byte_offset_, dtype_, std::move(shape));
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  TESSERA_CHECK(contiguous() && rank() >= 1);
  TESSERA_CHECK(0 <= begin && begin <= end && end <= shape_[0]);
  int64_t row_elements = shape_[0] == 0 ? 0 : numel() / shape_[0];
  TESSERA_CHECK(dtype_bits(dtype_) % 8 == 0 || (row_elements * begin) % 2 == 0);
  Shape shape = shape_;
  shape[0] = end - begin;
  return Tensor(buffer_, byte_offset_ + dtype_bytes(dtype_, static_cast<size_t>(row_elements * begin)), dtype_, shape);
}

Tensor Tensor::to_f32() const { return to_dtype(DType::kF32); }

Tensor Tensor::to_dtype(DType dtype) const {
  TESSERA_CHECK(contiguous() && device().is_cpu());
  Tensor out = empty(shape_, dtype);
  size_t n = static_cast<size_t>(numel());
  if (dtype == dtype_) {
    std::memcpy(out.raw_data(), raw_data(), nbytes());
  } else if (dtype == DType::kF32) {
    convert_to_f32(dtype_, raw_data(), out.data<float>(), n);
  } else {
    Tensor f32 = to_f32();
    convert_from_f32(f32.data<float>(), dtype, out.raw_data(), n);
  }
  return out;
}

std::string Tensor::describe() const { return fmt::format("{}{}", dtype_name(dtype_), shape_to_string(shape_)); }

}  // namespace tessera

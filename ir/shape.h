// A tensor's static type: dimensions and element type.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "absl/container/inlined_vector.h"
#include "ir/dtype.h"

namespace lazyrt::ir {

using Dims = absl::InlinedVector<int64_t, 4>;

class Shape {
 public:
  Shape() = default;
  Shape(DType dtype, std::span<const int64_t> dims) : dtype_(dtype), dims_(dims.begin(), dims.end()) {}
  Shape(DType dtype, std::initializer_list<int64_t> dims) : dtype_(dtype), dims_(dims) {}
  Shape(DType dtype, Dims dims) : dtype_(dtype), dims_(std::move(dims)) {}

  DType dtype() const { return dtype_; }
  const Dims& dims() const { return dims_; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t dim(int64_t i) const { return dims_[static_cast<size_t>(i)]; }
  // Number of elements (1 for a scalar, 0 if any dimension is 0).
  int64_t numel() const;
  int64_t byte_size() const { return numel() * DTypeSize(dtype_); }
  Shape WithDType(DType dtype) const { return Shape(dtype, dims_); }

  // "f32[128,784]"; a scalar is "f32[]".
  std::string ToString() const;

  friend bool operator==(const Shape& a, const Shape& b) { return a.dtype_ == b.dtype_ && a.dims_ == b.dims_; }

 private:
  DType dtype_ = DType::kF32;
  Dims dims_;
};

// "[2,3]" for a list of dimensions.
std::string DimsToString(std::span<const int64_t> dims);

}  // namespace lazyrt::ir

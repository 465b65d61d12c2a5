// The scatter-adds that the gradients of the indexing ops are made of, without the call-time range
// check of the public functions (their indices were checked by the forward op). Internal to lazy/.
#pragma once

#include <cstdint>

#include "lazy/tensor.h"

namespace lazyrt::detail {

// x with src added at index along dim (torch.scatter_add); index and src of one shape.
Tensor ScatterAddUnchecked(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                           const SourceLocation& loc);
// x with src's slices along dim added at the rows index names (torch.index_add); index 1-D.
Tensor IndexAddUnchecked(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                         const SourceLocation& loc);

// gather along a normalized dim, without the call-time check, its index errors at run time named as
// `api_name` (nullptr: gather), for ops built on it (cross_entropy's labels).
Tensor GatherAs(const Tensor& x, int64_t d, const Tensor& index, const char* api_name, const SourceLocation& loc);

// one_hot with its range check, its index errors named as `api_name` (cross_entropy's gradient).
Tensor OneHotAs(const Tensor& index, int64_t num_classes, DType dtype, const char* api_name, const SourceLocation& loc);

}  // namespace lazyrt::detail

// The shapes of a NORMALIZE instruction (layer and RMS norm and their gradients), shared by the module
// verifier, the kernel that runs it and the SPMD partitioner.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lazyrt::pjrt {

// From x's dims and the first normalized dim `axis`: x and dy are of x's dims; weight and bias of the normalized
// dims x[axis:]; the result of x's dims, or, for layer norm's gradient with its affine (x, dy, weight), packed:
// x's dims with dim axis - 1 (T rows a group) grown by 2, each group's T rows of dx followed by the group's
// sums of dy x_hat and of dy (summed over the groups outside, into the weight's and the bias's gradients).
struct NormalizeShapes {
  std::vector<int64_t> x, weight, result;

  static NormalizeShapes Of(std::span<const int64_t> x_dims, int64_t axis, bool packed) {
    NormalizeShapes s;
    s.x.assign(x_dims.begin(), x_dims.end());
    if (axis >= 0 && axis <= static_cast<int64_t>(x_dims.size())) s.weight.assign(x_dims.begin() + axis, x_dims.end());
    s.result = s.x;
    if (packed && axis >= 1 && axis <= static_cast<int64_t>(x_dims.size()))
      s.result[static_cast<size_t>(axis - 1)] += 2;
    return s;
  }
};

}  // namespace lazyrt::pjrt

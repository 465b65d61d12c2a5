// Reverse-mode autograd on lazy tensors: a tape of GradFns, independent of the IR (so it survives a
// sync between forward and backward). Internal to lazy/; the public face is in tensor.h.
#pragma once

#include <functional>
#include <vector>

#include "lazy/runtime.h"
#include "lazy/tensor.h"

namespace lazyrt::detail {

// d(loss)/d(inputs[i]) given d(loss)/d(output); an undefined Tensor where an input gets no gradient.
using BackwardFn =
    std::function<std::vector<Tensor>(const Tensor& grad, const Tensor& output, const std::vector<Tensor>& inputs)>;

struct GradFn {
  const char* name;
  std::vector<Tensor> inputs;
  BackwardFn backward;
  SourceLocation created_at;
};

bool GradModeEnabled();

// If grad mode is on and any input requires grad, makes `output` require grad with `backward` as the
// function that produced it. Returns `output`.
Tensor Record(Tensor output, const char* name, std::vector<Tensor> inputs, BackwardFn backward,
              const SourceLocation& loc);

// Sums `grad` down to `shape`, undoing NumPy broadcasting (leading dims and size-1 dims).
Tensor SumToShape(const Tensor& grad, const Shape& shape, const SourceLocation& loc);

}  // namespace lazyrt::detail

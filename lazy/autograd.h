// Reverse-mode autograd on lazy tensors: a tape of GradFns, independent of the IR (so it survives a
// sync between forward and backward). Internal to lazy/; the public face is in tensor.h.
#pragma once

#include <functional>
#include <initializer_list>
#include <span>
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

// Whether grad mode is on and any of `inputs` requires grad: an op on them records its backward.
bool NeedsGrad(std::span<const Tensor> inputs);

// If NeedsGrad(inputs), makes `output` require grad with `backward` as the function that produced it.
// Returns `output`.
Tensor Record(Tensor output, const char* name, std::vector<Tensor> inputs, BackwardFn backward,
              const SourceLocation& loc);

// Whether grad mode is on and any of `inputs` requires grad.
bool NeedsGrad(std::initializer_list<std::reference_wrapper<const Tensor>> inputs);

// The same for a fixed list of inputs, building the list and the backward function only when they
// are needed: tracing without autograd (an optimizer update, an evaluation) allocates neither, and
// the inputs are referred to, not copied (a copy is an atomic increment and decrement per input,
// a tenth of tracing an elementwise op).
template <typename Backward>
Tensor Record(Tensor output, const char* name, std::initializer_list<std::reference_wrapper<const Tensor>> inputs,
              Backward&& backward, const SourceLocation& loc) {
  if (!NeedsGrad(inputs)) return output;
  return Record(std::move(output), name, std::vector<Tensor>(inputs.begin(), inputs.end()),
                BackwardFn(std::forward<Backward>(backward)), loc);
}

// Sums `grad` down to `shape`, undoing NumPy broadcasting (leading dims and size-1 dims).
Tensor SumToShape(const Tensor& grad, const Shape& shape, const SourceLocation& loc);

}  // namespace lazyrt::detail

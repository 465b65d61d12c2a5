#include "lazy/autograd.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lazy/tracing.h"

namespace lazyrt {
namespace detail {
namespace {
thread_local bool g_grad_mode = true;
}  // namespace

bool GradModeEnabled() { return g_grad_mode; }

namespace {
// Whether grad mode is on and any of `inputs` (Tensors, or references to them) requires grad.
template <typename Inputs>
bool AnyNeedsGrad(const Inputs& inputs) {
  if (!g_grad_mode) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.impl()->requires_grad) return true;
  }
  return false;
}
}  // namespace

bool NeedsGrad(std::span<const Tensor> inputs) { return AnyNeedsGrad(inputs); }
bool NeedsGrad(std::initializer_list<std::reference_wrapper<const Tensor>> inputs) { return AnyNeedsGrad(inputs); }

Tensor Record(Tensor output, const char* name, std::vector<Tensor> inputs, BackwardFn backward,
              const SourceLocation& loc) {
  if (!NeedsGrad(inputs)) return output;
  TensorImpl& impl = *output.impl();
  impl.requires_grad = true;
  impl.is_leaf = false;
  impl.grad_fn = std::make_shared<GradFn>(GradFn{name, std::move(inputs), std::move(backward), loc});
  return output;
}

Tensor SumToShape(const Tensor& grad, const Shape& shape, const SourceLocation& loc) {
  if (grad.shape().dims() == shape.dims()) return grad;
  const int64_t lead = grad.rank() - shape.rank();
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < grad.rank(); ++d) {
    if (d < lead || (shape.dim(d - lead) == 1 && grad.dim(d) != 1)) dims.push_back(d);
  }
  Tensor s = dims.empty() ? grad : sum(grad, dims, true, loc);
  return reshape(s, std::vector<int64_t>(shape.dims().begin(), shape.dims().end()), loc);
}

}  // namespace detail

NoGradGuard::NoGradGuard() : previous_(detail::g_grad_mode) { detail::g_grad_mode = false; }
NoGradGuard::~NoGradGuard() { detail::g_grad_mode = previous_; }

Tensor& Tensor::requires_grad_(bool on) {
  detail::TensorImpl& impl = detail::ImplOf(*this, "requires_grad_", SourceLocation::current());
  if (impl.grad_fn != nullptr && !on) {
    throw Error("requires_grad_(false) on a tensor computed from others: use detach()");
  }
  impl.requires_grad = on;
  return *this;
}

bool Tensor::requires_grad() const { return defined() && impl_->requires_grad; }

Tensor Tensor::grad() const { return detail::ImplOf(*this, "grad", SourceLocation::current()).grad; }

void Tensor::set_grad(const Tensor& grad) { detail::ImplOf(*this, "set_grad", SourceLocation::current()).grad = grad; }

Tensor Tensor::detach() const {
  const detail::TensorImpl& src = detail::ImplOf(*this, "detach", SourceLocation::current());
  Tensor out = detail::NewTensor(src.shape, src.device, src.created_at);
  detail::TensorImpl& impl = *out.impl();
  impl.ir = src.ir;
  impl.buffer = src.buffer;
  impl.sharding = src.sharding;
  impl.sharded = src.sharded;
  if (is_pending()) detail::Runtime::Get().device_state({src.device}, SourceLocation::current()).Register(&impl);
  return out;
}

void Tensor::backward(SourceLocation loc) const {
  detail::TensorImpl& root = detail::ImplOf(*this, "backward", loc);
  if (root.shape.numel() != 1) {
    throw Error(absl::StrCat("backward: needs a one-element tensor (a loss), got ", root.shape.ToString()), loc);
  }
  if (!root.requires_grad) throw Error("backward: the tensor does not require grad (no parameter feeds it)", loc);
  NoGradGuard no_grad;

  // Topological order of the tape (iterative: a deep network must not overflow the stack).
  std::vector<Tensor> order;
  absl::flat_hash_map<detail::TensorImpl*, bool> seen;
  struct Frame {
    Tensor tensor;
    size_t next;
  };
  std::vector<Frame> stack = {{*this, 0}};
  seen[impl_] = true;
  while (!stack.empty()) {
    Frame& top = stack.back();
    const detail::GradFn* fn = top.tensor.impl()->grad_fn.get();
    if (fn != nullptr && top.next < fn->inputs.size()) {
      const Tensor& in = fn->inputs[top.next++];
      if (in.defined() && in.impl()->requires_grad && seen.emplace(in.impl(), true).second) {
        stack.push_back({in, 0});
      }
      continue;
    }
    order.push_back(std::move(top.tensor));
    stack.pop_back();
  }

  absl::flat_hash_map<detail::TensorImpl*, Tensor> grads;
  grads[impl_] = ones(std::vector<int64_t>(root.shape.dims().begin(), root.shape.dims().end()), root.shape.dtype(),
                      Device{root.device}, loc);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    detail::TensorImpl* impl = it->impl();
    auto g = grads.find(impl);
    if (g == grads.end()) continue;
    Tensor grad = g->second;
    grads.erase(g);
    if (impl->is_leaf) {  // a parameter: accumulate
      impl->grad = impl->grad.defined() ? impl->grad + grad : grad;
      continue;
    }
    if (impl->grad_fn == nullptr) {
      throw Error("backward: part of this graph was already used by an earlier backward() and freed", loc);
    }
    std::shared_ptr<detail::GradFn> fn = std::move(impl->grad_fn);  // the tape is freed as it is used
    std::vector<Tensor> input_grads = fn->backward(grad, Tensor(*it), fn->inputs);
    for (size_t i = 0; i < fn->inputs.size() && i < input_grads.size(); ++i) {
      const Tensor& in = fn->inputs[i];
      if (!in.defined() || !in.impl()->requires_grad || !input_grads[i].defined()) continue;
      Tensor gi = input_grads[i];
      if (!(gi.shape() == in.shape())) {
        throw Error(absl::StrCat("backward: the gradient rule of ", fn->name, " produced ", gi.shape().ToString(),
                                 " for an input of ", in.shape().ToString()),
                    fn->created_at);
      }
      auto [slot, inserted] = grads.try_emplace(in.impl(), gi);
      if (!inserted) slot->second = slot->second + gi;
    }
  }
}

}  // namespace lazyrt

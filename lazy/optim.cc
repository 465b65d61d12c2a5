#include "lazy/optim.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "lazy/runtime.h"
#include "lazy/tracing.h"

namespace lazyrt {
namespace {

// Optimizer state starts as device data uploaded from the host, not as a traced zeros(): the first
// step then traces the very graph every later step does.
Tensor ZerosLike(const Tensor& p, const SourceLocation& loc) {
  const std::vector<int64_t> dims = p.sizes();
  if (p.dtype() == DType::kF64)
    return Tensor::FromData(std::vector<double>(static_cast<size_t>(p.numel())), dims, p.device(), loc);
  if (p.dtype() == DType::kF32)
    return Tensor::FromData(std::vector<float>(static_cast<size_t>(p.numel())), dims, p.device(), loc);
  return zeros(dims, p.dtype(), p.device(), loc);
}

// ... laid out over a mesh as its parameter is (mark_sharding's layout): a moment of a weight split over
// "model" is split the same way on every step, never gathered and replicated.
Tensor StateLike(const Tensor& p, const SourceLocation& loc) {
  Tensor state = ZerosLike(p, loc);
  state.impl()->sharding = p.impl()->sharding;
  return state;
}

// Parameter i's gradient as an operand of its update, refused unless it has the parameter's dtype, dims
// and device (the update is elementwise over the parameter: no broadcasting, no promotion), and unless
// the parameter is on `device`, the optimizer's (its step count and bias corrections live there).
ir::Value Gradient(const Tensor& p, size_t i, int device, const SourceLocation& loc) {
  const detail::TensorImpl& param = detail::ImplOf(p, "AdamW.step", loc);
  const detail::TensorImpl& grad = detail::ImplOf(p.grad(), "AdamW.step", loc);
  if (param.device != device) {
    throw Error(absl::StrCat("AdamW.step: parameter ", i, " is on lazy:", param.device, " and parameter 0 on lazy:",
                             device, "; one optimizer's parameters share a device (its step count lives there)"),
                loc);
  }
  if (grad.shape != param.shape || grad.device != param.device) {
    throw Error(absl::StrCat("AdamW.step: parameter ", i, " is ", param.shape.ToString(), " on lazy:", param.device,
                             " but its gradient is ", grad.shape.ToString(), " on lazy:", grad.device),
                loc);
  }
  return detail::ValueOf(p.grad());
}

// beta m + (1 - beta) g (g g with `square`): a moment's update.
Tensor Moment(const Tensor& m, ir::Value g, double beta, bool square, int device, const SourceLocation& loc) {
  return detail::MakeTensor(ir::OpKind::kAdamWMoment, {detail::ValueOf(m), std::move(g)},
                            detail::ImplOf(m, "AdamW.step", loc).shape, device, loc,
                            ir::Attributes{{ir::AttrKey::kBeta, beta}, {ir::AttrKey::kSquare, square}});
}

}  // namespace

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double weight_decay)
    : Optimizer(std::move(params)), momentum_(momentum), weight_decay_(weight_decay) {
  lr_ = lr;
}

void SGD::step(SourceLocation loc) {
  NoGradGuard no_grad;
  if (momentum_ != 0 && velocity_.empty()) {
    for (const Tensor& p : params_) velocity_.push_back(StateLike(p, loc));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = p.grad();
    if (weight_decay_ != 0) g = g + TensorArg(p * ScalarArg(Scalar::Static(weight_decay_), loc), loc);
    if (momentum_ != 0) {
      velocity_[i].assign(velocity_[i] * ScalarArg(Scalar::Static(momentum_), loc) + TensorArg(g, loc), loc);
      g = velocity_[i];
    }
    p.assign(p - TensorArg(g * ScalarArg(Scalar(lr_), loc), loc), loc);
  }
}

AdamW::AdamW(std::vector<Tensor> params, double lr, double beta1, double beta2, double eps, double weight_decay)
    : Optimizer(std::move(params)), beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay) {
  lr_ = lr;
}

void AdamW::step(SourceLocation loc) {
  NoGradGuard no_grad;
  auto c = [&](double v) { return ScalarArg(Scalar::Static(v), loc); };
  auto t = [&](const Tensor& v) { return TensorArg(v, loc); };
  if (!step_.defined()) {
    const Device device = params_.empty() ? Device{} : params_[0].device();
    step_ = Tensor::FromData(std::vector<int64_t>{0}, {}, device, loc);
    beta1_power_ = Tensor::FromData(std::vector<double>{1.0}, {}, device, loc);
    beta2_power_ = Tensor::FromData(std::vector<double>{1.0}, {}, device, loc);
    for (const Tensor& p : params_) {
      exp_avg_.push_back(StateLike(p, loc));
      exp_avg_sq_.push_back(StateLike(p, loc));
    }
  }
  // The step count and the bias corrections stay on the device: reading the step on the host would
  // bake a new constant into every step's graph (the field report's capturable=False trap). The count
  // is an i64 (exact for any run; f32 stops counting at 2^24) and b^t a running product in f64, so
  // 1 - b^t has no cancellation error at small t: torch.optim computes both in double on the host,
  // and rounds the step size and sqrt(1 - b2^t) to f32 once, as here.
  step_.assign(step_ + t(ones({}, DType::kI64, step_.device(), loc)), loc);  // a baked i64 constant 1
  beta1_power_.assign(beta1_power_ * c(beta1_), loc);
  beta2_power_.assign(beta2_power_ * c(beta2_), loc);
  // The learning rate is a device parameter (not static): a schedule changes its value, not the graph.
  // Here in f64, so lr / (1 - b1^t) is rounded once.
  Tensor step_size_f64 = ScalarArg(Scalar(lr_), loc) / (c(1) - beta1_power_);
  Tensor sqrt_correction2_f64 = sqrt(c(1) - beta2_power_, loc);
  // Each update one node (AdamWMoment, AdamWParam) that lowers to the ~8 elementwise ops torch.optim's
  // AdamW is made of, in its order: the same module and bits as tracing those ops, but a parameter costs
  // the host 3 nodes to trace, hash and free instead of ~25 (with their scalars and tensors).
  ir::Value decay;  // decoupled weight decay: p <- p (1 - lr wd), rounded once from double as torch.optim's
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    const detail::TensorImpl& impl = detail::ImplOf(p, "AdamW.step", loc);
    const ir::Value g = Gradient(p, i, step_.device().index, loc);
    exp_avg_[i].assign(Moment(exp_avg_[i], g, beta1_, /*square=*/false, impl.device, loc), loc);
    exp_avg_sq_[i].assign(Moment(exp_avg_sq_[i], g, beta2_, /*square=*/true, impl.device, loc), loc);
    ir::OperandList operands{detail::ValueOf(p), detail::ValueOf(exp_avg_[i]), detail::ValueOf(exp_avg_sq_[i]),
                             detail::ValueOf(step_size_f64), detail::ValueOf(sqrt_correction2_f64)};
    if (weight_decay_ != 0) {
      if (!decay || decay.shape().dtype() != impl.shape.dtype()) {
        decay = detail::ScalarValue(Scalar(1 - lr_ * weight_decay_), impl.shape.dtype(), loc);
      }
      operands.push_back(decay);
    }
    p.assign(detail::MakeTensor(ir::OpKind::kAdamWParam, std::move(operands), impl.shape, impl.device, loc,
                                ir::Attributes{{ir::AttrKey::kEpsilon, eps_}}),
             loc);
  }
}

}  // namespace lazyrt

#include "lazy/optim.h"

#include <cmath>

#include "lazy/runtime.h"

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
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    const Tensor& g = p.grad();
    const Tensor step_size = cast(step_size_f64, p.dtype(), loc);
    const Tensor sqrt_correction2 = cast(sqrt_correction2_f64, p.dtype(), loc);
    // Decoupled weight decay: p <- p (1 - lr wd), the factor computed in double on the host and
    // rounded once, as torch.optim's Python float.
    if (weight_decay_ != 0) p.assign(p * ScalarArg(Scalar(1 - lr_ * weight_decay_), loc), loc);
    exp_avg_[i].assign(exp_avg_[i] * c(beta1_) + t(g * c(1 - beta1_)), loc);
    exp_avg_sq_[i].assign(exp_avg_sq_[i] * c(beta2_) + t(g * t(g) * c(1 - beta2_)), loc);
    Tensor denom = sqrt(exp_avg_sq_[i], loc) / t(sqrt_correction2) + c(eps_);
    // addcdiv's order: (step_size m) / denom.
    p.assign(p - t(exp_avg_[i] * t(step_size) / t(denom)), loc);
  }
}

}  // namespace lazyrt

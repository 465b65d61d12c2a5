// Optimizers. Every hyperparameter that may change during training (the learning rate) and every
// piece of state (momentum, moments, the AdamW step count and its bias corrections) lives on the
// device, so each step traces the same graph and compiles once.
#pragma once

#include <vector>

#include "lazy/tensor.h"

namespace lazyrt {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {}
  virtual ~Optimizer() = default;

  // Records the update of every parameter from its gradient (no autograd). Nothing runs until sync.
  virtual void step(LAZYRT_HERE) = 0;
  // Resets every parameter's gradient.
  void zero_grad();
  // The learning rate for the next steps: a device parameter, so changing it never recompiles.
  void set_lr(double lr) { lr_ = lr; }
  double lr() const { return lr_; }
  const std::vector<Tensor>& params() const { return params_; }

 protected:
  std::vector<Tensor> params_;
  double lr_ = 1e-3;
};

// SGD with optional momentum and (coupled, L2) weight decay, as torch.optim.SGD.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0, double weight_decay = 0);
  void step(LAZYRT_HERE) override;

 private:
  double momentum_, weight_decay_;
  std::vector<Tensor> velocity_;
};

// AdamW, as torch.optim.AdamW (its f32 results to the f32 noise floor): the step count (an i64) and the
// powers b1^t, b2^t of the bias corrections (f64 running products) are tensors on the device, as with
// capturable=True, so the step never recompiles.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weight_decay = 1e-2);
  void step(LAZYRT_HERE) override;
  // The device step counter, i64 (for tests and checkpoints).
  const Tensor& step_count() const { return step_; }

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  Tensor step_, beta1_power_, beta2_power_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
};

}  // namespace lazyrt

#include "pjrt_sim/kernels/normalize.h"

#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pjrt_sim/element_ops.h"
#include "pjrt_sim/opcode.h"
#include "pjrt_sim/thread_pool.h"

namespace lazyrt::pjrt {
namespace {

// Rows are independent: each is computed by one task in a fixed order, so the bits do not depend on
// the thread count. A task takes at least this many elements.
constexpr int64_t kGrainElements = 1 << 14;

class NormalizeKernel final : public Kernel {
 public:
  NormalizeKernel(Opcode op, PrimitiveType type, int64_t rows, int64_t width, double epsilon)
      : op_(op), type_(type), rows_(rows), width_(width), epsilon_(epsilon) {}

  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    if (rows_ == 0 || width_ == 0) return absl::OkStatus();
    const int64_t rows_per_task = std::max<int64_t>(1, kGrainElements / width_);
    const int64_t tasks = (rows_ + rows_per_task - 1) / rows_per_task;
    auto run_task = [&](int64_t t) {
      std::vector<double> x(static_cast<size_t>(width_)), g;
      if (inputs.size() > 1) g.resize(static_cast<size_t>(width_));
      for (int64_t r = t * rows_per_task; r < std::min(rows_, (t + 1) * rows_per_task); ++r) {
        for (int64_t i = 0; i < width_; ++i) x[static_cast<size_t>(i)] = LoadElement(inputs[0], type_, r * width_ + i);
        for (size_t i = 0; i < g.size(); ++i)
          g[i] = LoadElement(inputs[1], type_, r * width_ + static_cast<int64_t>(i));
        Row(x, g);
        char* out = static_cast<char*>(outputs[0]);
        const int64_t bytes = ByteWidth(type_);
        for (int64_t i = 0; i < width_; ++i)
          StoreElement(x[static_cast<size_t>(i)], type_, out + (r * width_ + i) * bytes);
      }
    };
    if (tasks == 1) {
      run_task(0);
    } else {
      ThreadPool::Get().ParallelFor(tasks, run_task);
    }
    return absl::OkStatus();
  }

 private:
  // Replaces x (one row) by its normalization, or, given g, by the gradient of sum(g * norm(x)).
  void Row(std::vector<double>& x, const std::vector<double>& g) const {
    const double n = static_cast<double>(width_);
    const bool centred = op_ == Opcode::kLayerNorm || op_ == Opcode::kLayerNormGrad;
    double mean = 0;
    if (centred) {
      for (double v : x) mean += v;
      mean /= n;
    }
    double second_moment = 0;  // of x - mean: the two-pass variance, exact where a running sum of squares cancels
    for (double v : x) second_moment += (v - mean) * (v - mean);
    const double rstd = 1.0 / std::sqrt(second_moment / n + epsilon_);
    for (double& v : x) v = (v - mean) * rstd;  // x_hat
    if (g.empty()) return;
    // d/dx of sum(g x_hat) = rstd (g - mean(g) - x_hat mean(g x_hat)); RMS has no mean(g) term.
    double mean_g = 0, mean_g_xhat = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      mean_g += g[i];
      mean_g_xhat += g[i] * x[i];
    }
    mean_g = centred ? mean_g / n : 0;
    mean_g_xhat /= n;
    for (size_t i = 0; i < x.size(); ++i) x[i] = rstd * (g[i] - mean_g - x[i] * mean_g_xhat);
  }

  Opcode op_;
  PrimitiveType type_;
  int64_t rows_, width_;
  double epsilon_;
};

bool IsFloatType(PrimitiveType t) {
  return t == PrimitiveType::kF32 || t == PrimitiveType::kF64 || t == PrimitiveType::kBF16 || t == PrimitiveType::kF16;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> BuildNormalizeKernel(const proto::Kernel& k, std::span<const ArrayShape> inputs,
                                                             const ArrayShape& output) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("kernel '", k.label(), "' (NORMALIZE): ", what));
  };
  const std::optional<Opcode> op = OpcodeFromNumber(k.opcode());
  if (!op.has_value() || ClassOf(*op) != OpClass::kNormalize) return fail(absl::StrCat("bad opcode ", k.opcode()));
  const bool backward = *op == Opcode::kLayerNormGrad || *op == Opcode::kRmsNormGrad;
  if (inputs.size() != (backward ? 2U : 1U)) return fail("wrong number of inputs");
  for (const ArrayShape& in : inputs) {
    if (!(in == output)) return fail("inputs must have the output's shape");
  }
  if (!IsFloatType(output.type)) return fail("needs a floating type");
  const int64_t rank = static_cast<int64_t>(output.dims.size());
  if (k.axis() < 0 || k.axis() >= rank) return fail("axis out of range");
  if (!std::isfinite(k.epsilon()) || k.epsilon() < 0) return fail("epsilon must be finite and >= 0");
  int64_t rows = 1, width = 1;
  for (int64_t d = 0; d < rank; ++d) (d < k.axis() ? rows : width) *= output.dims[static_cast<size_t>(d)];
  return std::make_unique<NormalizeKernel>(*op, output.type, rows, width, k.epsilon());
}

}  // namespace lazyrt::pjrt

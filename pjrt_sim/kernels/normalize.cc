#include "pjrt_sim/kernels/normalize.h"

#include <algorithm>
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
// Rows computed together: each row's sums keep their order (element 0 first), but the sums of a block's
// rows are independent chains that the CPU overlaps and the compiler vectorizes across rows; one row's
// sequential sums were bound by the latency of an addition.
constexpr int64_t kRowBlock = 8;

// Elements [start, start + n) of an array of `type`, as doubles, at out[0], out[stride], ...
void LoadStrided(const void* base, PrimitiveType type, int64_t start, int64_t n, double* out, int64_t stride) {
  if (type == PrimitiveType::kF32) {
    const float* p = static_cast<const float*>(base) + start;
    for (int64_t i = 0; i < n; ++i) out[i * stride] = p[i];
  } else if (type == PrimitiveType::kF64) {
    const double* p = static_cast<const double*>(base) + start;
    for (int64_t i = 0; i < n; ++i) out[i * stride] = p[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i * stride] = LoadElement(base, type, start + i);
  }
}

// The inverse of LoadStrided: in[0], in[stride], ... rounded to `type` at elements [start, start + n).
// Typed loops for f32 and f64: a switch on the type per element (the store may alias the type, so it is
// reloaded every time) cost more than the whole normalization.
void StoreStrided(const double* in, int64_t stride, int64_t n, PrimitiveType type, void* base, int64_t start) {
  if (type == PrimitiveType::kF32) {
    float* p = static_cast<float*>(base) + start;
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(in[i * stride]);
  } else if (type == PrimitiveType::kF64) {
    double* p = static_cast<double*>(base) + start;
    for (int64_t i = 0; i < n; ++i) p[i] = in[i * stride];
  } else {
    const int64_t bytes = ByteWidth(type);
    for (int64_t i = 0; i < n; ++i) StoreElement(in[i * stride], type, static_cast<char*>(base) + (start + i) * bytes);
  }
}

class NormalizeKernel final : public Kernel {
 public:
  NormalizeKernel(Opcode op, PrimitiveType type, int64_t rows, int64_t width, double epsilon)
      : op_(op), type_(type), rows_(rows), width_(width), epsilon_(epsilon) {}

  absl::Status Run(std::span<const void* const> inputs, std::span<void* const> outputs) const override {
    if (rows_ == 0 || width_ == 0) return absl::OkStatus();
    const int64_t rows_per_task =
        (std::max<int64_t>(1, kGrainElements / width_) + kRowBlock - 1) / kRowBlock * kRowBlock;
    const int64_t tasks = (rows_ + rows_per_task - 1) / rows_per_task;
    auto run_task = [&](int64_t t) {
      // A block of rows, element-major: element i of row r at [i * kRowBlock + r].
      const size_t block = static_cast<size_t>(kRowBlock * width_);
      std::vector<double> x(block), g(inputs.size() > 1 ? block : 0);
      const int64_t last = std::min(rows_, (t + 1) * rows_per_task);
      for (int64_t r0 = t * rows_per_task; r0 < last; r0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, last - r0);
        if (rows < kRowBlock) {  // the rows past the end are zeros, computed and never stored
          std::fill(x.begin(), x.end(), 0.0);
          std::fill(g.begin(), g.end(), 0.0);
        }
        for (int64_t r = 0; r < rows; ++r) {
          LoadStrided(inputs[0], type_, (r0 + r) * width_, width_, x.data() + r, kRowBlock);
          if (!g.empty()) LoadStrided(inputs[1], type_, (r0 + r) * width_, width_, g.data() + r, kRowBlock);
        }
        Rows(x, g);
        for (int64_t r = 0; r < rows; ++r) {
          StoreStrided(x.data() + r, kRowBlock, width_, type_, outputs[0], (r0 + r) * width_);
        }
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
  // Replaces each row of x (a block, element-major) by its normalization, or, given g, by the gradient
  // of sum(g * norm(x)).
  void Rows(std::vector<double>& x, const std::vector<double>& g) const {
    const double n = static_cast<double>(width_);
    const bool centred = op_ == Opcode::kLayerNorm || op_ == Opcode::kLayerNormGrad;
    constexpr size_t kB = kRowBlock;
    const size_t w = static_cast<size_t>(width_);
    double mean[kB] = {}, second_moment[kB] = {}, rstd[kB];
    if (centred) {
      for (size_t i = 0; i < w; ++i) {
        for (size_t r = 0; r < kB; ++r) mean[r] += x[i * kB + r];
      }
      for (double& m : mean) m /= n;
    }
    // Of x - mean: the two-pass variance, exact where a running sum of squares cancels.
    for (size_t i = 0; i < w; ++i) {
      for (size_t r = 0; r < kB; ++r) second_moment[r] += (x[i * kB + r] - mean[r]) * (x[i * kB + r] - mean[r]);
    }
    for (size_t r = 0; r < kB; ++r) rstd[r] = 1.0 / std::sqrt(second_moment[r] / n + epsilon_);
    for (size_t i = 0; i < w; ++i) {
      for (size_t r = 0; r < kB; ++r) x[i * kB + r] = (x[i * kB + r] - mean[r]) * rstd[r];  // x_hat
    }
    if (g.empty()) return;
    // d/dx of sum(g x_hat) = rstd (g - mean(g) - x_hat mean(g x_hat)); RMS has no mean(g) term.
    double mean_g[kB] = {}, mean_g_xhat[kB] = {};
    for (size_t i = 0; i < w; ++i) {
      for (size_t r = 0; r < kB; ++r) {
        mean_g[r] += g[i * kB + r];
        mean_g_xhat[r] += g[i * kB + r] * x[i * kB + r];
      }
    }
    for (size_t r = 0; r < kB; ++r) {
      mean_g[r] = centred ? mean_g[r] / n : 0;
      mean_g_xhat[r] /= n;
    }
    for (size_t i = 0; i < w; ++i) {
      for (size_t r = 0; r < kB; ++r) {
        x[i * kB + r] = rstd[r] * (g[i * kB + r] - mean_g[r] - x[i * kB + r] * mean_g_xhat[r]);
      }
    }
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

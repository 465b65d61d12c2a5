// Training loops with lazy-tensor traps in combination, for the diagnostics to find: each trap's line
// is marked "TRAP: <name>" and tests/scripts/diagnostic_traps.cmake checks that the run report names
// exactly those lines, with the right kind and severity, and nothing else. Every mode is a small
// program of its own:
//   static_lr_accum  gradient accumulation (a graph per micro-step, so two variants: the first
//                    micro-step creates the gradients, the second adds to them) and a static learning
//                    rate that follows a schedule (a new constant per schedule step)
//   optional_inputs  three optional inputs given or not from step to step (8 variants), through a
//                    helper called from two places
//   last_batch       epochs whose last batch is smaller: one recompile, information only
//   eval_switch      training steps with an evaluation every few steps, one at a sync line of its own,
//                    one through the same helper as training, one reading item() batch by batch: other
//                    programs, not recompiles (the last is information: the host waits per batch)
//   host_syncs       five host syncs at once: a uniformity check in a helper, a branch on a reduction,
//                    a pad value from max().item() + 1, an always-true test, and to_vector() logging
//   storm            a static scalar new every step (LAZYRT_DEBUG=1 warns a bounded number of times)
//   clean            a loop without traps (with an evaluation): no finding at all
//
//   diagnostic_traps MODE [--steps N]
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "lazy/diagnostics.h"
#include "lazy/nn.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace {

using lazyrt::Tensor;

constexpr int64_t kBatch = 16, kFeatures = 8, kClasses = 4;

std::mt19937_64 rng(7);

std::vector<float> RandomData(int64_t n) {
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<int64_t> RandomLabels(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t& y : v) y = static_cast<int64_t>(rng() % kClasses);
  return v;
}

Tensor Parameter(int64_t rows, int64_t cols) {
  return Tensor::FromData(RandomData(rows * cols), {rows, cols}).requires_grad_();
}

// A plain SGD step with a learning rate that is a device parameter (no recompile when it changes).
void Update(const std::vector<Tensor>& params, lazyrt::Scalar lr) {
  lazyrt::NoGradGuard no_grad;
  for (Tensor p : params) {
    if (!p.grad().defined()) continue;
    p.assign(p - p.grad() * lr);
    p.set_grad(Tensor());
  }
}

Tensor Loss(const Tensor& w, const Tensor& x, const std::vector<int64_t>& labels) {
  const Tensor y = Tensor::FromData(std::span<const int64_t>(labels), {static_cast<int64_t>(labels.size())});
  return lazyrt::nn::cross_entropy(lazyrt::matmul(x, w), y);
}

void StaticLrWithAccumulation(int64_t steps) {
  Tensor w = Parameter(kFeatures, kClasses);
  for (int64_t step = 0; step < steps; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      const Tensor x = Tensor::FromData(RandomData(kBatch * kFeatures), {kBatch, kFeatures});
      Loss(w, x, RandomLabels(kBatch)).backward();  // TRAP: accumulate
      lazyrt::mark_step();                          // one graph per micro-step
    }
    const double lr = 0.1 / static_cast<double>(1 + step / 3);  // a step schedule
    lazyrt::NoGradGuard no_grad;
    w.assign(w - w.grad() * lazyrt::Scalar::Static(lr));  // TRAP: static lr
    w.set_grad(Tensor());
    lazyrt::mark_step();
  }
}

// Widths of the three optional inputs: each its own, so every combination is a graph of its own.
constexpr int64_t kWidthA = 3, kWidthB = 5, kWidthC = 7;

// Adds what is given of three optional inputs, each through its own weights.
Tensor Encode(const Tensor& x, const Tensor& w, const std::optional<Tensor>& a, const std::optional<Tensor>& b,
              const std::optional<Tensor>& c, const std::vector<Tensor>& extra) {
  Tensor h = lazyrt::matmul(x, w);
  if (a) h = h + lazyrt::matmul(*a, extra[0]);
  if (b) h = h + lazyrt::matmul(*b, extra[1]);
  if (c) h = h + lazyrt::matmul(*c, extra[2]);
  return lazyrt::relu(h);
}

void OptionalInputs(int64_t steps) {
  Tensor wq = Parameter(kFeatures, kClasses), wk = Parameter(kFeatures, kClasses);
  std::vector<Tensor> extra = {Parameter(kWidthA, kClasses), Parameter(kWidthB, kClasses),
                               Parameter(kWidthC, kClasses)};
  for (int64_t step = 0; step < steps; ++step) {
    const Tensor x = Tensor::FromData(RandomData(kBatch * kFeatures), {kBatch, kFeatures});
    // Metadata columns that come and go with the batch.
    std::optional<Tensor> a, b, c;
    if (step & 1) a = Tensor::FromData(RandomData(kBatch * kWidthA), {kBatch, kWidthA});  // TRAP: optional a
    if (step & 2) b = Tensor::FromData(RandomData(kBatch * kWidthB), {kBatch, kWidthB});  // TRAP: optional b
    if (step & 4) c = Tensor::FromData(RandomData(kBatch * kWidthC), {kBatch, kWidthC});  // TRAP: optional c
    const Tensor query = Encode(x, wq, a, b, c, extra);
    const Tensor key = Encode(x, wk, a, b, c, extra);
    lazyrt::mean(query * key).backward();
    std::vector<Tensor> params = extra;
    params.push_back(wq);
    params.push_back(wk);
    Update(params, 0.01);
    lazyrt::mark_step();
  }
}

void LastBatch(int64_t steps) {
  Tensor w = Parameter(kFeatures, kClasses);
  constexpr int64_t kExamples = 5 * kBatch + 6;  // five full batches and a last one of 6
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t start = (step * kBatch) % (6 * kBatch);
    const int64_t n = std::min(kBatch, kExamples - start);
    const Tensor x = Tensor::FromData(RandomData(n * kFeatures), {n, kFeatures});  // TRAP: last batch
    Loss(w, x, RandomLabels(n)).backward();
    Update({w}, 0.01);
    lazyrt::mark_step();
  }
}

// Ends a step for training and for evaluation alike.
void Finish() { lazyrt::mark_step(); }

double Evaluate(const Tensor& w) {
  const Tensor x = Tensor::FromData(RandomData(kBatch * kFeatures), {kBatch, kFeatures});
  const Tensor correct =
      lazyrt::sum(lazyrt::cast(lazyrt::eq(lazyrt::argmax(lazyrt::matmul(x, w), 1),
                                          Tensor::FromData(std::span<const int64_t>(RandomLabels(kBatch)), {kBatch})),
                               lazyrt::DType::kF32));
  lazyrt::sync();
  return correct.item();  // after the sync: nothing pending, no sync
}

double EvaluateThroughHelper(const Tensor& w) {
  const Tensor x = Tensor::FromData(RandomData(kBatch * kFeatures), {kBatch, kFeatures});
  const Tensor score = lazyrt::max(lazyrt::softmax(lazyrt::matmul(x, w), 1));
  Finish();
  return score.item();
}

// An evaluation that reads each batch's score as it goes: every item() is the batch's only sync.
double EvaluateBatchByBatch(const Tensor& w) {
  double total = 0;
  for (int batch = 0; batch < 4; ++batch) {
    const Tensor x = Tensor::FromData(RandomData(kBatch * kFeatures), {kBatch, kFeatures});
    total += lazyrt::mean(lazyrt::matmul(x, w)).item();  // TRAP: eval item
  }
  return total;
}

void EvalSwitch(int64_t steps, bool clean) {
  Tensor w = Parameter(kFeatures, kClasses);
  double total = 0;
  for (int64_t step = 0; step < steps; ++step) {
    const Tensor x = Tensor::FromData(RandomData(kBatch * kFeatures), {kBatch, kFeatures});
    const Tensor loss = Loss(w, x, RandomLabels(kBatch));
    loss.backward();
    Update({w}, 0.01 / static_cast<double>(1 + step));  // a schedule on the device: no recompile
    Finish();
    total += loss.item();  // after the step's sync: computed already
    if (step % 4 == 3) total += Evaluate(w);
    if (!clean && step % 4 == 1) total += EvaluateThroughHelper(w);
    if (!clean && step % 8 == 5) total += EvaluateBatchByBatch(w);
  }
  std::printf("total %.3f\n", total);
}

// Whether every id is the same (the uniform-batch fast path check).
bool AllEqual(const Tensor& ids) {
  return (lazyrt::max(ids) + lazyrt::max(-ids)).item() == 0;  // TRAP: uniform check
}

void HostSyncs(int64_t steps) {
  Tensor w = Parameter(kFeatures, kClasses);
  for (int64_t step = 0; step < steps; ++step) {
    const Tensor x = Tensor::FromData(RandomData(kBatch * kFeatures), {kBatch, kFeatures});
    const Tensor ids = Tensor::FromData(RandomData(kBatch), {kBatch});
    Tensor h = lazyrt::matmul(x, w);
    if (!AllEqual(ids)) h = h * 0.5;
    const Tensor mask = lazyrt::gt(ids, 0.0);
    if (lazyrt::sum(lazyrt::cast(mask, lazyrt::DType::kF32)).item() > 0) {  // TRAP: branch on mask
      h = h + 1.0;
    }
    const double pad = lazyrt::max(ids).item() + 1;  // TRAP: pad value
    h = h - pad * 0.0;
    const Tensor aux = lazyrt::mean(h * h);
    Tensor loss = lazyrt::mean(h);
    if (lazyrt::sum(lazyrt::abs(aux)).item() > 0) loss = loss + aux;  // TRAP: aux test
    loss.backward();
    Update({w}, 0.01);
    std::printf("loss %.4f\n", static_cast<double>(loss.to_vector<float>()[0]));  // TRAP: logging
    lazyrt::mark_step();
  }
}

void Storm(int64_t steps) {
  Tensor w = Parameter(kFeatures, kClasses);
  for (int64_t step = 0; step < steps; ++step) {
    const Tensor x = Tensor::FromData(RandomData(kBatch * kFeatures), {kBatch, kFeatures});
    Loss(w, x, RandomLabels(kBatch)).backward();
    Update({w}, lazyrt::Scalar::Static(0.1 / static_cast<double>(step + 1)));  // TRAP: storm
    lazyrt::mark_step();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: diagnostic_traps MODE [--steps N]\n");
    return 2;
  }
  const std::string mode = argv[1];
  int64_t steps = 24;
  if (argc == 4 && std::string(argv[2]) == "--steps") steps = std::atoll(argv[3]);
  try {
    if (mode == "static_lr_accum") {
      StaticLrWithAccumulation(steps);
    } else if (mode == "optional_inputs") {
      OptionalInputs(steps);
    } else if (mode == "last_batch") {
      LastBatch(steps);
    } else if (mode == "eval_switch") {
      EvalSwitch(steps, /*clean=*/false);
    } else if (mode == "clean") {
      EvalSwitch(steps, /*clean=*/true);
    } else if (mode == "host_syncs") {
      HostSyncs(steps);
    } else if (mode == "storm") {
      Storm(steps);
    } else {
      std::fprintf(stderr, "diagnostic_traps: unknown mode %s\n", mode.c_str());
      return 2;
    }
  } catch (const lazyrt::Error& e) {
    std::fprintf(stderr, "diagnostic_traps: %s\n", e.what());
    return 1;
  }
  std::printf("%s", lazyrt::diagnostics_summary().c_str());
  return 0;
}

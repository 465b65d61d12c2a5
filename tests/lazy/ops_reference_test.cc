// Every public tensor op against a naive reference loop written here on host data, over random shapes
// from fixed seeds: ranks 0 to 4, dimensions of size 0 and 1, and broadcasting pairs. A case traces all
// of its ops before reading any result, so the first read computes them all in one graph: one compile
// per case, not one per op.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <iomanip>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_join.h"
#include "lazy/nn.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace ops_reference_test {

using Dims = std::vector<int64_t>;
using Values = std::vector<double>;

constexpr DType kF32 = DType::kF32;
constexpr DType kF64 = DType::kF64;
constexpr DType kBF16 = DType::kBF16;
constexpr DType kF16 = DType::kF16;
constexpr DType kI32 = DType::kI32;
constexpr DType kI64 = DType::kI64;
constexpr DType kBool = DType::kBool;

// Cases per test. Each case is one graph; the whole file stays well under 400 graphs.
constexpr int kCases = 16;
constexpr int kBroadcastCases = 24;
constexpr int kMatmulCases = 24;
constexpr int kReductionCases = 24;
// Mismatching elements reported per result (the rest are counted).
constexpr int64_t kReportedPerResult = 4;

constexpr double kPi = 3.14159265358979323846;
constexpr double kInf = std::numeric_limits<double>::infinity();

size_t Ix(int64_t i) { return static_cast<size_t>(i); }
int64_t Rank(const Dims& dims) { return static_cast<int64_t>(dims.size()); }
int64_t Norm(int64_t dim, int64_t rank) { return dim < 0 ? dim + rank : dim; }

int64_t Numel(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string DimsText(const Dims& dims) { return "[" + absl::StrJoin(dims, ",") + "]"; }

std::string Desc(DType dtype, const Dims& dims) { return std::string(ir::DTypeName(dtype)) + DimsText(dims); }

std::string Num(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

// Row-major multi-index of element `flat` (flat < Numel(dims)).
Dims Unravel(int64_t flat, const Dims& dims) {
  Dims at(dims.size(), 0);
  for (size_t d = dims.size(); d-- > 0;) {
    at[d] = flat % dims[d];
    flat /= dims[d];
  }
  return at;
}

int64_t Ravel(const Dims& at, const Dims& dims) {
  int64_t flat = 0;
  for (size_t d = 0; d < dims.size(); ++d) flat = flat * dims[d] + at[d];
  return flat;
}

// NumPy broadcasting of two shapes (the test only builds shapes that broadcast).
Dims Broadcast(const Dims& a, const Dims& b) {
  const size_t rank = std::max(a.size(), b.size());
  Dims out(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      ADD_FAILURE() << "test bug: " << DimsText(a) << " and " << DimsText(b) << " do not broadcast";
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// The flat position, in a tensor of `dims` broadcast to the output, that output element `at` reads.
int64_t SourceOf(const Dims& at, const Dims& dims) {
  const size_t lead = at.size() - dims.size();
  int64_t flat = 0;
  for (size_t d = 0; d < dims.size(); ++d) flat = flat * dims[d] + (dims[d] == 1 ? 0 : at[lead + d]);
  return flat;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  std::mt19937_64& engine() { return engine_; }
  int64_t Int(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(engine_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(engine_); }
  double Real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(engine_); }

  // A dimension: 0 now and then, 1 often, otherwise 2 to `largest`.
  int64_t Dim(int64_t largest = 5) {
    const int64_t r = Int(0, 15);
    if (r == 0) return 0;
    if (r <= 4) return 1;
    return Int(2, largest);
  }
  // A shape of rank min_rank..max_rank with at most `max_numel` elements.
  Dims RandomDims(int64_t min_rank = 0, int64_t max_rank = 4, int64_t max_numel = 256) {
    Dims dims(Ix(Int(min_rank, max_rank)));
    for (int64_t& d : dims) d = Dim();
    while (Numel(dims) > max_numel) *std::max_element(dims.begin(), dims.end()) /= 2;
    return dims;
  }
  // A shape that broadcasts to `out`: leading dimensions dropped now and then, others made 1.
  Dims BroadcastableTo(const Dims& out) {
    const int64_t drop = Chance(0.5) ? 0 : Int(0, Rank(out));
    Dims dims(out.begin() + drop, out.end());
    for (int64_t& d : dims) {
      if (Chance(0.3)) d = 1;
    }
    return dims;
  }
  Values Reals(int64_t n, double lo, double hi) {
    Values v(Ix(n));
    for (double& x : v) x = Real(lo, hi);
    return v;
  }
  Values Ints(int64_t n, int64_t lo, int64_t hi) {
    Values v(Ix(n));
    for (double& x : v) x = static_cast<double>(Int(lo, hi));
    return v;
  }
  // Small integers (ties and zeros) with probability `p_int`, reals in [lo, hi] otherwise.
  Values Mixed(int64_t n, int64_t lo, int64_t hi, double p_int = 0.3) {
    Values v(Ix(n));
    for (double& x : v) {
      x = Chance(p_int) ? static_cast<double>(Int(lo, hi)) : Real(static_cast<double>(lo), static_cast<double>(hi));
    }
    return v;
  }
  // Multiples of 1/8 in [lo, hi]: sums and products of a few hundred of them are exact in f32, summed
  // in any order, so results built from them are compared exactly.
  Values Eighths(int64_t n, int64_t lo, int64_t hi) {
    Values v(Ix(n));
    for (double& x : v) x = static_cast<double>(Int(8 * lo, 8 * hi)) / 8.0;
    return v;
  }

 private:
  std::mt19937_64 engine_;
};

// A tensor and its elements on the host.
struct Host {
  DType dtype;
  Dims dims;
  Values values;  // exactly the tensor's elements, row-major
  Tensor t;
  std::string desc() const { return Desc(dtype, dims); }
};

Host MakeHost(DType dtype, Dims dims, Values values) {
  Host h{dtype, std::move(dims), std::move(values), Tensor()};
  switch (dtype) {
    case DType::kF32: {
      std::vector<float> v(h.values.size());
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = static_cast<float>(h.values[i]);
        h.values[i] = v[i];  // the reference sees what the tensor holds
      }
      h.t = Tensor::FromData(std::span<const float>(v), h.dims);
      break;
    }
    case DType::kF64: h.t = Tensor::FromData(std::span<const double>(h.values), h.dims); break;
    case DType::kI32: {
      std::vector<int32_t> v(h.values.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(h.values[i]);
      h.t = Tensor::FromData(std::span<const int32_t>(v), h.dims);
      break;
    }
    case DType::kI64: {
      std::vector<int64_t> v(h.values.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(h.values[i]);
      h.t = Tensor::FromData(std::span<const int64_t>(v), h.dims);
      break;
    }
    default: throw std::logic_error("test bug: no host data for " + Desc(dtype, h.dims));
  }
  return h;
}

// A bool tensor (there is no bool FromData): x > 0, computed on the device.
Host Positive(const Host& x) {
  Host h{kBool, x.dims, Values(x.values.size()), gt(x.t, Scalar(0))};
  for (size_t i = 0; i < x.values.size(); ++i) h.values[i] = x.values[i] > 0 ? 1 : 0;
  return h;
}

// What an op must produce.
struct Reference {
  Reference(DType dtype_in, Dims dims_in) : dtype(dtype_in), dims(std::move(dims_in)), values(Ix(Numel(dims))) {}
  DType dtype;
  Dims dims;
  Values values;
  // Extra absolute error allowed per element (a bound on accumulated rounding); used unless exact.
  Values slack;
};

// A reference result used as the operand of another reference (it has no tensor).
Host Derived(const Reference& r) { return Host{r.dtype, r.dims, r.values, Tensor()}; }

template <typename F>
Reference Map1(DType dtype, const Host& x, F f) {
  Reference r(dtype, x.dims);
  for (size_t i = 0; i < x.values.size(); ++i) r.values[i] = f(x.values[i]);
  return r;
}

template <typename F>
Reference Map2(DType dtype, const Host& a, const Host& b, F f) {
  Reference r(dtype, Broadcast(a.dims, b.dims));
  for (int64_t i = 0; i < Numel(r.dims); ++i) {
    const Dims at = Unravel(i, r.dims);
    r.values[Ix(i)] = f(a.values[Ix(SourceOf(at, a.dims))], b.values[Ix(SourceOf(at, b.dims))]);
  }
  return r;
}

template <typename F>
Reference Map3(DType dtype, const Host& a, const Host& b, const Host& c, F f) {
  Reference r(dtype, Broadcast(Broadcast(a.dims, b.dims), c.dims));
  for (int64_t i = 0; i < Numel(r.dims); ++i) {
    const Dims at = Unravel(i, r.dims);
    r.values[Ix(i)] =
        f(a.values[Ix(SourceOf(at, a.dims))], b.values[Ix(SourceOf(at, b.dims))], c.values[Ix(SourceOf(at, c.dims))]);
  }
  return r;
}

// Allowed error: relative * |want| + absolute (+ the reference's slack). All zero means exact: the
// reference rounded to the result's dtype must equal the result.
struct Tol {
  double relative;
  double absolute;
};
constexpr Tol kExact{0, 0};
constexpr Tol kUlps{5e-7, 1e-37};  // a few f32 ulps: a libm call, or two roundings
constexpr Tol kLoose{1e-5, 1e-6};  // f32 composites of several roundings (gelu, mean of reals)
constexpr Tol kSoftmaxTol{1e-5, 1e-37};
constexpr Tol kLogSoftmaxTol{1e-5, 1e-5};
constexpr Tol kSlack{0, 1e-7};  // f32 sums: the reference's per-element bound
constexpr Tol kDoubleTol{1e-12, 1e-14};
constexpr Tol kDoubleSlack{0, 1e-14};
constexpr Tol kHalfTol{4.9e-4, 6e-8};  // f16 rounding: half an ulp is 2^-11 relative
constexpr Tol kNnTol{1e-5, 1e-5};      // two f32 layers of products and sums

// Round to nearest even, as bf16 keeps an f32.
double RoundBf16(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(f) || std::isinf(f)) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

double RoundTo(DType dtype, double v) {
  if (dtype == kF32) return static_cast<float>(v);
  if (dtype == kBF16) return RoundBf16(v);
  return v;
}

bool Matches(double got, double want, double allowed) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (std::isinf(got) || std::isinf(want)) return got == want;
  return std::abs(got - want) <= allowed;
}

template <typename T>
Values Widen(const std::vector<T>& v) {
  Values out;
  out.reserve(v.size());
  for (T x : v) out.push_back(static_cast<double>(x));
  return out;
}

// Reads through the to_vector<T> that matches the dtype (f64, bf16 and f16 read as double).
Values ReadAll(const Tensor& t) {
  switch (t.dtype()) {
    case DType::kF32: return Widen(t.to_vector<float>());
    case DType::kI32: return Widen(t.to_vector<int32_t>());
    case DType::kI64: return Widen(t.to_vector<int64_t>());
    case DType::kBool: return Widen(t.to_vector<uint8_t>());
    default: return t.to_vector<double>();
  }
}

// One random case: the ops are traced as they are added, and read (one graph) by Check().
class Case {
 public:
  explicit Case(std::string label) : label_(std::move(label)) {}

  // Traces `op` now (if it throws, that is a failure naming `what`); compares when Check() reads.
  void Expect(const std::string& what, const std::function<Tensor()>& op, Reference want, Tol tol = kExact) {
    Tensor got;
    try {
      got = op();
    } catch (const std::exception& e) {
      ADD_FAILURE() << label_ << ": " << what << " threw when traced: " << e.what();
      return;
    }
    items_.push_back(Item{what, std::move(got), std::move(want), tol});
  }

  // Reads every result (the first read computes all of them) and compares each with its reference.
  void Check() {
    for (const Item& item : items_) CheckOne(item);
    items_.clear();
  }

 private:
  struct Item {
    std::string what;
    Tensor got;
    Reference want;
    Tol tol;
  };

  void CheckOne(const Item& item) const {
    const Reference& want = item.want;
    const std::string where = label_ + ": " + item.what;
    const Dims got_dims(item.got.dims().begin(), item.got.dims().end());
    if (item.got.dtype() != want.dtype || got_dims != want.dims) {
      ADD_FAILURE() << where << ": result is " << Desc(item.got.dtype(), got_dims) << ", want "
                    << Desc(want.dtype, want.dims);
      return;
    }
    Values got;
    try {
      got = ReadAll(item.got);
    } catch (const std::exception& e) {
      ADD_FAILURE() << where << ": reading the " << Desc(want.dtype, want.dims) << " result threw: " << e.what();
      return;
    }
    if (got.size() != want.values.size()) {
      ADD_FAILURE() << where << ": read " << got.size() << " elements, want " << want.values.size();
      return;
    }
    const bool exact = item.tol.relative == 0 && item.tol.absolute == 0;
    int64_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double rounded = RoundTo(want.dtype, want.values[i]);
      const double expected = (exact || std::isinf(rounded)) ? rounded : want.values[i];
      double allowed = 0;
      if (!exact) {
        allowed =
            item.tol.absolute + item.tol.relative * std::abs(expected) + (want.slack.empty() ? 0.0 : want.slack[i]);
      }
      if (Matches(got[i], expected, allowed)) continue;
      if (++bad <= kReportedPerResult) {
        ADD_FAILURE() << where << " -> " << Desc(want.dtype, want.dims) << ": element " << i << " (index "
                      << DimsText(Unravel(static_cast<int64_t>(i), want.dims)) << ") is " << Num(got[i]) << ", want "
                      << Num(expected) << (exact ? std::string(" exactly") : " within " + Num(allowed));
      }
    }
    if (bad > kReportedPerResult) {
      ADD_FAILURE() << where << ": " << bad - kReportedPerResult << " more elements differ";
    }
  }

  std::string label_;
  std::vector<Item> items_;
};

// "op(f32[3,1,5], i64[4,1])".
template <typename... Hosts>
std::string Call(const std::string& op, const Hosts&... args) {
  std::string text = op + "(";
  int n = 0;
  ((text += (n++ ? ", " : "") + args.desc()), ...);
  return text + ")";
}

std::string Label(const std::string& test, int c) { return test + " case " + std::to_string(c); }

// Operand shapes of a broadcasting op: hand-picked pairs first, then random ones.
std::pair<Dims, Dims> BroadcastPair(Rng& rng, int c) {
  const std::vector<std::pair<Dims, Dims>> picked = {{{3, 1, 5}, {4, 1}}, {{}, {2, 3}},    {{0}, {1}},
                                                     {{2, 0, 3}, {1, 3}}, {{1}, {0}},      {{5, 1, 1, 2}, {3, 1}},
                                                     {{1, 1}, {}},        {{4, 3}, {4, 3}}};
  if (Ix(c) < picked.size()) return picked[Ix(c)];
  const Dims out = rng.RandomDims();
  Dims a = rng.Chance(0.25) ? out : rng.BroadcastableTo(out);
  Dims b = rng.BroadcastableTo(out);
  if (rng.Chance(0.5)) std::swap(a, b);
  return {a, b};
}

Dims Identity(int64_t rank) {
  Dims p(Ix(rank));
  std::iota(p.begin(), p.end(), 0);
  return p;
}

Dims RandomPerm(Rng& rng, int64_t rank) {
  Dims p = Identity(rank);
  std::shuffle(p.begin(), p.end(), rng.engine());
  return p;
}

// x permuted (perm non-negative): result dimension i is x's dimension perm[i].
Reference PermuteRef(const Host& x, const Dims& perm) {
  Dims dims;
  for (int64_t p : perm) dims.push_back(x.dims[Ix(p)]);
  Reference r(x.dtype, dims);
  for (int64_t i = 0; i < Numel(dims); ++i) {
    const Dims at = Unravel(i, dims);
    Dims from(x.dims.size());
    for (size_t d = 0; d < perm.size(); ++d) from[Ix(perm[d])] = at[d];
    r.values[Ix(i)] = x.values[Ix(Ravel(from, x.dims))];
  }
  return r;
}

// ---- Elementwise ------------------------------------------------------------------------------------

double Gelu(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }
double GeluTanh(double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / kPi) * (v + 0.044715 * v * v * v))); }
double Erf(double v) { return std::erf(v); }
double Sin(double v) { return std::sin(v); }
double Cos(double v) { return std::cos(v); }
double Sigmoid(double v) { return 1 / (1 + std::exp(-v)); }
double Sign(double v) { return static_cast<double>((v > 0) - (v < 0)); }
double Negate(double v) { return -v; }
double Abs(double v) { return std::abs(v); }
double Relu(double v) { return v > 0 ? v : 0.0; }
double Exp(double v) { return std::exp(v); }
double Log(double v) { return std::log(v); }
double Sqrt(double v) { return std::sqrt(v); }
double Rsqrt(double v) { return 1 / std::sqrt(v); }
double Tanh(double v) { return std::tanh(v); }

double Plus(double a, double b) { return a + b; }
double Minus(double a, double b) { return a - b; }
double Times(double a, double b) { return a * b; }
double Over(double a, double b) { return a / b; }
double Larger(double a, double b) { return std::max(a, b); }
double Smaller(double a, double b) { return std::min(a, b); }
double Power(double a, double b) { return std::pow(a, b); }
double IntPower(double a, double b) {
  int64_t r = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(b); ++i) r *= static_cast<int64_t>(a);
  return static_cast<double>(r);
}

TEST(OpsReference, Unary) {
  Rng rng(1001);
  for (int c = 0; c < kCases; ++c) {
    const Dims dims = rng.RandomDims();
    const int64_t n = Numel(dims);
    const Host x = MakeHost(kF32, dims, rng.Mixed(n, -4, 4));
    const Host pos = MakeHost(kF32, dims, rng.Reals(n, 0.05, 5));
    const Host xi = MakeHost(kI64, dims, rng.Ints(n, -6, 6));
    const Host xd = MakeHost(kF64, dims, rng.Reals(n, -4, 4));
    const Host posd = MakeHost(kF64, dims, rng.Reals(n, 0.05, 5));
    Case k(Label("Unary", c));
    k.Expect(
        Call("neg", x), [&] { return neg(x.t); }, Map1(kF32, x, Negate));
    k.Expect(
        Call("operator-", x), [&] { return -x.t; }, Map1(kF32, x, Negate));
    k.Expect(
        Call("abs", x), [&] { return abs(x.t); }, Map1(kF32, x, Abs));
    k.Expect(
        Call("relu", x), [&] { return relu(x.t); }, Map1(kF32, x, Relu));
    k.Expect(
        Call("sign", x), [&] { return sign(x.t); }, Map1(kF32, x, Sign));
    k.Expect(
        Call("exp", x), [&] { return exp(x.t); }, Map1(kF32, x, Exp), kUlps);
    k.Expect(
        Call("log", pos), [&] { return log(pos.t); }, Map1(kF32, pos, Log), kUlps);
    k.Expect(
        Call("sqrt", pos), [&] { return sqrt(pos.t); }, Map1(kF32, pos, Sqrt));
    k.Expect(
        Call("rsqrt", pos), [&] { return rsqrt(pos.t); }, Map1(kF32, pos, Rsqrt), kUlps);
    k.Expect(
        Call("tanh", x), [&] { return tanh(x.t); }, Map1(kF32, x, Tanh), kUlps);
    k.Expect(
        Call("sigmoid", x), [&] { return sigmoid(x.t); }, Map1(kF32, x, Sigmoid), kUlps);
    k.Expect(
        Call("gelu", x), [&] { return gelu(x.t); }, Map1(kF32, x, Gelu), kLoose);
    k.Expect(
        Call("gelu tanh", x), [&] { return gelu(x.t, "tanh"); }, Map1(kF32, x, GeluTanh), kLoose);
    k.Expect(
        Call("erf", x), [&] { return erf(x.t); }, Map1(kF32, x, Erf), kUlps);
    k.Expect(
        Call("sin", x), [&] { return sin(x.t); }, Map1(kF32, x, Sin), kUlps);
    k.Expect(
        Call("cos", x), [&] { return cos(x.t); }, Map1(kF32, x, Cos), kUlps);
    k.Expect(
        Call("exp(x).detach", x), [&] { return exp(x.t).detach(); }, Map1(kF32, x, Exp), kUlps);
    k.Expect(
        Call("logical_not(gt(x, 0))", x), [&] { return logical_not(gt(x.t, Scalar(0))); },
        Map1(kBool, x, [](double v) { return v > 0 ? 0.0 : 1.0; }));
    // Integer inputs: neg, abs, sign and relu keep the dtype; the float functions compute in f32.
    k.Expect(
        Call("neg", xi), [&] { return neg(xi.t); }, Map1(kI64, xi, Negate));
    k.Expect(
        Call("abs", xi), [&] { return abs(xi.t); }, Map1(kI64, xi, Abs));
    k.Expect(
        Call("sign", xi), [&] { return sign(xi.t); }, Map1(kI64, xi, Sign));
    k.Expect(
        Call("relu", xi), [&] { return relu(xi.t); }, Map1(kI64, xi, Relu));
    k.Expect(
        Call("exp", xi), [&] { return exp(xi.t); }, Map1(kF32, xi, Exp), kUlps);
    k.Expect(
        Call("sqrt(abs)", xi), [&] { return sqrt(abs(xi.t)); },
        Map1(kF32, xi, [](double v) { return std::sqrt(std::abs(v)); }));
    // f64 computes in f64.
    k.Expect(
        Call("neg", xd), [&] { return neg(xd.t); }, Map1(kF64, xd, Negate));
    k.Expect(
        Call("exp", xd), [&] { return exp(xd.t); }, Map1(kF64, xd, Exp), kDoubleTol);
    k.Expect(
        Call("log", posd), [&] { return log(posd.t); }, Map1(kF64, posd, Log), kDoubleTol);
    k.Expect(
        Call("sqrt", posd), [&] { return sqrt(posd.t); }, Map1(kF64, posd, Sqrt));
    k.Expect(
        Call("rsqrt", posd), [&] { return rsqrt(posd.t); }, Map1(kF64, posd, Rsqrt), kDoubleTol);
    k.Expect(
        Call("tanh", xd), [&] { return tanh(xd.t); }, Map1(kF64, xd, Tanh), kDoubleTol);
    k.Expect(
        Call("sigmoid", xd), [&] { return sigmoid(xd.t); }, Map1(kF64, xd, Sigmoid), kDoubleTol);
    k.Expect(
        Call("gelu", xd), [&] { return gelu(xd.t); }, Map1(kF64, xd, Gelu), kDoubleTol);
    k.Expect(
        Call("gelu tanh", xd), [&] { return gelu(xd.t, "tanh"); }, Map1(kF64, xd, GeluTanh), kDoubleTol);
    k.Expect(
        Call("erf", xd), [&] { return erf(xd.t); }, Map1(kF64, xd, Erf), kDoubleTol);
    k.Expect(
        Call("sin", xd), [&] { return sin(xd.t); }, Map1(kF64, xd, Sin), kDoubleTol);
    k.Expect(
        Call("cos", xd), [&] { return cos(xd.t); }, Map1(kF64, xd, Cos), kDoubleTol);
    k.Check();
  }
}

TEST(OpsReference, BinaryBroadcasting) {
  Rng rng(2002);
  for (int c = 0; c < kBroadcastCases; ++c) {
    const std::pair<Dims, Dims> shapes = BroadcastPair(rng, c);
    const Dims& ad = shapes.first;
    const Dims& bd = shapes.second;
    const int64_t na = Numel(ad), nb = Numel(bd);
    const Host a = MakeHost(kF32, ad, rng.Mixed(na, -4, 4));
    const Host b = MakeHost(kF32, bd, rng.Mixed(nb, -4, 4));
    const Host base = MakeHost(kF32, ad, rng.Reals(na, 0.25, 3));
    const Host expo = MakeHost(kF32, bd, rng.Reals(nb, -2, 3));
    const Host ia = MakeHost(kI64, ad, rng.Ints(na, -6, 6));
    const Host ib = MakeHost(kI64, bd, rng.Ints(nb, -6, 6));
    const Host ie = MakeHost(kI64, bd, rng.Ints(nb, 0, 4));
    const Host ja = MakeHost(kI32, ad, rng.Ints(na, -6, 6));
    const Host db = MakeHost(kF64, bd, rng.Reals(nb, -4, 4));
    Case k(Label("BinaryBroadcasting", c));
    k.Expect(
        Call("add", a, b), [&] { return add(a.t, b.t); }, Map2(kF32, a, b, Plus));
    k.Expect(
        Call("sub", a, b), [&] { return sub(a.t, b.t); }, Map2(kF32, a, b, Minus));
    k.Expect(
        Call("mul", a, b), [&] { return mul(a.t, b.t); }, Map2(kF32, a, b, Times));
    k.Expect(
        Call("div", a, b), [&] { return div(a.t, b.t); }, Map2(kF32, a, b, Over));
    k.Expect(
        Call("operator+", a, b), [&] { return a.t + b.t; }, Map2(kF32, a, b, Plus));
    k.Expect(
        Call("operator-", a, b), [&] { return a.t - b.t; }, Map2(kF32, a, b, Minus));
    k.Expect(
        Call("operator*", a, b), [&] { return a.t * b.t; }, Map2(kF32, a, b, Times));
    k.Expect(
        Call("operator/", a, b), [&] { return a.t / b.t; }, Map2(kF32, a, b, Over));
    k.Expect(
        Call("maximum", a, b), [&] { return maximum(a.t, b.t); }, Map2(kF32, a, b, Larger));
    k.Expect(
        Call("minimum", a, b), [&] { return minimum(a.t, b.t); }, Map2(kF32, a, b, Smaller));
    k.Expect(
        Call("pow", base, expo), [&] { return pow(base.t, expo.t); }, Map2(kF32, base, expo, Power), kUlps);
    // Integers compute in i64, except division, which is true division in f32.
    k.Expect(
        Call("add", ia, ib), [&] { return add(ia.t, ib.t); }, Map2(kI64, ia, ib, Plus));
    k.Expect(
        Call("sub", ia, ib), [&] { return sub(ia.t, ib.t); }, Map2(kI64, ia, ib, Minus));
    k.Expect(
        Call("mul", ia, ib), [&] { return mul(ia.t, ib.t); }, Map2(kI64, ia, ib, Times));
    k.Expect(
        Call("maximum", ia, ib), [&] { return maximum(ia.t, ib.t); }, Map2(kI64, ia, ib, Larger));
    k.Expect(
        Call("minimum", ia, ib), [&] { return minimum(ia.t, ib.t); }, Map2(kI64, ia, ib, Smaller));
    k.Expect(
        Call("div", ia, ib), [&] { return div(ia.t, ib.t); }, Map2(kF32, ia, ib, Over));
    k.Expect(
        Call("pow", ia, ie), [&] { return pow(ia.t, ie.t); }, Map2(kI64, ia, ie, IntPower));
    // Mixed dtypes promote: bool < integers < floats, wider wins; but a 0-dim operand only promotes the
    // other across categories (PyTorch's result_type: i32[3] with i64[] is i32, f32[3] with f64[] f32).
    const bool b_zero_dim_only = Rank(bd) == 0 && Rank(ad) > 0;
    k.Expect(
        Call("add", a, ib), [&] { return add(a.t, ib.t); }, Map2(kF32, a, ib, Plus));
    k.Expect(
        Call("mul", ia, b), [&] { return mul(ia.t, b.t); }, Map2(kF32, ia, b, Times));
    k.Expect(
        Call("maximum", ja, ib), [&] { return maximum(ja.t, ib.t); },
        Map2(b_zero_dim_only ? kI32 : kI64, ja, ib, Larger));
    const Host db_in_f32 = MakeHost(kF32, bd, db.values);  // what a 0-dim f64 operand becomes in f32
    k.Expect(
        Call("sub", a, db), [&] { return sub(a.t, db.t); },
        b_zero_dim_only ? Map2(kF32, a, db_in_f32, Minus) : Map2(kF64, a, db, Minus));
    k.Check();
  }
}

TEST(OpsReference, ScalarOperands) {
  Rng rng(3003);
  for (int c = 0; c < kCases; ++c) {
    const Dims dims = rng.RandomDims();
    const int64_t n = Numel(dims);
    const Host x = MakeHost(kF32, dims, rng.Mixed(n, -4, 4));
    const Host pos = MakeHost(kF32, dims, rng.Reals(n, 0.25, 3));
    const Host xi = MakeHost(kI64, dims, rng.Ints(n, -6, 6));
    float s = static_cast<float>(rng.Real(-3, 3));
    if (std::abs(s) < 0.125f) s = 1.5f;
    const double sd = s;  // the scalar as an f32 tensor holds it
    const int64_t si = rng.Int(-4, 4);
    const double sid = static_cast<double>(si);
    Case k(Label("ScalarOperands", c) + " (s = " + Num(sd) + ", si = " + std::to_string(si) + ")");
    k.Expect(
        Call("x + s", x), [&] { return x.t + s; }, Map1(kF32, x, [sd](double v) { return v + sd; }));
    k.Expect(
        Call("x - s", x), [&] { return x.t - s; }, Map1(kF32, x, [sd](double v) { return v - sd; }));
    k.Expect(
        Call("x * s", x), [&] { return x.t * s; }, Map1(kF32, x, [sd](double v) { return v * sd; }));
    k.Expect(
        Call("x / s", x), [&] { return x.t / s; }, Map1(kF32, x, [sd](double v) { return v / sd; }));
    k.Expect(
        Call("s + x", x), [&] { return s + x.t; }, Map1(kF32, x, [sd](double v) { return sd + v; }));
    k.Expect(
        Call("s - x", x), [&] { return s - x.t; }, Map1(kF32, x, [sd](double v) { return sd - v; }));
    k.Expect(
        Call("s * x", x), [&] { return s * x.t; }, Map1(kF32, x, [sd](double v) { return sd * v; }));
    k.Expect(
        Call("s / x", x), [&] { return s / x.t; }, Map1(kF32, x, [sd](double v) { return sd / v; }));
    k.Expect(
        Call("x * static_scalar(s)", x), [&] { return x.t * static_scalar(sd); },
        Map1(kF32, x, [sd](double v) { return v * sd; }));
    k.Expect(
        Call("x * si", x), [&] { return x.t * si; }, Map1(kF32, x, [sid](double v) { return v * sid; }));
    k.Expect(
        Call("pow(x, 2)", x), [&] { return pow(x.t, Scalar(2)); },
        Map1(kF32, x, [](double v) { return std::pow(v, 2.0); }), kUlps);
    k.Expect(
        Call("pow(x, static 3)", x), [&] { return pow(x.t, Scalar::Static(3.0)); },
        Map1(kF32, x, [](double v) { return std::pow(v, 3.0); }), kUlps);
    k.Expect(
        Call("pow(x, s)", pos), [&] { return pow(pos.t, Scalar(s)); },
        Map1(kF32, pos, [sd](double v) { return std::pow(v, sd); }), kUlps);
    k.Expect(
        Call("gt(x, s)", x), [&] { return gt(x.t, Scalar(s)); },
        Map1(kBool, x, [sd](double v) { return v > sd ? 1.0 : 0.0; }));
    k.Expect(
        Call("lt(x, s)", x), [&] { return lt(x.t, Scalar(s)); },
        Map1(kBool, x, [sd](double v) { return v < sd ? 1.0 : 0.0; }));
    k.Expect(
        Call("ge(x, s)", x), [&] { return ge(x.t, Scalar(s)); },
        Map1(kBool, x, [sd](double v) { return v >= sd ? 1.0 : 0.0; }));
    k.Expect(
        Call("le(x, s)", x), [&] { return le(x.t, Scalar(s)); },
        Map1(kBool, x, [sd](double v) { return v <= sd ? 1.0 : 0.0; }));
    k.Expect(
        Call("eq(x, si)", xi), [&] { return eq(xi.t, Scalar(si)); },
        Map1(kBool, xi, [sid](double v) { return v == sid ? 1.0 : 0.0; }));
    k.Expect(
        Call("ne(x, si)", xi), [&] { return ne(xi.t, Scalar(si)); },
        Map1(kBool, xi, [sid](double v) { return v != sid ? 1.0 : 0.0; }));
    // An integer tensor keeps its dtype with an integral scalar; a fractional one (or division) is f32.
    k.Expect(
        Call("x + si", xi), [&] { return xi.t + si; }, Map1(kI64, xi, [sid](double v) { return v + sid; }));
    k.Expect(
        Call("x * si", xi), [&] { return xi.t * si; }, Map1(kI64, xi, [sid](double v) { return v * sid; }));
    k.Expect(
        Call("si - x", xi), [&] { return si - xi.t; }, Map1(kI64, xi, [sid](double v) { return sid - v; }));
    k.Expect(
        Call("x * 0.5", xi), [&] { return xi.t * 0.5; }, Map1(kF32, xi, [](double v) { return v * 0.5; }));
    k.Expect(
        Call("x / 2", xi), [&] { return xi.t / 2; }, Map1(kF32, xi, [](double v) { return v / 2; }));
    k.Expect(
        Call("gt(x, si)", xi), [&] { return gt(xi.t, Scalar(si)); },
        Map1(kBool, xi, [sid](double v) { return v > sid ? 1.0 : 0.0; }));
    k.Expect(
        Call("lt(x, 0.5)", xi), [&] { return lt(xi.t, Scalar(0.5)); },
        Map1(kBool, xi, [](double v) { return v < 0.5 ? 1.0 : 0.0; }));
    k.Check();
  }
}

double Bool(bool b) { return b ? 1.0 : 0.0; }
double Eq(double a, double b) { return Bool(a == b); }
double Ne(double a, double b) { return Bool(a != b); }
double Lt(double a, double b) { return Bool(a < b); }
double Le(double a, double b) { return Bool(a <= b); }
double Gt(double a, double b) { return Bool(a > b); }
double Ge(double a, double b) { return Bool(a >= b); }

TEST(OpsReference, ComparisonsLogicalAndWhere) {
  Rng rng(4004);
  for (int c = 0; c < kBroadcastCases; ++c) {
    const std::pair<Dims, Dims> shapes = BroadcastPair(rng, c);
    const Dims& ad = shapes.first;
    const Dims& bd = shapes.second;
    const int64_t na = Numel(ad), nb = Numel(bd);
    // Mostly small integers, so that equal elements meet often.
    const Host a = MakeHost(kF32, ad, rng.Mixed(na, -2, 2, 0.7));
    const Host b = MakeHost(kF32, bd, rng.Mixed(nb, -2, 2, 0.7));
    const Host ia = MakeHost(kI64, ad, rng.Ints(na, -2, 2));
    const Host ib = MakeHost(kI64, bd, rng.Ints(nb, -2, 2));
    const Dims cd = rng.BroadcastableTo(Broadcast(ad, bd));
    const Host cond = Positive(MakeHost(kF32, cd, rng.Mixed(Numel(cd), -1, 1)));
    const Host pa = Positive(a);
    const Host pb = Positive(b);
    Case k(Label("ComparisonsLogicalAndWhere", c));
    k.Expect(
        Call("eq", a, b), [&] { return eq(a.t, b.t); }, Map2(kBool, a, b, Eq));
    k.Expect(
        Call("ne", a, b), [&] { return ne(a.t, b.t); }, Map2(kBool, a, b, Ne));
    k.Expect(
        Call("lt", a, b), [&] { return lt(a.t, b.t); }, Map2(kBool, a, b, Lt));
    k.Expect(
        Call("le", a, b), [&] { return le(a.t, b.t); }, Map2(kBool, a, b, Le));
    k.Expect(
        Call("gt", a, b), [&] { return gt(a.t, b.t); }, Map2(kBool, a, b, Gt));
    k.Expect(
        Call("ge", a, b), [&] { return ge(a.t, b.t); }, Map2(kBool, a, b, Ge));
    k.Expect(
        Call("eq", ia, ib), [&] { return eq(ia.t, ib.t); }, Map2(kBool, ia, ib, Eq));
    k.Expect(
        Call("lt", ia, ib), [&] { return lt(ia.t, ib.t); }, Map2(kBool, ia, ib, Lt));
    k.Expect(
        Call("ge", ia, ib), [&] { return ge(ia.t, ib.t); }, Map2(kBool, ia, ib, Ge));
    k.Expect(
        Call("le", a, ib), [&] { return le(a.t, ib.t); }, Map2(kBool, a, ib, Le));
    k.Expect(
        Call("ne", ia, b), [&] { return ne(ia.t, b.t); }, Map2(kBool, ia, b, Ne));
    k.Expect(
        Call("logical_and", pa, pb), [&] { return logical_and(pa.t, pb.t); },
        Map2(kBool, pa, pb, [](double x, double y) { return Bool(x != 0 && y != 0); }));
    k.Expect(
        Call("logical_or", pa, pb), [&] { return logical_or(pa.t, pb.t); },
        Map2(kBool, pa, pb, [](double x, double y) { return Bool(x != 0 || y != 0); }));
    k.Expect(
        Call("logical_not", pa), [&] { return logical_not(pa.t); },
        Map1(kBool, pa, [](double x) { return Bool(x == 0); }));
    const auto pick = [](double q, double x, double y) { return q != 0 ? x : y; };
    k.Expect(
        Call("where", cond, a, b), [&] { return where(cond.t, a.t, b.t); }, Map3(kF32, cond, a, b, pick));
    k.Expect(
        Call("where", cond, a, ib), [&] { return where(cond.t, a.t, ib.t); }, Map3(kF32, cond, a, ib, pick));
    k.Expect(
        Call("where", cond, ia, ib), [&] { return where(cond.t, ia.t, ib.t); }, Map3(kI64, cond, ia, ib, pick));
    k.Expect(
        Call("where", pa, b, a), [&] { return where(pa.t, b.t, a.t); }, Map3(kF32, pa, b, a, pick));
    k.Check();
  }
}

TEST(OpsReference, Cast) {
  Rng rng(5005);
  for (int c = 0; c < kCases; ++c) {
    const Dims dims = rng.RandomDims();
    const int64_t n = Numel(dims);
    Values xv(Ix(n));
    for (double& v : xv) v = rng.Chance(0.5) ? static_cast<double>(rng.Int(-64, 64)) / 8 : rng.Real(-5, 5);
    const Host x = MakeHost(kF32, dims, xv);
    const Host xi = MakeHost(kI64, dims, rng.Ints(n, -100, 100));
    const Host ji = MakeHost(kI32, dims, rng.Ints(n, -100, 100));
    const Host xd = MakeHost(kF64, dims, rng.Reals(n, -5, 5));
    const Host px = Positive(x);
    const auto same = [](double v) { return v; };
    const auto trunc = [](double v) { return std::trunc(v); };
    const auto nonzero = [](double v) { return Bool(v != 0); };
    Case k(Label("Cast", c));
    k.Expect(
        Call("cast f64", x), [&] { return cast(x.t, kF64); }, Map1(kF64, x, same));
    k.Expect(
        Call("Tensor::to f64", x), [&] { return x.t.to(kF64); }, Map1(kF64, x, same));
    k.Expect(
        Call("cast f32", x), [&] { return cast(x.t, kF32); }, Map1(kF32, x, same));
    k.Expect(
        Call("cast i64", x), [&] { return cast(x.t, kI64); }, Map1(kI64, x, trunc));
    k.Expect(
        Call("cast i32", x), [&] { return cast(x.t, kI32); }, Map1(kI32, x, trunc));
    k.Expect(
        Call("cast bool", x), [&] { return cast(x.t, kBool); }, Map1(kBool, x, nonzero));
    k.Expect(
        Call("cast bf16", x), [&] { return cast(x.t, kBF16); }, Map1(kBF16, x, same));
    k.Expect(
        Call("cast bf16 then f32", x), [&] { return cast(cast(x.t, kBF16), kF32); }, Map1(kF32, x, RoundBf16));
    k.Expect(
        Call("cast f16", x), [&] { return cast(x.t, kF16); }, Map1(kF16, x, same), kHalfTol);
    k.Expect(
        Call("cast f32", xi), [&] { return cast(xi.t, kF32); }, Map1(kF32, xi, same));
    k.Expect(
        Call("cast f64", xi), [&] { return cast(xi.t, kF64); }, Map1(kF64, xi, same));
    k.Expect(
        Call("cast i32", xi), [&] { return cast(xi.t, kI32); }, Map1(kI32, xi, same));
    k.Expect(
        Call("cast bool", xi), [&] { return cast(xi.t, kBool); }, Map1(kBool, xi, nonzero));
    k.Expect(
        Call("cast i64", ji), [&] { return cast(ji.t, kI64); }, Map1(kI64, ji, same));
    k.Expect(
        Call("cast f32", ji), [&] { return cast(ji.t, kF32); }, Map1(kF32, ji, same));
    k.Expect(
        Call("cast f32", px), [&] { return cast(px.t, kF32); }, Map1(kF32, px, same));
    k.Expect(
        Call("cast i64", px), [&] { return cast(px.t, kI64); }, Map1(kI64, px, same));
    k.Expect(
        Call("cast f32", xd), [&] { return cast(xd.t, kF32); }, Map1(kF32, xd, same));  // rounded to nearest
    k.Expect(
        Call("cast i64", xd), [&] { return cast(xd.t, kI64); }, Map1(kI64, xd, trunc));
    k.Check();
  }
}

// ---- Contractions ---------------------------------------------------------------------------------

// Operand shapes of matmul: hand-picked pairs first (1-D operands, broadcast batches, empty
// dimensions), then random ranks 1 to 4 with broadcastable batch dimensions.
std::pair<Dims, Dims> MatmulShapes(Rng& rng, int c) {
  const std::vector<std::pair<Dims, Dims>> picked = {
      {{2, 3, 4}, {4, 5}}, {{4}, {4}},       {{3, 1, 2, 4}, {5, 4, 3}}, {{0, 3}, {3, 2}},
      {{2, 0}, {0, 3}},    {{4}, {2, 4, 3}}, {{2, 3, 4}, {4}},          {{1, 2, 3}, {2, 3, 1}}};
  if (Ix(c) < picked.size()) return picked[Ix(c)];
  const int64_t m = rng.Dim(), k = rng.Dim(), n = rng.Dim();
  const int64_t rank_a = rng.Int(1, 4), rank_b = rng.Int(1, 4);
  Dims batch(Ix(std::max<int64_t>({0, rank_a - 2, rank_b - 2})));
  for (int64_t& d : batch) d = rng.Dim(3);
  const auto batch_of = [&](int64_t rank) {
    Dims d(batch.end() - (rank - 2), batch.end());
    for (int64_t& v : d) {
      if (rng.Chance(0.3)) v = 1;
    }
    return d;
  };
  Dims a = rank_a == 1 ? Dims{k} : batch_of(rank_a);
  if (rank_a > 1) a.insert(a.end(), {m, k});
  Dims b = rank_b == 1 ? Dims{k} : batch_of(rank_b);
  if (rank_b > 1) b.insert(b.end(), {k, n});
  return {a, b};
}

// numpy.matmul on host data. slack[i] = eps * sum |a b| over the products summed into element i.
Reference MatmulRef(DType dtype, const Host& a, const Host& b, double eps) {
  const bool row = a.dims.size() == 1, col = b.dims.size() == 1;
  const Dims a_batch = row ? Dims{} : Dims(a.dims.begin(), a.dims.end() - 2);
  const Dims b_batch = col ? Dims{} : Dims(b.dims.begin(), b.dims.end() - 2);
  const int64_t m = row ? 1 : a.dims[a.dims.size() - 2];
  const int64_t k = a.dims.back();
  const int64_t n = col ? 1 : b.dims.back();
  const Dims batch = Broadcast(a_batch, b_batch);
  Dims dims = batch;
  if (!row) dims.push_back(m);
  if (!col) dims.push_back(n);
  Reference r(dtype, dims);
  r.slack.assign(r.values.size(), 0);
  for (int64_t bi = 0; bi < Numel(batch); ++bi) {
    const Dims at = Unravel(bi, batch);
    const int64_t sa = SourceOf(at, a_batch), sb = SourceOf(at, b_batch);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0, magnitude = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double product = a.values[Ix((sa * m + i) * k + p)] * b.values[Ix((sb * k + p) * n + j)];
          acc += product;
          magnitude += std::abs(product);
        }
        r.values[Ix((bi * m + i) * n + j)] = acc;
        r.slack[Ix((bi * m + i) * n + j)] = eps * magnitude;
      }
    }
  }
  return r;
}

Dims SwapLastTwo(Dims dims) {
  std::swap(dims[dims.size() - 2], dims[dims.size() - 1]);
  return dims;
}

TEST(OpsReference, Matmul) {
  Rng rng(6006);
  for (int c = 0; c < kMatmulCases; ++c) {
    const std::pair<Dims, Dims> shapes = MatmulShapes(rng, c);
    const Dims& ad = shapes.first;
    const Dims& bd = shapes.second;
    const int64_t na = Numel(ad), nb = Numel(bd);
    const Host ae = MakeHost(kF32, ad, rng.Eighths(na, -2, 2));
    const Host be = MakeHost(kF32, bd, rng.Eighths(nb, -2, 2));
    const Host ar = MakeHost(kF32, ad, rng.Reals(na, -1, 1));
    const Host br = MakeHost(kF32, bd, rng.Reals(nb, -1, 1));
    const Host ad64 = MakeHost(kF64, ad, rng.Reals(na, -1, 1));
    const Host bd64 = MakeHost(kF64, bd, rng.Reals(nb, -1, 1));
    Case k(Label("Matmul", c));
    // Eighths: every partial sum is exact, so any summation order gives the exact product.
    k.Expect(
        Call("matmul", ae, be), [&] { return matmul(ae.t, be.t); }, MatmulRef(kF32, ae, be, 0));
    k.Expect(
        Call("matmul", ar, br), [&] { return matmul(ar.t, br.t); }, MatmulRef(kF32, ar, br, 1e-5), kSlack);
    k.Expect(
        Call("matmul", ad64, bd64), [&] { return matmul(ad64.t, bd64.t); }, MatmulRef(kF64, ad64, bd64, 1e-13),
        kDoubleSlack);
    // Transposed operands (the lowering may fold the transpose into the product).
    if (ad.size() >= 2) {
      const Host at = MakeHost(kF32, SwapLastTwo(ad), rng.Eighths(na, -2, 2));
      const Host a_of_at = Derived(PermuteRef(at, SwapLastTwo(Identity(Rank(ad)))));
      k.Expect(
          Call("matmul(transpose(a, -1, -2), b)", at, be), [&] { return matmul(transpose(at.t, -1, -2), be.t); },
          MatmulRef(kF32, a_of_at, be, 0));
    }
    if (bd.size() >= 2) {
      const Host bt = MakeHost(kF32, SwapLastTwo(bd), rng.Eighths(nb, -2, 2));
      const Host b_of_bt = Derived(PermuteRef(bt, SwapLastTwo(Identity(Rank(bd)))));
      k.Expect(
          Call("matmul(a, transpose(b, -2, -1))", ae, bt), [&] { return matmul(ae.t, transpose(bt.t, -2, -1)); },
          MatmulRef(kF32, ae, b_of_bt, 0));
    }
    k.Check();
  }
}

// ---- Reductions -----------------------------------------------------------------------------------

// A reduction of `in` over `dims` (either sign; empty = all dimensions).
struct Reduction {
  Dims out_dims;
  std::vector<int64_t> target;  // the output element each input element goes to
  int64_t count = 1;            // input elements per output element
};

Reduction ReductionOf(const Dims& in, const Dims& dims, bool keepdim) {
  const int64_t rank = Rank(in);
  std::vector<bool> reduced(Ix(rank), dims.empty());
  for (int64_t d : dims) reduced[Ix(Norm(d, rank))] = true;
  Reduction r;
  Dims kept;  // the output dims with the reduced ones kept as 1
  for (int64_t d = 0; d < rank; ++d) {
    const bool gone = reduced[Ix(d)];
    kept.push_back(gone ? 1 : in[Ix(d)]);
    if (!gone || keepdim) r.out_dims.push_back(gone ? 1 : in[Ix(d)]);
    if (gone) r.count *= in[Ix(d)];
  }
  for (int64_t i = 0; i < Numel(in); ++i) {
    Dims at = Unravel(i, in);
    for (int64_t d = 0; d < rank; ++d) {
      if (reduced[Ix(d)]) at[Ix(d)] = 0;
    }
    r.target.push_back(Ravel(at, kept));
  }
  return r;
}

// slack[i] = eps * sum |x| over the elements summed into i.
Reference SumRef(DType dtype, const Host& x, const Reduction& r, double eps) {
  Reference out(dtype, r.out_dims);
  out.slack.assign(out.values.size(), 0);
  for (size_t i = 0; i < x.values.size(); ++i) {
    out.values[Ix(r.target[i])] += x.values[i];
    out.slack[Ix(r.target[i])] += eps * std::abs(x.values[i]);
  }
  return out;
}

// The mean of no elements is NaN (0 / 0), as in PyTorch.
Reference MeanRef(const Host& x, const Reduction& r, double eps) {
  Reference out = SumRef(x.dtype, x, r, eps);
  for (size_t i = 0; i < out.values.size(); ++i) {
    out.values[i] /= static_cast<double>(r.count);
    out.slack[i] /= static_cast<double>(r.count);
  }
  return out;
}

// The max of no elements is -inf (the identity of max).
Reference MaxRef(const Host& x, const Reduction& r) {
  Reference out(x.dtype, r.out_dims);
  std::fill(out.values.begin(), out.values.end(), -kInf);
  for (size_t i = 0; i < x.values.size(); ++i) {
    double& best = out.values[Ix(r.target[i])];
    best = std::max(best, x.values[i]);
  }
  return out;
}

// The min of no elements is +inf (the identity of min).
Reference MinRef(const Host& x, const Reduction& r) {
  Reference out(x.dtype, r.out_dims);
  std::fill(out.values.begin(), out.values.end(), kInf);
  for (size_t i = 0; i < x.values.size(); ++i) {
    double& best = out.values[Ix(r.target[i])];
    best = std::min(best, x.values[i]);
  }
  return out;
}

// The product of no elements is 1. Computed in f64, as lazyrt accumulates f32 products.
Reference ProdRef(DType dtype, const Host& x, const Reduction& r) {
  Reference out(dtype, r.out_dims);
  std::fill(out.values.begin(), out.values.end(), 1.0);
  for (size_t i = 0; i < x.values.size(); ++i) out.values[Ix(r.target[i])] *= x.values[i];
  return out;
}

// The index of the first largest element along `dim`.
Reference ArgmaxRef(const Host& x, int64_t dim, bool keepdim) {
  const int64_t d = Norm(dim, Rank(x.dims));
  const Reduction r = ReductionOf(x.dims, Dims{d}, keepdim);
  Reference out(kI64, r.out_dims);
  Values best(out.values.size(), -kInf);
  for (int64_t i = 0; i < Numel(x.dims); ++i) {
    const size_t t = Ix(r.target[Ix(i)]);
    if (x.values[Ix(i)] > best[t]) {
      best[t] = x.values[Ix(i)];
      out.values[t] = static_cast<double>(Unravel(i, x.dims)[Ix(d)]);
    }
  }
  return out;
}

TEST(OpsReference, Reductions) {
  Rng rng(7007);
  for (int c = 0; c < kReductionCases; ++c) {
    const Dims dims = rng.RandomDims();
    const int64_t rank = Rank(dims), n = Numel(dims);
    Dims picked;  // the reduced dims, in any order, some negative; none means all
    for (int64_t d = 0; d < rank; ++d) {
      if (rng.Chance(0.5)) picked.push_back(d);
    }
    std::shuffle(picked.begin(), picked.end(), rng.engine());
    for (int64_t& d : picked) {
      if (rng.Chance(0.3)) d -= rank;
    }
    const Host x = MakeHost(kF32, dims, rng.Reals(n, -3, 3));
    const Host xe = MakeHost(kF32, dims, rng.Eighths(n, -4, 4));
    const Host xt = MakeHost(kF32, dims, rng.Ints(n, -2, 2));  // ties for argmax
    const Host xi = MakeHost(kI64, dims, rng.Ints(n, -50, 50));
    const Host px = Positive(x);
    const Host near1 = MakeHost(kF32, dims, rng.Reals(n, 0.8, 1.25));  // products that stay in range
    const Host signs = MakeHost(kI64, dims, rng.Ints(n, -1, 1));
    Case k(Label("Reductions", c));
    for (bool keep : {false, true}) {
      const std::string how = " dims=" + DimsText(picked) + " keepdim=" + (keep ? "true" : "false");
      const Reduction r = ReductionOf(dims, picked, keep);
      k.Expect(
          Call("sum", x) + how, [&] { return sum(x.t, picked, keep); }, SumRef(kF32, x, r, 1e-5), kSlack);
      k.Expect(
          Call("sum", xe) + how, [&] { return sum(xe.t, picked, keep); }, SumRef(kF32, xe, r, 0));
      k.Expect(
          Call("mean", x) + how, [&] { return mean(x.t, picked, keep); }, MeanRef(x, r, 1e-5), kLoose);
      k.Expect(
          Call("mean", xe) + how, [&] { return mean(xe.t, picked, keep); }, MeanRef(xe, r, 0), kUlps);
      if (r.count > 0) {
        k.Expect(
            Call("max", x) + how, [&] { return max(x.t, picked, keep); }, MaxRef(x, r));
        k.Expect(
            Call("min", x) + how, [&] { return min(x.t, picked, keep); }, MinRef(x, r));
        k.Expect(
            Call("max", xi) + how, [&] { return max(xi.t, picked, keep); }, MaxRef(xi, r));
      } else {  // the max or min of nothing: refused, as PyTorch does
        EXPECT_THROW(max(x.t, picked, keep), Error) << Label("Reductions", c) << how;
        EXPECT_THROW(min(x.t, picked, keep), Error) << Label("Reductions", c) << how;
        EXPECT_THROW(max(xi.t, picked, keep), Error) << Label("Reductions", c) << how;
      }
      k.Expect(
          Call("prod", near1) + how, [&] { return prod(near1.t, picked, keep); }, ProdRef(kF32, near1, r), kUlps);
      k.Expect(
          Call("prod", signs) + how, [&] { return prod(signs.t, picked, keep); }, ProdRef(kI64, signs, r));
      k.Expect(
          Call("sum", xi) + how, [&] { return sum(xi.t, picked, keep); }, SumRef(kI64, xi, r, 0));
      k.Expect(
          Call("sum", px) + how, [&] { return sum(px.t, picked, keep); }, SumRef(kI64, px, r, 0));
    }
    const std::string how = " dims=" + DimsText(picked);
    k.Expect(
        Call("Tensor::sum", x) + how, [&] { return x.t.sum(picked); },
        SumRef(kF32, x, ReductionOf(dims, picked, false), 1e-5), kSlack);
    k.Expect(
        Call("Tensor::mean", x) + how + " keepdim=true", [&] { return x.t.mean(picked, true); },
        MeanRef(x, ReductionOf(dims, picked, true), 1e-5), kLoose);
    const Reduction all = ReductionOf(dims, Dims{}, false);
    k.Expect(
        Call("sum", xe) + " (all)", [&] { return sum(xe.t); }, SumRef(kF32, xe, all, 0));
    k.Expect(
        Call("mean", x) + " (all)", [&] { return mean(x.t); }, MeanRef(x, all, 1e-5), kLoose);
    if (Numel(dims) > 0) {
      k.Expect(
          Call("max", x) + " (all)", [&] { return max(x.t); }, MaxRef(x, all));
    } else {
      EXPECT_THROW(max(x.t), Error) << Label("Reductions", c) << " max (all) of " << DimsText(dims);
    }
    Dims nonempty;  // argmax needs a dimension with elements
    for (int64_t d = 0; d < rank; ++d) {
      if (dims[Ix(d)] > 0) nonempty.push_back(d);
    }
    if (!nonempty.empty()) {
      int64_t d = nonempty[Ix(rng.Int(0, Rank(nonempty) - 1))];
      if (rng.Chance(0.4)) d -= rank;
      for (bool keep : {false, true}) {
        const std::string how_arg = " dim=" + std::to_string(d) + " keepdim=" + (keep ? "true" : "false");
        k.Expect(
            Call("argmax", xt) + how_arg, [&] { return argmax(xt.t, d, keep); }, ArgmaxRef(xt, d, keep));
        k.Expect(
            Call("argmax", xi) + how_arg, [&] { return argmax(xi.t, d, keep); }, ArgmaxRef(xi, d, keep));
      }
    }
    const Tensor total = sum(xe.t);  // computed with the rest; item() then reads the stored value
    k.Check();
    try {
      EXPECT_EQ(total.item(), SumRef(kF32, xe, all, 0).values[0])
          << Label("Reductions", c) << ": item() of " << Call("sum", xe);
    } catch (const std::exception& e) {
      ADD_FAILURE() << Label("Reductions", c) << ": item() of " << Call("sum", xe) << " threw: " << e.what();
    }
  }
}

// ---- Softmax and composites -----------------------------------------------------------------------

Reference SoftmaxRef(const Host& x, int64_t dim, bool take_log) {
  const int64_t rank = Rank(x.dims);
  const int64_t d = Norm(dim, rank);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x.dims[Ix(i)];
  for (int64_t i = d + 1; i < rank; ++i) inner *= x.dims[Ix(i)];
  const int64_t size = x.dims[Ix(d)];
  Reference out(x.dtype, x.dims);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const auto at = [&](int64_t a) { return Ix((o * size + a) * inner + i); };
      double top = -kInf;
      for (int64_t a = 0; a < size; ++a) top = std::max(top, x.values[at(a)]);
      double total = 0;
      for (int64_t a = 0; a < size; ++a) total += std::exp(x.values[at(a)] - top);
      for (int64_t a = 0; a < size; ++a) {
        const double shifted = x.values[at(a)] - top;
        out.values[at(a)] = take_log ? shifted - std::log(total) : std::exp(shifted) / total;
      }
    }
  }
  return out;
}

// Mean over rows of -log_softmax(logits)[row, label[row]].
Reference CrossEntropyRef(const Host& logits, const Host& labels) {
  const Reference ls = SoftmaxRef(logits, 1, true);
  const int64_t rows = logits.dims[0], classes = logits.dims[1];
  double total = 0;
  for (int64_t i = 0; i < rows; ++i) total += ls.values[Ix(i * classes + static_cast<int64_t>(labels.values[Ix(i)]))];
  Reference out(logits.dtype, Dims{});
  out.values[0] = -total / static_cast<double>(rows);
  return out;
}

TEST(OpsReference, SoftmaxLogSoftmaxAndCrossEntropy) {
  Rng rng(8008);
  for (int c = 0; c < kCases; ++c) {
    const Dims dims = rng.RandomDims(1, 4);
    const int64_t rank = Rank(dims), n = Numel(dims);
    const double scale = c % 4 == 3 ? 25 : 3;  // wide ranges check the max-shift
    const Host x = MakeHost(kF32, dims, rng.Reals(n, -scale, scale));
    const Host xd = MakeHost(kF64, dims, rng.Reals(n, -3, 3));
    const int64_t d = rng.Int(-rank, rank - 1);
    const std::string how = " dim=" + std::to_string(d);
    const int64_t rows = rng.Dim(), classes = rng.Int(1, 5);
    const Host logits = MakeHost(kF32, Dims{rows, classes}, rng.Reals(rows * classes, -3, 3));
    const Host labels = MakeHost(kI64, Dims{rows}, rng.Ints(rows, 0, classes - 1));
    Case k(Label("SoftmaxLogSoftmaxAndCrossEntropy", c));
    k.Expect(
        Call("softmax", x) + how, [&] { return softmax(x.t, d); }, SoftmaxRef(x, d, false), kSoftmaxTol);
    k.Expect(
        Call("log_softmax", x) + how, [&] { return log_softmax(x.t, d); }, SoftmaxRef(x, d, true), kLogSoftmaxTol);
    k.Expect(
        Call("softmax", xd) + how, [&] { return softmax(xd.t, d); }, SoftmaxRef(xd, d, false), kDoubleTol);
    k.Expect(
        Call("log_softmax", xd) + how, [&] { return log_softmax(xd.t, d); }, SoftmaxRef(xd, d, true), kDoubleTol);
    k.Expect(
        Call("nn::cross_entropy", logits, labels), [&] { return nn::cross_entropy(logits.t, labels.t); },
        CrossEntropyRef(logits, labels), kLogSoftmaxTol);
    k.Check();
  }
}

// y = x W^T + b over the last dimension of x (W is [out, in]), then relu if asked.
Values LinearRows(const Values& x, int64_t rows, int64_t in, const Values& w, const Values& b, int64_t out,
                  bool then_relu) {
  Values y(Ix(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[Ix(o)];
      for (int64_t i = 0; i < in; ++i) acc += x[Ix(r * in + i)] * w[Ix(o * in + i)];
      y[Ix(r * out + o)] = then_relu ? std::max(acc, 0.0) : acc;
    }
  }
  return y;
}

Values HostValues(const Tensor& t) { return Widen(t.to_vector<float>()); }

TEST(OpsReference, NnLinearAndMlp) {
  Rng rng(9009);
  NoGradGuard no_grad;
  for (int c = 0; c < 8; ++c) {
    const int64_t in = rng.Int(1, 5), hidden = rng.Int(1, 5), out = rng.Int(1, 5);
    Dims xdims = rng.RandomDims(0, 2, 16);
    xdims.push_back(in);
    const int64_t rows = Numel(xdims) / in;
    const Host x = MakeHost(kF32, xdims, rng.Reals(Numel(xdims), -2, 2));
    nn::Linear linear(in, out, rng.engine());
    nn::MLP mlp({in, hidden, out}, rng.engine());
    const std::vector<Tensor> lp = linear.parameters();
    const std::vector<Tensor> mp = mlp.parameters();  // W1, b1, W2, b2
    Dims ydims = xdims;
    ydims.back() = out;
    Reference want_linear(kF32, ydims);
    want_linear.values = LinearRows(x.values, rows, in, HostValues(lp[0]), HostValues(lp[1]), out, false);
    Reference want_mlp(kF32, ydims);
    const Values h = LinearRows(x.values, rows, in, HostValues(mp[0]), HostValues(mp[1]), hidden, true);
    want_mlp.values = LinearRows(h, rows, hidden, HostValues(mp[2]), HostValues(mp[3]), out, false);
    const std::string sizes =
        " in=" + std::to_string(in) + " hidden=" + std::to_string(hidden) + " out=" + std::to_string(out);
    Case k(Label("NnLinearAndMlp", c));
    k.Expect(
        Call("nn::Linear", x) + sizes, [&] { return linear(x.t); }, want_linear, kNnTol);
    k.Expect(
        Call("nn::MLP", x) + sizes, [&] { return mlp(x.t); }, want_mlp, kNnTol);
    k.Check();
  }
}

// ---- Shape and data movement ----------------------------------------------------------------------

// Sizes for reshape: n's prime factors spread over up to four dimensions, one of them -1 now and then;
// with no elements, the dimensions shuffled and a 1 inserted.
Dims ReshapeTarget(Rng& rng, const Dims& in) {
  const int64_t n = Numel(in);
  Dims out;
  if (n == 0) {
    out = in;
    std::shuffle(out.begin(), out.end(), rng.engine());
    if (out.size() < 4 && rng.Chance(0.5)) out.insert(out.begin() + rng.Int(0, Rank(out)), int64_t{1});
    return out;
  }
  const int64_t rank = n == 1 ? rng.Int(0, 3) : rng.Int(1, 4);
  out.assign(Ix(rank), 1);
  int64_t rest = n;
  for (int64_t p = 2; rest > 1; ++p) {
    while (rest % p == 0) {
      out[Ix(rng.Int(0, rank - 1))] *= p;
      rest /= p;
    }
  }
  if (rank > 0 && rng.Chance(0.4)) out[Ix(rng.Int(0, rank - 1))] = -1;
  return out;
}

Dims Resolved(Dims sizes, int64_t n) {
  int64_t known = 1;
  int64_t* inferred = nullptr;
  for (int64_t& s : sizes) {
    if (s == -1) {
      inferred = &s;
    } else {
      known *= s;
    }
  }
  if (inferred != nullptr) *inferred = n / known;
  return sizes;
}

Reference WithDims(const Host& x, const Dims& dims) {
  Reference r(x.dtype, dims);
  r.values = x.values;
  return r;
}

TEST(OpsReference, Reshape) {
  Rng rng(10010);
  for (int c = 0; c < kCases; ++c) {
    const Dims dims = rng.RandomDims();
    const int64_t rank = Rank(dims), n = Numel(dims);
    const Host x = MakeHost(kF32, dims, rng.Mixed(n, -4, 4));
    const Host xi = MakeHost(kI64, dims, rng.Ints(n, -9, 9));
    const Dims target = ReshapeTarget(rng, dims);
    const Dims resolved = Resolved(target, n);
    const std::string to = " to " + DimsText(target);
    Case k(Label("Reshape", c));
    k.Expect(
        Call("reshape", x) + to, [&] { return reshape(x.t, target); }, WithDims(x, resolved));
    k.Expect(
        Call("Tensor::reshape", x) + to, [&] { return x.t.reshape(target); }, WithDims(x, resolved));
    k.Expect(
        Call("reshape", xi) + to, [&] { return reshape(xi.t, target); }, WithDims(xi, resolved));
    k.Expect(
        Call("reshape", x) + " to [-1]", [&] { return reshape(x.t, {-1}); }, WithDims(x, Dims{n}));
    k.Expect(
        Call("reshape(exp)", x) + to, [&] { return reshape(exp(x.t), target); },
        WithDims(Derived(Map1(kF32, x, Exp)), resolved), kUlps);
    if (rank >= 2) {  // a transposed input: the elements move
      Dims perm = Identity(rank);
      std::swap(perm.front(), perm.back());
      k.Expect(
          Call("reshape(transpose(x, 0, -1))", x) + to, [&] { return reshape(transpose(x.t, 0, -1), target); },
          WithDims(Derived(PermuteRef(x, perm)), resolved));
    }
    k.Check();
  }
}

TEST(OpsReference, TransposeAndPermute) {
  Rng rng(11011);
  for (int c = 0; c < kCases; ++c) {
    const Dims dims = rng.RandomDims();
    const int64_t rank = Rank(dims), n = Numel(dims);
    const Host x = MakeHost(kF32, dims, rng.Mixed(n, -4, 4));
    const Host xi = MakeHost(kI64, dims, rng.Ints(n, -9, 9));
    const Dims perm = RandomPerm(rng, rank);
    Dims signed_perm = perm;
    for (int64_t& p : signed_perm) {
      if (rng.Chance(0.3)) p -= rank;
    }
    const Dims perm2 = RandomPerm(rng, rank);
    const std::string how = " perm=" + DimsText(signed_perm);
    Case k(Label("TransposeAndPermute", c));
    k.Expect(
        Call("permute", x) + how, [&] { return permute(x.t, signed_perm); }, PermuteRef(x, perm));
    k.Expect(
        Call("permute", xi) + how, [&] { return permute(xi.t, signed_perm); }, PermuteRef(xi, perm));
    k.Expect(
        Call("neg(permute)", x) + how, [&] { return neg(permute(x.t, signed_perm)); },
        Map1(kF32, Derived(PermuteRef(x, perm)), Negate));
    k.Expect(
        Call("permute(permute)", x) + how + " then " + DimsText(perm2),
        [&] { return permute(permute(x.t, signed_perm), perm2); }, PermuteRef(Derived(PermuteRef(x, perm)), perm2));
    if (rank >= 1) {
      const int64_t d0 = rng.Int(-rank, rank - 1), d1 = rng.Int(-rank, rank - 1);
      Dims swapped = Identity(rank);
      std::swap(swapped[Ix(Norm(d0, rank))], swapped[Ix(Norm(d1, rank))]);
      const std::string which = " dims " + std::to_string(d0) + "," + std::to_string(d1);
      k.Expect(
          Call("transpose", x) + which, [&] { return transpose(x.t, d0, d1); }, PermuteRef(x, swapped));
      k.Expect(
          Call("Tensor::transpose", x) + which, [&] { return x.t.transpose(d0, d1); }, PermuteRef(x, swapped));
      k.Expect(
          Call("transpose", xi) + which, [&] { return transpose(xi.t, d0, d1); }, PermuteRef(xi, swapped));
    }
    k.Check();
  }
}

Reference ExpandRef(const Host& x, const Dims& dims) {
  Reference r(x.dtype, dims);
  for (int64_t i = 0; i < Numel(dims); ++i) r.values[Ix(i)] = x.values[Ix(SourceOf(Unravel(i, dims), x.dims))];
  return r;
}

TEST(OpsReference, Expand) {
  Rng rng(12012);
  for (int c = 0; c < kCases; ++c) {
    Dims dims = rng.RandomDims(0, 3, 64);
    for (int64_t& d : dims) {
      if (rng.Chance(0.4)) d = 1;
    }
    // New leading dimensions; 1s grown (to 0 now and then); -1 keeps a dimension.
    Dims sizes, out;
    const int64_t lead = rng.Int(0, 4 - Rank(dims));
    for (int64_t i = 0; i < lead; ++i) {
      sizes.push_back(rng.Dim(3));
      out.push_back(sizes.back());
    }
    for (int64_t d : dims) {
      const int64_t s = (d == 1 && rng.Chance(0.6)) ? rng.Dim(4) : d;
      out.push_back(s);
      sizes.push_back((s == d && rng.Chance(0.3)) ? int64_t{-1} : s);
    }
    const int64_t n = Numel(dims);
    const Host x = MakeHost(kF32, dims, rng.Mixed(n, -4, 4));
    const Host xi = MakeHost(kI64, dims, rng.Ints(n, -9, 9));
    const std::string to = " to " + DimsText(sizes);
    Case k(Label("Expand", c));
    k.Expect(
        Call("expand", x) + to, [&] { return expand(x.t, sizes); }, ExpandRef(x, out));
    k.Expect(
        Call("expand", xi) + to, [&] { return expand(xi.t, sizes); }, ExpandRef(xi, out));
    k.Expect(
        Call("expand(neg)", x) + to, [&] { return expand(neg(x.t), sizes); },
        ExpandRef(Derived(Map1(kF32, x, Negate)), out));
    k.Expect(
        Call("expand * 2", x) + to, [&] { return expand(x.t, sizes) * 2.0; },
        Map1(kF32, Derived(ExpandRef(x, out)), [](double v) { return v * 2; }));
    k.Check();
  }
}

// x[start:end:step] along `dim`, start and end clamped as Python slicing does.
Reference SliceRef(const Host& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  const int64_t d = Norm(dim, Rank(x.dims));
  const int64_t size = x.dims[Ix(d)];
  const auto clamp = [size](int64_t i) {
    if (i < 0) i += size;
    return std::clamp<int64_t>(i, 0, size);
  };
  const int64_t s = clamp(start), e = std::max(s, clamp(end));
  Dims dims = x.dims;
  dims[Ix(d)] = (e - s + step - 1) / step;
  Reference r(x.dtype, dims);
  for (int64_t i = 0; i < Numel(dims); ++i) {
    Dims at = Unravel(i, dims);
    at[Ix(d)] = s + at[Ix(d)] * step;
    r.values[Ix(i)] = x.values[Ix(Ravel(at, x.dims))];
  }
  return r;
}

struct SliceArgs {
  int64_t dim, start, end, step;
  std::string text() const {
    return " dim=" + std::to_string(dim) + " [" + std::to_string(start) + ":" + std::to_string(end) + ":" +
           std::to_string(step) + "]";
  }
};

SliceArgs RandomSlice(Rng& rng, const Dims& dims) {
  const int64_t rank = Rank(dims);
  const int64_t dim = rng.Int(-rank, rank - 1);
  const int64_t size = dims[Ix(Norm(dim, rank))];
  const int64_t start = rng.Int(-size - 2, size + 2);
  const int64_t end = rng.Chance(0.15) ? std::numeric_limits<int64_t>::max() : rng.Int(-size - 2, size + 2);
  return SliceArgs{dim, start, end, rng.Int(1, 3)};
}

TEST(OpsReference, Slice) {
  Rng rng(13013);
  for (int c = 0; c < kCases; ++c) {
    const Dims dims = rng.RandomDims(1, 4);
    const int64_t n = Numel(dims);
    const Host x = MakeHost(kF32, dims, rng.Mixed(n, -4, 4));
    const Host xi = MakeHost(kI64, dims, rng.Ints(n, -9, 9));
    const SliceArgs s = RandomSlice(rng, dims);
    const Reference first = SliceRef(x, s.dim, s.start, s.end, s.step);
    const SliceArgs s2 = RandomSlice(rng, first.dims);
    Case k(Label("Slice", c));
    k.Expect(
        Call("slice", x) + s.text(), [&] { return slice(x.t, s.dim, s.start, s.end, s.step); }, first);
    k.Expect(
        Call("slice", xi) + s.text(), [&] { return slice(xi.t, s.dim, s.start, s.end, s.step); },
        SliceRef(xi, s.dim, s.start, s.end, s.step));
    k.Expect(
        Call("slice (step 1 by default)", x) + s.text(), [&] { return slice(x.t, s.dim, s.start, s.end); },
        SliceRef(x, s.dim, s.start, s.end, 1));
    k.Expect(
        Call("slice(slice)", x) + s.text() + " then" + s2.text(),
        [&] { return slice(slice(x.t, s.dim, s.start, s.end, s.step), s2.dim, s2.start, s2.end, s2.step); },
        SliceRef(Derived(first), s2.dim, s2.start, s2.end, s2.step));
    k.Expect(
        Call("slice * 2", x) + s.text(), [&] { return slice(x.t, s.dim, s.start, s.end, s.step) * 2.0; },
        Map1(kF32, Derived(first), [](double v) { return v * 2; }));
    k.Check();
  }
}

Reference CatRef(const std::vector<Host>& parts, int64_t dim) {
  const int64_t d = Norm(dim, Rank(parts[0].dims));
  Dims dims = parts[0].dims;
  dims[Ix(d)] = 0;
  for (const Host& p : parts) dims[Ix(d)] += p.dims[Ix(d)];
  Reference r(parts[0].dtype, dims);
  for (int64_t i = 0; i < Numel(dims); ++i) {
    Dims at = Unravel(i, dims);
    size_t p = 0;
    while (at[Ix(d)] >= parts[p].dims[Ix(d)]) {
      at[Ix(d)] -= parts[p].dims[Ix(d)];
      ++p;
    }
    r.values[Ix(i)] = parts[p].values[Ix(Ravel(at, parts[p].dims))];
  }
  return r;
}

std::vector<Tensor> TensorsOf(const std::vector<Host>& hosts) {
  std::vector<Tensor> out;
  for (const Host& h : hosts) out.push_back(h.t);
  return out;
}

TEST(OpsReference, Cat) {
  Rng rng(14014);
  for (int c = 0; c < kCases; ++c) {
    const Dims base = rng.RandomDims(1, 4, 64);
    const int64_t rank = Rank(base);
    const int64_t dim = rng.Int(-rank, rank - 1);
    const int64_t count = rng.Int(1, 3);
    std::vector<Host> parts, int_parts;
    std::string shapes;
    for (int64_t i = 0; i < count; ++i) {
      Dims dims = base;
      dims[Ix(Norm(dim, rank))] = rng.Dim(3);
      parts.push_back(MakeHost(kF32, dims, rng.Mixed(Numel(dims), -4, 4)));
      int_parts.push_back(MakeHost(kI64, dims, rng.Ints(Numel(dims), -9, 9)));
      shapes += (i ? ", " : "") + DimsText(dims);
    }
    // The first part computed by another op (a pending operand).
    std::vector<Host> negated_first = parts;
    negated_first[0] = Derived(Map1(kF32, parts[0], Negate));
    const std::string how = "{" + shapes + "} dim=" + std::to_string(dim);
    Case k(Label("Cat", c));
    k.Expect(
        "cat f32 " + how, [&] { return cat(TensorsOf(parts), dim); }, CatRef(parts, dim));
    k.Expect(
        "cat i64 " + how, [&] { return cat(TensorsOf(int_parts), dim); }, CatRef(int_parts, dim));
    k.Expect(
        "cat with neg(first) f32 " + how,
        [&] {
          std::vector<Tensor> ts = TensorsOf(parts);
          ts[0] = neg(ts[0]);
          return cat(ts, dim);
        },
        CatRef(negated_first, dim));
    k.Check();
  }
}

Reference IndexSelectRef(const Host& x, int64_t dim, const Host& index) {
  const int64_t d = Norm(dim, Rank(x.dims));
  Dims dims = x.dims;
  dims[Ix(d)] = Numel(index.dims);
  Reference r(x.dtype, dims);
  for (int64_t i = 0; i < Numel(dims); ++i) {
    Dims at = Unravel(i, dims);
    at[Ix(d)] = static_cast<int64_t>(index.values[Ix(at[Ix(d)])]);
    r.values[Ix(i)] = x.values[Ix(Ravel(at, x.dims))];
  }
  return r;
}

TEST(OpsReference, IndexSelect) {
  Rng rng(15015);
  for (int c = 0; c < kCases; ++c) {
    const Dims dims = rng.RandomDims(1, 4);
    const int64_t rank = Rank(dims), n = Numel(dims);
    const int64_t dim = rng.Int(-rank, rank - 1);
    const int64_t size = dims[Ix(Norm(dim, rank))];
    const int64_t len = size == 0 ? 0 : rng.Int(0, 6);
    const Host x = MakeHost(kF32, dims, rng.Mixed(n, -4, 4));
    const Host xi = MakeHost(kI64, dims, rng.Ints(n, -9, 9));
    const Host index = MakeHost(c % 2 ? kI32 : kI64, Dims{len}, rng.Ints(len, 0, size - 1));
    const std::string how = " dim=" + std::to_string(dim);
    Case k(Label("IndexSelect", c));
    k.Expect(
        Call("index_select", x, index) + how, [&] { return index_select(x.t, dim, index.t); },
        IndexSelectRef(x, dim, index));
    k.Expect(
        Call("index_select", xi, index) + how, [&] { return index_select(xi.t, dim, index.t); },
        IndexSelectRef(xi, dim, index));
    k.Expect(
        Call("index_select(neg)", x, index) + how, [&] { return index_select(neg(x.t), dim, index.t); },
        IndexSelectRef(Derived(Map1(kF32, x, Negate)), dim, index));
    k.Check();
  }
}

Reference GatherRef(const Host& x, int64_t dim, const Host& index) {
  const int64_t d = Norm(dim, Rank(x.dims));
  Reference r(x.dtype, index.dims);
  for (int64_t i = 0; i < Numel(index.dims); ++i) {
    Dims at = Unravel(i, index.dims);
    at[Ix(d)] = static_cast<int64_t>(index.values[Ix(i)]);
    r.values[Ix(i)] = x.values[Ix(Ravel(at, x.dims))];
  }
  return r;
}

TEST(OpsReference, Gather) {
  Rng rng(16016);
  for (int c = 0; c < kCases; ++c) {
    const Dims dims = rng.RandomDims(1, 4);
    const int64_t rank = Rank(dims), n = Numel(dims);
    const int64_t dim = rng.Int(-rank, rank - 1);
    const int64_t d = Norm(dim, rank);
    // The index: any length along `dim`, no larger than x along the others.
    Dims index_dims(dims.size());
    for (int64_t i = 0; i < rank; ++i) {
      const int64_t have = dims[Ix(i)];
      if (i == d) {
        index_dims[Ix(i)] = have == 0 ? 0 : rng.Int(0, 4);
      } else {
        index_dims[Ix(i)] = rng.Chance(0.6) ? have : rng.Int(0, have);
      }
    }
    const Host x = MakeHost(kF32, dims, rng.Mixed(n, -4, 4));
    const Host xi = MakeHost(kI64, dims, rng.Ints(n, -9, 9));
    const Host index = MakeHost(c % 2 ? kI32 : kI64, index_dims, rng.Ints(Numel(index_dims), 0, dims[Ix(d)] - 1));
    const std::string how = " dim=" + std::to_string(dim);
    Case k(Label("Gather", c));
    k.Expect(
        Call("gather", x, index) + how, [&] { return gather(x.t, dim, index.t); }, GatherRef(x, dim, index));
    k.Expect(
        Call("gather", xi, index) + how, [&] { return gather(xi.t, dim, index.t); }, GatherRef(xi, dim, index));
    k.Check();
  }
}

Reference OneHotRef(const Host& index, int64_t classes, DType dtype) {
  Dims dims = index.dims;
  dims.push_back(classes);
  Reference r(dtype, dims);
  for (int64_t i = 0; i < Numel(index.dims); ++i) {
    for (int64_t j = 0; j < classes; ++j) {
      r.values[Ix(i * classes + j)] = Bool(static_cast<int64_t>(index.values[Ix(i)]) == j);
    }
  }
  return r;
}

TEST(OpsReference, OneHot) {
  Rng rng(17017);
  for (int c = 0; c < kCases; ++c) {
    const Dims dims = rng.RandomDims(0, 3, 64);
    const int64_t classes = rng.Int(1, 5);
    const Host index = MakeHost(c % 2 ? kI32 : kI64, dims, rng.Ints(Numel(dims), 0, classes - 1));
    const std::string how = " classes=" + std::to_string(classes);
    Case k(Label("OneHot", c));
    k.Expect(
        Call("one_hot", index) + how, [&] { return one_hot(index.t, classes); }, OneHotRef(index, classes, kI64));
    for (DType dtype : {kF32, kF64, kI32, kI64, kBool}) {
      k.Expect(
          Call("one_hot", index) + how + " dtype=" + std::string(ir::DTypeName(dtype)),
          [&] { return one_hot(index.t, classes, dtype); }, OneHotRef(index, classes, dtype));
    }
    k.Check();
  }
}

// ---- Factories --------------------------------------------------------------------------------------

Reference Filled(DType dtype, const Dims& dims, double v) {
  Reference r(dtype, dims);
  std::fill(r.values.begin(), r.values.end(), v);
  return r;
}

// [start, end) in steps of `step`, as Python's range.
Reference ArangeRef(int64_t start, int64_t end, int64_t step, DType dtype) {
  Values v;
  for (int64_t x = start; step > 0 ? x < end : x > end; x += step) v.push_back(static_cast<double>(x));
  Reference r(dtype, Dims{static_cast<int64_t>(v.size())});
  r.values = v;
  return r;
}

// Random tensors cannot be predicted here: their shape, dtype and range are checked.
void ExpectInRange(const std::string& what, const Tensor& t, const Dims& dims, double lo, double hi) {
  const Dims got_dims(t.dims().begin(), t.dims().end());
  if (t.dtype() != kF32 || got_dims != dims) {
    ADD_FAILURE() << what << ": result is " << Desc(t.dtype(), got_dims) << ", want " << Desc(kF32, dims);
    return;
  }
  const std::vector<float> v = t.to_vector<float>();
  int64_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isfinite(v[i]) && v[i] >= lo && v[i] < hi) continue;
    if (++bad <= kReportedPerResult) {
      ADD_FAILURE() << what << " -> " << Desc(kF32, dims) << ": element " << i << " (index "
                    << DimsText(Unravel(static_cast<int64_t>(i), dims)) << ") is " << Num(v[i]) << ", outside ["
                    << Num(lo) << ", " << Num(hi) << ")";
    }
  }
}

TEST(OpsReference, Factories) {
  Rng rng(18018);
  for (int c = 0; c < 12; ++c) {
    const Dims dims = rng.RandomDims();
    const float v = static_cast<float>(rng.Real(-5, 5));
    const double v64 = rng.Real(-5, 5);
    const int64_t vi = rng.Int(-9, 9);
    const int64_t start = rng.Int(-10, 10), end = rng.Int(-10, 10);
    int64_t step = rng.Int(-4, 3);
    if (step >= 0) ++step;  // never 0
    const int64_t stop = rng.Int(0, 12);
    const std::string of = DimsText(dims);
    const std::string range = std::to_string(start) + ", " + std::to_string(end) + ", " + std::to_string(step);
    Case k(Label("Factories", c));
    k.Expect(
        "zeros(" + of + ")", [&] { return zeros(dims); }, Filled(kF32, dims, 0));
    k.Expect(
        "zeros(" + of + ", i64)", [&] { return zeros(dims, kI64); }, Filled(kI64, dims, 0));
    k.Expect(
        "ones(" + of + ")", [&] { return ones(dims); }, Filled(kF32, dims, 1));
    k.Expect(
        "ones(" + of + ", f64)", [&] { return ones(dims, kF64); }, Filled(kF64, dims, 1));
    k.Expect(
        "ones(" + of + ", bool)", [&] { return ones(dims, kBool); }, Filled(kBool, dims, 1));
    k.Expect(
        "full(" + of + ", " + Num(v) + ")", [&] { return full(dims, Scalar(v)); }, Filled(kF32, dims, v));
    k.Expect(
        "full(" + of + ", static " + Num(v64) + ", f64)", [&] { return full(dims, Scalar::Static(v64), kF64); },
        Filled(kF64, dims, v64));
    k.Expect(
        "full(" + of + ", " + std::to_string(vi) + ", i64)", [&] { return full(dims, Scalar(vi), kI64); },
        Filled(kI64, dims, static_cast<double>(vi)));
    if ((step > 0 && end < start) || (step < 0 && end > start)) {  // bounds against the step: refused
      EXPECT_THROW(arange(start, end, step), Error) << "arange(" << range << ")";
    } else {
      k.Expect(
          "arange(" + range + ")", [&] { return arange(start, end, step); }, ArangeRef(start, end, step, kI64));
      k.Expect(
          "arange(" + range + ", f32)", [&] { return arange(start, end, step, kF32); },
          ArangeRef(start, end, step, kF32));
    }
    k.Expect(
        "arange(" + std::to_string(stop) + ")", [&] { return arange(stop); }, ArangeRef(0, stop, 1, kI64));
    const Tensor uniform = rand(dims);
    const Tensor wide = rand(dims, Scalar::Static(-2.0), Scalar::Static(2.0));
    const Tensor normal = randn(dims);
    k.Check();  // computes the random tensors too (one graph)
    const std::string label = Label("Factories", c) + ": ";
    try {
      ExpectInRange(label + "rand(" + of + ")", uniform, dims, 0, 1);
      ExpectInRange(label + "rand(" + of + ", -2, 2)", wide, dims, -2, 2);
      ExpectInRange(label + "randn(" + of + ")", normal, dims, -kInf, kInf);
    } catch (const std::exception& e) {
      ADD_FAILURE() << label << "reading random tensors of " << of << " threw: " << e.what();
    }
  }
}

}  // namespace ops_reference_test
}  // namespace lazyrt

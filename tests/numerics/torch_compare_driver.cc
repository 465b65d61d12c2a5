// The lazyrt side of tests/numerics/compare_with_torch.py: reads cases (JSON) on stdin, runs each
// through lazyrt's public API, writes the results (JSON) on stdout. Not a test by itself: the script
// compares the results with PyTorch's.
//
// A case: {"op": "add", "inputs": [{"dtype": "f32", "dims": [2, 3], "values": [...], "grad": true}, ...],
//          "attrs": {...}, "weight": [...]}
// With "weight", the driver also runs backward on sum(y * weight) and reports each "grad" input's
// gradient. A result: {"dtype", "dims", "values", "grads": [[...] or null], "error": "..." if it threw}.
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lazy/nn.h"
#include "lazy/optim.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

namespace lazyrt {
namespace {

using json = nlohmann::json;
using Inputs = std::vector<Tensor>;

std::vector<int64_t> Dims(const json& j) { return j.get<std::vector<int64_t>>(); }

// JSON has no NaN or infinity: the script writes them as the strings "nan", "inf", "-inf".
double Number(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    throw std::runtime_error("not a number: " + s);
  }
  return v.get<double>();
}
json ToJson(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

Tensor MakeInput(const json& in) {
  const std::string dtype = in.at("dtype").get<std::string>();
  const std::vector<int64_t> dims = Dims(in.at("dims"));
  std::vector<double> values;
  for (const json& v : in.at("values")) values.push_back(Number(v));
  Tensor t;
  if (dtype == "f32") {
    const std::vector<float> f(values.begin(), values.end());
    t = Tensor::FromData(std::span<const float>(f), dims);
  } else if (dtype == "f64") {
    t = Tensor::FromData(std::span<const double>(values), dims);
  } else if (dtype == "i32") {
    std::vector<int32_t> v;
    for (double x : values) v.push_back(static_cast<int32_t>(x));
    t = Tensor::FromData(std::span<const int32_t>(v), dims);
  } else if (dtype == "i64") {
    std::vector<int64_t> v;
    for (double x : values) v.push_back(static_cast<int64_t>(x));
    t = Tensor::FromData(std::span<const int64_t>(v), dims);
  } else if (dtype == "bool") {
    std::vector<int32_t> v;
    for (double x : values) v.push_back(x != 0);
    t = cast(Tensor::FromData(std::span<const int32_t>(v), dims), DType::kBool);
  } else {
    throw std::runtime_error("unknown dtype " + dtype);
  }
  if (in.value("grad", false)) t.requires_grad_();
  return t;
}

using OpFn = std::function<Tensor(const Inputs&, const json&)>;

const std::map<std::string, OpFn>& Ops() {
  auto dims_attr = [](const json& a, const char* key) {
    return a.contains(key) ? a.at(key).get<std::vector<int64_t>>() : std::vector<int64_t>{};
  };
  static const std::map<std::string, OpFn> ops = {
      {"neg", [](const Inputs& x, const json&) { return neg(x[0]); }},
      {"abs", [](const Inputs& x, const json&) { return abs(x[0]); }},
      {"exp", [](const Inputs& x, const json&) { return exp(x[0]); }},
      {"log", [](const Inputs& x, const json&) { return log(x[0]); }},
      {"sqrt", [](const Inputs& x, const json&) { return sqrt(x[0]); }},
      {"rsqrt", [](const Inputs& x, const json&) { return rsqrt(x[0]); }},
      {"tanh", [](const Inputs& x, const json&) { return tanh(x[0]); }},
      {"sigmoid", [](const Inputs& x, const json&) { return sigmoid(x[0]); }},
      {"relu", [](const Inputs& x, const json&) { return relu(x[0]); }},
      {"gelu", [](const Inputs& x, const json&) { return gelu(x[0]); }},
      {"erf", [](const Inputs& x, const json&) { return erf(x[0]); }},
      {"sin", [](const Inputs& x, const json&) { return sin(x[0]); }},
      {"cos", [](const Inputs& x, const json&) { return cos(x[0]); }},
      {"sign", [](const Inputs& x, const json&) { return sign(x[0]); }},
      {"add", [](const Inputs& x, const json&) { return add(x[0], x[1]); }},
      {"sub", [](const Inputs& x, const json&) { return sub(x[0], x[1]); }},
      {"mul", [](const Inputs& x, const json&) { return mul(x[0], x[1]); }},
      {"div", [](const Inputs& x, const json&) { return div(x[0], x[1]); }},
      {"pow", [](const Inputs& x, const json&) { return pow(x[0], x[1]); }},
      {"pow_scalar", [](const Inputs& x, const json& a) { return pow(x[0], Scalar(a.at("exponent").get<double>())); }},
      {"mul_scalar", [](const Inputs& x, const json& a) { return x[0] * a.at("scalar").get<double>(); }},
      {"rdiv_scalar", [](const Inputs& x, const json& a) { return a.at("scalar").get<double>() / x[0]; }},
      {"rsub_scalar", [](const Inputs& x, const json& a) { return a.at("scalar").get<double>() - x[0]; }},
      {"maximum", [](const Inputs& x, const json&) { return maximum(x[0], x[1]); }},
      {"minimum", [](const Inputs& x, const json&) { return minimum(x[0], x[1]); }},
      {"eq", [](const Inputs& x, const json&) { return eq(x[0], x[1]); }},
      {"lt", [](const Inputs& x, const json&) { return lt(x[0], x[1]); }},
      {"ge", [](const Inputs& x, const json&) { return ge(x[0], x[1]); }},
      {"where", [](const Inputs& x, const json&) { return where(x[0], x[1], x[2]); }},
      {"cast",
       [](const Inputs& x, const json& a) { return cast(x[0], *ir::DTypeFromName(a.at("dtype").get<std::string>())); }},
      {"matmul", [](const Inputs& x, const json&) { return matmul(x[0], x[1]); }},
      {"sum",
       [=](const Inputs& x, const json& a) { return sum(x[0], dims_attr(a, "dims"), a.value("keepdim", false)); }},
      {"mean",
       [=](const Inputs& x, const json& a) { return mean(x[0], dims_attr(a, "dims"), a.value("keepdim", false)); }},
      {"amax",
       [=](const Inputs& x, const json& a) { return max(x[0], dims_attr(a, "dims"), a.value("keepdim", false)); }},
      {"amin",
       [=](const Inputs& x, const json& a) { return min(x[0], dims_attr(a, "dims"), a.value("keepdim", false)); }},
      {"prod",
       [=](const Inputs& x, const json& a) { return prod(x[0], dims_attr(a, "dims"), a.value("keepdim", false)); }},
      {"argmax", [](const Inputs& x,
                    const json& a) { return argmax(x[0], a.at("dim").get<int64_t>(), a.value("keepdim", false)); }},
      {"softmax", [](const Inputs& x, const json& a) { return softmax(x[0], a.at("dim").get<int64_t>()); }},
      {"log_softmax", [](const Inputs& x, const json& a) { return log_softmax(x[0], a.at("dim").get<int64_t>()); }},
      {"reshape", [=](const Inputs& x, const json& a) { return reshape(x[0], dims_attr(a, "sizes")); }},
      {"permute", [=](const Inputs& x, const json& a) { return permute(x[0], dims_attr(a, "perm")); }},
      {"transpose",
       [](const Inputs& x, const json& a) {
         return transpose(x[0], a.at("dim0").get<int64_t>(), a.at("dim1").get<int64_t>());
       }},
      {"expand", [=](const Inputs& x, const json& a) { return expand(x[0], dims_attr(a, "sizes")); }},
      {"slice",
       [](const Inputs& x, const json& a) {
         return slice(x[0], a.at("dim").get<int64_t>(), a.at("start").get<int64_t>(), a.at("end").get<int64_t>(),
                      a.at("step").get<int64_t>());
       }},
      {"cat", [](const Inputs& x, const json& a) { return cat(x, a.at("dim").get<int64_t>()); }},
      {"index_select",
       [](const Inputs& x, const json& a) { return index_select(x[0], a.at("dim").get<int64_t>(), x[1]); }},
      {"gather", [](const Inputs& x, const json& a) { return gather(x[0], a.at("dim").get<int64_t>(), x[1]); }},
      {"one_hot", [](const Inputs& x, const json& a) { return one_hot(x[0], a.at("num_classes").get<int64_t>()); }},
      {"cross_entropy", [](const Inputs& x, const json&) { return nn::cross_entropy(x[0], x[1]); }},
  };
  return ops;
}

// {"op": "sgd" or "adamw", "inputs": [the parameter], "attrs": {hyperparameters, "grads": [[...] per
// step]}}: the parameter after every step, concatenated.
json RunOptimizer(const std::string& op, const Inputs& inputs, const json& a) {
  Tensor p = inputs[0];
  p.requires_grad_();
  std::unique_ptr<Optimizer> opt;
  if (op == "sgd") {
    opt = std::make_unique<SGD>(std::vector<Tensor>{p}, a.at("lr").get<double>(), a.value("momentum", 0.0),
                                a.value("weight_decay", 0.0));
  } else {
    opt = std::make_unique<AdamW>(std::vector<Tensor>{p}, a.at("lr").get<double>(), a.at("beta1").get<double>(),
                                  a.at("beta2").get<double>(), a.at("eps").get<double>(),
                                  a.at("weight_decay").get<double>());
  }
  json values = json::array();
  const std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  for (const json& step : a.at("grads")) {
    std::vector<float> g;
    for (const json& v : step) g.push_back(static_cast<float>(Number(v)));
    p.set_grad(Tensor::FromData(std::span<const float>(g), dims));
    opt->step();
    opt->zero_grad();
    sync();
    for (double v : p.to_vector<double>()) values.push_back(ToJson(v));
  }
  return json{{"dtype", "f32"},
              {"dims", json::array({static_cast<int64_t>(values.size())})},
              {"values", values},
              {"grads", json::array()}};
}

json RunCase(const json& c) {
  json out;
  try {
    Inputs inputs;
    for (const json& in : c.at("inputs")) inputs.push_back(MakeInput(in));
    const std::string op = c.at("op").get<std::string>();
    if (op == "sgd" || op == "adamw") return RunOptimizer(op, inputs, c.at("attrs"));
    auto it = Ops().find(op);
    if (it == Ops().end()) throw std::runtime_error("unknown op " + op);
    const Tensor y = it->second(inputs, c.value("attrs", json::object()));
    if (c.contains("weight")) {
      Tensor w = MakeInput(json{{"dtype", std::string(ir::DTypeName(y.dtype()))},
                                {"dims", std::vector<int64_t>(y.dims().begin(), y.dims().end())},
                                {"values", c.at("weight")}});
      sum(y * w).backward();
    }
    sync();
    out["dtype"] = std::string(ir::DTypeName(y.dtype()));
    out["dims"] = std::vector<int64_t>(y.dims().begin(), y.dims().end());
    json values = json::array();
    for (double v : y.to_vector<double>()) values.push_back(ToJson(v));
    out["values"] = values;
    json grads = json::array();
    for (const Tensor& t : inputs) {
      if (!t.requires_grad() || !t.grad().defined()) {
        grads.push_back(nullptr);
        continue;
      }
      json g = json::array();
      for (double v : t.grad().to_vector<double>()) g.push_back(ToJson(v));
      grads.push_back(g);
    }
    out["grads"] = grads;
  } catch (const std::exception& e) {
    out["error"] = e.what();
  }
  return out;
}

}  // namespace
}  // namespace lazyrt

int main() {
  const nlohmann::json cases = nlohmann::json::parse(std::cin);
  nlohmann::json results = nlohmann::json::array();
  for (const nlohmann::json& c : cases) results.push_back(lazyrt::RunCase(c));
  std::cout << results.dump() << "\n";
  return 0;
}

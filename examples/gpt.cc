#include "examples/gpt.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "lazy/error.h"
#include "lazy/splitmix.h"

namespace lazyrt::examples {

namespace {
constexpr int64_t kMaxDim = int64_t{1} << 16;
}  // namespace

std::string CheckConfig(const GptConfig& c) {
  auto range = [](const char* name, int64_t v, int64_t lo, int64_t hi) -> std::string {
    if (v >= lo && v <= hi) return "";
    return absl::StrCat(name, " must be from ", lo, " to ", hi, ", got ", v);
  };
  for (const std::string& e :
       {range("vocab", c.vocab, 2, kMaxDim), range("layers", c.layers, 1, 256), range("heads", c.heads, 1, 1024),
        range("width", c.width, 1, kMaxDim), range("context", c.context, 1, kMaxDim)}) {
    if (!e.empty()) return e;
  }
  if (c.width % c.heads != 0) {
    return absl::StrCat("heads (", c.heads, ") must divide width (", c.width, "); e.g. heads ",
                        c.heads > 1 && c.width % 2 == 0 ? 2 : 1, " or width ", (c.width / c.heads + 1) * c.heads);
  }
  if (c.matmul_dtype != DType::kF32 && c.matmul_dtype != DType::kBF16) {
    return absl::StrCat("matmul dtype must be f32 or bf16, got ", ir::DTypeName(c.matmul_dtype));
  }
  return "";
}

Tensor Gpt::Add(const std::string& name, std::vector<int64_t> dims, double stddev, float constant) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  // A uniform distribution in +-a has the deviation a / sqrt(3).
  std::vector<float> values = stddev > 0 ? splitmix::Uniform(n, stddev * std::sqrt(3.0), seed_ * 1000 + params_.size())
                                         : std::vector<float>(static_cast<size_t>(n), constant);
  Tensor t = Tensor::FromData(values, dims);
  t.requires_grad_();
  params_.push_back({name, t});
  return t;
}

Gpt::Gpt(const GptConfig& config, uint64_t seed) : config_(config), seed_(seed) {
  if (std::string error = CheckConfig(config); !error.empty()) throw Error("GPT: " + error);
  const int64_t c = config.width;
  const double stddev = 0.02, residual = 0.02 / std::sqrt(2.0 * static_cast<double>(config.layers));
  tok_emb_ = Add("tok_emb", {config.vocab, c}, stddev);
  pos_emb_ = Add("pos_emb", {config.context, c}, stddev);
  for (int64_t l = 0; l < config.layers; ++l) {
    const std::string p = absl::StrCat("blocks.", l, ".");
    Block b;
    b.ln1_w = Add(p + "ln1.weight", {c}, 0, 1);
    b.ln1_b = Add(p + "ln1.bias", {c}, 0, 0);
    b.qkv_w = Add(p + "attn.qkv.weight", {3 * c, c}, stddev);
    b.qkv_b = Add(p + "attn.qkv.bias", {3 * c}, 0, 0);
    b.proj_w = Add(p + "attn.proj.weight", {c, c}, residual);
    b.proj_b = Add(p + "attn.proj.bias", {c}, 0, 0);
    b.ln2_w = Add(p + "ln2.weight", {c}, 0, 1);
    b.ln2_b = Add(p + "ln2.bias", {c}, 0, 0);
    b.fc_w = Add(p + "mlp.fc.weight", {4 * c, c}, stddev);
    b.fc_b = Add(p + "mlp.fc.bias", {4 * c}, 0, 0);
    b.fc_proj_w = Add(p + "mlp.proj.weight", {c, 4 * c}, residual);
    b.fc_proj_b = Add(p + "mlp.proj.bias", {c}, 0, 0);
    blocks_.push_back(b);
  }
  lnf_w_ = Add("ln_f.weight", {c}, 0, 1);
  lnf_b_ = Add("ln_f.bias", {c}, 0, 0);
  head_w_ = Add("head.weight", {config.vocab, c}, stddev);
}

std::vector<Tensor> Gpt::parameters() const {
  std::vector<Tensor> out;
  out.reserve(params_.size());
  for (const GptParameter& p : params_) out.push_back(p.value);
  return out;
}

Tensor Gpt::Linear(const Tensor& x, const Tensor& w, const Tensor& b) const {
  Tensor y;
  if (config_.matmul_dtype == DType::kF32) {
    y = matmul(x, transpose(w, 0, 1));
  } else {
    // Mixed precision as TPU training does it: bf16 operands, f32 accumulation, f32 weights and sums.
    y = cast(matmul(cast(x, config_.matmul_dtype), cast(transpose(w, 0, 1), config_.matmul_dtype)), DType::kF32);
  }
  return b.defined() ? y + b : y;
}

Tensor Gpt::Attention(const Tensor& x, const Block& block) const {
  const int64_t batch = x.dim(0), time = x.dim(1), c = config_.width, heads = config_.heads, d = c / heads;
  Tensor qkv = Linear(x, block.qkv_w, block.qkv_b);  // [batch, time, 3 width]
  auto head_major = [&](int64_t part) {
    return permute(reshape(slice(qkv, 2, part * c, (part + 1) * c), {batch, time, heads, d}), {0, 2, 1, 3});
  };
  Tensor y = scaled_dot_product_attention(head_major(0), head_major(1), head_major(2), Tensor(), 0.0,
                                          /*is_causal=*/true);
  return Linear(reshape(permute(y, {0, 2, 1, 3}), {batch, time, c}), block.proj_w, block.proj_b);
}

Tensor Gpt::operator()(const Tensor& tokens, const std::function<void(int)>& after_block) const {
  if (tokens.rank() != 2 || tokens.dim(1) > config_.context) {
    throw Error(absl::StrCat("GPT: tokens must be [batch, time] with time <= context (", config_.context, "), got ",
                             tokens.shape().ToString()));
  }
  const int64_t time = tokens.dim(1);
  Tensor x = embedding(tokens, tok_emb_) + slice(pos_emb_, 0, 0, time);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    x = x + Attention(layer_norm(x, {config_.width}, b.ln1_w, b.ln1_b), b);
    Tensor h = gelu(Linear(layer_norm(x, {config_.width}, b.ln2_w, b.ln2_b), b.fc_w, b.fc_b));
    x = x + Linear(h, b.fc_proj_w, b.fc_proj_b);
    if (after_block) after_block(static_cast<int>(l + 1));
  }
  return Linear(layer_norm(x, {config_.width}, lnf_w_, lnf_b_), head_w_, Tensor());
}

}  // namespace lazyrt::examples

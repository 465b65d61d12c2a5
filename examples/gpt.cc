#include "examples/gpt.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lazy/error.h"
#include "lazy/splitmix.h"

namespace lazyrt::examples {

namespace {
constexpr int64_t kMaxDim = int64_t{1} << 16;

// Rows of a fused qkv projection ([3 width] rows of `row` values each) in Megatron's order for `groups` model
// partitions: [partition][q, k, v][its width / groups rows], from the usual [q, k, v][width].
std::vector<float> GroupQkvRows(const std::vector<float>& values, int64_t width, int64_t row, int64_t groups) {
  std::vector<float> out(values.size());
  const int64_t per_group = width / groups;
  for (int64_t r = 0; r < 3 * width; ++r) {
    const int64_t part = r / width, group = (r % width) / per_group, within = r % per_group;
    const int64_t to = (group * 3 + part) * per_group + within;
    std::copy_n(values.begin() + r * row, row, out.begin() + to * row);
  }
  return out;
}

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
  if (c.model_parallel < 1 || c.model_parallel > c.heads || c.heads % c.model_parallel != 0) {
    return absl::StrCat("model parallelism (", c.model_parallel, ") must divide heads (", c.heads,
                        "): each partition computes whole heads; from 1 to ", c.heads);
  }
  if (c.matmul_dtype != DType::kF32 && c.matmul_dtype != DType::kBF16) {
    return absl::StrCat("matmul dtype must be f32 or bf16, got ", ir::DTypeName(c.matmul_dtype));
  }
  return "";
}

Tensor Gpt::Add(const std::string& name, std::vector<int64_t> dims, double stddev, float constant,
                const std::function<std::vector<float>(std::vector<float>)>& arrange) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  // A uniform distribution in +-a has the deviation a / sqrt(3).
  std::vector<float> values = stddev > 0 ? splitmix::Uniform(n, stddev * std::sqrt(3.0), seed_ * 1000 + params_.size())
                                         : std::vector<float>(static_cast<size_t>(n), constant);
  if (arrange) values = arrange(std::move(values));
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
    const int64_t groups = config.model_parallel;
    b.qkv_w = Add(p + "attn.qkv.weight", {3 * c, c}, stddev, 0,
                  [&](std::vector<float> v) { return GroupQkvRows(v, c, c, groups); });
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
  const int64_t groups = config_.model_parallel;
  // [batch, time, 3 width] as [batch, time, partition, q/k/v, heads of the partition, head dim]: with the
  // features split over "model", each partition slices q, k and v of its own heads from its own piece.
  // Mixed precision: the attention's products take bf16 q, k and v too (with f32 softmax and sums), as
  // autocast's do.
  Tensor qkv = reshape(cast(Linear(x, block.qkv_w, block.qkv_b), config_.matmul_dtype),
                       {batch, time, groups, 3, heads / groups, d});
  auto head_major = [&](int64_t part) {
    return permute(reshape(slice(qkv, 3, part, part + 1), {batch, time, heads, d}), {0, 2, 1, 3});
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

// The embeddings and the output head stay replicated: with a character vocabulary (about a hundred symbols)
// they are a few percent of the parameters, and splitting the vocabulary would cost the cross-entropy an
// all-reduce of its max and its sum per row (and the lookup a masked all-reduce) to save little memory.
void Gpt::shard(const Mesh& mesh) const {
  const std::optional<int64_t> model = mesh.axis_index("model");
  const int64_t model_size = model ? mesh.shape()[static_cast<size_t>(*model)] : 1;
  if (model_size != config_.model_parallel) {
    throw Error(absl::StrCat("GPT: the mesh ", mesh.ToString(), " splits \"model\" ", model_size,
                             " ways but the model was built for ", config_.model_parallel,
                             " (GptConfig::model_parallel)"));
  }
  for (const GptParameter& p : params_) lazyrt::mark_sharding(p.value, mesh, {});
  if (!model) return;
  const PartitionSpec columns = {"model", std::nullopt}, rows = {std::nullopt, "model"}, vector = {"model"};
  for (const Block& b : blocks_) {
    lazyrt::mark_sharding(b.qkv_w, mesh, columns);
    lazyrt::mark_sharding(b.qkv_b, mesh, vector);
    lazyrt::mark_sharding(b.proj_w, mesh, rows);
    lazyrt::mark_sharding(b.fc_w, mesh, columns);
    lazyrt::mark_sharding(b.fc_b, mesh, vector);
    lazyrt::mark_sharding(b.fc_proj_w, mesh, rows);
  }
}

}  // namespace lazyrt::examples

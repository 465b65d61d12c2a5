// A GPT-2-style decoder for character-level language modelling: token and position embeddings, pre-norm
// blocks of causal multi-head self-attention and a GELU MLP, a final layer norm and an output head.
// Its initial weights come from splitmix streams, so that every peer (benchmarks/peers/torch_gpt.py)
// starts from the very same numbers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lazy/sharding.h"
#include "lazy/tensor.h"

namespace lazyrt::examples {

struct GptConfig {
  int64_t vocab = 0;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t width = 128;
  int64_t context = 128;             // rows of the position table: the longest sequence the model reads
  DType matmul_dtype = DType::kF32;  // kBF16: bf16 matmul inputs, f32 accumulation and f32 weights
  // Megatron tensor parallelism over this many partitions of a mesh's "model" axis (1: none). The fused
  // qkv projection's rows are then grouped by partition, [partition][q, k, v][its heads][head dim], so that
  // an even split of them gives each partition the q, k and v of its own heads. The weights are the same
  // numbers as with 1, rows reordered: the same model.
  int64_t model_parallel = 1;
};

// Empty when `config` is valid, else what is wrong with it and the valid range.
std::string CheckConfig(const GptConfig& config);

struct GptParameter {
  std::string name;  // as in benchmarks/peers/torch_gpt.py's model
  Tensor value;
};

class Gpt {
 public:
  // Throws lazyrt::Error if CheckConfig(config) finds a problem. Weights: uniform with the deviation of
  // GPT-2's normal(0, 0.02) (the projections into the residual stream divided by sqrt(2 layers)),
  // parameter p drawn from splitmix stream seed * 1000 + p; biases 0, layer-norm weights 1.
  Gpt(const GptConfig& config, uint64_t seed);

  // Logits [batch, time, vocab] of tokens [batch, time] (integer, time <= context). `after_block`, if
  // set, is called after every block with its index (1-based): where a training loop may insert barriers.
  Tensor operator()(const Tensor& tokens, const std::function<void(int)>& after_block = nullptr) const;

  // In initialisation order.
  const std::vector<GptParameter>& named_parameters() const { return params_; }
  std::vector<Tensor> parameters() const;
  const GptConfig& config() const { return config_; }

  // Lays the parameters out over `mesh` (lazyrt::mark_sharding), Megatron-style when it has a "model" axis
  // (whose size must be config().model_parallel): the qkv and MLP input projections split on their output
  // features (column-parallel), the attention and MLP output projections on their input features
  // (row-parallel: the partitioner all-reduces their partial sums), so attention runs on each partition's
  // own heads without communication. Everything else is replicated, the embeddings and the output head
  // included (see gpt.cc). Throws lazyrt::Error if the model axis does not match.
  void shard(const Mesh& mesh) const;

 private:
  struct Block {
    Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
  };
  // A parameter of `dims` initialised as the constructor says; `arrange` (if set) reorders its values first.
  Tensor Add(const std::string& name, std::vector<int64_t> dims, double stddev, float constant = 0,
             const std::function<std::vector<float>(std::vector<float>)>& arrange = nullptr);
  Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& b) const;
  Tensor Attention(const Tensor& x, const Block& block) const;

  GptConfig config_;
  uint64_t seed_;
  std::vector<GptParameter> params_;
  Tensor tok_emb_, pos_emb_, lnf_w_, lnf_b_, head_w_;
  std::vector<Block> blocks_;
};

}  // namespace lazyrt::examples

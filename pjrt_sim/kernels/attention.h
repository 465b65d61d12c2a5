// Fused scaled dot-product attention (FlashAttention-2 style): softmax(q k^T * scale + mask) v computed
// blockwise over the keys with an online softmax, so the [L, S] scores of a batch element are never
// materialized, only a block of them per thread. The backward pass recomputes each block of
// probabilities from q, k and the row logsumexp the forward pass kept. bf16 operands are multiplied as
// bf16 with f32 sums; scores, softmax and gradient sums are f32, the probabilities and score gradients
// rounded to bf16 only as operands of their products (as FlashAttention-2's bf16 kernels do).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "pjrt_sim/kernels/gemm.h"
#include "pjrt_sim/kernels/kernels.h"
#include "pjrt_sim/kernels/strided_view.h"
#include "pjrt_sim/types.h"

namespace lazyrt::pjrt {

// Keys per backward step; the size of block autotuning measures the attention's products on.
inline constexpr int64_t kAttentionBlock = 64;
// The forward's keys per step of its online softmax and most queries a task (whose keys are copied once for
// them), and the backward's queries per step over a block of keys: wider than a block, so a short sequence (the GPT's
// 128 tokens) takes one product where 64-square blocks took two to four, each an overhead-bound library call (a
// 64x64x32 product ran at ~60% of the core's peak). A thread's scores then stay in its core's L2: the forward's 64 x
// 512 (128 KiB in f32), the backward's three 512 x 64 arrays (P, dS, P with dropout: 384 KiB; twice that in f64).
inline constexpr int64_t kAttentionKeyChunk = 512;
inline constexpr int64_t kAttentionQueryChunk = 512;

// The static parameters of an ATTENTION or ATTENTION_GRAD instruction.
struct AttentionParams {
  double scale = 1;                          // finite
  bool causal = false;                       // query i sees keys j <= i only
  double dropout = 0;                        // in [0, 1]; > 0: the last operand is the s64[] seed
  int64_t stream = 0;                        // the random stream of the dropout
  GemmLibrary library = GemmLibrary::kBlis;  // of the block products (proto::Kernel.gemm_library)
};

// Where the elements of an operand [B..., R, C] are: row i of batch element b (linear over the batch dims)
// starts at Start(b) + i * row_stride, and its columns are contiguous.
struct OperandAccess {
  int64_t offset = 0;
  std::vector<int64_t> batch_strides;
  int64_t row_stride = 0;
  int64_t Start(int64_t b, std::span<const int64_t> batch_dims) const;
};

// The sizes of an ATTENTION or ATTENTION_GRAD instruction, checked against its operands and result.
struct AttentionLayout {
  // Of q, k, v, d(output) and the gradients: f32, f64 or bf16. The forward result is of the type the
  // kernels compute in: f32 for bf16 (the logsumexp the backward reads needs f32's precision), else `type`.
  PrimitiveType type = PrimitiveType::kF32;
  int64_t batch = 1;  // product of the batch dims
  int64_t l = 0, s = 0, e = 0, ev = 0;
  bool has_mask = false;
  PrimitiveType mask_type = PrimitiveType::kPred;  // pred (true takes part) or `type` (added to the scores)
  // Element strides of the mask over the batch dims, then along L and S (0 where it is broadcast).
  std::vector<int64_t> batch_dims, mask_batch_strides;
  int64_t mask_row_stride = 0, mask_col_stride = 0;
  // Of q, k, v (and of the forward result and d(output)): row-major, or as the operand views say.
  std::vector<OperandAccess> access;
  // ATTENTION_GRAD: where dq, dk and dv are written, as the result views say; empty: packed per batch
  // element ([dq | dk | dv] rows of the result's last dim).
  std::vector<OperandAccess> result_access;
};

// Where an attention gradient's dq, dk and dv are in its packed result, per batch element: dq [L, E] at
// 0, dk [S, E] after it, dv [S, Ev] last, each row-major.
struct GradientPart {
  int64_t rows, cols, start;
};
std::array<GradientPart, 3> GradientParts(int64_t l, int64_t s, int64_t e, int64_t ev);

// Checks the parameters, operands and result of an attention (grad: ATTENTION_GRAD) and returns their
// layout; the error says what does not fit. Shared by the module verifier and the kernel loader, which
// also passes the operand views of the kernel (at most one per operand; q, k, v, the forward result and
// d(output) may be views of their inputs, with contiguous rows, that stay inside them) and an
// ATTENTION_GRAD kernel's result views (none, or one each for dq, dk and dv: views of the result, of
// [B..., L, E], [B..., S, E] and [B..., S, Ev], with contiguous rows, that write each of its elements
// once).
absl::StatusOr<AttentionLayout> CheckAttention(std::span<const ArrayShape> operands, const ArrayShape& result,
                                               bool grad, const AttentionParams& params,
                                               std::span<const OperandView> views = {},
                                               std::span<const OperandView> result_views = {});

// The kernels (inputs as the instructions' operands), for a layout and parameters CheckAttention accepted.
std::unique_ptr<Kernel> MakeAttentionKernel(AttentionLayout layout, const AttentionParams& params);
std::unique_ptr<Kernel> MakeAttentionGradKernel(AttentionLayout layout, const AttentionParams& params);

}  // namespace lazyrt::pjrt

// bf16 tensor-core variant of the fused GD step (GD precision bf16: float storage and Adam, bf16 operands,
// fp32 accumulation). Same math and the same partial-result layout as the exact / tf32 fused kernels of
// nn_gated_mlp_fused.cuh and nn_softmax_ce_fused.cuh (y partials per hidden-unit split, CE statistics per value
// split, gradient partial arenas per row split), so gated_mlp_output, softmax_ce_combine (MSE accuracy) and
// adam_step_gated are shared with them; the products run on mma.sync m16n8k16 with ldmatrix fragments
// (kernels/mma_bf16.cuh) instead of the generic tile of nn_tile.cuh. The CE loss and its gradient take one
// pass over the logits (softmax_ce_partials_bf16 + softmax_ce_finish_bf16, below) instead of stats + grad.
//
// Operands are padded bf16 copies, so every tile is a 16-byte cp.async with no bounds check:
//   rows (keys N, values P, hidden units m) padded to kBf16Tile = 64 with zero rows; features padded to
//   DK = bf16_dk(d) ∈ {64, 128} with zero columns; D [d_out][m] stored as 64-unit panels [m_pad/64][DK][64].
// Zero padding is exact: a padded key or unit has a = g = 0, so h = a σ(g) = 0, da = dh σ(0) = 0 (σ(0) = 0 for
// identity, ReLU and SiLU) and dg = dh a σ'(0) = 0; padded values are masked out of the softmax.
// No biases (the §2.6 model; callers refuse bias with bf16). CPU reference: the nn::cpu layer chain, as for
// the other fused variants (tests/gpu/test_nn_layers.cpp).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "nn_gated_mlp_fused.cuh"
#include "nn_softmax_ce_fused.cuh"
#include "nn_train_state.cuh"

namespace memcap::nn::cuda {

constexpr std::int64_t kBf16Tile = 64;
inline std::int64_t bf16_pad_rows(std::int64_t n) { return (n + kBf16Tile - 1) / kBf16Tile * kBf16Tile; }
// Padded feature width of the bf16 operands: 64 for d ≤ 64, 128 for d ≤ 128 (d ≤ kFusedMaxDim).
inline int bf16_dk(std::int64_t d) { return d <= 64 ? 64 : 128; }

// dst [bf16_pad_rows(N)][DK] = bf16(Σ_q parts[q][N][d]) (zero padding); nparts = 1 converts a matrix.
// Gated by `gate` (null = always run).
void sum_rows_to_bf16(__nv_bfloat16* dst, const float* parts, int nparts, std::int64_t N, std::int64_t d, int dk,
                      const TrainState* gate, cudaStream_t stream);

// Operand copies of the gated MLP's weights (U, G [m][d_in], D [d_out][m]; the GD trainer converts once at upload,
// then its Adam step keeps them current through a Bf16Mirror, nn_train_state.cuh):
// Ub, Gb [m_pad][DK]; Db panels [m_pad/64][DK][64] (DK = bf16_dk(max(d_in, d_out))).
void gated_mlp_weights_bf16(__nv_bfloat16* Ub, __nv_bfloat16* Gb, __nv_bfloat16* Db, const float* U, const float* G,
                            const float* D, const GatedMlpShape& s, const TrainState* gate, cudaStream_t stream);

// Blocks resident per SM: which = 0 forward, 1 backward, 2 CE stats, 3 one-pass CE partials, 4 their split-operand
// (bf16x3) form; d = the feature dimension.
int gd_bf16_blocks_per_sm(int which, std::int64_t d);
// Rows per block of the forward (128 at d ≤ 64, else 64); every other kernel tiles rows by 64.
std::int64_t gd_bf16_forward_rows(std::int64_t d);

// As gated_mlp_forward_fused (no biases); splits over 64-unit tiles. Xb [N_pad][DK].
void gated_mlp_forward_bf16(float* y_part, int splits, const __nv_bfloat16* Xb, const __nv_bfloat16* Ub,
                            const __nv_bfloat16* Gb, const __nv_bfloat16* Db, const GatedMlpShape& s,
                            const TrainState* gate, cudaStream_t stream);

// As gated_mlp_backward_fused (no biases: off.b_* are ignored); dYb [N_pad][DK] is the summed dy
// (sum_rows_to_bf16 of the dy partials); row splits over 64-row tiles.
void gated_mlp_backward_bf16(float* grad_part, std::int64_t part_stride, int row_splits, const GatedMlpGradOffsets& off,
                             const __nv_bfloat16* Xb, const __nv_bfloat16* dYb, const __nv_bfloat16* Ub,
                             const __nv_bfloat16* Gb, const __nv_bfloat16* Db, const GatedMlpShape& s,
                             const TrainState* gate, cudaStream_t stream);

// As softmax_ce_stats_fused with Vb [P_pad][DK]; value splits over 64-value tiles (the MSE trainer's accuracy;
// the CE trainer uses the one-pass kernels below).
void softmax_ce_stats_bf16(const CeStats<float>& st, int splits, const float* y, const __nv_bfloat16* Vb,
                           const std::int32_t* targets, std::int64_t N, std::int64_t P, std::int64_t d,
                           const TrainState* gate, bool at_record_epochs, cudaStream_t stream);

// One-pass cross-entropy (the CE trainer's path): one read of the logits per (row, value) gives the loss, the
// argmax and dy, flash-attention style, without the cancellation of softmax − onehot at the target:
//   partials (grid rows x value splits): per split and row the running max m_s (all values), the argmax (smallest
//     index on ties), rest_s = Σ_{p ≠ t} exp(z_p − m_s) (target excluded), the target logit (by the split that
//     holds it) and num_s[c] = Σ_{p ≠ t} exp(z_p − m_s) Vb[p][c];
//   finish (one 8-lane group per row): m = max_s m_s, rest = Σ_s rest_s e^{m_s − m}, w_t = e^{z_t − m},
//     loss = log1p(rest / w_t), correct = (argmax == t),
//     dyb[i][c] = bf16(scale · (Σ_s e^{m_s − m} num_s[c] − rest · Vb[t][c]) / (w_t + rest)) (zero pads: rows to
//     N_pad, columns to DK), since Σ_p softmax_p V_p − V_t = Σ_{p≠t} softmax_p (V_p − V_t); then the mean loss and
//     the correct count recorded into the TrainState history (per-block partials in block_part, a fixed tree in
//     the last block: deterministic).
struct CeOnePass {
  float* max = nullptr;     // [splits][N]
  double* rest = nullptr;   // [splits][N]
  int* arg = nullptr;       // [splits][N]
  float* zt = nullptr;      // [N]
  float* num = nullptr;     // [splits][N][d]
  double* block_part = nullptr;  // [2 · ce_finish_blocks(N)]
};
std::int64_t ce_finish_blocks(std::int64_t N);
void softmax_ce_partials_bf16(const CeOnePass& st, int splits, const float* y, const __nv_bfloat16* Vb,
                              const std::int32_t* targets, std::int64_t N, std::int64_t P, std::int64_t d,
                              const TrainState* gate, cudaStream_t stream);
void softmax_ce_finish_bf16(const CeOnePass& st, int splits, const __nv_bfloat16* Vb, const std::int32_t* targets,
                            std::int64_t N, std::int64_t d, double scale, __nv_bfloat16* dyb, TrainState* state,
                            double* hist_loss, long long* hist_correct, cudaStream_t stream);

// The one-pass CE from split operands (precision bf16x3 with MEMCAP_GD_KERNEL=onepass; kernels/nn_bf16x3.cuh): the
// logits y Vᵀ and the numerators Σ w V as three bf16 passes each (hi·lo + lo·hi + hi·hi, fp32 accumulation), with
// y split in registers and V given as its two planes Vb_hi, Vb_lo [P_pad][DK] (split_rows_to_bf16); the same
// partials as softmax_ce_partials_bf16. softmax_ce_finish_f32 is softmax_ce_finish_bf16 writing dy [N][d] in float
// and taking the target's value row from the float table V [P][d].
void split_rows_to_bf16(__nv_bfloat16* hi, __nv_bfloat16* lo, const float* x, std::int64_t N, std::int64_t d, int dk,
                        cudaStream_t stream);
void softmax_ce_partials_bf16x3(const CeOnePass& st, int splits, const float* y, const __nv_bfloat16* Vb_hi,
                                const __nv_bfloat16* Vb_lo, const std::int32_t* targets, std::int64_t N,
                                std::int64_t P, std::int64_t d, const TrainState* gate, cudaStream_t stream);
void softmax_ce_finish_f32(const CeOnePass& st, int splits, const float* V, const std::int32_t* targets,
                           std::int64_t N, std::int64_t d, double scale, float* dy, TrainState* state,
                           double* hist_loss, long long* hist_correct, cudaStream_t stream);

}  // namespace memcap::nn::cuda

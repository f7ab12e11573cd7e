// Fused gated-MLP layer for d ≤ 128 (the GD trainer's fast path): the F x m hidden activations never
// reach global memory. Forward, per (row tile, hidden chunk) block:
//   h = (x Uᵀ + b_u) ⊙ σ(x Gᵀ + b_g)   (in registers / shared memory, BN hidden units at a time)
//   y_part[chunk] = h D[:, chunk]ᵀ     (accumulated in registers)
// then y = b_d + Σ_chunk y_part (fixed order). Backward, per (hidden tile, row chunk) block, from x and
// dy only (a, g and h are recomputed):
//   dh = dy D, da = dh ⊙ σ(g), dg = dh ⊙ a ⊙ σ'(g)
//   dU += daᵀ x, dG += dgᵀ x, dD += dyᵀ h, db_u += Σ da, db_g += Σ dg, db_d += Σ dy
// into one partial gradient arena per row chunk (summed by the optimizer kernel in a fixed order).
// Variants: exact (fp32 / fp64 FMA) and tf32 (float only: mma.sync TF32 tensor cores, fp32 accumulate;
// operands rounded to TF32 once when staged in shared memory). CPU reference: the nn::cpu layer chain
// (linear_forward, gated_forward, linear_forward / their backward). Every launch is gated by an
// optional TrainState (no-op when the step is inactive), so it can sit in a captured multi-step graph.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "nn/layers.hpp"
#include "nn_train_state.cuh"

namespace memcap::nn::cuda {

// Largest input / output dimension the fused kernels take (shared-memory tiles hold whole rows).
constexpr std::int64_t kFusedMaxDim = 128;
inline bool fused_mlp_supported(std::int64_t d_in, std::int64_t d_out) {
  return d_in >= 1 && d_out >= 1 && d_in <= kFusedMaxDim && d_out <= kFusedMaxDim;
}

// Tile sizes: rows x hidden units per block step (float 64 x 64, double 32 x 32).
template <class T>
constexpr int fused_tile() {
  return sizeof(T) == 4 ? 64 : 32;
}

// Splits that fill the GPU: `tiles` independent tiles, at most `chunks_max` chunks of work along the
// other axis, `slots` = blocks resident at once (blocks per SM x SMs). Returns the split count s ≤ 64
// with waves x chunks per block within 5% of the minimum (the smallest such s: least partial-sum work).
int fused_splits(std::int64_t tiles, std::int64_t chunks_max, std::int64_t slots);

// Blocks of the fused forward (backward = false) or backward kernel resident per SM for float
// (f64 = false) or double data, the tf32 variant and feature dimension d (≤ 128); at least 1.
int gated_mlp_fused_blocks_per_sm(bool backward, bool f64, bool tf32, std::int64_t d);

struct GatedMlpShape {
  std::int64_t N = 0;  // rows
  std::int64_t d_in = 0, m = 0, d_out = 0;
  Activation act = Activation::identity;
};

// Forward partials: y_part[s][N][d_out] for s < splits (hidden units split in chunks of
// ceil(ceil(m / tile) / splits) tiles). b_u, b_g may be null.
template <class T>
void gated_mlp_forward_fused(T* y_part, int splits, const T* x, const T* U, const T* G, const T* D, const T* b_u,
                             const T* b_g, const GatedMlpShape& s, bool tf32, const TrainState* gate,
                             cudaStream_t stream);

// y = b_d + Σ_s y_part[s] (b_d may be null). With `target` non-null (MSE): also dy = 2 (y − target) /
// (N·d_out) and loss_part[b] = Σ (y − target)² over the entries of block b (double);
// gated_mlp_output_blocks(N·d_out) says how many blocks (partials) there are. dy may be null when target is null.
std::int64_t gated_mlp_output_blocks(std::int64_t n);
template <class T>
void gated_mlp_output(T* y, const T* y_part, int splits, const T* b_d, std::int64_t N, std::int64_t d_out,
                      const T* target, T* dy, double* loss_part, const TrainState* gate, cudaStream_t stream);

// Where the gradients go inside one partial arena (element offsets; -1 = no such tensor).
struct GatedMlpGradOffsets {
  std::int64_t U = 0, G = 0, D = 0, b_u = -1, b_g = -1, b_d = -1;
};

// Backward partials: arena r (grad_part + r·part_stride, r < row_splits) receives the gradient of rows
// chunk r (rows split in chunks of ceil(ceil(N / tile) / row_splits) tiles); every entry of every
// partial arena named by `off` is overwritten. dy = Σ_q dy_part[q] over n_dy_parts partials [N][d_out].
// Biases: b_u, b_g (parameters) may be null; off.b_* < 0 skips their gradients.
template <class T>
void gated_mlp_backward_fused(T* grad_part, std::int64_t part_stride, int row_splits, const GatedMlpGradOffsets& off,
                              const T* x, const T* dy_part, int n_dy_parts, const T* U, const T* G, const T* D,
                              const T* b_u, const T* b_g, const GatedMlpShape& s, bool tf32, const TrainState* gate,
                              cudaStream_t stream);

}  // namespace memcap::nn::cuda

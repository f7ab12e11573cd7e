// Fused value-logit softmax cross-entropy for d ≤ 128 (the GD trainer's fast path), flash-attention
// style: the F x P logit matrix z = y V_allᵀ never reaches global memory.
//   stats   (grid rows x value splits): per row and split, the running max, its index (smallest on
//           ties) and Σ_{j≠argmax} exp(z_j − max), plus the target logit z[i, target[i]];
//   combine (ce_combine_blocks(N) blocks): merges the splits in order -> lse_i, loss_i = (max − z_t) + log1p(others),
//           correct_i; mean loss and correct count in a fixed order, recorded into the TrainState
//           history (sets the early-stop / non-finite flags);
//   grad    (grid rows x value splits): recomputes z and accumulates
//           dy_part[split] = Σ_j (softmax − onehot)_ij / N · V_j   (target entry: expm1(−loss_i) / N).
// Variants exact (fp32 / fp64) and tf32 (float, mma.sync). CPU reference: nn::cpu::linear_forward
// (logits) + cross_entropy_forward / backward + linear_backward (dy = dlogits · V).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "nn_train_state.cuh"

namespace memcap::nn::cuda {

// Per (split, row) partial state, [splits][N] each, and the target logit per row [N].
template <class T>
struct CeStats {
  T* max = nullptr;
  double* others = nullptr;
  int* arg = nullptr;
  T* zt = nullptr;
  // Scratch of 2 · ce_combine_blocks(N) doubles (required by the combine): per-block loss sum and correct count,
  // summed by a fixed tree in the last block to finish (TrainState::loss_blocks_done).
  double* block_part = nullptr;
};

// Blocks of the multi-block combine for N rows (64 rows a block, at most 1024 blocks).
std::int64_t ce_combine_blocks(std::int64_t N);

// Blocks of the stats (grad = false) or grad kernel resident per SM (float / double, tf32, d ≤ 128).
int softmax_ce_fused_blocks_per_sm(bool grad, bool f64, bool tf32, std::int64_t d);

// Value splits run in chunks of ceil(ceil(P / tile) / splits) tiles (tile = fused_tile<T>()).
// at_record_epochs: run only at recorded epochs (dev::record_epoch) — the MSE trainer's accuracy.
template <class T>
void softmax_ce_stats_fused(const CeStats<T>& st, int splits, const T* y, const T* V, const std::int32_t* targets,
                            std::int64_t N, std::int64_t P, std::int64_t d, bool tf32, const TrainState* gate,
                            bool at_record_epochs, cudaStream_t stream);

// On ce_combine_blocks(N) blocks (st.block_part required). accuracy_only: write only hist_correct[step] (gated like
// the stats at record epochs);
// otherwise also row_lse / row_loss (T, [N]) and record the mean loss (dev::record_loss).
// `state` must not be null.
template <class T>
void softmax_ce_combine(const CeStats<T>& st, int splits, const std::int32_t* targets, std::int64_t N, T* row_lse,
                        T* row_loss, TrainState* state, double* hist_loss, long long* hist_correct, bool accuracy_only,
                        cudaStream_t stream);

// dy_part[s][N][d] for s < splits (same value split as the stats), scale = dloss / N.
template <class T>
void softmax_ce_grad_fused(T* dy_part, int splits, const T* y, const T* V, const std::int32_t* targets, const T* row_lse,
                           const T* row_loss, std::int64_t N, std::int64_t P, std::int64_t d, double scale, bool tf32,
                           const TrainState* gate, cudaStream_t stream);

// Loss recording for the paths whose loss is a sum of partials (MSE, or the generic path's device
// scalar): loss = Σ_b parts[b] (in order) / denom; dev::record_loss; with n_correct non-null also
// hist_correct[step] = *n_correct. One thread. Gated by the state (no-op when inactive).
void record_loss_parts(const double* parts, int nparts, double denom, const std::int64_t* n_correct,
                       TrainState* state, double* hist_loss, long long* hist_correct, cudaStream_t stream);

}  // namespace memcap::nn::cuda

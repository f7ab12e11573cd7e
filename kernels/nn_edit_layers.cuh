// CUDA versions of the fact-editing block's layers (spec hebbian.md §6.4): GELU, RoPE, low-rank path,
// router mix (CPU reference: src/nn/edit_layers.hpp) and the tied-embedding logits + cross-entropy
// (src/nn/tied_ce.hpp). Same names and argument order as nn::cpu, for float and double, plus a
// trailing cudaStream_t (and a cublasHandle_t before it where a GEMM runs; the handle must be bound to
// the stream, as in nn_layers.cuh). Host-side declarations only (usable from .cpp files).
// Nothing allocates or synchronises the host, so a training step can be captured in a CUDA graph;
// scratch comes from the caller. Every reduction has a fixed order: results are bit-identical run to
// run. GEMMs use the handle's math mode (TF32 only when the caller turned it on).
// Causal softmax attention (W_v = W_o = I) is not here: kernels/kata_mqar_mixers.cuh softmax_heads_*.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace memcap::nn::cuda {

// GELU (exact erf) and its derivative, element-wise over n entries (in place allowed).
template <class T>
void gelu_forward(T* y, const T* x, std::int64_t n, cudaStream_t stream);
template <class T>
void gelu_backward(T* dx, const T* dy, const T* x, std::int64_t n, cudaStream_t stream);

// RoPE on rows [B, T, H, dh] at positions 0..T−1 (angles in double); backward = rotation by −θ.
// In place allowed.
template <class T>
void rope_forward(T* out, const T* inp, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dh, double base,
                  cudaStream_t stream);
template <class T>
void rope_backward(T* dinp, const T* dout, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dh,
                   double base, cudaStream_t stream);
// The same on token rows ld elements apart (ld ≥ H·dh; e.g. the q or k part of a fused [N, 3D] qkv, ld = 3D).
template <class T>
void rope_forward_ld(T* out, const T* inp, std::int64_t ld, std::int64_t B, std::int64_t Tn, std::int64_t H,
                     std::int64_t dh, double base, cudaStream_t stream);
template <class T>
void rope_backward_ld(T* dinp, const T* dout, std::int64_t ld, std::int64_t B, std::int64_t Tn, std::int64_t H,
                      std::int64_t dh, double base, cudaStream_t stream);

// mid[N,R] = inp·U[C,R], out[N,C] = mid·V[R,C] (two GEMMs).
template <class T>
void lowrank_forward(T* out, T* mid, const T* inp, const T* U, const T* V, std::int64_t N, std::int64_t C,
                     std::int64_t R, cublasHandle_t h, cudaStream_t stream);
// dmid = dout·Vᵀ (scratch [N,R]), dV += midᵀ·dout, dU += inpᵀ·dmid, dinp = dmid·Uᵀ (null skips).
template <class T>
void lowrank_backward(T* dinp, T* dU, T* dV, T* dmid, const T* dout, const T* inp, const T* mid, const T* U,
                      const T* V, std::int64_t N, std::int64_t C, std::int64_t R, cublasHandle_t h,
                      cudaStream_t stream);

// alpha = sigmoid(z), out = alpha·f + (1 − alpha)·l (out may alias f or l).
template <class T>
void router_mix_forward(T* out, T* alpha, const T* z, const T* f, const T* l, std::int64_t N, std::int64_t C,
                        cudaStream_t stream);
// df = alpha·dout, dl = (1 − alpha)·dout, dz = alpha(1 − alpha)·Σ_c dout·(f − l) (one warp per row; null skips).
template <class T>
void router_mix_backward(T* dz, T* df, T* dl, const T* dout, const T* alpha, const T* f, const T* l, std::int64_t N,
                         std::int64_t C, cudaStream_t stream);

// ---- tied logits + cross-entropy --------------------------------------------------------------------
// Scratch of the tiled passes: `tile` holds tile_rows × tile_cols logits (T), `row_sum` N doubles (the
// running Σ exp of the forward). Size it with tied_ce_tile_shape.
template <class T>
struct TiedCeWorkspace {
  T* tile = nullptr;
  std::int64_t tile_rows = 0, tile_cols = 0;
  double* row_sum = nullptr;
};
// Default tile for N rows and a vocabulary of V: rows ≤ 1024, columns ≤ 8192 (≤ 32 MiB of float logits).
void tied_ce_tile_shape(std::int64_t N, std::int64_t V, std::int64_t* tile_rows, std::int64_t* tile_cols);

// losses[N] (0 for ignored rows), lse[N], argmax[N] (smallest index on ties; may be null) as the CPU
// reference. The vocabulary tiles of a row block run in order and merge into the row's running max /
// Σ exp (so the result does not depend on timing). Then one block reduces in a fixed order:
// *loss_mean (device double, may be null) = mean over non-ignored rows (0 if none), *n_valid (device
// int64, may be null). Targets must be kIgnoreLabel or lie in [0, V) (not checked on the device).
template <class T>
void tied_logits_ce_forward(T* losses, T* lse, std::int32_t* argmax, const T* X, const T* E,
                            const std::int32_t* targets, std::int64_t N, std::int64_t V, std::int64_t C,
                            double* loss_mean, std::int64_t* n_valid, const TiedCeWorkspace<T>& ws, cublasHandle_t h,
                            cudaStream_t stream);
// dX = g·E (overwritten; null skips), dE += gᵀ·X (null skips), g recomputed tile by tile as the CPU
// reference (scale = dloss / n_valid for the mean loss; the caller knows n_valid or reads it back).
template <class T>
void tied_logits_ce_backward(T* dX, T* dE, const T* X, const T* E, const std::int32_t* targets, const T* lse,
                             std::int64_t N, std::int64_t V, std::int64_t C, double scale,
                             const TiedCeWorkspace<T>& ws, cublasHandle_t h, cudaStream_t stream);
// The same with scale = dloss / *n_valid read on the device (0 when *n_valid = 0): n_valid as written by
// the forward, so a captured training step follows batches with different numbers of ignored labels.
template <class T>
void tied_logits_ce_backward_mean(T* dX, T* dE, const T* X, const T* E, const std::int32_t* targets, const T* lse,
                                  std::int64_t N, std::int64_t V, std::int64_t C, double dloss,
                                  const std::int64_t* n_valid, const TiedCeWorkspace<T>& ws, cublasHandle_t h,
                                  cudaStream_t stream);

}  // namespace memcap::nn::cuda

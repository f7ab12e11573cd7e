// CUDA kernels of the SSFR block (CPU reference: src/nn/ssfr_data.cpp, src/nn/ssfr_layers.cpp,
// src/nn/ssfr_model.cpp), namespace memcap::nn::cuda, float and double. Host-side declarations
// only. The GEMMs of the block run through cuBLAS (src/nn/ssfr_train_cuda.cpp); these kernels do
// the rest: batch drawing (the same counter-based sequences as the CPU), row gathers, the
// query attention over gathered rows and its backward, unit L2 norms and their backward, and the
// evaluation accumulators. Every kernel is capturable (no host sync) and deterministic (fixed
// reduction trees, sums over positions in position order).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "nn/ssfr_sequence.hpp"
#include "nn_train_state.cuh"

namespace memcap::nn::cuda {

// B sequences of batch `batch` (or, when st is non-null, of batch st->step) of (seed, stream):
// tokens [B×T] (kSsfrPad padding), len[b] = Q_b + 1, qrow[b] = token at Q_b, target[b] = map[key].
void ssfr_batch(std::int32_t* tokens, std::int32_t* len, std::int32_t* qrow, std::int32_t* target,
                const std::int32_t* map, const SsfrDims& dims, std::uint64_t seed, std::uint64_t stream,
                std::uint64_t batch, const TrainState* st, std::int64_t B, cudaStream_t s);

// out[n,:] = table[rows[n],:]  (N rows of C columns).
template <class T>
void ssfr_gather_rows(T* out, const T* table, const std::int32_t* rows, std::int64_t N, std::int64_t C,
                      cudaStream_t s);

// Causal softmax attention read at one query per row, the device twin of cpu::attention_query_forward
// (nn/ssfr_layers.hpp; same arguments): row n attends to positions t < len[n] with key and value rows
// K[rows[n·T + t]], V[rows[n·T + t]] (tables of C columns), scale 1/√C:
//   att[n,t] = softmax_t(q[n]·K[rows]/√C) (0 for t >= len[n]),  ctx[n] = Σ_t att[n,t] V[rows].
template <class T>
void attention_query_forward(T* ctx, T* att, const T* q, const T* K, const T* V, const std::int32_t* rows,
                             const std::int32_t* len, std::int64_t N, std::int64_t T_, std::int64_t C,
                             cudaStream_t s);
// Backward of the query attention (cpu::attention_query_backward without its dK/dV scatters, which the
// GPU trainer does not need: it keeps K = V = the normalised embedding table and moves W_k, W_v onto
// the query / context side, see src/nn/ssfr_train_cuda.cpp): dq overwritten, dscores N×T overwritten
// with ds_t = att_t (dα_t − Σ_u att_u dα_u)/√C, dα_t = dctx[n]·V[rows].
template <class T>
void attention_query_backward(T* dq, T* dscores, const T* dctx, const T* att, const T* K, const T* V,
                              const std::int32_t* rows, const std::int32_t* len, std::int64_t N, std::int64_t T_,
                              std::int64_t C, cudaStream_t s);

// out = inp / (‖inp‖ + eps) per row; norm[n] = ‖inp[n]‖ (may be null). With `add` non-null the
// input is inp + add (written to sum, which must then be non-null): the residual z = a + x_Q.
template <class T>
void ssfr_l2norm_forward(T* out, T* norm, T* sum, const T* inp, const T* add, std::int64_t N, std::int64_t C,
                         double eps, cudaStream_t s);
// dinp = dout/(r+eps) − inp (inp·dout)/(r (r+eps)²), r = ‖inp‖ (0 second term for a zero row).
template <class T>
void ssfr_l2norm_backward(T* dinp, const T* dout, const T* inp, std::int64_t N, std::int64_t C, double eps,
                          cudaStream_t s);

// y += x over n entries.
template <class T>
void ssfr_add(T* y, const T* x, std::int64_t n, cudaStream_t s);

// Evaluation accumulators: acc_loss += *loss, acc_correct += *n_correct (one thread).
void ssfr_accumulate(double* acc_loss, long long* acc_correct, const double* loss, const std::int64_t* n_correct,
                     cudaStream_t s);

}  // namespace memcap::nn::cuda

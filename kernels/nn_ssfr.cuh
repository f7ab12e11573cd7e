// CUDA kernels of the SSFR block (CPU reference: src/nn/ssfr_data.cpp, src/nn/ssfr_layers.cpp,
// src/nn/ssfr_model.cpp), namespace memcap::nn::cuda, float and double. Host-side declarations
// only. The GEMMs of the block run through cuBLAS (src/nn/ssfr_train_cuda.cpp); these kernels do
// the rest: batch drawing (the same counter-based sequences as the CPU), row gathers, the
// per-row softmax of the query attention with its scatter onto vocabulary rows, unit L2 norms and
// their backward, and the evaluation accumulators. Every kernel is capturable (no host sync) and
// deterministic (fixed reduction trees; the scatters run in position order on one lane).
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

// Query attention, softmax part: with scores QK[N×V] (q_n · K_v for every vocabulary row v),
// att[n,t] = softmax_{t<len[n]}(QK[n, tokens[n,t]] · scale) (0 for t >= len[n]) and
// A[n,v] = Σ_{t: tokens[n,t] = v} att[n,t] (so ctx = A · V_table).
template <class T>
void ssfr_attention_softmax(T* att, T* A, const T* QK, const std::int32_t* tokens, const std::int32_t* len,
                            std::int64_t N, std::int64_t T_, std::int64_t V, double scale, cudaStream_t s);
// Backward of the softmax: with dA[N×V] = dctx · V_tableᵀ, dα_t = dA[n, tokens[n,t]],
// ds_t = att_t (dα_t − Σ_u att_u dα_u) · scale, and S[n,v] = Σ_{t: tokens = v} ds_t (then dq = S·K,
// dK = Sᵀ·q). ds: N×T scratch.
template <class T>
void ssfr_attention_softmax_backward(T* S, T* ds, const T* dA, const T* att, const std::int32_t* tokens,
                                     const std::int32_t* len, std::int64_t N, std::int64_t T_, std::int64_t V,
                                     double scale, cudaStream_t s);

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

// Device-side bookkeeping of the MQAR GPU trainer (src/kata/mqar_train_cuda.cpp): the global gradient
// norm (fixed chunks of kGradNormChunk entries summed in float64, then the chunks in order: bit-identical
// run to run), the step record (loss, correct count, gradient norm into device histories at the step
// counter of a nn::cuda::TrainState, non-finite detection), the clip scale and the evaluation
// accumulators. Host-side declarations; every function runs on `stream`, allocates nothing and is
// capturable in a CUDA graph.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "nn_train_state.cuh"

namespace memcap::kata::mqar::cuda {

constexpr std::int64_t kGradNormChunk = 1 << 14;  // the CPU trainer's kSumChunk

// Partial sums of squares: partial[c] = Σ_{i in chunk c} g_i², c < grad_norm_chunks(n).
std::int64_t grad_norm_chunks(std::int64_t n);
template <class T>
void grad_sumsq(double* partial, const T* g, std::int64_t n, cudaStream_t stream);

// One thread, gated by `st` (an inactive step writes *coef = 1 and nothing else): gn = sqrt(Σ partial) in
// chunk order; hist_loss[step] = *loss_mean, hist_correct[step] = *n_correct, hist_gn[step] = gn; a
// non-finite loss sets st->nonfinite = 1 and st->stop, a non-finite norm nonfinite = 2 and stop (no update
// then runs for the step); *coef = clip / (gn + 1e-6) when clip > 0 and gn > clip (torch clip_grad_norm_),
// else 1.
void record_step(const double* partial, std::int64_t chunks, const double* loss_mean, const std::int64_t* n_correct,
                 double clip, nn::cuda::TrainState* st, double* hist_loss, long long* hist_correct, double* hist_gn,
                 double* coef, cudaStream_t stream);

// g *= *coef (skipped when *coef == 1).
template <class T>
void scale_grads(T* g, std::int64_t n, const double* coef, cudaStream_t stream);

// *acc_loss += *loss_mean · labelled; *acc_correct += *n_correct (one thread).
void eval_accumulate(double* acc_loss, long long* acc_correct, const double* loss_mean, const std::int64_t* n_correct,
                     std::int64_t labelled, cudaStream_t stream);

}  // namespace memcap::kata::mqar::cuda

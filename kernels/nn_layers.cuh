// CUDA versions of the training layers of src/nn/layers.hpp (namespace memcap::nn::cuda): same
// names and argument order as nn::cpu, for float and double, plus a trailing cudaStream_t (and a
// cublasHandle_t before it where a GEMM runs). Host-side declarations only (usable from .cpp files).
//
// Differences from the CPU reference, all forced by "no host sync, capturable in a CUDA graph":
//  * results the CPU returns as a double (mean CE loss, MSE) are written to DEVICE scalars;
//  * Adam reads lr and the step t from device memory, so a captured graph replays with new values;
//  * scratch the CPU allocates itself (per-row CE losses) must be passed in.
// Row-major buffers, as on the CPU. GEMMs: cuBLAS with the handle's math mode (the caller turns TF32
// on with cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH); default is exact fp32). The handle must
// be bound to `stream` (gpu::Handles does that); a mismatch is a DeviceError. Reductions (bias
// gradients, loss means, correct counts) use a fixed order: bit-identical results run to run.
// Element-wise layers allow in-place use (output aliasing an input of the same index).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "nn/layers.hpp"  // Activation, Loss

namespace memcap::nn::cuda {

// The one cuBLAS GEMM call of the nn kernels: column-major C[m,n] = alpha op(A) op(B) + beta C (cublas<S|D>gemm).
template <class T>
void gemm_cm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha, const T* A,
             int lda, const T* B, int ldb, T beta, T* C, int ldc);
// Column-major strided-batched C[i] = alpha op(A[i]) op(B[i]) + beta C[i], i < batch, with A[i] = A + i·sa etc.
// (cublas<S|D>gemmStridedBatched; sizes beyond cuBLAS's int range are a UserError; batch or m·n = 0 is a no-op).
template <class T>
void gemm_cm_strided(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, std::int64_t m, std::int64_t n,
                     std::int64_t k, T alpha, const T* A, std::int64_t lda, std::int64_t sa, const T* B,
                     std::int64_t ldb, std::int64_t sb, T beta, T* C, std::int64_t ldc, std::int64_t sc,
                     std::int64_t batch);
// v as a cuBLAS int; UserError "<layer>: <what> = v is outside cuBLAS's 32-bit range" otherwise.
int cublas_int(std::int64_t v, const char* layer, const char* what);

// Row-major GEMM on the handle's stream: C[M,N] = op(A)[M,K] · op(B)[K,N] + beta·C, where op(A) = A
// stored M×K, or Aᵀ with A stored K×M when ta; likewise op(B) (B stored K×N, or N×K when tb). Sizes
// beyond cuBLAS's int range are a UserError. The one row-major GEMM wrapper of the trainers.
template <class T>
void gemm_rm(cublasHandle_t h, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const T* A,
             const T* B, T* C, double beta);

// out[N,OC] = inp[N,C] · W[OC,C]ᵀ + bias[OC]   (bias may be null)
template <class T>
void linear_forward(T* out, const T* inp, const T* W, const T* bias, std::int64_t N, std::int64_t C,
                    std::int64_t OC, cublasHandle_t h, cudaStream_t stream);
// dinp[N,C] = dout·W (overwritten; skipped when null), dW[OC,C] += doutᵀ·inp (skipped when null),
// dbias[OC] += Σ_n dout (skipped when null).
template <class T>
void linear_backward(T* dinp, T* dW, T* dbias, const T* dout, const T* inp, const T* W, std::int64_t N,
                     std::int64_t C, std::int64_t OC, cublasHandle_t h, cudaStream_t stream);

// Strided-batched forms for layers that share their input (the GD trainer's U and G halves: one
// cuBLAS launch for both). out[b][N,OC] = inp[N,C] · W[b][OC,C]ᵀ with W[b] = W + b·OC·C and
// out[b] = out + b·N·OC; dW[b][OC,C] = dout[b]ᵀ·inp (OVERWRITTEN, unlike linear_backward's +=) with
// dout[b] = dout + b·N·OC, dW[b] = dW + b·OC·C. batch ≥ 1.
template <class T>
void linear_forward_batched(T* out, const T* inp, const T* W, std::int64_t batch, std::int64_t N, std::int64_t C,
                            std::int64_t OC, cublasHandle_t h, cudaStream_t stream);
template <class T>
void linear_weight_grad_batched(T* dW, const T* dout, const T* inp, std::int64_t batch, std::int64_t N,
                                std::int64_t C, std::int64_t OC, cublasHandle_t h, cudaStream_t stream);

// y = σ(x), dx = dy ⊙ σ'(x) over n entries (ReLU'(0) = 0 as in PyTorch).
template <class T>
void activation_forward(T* y, const T* x, std::int64_t n, Activation act, cudaStream_t stream);
template <class T>
void activation_backward(T* dx, const T* dy, const T* x, std::int64_t n, Activation act, cudaStream_t stream);

// h = a ⊙ σ(g); da = dh ⊙ σ(g), dg = dh ⊙ a ⊙ σ'(g) (one fused kernel each; da/dg may alias a/g).
template <class T>
void gated_forward(T* h, const T* a, const T* g, std::int64_t n, Activation act, cudaStream_t stream);
template <class T>
void gated_backward(T* da, T* dg, const T* dh, const T* a, const T* g, std::int64_t n, Activation act,
                    cudaStream_t stream);

// Softmax cross-entropy, one block per row (llm.c's layout), log-sum-exp stable: losses[N] (required,
// device scratch) = logsumexp(row) − row[target]; correct[N] (may be null) = argmax (smallest index on
// ties) == target. Then one block reduces in a fixed order: *loss_mean (device double, may be null) =
// mean of losses, *n_correct (device int64, may be null) = Σ correct. Targets must lie in [0, P)
// (not checked on the device: an out-of-range target reads no memory but gives a NaN loss).
// The per-row loss is computed as (max − row[target]) + log1p(Σ_{j≠argmax} exp(row_j − max)), so
// losses near zero keep their relative precision in float32.
template <class T>
void cross_entropy_forward(T* losses, const T* logits, const std::int32_t* targets, std::int64_t N,
                           std::int64_t P, std::uint8_t* correct, double* loss_mean, std::int64_t* n_correct,
                           cudaStream_t stream);
// dlogits[N,P] = (softmax(logits) − onehot(target)) · dloss / N (overwritten; may alias logits).
template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N,
                            std::int64_t P, double dloss, cudaStream_t stream);

// Both at once, one kernel reading each row once (then the same one-block reduction): losses, correct,
// *loss_mean, *n_correct as cross_entropy_forward, dlogits as cross_entropy_backward (may alias logits).
template <class T>
void cross_entropy_forward_backward(T* dlogits, T* losses, const T* logits, const std::int32_t* targets,
                                    std::int64_t N, std::int64_t P, std::uint8_t* correct, double* loss_mean,
                                    std::int64_t* n_correct, double dloss, cudaStream_t stream);

// MSE over N·D entries: *loss (device double) = mean((y − t)²), reduced in a fixed order (one block);
// dy = 2 (y − t) · dloss / (N·D) (overwritten; may alias y).
template <class T>
void mse_forward(const T* y, const T* t, std::int64_t N, std::int64_t D, double* loss, cudaStream_t stream);
template <class T>
void mse_backward(T* dy, const T* y, const T* t, std::int64_t N, std::int64_t D, double dloss,
                  cudaStream_t stream);

// Adam / AdamW over one flat arena of n parameters, PyTorch semantics (as nn::cpu::adam_update), one
// fused kernel. lr (double) and t (int64, ≥ 1) are read from DEVICE memory at run time.
template <class T>
void adam_update(T* p, const T* g, T* m, T* v, std::int64_t n, const double* lr, double beta1, double beta2,
                 double eps, double weight_decay, const std::int64_t* t, bool adamw, cudaStream_t stream);

// Host-side check that a cuBLAS handle is bound to `stream` (DeviceError otherwise).
void check_handle_stream(cublasHandle_t h, cudaStream_t stream);

}  // namespace memcap::nn::cuda

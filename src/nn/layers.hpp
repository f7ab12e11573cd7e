// Training layers in llm.c's shape: each layer is a pair of plain functions <layer>_forward /
// <layer>_backward on explicit row-major buffers, no autograd, no allocation. This header is the
// CPU float64 reference (namespace memcap::nn::cpu); kernels/nn_layers.cuh declares the CUDA
// float32 versions with the same names and argument order (namespace memcap::nn::cuda, plus a
// trailing cudaStream_t). Backward functions ACCUMULATE (+=) into parameter gradients and
// OVERWRITE input gradients unless noted, so one zeroing of the gradient arena per step suffices.
#pragma once
#include <cstdint>

namespace memcap::nn {

enum class Activation : int { identity = 0, relu = 1, silu = 2 };
enum class Loss : int { ce = 0, mse = 1 };
const char* to_string(Activation a);
const char* to_string(Loss l);
Activation parse_activation(const char* s);  // identity|relu|silu (UserError otherwise)
Loss parse_loss(const char* s);              // ce|mse

namespace cpu {

// out[N,OC] = inp[N,C] · W[OC,C]ᵀ + bias[OC]   (bias may be null)
void linear_forward(double* out, const double* inp, const double* W, const double* bias,
                    std::int64_t N, std::int64_t C, std::int64_t OC);
// dinp[N,C] = dout·W (overwritten; skipped when dinp is null), dW[OC,C] += doutᵀ·inp (skipped when
// null), dbias[OC] += Σ_n dout (skipped when null).
void linear_backward(double* dinp, double* dW, double* dbias, const double* dout, const double* inp,
                     const double* W, std::int64_t N, std::int64_t C, std::int64_t OC);

// Element-wise activation y = σ(x) over n entries, and dx = dy ⊙ σ'(x) (overwritten).
void activation_forward(double* y, const double* x, std::int64_t n, Activation act);
void activation_backward(double* dx, const double* dy, const double* x, std::int64_t n, Activation act);

// Gated product h = a ⊙ σ(g) over n entries; da = dh ⊙ σ(g), dg = dh ⊙ a ⊙ σ'(g) (overwritten).
void gated_forward(double* h, const double* a, const double* g, std::int64_t n, Activation act);
void gated_backward(double* da, double* dg, const double* dh, const double* a, const double* g,
                    std::int64_t n, Activation act);

// Softmax cross-entropy over a logit matrix: losses[N] = logsumexp(logits[n,:]) − logits[n,target[n]]
// (stable); returns the mean loss. correct[n] (may be null) = 1 if argmax (smallest index on ties)
// equals target[n].
double cross_entropy_forward(double* losses, const double* logits, const std::int32_t* targets,
                             std::int64_t N, std::int64_t P, std::uint8_t* correct);
// dlogits[N,P] = (softmax(logits) − onehot(target)) · dloss / N   (overwritten).
void cross_entropy_backward(double* dlogits, const double* logits, const std::int32_t* targets,
                            std::int64_t N, std::int64_t P, double dloss = 1.0);

// Mean squared error over N·D entries: mean((y − t)²); dy = 2 (y − t) · dloss / (N·D) (overwritten).
double mse_forward(const double* y, const double* t, std::int64_t N, std::int64_t D);
void mse_backward(double* dy, const double* y, const double* t, std::int64_t N, std::int64_t D,
                  double dloss = 1.0);

// Adam / AdamW over one flat arena of n parameters (PyTorch semantics, bias-corrected, step t ≥ 1):
// Adam adds weight_decay·p to the gradient; AdamW decays p by lr·weight_decay before the update.
void adam_update(double* p, const double* g, double* m, double* v, std::int64_t n, double lr,
                 double beta1, double beta2, double eps, double weight_decay, std::int64_t t, bool adamw);

}  // namespace cpu

// Cosine annealing (PyTorch CosineAnnealingLR, stepped once per epoch, spec hebbian.md §2.6):
// lr_t = lr_min + ½ (lr_max − lr_min)(1 + cos(π t / T)), t = 0, 1, ... (T = total epochs).
double cosine_lr(double lr_max, double lr_min, std::int64_t t, std::int64_t T);

}  // namespace memcap::nn

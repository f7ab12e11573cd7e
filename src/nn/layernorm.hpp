// LayerNorm over the last axis (PyTorch nn.LayerNorm: biased variance, eps inside the square root,
// weight and bias), in llm.c's shape: plain functions on row-major buffers, CPU, templated on the
// scalar (double = the float64 reference, float = the CPU training path). Single-threaded: callers
// parallelise over independent batches. Backward OVERWRITES dinp and ADDS into dweight / dbias.
#pragma once
#include <cstdint>

namespace memcap::nn::cpu {

// out[n,:] = (inp[n,:] − mean_n) · rstd_n ⊙ weight + bias; mean[n], rstd[n] = 1/sqrt(var_n + eps) kept for
// the backward (either may be null when no backward follows).
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, std::int64_t N,
                       std::int64_t C, double eps);
// dinp = rstd·(g − mean(g) − x̂·mean(g ⊙ x̂)) with g = dout ⊙ weight, x̂ = (inp − mean)·rstd (overwritten; null skips);
// dweight += Σ_n dout ⊙ x̂, dbias += Σ_n dout (null skips).
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, std::int64_t N, std::int64_t C);

// The residual add fused with the LayerNorm that follows it (a pre-norm block's x ← x + f(x); h = LN(x)):
// sum = a + b element-wise in T (sum may alias a or b), then out = LayerNorm(sum) as layernorm_forward.
template <class T>
void add_layernorm_forward(T* sum, T* out, T* mean, T* rstd, const T* a, const T* b, const T* weight, const T* bias,
                           std::int64_t N, std::int64_t C, double eps);
// The LayerNorm backward fused with the residual add of its gradient: dinp = add + (layernorm_backward's dinp,
// rounded to T first), dweight / dbias as layernorm_backward. dinp may alias add or dout (element-wise).
template <class T>
void layernorm_backward_add(T* dinp, T* dweight, T* dbias, const T* add, const T* dout, const T* inp,
                            const T* weight, const T* mean, const T* rstd, std::int64_t N, std::int64_t C);

}  // namespace memcap::nn::cpu

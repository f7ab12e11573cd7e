// Layers of the fact-editing LM block (spec hebbian.md §6.4) that the other nn layers do not cover:
// exact-erf GELU, RoPE (HF Llama convention), the low-rank path a·U·V and the router's sigmoid mix of
// the fact expert with it. llm.c's shape: plain functions on row-major buffers, CPU, templated on the
// scalar (double = the float64 reference checked by finite differences; float = the CPU training
// path), single-threaded. kernels/nn_edit_layers.cuh declares the CUDA versions of the same names.
// Backward functions OVERWRITE input gradients and ADD (+=) into parameter gradients; a null
// gradient pointer skips that output.
#pragma once
#include <cstdint>

namespace memcap::nn {

// RoPE base of §6.4 ("match_high_freq"): 10000^(d/1024), = 10 for d = 256.
double rope_base_for(std::int64_t d);

namespace cpu {

// GELU, exact erf form (PyTorch nn.GELU()): y = x·Φ(x) = ½x(1 + erf(x/√2));
// dx = dy·(Φ(x) + x·φ(x)), φ the standard normal density. Element-wise over n entries (in place allowed).
template <class T>
void gelu_forward(T* y, const T* x, std::int64_t n);
template <class T>
void gelu_backward(T* dx, const T* dy, const T* x, std::int64_t n);

// RoPE on rows x[B, T, H, dh] (dh even), token t of every sequence at position t = 0..T−1:
// θ_{t,j} = t·base^(−2j/dh), j < dh/2; y_j = x_j cos θ − x_{j+dh/2} sin θ, y_{j+dh/2} = x_{j+dh/2} cos θ + x_j sin θ
// (x' = x cos + rotate_half(x) sin, cos/sin duplicated across halves). Angles in double.
// Backward is the rotation by −θ: dx_j = dy_j cos θ + dy_{j+dh/2} sin θ, dx_{j+dh/2} = dy_{j+dh/2} cos θ − dy_j sin θ.
// In place allowed (out == inp, dinp == dout).
template <class T>
void rope_forward(T* out, const T* inp, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dh, double base);
template <class T>
void rope_backward(T* dinp, const T* dout, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dh,
                   double base);

// Low-rank path of §6.4: mid[N,R] = inp[N,C]·U[C,R], out[N,C] = mid·V[R,C] (U, V row-major as written in
// the spec, U ∈ R^{d×8}, V ∈ R^{8×d}). mid is kept for the backward.
template <class T>
void lowrank_forward(T* out, T* mid, const T* inp, const T* U, const T* V, std::int64_t N, std::int64_t C,
                     std::int64_t R);
// dmid = dout·Vᵀ (scratch [N,R], overwritten), dV += midᵀ·dout, dU += inpᵀ·dmid, dinp = dmid·Uᵀ (overwritten).
template <class T>
void lowrank_backward(T* dinp, T* dU, T* dV, T* dmid, const T* dout, const T* inp, const T* mid, const T* U,
                      const T* V, std::int64_t N, std::int64_t C, std::int64_t R);

// Router mix of §6.4: alpha[n] = sigmoid(z[n]); out[n,:] = alpha·f[n,:] + (1 − alpha)·l[n,:]
// (z: the router logit w2ᵀGELU(W1 a + b1) + b2, f: the fact expert's output, l: the low-rank path).
template <class T>
void router_mix_forward(T* out, T* alpha, const T* z, const T* f, const T* l, std::int64_t N, std::int64_t C);
// df = alpha·dout, dl = (1 − alpha)·dout, dz[n] = alpha(1 − alpha)·Σ_c dout·(f − l) (all overwritten).
template <class T>
void router_mix_backward(T* dz, T* df, T* dl, const T* dout, const T* alpha, const T* f, const T* l, std::int64_t N,
                         std::int64_t C);

}  // namespace cpu
}  // namespace memcap::nn

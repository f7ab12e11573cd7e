// CUDA mixer cores of the MQAR language model (spec kata.md §1.2, §1.3, §2.11, §4.4, §5.4): the device
// twins of src/kata/mqar_mixers.hpp (the float64 CPU reference of the same names), batched over every
// (sequence, head) of a batch. Host-side declarations only (usable from .cpp files of a CUDA build).
//
// Layout: row-major token rows. Head h of sequence b, token t of a tensor X with row stride ldx is
// X[(b·T + t)·ldx + h·dh + j], j < dh (so a packed [N, 3D] q|k|v buffer is passed as three pointers
// with ld = 3D). Per-row statistics (lse, den) are [B, H, T] contiguous; β is [B·T, H] (row stride H).
// Every function runs on `stream`, allocates nothing and never synchronises the host, so a training
// step that calls it can be captured in a CUDA graph; scratch comes from the caller, sized by the
// matching *_workspace_bytes function (0 = none needed). Backward functions OVERWRITE their outputs
// and recompute what they need from q, k (nothing quadratic in T is stored between the passes).
// T (element type) is float (training) or double (tests against the CPU reference).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kata/map_params.hpp"

namespace memcap::kata::mqar::cuda {

struct HeadShape {
  std::int64_t B = 0, T = 0, H = 0, dh = 0;
};

// ---- causal softmax: o = softmax_causal(q kᵀ · scale) v; lse[b,h,t] = log Σ_{s<=t} exp(score) kept.
template <class T>
void softmax_heads_forward(T* o, std::int64_t ldo, T* lse, const T* q, const T* k, const T* v, std::int64_t ldqkv,
                           const HeadShape& s, double scale, cudaStream_t stream);
std::size_t softmax_heads_backward_workspace_bytes(const HeadShape& s, std::size_t elem);
template <class T>
void softmax_heads_backward(T* dq, T* dk, T* dv, std::int64_t lddqkv, const T* dout, const T* o, std::int64_t ldo,
                            const T* q, const T* k, const T* v, std::int64_t ldqkv, const T* lse, const HeadShape& s,
                            double scale, void* workspace, cudaStream_t stream);

// ---- normalized causal KATA, quadratic form: o_t = Σ_{s<=t} A_ts v_s / Σ_{s<=t} A_ts with
// A_ts = <ψ(q_t), ψ(k_s)> (closed form for M_g / Σ_g, explicit ψ from kata_feature_map.cuh otherwise);
// den[b,h,t] kept; a zero denominator gives o_t = 0 and no gradient through that row.
template <class T>
void kata_heads_forward(T* o, std::int64_t ldo, T* den, const MapParams& map, const T* q, const T* k, const T* v,
                        std::int64_t ldqkv, const HeadShape& s, cudaStream_t stream);
std::size_t kata_heads_backward_workspace_bytes(const MapParams& map, const HeadShape& s, std::size_t elem);
template <class T>
void kata_heads_backward(T* dq, T* dk, T* dv, std::int64_t lddqkv, const T* dout, const T* o, std::int64_t ldo,
                         const MapParams& map, const T* q, const T* k, const T* v, std::int64_t ldqkv, const T* den,
                         const HeadShape& s, void* workspace, cudaStream_t stream);

// ---- delta rule (§2.11.4, §5.4), unnormalized readout, chunked with the Neumann-doubling inverse:
// S_t = S_{t-1} + β_t ψ(k_t) (v_t − S_{t-1}ᵀ ψ(k_t))ᵀ, o_t = S_tᵀ ψ(q_t). q, k are the ℓ2-normalized
// rows (the caller normalizes); ψ is formed inside (workspace), β is [B·T, H].
std::size_t delta_heads_forward_workspace_bytes(const MapParams& map, const HeadShape& s, std::int64_t chunk,
                                                std::size_t elem);
template <class T>
void delta_heads_forward(T* o, std::int64_t ldo, const MapParams& map, const T* q, const T* k, const T* v,
                         std::int64_t ldqkv, const T* beta, const HeadShape& s, std::int64_t chunk, void* workspace,
                         cudaStream_t stream);
std::size_t delta_heads_backward_workspace_bytes(const MapParams& map, const HeadShape& s, std::int64_t chunk,
                                                 std::size_t elem);
// dq, dk: gradients w.r.t. the ℓ2-normalized q, k (through ψ's VJP); dbeta [B·T, H].
template <class T>
void delta_heads_backward(T* dq, T* dk, T* dv, std::int64_t lddqkv, T* dbeta, const T* dout, std::int64_t ldo,
                          const MapParams& map, const T* q, const T* k, const T* v, std::int64_t ldqkv, const T* beta,
                          const HeadShape& s, std::int64_t chunk, void* workspace, cudaStream_t stream);

}  // namespace memcap::kata::mqar::cuda

// "chunked" variant of the MQAR KATA mixer core (forward only): the normalized causal KATA of kata_mqar_mixers.cuh
// in the O(T) chunked form of spec kata.md §5.2 (Algorithm 1), on cuBLAS products in T (float: exact fp32, or TF32
// when the handle's math mode says so; double for the tests). For chunk c of C rows, Φ = ψ(·) per row (the one
// device ψ of kata_feature_map.cuh; rows past T are zero) and V̂ = [v | 1 | 0 …] (W = d_v + 1 rounded up to 4):
//   U_c = Φk_cᵀ V̂_c                        per (sequence, head, chunk): one strided-batched product
//   S_c = Σ_{c' < c} U_c'                  exclusive scan over the chunks, in place, fixed order
//   R_c = Φq_c S_c + tril(Φq_c Φk_cᵀ) V̂_c  two products and the causal mask
//   o_t = R_t[0 .. d_v) / R_t[d_v], den_t = R_t[d_v]   (o_t = 0 where den_t = 0, as the quadratic cores)
// The cost per token is O(n_ψ (d_v + C)) instead of O(T d): the core of the long evaluation sequences (T = 512 …
// 4096 of Table 2), where Σ_g / M_g's quadratic cores pay g or g² block products per score. There is no backward:
// `kata mqar` runs it only at forward-only (evaluation) lengths (plan_mixer_kernels). Same o and den as
// kata_heads_forward / kata_heads_forward_gemm up to rounding; CPU float64 twin: mqar::kata_head_forward_chunked
// (src/kata/mqar_mixers.hpp). Layout as every MQAR mixer core (kata_mqar_mixers.cuh); den is [B, H, T].
// Workspace: sequences are processed in groups that fit ws_bytes (at least one sequence must); everything runs on
// `stream` (the handle's), allocates nothing and never synchronises the host.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kata/map_params.hpp"
#include "kata_mqar_mixers.cuh"

namespace memcap::kata::mqar::cuda {

constexpr std::int64_t kChunkedEvalChunk = 64;  // C of the chunked variant

// True when the map has a device ψ (M_g, Σ_g, orthant, Lorentz, linear) built for d_head = s.dh.
bool kata_chunked_applies(const MapParams& map, const HeadShape& s);
// Workspace for the whole batch s (capped at 1 GiB, never below one sequence).
std::size_t kata_chunked_workspace_bytes(const MapParams& map, const HeadShape& s, std::size_t elem);
template <class T>
void kata_heads_forward_chunked(T* o, std::int64_t ldo, T* den, const MapParams& map, const T* q, const T* k,
                                const T* v, std::int64_t ldqkv, const HeadShape& s, cublasHandle_t h, void* ws,
                                std::size_t ws_bytes, cudaStream_t stream);

}  // namespace memcap::kata::mqar::cuda

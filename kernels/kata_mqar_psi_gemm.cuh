// "gemm-psi" variant of the MQAR KATA mixer core (forward and backward): the gemm variant (kata_mqar_gemm.cuh) with
// the scores formed from explicit features instead of the closed form's block products. For the PSD maps
// A = <ψ(q), ψ(k)> (spec §2.7) is one cuBLAS product Φq Φkᵀ of depth n_ψ per (sequence, head), where the closed form
// needs `pairs` products of depth m = d_head / g and one T × T buffer each (Σ_g: g² of them; Σ4 at d_head 64: 16
// products of depth 16, against one of depth n_ψ = 136). Forward: Φ = ψ(q), ψ(k) (the one device ψ), S = Φq Φkᵀ,
// den and P = tril(S) / den by a row kernel, o = P V. Backward: recomputes Φ and P, dV = Pᵀ dO, dA = tril(dO Vᵀ − δ)
// / den (δ_t = dO_t · o_t), dΦq = dA Φk, dΦk = dAᵀ Φq, then the VJP of ψ per coordinate into dq, dk. Same o, den
// and gradients as the other cores up to rounding; CPU twins kata_head_forward / kata_head_backward. Layout and
// conventions as kata_mqar_gemm.cuh (groups of sequences within the workspace, the handle's math mode, no host
// synchronisation, outputs overwritten). Not chosen by `auto` until measured on the GPU (mqar_model.hpp).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kata/map_params.hpp"
#include "kata_mqar_mixers.cuh"

namespace memcap::kata::mqar::cuda {

// True for the PSD maps (m<g>, sigma<g>) built for d_head = s.dh.
bool kata_psi_gemm_applies(const MapParams& map, const HeadShape& s);
// Workspace of forward and backward for the whole batch s (capped at 1 GiB, never below one sequence).
std::size_t kata_psi_gemm_workspace_bytes(const MapParams& map, const HeadShape& s, std::size_t elem);
template <class T>
void kata_heads_forward_psi_gemm(T* o, std::int64_t ldo, T* den, const MapParams& map, const T* q, const T* k,
                                 const T* v, std::int64_t ldqkv, const HeadShape& s, cublasHandle_t h, void* ws,
                                 std::size_t ws_bytes, cudaStream_t stream);
template <class T>
void kata_heads_backward_psi_gemm(T* dq, T* dk, T* dv, std::int64_t lddqkv, const T* dout, const T* o,
                                  std::int64_t ldo, const MapParams& map, const T* q, const T* k, const T* v,
                                  std::int64_t ldqkv, const T* den, const HeadShape& s, cublasHandle_t h, void* ws,
                                  std::size_t ws_bytes, cudaStream_t stream);

}  // namespace memcap::kata::mqar::cuda

// "gemm" variant of the MQAR mixer cores (kata_mqar_mixers.cuh): the T×T scores of each (sequence, head)
// are formed in memory by cuBLAS strided-batched products (one call per head and score block, batched over
// sequences), the causal kernel and its normalisation run in one row kernel, and the readout is another
// batched product. Any d_head (the tiled cores stop at 128; the fact-editing model's single head is 256
// wide), and the dense work runs at cuBLAS speed, so it is the variant of short sequences (training at
// T <= 512); the tiled cores stay the variant of long ones, where T² scores per head would not fit.
// Same mathematics, same outputs and the same saved row statistics (lse, den) as the tiled cores, so a
// forward of one variant and a backward of the other agree; the CPU float64 twins are
// softmax_head_* / kata_head_* in src/kata/mqar_mixers.hpp.
//
// Maps: softmax, and the KATA maps with a closed-form kernel (M_g, Σ_g: MapParams::is_psd()), whose
// scores A = c² Σ_(a,b) (q_a·k_b)² + εc(‖q‖² + ‖k‖²) + ε² m (·g for M_g) come from the block products
// G_ab = Q_a K_bᵀ. Other maps: kata_gemm_applies() is false and the caller uses the tiled core.
//
// Workspace: the caller passes `ws` of `ws_bytes` (>= *_gemm_workspace_bytes(s with B = 1)); sequences are
// processed in groups that fit, so memory stays bounded for any B (evaluation at T = 4096 included).
// Every function runs on `stream` (which must be the handle's stream), allocates nothing and never
// synchronises the host, so it can be captured in a CUDA graph. The handle's math mode decides fp32 vs
// TF32 products (exact fp32 unless the caller enabled TF32).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kata/map_params.hpp"
#include "kata/mqar_limits.hpp"
#include "kata_mqar_mixers.cuh"

namespace memcap::kata::mqar::cuda {

// Workspace of forward and backward (the larger of the two) for the whole batch s (s.B sequences at once);
// with fewer bytes the functions loop over groups of sequences (at least one sequence must fit).
std::size_t softmax_gemm_workspace_bytes(const HeadShape& s, std::size_t elem);
template <class T>
void softmax_heads_forward_gemm(T* o, std::int64_t ldo, T* lse, const T* q, const T* k, const T* v,
                                std::int64_t ldqkv, const HeadShape& s, double scale, cublasHandle_t h, void* ws,
                                std::size_t ws_bytes, cudaStream_t stream);
template <class T>
void softmax_heads_backward_gemm(T* dq, T* dk, T* dv, std::int64_t lddqkv, const T* dout, const T* o,
                                 std::int64_t ldo, const T* q, const T* k, const T* v, std::int64_t ldqkv,
                                 const T* lse, const HeadShape& s, double scale, cublasHandle_t h, void* ws,
                                 std::size_t ws_bytes, cudaStream_t stream);

// True when the map has the closed-form kernel the gemm variant needs (M_g, Σ_g) and m = d_head / g >= 1.
bool kata_gemm_applies(const MapParams& map, const HeadShape& s);
std::size_t kata_gemm_workspace_bytes(const MapParams& map, const HeadShape& s, std::size_t elem);
template <class T>
void kata_heads_forward_gemm(T* o, std::int64_t ldo, T* den, const MapParams& map, const T* q, const T* k,
                             const T* v, std::int64_t ldqkv, const HeadShape& s, cublasHandle_t h, void* ws,
                             std::size_t ws_bytes, cudaStream_t stream);
template <class T>
void kata_heads_backward_gemm(T* dq, T* dk, T* dv, std::int64_t lddqkv, const T* dout, const T* o, std::int64_t ldo,
                              const MapParams& map, const T* q, const T* k, const T* v, std::int64_t ldqkv,
                              const T* den, const HeadShape& s, cublasHandle_t h, void* ws, std::size_t ws_bytes,
                              cudaStream_t stream);

// Delta rule (DeltaKATA, spec §2.11.4, §5.4) of whole sequences in kernel space: the state starts at 0 and the
// sequence is one chunk, so Ψ is never formed: A_kk = κ(K, K) and A_qk = κ(Q, K) from the block products, the
// pseudo-values U = (I + diag(β) tril(A_kk, −1))^{-1} diag(β) V by one forward substitution per (sequence, head)
// (U in shared memory), o = tril(A_qk) U; the backward solves the transposed system and routes dA_qk, dA_kk into
// q and k through the kernel derivative (§5.4's note). The cost is quadratic in T and free of n_ψ, so it is the
// core of short sequences (training lengths); applies while T <= kDeltaGemmMaxT and the solve's T × d_head block
// fits kDeltaGemmMaxSmem bytes of shared memory; the chunked tiled core (kata_mqar_mixers.cuh) runs longer ones.
// q, k are the ℓ2-normalized rows, β is [B·T, H]; dq, dk are gradients w.r.t. them; outputs are overwritten.
// Same mathematics and outputs as delta_heads_* (tiled); CPU twin: gated_delta_head_* with g = 0.
using ::memcap::kata::kDeltaGemmMaxSmem;
using ::memcap::kata::kDeltaGemmMaxT;
bool delta_gemm_applies(const MapParams& map, const HeadShape& s, std::size_t elem);
std::size_t delta_gemm_workspace_bytes(const MapParams& map, const HeadShape& s, std::size_t elem);
template <class T>
void delta_heads_forward_gemm(T* o, std::int64_t ldo, const MapParams& map, const T* q, const T* k, const T* v,
                              std::int64_t ldqkv, const T* beta, const HeadShape& s, cublasHandle_t h, void* ws,
                              std::size_t ws_bytes, cudaStream_t stream);
template <class T>
void delta_heads_backward_gemm(T* dq, T* dk, T* dv, std::int64_t lddqkv, T* dbeta, const T* dout, std::int64_t ldo,
                               const MapParams& map, const T* q, const T* k, const T* v, std::int64_t ldqkv,
                               const T* beta, const HeadShape& s, cublasHandle_t h, void* ws, std::size_t ws_bytes,
                               cudaStream_t stream);

}  // namespace memcap::kata::mqar::cuda

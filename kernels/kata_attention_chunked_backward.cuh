// Backward of the chunked O(T) causal KATA form (spec kata.md §5.2; the two-pass backward of issue 12), bf16 inputs,
// for every map with a device ψ (kata_feature_map.cuh: M_g, Σ_g, orthant, Lorentz, linear, ...), normalized
// readout. The float64 CPU reference of the same computation is mqar::kata_head_backward_chunked
// (src/kata/mqar_mixers.hpp). With chunk c of C rows, Φ = ψ(·) per row (zero past T), the value rows augmented
// to V̂ = [v | 1 | 0 …] and the readout cotangents to Ĝ = [dnum | dden | 0 …] (dnum = dout / z, dden = −dout·o / z,
// zero where z = 0), W = d_v + 1 rounded up to 8 columns:
//   pass 1   Ŝ_c = Σ_{c' < c} Φk_{c'}ᵀ V̂_{c'}            (state entering chunk c; its column d_v is z's state)
//            R_c = Φq_c Ŝ_c + mask(Φq_c Φk_cᵀ) V̂_c         (column d_v of R is z_t, the denominator)
//   pass 2   Ĝ from dout, o and z;  GŜ_c = Σ_{c' > c} Φq_{c'}ᵀ Ĝ_{c'}   (reverse state: [GS | GZ])
//            dA_c = mask(Ĝ_c V̂_cᵀ)
//            dΦq_c = Ĝ_c Ŝ_cᵀ + dA_c Φk_c,   dΦk_c = V̂_c GŜ_cᵀ + dA_cᵀ Φq_c
//            dv_c  = (Φk_c GŜ_c + mask(Φq_c Φk_cᵀ)ᵀ Ĝ_c)[:, :d_v]
//   then     dq = J_ψ(q)ᵀ dΦq, dk = J_ψ(k)ᵀ dΦk (the device VJP).
// Products: cuBLAS strided-batched bf16 GEMMs with fp32 accumulation (tensor cores), one batch entry per
// (head, chunk); each chunk's own state is written in bf16 (transposed, right above the chunk's feature rows) and
// the exclusive scan over chunks sums them in fp32 in place, so each dΦ is one product over K = W + C:
// dΦq_c = [Ĝ_c | dA_c] · [Ŝ_cᵀ ; Φk_c] and dΦk_c = [V̂_c | dA_cᵀ] · [GŜ_cᵀ ; Φq_c]. The causal blocks are written
// in bf16 by the products and masked in place. C is the launch's chunk; it needs not equal the forward's.
// Everything is deterministic (no atomics). Heads are processed in groups so the workspace fits a budget.
// Layout as every attention kernel: q, k, dq, dk [B,H,T,d]; v, o, dout, dv [B,H,T,d_v]; bf16 row-major.
// Host-side declarations (usable from .cpp files of a CUDA build).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kata_attention_backward.cuh"  // AttentionGradPtrs

namespace memcap::kata::cuda {

// Empty when launch_chunked_backward runs this launch (p.chunk is C), else why not.
std::string chunked_backward_unsupported(const AttentionLaunch& p);
// Workspace bytes for `heads` (b, h) slices processed at once (heads >= 1).
std::size_t chunked_backward_workspace_bytes(const AttentionLaunch& p, std::int64_t heads);
// The most slices (<= B·H) whose workspace fits `budget` bytes; 0 when not even one does.
std::int64_t chunked_backward_heads_fitting(const AttentionLaunch& p, std::size_t budget);
// Runs the backward on `stream`: `heads_per_group` slices at a time (g.workspace must hold
// chunked_backward_workspace_bytes(p, heads_per_group)); `blas` must be bound to `stream`. No host
// synchronisation, no allocation. UserError when unsupported.
// p.stage_events, when set, holds kChunkedBackwardStages events, each recorded on `stream` at the end of the stage
// of that name in every group (with one group, consecutive events time the stages).
void launch_chunked_backward(const AttentionLaunch& p, const AttentionGradPtrs& g, std::int64_t heads_per_group,
                             cublasHandle_t blas, cudaStream_t stream);
constexpr int kChunkedBackwardStages = 8;
inline constexpr const char* kChunkedBackwardStageNames[kChunkedBackwardStages] = {
    "features", "state1", "A+R+readout", "state2", "dA", "dPhi", "dV", "vjp"};

}  // namespace memcap::kata::cuda

// Backward of the quadratic causal KATA attention form on tensor cores (bf16 mma.sync m16n8k16, fp32
// accumulation), the gradient twin of the quadratic forward kernels (kata_attention_quad_mma.cuh,
// kata_attention_wgmma.cu). Normalized readout o_t = Σ_{s≤t} A_ts v_s / z_t, z_t = Σ_{s≤t} A_ts, with the M_g
// closed form A_ts = Σ_a (q_{t,a}·k_{s,a})² + ε(|q_t|² + |k_s|²) + ε² m g (spec kata.md §1.3, §2.7, §5.1).
// With G_ts = (dout_t·v_s − dout_t·o_t) / z_t (zero where z_t = 0, and above the diagonal):
//   dv_s = Σ_t A_ts dout_t / z_t,
//   dq_{t,a} = Σ_s 2 G_ts (q_{t,a}·k_{s,a}) k_{s,a} + 2ε q_t Σ_s G_ts,
//   dk_{s,a} = Σ_t 2 G_ts (q_{t,a}·k_{s,a}) q_{t,a} + 2ε k_s Σ_t G_ts.
// Two kernels, FlashAttention-2 style but without atomics (deterministic): a query-block kernel computes dq
// and, on the way, z_t and δ_t/z_t (δ_t = dout_t·o_t) into the workspace; a key-block kernel then computes dk
// and dv, recomputing the score tiles. Nothing quadratic in T is stored. The float64 CPU reference is
// memcap::kata::mqar::kata_head_backward (src/kata/mqar_mixers.hpp) on one (b, h) slice.
// Layout as the forward kernels: q, k, dq, dk [B,H,T,d]; v, o, dout, dv [B,H,T,d_v]; bf16 row-major.
// Host-side declarations (usable from .cpp files of a CUDA build).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "kata_attention_launch.cuh"

namespace memcap::kata::cuda {

struct AttentionGradPtrs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;     // the forward's output
  const void* dout = nullptr;  // gradient w.r.t. o
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  void* workspace = nullptr;   // >= quad_backward_workspace_bytes(p)
};

// Empty when the tensor-core backward runs this launch, else why not (bf16, normalized readout, an M_g map
// with block width d / g a multiple of 16, d = d_v in {32, 64}).
std::string quad_backward_unsupported(const AttentionLaunch& p);
// Two floats per (b, h, t): 1 / z_t and δ_t / z_t.
std::size_t quad_backward_workspace_bytes(const AttentionLaunch& p);
// Runs both kernels on `stream` (no host synchronisation, no allocation). UserError when unsupported.
// p.stage_events, when set: events[0] is recorded on `stream` between the dq kernel and the dk/dv kernel.
void launch_quad_backward(const AttentionLaunch& p, const AttentionGradPtrs& g, cudaStream_t stream);

}  // namespace memcap::kata::cuda

// The 1-layer, 1-head SSFR attention block of spec hebbian.md §6.2 with a frozen inserted MLP, CPU
// float64 reference: forward and backward by hand, evaluated only at the query position Q.
//
//   h_t = RMSNorm(x_t) (no gain)   q_Q = W_q h_Q   k_t = W_k h_t   v_t = W_v h_t
//   a_Q = W_o Σ_{t≤Q} softmax_t(q_Q·k_t/√d) v_t      z_Q = a_Q (+ x_Q with attn_residual)
//   u_Q = z_Q/‖z_Q‖   y_Q = MLP(u_Q) (frozen)   o_Q = y_Q/‖y_Q‖   logits = E_out o_Q   CE at Q
//
// Causality and a loss read only at Q make this exact when keys and values are computed for the
// positions t ≤ Q only (§6.1). Since RMSNorm and the projections act on each token alone (no
// positional encoding), k_t and v_t are rows of per-vocabulary tables K = H W_kᵀ, V = H W_vᵀ
// (H = RMSNorm(E_in)), gathered by token: the same numbers as per-position projections, computed
// once per token instead of once per position; their gradients are scattered back into the tables
// and reach W_k, W_v through one GEMM with H. ssfr_logits_full_sequence() is the independent
// full-sequence oracle (every position, causal attention everywhere) the tests compare against.
#pragma once
#include <cstdint>
#include <vector>

#include "nn/arena.hpp"
#include "nn/ssfr_data.hpp"
#include "nn/ssfr_layers.hpp"

namespace memcap::nn {

inline constexpr double kSsfrNormEps = 1e-30;  // RMSNorm and unit-L2-norm eps (spec §6.2, §7.1.9)

struct SsfrBlockConfig {
  std::int64_t dim = 0;
  bool vo_trainable = false;    // false: W_v = W_o = I, frozen (fact-adaptive, §4.6); true: trained
  bool attn_residual = false;   // z_Q = a_Q + x_Q
};

// Everything a training holds fixed: sizes, block settings, the frozen tables, maps and MLPs.
struct SsfrProblem {
  SsfrTask task;
  SsfrBlockConfig block;
  std::vector<double> embed_in;            // |V|×d (wte); padding embeds to 0 and has no row
  std::vector<double> embed_out;           // |V|×d (lm_head; a copy of embed_in when tied)
  std::vector<std::int32_t> map_a, map_b;  // F entries each: the value token of each key
  FrozenMlp mlp_a, mlp_b;                  // MLP_A (train, map A) and MLP_B (evaluation, map B)
  // Shapes, finiteness, maps injective into [0, F), MLP widths d (UserError otherwise).
  void validate() const;
};

// Parameter arena: W_q, W_k (d×d), then W_v, W_o when vo_trainable.
ArenaLayout ssfr_layout(const SsfrBlockConfig& cfg);
// Init (spec §6.2): W_q, W_k, W_v ~ N(0, 0.02²), W_o ~ N(0, (0.02/√2)²); tensor j of (W_q, W_k, W_v,
// W_o) takes counters [j d², (j+1) d²) of stream rng::kSsfrInit, so W_q and W_k start the same in
// both trainable sets.
std::vector<double> ssfr_init_params(const SsfrBlockConfig& cfg, std::uint64_t seed);

// Buffers of one model for batches of up to max_rows sequences, allocated once.
struct SsfrWorkspace {
  SsfrWorkspace(const SsfrProblem& p, std::int64_t max_rows);
  const SsfrProblem* prob;
  ArenaLayout layout;
  std::int64_t d, V, T, max_rows, m;      // m: the larger width of MLP_A and MLP_B
  std::vector<double> H;                  // RMSNorm(E_in), |V|×d (constant)
  std::vector<double> Ktab, Vtab, dKtab, dVtab;            // |V|×d
  std::vector<double> hq, q, ctx, attn, z, u, y, o;        // rows×d (attn = W_o ctx)
  std::vector<double> ma, mg, mh, dma, dmg;                // rows×m (frozen MLP)
  std::vector<double> logits, dlogits, att, dscores;       // rows×|V|, rows×T
  std::vector<double> losses, norm_z, norm_y;              // rows
  std::vector<double> d_o, d_y, d_u, d_z, d_ctx, d_q, tmp; // rows×d
  std::vector<std::int32_t> len, qrow;                     // rows
  std::vector<std::uint8_t> correct;
};

struct SsfrStats {
  double loss = 0;          // mean CE over the batch's query positions
  std::int64_t correct = 0; // argmax over the full vocabulary == target
};

// Forward at Q of `batch` (targets = batch.target) with frozen `mlp` at parameters `params`
// (ssfr_layout order). Keeps what ssfr_backward needs.
SsfrStats ssfr_forward(SsfrWorkspace& ws, const double* params, const SsfrBatch& batch, const FrozenMlp& mlp);
// Gradient of the mean CE of the last ssfr_forward, ADDED into grads (ssfr_layout order).
void ssfr_backward(SsfrWorkspace& ws, const double* params, double* grads, const SsfrBatch& batch,
                   const FrozenMlp& mlp);

// Independent oracle: logits at Q (B×|V|) computed over every position of every sequence with
// per-position projections and causal attention at each position, then read at Q (spec §8.1.10).
std::vector<double> ssfr_logits_full_sequence(const SsfrProblem& p, const double* params, const SsfrBatch& batch,
                                              const FrozenMlp& mlp);

// Host bytes of a CPU training: workspace for `rows` sequences, arenas, tables and the two MLPs.
double ssfr_cpu_bytes(const SsfrTask& task, std::int64_t d, std::int64_t m, std::int64_t rows);

}  // namespace memcap::nn

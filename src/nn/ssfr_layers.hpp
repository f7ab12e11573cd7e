// Layers of the SSFR attention block (spec hebbian.md §6.2) in llm.c's shape, CPU float64
// reference (namespace memcap::nn::cpu, beside nn/layers.hpp): RMSNorm without gain, unit L2 norm,
// single-query causal softmax attention over gathered key/value rows, and the input VJP of a frozen
// gated MLP. Row-major buffers; backward functions OVERWRITE input gradients and ADD (+=) into
// gathered tables (dK, dV), like parameter gradients. Results do not depend on the thread count.
#pragma once
#include <cstdint>
#include <vector>

#include "nn/layers.hpp"

namespace memcap::nn {

// A frozen gated MLP y = B((A u + b_up) ⊙ σ(G u + b_gate)) + b_out (spec §1.5, §6.2), row-major
// A, G (m×d), B (d×m); empty biases = none. m == 0 is the identity MLP y = u.
struct FrozenMlp {
  std::int64_t d = 0, m = 0;
  Activation gate = Activation::identity;
  std::vector<double> A, G, B, bias_up, bias_gate, bias_out;
  bool identity() const { return m == 0; }
  // Shapes and finiteness (UserError naming what is wrong).
  void validate() const;
};

namespace cpu {

// out[n,:] = inp[n,:] / sqrt(mean_c inp[n,c]² + eps)   (no gain; eps 1e-30 in the spec)
void rmsnorm_forward(double* out, const double* inp, std::int64_t N, std::int64_t C, double eps);
// dinp = (dout − out · mean(dout ⊙ out)) / sqrt(mean(inp²) + eps)   (overwritten)
void rmsnorm_backward(double* dinp, const double* dout, const double* inp, std::int64_t N, std::int64_t C,
                      double eps);

// out[n,:] = inp[n,:] / (‖inp[n,:]‖₂ + eps); norm[n] = ‖inp[n,:]‖₂ (norm may be null).
void l2norm_forward(double* out, double* norm, const double* inp, std::int64_t N, std::int64_t C, double eps);
// dinp = dout / (r + eps) − inp · (inp·dout) / (r (r + eps)²), r = ‖inp‖ (overwritten; the second
// term is 0 for a zero row).
void l2norm_backward(double* dinp, const double* dout, const double* inp, std::int64_t N, std::int64_t C, double eps);

// Causal softmax attention read at one query per row (spec §6.1 "only at Q"): row n attends to
// positions t < len[n] whose key and value rows are K[rows[n·T + t]] and V[rows[n·T + t]]
// (K, V: tables of C columns; rows lets a caller gather from a per-token table or address a
// per-position array, rows = n·T + t):
//   att[n,t] = softmax_t(q[n]·K[rows]/√C) (0 for t >= len[n]),  ctx[n] = Σ_t att[n,t] V[rows].
void attention_query_forward(double* ctx, double* att, const double* q, const double* K, const double* V,
                             const std::int32_t* rows, const std::int32_t* len, std::int64_t N, std::int64_t T,
                             std::int64_t C);
// dq overwritten (skipped when null); dK[rows] += ∂/∂K, dV[rows] += att·dctx (each skipped when null).
// dscores: N×T scratch (overwritten).
void attention_query_backward(double* dq, double* dK, double* dV, double* dscores, const double* dctx,
                              const double* att, const double* q, const double* K, const double* V,
                              const std::int32_t* rows, const std::int32_t* len, std::int64_t N, std::int64_t T,
                              std::int64_t C);

// Frozen MLP over N rows: a = u Aᵀ + b_up, g = u Gᵀ + b_gate, h = a ⊙ σ(g) (N×m each, kept for the
// backward), y = h Bᵀ + b_out (N×d). Identity MLP: y = u (a, g, h unused, may be null).
void frozen_mlp_forward(double* y, double* a, double* g, double* h, const double* u, const FrozenMlp& mlp,
                        std::int64_t N);
// Input VJP only (weights frozen): du = (dh ⊙ σ(g)) A + (dh ⊙ a ⊙ σ'(g)) G with dh = dy B.
// Scratch: da, dg (N×m), tmp (N×d). Identity MLP: du = dy. du overwritten.
void frozen_mlp_backward(double* du, double* da, double* dg, double* tmp, const double* dy, const double* a,
                         const double* g, const FrozenMlp& mlp, std::int64_t N);

}  // namespace cpu
}  // namespace memcap::nn

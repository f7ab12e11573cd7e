// Per-head sequence-mixer cores of the MQAR language model (spec kata.md §1.2, §1.3, §2.11, §4.4, §5.4)
// with hand-written backward passes: causal softmax attention, normalized KATA in the quadratic form
// (closed-form PSD kernel of FeatureMap, or explicit features ψ for the other cone maps), and the
// chunked delta rule with the Neumann-doubling inverse. One head = one sequence: rows are tokens.
// Templated on the scalar (double = the float64 reference checked by finite differences; float = the
// CPU training path). Backward functions recompute the T×T scores from q, k (nothing quadratic is
// stored) and OVERWRITE their outputs.
#pragma once
#include <Eigen/Dense>
#include <cstdint>

#include "kata/feature_map.hpp"

namespace memcap::kata::mqar {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

// ---- causal softmax: o = softmax_causal(q kᵀ · scale) v; lse[t] = log Σ_{s<=t} exp(score) kept.
template <class T>
void softmax_head_forward(Mat<T>& o, Vec<T>& lse, const Mat<T>& q, const Mat<T>& k, const Mat<T>& v, double scale);
template <class T>
void softmax_head_backward(Mat<T>& dq, Mat<T>& dk, Mat<T>& dv, const Mat<T>& dout, const Mat<T>& q, const Mat<T>& k,
                           const Mat<T>& v, const Mat<T>& o, const Vec<T>& lse, double scale);

// ---- cone kernel A[t,s] = <ψ(q_t), ψ(k_s)> of a FeatureMap on raw rows, and its VJP.
// M_g / Σ_g use the closed form of §2.7 (no ψ formed); the other maps (orthant, lorentz, linear) use
// FeatureMap::apply and FeatureMap::vjp. Softmax and maps without a finite ψ are refused (UserError).
template <class T>
void cone_kernel(Mat<T>& A, const FeatureMap& map, const Mat<T>& q, const Mat<T>& k);
// dq += ∂/∂q Σ dA ⊙ A, dk += ∂/∂k Σ dA ⊙ A (dq, dk must be sized and initialised by the caller).
template <class T>
void cone_kernel_vjp(Mat<T>& dq, Mat<T>& dk, const FeatureMap& map, const Mat<T>& dA, const Mat<T>& q, const Mat<T>& k);

// ---- normalized causal KATA, quadratic form: o_t = Σ_{s<=t} A_ts v_s / Σ_{s<=t} A_ts; den[t] kept
// (a zero denominator gives o_t = 0 and no gradient through that row).
template <class T>
void kata_head_forward(Mat<T>& o, Vec<T>& den, const FeatureMap& map, const Mat<T>& q, const Mat<T>& k,
                       const Mat<T>& v);
template <class T>
void kata_head_backward(Mat<T>& dq, Mat<T>& dk, Mat<T>& dv, const Mat<T>& dout, const FeatureMap& map, const Mat<T>& q,
                        const Mat<T>& k, const Mat<T>& v, const Mat<T>& o, const Vec<T>& den);

// ---- the same normalized causal KATA in the chunked O(T) form (spec §5.2, Algorithm 1): chunk c of C rows (the
// last may be shorter) reads the prefix state S_c = Σ_{s<cC} ψ(k_s) v_sᵀ, Z_c = Σ_{s<cC} ψ(k_s) through ψ(q_t) and
// adds the quadratic form inside the chunk. Same o and den as kata_head_forward up to rounding. The backward is
// the two-pass form: pass 1 recomputes the prefix states, pass 2 runs over the chunks last to first carrying the
// state cotangent (GS = Σ over later chunks' queries of ψ(q) dnumᵀ, GZ likewise), so nothing T × T is formed.
// Explicit ψ (FeatureMap::apply / vjp) for the inter-chunk part, the cone kernel inside a chunk. The float64
// reference for a chunked GPU backward.
template <class T>
void kata_head_forward_chunked(Mat<T>& o, Vec<T>& den, const FeatureMap& map, const Mat<T>& q, const Mat<T>& k,
                               const Mat<T>& v, std::int64_t chunk);
template <class T>
void kata_head_backward_chunked(Mat<T>& dq, Mat<T>& dk, Mat<T>& dv, const Mat<T>& dout, const FeatureMap& map,
                                const Mat<T>& q, const Mat<T>& k, const Mat<T>& v, const Mat<T>& o, const Vec<T>& den,
                                std::int64_t chunk);

// ---- delta rule on explicit features (§2.11.4, §5.4), unnormalized readout:
// S_t = S_{t-1} + β_t ψk_t (v_t − S_{t-1}ᵀ ψk_t)ᵀ, o_t = S_tᵀ ψq_t, S_0 = 0; psi_q, psi_k are T×n_ψ.
// Chunked (chunk C >= 1; the last chunk may be shorter): per chunk the (I + N)^{-1} of the strictly
// lower N = diag(β) tril(Ψk Ψkᵀ, −1) is the Neumann product Π_j (I + (−N)^{2^j}).
template <class T>
void delta_head_forward(Mat<T>& o, const Mat<T>& psi_q, const Mat<T>& psi_k, const Mat<T>& v, const Vec<T>& beta,
                        std::int64_t chunk);
// Reverse scan over chunks carrying the state cotangent (§5.4); chunk states are recomputed.
template <class T>
void delta_head_backward(Mat<T>& dpsi_q, Mat<T>& dpsi_k, Mat<T>& dv, Vec<T>& dbeta, const Mat<T>& dout,
                         const Mat<T>& psi_q, const Mat<T>& psi_k, const Mat<T>& v, const Vec<T>& beta,
                         std::int64_t chunk);
// Token-by-token recurrence (the definition; float64 test reference).
Mat<double> delta_head_recurrent(const Mat<double>& psi_q, const Mat<double>& psi_k, const Mat<double>& v,
                                 const Vec<double>& beta);
// (I + N)^{-1} of a strictly lower-triangular L×L N by Neumann doubling (exposed for tests).
template <class T>
Mat<T> neumann_inverse(const Mat<T>& N);

// ---- gated variants (§2.11.2, .3, .5), quadratic form, unnormalized readout. g_t = log γ_t ≤ 0 per token;
// the decay Γ[t,s] = Π_{r=s+1..t} γ_r = exp(G_t − G_s) (G = cumsum g) for s ≤ t, 0 above; A = cone kernel.
// GatedKATA: S_t = γ_t S_{t-1} + ψ(k_t) v_tᵀ, o_t = ψ(q_t)ᵀ S_t, i.e. o = (Γ ⊙ A) v (the convex gate is
// the same core on v pre-scaled by (1 − γ), done by the caller).
template <class T>
void gated_head_forward(Mat<T>& o, const FeatureMap& map, const Mat<T>& q, const Mat<T>& k, const Mat<T>& v,
                        const Vec<T>& g);
// dq, dk, dv, dg overwritten (dg = ∂/∂g_t).
template <class T>
void gated_head_backward(Mat<T>& dq, Mat<T>& dk, Mat<T>& dv, Vec<T>& dg, const Mat<T>& dout, const FeatureMap& map,
                         const Mat<T>& q, const Mat<T>& k, const Mat<T>& v, const Vec<T>& g);
// GatedDeltaKATA: S_t = γ_t [S_{t-1} − β_t ψ(k_t)ψ(k_t)ᵀ S_{t-1}] + β_t ψ(k_t) v_tᵀ, o_t = ψ(q_t)ᵀ S_t, in the
// pseudo-value form u_t = β_t (v_t − Σ_{s<t} Γ_ts κ(k_t,k_s) u_s), o = (Γ ⊙ A) U: one unit-lower triangular
// solve (I + N) U = diag(β) V with N = diag(β) tril(Γ ⊙ κ(K,K), −1); no ψ or n_ψ × n_ψ matrix is formed.
template <class T>
void gated_delta_head_forward(Mat<T>& o, const FeatureMap& map, const Mat<T>& q, const Mat<T>& k, const Mat<T>& v,
                              const Vec<T>& beta, const Vec<T>& g);
template <class T>
void gated_delta_head_backward(Mat<T>& dq, Mat<T>& dk, Mat<T>& dv, Vec<T>& dbeta, Vec<T>& dg, const Mat<T>& dout,
                               const FeatureMap& map, const Mat<T>& q, const Mat<T>& k, const Mat<T>& v,
                               const Vec<T>& beta, const Vec<T>& g);
// Token-by-token recurrences on explicit features (float64 test references): beta null = GatedKATA,
// otherwise GatedDeltaKATA; gamma = exp(g).
Mat<double> gated_head_recurrent(const Mat<double>& psi_q, const Mat<double>& psi_k, const Mat<double>& v,
                                 const Vec<double>& gamma, const Vec<double>* beta);

// ---- row-wise L2 normalization x̂ = x / sqrt(‖x‖² + eps) (FLA's l2norm, eps = 1e-6), rows of width d.
template <class T>
void l2norm_rows_forward(Mat<T>& out, Vec<T>& rstd, const Mat<T>& x, double eps);
template <class T>
void l2norm_rows_backward(Mat<T>& dx, const Mat<T>& dout, const Mat<T>& x, const Vec<T>& rstd);

}  // namespace memcap::kata::mqar

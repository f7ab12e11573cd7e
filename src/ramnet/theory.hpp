// The RAM-Net kernel theory (spec ramnet.md §2.3–2.8, §5.1–5.4; paper Thm. 1, Thm. 2, eqs. 11–20, A.5):
// the continuous-codebook kernel κ_∞, the exact errors e_tot = log κ_A − target, e_fin = log κ_A − log κ_∞,
// e_cont = log κ_∞ − target (target = β_rβ_w/2 q·k), the paper's bounds on them, ξ and its validity range,
// β*, the hard-write (β_w → ∞) limit with nearest-code assignment, and the sharp small-M constants.
//
// Accuracy: e_cont is evaluated as Σ_u [η(|a_u|) + η(|b_u|) − η(|a_u+b_u|)] (a = β_r q, b = β_w k) with the
// η series, and e_fin through the Fourier–Bessel series of Z_dp/I_0 (§2.2), so both keep full relative
// accuracy when they are tiny (e_fin ~ M^dp); e_tot = e_fin + e_cont. The direct log κ_A − target is
// returned too (PairErrors::e_tot_direct) and agrees to rounding.
#pragma once
#include <cstdint>

#include "ramnet/address.hpp"

namespace memcap::ramnet {

// ---- continuous-codebook kernel (§2.3, §5.1) -------------------------------------------------------
// log κ_∞ of one factor for the scaled blocks a = β_r q_u, b = β_w k_u:
// log I_0(|a+b|) − log I_0(|a|) − log I_0(|b|). Arguments <= 20: the log I_0 differences; above: the stable
// form (|a+b| − |a| − |b|) + log i0e(|a+b|) − log i0e(|a|) − log i0e(|b|), with the non-positive bracket
// −4|a||b| sin²(θ/2)/(|a+b| + |a| + |b|) (θ = angle between a and b) computed without cancellation.
double log_kappa_inf_factor(double a1, double a2, double b1, double b2);
// log κ_∞(q, k) = Σ_u log_kappa_inf_factor(β_r q_u, β_w k_u). q, k: 2U doubles.
double log_kappa_inf(const Params& p, const double* q, const double* k);

// log(Z_dp(x)/I_0(|x|)) for the circular codebook: 2 Σ_{l≥1} I_{l dp}/I_0 cos(l dp arg x) summed and passed
// through log1p while that sum is small (|S| <= 0.5, |x| <= 30), else log Z_dp − log I_0 directly.
double log_Z_over_I0(int dp, double x1, double x2);

// ---- errors and bounds for one (q, k) pair (§2.4, §2.5, E1) ---------------------------------------
struct PairErrors {
  double log_kappa_A = 0, log_kappa_inf = 0, target = 0;  // target = β_rβ_w/2 q·k
  double e_tot = 0, e_fin = 0, e_cont = 0;                 // e_tot = e_fin + e_cont (accurate forms)
  double e_tot_direct = 0;                                 // log κ_A − target, for the consistency check
  double M = 0, xi = 0;                                    // M = max_u max(β_r|q_u|, β_w|k_u|)
  double bound11 = 0, bound16_lo = 0, bound16_hi = 0, bound17 = 0, bound20 = 0;  // +inf: no bound (ξ >= 1)
  double roundoff = 0;  // rounding budget of the errors (absolute): a bound counts as violated beyond it
};
// Circular codebook only (the theory's setting): C must be circular_codebook(p.dp).
PairErrors pair_errors(const Params& p, const Codebook& C, const double* q, const double* k);

// M of Theorem 2 for one pair.
double pair_M(const Params& p, const double* q, const double* k);
// ξ_{dp,M} = 2 e^M M^dp / dp! (eq. 18), evaluated in the log domain (+inf when it overflows).
double xi(int dp, double M);
// The M at which ξ_{dp,M} = 1: the bounds (11) and (20) hold for M below it (T6: dp=4 → 1.3335).
double xi_threshold(int dp);
// Bounds at (dp, U, M). eq11 and eq20 are +inf when ξ >= 1 (no bound).
double bound_eq11(int dp, int U, double M);                // |e_tot| <= U [M⁴/4 + 3ξ/(1−ξ)]
double bound_eq16_lower(int U, double M);                  // e_cont >= −U M⁴/4
double bound_eq16_upper(int U, double M);                  // e_cont <= U M⁴/32
double bound_eq17(int U, double M);                        // |e_cont| <= U M⁴/4
double bound_eq20(int dp, int U, double M);                // |e_fin| <= 3U ξ/(1−ξ)
// The largest M at which bound_eq11(dp, U, M) <= level (nats), by bisection (§2.5: U=1, 1 nat →
// 0.706 (dp=3), 0.979 (4), 1.339 (6), 1.411 (8), 1.414 (16)).
double bound11_reach(int dp, int U, double level);

// Theorem 1 with an explicit constant: for β_r = β_w, dp >= 4 and M <= M0, Theorem 2 gives
// |κ_A e^{−target} − 1| <= C U M⁴ with C = (exp(bound_eq11(dp, U, M0)) − 1)/(U M0⁴) (the ratio grows with M,
// so its value at M0 is the constant). As M0 → 0, C → 1/4 (dp > 4) or 1/2 (dp = 4: 3ξ ~ M⁴/4).
// +inf when ξ(M0) >= 1. UserError for dp < 4 (Theorem 1 needs dp >= 4).
double theorem1_constant(int dp, int U, double M0);

// Sharp small-M behaviour of e_tot (derived, spec §2.4 and docs/ramnet.md): e_tot/(U M^order) → [lo, hi]
// as M → 0, attained by the adversarial pairs of E1. dp >= 5: order 4, [−7/32, 1/32] (e_cont alone: aligned
// / anti-aligned equal norms); dp = 4: order 4, [−7/24, 1/24] (aligned / anti-aligned midway between codes:
// e_fin adds Re((a+b)⁴ − a⁴ − b⁴)/192); dp = 3: order 3, [−1/4, 1/4]; dp = 2: order 2, [−1/2, 1/2].
struct SmallMConstants {
  int order = 4;
  double lo = 0, hi = 0;
};
SmallMConstants small_m_constants(int dp);
// e_cont alone: −7/32 and 1/32 (any dp).
inline constexpr double kContSharpLower = -7.0 / 32.0;
inline constexpr double kContSharpUpper = 1.0 / 32.0;

// ---- β* (§2.6, T7) ---------------------------------------------------------------------------------
double beta_star(double tau);                  // sqrt(2/τ)
double beta_star_head(double d_head);          // τ = sqrt(d_head): sqrt(2) d_head^{-1/4}
double beta_star_migration(int U);             // τ = sqrt(2U): sqrt(2) (2U)^{-1/4}

// ---- hard-write limit (§2.8, A.5, T10) ---------------------------------------------------------------
// Nearest code of a 2-vector: argmax_j c_j·x = argmin_j |x − c_j| for unit codes. Scores within a few ulp
// of the best (keys exactly between two codes) are ties, broken toward the lowest index (§5.10).
int nearest_code(const Codebook& C, double x1, double x2);
// lim_{β_w→∞} log κ_A = β_r q·k^ − Σ_u log Z_dp(β_r q_u) with k^ = the nearest codes of k (eq. 22).
double log_kappa_hard_write(const Params& p, const Codebook& C, const double* q, const double* k);

}  // namespace memcap::ramnet

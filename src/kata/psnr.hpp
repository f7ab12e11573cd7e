// pSNR (spec kata.md §3.9): the definition a⋆²/Σ_{j≠⋆}a_j², the Welch-scale optimal-packing ladder
// across cones (linear, Lorentz, PSD, degree k, softmax at temperature τ), random-key estimates and
// Monte-Carlo medians for keys from a source (random sphere or a dictionary).
// Formulas carry a provenance: "paper" (Eq. 10–16, C.7–C.8) or "derived" (our extensions, §3.9 [D]).
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

#include "kata/feature_map.hpp"

namespace memcap::kata {

// pSNR of one coefficient vector with matched index `star`: a⋆² / Σ_{j≠⋆} a_j² (+inf with no distractor
// mass). UserError on NaN.
double psnr_from_coefficients(const Eigen::VectorXd& a, std::int64_t star);

// ---- Welch-scale ladder (all distractors at the Welch floor, harmful sign) ----
// ε⋆ = (T−p)/(p(T−1)) for T > p, 0 for T <= p; μ⋆ = √ε⋆. Needs p >= 2, T >= 1.
double welch_eps_star(std::int64_t p, double T);
double psnr_linear(std::int64_t p, double T);           // paper: p/(T−p)
double psnr_psd(std::int64_t p, double T);              // paper: p²(T−1)/(T−p)²
double psnr_degree(std::int64_t p, double T, int k);    // derived: 1/((T−1)ε⋆^k); k=1 Lin, k=2 PSD
double psnr_lorentz(std::int64_t p, double T);          // derived: 4/((T−1)(1+μ⋆)²)
double log_psnr_softmax(std::int64_t p, double T, double tau);  // paper (13): 2(1−μ⋆)/τ − ln(T−1)
double psnr_softmax(std::int64_t p, double T, double tau);      // exp of the above (+inf on overflow)
// Thresholds: T*_PSD = [(p²+2p) + √((p²+2p)² − 8p²)]/2; linear 2p; softmax approx (15) 1+exp(2(1−1/√p)/τ).
double psd_threshold(std::int64_t p);
double linear_threshold(std::int64_t p);
double softmax_threshold_approx(std::int64_t p, double tau);

// A rung of the ladder: "linear", "lorentz", "psd", "deg<k>" (k >= 1), "softmax" (needs tau).
struct Rung {
  std::string name;  // as above
  int degree = 1;    // for linear/psd/deg<k>
  double tau = 0;    // softmax
  std::string source() const;  // "paper" or "derived"
  std::string label() const;   // e.g. "softmax(tau=0.125)"
};
constexpr int kMaxRungDegree = 999;  // deg<k>: k in 1..kMaxRungDegree
Rung parse_rung(const std::string& name, double tau = 0);
double rung_psnr(const Rung& r, std::int64_t p, double T);
double rung_log_psnr(const Rung& r, std::int64_t p, double T);
// Largest integer T > p with pSNR > 1 (binary search; every rung is decreasing in T for T > p);
// 0 when none (e.g. softmax at τ = 1); capped at 1e18 (returned as is).
std::int64_t largest_retrievable_T(const Rung& r, std::int64_t p);

// ---- random keys uniform on S^{p−1}, query = a stored key (derived, §3.9 [D]) ----
double psnr_random_linear(std::int64_t p, double T);   // p/(T−1)
double psnr_random_psd(std::int64_t p, double T);      // p(p+2)/(3(T−1))  (M1)
double psnr_random_degree(std::int64_t p, double T, int k);  // 1/((T−1) E z^{2k}) for even 2k; E z^{2k} = (2k−1)!!/Π(p+2i)
double psnr_random_block(std::int64_t d, std::int64_t g, double T);  // M_g: g m³/((T−1)(3(m+2)+(g−1)m))
double psnr_random_sum(std::int64_t d, std::int64_t g, double T);    // Σ_g: m³/((T−1)(3(m+2)+(g²−1)m))
double psnr_random_orthant(double T);                  // π²/(T−1)
double psnr_random_lorentz(double T);                  // 4/(T−1)
double psnr_random_softmax(std::int64_t p, double T, double tau);  // e^{2/τ}/((T−1) E e^{2z/τ}), E via 0F1
// Random-key estimate for a FeatureMap by name (NaN-free; UserError when no estimate exists).
double psnr_random_for_map(const FeatureMap& map, double T);

// ---- Monte Carlo ----
struct PsnrMc {
  double median = 0, q10 = 0, q90 = 0, min = 0;
  std::int64_t samples = 0;  // queries × trials
};
// pool: rows = candidate keys (unit), or empty for keys uniform on S^{d−1}. Each trial draws T keys
// (random: fresh sphere rows; pool: T distinct rows of the pool), uses up to max_queries stored keys as
// queries, and a_j = K(q, k_j) from the map's closed-form kernel (softmax in log space).
PsnrMc psnr_monte_carlo(const FeatureMap& map, std::int64_t T, std::int64_t trials, std::int64_t max_queries,
                        std::uint64_t seed, const Eigen::MatrixXd& pool = Eigen::MatrixXd());

}  // namespace memcap::kata

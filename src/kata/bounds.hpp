// Capacity bounds of the KATA paper (spec kata.md §3.2–3.5, 3.8): Welch (W1–W4), Gerzon, the
// Lorentz Rankin wall (both index conventions), PSD line-packing lower bounds (paper form and the
// exact spherical-cap form via the regularized incomplete beta), the random-code estimate, Table 1.
// Every function validates its domain (UserError) and never returns NaN; "no bound" is +inf.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace memcap::kata {

// ---- Welch (Thm 3, A.3) ----
// W1: max_{i≠j}<u_i,u_j>² >= (T−D)/(D(T−1)) for T unit vectors in R^D (0 when T <= D).
double welch_mu_sq(std::int64_t D, std::int64_t T);
double welch_mu(std::int64_t D, std::int64_t T);
// W2 (unsquared tolerance ε on |<u_i,u_j>|): T <= D(1−ε²)/(1−Dε²); +inf ("no bound") for ε >= 1/√D.
double welch_max_keys_unsquared(std::int64_t D, double eps);
// W3 (tolerance ε on the squared inner product): T <= D(1−ε)/(1−Dε); +inf for ε >= 1/D.
double welch_max_keys_squared(std::int64_t D, double eps);
// W4: dimension needed for T keys at coherence μ: D >= T/(1+μ²(T−1)); the _ceil form rounds up.
double welch_min_dim(double T, double mu);
std::int64_t welch_min_dim_ceil(double T, double mu);
// Gerzon: real ETF needs T <= D(D+1)/2, complex T <= D².
std::int64_t gerzon_real(std::int64_t D);
std::int64_t gerzon_complex(std::int64_t D);

// ---- Lorentz Rankin wall (Thm 9, C.2) ----
// Ambient: cone L^d_+ (spatial part d−1, d >= 3): C_ε <= min{d, 1 + 1/(1−2ε)}.
// Raw: raw unit keys in R^d, ambient d+1 (d >= 2, GDN comparison D.1): min{d+1, 1 + 1/(1−2ε)}.
// At ε = 1/2 nonpositive inner products allow 2·(spatial dim) (cross-polytope). ε must lie in [0, 1/2].
enum class LorentzConvention { Ambient, Raw };
LorentzConvention parse_lorentz_convention(const std::string& s);  // "ambient" | "raw"
double rankin_wall(std::int64_t d, double eps, LorentzConvention conv);
// Largest integer number of keys allowed: floor of rankin_wall (the wall is attained by integers).
std::int64_t rankin_wall_keys(std::int64_t d, double eps, LorentzConvention conv);

// ---- PSD rank-one packing (Thm 4, Lemma 6, C.3); ε is the PSD (squared) interference ----
// Paper lower bound ½(1−ε)^{−(p−1)/2} (log form avoids overflow); needs p >= 2, 0 <= ε < 1.
double psd_cap_lb_paper(std::int64_t p, double eps);
double log_psd_cap_lb_paper(std::int64_t p, double eps);
// Cap measure σ(C_a) = Pr[<u,e> >= a] = ½ I_{1−a²}((p−1)/2, ½) on S^{p−1}, a in [0,1], and its log.
double cap_fraction(std::int64_t p, double a);
double log_cap_fraction(std::int64_t p, double a);
// Exact-cap lower bound 1/(2σ(C_a)) with a = √ε (a maximal line packing's caps of both signs
// cover the sphere); +inf when it overflows double (use the log form).
double psd_cap_lb_exact(std::int64_t p, double eps);
double log_psd_cap_lb_exact(std::int64_t p, double eps);
// Upper ceiling from W3 on the raw vectors: ε < 1/p ⇒ T <= p(1−ε)/(1−pε); +inf for ε >= 1/p.
double psd_welch_ceiling(std::int64_t p, double eps);
// Welch in the lifted n = p(p+1)/2 space: μ_PSD² >= (T−n)/(n(T−1)).
double psd_lifted_welch_mu_sq(std::int64_t p, std::int64_t T);

// ---- random codes (§3.5) ----
// Finite-size estimate D ≈ 4 ln T / μ² used by the paper's Table 1.
double random_code_dim(double T, double mu);

// ---- Table 1 (§3.8) ----
bool is_prime_power(std::int64_t s);
struct Table1Entry {
  double mu = 0;
  std::int64_t welch_d = 0;      // ceil(T/(1+μ²(T−1)))
  double random_d_exact = 0;     // 4 ln T/μ²
  std::int64_t random_d = 0;     // rounded to nearest, as printed in the paper
  std::int64_t mub_s = 0, mub_d = 0;           // smallest prime power s: 1/√s <= μ, s(s+1) >= T; d = 2s
  std::int64_t devore_s = 0, devore_r = 0, devore_d = 0;  // min s² with r/s <= μ, s^{r+1} >= T
};
// UserError unless T >= 2 and 0 < μ < 1.
Table1Entry table1_entry(double T, double mu);
std::vector<Table1Entry> table1(double T = 1e5, const std::vector<double>& mus = {0.05, 0.20});

}  // namespace memcap::kata

// CAPE (cyclic address shift of the flat address distribution) against RoPE (rotation of each 2-D block by
// ν_u t with ν_u = 2π/dp^{u+1}) — spec ramnet.md §1.8, paper A.6 (eqs. 24–28), experiment E9, vector T13.
// CAPE shifts the sampled-and-held logit waves, RoPE translates the continuous waves before sampling:
// the two agree when t is a multiple of dp^{U−1}, the factor-0 waves always agree, and CAPE-shifted
// distributions are in general not product distributions (their total correlation is > 0).
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "ramnet/address.hpp"

namespace memcap::ramnet {

// ν_u = 2π/dp^{u+1}, u = 0..U−1 (eq. 28): one slot per token.
std::vector<double> cape_frequencies(int dp, int U);
// x (2U doubles) with block u rotated counterclockwise by ν_u t (arg x_u += ν_u t); t is reduced modulo the
// period dp^{u+1} of block u first, so large shifts keep the angle exact.
std::vector<double> rope_rotate(const double* x, int dp, int U, double t);
// r'(i) = r((i − t) mod |A|).
Eigen::VectorXd cape_shift(const Eigen::VectorXd& r, std::int64_t t);

// ½ Σ |p − q|.
double total_variation(const Eigen::VectorXd& p, const Eigen::VectorXd& q);
// Jensen–Shannon divergence in nats (0·log 0 = 0; at most ln 2).
double js_divergence(const Eigen::VectorXd& p, const Eigen::VectorXd& q);
// Total correlation Σ_u H(r_u) − H(r) of a distribution over dp^U flat addresses (its KL to the product of
// its factor marginals): 0 exactly for product distributions.
double total_correlation(const Eigen::VectorXd& r, int dp, int U);

// Factor-u logit wave of x at flat slot i (eq. 25): β |x_u| cos(2π a_u(i)/dp − arg x_u).
double factor_logit(const double* x, int dp, int u, double beta, std::int64_t i);

struct CapeRope {
  Eigen::VectorXd cape, rope;      // CAPE-shifted and RoPE-rotated address distributions
  double tv = 0, js = 0;           // between them
  double tc_cape = 0, tc_rope = 0; // total correlations (tc_rope = 0 up to rounding)
  std::vector<double> logit_gap;   // per factor u: max_i |CAPE wave − RoPE wave| (u = 0: 0)
};
// Dense comparison for one 2U vector x at concentration beta and shift t (require_dense first).
CapeRope compare_cape_rope(int dp, int U, double beta, const double* x, std::int64_t t);

}  // namespace memcap::ramnet

// Key dictionaries for capacity experiments (spec kata.md §3.4–3.7): random spherical codes,
// greedy line packings, realified mutually unbiased bases and DeVore polynomial codes, plus
// their coherence in raw space and in a cone's feature space (blocked, no full Gram matrix).
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

#include "kata/feature_map.hpp"

namespace memcap::kata {

// Largest greedy --max-fail / greedy:fails: each rejection draws and tests one candidate, so the packing
// runs at least this many candidate tests before it can stop.
constexpr std::int64_t kMaxGreedyFails = 10'000'000;

struct DictSpec {
  std::string type;            // random | greedy | mub | devore
  std::int64_t dim = 0;        // random, greedy: ambient dimension (mub: 2s, devore: s², derived)
  std::int64_t count = 0;      // random: number of vectors; greedy: cap on the count (0 = no cap)
  std::int64_t field_size = 0; // mub, devore: s (a prime power)
  std::int64_t degree = 0;     // devore: r (0 <= r < s)
  double max_coherence = 0.5;  // greedy: accept u iff max_i |<u,u_i>| < max_coherence (= a = sqrt(ε_PSD))
  std::int64_t max_fail = 10000;  // greedy: stop after this many consecutive rejections
  std::uint64_t seed = 0;      // random, greedy
};

// Validates the spec (UserError with what to change) and returns rows = unit vectors.
Eigen::MatrixXd make_dictionary(const DictSpec& spec);
void validate_dict_spec(const DictSpec& spec);
// Number of vectors and dimension the spec produces (greedy: dim and the cap only).
std::int64_t dictionary_count(const DictSpec& spec);
std::int64_t dictionary_dim(const DictSpec& spec);

// count i.i.d. uniform unit vectors in R^dim (rng stream kDictionary).
Eigen::MatrixXd random_dictionary(std::int64_t count, std::int64_t dim, std::uint64_t seed);
// Greedy line packing of §3.4: accept Gaussian directions with max |<u,u_i>| < a.
Eigen::MatrixXd greedy_dictionary(std::int64_t dim, double a, std::int64_t max_fail, std::int64_t max_count,
                                  std::uint64_t seed);

// Realified MUBs of §3.6: s(s+1) unit vectors in R^{2s}: standard basis, then bases a = 0..s-1, each
// with vectors b = 0..s-1 (row s + a·s + b). Columns 0..s-1 real parts, s..2s-1 imaginary parts.
Eigen::MatrixXd mub_dictionary(std::int64_t s);
// Basis of each row: 0 = standard basis, a+1 = basis a.
std::vector<std::int64_t> mub_basis_ids(std::int64_t s);
// Exponents of v_{a,0}[x] (x = 0..s-1): odd ℓ: multiples of 2π/ℓ of x^T M_a x mod ℓ; ℓ = 2: multiples
// of π/2 of x^T M_a x mod 4 (integers). Row-major s × s (a, x).
std::vector<int> mub_phase_exponents(std::int64_t s);

// DeVore code of §3.7: s^{r+1} vectors in R^{s²}, v_P[x·s + P(x)] = 1/sqrt(s); row index Σ a_i s^i.
Eigen::MatrixXd devore_dictionary(std::int64_t s, std::int64_t r);
// Column of the nonzero for each (row, x): T × s, row-major (the sparse form of the code).
std::vector<std::int64_t> devore_support(std::int64_t s, std::int64_t r);

// max_{i≠j} |<x_i,x_j>| / (‖x_i‖‖x_j‖), by blocks of `block` rows (GEMM per block pair).
double coherence(const Eigen::MatrixXd& rows, std::int64_t block = 4096);
struct CoherenceResult {
  double value = 0;
  std::int64_t i = -1, j = -1;  // a pair that attains it
};
CoherenceResult coherence_detail(const Eigen::MatrixXd& rows, std::int64_t block = 4096);
// Coherence in feature space: max_{i≠j} |K(x_i,x_j)| / sqrt(K(x_i,x_i) K(x_j,x_j)), closed-form
// kernels by blocks (softmax in log space). UserError if some K(x_i,x_i) = 0.
double feature_coherence(const Eigen::MatrixXd& rows, const FeatureMap& map, std::int64_t block = 2048);
// Distinct values of |<x_i,x_j>| over i<j (rounded to `tol`), for small dictionaries (tests, reports).
std::vector<double> distinct_abs_inner_products(const Eigen::MatrixXd& rows, double tol = 1e-9);

// Exact coherence of the realified MUB set from the construction's symmetry (no vectors stored):
// conj(v_{a,b})·v_{a',b'} depends on b'-b only (characters), and for odd ℓ on a'-a only (M_a is
// linear in a); so the Gram matrix has s² (odd ℓ) or s³/2 (ℓ = 2) distinct complex entries.
struct MubCoherence {
  double realified = 0;          // max |Re<u,v>| over all pairs of distinct vectors
  double max_orthogonality_error = 0;  // max |<v_{a,b},v_{a,b'}>| for b≠b' (should be 0)
  double max_unbiased_error = 0; // max ||<u,v>|² - 1/s| across different bases
  double realified_vs_standard = 0;  // max |Re v_{a,b}[x]|
};
MubCoherence mub_coherence(std::int64_t s);
// Exact DeVore coherence: max over nonzero polynomials D of degree <= r of #roots(D)/s; also the
// set of overlap counts that occur (ascending).
struct DevoreCoherence {
  double value = 0;
  std::vector<std::int64_t> overlap_counts;
};
DevoreCoherence devore_coherence(std::int64_t s, std::int64_t r);

}  // namespace memcap::kata

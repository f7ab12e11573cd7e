// Key sources for `kata capacity` (spec §4.6 step 1): random sphere / Gaussian keys drawn per
// trial, and dictionaries (MUB, DeVore, greedy packing, coordinate rays, regular simplex) whose
// first K vectors of a seeded permutation are stored. Draws are nested: the K keys of a trial are
// the first K of the K' > K keys of the same trial, so a capacity search sees one growing memory.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>

namespace memcap::kata {

enum class KeySourceType { sphere, gauss, mub, devore, greedy, coord, simplex };

class KeySource {
 public:
  // spec: random (= sphere, uniform on S^{d-1}) | gauss (N(0, I/d), not normalized) |
  // mub[:s=S] (realified MUBs, d = 2s, S default d/2) | devore[:s=S,r=R] (d = s^2, S default
  // sqrt(d), R default 2) | greedy[:a=A,fails=F] (line packing, max |<u_i,u_j>| < A, default
  // 0.5, F = 10000 consecutive rejections) | coord (e_1..e_d) | simplex (d+1 vectors, <.,.> = -1/d).
  // UserError on unknown names, bad options and dimension mismatches.
  static KeySource parse(const std::string& spec, int d);

  const std::string& spec() const { return spec_; }
  KeySourceType type() const { return type_; }
  int dim() const { return d_; }
  // Largest K this source can give (-1: unbounded; greedy: known only after drawing).
  std::int64_t pool_size() const;
  bool unit_norm() const { return type_ != KeySourceType::gauss; }
  // Short description with the derived parameters, e.g. "mub s=32 (1056 vectors)".
  std::string describe() const;

  // The first K keys of trial `trial_seed` (K x d, float64). max_count caps greedy packings (the
  // run's largest K, so a greedy pool is the same for every K of one trial). UserError when the
  // dictionary holds fewer than K vectors.
  Eigen::MatrixXd draw(std::int64_t K, std::uint64_t trial_seed, std::int64_t max_count) const;
  // Greedy only: the whole packing of trial `trial_seed`, capped at max_count vectors.
  Eigen::MatrixXd greedy_pool(std::uint64_t trial_seed, std::int64_t max_count) const;

 private:
  std::string spec_;
  KeySourceType type_ = KeySourceType::sphere;
  int d_ = 0;
  std::int64_t s_ = 0, r_ = 0, max_fail_ = 10000;
  double a_ = 0.5;
  Eigen::MatrixXd pool_;  // deterministic dictionaries, built once
};

// Regular simplex: d+1 unit vectors in R^d with pairwise inner product -1/d.
Eigen::MatrixXd regular_simplex(int d);

}  // namespace memcap::kata

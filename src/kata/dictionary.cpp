// make_dictionary dispatch and validation, random spherical codes and the greedy line packing of
// §3.4 (candidates in batches, one GEMM against the accepted set per batch).
#include "kata/dictionary.hpp"

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "kata/finite_field.hpp"

namespace memcap::kata {

void validate_dict_spec(const DictSpec& sp) {
  if (sp.type == "random") {
    require(sp.dim >= 1, "random dictionary: --dim must be >= 1 (got {})", sp.dim);
    require(sp.count >= 1, "random dictionary: --count must be >= 1 (got {})", sp.count);
    require(static_cast<double>(sp.dim) * sp.count <= 1.6e9,
            "random dictionary: {} x {} entries is too large (> 1.6e9)", sp.count, sp.dim);
  } else if (sp.type == "greedy") {
    require(sp.dim >= 2, "greedy dictionary: --dim must be >= 2 (got {})", sp.dim);
    require(std::isfinite(sp.max_coherence) && sp.max_coherence > 0 && sp.max_coherence < 1,
            "greedy dictionary: --max-coherence a must lie in (0, 1) (got {}); PSD interference is a²",
            sp.max_coherence);
    require(sp.max_fail >= 1 && sp.max_fail <= kMaxGreedyFails,
            "greedy dictionary: --max-fail must be in 1..{} (got {})", kMaxGreedyFails, sp.max_fail);
    require(sp.count >= 0, "greedy dictionary: --count (cap) must be >= 0 (got {})", sp.count);
  } else if (sp.type == "mub" || sp.type == "devore") {
    std::int64_t ell = 0;
    int k = 0;
    require(sp.field_size >= 2 && prime_power(sp.field_size, ell, k),
            "{} dictionary: --field-size s = {} is not a prime power; use s = ℓ^k with ℓ prime (2, 3, 4, 5, 7, 8, 9, ...)",
            sp.type, sp.field_size);
    if (sp.type == "devore")
      require(sp.degree >= 0 && sp.degree < sp.field_size,
              "devore dictionary: --degree r = {} must satisfy 0 <= r < s = {}", sp.degree, sp.field_size);
  } else {
    throw UserError("unknown dictionary type '" + sp.type + "'; use random, greedy, mub or devore");
  }
}

std::int64_t dictionary_dim(const DictSpec& sp) {
  if (sp.type == "mub") return 2 * sp.field_size;
  if (sp.type == "devore") return sp.field_size * sp.field_size;
  return sp.dim;
}

std::int64_t dictionary_count(const DictSpec& sp) {
  if (sp.type == "mub") return sp.field_size * (sp.field_size + 1);
  if (sp.type == "devore") {
    std::int64_t t = 1;
    for (std::int64_t i = 0; i <= sp.degree; ++i) t *= sp.field_size;
    return t;
  }
  return sp.count;
}

Eigen::MatrixXd random_dictionary(std::int64_t count, std::int64_t dim, std::uint64_t seed) {
  require(count >= 1 && dim >= 1, "random dictionary needs count >= 1 and dim >= 1 (got {}, {})", count, dim);
  return rng::sphere_rows(count, dim, seed, rng::kDictionary);
}

Eigen::MatrixXd greedy_dictionary(std::int64_t dim, double a, std::int64_t max_fail, std::int64_t max_count,
                                  std::uint64_t seed) {
  DictSpec sp{.type = "greedy", .dim = dim, .count = max_count, .max_coherence = a, .max_fail = max_fail};
  validate_dict_spec(sp);
  using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  constexpr std::int64_t kBatch = 256;
  std::vector<double> acc;  // accepted, row-major n × dim
  std::int64_t n = 0, fails = 0;
  std::uint64_t batch_no = 0;
  bool done = false;
  while (!done) {
    // Candidate c of this batch: normalized Gaussian row, counter (batch_no·kBatch + c)·dim + t.
    RowMat C(kBatch, dim);
    for (std::int64_t c = 0; c < kBatch; ++c) {
      for (std::int64_t t = 0; t < dim; ++t)
        C(c, t) = rng::normal(seed, rng::kDictionary, (batch_no * kBatch + c) * dim + t);
      C.row(c).normalize();
    }
    ++batch_no;
    RowMat S;
    const std::int64_t n0 = n;
    if (n0 > 0) {
      Eigen::Map<const RowMat> A(acc.data(), n0, dim);
      S = C * A.transpose();
    }
    for (std::int64_t c = 0; c < kBatch; ++c) {
      bool ok = n0 == 0 || S.row(c).cwiseAbs().maxCoeff() < a;
      for (std::int64_t j = n0; ok && j < n; ++j) {
        Eigen::Map<const Eigen::RowVectorXd> u(acc.data() + j * dim, dim);
        ok = std::abs(C.row(c).dot(u)) < a;
      }
      if (ok) {
        acc.insert(acc.end(), C.row(c).data(), C.row(c).data() + dim);
        ++n;
        fails = 0;
        if (max_count > 0 && n >= max_count) { done = true; break; }
      } else if (++fails >= max_fail) {
        done = true;
        break;
      }
    }
  }
  Eigen::Map<const RowMat> A(acc.data(), n, dim);
  return Eigen::MatrixXd(A);
}

Eigen::MatrixXd make_dictionary(const DictSpec& sp) {
  validate_dict_spec(sp);
  if (sp.type == "random") return random_dictionary(sp.count, sp.dim, sp.seed);
  if (sp.type == "greedy") return greedy_dictionary(sp.dim, sp.max_coherence, sp.max_fail, sp.count, sp.seed);
  if (sp.type == "mub") return mub_dictionary(sp.field_size);
  return devore_dictionary(sp.field_size, sp.degree);
}

}  // namespace memcap::kata

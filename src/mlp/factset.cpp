// Fact-set generation and validation (spec hebbian.md §1.1-1.3). Tables are unit rows drawn from
// the counter-based streams rng::kKeys / rng::kValues, the map from rng::kMap, the spike
// direction from rng::kSpike with the fixed spike_seed 42.
#include "mlp/factset.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"

namespace memcap::mlp {

namespace {

// Stream used to pick F rows out of a loaded table (callers' streams start at rng::kUser).
constexpr std::uint64_t kRowSampleStream = rng::kUser + 0;

void validate_spec(const FactSetSpec& s) {
  const bool from_file = !s.keys_file.empty();
  if (from_file) {
    require(s.dim >= 0, "--dim must be >= 1 (got {}); leave it out to take d from the key file", s.dim);
    require(s.facts >= 0, "--facts must be >= 1 (got {}); leave it out to use every row of the key file",
            s.facts);
  } else {
    require(s.dim >= 1, "--dim must be >= 1 (got {})", s.dim);
    require(s.facts >= 1, "--facts must be >= 1 (got {})", s.facts);
    require(s.values_file.empty(), "--values-file needs --keys FILE as well (the rows are paired)");
  }
  require(s.values >= 0, "--values must be >= 0 (0 means P = F; got {})", s.values);
  require(s.map == "identity" || s.map == "permutation",
          "unknown --map '{}': use identity or permutation", s.map);
  require(std::isfinite(s.spike_beta) && s.spike_beta >= 0 && s.spike_beta <= kMaxSpikeBeta,
          "--spike-beta must be in [0, {:g}] (got {}; beyond it every spiked row is +-u)", kMaxSpikeBeta,
          s.spike_beta);
  require(s.spike_target == "none" || s.spike_target == "keys" || s.spike_target == "values" ||
              s.spike_target == "both",
          "unknown --spike-target '{}': use none, keys, values or both", s.spike_target);
  require(!(s.spike_beta > 0 && s.spike_target == "none"),
          "--spike-beta {} needs --spike-target keys|values|both", s.spike_beta);
  if (s.tied) {
    require(s.values == 0 || s.values == s.facts,
            "--tied uses one table for keys and values, so --values must be 0 or equal --facts (got {} vs {})",
            s.values, s.facts);
    require(s.spike_target == "none" || s.spike_target == "both",
            "--tied keys and values are one table: use --spike-target both (got {})", s.spike_target);
    require(s.values_file.empty(), "--tied takes only --keys FILE (the values are the same rows)");
  }
  if (!from_file && s.values > 0)
    require(s.facts <= s.values,
            "F = {} facts is larger than the value table (P = {} rows): need --facts <= --values", s.facts,
            s.values);
  if (from_file) {
    require(s.spike_beta == 0, "--spike-beta applies to generated sphere tables, not to --keys FILE");
    require(s.values == 0, "--values {} sets the size of a generated value table; with --keys FILE the values are "
            "the file's rows (drop --values)", s.values);
    require(s.tied || !s.values_file.empty(),
            "--keys FILE needs --values-file FILE too (or --tied to use the key rows as values)");
  }
}

Eigen::VectorXi make_map(const std::string& kind, std::int64_t F, std::int64_t P, std::uint64_t seed) {
  if (kind == "identity") {
    Eigen::VectorXi m(F);
    for (std::int64_t i = 0; i < F; ++i) m[i] = static_cast<int>(i);
    return m;
  }
  return rng::permutation(P, seed, rng::kMap).head(F);
}

}  // namespace

Eigen::MatrixXd FactSet::targets() const {
  Eigen::MatrixXd c(F(), codes.cols());
  for (std::int64_t i = 0; i < F(); ++i) c.row(i) = codes.row(map[i]);
  return c;
}

void FactSet::validate() const {
  require(F() >= 1 && d() >= 1, "fact set is empty (F = {}, d = {})", F(), d());
  require(values.cols() == d(), "values have {} columns, keys have d = {}", values.cols(), d());
  require(codes.rows() == P() && codes.cols() == d(), "codes are {}x{}, expected {}x{}", codes.rows(),
          codes.cols(), P(), d());
  require(map.size() == F(), "map has {} entries for F = {} keys", map.size(), F());
  require(F() <= P(), "F = {} facts is larger than the value table (P = {} rows)", F(), P());
  std::vector<char> used(static_cast<std::size_t>(P()), 0);
  for (std::int64_t i = 0; i < F(); ++i) {
    require(map[i] >= 0 && map[i] < P(), "map[{}] = {} is outside [0, {})", i, map[i], P());
    require(!used[map[i]], "map is not injective: value row {} is used twice", map[i]);
    used[map[i]] = 1;
  }
  require(keys.allFinite() && values.allFinite() && codes.allFinite(), "fact set contains NaN or Inf");
}

Eigen::VectorXd spike_direction(std::int64_t d) {
  Eigen::VectorXd u = rng::normal_matrix(1, d, kSpikeSeed, rng::kSpike).row(0).transpose();
  return u / u.norm();
}

void spike_transform(Eigen::MatrixXd& rows, const Eigen::VectorXd& u, double beta) {
  require(u.size() == rows.cols(), "spike direction has {} entries, rows have {} columns", u.size(),
          rows.cols());
  require(beta >= 0 && std::isfinite(beta), "spike beta must be finite and >= 0 (got {})", beta);
  if (beta == 0) return;
  const Eigen::VectorXd proj = rows * u;  // e.u per row
  rows.noalias() += beta * proj * u.transpose();
  for (Eigen::Index i = 0; i < rows.rows(); ++i) rows.row(i) /= std::max(rows.row(i).norm(), 1e-30);
}

void check_table(const Eigen::MatrixXd& t, const std::string& what) {
  require(t.rows() >= 1 && t.cols() >= 1, "{} is empty ({} x {})", what, t.rows(), t.cols());
  for (Eigen::Index i = 0; i < t.rows(); ++i) {
    for (Eigen::Index j = 0; j < t.cols(); ++j)
      require(std::isfinite(t(i, j)), "{}: row {} column {} is not finite ({}); clean the table first", what,
              i, j, t(i, j));
    const double amax = t.row(i).cwiseAbs().maxCoeff();
    require(amax > 0, "{}: row {} is all zeros; drop zero rows (they have no direction)", what, i);
    // a row of tiny (e.g. subnormal) entries is not zero, but its squared norm underflows: normalising it divides
    // by zero
    require(t.row(i).squaredNorm() >= std::numeric_limits<double>::min(),
            "{}: row {} is too small to normalise (largest |entry| {:.3g}: its squared norm underflows); rescale "
            "the table",
            what, i, amax);
  }
}

FactSet make_factset(const FactSetSpec& s) {
  validate_spec(s);
  FactSet fs;
  fs.tied = s.tied;
  if (!s.keys_file.empty()) {
    fs.source = "file";
    Eigen::MatrixXd kt = load_table(s.keys_file, {"keys", "x"}, "keys");
    Eigen::MatrixXd vt = s.tied ? kt : load_table(s.values_file, {"values", "y"}, "values");
    require(s.dim == 0 || kt.cols() == s.dim, "--dim {} does not match the key file's d = {}", s.dim, kt.cols());
    require(vt.cols() == kt.cols(), "value table has d = {} columns but keys have d = {}", vt.cols(), kt.cols());
    require(vt.rows() == kt.rows(), "key and value files must have paired rows: {} keys vs {} values",
            kt.rows(), vt.rows());
    const std::int64_t N = kt.rows();
    const std::int64_t F = s.facts == 0 ? N : s.facts;
    require(F <= N, "F = {} facts is larger than the value table ({} rows in the files)", F, N);
    if (F < N) {  // F rows without replacement, same rows for keys and values (paired)
      const Eigen::VectorXi rows = rng::permutation(N, s.seed, kRowSampleStream).head(F);
      Eigen::MatrixXd ks(F, kt.cols()), vs(F, vt.cols());
      for (std::int64_t i = 0; i < F; ++i) {
        ks.row(i) = kt.row(rows[i]);
        vs.row(i) = vt.row(rows[i]);
      }
      kt.swap(ks);
      vt.swap(vs);
    }
    fs.keys = std::move(kt);
    fs.values = std::move(vt);
    fs.map = make_map(s.map, F, F, s.seed);
  } else {
    const std::int64_t F = s.facts, d = s.dim;
    const std::int64_t P = s.tied ? F : (s.values == 0 ? F : s.values);
    const Eigen::VectorXd u = s.spike_beta > 0 ? spike_direction(d) : Eigen::VectorXd();
    fs.keys = rng::sphere_rows(F, d, s.seed, rng::kKeys);
    if (s.tied) {
      if (s.spike_beta > 0) spike_transform(fs.keys, u, s.spike_beta);
      fs.values = fs.keys;
    } else {
      fs.values = rng::sphere_rows(P, d, s.seed, rng::kValues);
      if (s.spike_beta > 0 && (s.spike_target == "keys" || s.spike_target == "both"))
        spike_transform(fs.keys, u, s.spike_beta);
      if (s.spike_beta > 0 && (s.spike_target == "values" || s.spike_target == "both"))
        spike_transform(fs.values, u, s.spike_beta);
    }
    fs.map = make_map(s.map, F, P, s.seed);
  }
  fs.codes = fs.values;
  fs.validate();
  return fs;
}

}  // namespace memcap::mlp

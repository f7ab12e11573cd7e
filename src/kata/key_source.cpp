// Key sources for the capacity protocol: parsing, validation against d, and nested per-trial draws.
// Random keys use stream kKeys (row-major counters, so K rows are a prefix of K' rows); dictionaries
// are permuted with stream kDictionary; the greedy packing is seeded per trial.
#include "kata/key_source.hpp"

#include <cmath>
#include <map>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "kata/dictionary.hpp"
#include "kata/finite_field.hpp"

namespace memcap::kata {
namespace {

std::map<std::string, double> parse_opts(const std::string& spec, const std::string& text) {
  std::map<std::string, double> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    const std::size_t eq = item.find('=');
    require(eq != std::string::npos && eq > 0, "keys '{}': option '{}' must look like key=value", spec, item);
    const std::string val = item.substr(eq + 1);
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(val, &used);
    } catch (const std::logic_error&) {
      used = 0;
    }
    require(used == val.size() && !val.empty(), "keys '{}': option '{}' is not a number", spec, item);
    require(out.count(item.substr(0, eq)) == 0, "keys '{}': option '{}' is given twice", spec, item.substr(0, eq));
    out[item.substr(0, eq)] = v;
    pos = comma + 1;
  }
  return out;
}

std::int64_t as_count(const std::string& spec, const std::string& key, double v) {
  require(v >= 0 && v == std::floor(v) && v < 1e9, "keys '{}': {} must be a non-negative integer (got {})",
          spec, key, v);
  return static_cast<std::int64_t>(v);
}

}  // namespace

Eigen::MatrixXd regular_simplex(int d) {
  require(d >= 1, "simplex keys need d >= 1");
  // Centered standard basis of R^{d+1}, expressed in an orthonormal basis of the plane 1^perp.
  const int n = d + 1;
  Eigen::MatrixXd ones = Eigen::MatrixXd::Ones(n, 1);
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(ones);
  const Eigen::MatrixXd Qfull = qr.householderQ() * Eigen::MatrixXd::Identity(n, n);
  const Eigen::MatrixXd B = Qfull.rightCols(d);  // orthonormal, orthogonal to 1
  Eigen::MatrixXd centered = Eigen::MatrixXd::Identity(n, n);
  centered.array() -= 1.0 / n;
  Eigen::MatrixXd rows = centered * B;
  for (int i = 0; i < n; ++i) rows.row(i).normalize();
  return rows;
}

KeySource KeySource::parse(const std::string& spec, int d) {
  require(d >= 1, "d_head must be >= 1 (got {})", d);
  KeySource k;
  k.spec_ = spec;
  k.d_ = d;
  const std::size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const auto opt = parse_opts(spec, colon == std::string::npos ? "" : spec.substr(colon + 1));
  auto only = [&](std::initializer_list<const char*> allowed) {
    for (const auto& [key, v] : opt) {
      bool ok = false;
      for (const char* a : allowed) ok = ok || key == a;
      require(ok, "keys '{}': unknown option '{}'", spec, key);
    }
  };
  if (name == "random" || name == "sphere" || name == "random-sphere") {
    only({});
    k.type_ = KeySourceType::sphere;
  } else if (name == "gauss" || name == "gaussian" || name == "random-gauss") {
    only({});
    k.type_ = KeySourceType::gauss;
  } else if (name == "mub") {
    only({"s"});
    k.type_ = KeySourceType::mub;
    k.s_ = opt.count("s") ? as_count(spec, "s", opt.at("s")) : d / 2;
    require(2 * k.s_ == d, "keys '{}': realified MUB keys live in R^(2s); d_head = {} needs s = d/2 (d even)",
            spec, d);
    std::int64_t ell = 0;
    int kk = 0;
    require(prime_power(k.s_, ell, kk), "keys '{}': s = {} is not a prime power (MUBs need s = l^k)", spec, k.s_);
    k.pool_ = mub_dictionary(k.s_);
  } else if (name == "devore") {
    only({"s", "r"});
    k.type_ = KeySourceType::devore;
    const auto root = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(d))));
    k.s_ = opt.count("s") ? as_count(spec, "s", opt.at("s")) : root;
    k.r_ = opt.count("r") ? as_count(spec, "r", opt.at("r")) : 2;
    require(k.s_ * k.s_ == d, "keys '{}': DeVore keys live in R^(s^2); d_head = {} is not s^2 for s = {}", spec,
            d, k.s_);
    std::int64_t ell = 0;
    int kk = 0;
    require(prime_power(k.s_, ell, kk), "keys '{}': s = {} is not a prime power", spec, k.s_);
    require(k.r_ < k.s_, "keys '{}': DeVore needs 0 <= r < s (got r = {}, s = {})", spec, k.r_, k.s_);
    require(std::pow(static_cast<double>(k.s_), static_cast<double>(k.r_ + 1)) <= 4e6,
            "keys '{}': s^(r+1) = {}^{} vectors is too many to store; lower r", spec, k.s_, k.r_ + 1);
    k.pool_ = devore_dictionary(k.s_, k.r_);
  } else if (name == "greedy") {
    only({"a", "fails"});
    k.type_ = KeySourceType::greedy;
    if (opt.count("a")) k.a_ = opt.at("a");
    if (opt.count("fails")) {
      const double f = opt.at("fails");
      require(f >= 1 && f <= static_cast<double>(kMaxGreedyFails) && f == std::floor(f),
              "keys '{}': fails must be an integer in 1..{} (got {})", spec, kMaxGreedyFails, f);
      k.max_fail_ = static_cast<std::int64_t>(f);
    }
    require(k.a_ > 0 && k.a_ <= 1, "keys '{}': the greedy threshold a must be in (0, 1] (got {})", spec, k.a_);
    require(k.max_fail_ >= 1, "keys '{}': fails must be >= 1", spec);
  } else if (name == "coord") {
    only({});
    k.type_ = KeySourceType::coord;
    k.pool_ = Eigen::MatrixXd::Identity(d, d);
  } else if (name == "simplex") {
    only({});
    k.type_ = KeySourceType::simplex;
    k.pool_ = regular_simplex(d);
  } else {
    throw UserError(fmt::format(
        "unknown key source '{}'; known: random, gauss, mub[:s=S], devore[:s=S,r=R], greedy[:a=A,fails=F], "
        "coord, simplex",
        spec));
  }
  return k;
}

std::int64_t KeySource::pool_size() const {
  switch (type_) {
    case KeySourceType::sphere:
    case KeySourceType::gauss:
    case KeySourceType::greedy: return -1;
    default: return pool_.rows();
  }
}

std::string KeySource::describe() const {
  switch (type_) {
    case KeySourceType::sphere: return "uniform on the unit sphere";
    case KeySourceType::gauss: return "Gaussian N(0, I/d), not normalized";
    case KeySourceType::mub: return fmt::format("realified MUB s={} ({} vectors)", s_, pool_.rows());
    case KeySourceType::devore: return fmt::format("DeVore s={} r={} ({} vectors)", s_, r_, pool_.rows());
    case KeySourceType::greedy: return fmt::format("greedy line packing a={} fails={}", a_, max_fail_);
    case KeySourceType::coord: return fmt::format("coordinate rays ({} vectors)", d_);
    case KeySourceType::simplex: return fmt::format("regular simplex ({} vectors)", d_ + 1);
  }
  return "";
}

Eigen::MatrixXd KeySource::greedy_pool(std::uint64_t trial_seed, std::int64_t max_count) const {
  MEMCAP_ASSERT(type_ == KeySourceType::greedy, "greedy_pool on a non-greedy key source");
  return greedy_dictionary(d_, a_, max_fail_, max_count, trial_seed);
}

Eigen::MatrixXd KeySource::draw(std::int64_t K, std::uint64_t trial_seed, std::int64_t max_count) const {
  require(K >= 1, "the number of keys K must be >= 1 (got {})", K);
  switch (type_) {
    case KeySourceType::sphere: return rng::sphere_rows(K, d_, trial_seed, rng::kKeys);
    case KeySourceType::gauss:
      return rng::normal_matrix(K, d_, trial_seed, rng::kKeys) / std::sqrt(static_cast<double>(d_));
    case KeySourceType::greedy: {
      const std::int64_t cap = std::max(K, max_count);
      const Eigen::MatrixXd pool = greedy_dictionary(d_, a_, max_fail_, cap, trial_seed);
      require(pool.rows() >= K,
              "keys '{}': the greedy packing stopped at {} vectors (after {} consecutive rejections), fewer than "
              "K = {}; raise a or lower K",
              spec_, pool.rows(), max_fail_, K);
      return pool.topRows(K);
    }
    default: break;
  }
  require(K <= pool_.rows(), "keys '{}': the dictionary has {} vectors, fewer than K = {}; lower K (or --k-max)",
          spec_, pool_.rows(), K);
  const Eigen::VectorXi perm = rng::permutation(pool_.rows(), trial_seed, rng::kDictionary);
  Eigen::MatrixXd out(K, d_);
  for (std::int64_t i = 0; i < K; ++i) out.row(i) = pool_.row(perm[i]);
  return out;
}

}  // namespace memcap::kata

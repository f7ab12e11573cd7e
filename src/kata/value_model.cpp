// Value models of the capacity protocol. Gaussian values use stream kValues with row-major
// counters (nested in K); the codebook is drawn from kValues and the item -> codeword labels from
// kUser + 1, so the codebook does not change with K.
#include "kata/value_model.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"

namespace memcap::kata {

ValueModel ValueModel::parse(const std::string& spec) {
  ValueModel m;
  m.spec_ = spec;
  const std::size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const std::string opts = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (name == "gauss" || name == "gaussian") {
    require(opts.empty(), "values '{}': gauss takes no options", spec);
    m.type_ = ValueModelType::gauss;
  } else if (name == "onehot" || name == "one-hot") {
    require(opts.empty(), "values '{}': onehot takes no options", spec);
    m.type_ = ValueModelType::onehot;
  } else if (name == "codebook") {
    m.type_ = ValueModelType::codebook;
    if (!opts.empty()) {
      require(opts.rfind("size=", 0) == 0, "values '{}': the codebook option is size=N", spec);
      const std::string v = opts.substr(5);
      std::size_t used = 0;
      long long n = 0;
      try {
        n = std::stoll(v, &used);
      } catch (const std::logic_error&) {
        used = 0;
      }
      require(used == v.size() && !v.empty() && n >= 2, "values '{}': size must be an integer >= 2", spec);
      m.size_ = n;
    }
  } else {
    throw UserError(fmt::format("unknown value model '{}'; known: gauss, codebook[:size=N], onehot", spec));
  }
  return m;
}

void ValueModel::check(std::int64_t K, std::int64_t d_v) const {
  require(d_v >= 1, "d_v must be >= 1 (got {})", d_v);
  if (type_ == ValueModelType::onehot)
    require(d_v >= K, "values 'onehot' need d_v >= K, but d_v = {} < K = {}; raise --dv or lower K", d_v, K);
}

Values ValueModel::draw(std::int64_t K, std::int64_t d_v, std::uint64_t trial_seed) const {
  check(K, d_v);
  Values out;
  out.target.resize(K);
  switch (type_) {
    case ValueModelType::gauss:
      out.V = rng::normal_matrix(K, d_v, trial_seed, rng::kValues) / std::sqrt(static_cast<double>(d_v));
      out.decode = out.V;
      for (std::int64_t i = 0; i < K; ++i) out.target[i] = i;
      break;
    case ValueModelType::onehot:
      out.V = Eigen::MatrixXd::Identity(K, d_v);
      out.decode = out.V;
      for (std::int64_t i = 0; i < K; ++i) out.target[i] = i;
      break;
    case ValueModelType::codebook: {
      out.decode = rng::sphere_rows(size_, d_v, trial_seed, rng::kValues);
      out.V.resize(K, d_v);
      for (std::int64_t i = 0; i < K; ++i) {
        out.target[i] = static_cast<std::int64_t>(rng::below(trial_seed, rng::kUser + 1, i, size_));
        out.V.row(i) = out.decode.row(out.target[i]);
      }
      break;
    }
  }
  return out;
}

}  // namespace memcap::kata

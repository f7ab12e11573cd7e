// FeatureMap: parsing of map spec strings, explicit features and closed-form kernels (§2.1–2.9).
// Closed forms: M_g  Σ_a[(q_a·k_a)² + ε(‖q_a‖²+‖k_a‖²) + ε²m];  Σ_g  c²Σ_{a,b}(q_a·k_b)² + εc(‖q‖²+‖k‖²) + ε²m.
#include "kata/feature_map.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.hpp"

namespace memcap::kata {

namespace {

constexpr double kSqrt2 = 1.41421356237309504880;

double parse_number(const std::string& key, const std::string& text, const std::string& spec) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used != text.size() || text.empty())
    throw UserError(fmt::format("feature map '{}': option {}='{}' is not a number", spec, key, text));
  return v;
}

bool parse_suffix(const std::string& name, const std::string& prefix, std::int64_t& value) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return false;
  const std::string rest = name.substr(prefix.size());
  for (char c : rest)
    if (c < '0' || c > '9') return false;
  if (rest.size() > 6) return false;
  value = std::stoll(rest);
  return true;
}

bool is_psd_kind(MapKind k) { return k == MapKind::BlockPsd || k == MapKind::SumPsd; }

}  // namespace

std::int64_t symmetric_dim(std::int64_t n, int r) {
  // C(n + r - 1, r), computed incrementally (exact while it fits).
  long double c = 1;
  for (int i = 1; i <= r; ++i) c = c * static_cast<long double>(n + i - 1) / i;
  require(c < 9.0e15L, "symmetric tensor width C({}+{}-1, {}) is too large", n, r, r);
  return static_cast<std::int64_t>(std::llround(static_cast<double>(c)));
}

void pack_rank_one(const double* u, std::int64_t m, double scale, double* out) {
  for (std::int64_t i = 0; i < m; ++i) out[i] += scale * u[i] * u[i];
  std::int64_t o = m;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = i + 1; j < m; ++j) out[o++] += scale * kSqrt2 * u[i] * u[j];
}

FeatureMap FeatureMap::parse(const std::string& spec, std::int64_t d) {
  FeatureMap f;
  f.spec_ = spec;
  f.d_ = d;
  require(d >= 1, "feature map '{}': input dimension d = {} must be >= 1", spec, d);
  const auto colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  std::map<std::string, double> opts;
  if (colon != std::string::npos) {
    std::string rest = spec.substr(colon + 1);
    std::size_t pos = 0;
    while (pos <= rest.size()) {
      const auto comma = rest.find(',', pos);
      const std::string item = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      const auto eq = item.find('=');
      if (eq == std::string::npos)
        throw UserError(fmt::format("feature map '{}': option '{}' must look like key=value", spec, item));
      const std::string key = item.substr(0, eq);
      if (opts.count(key) != 0)
        throw UserError(fmt::format("feature map '{}': option '{}' is given twice", spec, key));
      opts[key] = parse_number(key, item.substr(eq + 1), spec);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  auto take = [&](const std::string& key, double def) {
    auto it = opts.find(key);
    if (it == opts.end()) return def;
    const double v = it->second;
    opts.erase(it);
    return v;
  };
  std::int64_t g = 0;
  if (name == "linear") {
    f.kind_ = MapKind::Linear;
    f.n_psi_ = d;
  } else if (name == "orthant") {
    f.kind_ = MapKind::Orthant;
    f.eps_ = take("eps", 1e-6);
    f.n_psi_ = d;
  } else if (name == "lorentz" || name == "lorentz-lift" || name == "lorentz-ray") {
    f.kind_ = name == "lorentz" ? MapKind::Lorentz : name == "lorentz-lift" ? MapKind::LorentzLift : MapKind::LorentzRay;
    require(d >= 2, "feature map '{}': Lorentz maps need d >= 2 (got d = {})", spec, d);
    f.n_psi_ = name == "lorentz" ? d : d + 1;
  } else if (parse_suffix(name, "m", g) || parse_suffix(name, "sigma", g)) {
    const bool sum = name[0] == 's';
    require(g >= 1, "feature map '{}': number of blocks g must be >= 1", spec);
    require(d % g == 0, "feature map '{}': d = {} is not divisible by g = {}; choose g dividing d", spec, d, g);
    const std::int64_t m = d / g;
    f.g_ = g;
    f.degree_ = 2;
    if (sum) {
      f.kind_ = MapKind::SumPsd;
      f.eps_ = take("eps", 1e-4);
      f.scale_ = take("scale", g == 4 ? 0.25 : 1.0);
      require(std::isfinite(f.scale_) && f.scale_ > 0,
              "feature map '{}': scale must be a positive finite number (got {})", spec, f.scale_);
      f.n_psi_ = m * (m + 1) / 2;
    } else {
      f.kind_ = MapKind::BlockPsd;
      f.eps_ = take("eps", 0.0);
      f.n_psi_ = g * (m * (m + 1) / 2);
    }
  } else if (parse_suffix(name, "deg", g)) {
    require(g >= 2 && g % 2 == 0,
            "feature map '{}': degree must be even and >= 2 (odd powers are not cone kernels; see spec §2.8)", spec);
    require(g <= 16, "feature map '{}': degree {} is too large (at most 16)", spec, g);
    f.kind_ = MapKind::EvenDegree;
    f.degree_ = static_cast<int>(g);
    f.n_psi_ = symmetric_dim(d, f.degree_);
  } else if (name == "softmax") {
    f.kind_ = MapKind::Softmax;
    require(opts.count("tau") == 1, "feature map '{}': softmax needs a temperature, e.g. softmax:tau=0.125", spec);
    f.tau_ = take("tau", 0.0);
    require(std::isfinite(f.tau_) && f.tau_ > 0,
            "feature map '{}': tau must be a positive finite temperature (got {})", spec, f.tau_);
    f.n_psi_ = 0;
  } else {
    throw UserError(fmt::format(
        "unknown feature map '{}'; use linear, orthant[:eps=E], lorentz, lorentz-lift, lorentz-ray, "
        "m<g>[:eps=E], sigma<g>[:eps=E,scale=C], deg<2r>, softmax:tau=T", spec));
  }
  require(std::isfinite(f.eps_) && f.eps_ >= 0,
          "feature map '{}': eps must be a finite number >= 0 (got {})", spec, f.eps_);
  if (!opts.empty())
    throw UserError(fmt::format("feature map '{}': option '{}' is not known for map '{}'", spec,
                                opts.begin()->first, name));
  return f;
}

std::string FeatureMap::canonical_spec() const {
  switch (kind_) {
    case MapKind::Linear: return "linear";
    case MapKind::Orthant: return fmt::format("orthant:eps={}", eps_);
    case MapKind::Lorentz: return "lorentz";
    case MapKind::LorentzLift: return "lorentz-lift";
    case MapKind::LorentzRay: return "lorentz-ray";
    case MapKind::BlockPsd: return fmt::format("m{}:eps={}", g_, eps_);
    case MapKind::SumPsd: return fmt::format("sigma{}:eps={},scale={}", g_, eps_, scale_);
    case MapKind::EvenDegree: return fmt::format("deg{}", degree_);
    case MapKind::Softmax: return fmt::format("softmax:tau={}", tau_);
  }
  return "";
}

std::string FeatureMap::cone() const {
  switch (kind_) {
    case MapKind::Linear: return fmt::format("R^{} (no cone)", d_);
    case MapKind::Orthant: return fmt::format("R^{}_+", d_);
    case MapKind::Lorentz: return fmt::format("L^{}_+", d_);
    case MapKind::LorentzLift:
    case MapKind::LorentzRay: return fmt::format("L^{}_+", d_ + 1);
    case MapKind::BlockPsd: return g_ == 1 ? fmt::format("S^{}_+", d_) : fmt::format("(S^{}_+)^{}", d_ / g_, g_);
    case MapKind::SumPsd: return fmt::format("S^{}_+", d_ / g_);
    case MapKind::EvenDegree: return fmt::format("Sym^{}(R^{})_+", degree_, d_);
    case MapKind::Softmax: return "RKHS of exp(<x,y>/tau) (infinite)";
  }
  return "";
}

void FeatureMap::check_width(const Eigen::MatrixXd& X, const char* what) const {
  require(X.cols() == d_, "feature map '{}': {} has {} columns but the map was built for d = {}", spec_, what,
          X.cols(), d_);
}

Eigen::MatrixXd FeatureMap::apply(const Eigen::MatrixXd& X) const {
  check_width(X, "input");
  require(!is_softmax(), "feature map '{}': softmax has no finite feature vector; use kernel_matrix", spec_);
  require(static_cast<double>(X.rows()) * static_cast<double>(n_psi_) < 4.0e9,
          "feature map '{}': {} rows × n_psi = {} features is too large to hold", spec_, X.rows(), n_psi_);
  const std::int64_t N = X.rows();
  Eigen::MatrixXd out = Eigen::MatrixXd::Zero(N, n_psi_);
  switch (kind_) {
    case MapKind::Linear: out = X; break;
    case MapKind::Orthant: out = (X.array().max(0.0) + eps_).matrix(); break;
    case MapKind::Lorentz: {
      for (std::int64_t i = 0; i < N; ++i) {
        const double s = X(i, d_ - 1);
        const double ny = X.row(i).head(d_ - 1).norm();
        out.row(i).head(d_ - 1) = X.row(i).head(d_ - 1);
        out(i, d_ - 1) = ny * (1.0 + s * s);
      }
      break;
    }
    case MapKind::LorentzLift:
      out.leftCols(d_) = X;
      out.col(d_) = X.rowwise().norm();
      break;
    case MapKind::LorentzRay: {
      const double h = 1.0 / kSqrt2;
      for (std::int64_t i = 0; i < N; ++i) {
        const double n = X.row(i).norm();
        if (n > 0) out.row(i).head(d_) = X.row(i) * (h / n);
        out(i, d_) = h;
      }
      break;
    }
    case MapKind::BlockPsd:
    case MapKind::SumPsd: {
      const std::int64_t m = d_ / g_, w = m * (m + 1) / 2;
      const bool sum = kind_ == MapKind::SumPsd;
      std::vector<double> u(m), row(n_psi_);
      for (std::int64_t i = 0; i < N; ++i) {
        std::fill(row.begin(), row.end(), 0.0);
        for (std::int64_t a = 0; a < g_; ++a) {
          for (std::int64_t t = 0; t < m; ++t) u[t] = X(i, a * m + t);
          double* dst = row.data() + (sum ? 0 : a * w);
          pack_rank_one(u.data(), m, sum ? scale_ : 1.0, dst);
          if (!sum)  // ε I per block: ε on each diagonal coordinate (Σ_g adds it once, below)
            for (std::int64_t t = 0; t < m; ++t) dst[t] += eps_;
        }
        if (sum)
          for (std::int64_t t = 0; t < m; ++t) row[t] += eps_;
        for (std::int64_t c = 0; c < n_psi_; ++c) out(i, c) = row[c];
      }
      break;
    }
    case MapKind::EvenDegree: {
      // Multisets i_1 <= ... <= i_r in lexicographic order; entry sqrt(r!/Π c_j!) Π u_{i_t}.
      const int r = degree_;
      std::vector<double> logfact(r + 1, 0.0);
      for (int t = 1; t <= r; ++t) logfact[t] = logfact[t - 1] + std::log(static_cast<double>(t));
      std::vector<std::int64_t> idx(r, 0);
      std::int64_t col = 0;
      while (true) {
        double logw = logfact[r];
        for (int t = 0, run = 1; t < r; ++t) {
          if (t + 1 < r && idx[t + 1] == idx[t]) { ++run; continue; }
          logw -= logfact[run];
          run = 1;
        }
        const double w = std::sqrt(std::exp(logw));
        for (std::int64_t i = 0; i < N; ++i) {
          double p = w;
          for (int t = 0; t < r; ++t) p *= X(i, idx[t]);
          out(i, col) = p;
        }
        ++col;
        int t = r - 1;
        while (t >= 0 && idx[t] == d_ - 1) --t;
        if (t < 0) break;
        ++idx[t];
        for (int u2 = t + 1; u2 < r; ++u2) idx[u2] = idx[t];
      }
      MEMCAP_ASSERT(col == n_psi_, "multiset enumeration count");
      break;
    }
    case MapKind::Softmax: break;
  }
  return out;
}

Eigen::MatrixXd FeatureMap::kernel_matrix(const Eigen::MatrixXd& X, const Eigen::MatrixXd& Y) const {
  check_width(X, "left input");
  check_width(Y, "right input");
  switch (kind_) {
    case MapKind::Linear: return X * Y.transpose();
    case MapKind::Orthant: {
      const Eigen::MatrixXd A = (X.array().max(0.0) + eps_).matrix();
      const Eigen::MatrixXd B = (Y.array().max(0.0) + eps_).matrix();
      return A * B.transpose();
    }
    case MapKind::Lorentz: {
      const auto yx = X.leftCols(d_ - 1), yy = Y.leftCols(d_ - 1);
      const Eigen::VectorXd tx = yx.rowwise().norm().array() * (1.0 + X.col(d_ - 1).array().square());
      const Eigen::VectorXd ty = yy.rowwise().norm().array() * (1.0 + Y.col(d_ - 1).array().square());
      return yx * yy.transpose() + tx * ty.transpose();
    }
    case MapKind::LorentzLift: {
      const Eigen::VectorXd nx = X.rowwise().norm(), ny = Y.rowwise().norm();
      return X * Y.transpose() + nx * ny.transpose();
    }
    case MapKind::LorentzRay: {
      Eigen::VectorXd ix = X.rowwise().norm(), iy = Y.rowwise().norm();
      for (auto& v : ix) v = v > 0 ? 1.0 / v : 0.0;
      for (auto& v : iy) v = v > 0 ? 1.0 / v : 0.0;
      Eigen::MatrixXd G = X * Y.transpose();
      G = ix.asDiagonal() * G * iy.asDiagonal();
      return ((G.array() + 1.0) * 0.5).matrix();
    }
    case MapKind::BlockPsd:
    case MapKind::SumPsd: {
      const std::int64_t m = d_ / g_;
      const bool sum = kind_ == MapKind::SumPsd;
      Eigen::MatrixXd K = Eigen::MatrixXd::Zero(X.rows(), Y.rows());
      for (std::int64_t a = 0; a < g_; ++a)
        for (std::int64_t b = 0; b < g_; ++b) {
          if (!sum && a != b) continue;
          const Eigen::MatrixXd G = X.middleCols(a * m, m) * Y.middleCols(b * m, m).transpose();
          K.array() += G.array().square();
        }
      if (eps_ == 0.0 && !sum) return K;
      if (sum) K *= scale_ * scale_;
      Eigen::VectorXd nx, ny;
      if (sum) {
        nx = X.rowwise().squaredNorm() * (eps_ * scale_);
        ny = Y.rowwise().squaredNorm() * (eps_ * scale_);
        K.colwise() += nx;
        K.rowwise() += ny.transpose();
        K.array() += eps_ * eps_ * static_cast<double>(m);
      } else {
        K.colwise() += X.rowwise().squaredNorm() * eps_;
        K.rowwise() += (Y.rowwise().squaredNorm() * eps_).transpose();
        K.array() += eps_ * eps_ * static_cast<double>(m * g_);
      }
      return K;
    }
    case MapKind::EvenDegree: return (X * Y.transpose()).array().pow(static_cast<double>(degree_)).matrix();
    case MapKind::Softmax: return ((X * Y.transpose()) / tau_).array().exp().matrix();
  }
  return {};
}

double FeatureMap::kernel(const Eigen::VectorXd& x, const Eigen::VectorXd& y) const {
  return kernel_matrix(x.transpose(), y.transpose())(0, 0);
}

Eigen::VectorXd FeatureMap::kernel_diag(const Eigen::MatrixXd& X) const {
  check_width(X, "input");
  Eigen::VectorXd k(X.rows());
  for (std::int64_t i = 0; i < X.rows(); ++i) {
    const Eigen::MatrixXd r = X.row(i);
    k(i) = kernel_matrix(r, r)(0, 0);
  }
  return k;
}

MapParams FeatureMap::params() const {
  MapParams p;
  p.kind = kind_;
  p.d = static_cast<int>(d_);
  p.g = static_cast<int>(g_);
  p.m = static_cast<int>(is_psd_kind(kind_) ? d_ / g_ : d_);
  p.degree = degree_;
  p.n_features = n_psi_;
  p.eps = eps_;
  p.scale = scale_;
  p.tau = tau_;
  return p;
}

Eigen::MatrixXd FeatureMap::vjp(const Eigen::MatrixXd& X, const Eigen::MatrixXd& G) const {
  check_width(X, "input");
  require(!is_softmax(), "feature map '{}': softmax has no finite feature vector, so no VJP of psi", spec_);
  require(G.rows() == X.rows() && G.cols() == n_psi_,
          "feature map '{}': VJP cotangent is {}x{} but psi of {} rows is {}x{}", spec_, G.rows(), G.cols(), X.rows(),
          X.rows(), n_psi_);
  const std::int64_t N = X.rows();
  Eigen::MatrixXd dX = Eigen::MatrixXd::Zero(N, d_);
  for (std::int64_t r = 0; r < N; ++r) {
    const auto x = X.row(r);
    const auto g = G.row(r);
    auto out = dX.row(r);
    switch (kind_) {
      case MapKind::Linear: out = g; break;
      case MapKind::Orthant:
        for (std::int64_t i = 0; i < d_; ++i) out(i) = x(i) > 0 ? g(i) : 0.0;
        break;
      case MapKind::Lorentz: {  // (y, ‖y‖(1+s²)), y = x_{0..d-2}, s = x_{d-1}
        const double s = x(d_ - 1), ny = x.head(d_ - 1).norm(), gl = g(d_ - 1);
        for (std::int64_t i = 0; i + 1 < d_; ++i) out(i) = g(i) + (ny > 0 ? gl * (1.0 + s * s) * x(i) / ny : 0.0);
        out(d_ - 1) = gl * ny * 2.0 * s;
        break;
      }
      case MapKind::LorentzLift: {  // (x, ‖x‖)
        const double n = x.norm();
        for (std::int64_t i = 0; i < d_; ++i) out(i) = g(i) + (n > 0 ? g(d_) * x(i) / n : 0.0);
        break;
      }
      case MapKind::LorentzRay: {  // h (x/‖x‖, 1): h (I - x̂x̂ᵀ) g_x / ‖x‖
        const double n = x.norm(), h = 1.0 / kSqrt2;
        if (n > 0) {
          const double proj = x.dot(g.head(d_)) / (n * n);
          for (std::int64_t i = 0; i < d_; ++i) out(i) = h * (g(i) - proj * x(i)) / n;
        }
        break;
      }
      case MapKind::BlockPsd:
      case MapKind::SumPsd: {  // ψ_(ij) = c_ij Σ_a u_ai u_aj (one block per a for M_g): ∂/∂u_ak = Σ_l c_l g_l ∂(u_ai u_aj)
        const std::int64_t m = d_ / g_, w = m * (m + 1) / 2;
        const bool sum = kind_ == MapKind::SumPsd;
        const double c = sum ? scale_ : 1.0;
        for (std::int64_t a = 0; a < g_; ++a) {
          const std::int64_t off = sum ? 0 : a * w;
          for (std::int64_t i = 0; i < m; ++i) out(a * m + i) += c * 2.0 * g(off + i) * x(a * m + i);
          std::int64_t l = off + m;
          for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = i + 1; j < m; ++j, ++l) {
              out(a * m + i) += c * kSqrt2 * g(l) * x(a * m + j);
              out(a * m + j) += c * kSqrt2 * g(l) * x(a * m + i);
            }
        }
        break;
      }
      case MapKind::EvenDegree: {  // ψ_I = w_I Π_t x_{I_t} over multisets I (apply's order)
        const int rr = degree_;
        std::vector<double> logfact(rr + 1, 0.0);
        for (int t = 1; t <= rr; ++t) logfact[t] = logfact[t - 1] + std::log(static_cast<double>(t));
        std::vector<std::int64_t> idx(rr, 0);
        std::int64_t col = 0;
        while (true) {
          double logw = logfact[rr];
          for (int t = 0, run = 1; t < rr; ++t) {
            if (t + 1 < rr && idx[t + 1] == idx[t]) { ++run; continue; }
            logw -= logfact[run];
            run = 1;
          }
          const double wgt = std::sqrt(std::exp(logw)) * g(col);
          for (int t = 0; t < rr; ++t) {  // product rule: drop factor t
            double p = wgt;
            for (int t2 = 0; t2 < rr; ++t2)
              if (t2 != t) p *= x(idx[t2]);
            out(idx[t]) += p;
          }
          ++col;
          int t = rr - 1;
          while (t >= 0 && idx[t] == d_ - 1) --t;
          if (t < 0) break;
          ++idx[t];
          for (int u2 = t + 1; u2 < rr; ++u2) idx[u2] = idx[t];
        }
        break;
      }
      case MapKind::Softmax: break;
    }
  }
  return dX;
}

std::int64_t FeatureMap::state_size(std::int64_t d_v) const {
  require(d_v >= 1, "state size: d_v = {} must be >= 1", d_v);
  require(!is_softmax(), "feature map '{}': softmax has no fixed state (its KV cache is 2·d·T floats)", spec_);
  return n_psi_ * d_v;
}

std::int64_t FeatureMap::full_state_size(std::int64_t d_v) const { return state_size(d_v) + n_psi_; }

}  // namespace memcap::kata

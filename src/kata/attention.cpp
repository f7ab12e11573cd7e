// Float64 CPU reference forms of causal KATA attention (recurrent, quadratic, chunked, tree).
// Per (b, h) head everything is independent; heads run in parallel with OpenMP.
#include "kata/attention.hpp"

#include <Eigen/Dense>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/threads.hpp"

namespace memcap::kata {
namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const Mat>;
using OMap = Eigen::Map<Mat>;

void check_inputs(const AttentionShape& s, const AttentionOptions& o, const double* q, const double* k,
                  const double* v) {
  s.validate();
  o.validate(s);
  if (!q || !k || !v) throw UserError("attention: null input pointer");
  auto finite = [](const double* x, std::int64_t n, const char* name) {
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(x[i]))
        throw NumericError(fmt::format("attention: input {} has a non-finite value at flat index {}", name, i));
  };
  finite(q, s.qk_size(), "q");
  finite(k, s.qk_size(), "k");
  finite(v, s.v_size(), "v");
}

// Rows psi(x_t) (packed, FeatureMap::apply) of `rows` raw vectors x (row-major, width d).
Mat features_of(const FeatureMap& map, const double* x, std::int64_t rows, std::int64_t d) {
  return map.apply(CMap(x, rows, d));
}

// Closed-form kernel matrix A_ij = <psi(q_i), psi(k_j)> for rows of Q and K (FeatureMap::kernel_matrix).
Mat kernel_rows(const FeatureMap& map, const double* q, std::int64_t nq, const double* k, std::int64_t nk,
                std::int64_t d) {
  return map.kernel_matrix(CMap(q, nq, d), CMap(k, nk, d));
}

// out_row = num / den (normalized; 0 when den == 0) or num.
void readout(bool normalized, const double* num, double den, std::int64_t dv, double* out) {
  for (std::int64_t c = 0; c < dv; ++c) out[c] = !normalized ? num[c] : (den != 0 ? num[c] / den : 0.0);
}

template <class PerHead>
std::vector<double> for_each_head(const AttentionShape& s, PerHead&& f) {
  std::vector<double> out(static_cast<std::size_t>(s.v_size()));
  const std::int64_t heads = s.B * s.H;
  parallel_for_rethrow(heads, [&](std::int64_t bh) { f(bh, out.data() + bh * s.T * s.dv); });
  return out;
}

// Shared by chunked (sequential carry) and tree (Hillis-Steele prefix) forms: outputs of chunk c
// given the state (S, Z) of all tokens before it.
void chunk_output(const AttentionShape& s, const AttentionOptions& o, const double* q, const double* k,
                  const double* v, std::int64_t t0, std::int64_t len, const Mat& S, const Eigen::VectorXd& Z,
                  double* out) {
  const std::int64_t d = s.d;
  Mat psiq = features_of(o.map, q + t0 * d, len, d);
  Mat num = psiq * S;                                     // inter-chunk part
  Eigen::VectorXd den = psiq * Z;
  Mat P = kernel_rows(o.map, q + t0 * d, len, k + t0 * d, len, d);  // intra-chunk, raw-score form
  for (std::int64_t i = 0; i < len; ++i)
    for (std::int64_t j = i + 1; j < len; ++j) P(i, j) = 0.0;
  num += P * CMap(v + t0 * s.dv, len, s.dv);
  den += P.rowwise().sum();
  for (std::int64_t i = 0; i < len; ++i) readout(o.normalized, num.row(i).data(), den(i), s.dv, out + (t0 + i) * s.dv);
}

}  // namespace

void AttentionShape::validate() const {
  if (B < 1 || H < 1 || T < 1 || d < 1 || dv < 1)
    throw UserError(fmt::format("attention: sizes must be >= 1 (got B={} H={} T={} d={} dv={})", B, H, T, d, dv));
}

void AttentionOptions::validate(const AttentionShape& s) const {
  const MapParams a = attention_map(map);
  if (map.input_dim() != s.d)
    throw UserError(fmt::format("attention: feature map '{}' was built for d = {} but the heads have d = {}; parse "
                                "the map with the head width",
                                map.spec(), map.input_dim(), s.d));
  if (chunk < 1) throw UserError(fmt::format("attention: chunk size must be >= 1 (got {})", chunk));
  if (backward_chunk < 0)
    throw UserError(fmt::format("attention: backward chunk size must be >= 0 (0: the forward's; got {})",
                                backward_chunk));
  if (normalized && !a.nonnegative())
    throw UserError("attention: the linear feature map has no cone, so its denominator can vanish; "
                    "use the unnormalized readout with it");
}

AttentionOptions default_options(const FeatureMap& map, std::int64_t chunk) {
  AttentionOptions o;
  o.map = map;
  o.normalized = attention_map(map).nonnegative();
  o.chunk = chunk;
  return o;
}

std::vector<double> attention_recurrent(const AttentionShape& s, const AttentionOptions& o, const double* q,
                                        const double* k, const double* v) {
  check_inputs(s, o, q, k, v);
  const std::int64_t d = s.d, n = o.map.feature_dim();
  constexpr std::int64_t kBlock = 256;  // tokens whose features are formed at once (bounds memory)
  return for_each_head(s, [&](std::int64_t bh, double* out) {
    const double* qh = q + bh * s.T * d;
    const double* kh = k + bh * s.T * d;
    const double* vh = v + bh * s.T * s.dv;
    Mat S = Mat::Zero(n, s.dv);
    Eigen::VectorXd Z = Eigen::VectorXd::Zero(n), num(s.dv);
    for (std::int64_t t0 = 0; t0 < s.T; t0 += kBlock) {
      const std::int64_t len = std::min(kBlock, s.T - t0);
      const Mat PK = features_of(o.map, kh + t0 * d, len, d), PQ = features_of(o.map, qh + t0 * d, len, d);
      for (std::int64_t i = 0; i < len; ++i) {
        const std::int64_t t = t0 + i;
        // S_t = S_{t-1} + psi(k_t) v_t^T,  Z_t = Z_{t-1} + psi(k_t)
        S += PK.row(i).transpose() * Eigen::Map<const Eigen::RowVectorXd>(vh + t * s.dv, s.dv);
        Z += PK.row(i).transpose();
        num = S.transpose() * PQ.row(i).transpose();
        readout(o.normalized, num.data(), PQ.row(i).dot(Z), s.dv, out + t * s.dv);
      }
    }
  });
}

std::vector<double> attention_quadratic(const AttentionShape& s, const AttentionOptions& o, const double* q,
                                        const double* k, const double* v) {
  check_inputs(s, o, q, k, v);
  const std::int64_t d = s.d;
  return for_each_head(s, [&](std::int64_t bh, double* out) {
    Mat A = kernel_rows(o.map, q + bh * s.T * d, s.T, k + bh * s.T * d, s.T, d);
    for (std::int64_t i = 0; i < s.T; ++i)
      for (std::int64_t j = i + 1; j < s.T; ++j) A(i, j) = 0.0;  // causal mask
    Mat num = A * CMap(v + bh * s.T * s.dv, s.T, s.dv);
    Eigen::VectorXd den = A.rowwise().sum();
    for (std::int64_t i = 0; i < s.T; ++i) readout(o.normalized, num.row(i).data(), den(i), s.dv, out + i * s.dv);
  });
}

std::vector<double> attention_chunked(const AttentionShape& s, const AttentionOptions& o, const double* q,
                                      const double* k, const double* v) {
  check_inputs(s, o, q, k, v);
  const std::int64_t d = s.d, n = o.map.feature_dim();
  return for_each_head(s, [&](std::int64_t bh, double* out) {
    const double* qh = q + bh * s.T * d;
    const double* kh = k + bh * s.T * d;
    const double* vh = v + bh * s.T * s.dv;
    Mat S = Mat::Zero(n, s.dv);
    Eigen::VectorXd Z = Eigen::VectorXd::Zero(n);
    for (std::int64_t t0 = 0; t0 < s.T; t0 += o.chunk) {
      const std::int64_t len = std::min(o.chunk, s.T - t0);  // last chunk: shorter (= zero padding, truncated)
      chunk_output(s, o, qh, kh, vh, t0, len, S, Z, out);
      Mat psik = features_of(o.map, kh + t0 * d, len, d);
      S += psik.transpose() * CMap(vh + t0 * s.dv, len, s.dv);
      Z += psik.colwise().sum().transpose();
    }
  });
}

std::vector<double> attention_tree(const AttentionShape& s, const AttentionOptions& o, const double* q,
                                   const double* k, const double* v) {
  check_inputs(s, o, q, k, v);
  const std::int64_t d = s.d, n = o.map.feature_dim();
  const std::int64_t nc = (s.T + o.chunk - 1) / o.chunk;
  return for_each_head(s, [&](std::int64_t bh, double* out) {
    const double* qh = q + bh * s.T * d;
    const double* kh = k + bh * s.T * d;
    const double* vh = v + bh * s.T * s.dv;
    // 1. chunk-local states
    std::vector<Mat> S(nc);
    std::vector<Eigen::VectorXd> Z(nc);
    for (std::int64_t c = 0; c < nc; ++c) {
      const std::int64_t t0 = c * o.chunk, len = std::min(o.chunk, s.T - t0);
      Mat psik = features_of(o.map, kh + t0 * d, len, d);
      S[c] = psik.transpose() * CMap(vh + t0 * s.dv, len, s.dv);
      Z[c] = psik.colwise().sum().transpose();
    }
    // 2. Hillis-Steele inclusive scan (double-buffered), then shift by one for the exclusive prefix
    for (std::int64_t step = 1; step < nc; step *= 2) {
      std::vector<Mat> S2 = S;
      std::vector<Eigen::VectorXd> Z2 = Z;
      for (std::int64_t c = step; c < nc; ++c) {
        S2[c] += S[c - step];
        Z2[c] += Z[c - step];
      }
      S.swap(S2);
      Z.swap(Z2);
    }
    // 3. chunk outputs with the exclusive prefix
    for (std::int64_t c = 0; c < nc; ++c) {
      const std::int64_t t0 = c * o.chunk, len = std::min(o.chunk, s.T - t0);
      const Mat Sp = c == 0 ? Mat::Zero(n, s.dv) : S[c - 1];
      const Eigen::VectorXd Zp = c == 0 ? Eigen::VectorXd::Zero(n) : Z[c - 1];
      chunk_output(s, o, qh, kh, vh, t0, len, Sp, Zp, out);
    }
  });
}

double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw UserError("relative_error: sizes differ");
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (den == 0) return num == 0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

}  // namespace memcap::kata

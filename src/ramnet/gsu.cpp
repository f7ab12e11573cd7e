// GSU memory: closed-form gate, accurate 1 − w, dense/sparse storage, both readouts, induced token
// weights by probe values (spec ramnet.md §1.6–1.7, §5.6–5.8).
#include "ramnet/gsu.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "ramnet/theory.hpp"

namespace memcap::ramnet {

Readout parse_readout(const std::string& name) {
  if (name == "standard") return Readout::standard;
  if (name == "mass") return Readout::mass;
  throw UserError(fmt::format("--readout must be standard or mass (got '{}')", name));
}

const char* readout_name(Readout r) { return r == Readout::standard ? "standard" : "mass"; }

double gsu_gate(double w, double one_minus_w, double gamma) {
  if (gamma == -INFINITY || w <= 0) return 1.0;
  if (one_minus_w <= 0) return 0.0;
  if (gamma <= 0) return one_minus_w / (one_minus_w + w * std::exp(gamma));
  const double a = one_minus_w * std::exp(-gamma);  // large γ: no overflow of e^γ
  return a / (a + w);
}

// ---- address weights --------------------------------------------------------------------------

AddressWeightsBuilder::AddressWeightsBuilder(int dp, int U) : dp_(dp), U_(U) {
  address_count(dp, U);
  lc_.resize(static_cast<std::size_t>(dp) * U);
}

void AddressWeightsBuilder::complements(const double* table) {
  for (int u = 0; u < U_; ++u) {
    const double* t = table + static_cast<std::ptrdiff_t>(u) * dp_;
    for (int j = 0; j < dp_; ++j) {
      double d = 0;  // Σ_{l≠j} p_u(l), summed directly: accurate when p_u(j) ≈ 1
      for (int l = 0; l < dp_; ++l)
        if (l != j) d += std::exp(t[l]);
      lc_[static_cast<std::size_t>(u) * dp_ + j] = std::log1p(-std::min(d, 1.0));
    }
  }
}

namespace {
// out[i] = Σ_u rows[u][digit_u(i)] over all dp^U addresses (digit 0 least significant), summed in the
// order u = 0..U−1 (the same order as address_log_prob and the Top-K decoder).
void tensor_sum(const double* rows, int dp, int U, double* out) {
  out[0] = 0.0;
  std::int64_t len = 1;
  for (int u = 0; u < U; ++u) {
    const double* t = rows + static_cast<std::ptrdiff_t>(u) * dp;
    for (int j = dp - 1; j >= 0; --j) {
      double* dst = out + j * len;
      const double tj = t[j];
      for (std::int64_t i = 0; i < len; ++i) dst[i] = out[i] + tj;
    }
    len *= dp;
  }
}
}  // namespace

void AddressWeightsBuilder::full(const double* table, AddressWeights& out, bool complement) {
  const std::int64_t n = address_count(dp_, U_);
  const auto N = static_cast<std::size_t>(n);
  out.slot.resize(N);
  std::iota(out.slot.begin(), out.slot.end(), std::int64_t{0});
  out.p.resize(N);
  tensor_sum(table, dp_, U_, out.p.data());
  for (auto& x : out.p) x = std::exp(x);
  out.one_minus_p.clear();
  if (!complement) return;
  complements(table);
  out.one_minus_p.resize(N);
  tensor_sum(lc_.data(), dp_, U_, out.one_minus_p.data());
  for (auto& x : out.one_minus_p) x = -std::expm1(x);
}

void AddressWeightsBuilder::topk(const double* table, const std::int64_t* flat, const double* log_prob,
                                 std::int64_t K, AddressWeights& out, bool complement) {
  out.slot.assign(flat, flat + K);
  out.p.resize(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k) out.p[static_cast<std::size_t>(k)] = std::exp(log_prob[k]);
  out.one_minus_p.clear();
  if (!complement) return;
  complements(table);
  out.one_minus_p.resize(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k) {
    std::int64_t f = flat[k];
    double s = 0;
    for (int u = 0; u < U_; ++u) {
      s += lc_[static_cast<std::size_t>(u) * dp_ + static_cast<std::size_t>(f % dp_)];
      f /= dp_;
    }
    out.one_minus_p[static_cast<std::size_t>(k)] = -std::expm1(s);
  }
}

void AddressWeightsBuilder::hard(std::int64_t slot, AddressWeights& out) {
  out.slot.assign(1, slot);
  out.p.assign(1, 1.0);
  out.one_minus_p.assign(1, 0.0);
}

std::int64_t hard_address(const Codebook& C, const double* x, int U) {
  const int dp = static_cast<int>(C.cols());
  std::int64_t flat = 0, stride = 1;
  for (int u = 0; u < U; ++u) {
    flat += nearest_code(C, x[2 * u], x[2 * u + 1]) * stride;
    stride *= dp;
  }
  return flat;
}

// ---- memory -----------------------------------------------------------------------------------

GsuMemory::GsuMemory(std::int64_t addresses, int dv, bool dense, double eps)
    : addresses_(addresses), dv_(dv), dense_(dense), eps_(eps) {
  require(dv >= 1, "value dimension {} must be >= 1", dv);
  require(std::isfinite(eps) && eps >= 0, "--eps {} must be a finite number >= 0", eps);
  if (dense) {
    require(static_cast<double>(addresses) * (dv + 1) <= static_cast<double>(kMaxDenseAddresses) * 8,
            "a dense GSU memory of {} slots x {} values is too large; use Top-K writes (sparse storage)", addresses,
            dv + 1);
    m_.assign(static_cast<std::size_t>(addresses), 0.0);
    s_.assign(static_cast<std::size_t>(addresses) * dv, 0.0);
  }
}

std::int64_t GsuMemory::row_of(std::int64_t slot, bool create) {
  if (dense_) return slot;
  auto it = index_.find(slot);
  if (it != index_.end()) return it->second;
  if (!create) return -1;
  const std::int64_t row = static_cast<std::int64_t>(m_.size());
  index_.emplace(slot, row);
  m_.push_back(0.0);
  s_.resize(s_.size() + static_cast<std::size_t>(dv_), 0.0);
  return row;
}

double GsuMemory::mass(std::int64_t slot) const {
  if (dense_) return m_[static_cast<std::size_t>(slot)];
  auto it = index_.find(slot);
  return it == index_.end() ? 0.0 : m_[static_cast<std::size_t>(it->second)];
}

const double* GsuMemory::state(std::int64_t slot) const {
  if (dense_) return m_[static_cast<std::size_t>(slot)] > 0 ? s_.data() + slot * dv_ : nullptr;
  auto it = index_.find(slot);
  return it == index_.end() ? nullptr : s_.data() + it->second * dv_;
}

GsuStep GsuMemory::write(const AddressWeights& ws, const double* v, double gamma, double* lambda) {
  GsuStep st;
  const bool have_c = ws.one_minus_p.size() == ws.size();
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const double w = ws.p[i];
    if (!(w > 0)) {  // g = 1, nothing written
      if (lambda) lambda[i] = 0;
      continue;
    }
    const double omw = have_c ? ws.one_minus_p[i] : 1.0 - w;
    const std::int64_t row = row_of(ws.slot[i], true);
    double& m = m_[static_cast<std::size_t>(row)];
    m = gsu_gate(w, omw, gamma) * m + w;
    const double lam = w / (m + eps_);  // m ≥ w > 0: λ ∈ (0, 1]
    double* s = s_.data() + row * dv_;
    for (int c = 0; c < dv_; ++c) s[c] += lam * (v[c] - s[c]);
    if (lambda) lambda[i] = lam;
    st.lambda_min = std::min(st.lambda_min, lam);
    st.lambda_max = std::max(st.lambda_max, lam);
  }
  return st;
}

std::int64_t GsuMemory::find_row(std::int64_t slot) const {
  if (dense_) return slot;
  auto it = index_.find(slot);
  return it == index_.end() ? -1 : it->second;
}

double GsuMemory::peek(const AddressWeights& rs, Readout readout, double* out) const {
  std::fill(out, out + dv_, 0.0);
  double den = 0;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const std::int64_t row = find_row(rs.slot[i]);
    if (row < 0) continue;
    const double m = m_[static_cast<std::size_t>(row)];
    if (!(m > 0)) continue;
    const double r = rs.p[i];
    const double c = readout == Readout::standard ? r : r * m;
    const double* s = s_.data() + row * dv_;
    for (int j = 0; j < dv_; ++j) out[j] += c * s[j];
    den += r * m;
  }
  if (!(den > 0)) {
    std::fill(out, out + dv_, 0.0);
    return 0.0;
  }
  if (readout == Readout::mass) {
    const double inv = 1.0 / (den + eps_);
    for (int j = 0; j < dv_; ++j) out[j] *= inv;
  }
  return den;
}

double GsuMemory::read(const AddressWeights& rs, Readout readout, double* out) {
  const double den = peek(rs, readout, out);
  if (!(den > 0)) ++empty_reads_;
  return den;
}

Eigen::MatrixXd induced_weights(std::int64_t addresses, bool dense, const std::vector<AddressWeights>& writes,
                                const std::vector<AddressWeights>& reads, Readout readout, double gamma, double eps,
                                bool causal, std::int64_t* empty_reads) {
  const auto T = static_cast<Eigen::Index>(writes.size());
  require(T >= 1, "induced weights need at least one write");
  require(!causal || static_cast<Eigen::Index>(reads.size()) == T, "causal induced weights need one read per write");
  GsuMemory mem(addresses, static_cast<int>(T), dense, eps);
  std::vector<double> e(static_cast<std::size_t>(T), 0.0), row(static_cast<std::size_t>(T));
  Eigen::MatrixXd alpha = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(reads.size()), T);
  for (Eigen::Index s = 0; s < T; ++s) {
    e[static_cast<std::size_t>(s)] = 1.0;
    mem.write(writes[static_cast<std::size_t>(s)], e.data(), gamma);
    e[static_cast<std::size_t>(s)] = 0.0;
    if (causal) {
      mem.read(reads[static_cast<std::size_t>(s)], readout, row.data());
      for (Eigen::Index j = 0; j <= s; ++j) alpha(s, j) = row[static_cast<std::size_t>(j)];
    }
  }
  if (!causal)
    for (Eigen::Index i = 0; i < alpha.rows(); ++i) {
      mem.read(reads[static_cast<std::size_t>(i)], readout, row.data());
      for (Eigen::Index j = 0; j < T; ++j) alpha(i, j) = row[static_cast<std::size_t>(j)];
    }
  if (empty_reads) *empty_reads = mem.empty_reads();
  return alpha;
}

}  // namespace memcap::ramnet

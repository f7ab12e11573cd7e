// Feature maps for causal KATA attention: parsing, packed features and closed-form kernels.
// The closed forms are the ones of spec kata.md §2.7; tests check them against <psi(q), psi(k)>.
#include "kata/attention_features.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/error.hpp"

namespace memcap::kata {
namespace {

double parse_number(const std::string& s, const std::string& spec) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    throw UserError(fmt::format("feature map '{}': '{}' is not a number", spec, s));
  return v;
}

int parse_groups(const std::string& digits, const std::string& spec) {
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
    throw UserError(fmt::format("feature map '{}': expected a group count after m/sigma (e.g. m2, sigma4)", spec));
  const int g = std::atoi(digits.c_str());
  if (g < 1 || g > 64) throw UserError(fmt::format("feature map '{}': group count must be in 1..64", spec));
  return g;
}

}  // namespace

void packed_pair(int m, int l, int* i, int* j) {
  if (l < m) {
    *i = *j = l;
    return;
  }
  int r = l - m;
  int row = 0;
  while (r >= m - 1 - row) {
    r -= m - 1 - row;
    ++row;
  }
  *i = row;
  *j = row + 1 + r;
}

AttentionMap AttentionMap::parse(const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string head = spec.substr(0, colon);
  const std::string opts = colon == std::string::npos ? "" : spec.substr(colon + 1);
  AttentionMap m;
  m.eps = 0.0;
  m.scale = 1.0;
  m.groups = 1;
  if (head == "linear") {
    m.kind = AttentionMapKind::linear;
  } else if (head == "orthant") {
    m.kind = AttentionMapKind::orthant;
    m.eps = 1e-6;
  } else if (head == "lorentz") {
    m.kind = AttentionMapKind::lorentz;
  } else if (head.rfind("sigma", 0) == 0) {
    m.kind = AttentionMapKind::psd_sum;
    m.groups = parse_groups(head.substr(5), spec);
    if (m.groups == 4) m.scale = 0.25;
  } else if (head.rfind("m", 0) == 0) {
    m.kind = AttentionMapKind::psd_block;
    m.groups = parse_groups(head.substr(1), spec);
  } else {
    throw UserError(fmt::format(
        "unknown attention feature map '{}': use linear, orthant, lorentz, m<g> (e.g. m2) or sigma<g> (e.g. sigma4)",
        spec));
  }
  std::size_t pos = 0;
  while (pos < opts.size()) {
    auto comma = opts.find(',', pos);
    if (comma == std::string::npos) comma = opts.size();
    const std::string kv = opts.substr(pos, comma - pos);
    pos = comma + 1;
    const auto eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    const std::string val = eq == std::string::npos ? "" : kv.substr(eq + 1);
    if (key == "eps" && m.kind != AttentionMapKind::linear && m.kind != AttentionMapKind::lorentz) {
      m.eps = parse_number(val, spec);
      if (m.eps < 0) throw UserError(fmt::format("feature map '{}': eps must be >= 0", spec));
    } else if (key == "scale" && m.kind == AttentionMapKind::psd_sum) {
      m.scale = parse_number(val, spec);
      if (!(m.scale > 0)) throw UserError(fmt::format("feature map '{}': scale must be > 0", spec));
    } else {
      throw UserError(fmt::format("feature map '{}': unknown option '{}' (orthant/m<g>: eps=; sigma<g>: eps=, scale=)",
                                  spec, kv));
    }
  }
  return m;
}

std::string AttentionMap::to_string() const {
  switch (kind) {
    case AttentionMapKind::linear: return "linear";
    case AttentionMapKind::lorentz: return "lorentz";
    case AttentionMapKind::orthant: return fmt::format("orthant:eps={}", eps);
    case AttentionMapKind::psd_block: return fmt::format("m{}:eps={}", groups, eps);
    case AttentionMapKind::psd_sum: return fmt::format("sigma{}:eps={},scale={}", groups, eps, scale);
  }
  return "?";
}

int AttentionMap::block_width(int d) const { return is_psd() ? d / groups : d; }

int AttentionMap::n_features(int d) const {
  if (!is_psd()) return d;
  const int m = d / groups;
  const int packed = m * (m + 1) / 2;
  return kind == AttentionMapKind::psd_block ? groups * packed : packed;
}

void AttentionMap::validate(int d) const {
  if (d < 1) throw UserError(fmt::format("attention: d_head must be >= 1 (got {})", d));
  if (is_psd() && d % groups != 0)
    throw UserError(fmt::format("feature map {}: d_head = {} is not divisible by g = {}", to_string(), d, groups));
  if (kind == AttentionMapKind::lorentz && d < 2)
    throw UserError("feature map lorentz needs d_head >= 2 (spatial part x_1..x_{d-1} and one gate coordinate)");
}

void AttentionMap::features(const double* x, int d, double* out) const {
  switch (kind) {
    case AttentionMapKind::linear:
      for (int i = 0; i < d; ++i) out[i] = x[i];
      return;
    case AttentionMapKind::orthant:
      for (int i = 0; i < d; ++i) out[i] = (x[i] > 0 ? x[i] : 0.0) + eps;
      return;
    case AttentionMapKind::lorentz: {
      double n2 = 0;
      for (int i = 0; i < d - 1; ++i) {
        out[i] = x[i];
        n2 += x[i] * x[i];
      }
      out[d - 1] = std::sqrt(n2) * (1.0 + x[d - 1] * x[d - 1]);
      return;
    }
    case AttentionMapKind::psd_block:
    case AttentionMapKind::psd_sum: {
      const int m = d / groups, np = m * (m + 1) / 2;
      const bool sum = kind == AttentionMapKind::psd_sum;
      const double c = sum ? scale : 1.0;
      const int nout = n_features(d);
      for (int f = 0; f < nout; ++f) out[f] = 0.0;
      for (int a = 0; a < groups; ++a) {
        const double* u = x + a * m;
        double* o = out + (sum ? 0 : a * np);
        for (int l = 0; l < np; ++l) {
          int i, j;
          packed_pair(m, l, &i, &j);
          o[l] += c * (i == j ? u[i] * u[i] : std::sqrt(2.0) * u[i] * u[j]);
        }
        if (!sum)
          for (int i = 0; i < m; ++i) o[i] += eps;
      }
      if (sum)
        for (int i = 0; i < m; ++i) out[i] += eps;
      return;
    }
  }
}

double AttentionMap::kernel(const double* q, const double* k, int d) const {
  switch (kind) {
    case AttentionMapKind::linear:
    case AttentionMapKind::orthant:
    case AttentionMapKind::lorentz: {
      std::vector<double> fq(d), fk(d);
      features(q, d, fq.data());
      features(k, d, fk.data());
      double s = 0;
      for (int i = 0; i < d; ++i) s += fq[i] * fk[i];
      return s;
    }
    case AttentionMapKind::psd_block:
    case AttentionMapKind::psd_sum: {
      const int m = d / groups;
      double qq = 0, kk = 0, sq = 0;
      for (int i = 0; i < d; ++i) {
        qq += q[i] * q[i];
        kk += k[i] * k[i];
      }
      if (kind == AttentionMapKind::psd_block) {
        for (int a = 0; a < groups; ++a) {
          double s = 0;
          for (int i = 0; i < m; ++i) s += q[a * m + i] * k[a * m + i];
          sq += s * s;
        }
        return sq + eps * (qq + kk) + eps * eps * m * groups;
      }
      for (int a = 0; a < groups; ++a)
        for (int b = 0; b < groups; ++b) {
          double s = 0;
          for (int i = 0; i < m; ++i) s += q[a * m + i] * k[b * m + i];
          sq += s * s;
        }
      return scale * scale * sq + eps * scale * (qq + kk) + eps * eps * m;
    }
  }
  return 0;
}

}  // namespace memcap::kata

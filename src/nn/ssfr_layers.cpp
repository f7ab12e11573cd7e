// CPU float64 reference of the SSFR block layers (nn/ssfr_layers.hpp). Row-parallel loops own
// whole rows; the scatter-adds into gathered tables run over fixed column blocks in row order, so
// every result is bit-identical for any OpenMP thread count.
#include "nn/ssfr_layers.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace memcap::nn {

void FrozenMlp::validate() const {
  require(d >= 1 && m >= 0, "frozen MLP: bad shape d = {}, m = {}", d, m);
  if (identity()) return;
  const auto md = static_cast<std::size_t>(m * d);
  require(A.size() == md && G.size() == md && B.size() == md, "frozen MLP: A, G, B must hold m·d = {} entries", md);
  require(bias_up.empty() || static_cast<std::int64_t>(bias_up.size()) == m, "frozen MLP: bias_up must have m = {} entries", m);
  require(bias_gate.empty() || static_cast<std::int64_t>(bias_gate.size()) == m,
          "frozen MLP: bias_gate must have m = {} entries", m);
  require(bias_out.empty() || static_cast<std::int64_t>(bias_out.size()) == d,
          "frozen MLP: bias_out must have d = {} entries", d);
  for (const auto* v : {&A, &G, &B, &bias_up, &bias_gate, &bias_out})
    for (double x : *v) require(std::isfinite(x), "frozen MLP: a weight is not finite ({})", x);
}

namespace cpu {

namespace {
constexpr std::int64_t kParallelElems = 1 << 16;  // below this a loop stays on the calling thread
constexpr std::int64_t kColBlock = 16;            // column block of the ordered scatter-adds

// Σ_c x_c² of one row (the norms' forward).
double row_sum_squares(const double* x, std::int64_t C) {
  double ss = 0;
  for (std::int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
  return ss;
}

// Σ_c x_c² and Σ_c x_c·dy_c of one row, in one pass (the norms' backward).
void row_sum_squares_dot(const double* x, const double* dy, std::int64_t C, double& ss, double& dot) {
  ss = 0;
  dot = 0;
  for (std::int64_t c = 0; c < C; ++c) {
    ss += x[c] * x[c];
    dot += x[c] * dy[c];
  }
}
}  // namespace

void rmsnorm_forward(double* out, const double* inp, std::int64_t N, std::int64_t C, double eps) {
  MEMCAP_ASSERT(N >= 0 && C >= 1, "rmsnorm_forward: bad shape");
#pragma omp parallel for schedule(static) if (N * C > kParallelElems)
  for (std::int64_t n = 0; n < N; ++n) {
    const double* x = inp + n * C;
    const double ss = row_sum_squares(x, C);
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    double* y = out + n * C;
    for (std::int64_t c = 0; c < C; ++c) y[c] = x[c] * r;
  }
}

void rmsnorm_backward(double* dinp, const double* dout, const double* inp, std::int64_t N, std::int64_t C,
                      double eps) {
  MEMCAP_ASSERT(N >= 0 && C >= 1, "rmsnorm_backward: bad shape");
#pragma omp parallel for schedule(static) if (N * C > kParallelElems)
  for (std::int64_t n = 0; n < N; ++n) {
    const double* x = inp + n * C;
    const double* dy = dout + n * C;
    double ss, dot;
    row_sum_squares_dot(x, dy, C, ss, dot);
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    // mean(dout ⊙ out) = r · mean(dout ⊙ x)
    const double k = r * r * dot / static_cast<double>(C);
    double* dx = dinp + n * C;
    for (std::int64_t c = 0; c < C; ++c) dx[c] = (dy[c] - x[c] * k) * r;
  }
}

void l2norm_forward(double* out, double* norm, const double* inp, std::int64_t N, std::int64_t C, double eps) {
  MEMCAP_ASSERT(N >= 0 && C >= 1, "l2norm_forward: bad shape");
#pragma omp parallel for schedule(static) if (N * C > kParallelElems)
  for (std::int64_t n = 0; n < N; ++n) {
    const double* x = inp + n * C;
    const double ss = row_sum_squares(x, C);
    const double r = std::sqrt(ss);
    const double s = 1.0 / (r + eps);
    double* y = out + n * C;
    for (std::int64_t c = 0; c < C; ++c) y[c] = x[c] * s;
    if (norm) norm[n] = r;
  }
}

void l2norm_backward(double* dinp, const double* dout, const double* inp, std::int64_t N, std::int64_t C, double eps) {
  MEMCAP_ASSERT(N >= 0 && C >= 1, "l2norm_backward: bad shape");
#pragma omp parallel for schedule(static) if (N * C > kParallelElems)
  for (std::int64_t n = 0; n < N; ++n) {
    const double* x = inp + n * C;
    const double* dy = dout + n * C;
    double ss, dot;
    row_sum_squares_dot(x, dy, C, ss, dot);
    const double r = std::sqrt(ss);
    const double s = 1.0 / (r + eps);
    const double k = r > 0 ? dot / (r * (r + eps) * (r + eps)) : 0.0;
    double* dx = dinp + n * C;
    for (std::int64_t c = 0; c < C; ++c) dx[c] = dy[c] * s - x[c] * k;
  }
}

void attention_query_forward(double* ctx, double* att, const double* q, const double* K, const double* V,
                             const std::int32_t* rows, const std::int32_t* len, std::int64_t N, std::int64_t T,
                             std::int64_t C) {
  MEMCAP_ASSERT(N >= 0 && T >= 1 && C >= 1, "attention_query_forward: bad shape");
  const double scale = 1.0 / std::sqrt(static_cast<double>(C));
#pragma omp parallel for schedule(static) if (N * T * C > kParallelElems)
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t L = len[n];
    MEMCAP_ASSERT(L >= 1 && L <= T, "attention_query_forward: len out of range");
    const double* qn = q + n * C;
    double* a = att + n * T;
    double mx = -INFINITY;
    for (std::int64_t t = 0; t < L; ++t) {
      const double* k = K + static_cast<std::int64_t>(rows[n * T + t]) * C;
      double s = 0;
      for (std::int64_t c = 0; c < C; ++c) s += qn[c] * k[c];
      a[t] = s * scale;
      mx = std::max(mx, a[t]);
    }
    double z = 0;
    for (std::int64_t t = 0; t < L; ++t) {
      a[t] = std::exp(a[t] - mx);
      z += a[t];
    }
    for (std::int64_t t = 0; t < L; ++t) a[t] /= z;
    for (std::int64_t t = L; t < T; ++t) a[t] = 0;
    double* o = ctx + n * C;
    std::fill(o, o + C, 0.0);
    for (std::int64_t t = 0; t < L; ++t) {
      const double* v = V + static_cast<std::int64_t>(rows[n * T + t]) * C;
      for (std::int64_t c = 0; c < C; ++c) o[c] += a[t] * v[c];
    }
  }
}

void attention_query_backward(double* dq, double* dK, double* dV, double* dscores, const double* dctx,
                              const double* att, const double* q, const double* K, const double* V,
                              const std::int32_t* rows, const std::int32_t* len, std::int64_t N, std::int64_t T,
                              std::int64_t C) {
  MEMCAP_ASSERT(N >= 0 && T >= 1 && C >= 1, "attention_query_backward: bad shape");
  const double scale = 1.0 / std::sqrt(static_cast<double>(C));
  // Per row: dα_t = dctx·V_t, ds_t = α_t (dα_t − Σ_u α_u dα_u) (scaled by 1/√C into dscores),
  // dq = Σ_t ds_t K_t.
#pragma omp parallel for schedule(static) if (N * T * C > kParallelElems)
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t L = len[n];
    const double* a = att + n * T;
    const double* g = dctx + n * C;
    double* ds = dscores + n * T;
    double mean = 0;
    for (std::int64_t t = 0; t < L; ++t) {
      const double* v = V + static_cast<std::int64_t>(rows[n * T + t]) * C;
      double s = 0;
      for (std::int64_t c = 0; c < C; ++c) s += g[c] * v[c];
      ds[t] = s;
      mean += a[t] * s;
    }
    for (std::int64_t t = 0; t < L; ++t) ds[t] = a[t] * (ds[t] - mean) * scale;
    for (std::int64_t t = L; t < T; ++t) ds[t] = 0;
    if (dq) {
      double* o = dq + n * C;
      std::fill(o, o + C, 0.0);
      for (std::int64_t t = 0; t < L; ++t) {
        const double* k = K + static_cast<std::int64_t>(rows[n * T + t]) * C;
        for (std::int64_t c = 0; c < C; ++c) o[c] += ds[t] * k[c];
      }
    }
  }
  if (!dK && !dV) return;
  // Scatter-adds in row order; threads own column blocks (a fixed order for every element).
  const std::int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * T * C > kParallelElems && blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t c0 = b * kColBlock, c1 = std::min(C, c0 + kColBlock);
    for (std::int64_t n = 0; n < N; ++n) {
      const std::int64_t L = len[n];
      const double* qn = q + n * C;
      const double* g = dctx + n * C;
      for (std::int64_t t = 0; t < L; ++t) {
        const std::int64_t r = static_cast<std::int64_t>(rows[n * T + t]) * C;
        if (dK) {
          const double s = dscores[n * T + t];
          for (std::int64_t c = c0; c < c1; ++c) dK[r + c] += s * qn[c];
        }
        if (dV) {
          const double w = att[n * T + t];
          for (std::int64_t c = c0; c < c1; ++c) dV[r + c] += w * g[c];
        }
      }
    }
  }
}

void frozen_mlp_forward(double* y, double* a, double* g, double* h, const double* u, const FrozenMlp& mlp,
                        std::int64_t N) {
  const std::int64_t d = mlp.d, m = mlp.m;
  if (mlp.identity()) {
    std::copy(u, u + N * d, y);
    return;
  }
  const double* bu = mlp.bias_up.empty() ? nullptr : mlp.bias_up.data();
  const double* bg = mlp.bias_gate.empty() ? nullptr : mlp.bias_gate.data();
  const double* bo = mlp.bias_out.empty() ? nullptr : mlp.bias_out.data();
  linear_forward(a, u, mlp.A.data(), bu, N, d, m);
  linear_forward(g, u, mlp.G.data(), bg, N, d, m);
  gated_forward(h, a, g, N * m, mlp.gate);
  linear_forward(y, h, mlp.B.data(), bo, N, m, d);
}

void frozen_mlp_backward(double* du, double* da, double* dg, double* tmp, const double* dy, const double* a,
                         const double* g, const FrozenMlp& mlp, std::int64_t N) {
  const std::int64_t d = mlp.d, m = mlp.m;
  if (mlp.identity()) {
    std::copy(dy, dy + N * d, du);
    return;
  }
  // dh = dy · B (N×m), into da; then da, dg from dh (gated_backward reads dh[i] before writing da[i]).
  linear_backward(da, nullptr, nullptr, dy, nullptr, mlp.B.data(), N, m, d);
  gated_backward(da, dg, da, a, g, N * m, mlp.gate);
  linear_backward(du, nullptr, nullptr, da, nullptr, mlp.A.data(), N, d, m);
  linear_backward(tmp, nullptr, nullptr, dg, nullptr, mlp.G.data(), N, d, m);
  for (std::int64_t i = 0; i < N * d; ++i) du[i] += tmp[i];
}

}  // namespace cpu
}  // namespace memcap::nn

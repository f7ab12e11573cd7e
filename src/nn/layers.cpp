// CPU float64 reference of the training layers (nn/layers.hpp). Every output element is computed
// by exactly one thread in an order fixed by the code (GEMMs as axpy sweeps over the reduction
// index in ascending order; sums over rows in index order), so results are bit-identical for any
// OpenMP thread count. No BLAS here: OpenBLAS splits GEMMs by thread count, which would not be.
#include "nn/layers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace memcap::nn {

const char* to_string(Activation a) {
  switch (a) {
    case Activation::identity: return "identity";
    case Activation::relu: return "relu";
    case Activation::silu: return "silu";
  }
  return "?";
}

const char* to_string(Loss l) { return l == Loss::ce ? "ce" : "mse"; }

Activation parse_activation(const char* s) {
  const std::string v = s ? s : "";
  if (v == "identity") return Activation::identity;
  if (v == "relu") return Activation::relu;
  if (v == "silu") return Activation::silu;
  throw UserError(fmt::format("unknown gate activation '{}': use identity, relu or silu", v));
}

Loss parse_loss(const char* s) {
  const std::string v = s ? s : "";
  if (v == "ce") return Loss::ce;
  if (v == "mse") return Loss::mse;
  throw UserError(fmt::format("unknown loss '{}': use ce (cross-entropy over the value logits) or mse", v));
}

double cosine_lr(double lr_max, double lr_min, std::int64_t t, std::int64_t T) {
  require(T >= 1 && t >= 0 && t <= T, "cosine_lr: need 0 <= t <= T and T >= 1 (got t = {}, T = {})", t, T);
  const double pi = 3.141592653589793238462643;
  return lr_min + 0.5 * (lr_max - lr_min) * (1.0 + std::cos(pi * static_cast<double>(t) / static_cast<double>(T)));
}

namespace cpu {

namespace {

// Fixed tiling (never derived from the thread count).
constexpr std::int64_t kTileRows = 16;
constexpr std::int64_t kTileCols = 256;
constexpr std::int64_t kTileK = 128;
constexpr double kParallelMacs = 1 << 20;   // below this (~1 ms) a GEMM runs on the calling thread
constexpr std::int64_t kParallelElems = 1 << 16;  // likewise for element-wise kernels

// C[M,N] (+)= A·B with A(i,k) = A[i*sai + k*sak] (so Aᵀ is free), B row-major [K,N], C row-major
// [M,N]. Unless `accumulate`, each row of C starts from init_row (length N) or zero. Every C
// element receives its K products in ascending k, whatever the thread count.
void gemm_ordered(double* C, const double* A, std::int64_t sai, std::int64_t sak, const double* B, std::int64_t M,
                  std::int64_t N, std::int64_t K, bool accumulate, const double* init_row) {
  if (M <= 0 || N <= 0) return;
  const std::int64_t tiles_i = (M + kTileRows - 1) / kTileRows;
  const std::int64_t tiles_j = (N + kTileCols - 1) / kTileCols;
  const std::int64_t ntiles = tiles_i * tiles_j;
  const bool par = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) > kParallelMacs &&
                   ntiles > 1;
#pragma omp parallel for schedule(static) if (par)
  for (std::int64_t t = 0; t < ntiles; ++t) {
    const std::int64_t i0 = (t / tiles_j) * kTileRows, j0 = (t % tiles_j) * kTileCols;
    const std::int64_t i1 = std::min(M, i0 + kTileRows), nj = std::min(N, j0 + kTileCols) - j0;
    if (!accumulate)
      for (std::int64_t i = i0; i < i1; ++i) {
        double* c = C + i * N + j0;
        if (init_row)
          std::memcpy(c, init_row + j0, static_cast<std::size_t>(nj) * sizeof(double));
        else
          std::fill(c, c + nj, 0.0);
      }
    for (std::int64_t k0 = 0; k0 < K; k0 += kTileK) {
      const std::int64_t k1 = std::min(K, k0 + kTileK);
      for (std::int64_t i = i0; i < i1; ++i) {
        double* __restrict c = C + i * N + j0;
        const double* a = A + i * sai;
        std::int64_t k = k0;
        for (; k + 4 <= k1; k += 4) {
          const double a0 = a[k * sak], a1 = a[(k + 1) * sak], a2 = a[(k + 2) * sak], a3 = a[(k + 3) * sak];
          const double* __restrict b0 = B + k * N + j0;
          const double* __restrict b1 = b0 + N;
          const double* __restrict b2 = b1 + N;
          const double* __restrict b3 = b2 + N;
          for (std::int64_t j = 0; j < nj; ++j) {
            double x = c[j];
            x += a0 * b0[j];
            x += a1 * b1[j];
            x += a2 * b2[j];
            x += a3 * b3[j];
            c[j] = x;
          }
        }
        for (; k < k1; ++k) {
          const double a0 = a[k * sak];
          const double* __restrict b0 = B + k * N + j0;
          for (std::int64_t j = 0; j < nj; ++j) c[j] += a0 * b0[j];
        }
      }
    }
  }
}

void check_shape(std::int64_t a, std::int64_t b, std::int64_t c, const char* what) {
  require(a >= 0 && b >= 0 && c >= 0, "{}: negative shape ({}, {}, {})", what, a, b, c);
}

inline double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

inline double act_value(double x, Activation act) {
  switch (act) {
    case Activation::identity: return x;
    case Activation::relu: return x > 0 ? x : 0.0;
    case Activation::silu: return x * sigmoid(x);
  }
  return x;
}

// σ'(x); ReLU'(0) = 0 as in PyTorch.
inline double act_deriv(double x, Activation act) {
  switch (act) {
    case Activation::identity: return 1.0;
    case Activation::relu: return x > 0 ? 1.0 : 0.0;
    case Activation::silu: {
      const double s = sigmoid(x);
      return s * (1.0 + x * (1.0 - s));
    }
  }
  return 1.0;
}

// Row n of a logit matrix: (max, logsumexp), summed in index order.
inline void row_lse(const double* x, std::int64_t P, double& mx, double& lse) {
  mx = x[0];
  for (std::int64_t j = 1; j < P; ++j)
    if (x[j] > mx) mx = x[j];
  double s = 0;
  for (std::int64_t j = 0; j < P; ++j) s += std::exp(x[j] - mx);
  lse = mx + std::log(s);
}

void check_targets(const std::int32_t* targets, std::int64_t N, std::int64_t P) {
  for (std::int64_t n = 0; n < N; ++n)
    require(targets[n] >= 0 && targets[n] < P, "cross-entropy target {} of row {} is outside [0, {})", targets[n], n,
            P);
}

}  // namespace

void linear_forward(double* out, const double* inp, const double* W, const double* bias, std::int64_t N,
                    std::int64_t C, std::int64_t OC) {
  check_shape(N, C, OC, "linear_forward");
  // Wᵀ (C x OC) so that every output row is an ordered sum of rows of Wᵀ (vectorisable axpys).
  thread_local std::vector<double> wt;
  wt.resize(static_cast<std::size_t>(C * OC));
  for (std::int64_t o = 0; o < OC; ++o)
    for (std::int64_t c = 0; c < C; ++c) wt[static_cast<std::size_t>(c * OC + o)] = W[o * C + c];
  gemm_ordered(out, inp, C, 1, wt.data(), N, OC, C, false, bias);
}

void linear_backward(double* dinp, double* dW, double* dbias, const double* dout, const double* inp,
                     const double* W, std::int64_t N, std::int64_t C, std::int64_t OC) {
  check_shape(N, C, OC, "linear_backward");
  if (dinp) gemm_ordered(dinp, dout, OC, 1, W, N, C, OC, false, nullptr);  // dout · W
  if (dW) gemm_ordered(dW, dout, 1, OC, inp, OC, C, N, true, nullptr);     // doutᵀ · inp, accumulated
  if (dbias) {
    // Column sums of dout in row order; threads own fixed column chunks.
    const std::int64_t chunks = (OC + kTileCols - 1) / kTileCols;
    const bool par = N * OC > kParallelElems && chunks > 1;
#pragma omp parallel for schedule(static) if (par)
    for (std::int64_t ch = 0; ch < chunks; ++ch) {
      const std::int64_t o0 = ch * kTileCols, o1 = std::min(OC, o0 + kTileCols);
      for (std::int64_t n = 0; n < N; ++n) {
        const double* __restrict r = dout + n * OC;
        for (std::int64_t o = o0; o < o1; ++o) dbias[o] += r[o];
      }
    }
  }
}

void activation_forward(double* y, const double* x, std::int64_t n, Activation act) {
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (std::int64_t i = 0; i < n; ++i) y[i] = act_value(x[i], act);
}

void activation_backward(double* dx, const double* dy, const double* x, std::int64_t n, Activation act) {
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (std::int64_t i = 0; i < n; ++i) dx[i] = dy[i] * act_deriv(x[i], act);
}

void gated_forward(double* h, const double* a, const double* g, std::int64_t n, Activation act) {
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (std::int64_t i = 0; i < n; ++i) h[i] = a[i] * act_value(g[i], act);
}

void gated_backward(double* da, double* dg, const double* dh, const double* a, const double* g, std::int64_t n,
                    Activation act) {
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = dh[i];
    da[i] = d * act_value(g[i], act);
    dg[i] = d * a[i] * act_deriv(g[i], act);
  }
}

double cross_entropy_forward(double* losses, const double* logits, const std::int32_t* targets, std::int64_t N,
                             std::int64_t P, std::uint8_t* correct) {
  require(N >= 1 && P >= 1, "cross-entropy needs N >= 1 rows and P >= 1 classes (got {} x {})", N, P);
  check_targets(targets, N, P);
  thread_local std::vector<double> own;
  if (!losses) {
    own.resize(static_cast<std::size_t>(N));
    losses = own.data();
  }
#pragma omp parallel for schedule(static) if (N * P > kParallelElems)
  for (std::int64_t n = 0; n < N; ++n) {
    const double* x = logits + n * P;
    double mx, lse;
    row_lse(x, P, mx, lse);
    losses[n] = lse - x[targets[n]];
    if (correct) {
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < P; ++j)
        if (x[j] > x[best]) best = j;
      correct[n] = best == targets[n] ? 1 : 0;
    }
  }
  double total = 0;
  for (std::int64_t n = 0; n < N; ++n) total += losses[n];
  return total / static_cast<double>(N);
}

void cross_entropy_backward(double* dlogits, const double* logits, const std::int32_t* targets, std::int64_t N,
                            std::int64_t P, double dloss) {
  require(N >= 1 && P >= 1, "cross-entropy needs N >= 1 rows and P >= 1 classes (got {} x {})", N, P);
  check_targets(targets, N, P);
  const double scale = dloss / static_cast<double>(N);
#pragma omp parallel for schedule(static) if (N * P > kParallelElems)
  for (std::int64_t n = 0; n < N; ++n) {
    const double* x = logits + n * P;
    double* dx = dlogits + n * P;
    double mx, lse;
    row_lse(x, P, mx, lse);
    for (std::int64_t j = 0; j < P; ++j) dx[j] = std::exp(x[j] - lse) * scale;
    dx[targets[n]] -= scale;
  }
}

double mse_forward(const double* y, const double* t, std::int64_t N, std::int64_t D) {
  require(N >= 1 && D >= 1, "MSE needs a non-empty N x D output (got {} x {})", N, D);
  double s = 0;  // serial: O(N·D) and order-fixed
  for (std::int64_t i = 0; i < N * D; ++i) {
    const double e = y[i] - t[i];
    s += e * e;
  }
  return s / static_cast<double>(N * D);
}

void mse_backward(double* dy, const double* y, const double* t, std::int64_t N, std::int64_t D, double dloss) {
  require(N >= 1 && D >= 1, "MSE needs a non-empty N x D output (got {} x {})", N, D);
  const double scale = 2.0 * dloss / static_cast<double>(N * D);
  const std::int64_t n = N * D;
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (std::int64_t i = 0; i < n; ++i) dy[i] = (y[i] - t[i]) * scale;
}

void adam_update(double* p, const double* g, double* m, double* v, std::int64_t n, double lr, double beta1,
                 double beta2, double eps, double weight_decay, std::int64_t t, bool adamw) {
  require(t >= 1, "adam_update: step t must be >= 1 (got {})", t);
  // PyTorch torch.optim.Adam/AdamW (single-tensor path), element by element:
  //   Adam: g += wd p;  AdamW: p *= 1 - lr wd;  m = lerp(m, g, 1-β1);  v = β2 v + (1-β2) g g;
  //   p -= (lr / (1-β1^t)) · m / (√v / √(1-β2^t) + eps).
  const double w1 = 1.0 - beta1, w2 = 1.0 - beta2;
  const double step = lr / (1.0 - std::pow(beta1, static_cast<double>(t)));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t)));
  const double decay = 1.0 - lr * weight_decay;
#pragma omp parallel for schedule(static) if (n > kParallelElems)
  for (std::int64_t i = 0; i < n; ++i) {
    double gi = g[i];
    if (adamw) {
      if (weight_decay != 0) p[i] *= decay;
    } else if (weight_decay != 0) {
      gi += weight_decay * p[i];
    }
    const double mi = w1 < 0.5 ? m[i] + w1 * (gi - m[i]) : gi - (gi - m[i]) * (1.0 - w1);  // torch lerp
    const double vi = v[i] * beta2 + w2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= step * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
  }
}

}  // namespace cpu

}  // namespace memcap::nn

// "gemm" variant of the MQAR mixer cores (kata_mqar_gemm.cuh): scores in memory, products on cuBLAS.
// Per group of sequences (as many as the workspace holds) and per head / score block, one strided-batched
// GEMM over the group's sequences; row kernels (one warp per query row, fixed shuffle order, no atomics) apply
// the causal mask, the kernel or exp, the normalisation and their backward. CPU twins: softmax_head_* and
// kata_head_* / cone_kernel_vjp in src/kata/mqar_mixers.cpp.
//
// Column-major view used for every product: head (b, h) of a row-major [B·T, ld] tensor X is the dh × T
// column-major matrix at X + b·T·ld + h·dh with leading dimension ld; a row-major T × T score matrix S[t][s]
// is the column-major T × T matrix S_cm(s, t). So S = Q Kᵀ is S_cm = K_cmᵀ Q_cm, O = P V is O_cm = V_cm P_cm,
// dV = Pᵀ dO is dV_cm = dO_cm P_cmᵀ, dQ = dS K is dQ_cm = K_cm dS_cm, dK = dSᵀ Q is dK_cm = Q_cm dS_cmᵀ.
#include <algorithm>
#include <string>
#include <type_traits>

#include "cuda_check.cuh"
#include "smem_limit.cuh"
#include "kata_mqar_common.cuh"
#include "kata_mqar_gemm.cuh"
#include "kata_mqar_rows.cuh"
#include "kata_mqar_workspace.cuh"
#include "nn_layers.cuh"

namespace memcap::kata::mqar::cuda {
namespace {

using detail::ex;
using detail::lg;
using detail::neg_inf;
namespace nc = ::memcap::nn::cuda;

using namespace rowk;  // warp_row, warp_sum, warp_max, warp_dot, Rows, row_blocks, kWarps
using wsp::capped;
using wsp::group_size;

// ---------------------------------------------------------------------------------------------- softmax rows

// Forward: S (scores q·k, unscaled) → P = exp(scale·S − lse) on s <= t, 0 above; lse kept.
template <class T>
__global__ void softmax_rows_forward(T* __restrict__ S, T* __restrict__ lse, Rows g, T scale) {
  const std::int64_t r = warp_row();
  if (r >= g.count()) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t T_ = g.T, t = r % T_;
  T* x = S + r * T_;
  T mx = neg_inf<T>();
  for (std::int64_t s = lane; s <= t; s += 32) mx = max(mx, x[s] * scale);
  mx = warp_max(mx);
  T z = T(0);
  for (std::int64_t s = lane; s <= t; s += 32) z += ex(x[s] * scale - mx);
  z = warp_sum(z);
  const T l = mx + lg(z);
  for (std::int64_t s = lane; s < T_; s += 32) x[s] = s <= t ? ex(x[s] * scale - l) : T(0);
  if (lane == 0) lse[r] = l;
}

// Backward, first pass: S → P from the saved lse.
template <class T>
__global__ void softmax_rows_probs(T* __restrict__ S, const T* __restrict__ lse, Rows g, T scale) {
  const std::int64_t r = warp_row();
  if (r >= g.count()) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t T_ = g.T, t = r % T_;
  T* x = S + r * T_;
  const T l = lse[r];
  for (std::int64_t s = lane; s < T_; s += 32) x[s] = s <= t ? ex(x[s] * scale - l) : T(0);
}

// Backward, second pass: dP → dS = P ⊙ (dP − δ_t), δ_t = dO_t · O_t.
template <class T>
__global__ void softmax_rows_backward(T* __restrict__ dP, const T* __restrict__ P, const T* __restrict__ dout,
                                      const T* __restrict__ o, std::int64_t ldo, Rows g) {
  const std::int64_t r = warp_row();
  if (r >= g.count()) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t T_ = g.T, t = r % T_;
  const std::int64_t hr = g.head_row(r, ldo);
  const T delta = warp_dot(dout + hr, o + hr, static_cast<int>(g.dh));
  T* x = dP + r * T_;
  const T* p = P + r * T_;
  for (std::int64_t s = lane; s < T_; s += 32) x[s] = s <= t ? p[s] * (x[s] - delta) : T(0);
}

// ---------------------------------------------------------------------------------------------- KATA rows

// Closed-form constants of M_g / Σ_g (spec §2.7), as psd_form on the CPU.
template <class T>
struct Psd {
  int pairs = 1;
  T c2 = 1, ec = 0, cst = 0;
};

// ‖x‖² of every head row of the group (one warp per row).
template <class T>
__global__ void head_sqnorms(T* __restrict__ n, const T* __restrict__ x, std::int64_t ld, Rows g) {
  const std::int64_t r = warp_row();
  if (r >= g.count()) return;
  const T* row = x + g.head_row(r, ld);
  const T v = warp_dot(row, row, static_cast<int>(g.dh));
  if (threadIdx.x % 32 == 0) n[r] = v;
}

// Block products G[0..pairs) (pair stride `ps`) → out = A / den on s <= t (0 above), with
// A = c2 Σ_p G_p² + ec (nq_t + nk_s) + cst; out may be G itself (each element is read before it is written,
// by the same thread). den is computed and stored (forward: den_in == nullptr) or read (backward).
template <class T>
__global__ void kata_rows_probs(T* out, const T* G, std::int64_t ps, T* __restrict__ den_out,
                                const T* __restrict__ den_in, const T* __restrict__ nq, const T* __restrict__ nk,
                                Rows g, Psd<T> c) {
  const std::int64_t r = warp_row();
  if (r >= g.count()) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t T_ = g.T, t = r % T_, base = r - t;  // base: row index of (b, h, 0)
  const T* x = G + r * T_;
  T* y = out + r * T_;
  const T q2 = nq[r];
  T sum = T(0);
  for (std::int64_t s = lane; s <= t; s += 32) {
    T a = T(0);
    for (int p = 0; p < c.pairs; ++p) {
      const T v = x[p * ps + s];
      a += v * v;
    }
    a = c.c2 * a + c.ec * (q2 + nk[base + s]) + c.cst;
    y[s] = a;
    sum += a;
  }
  T d;
  if (den_in) {
    d = den_in[r];
  } else {
    d = warp_sum(sum);
    if (lane == 0) den_out[r] = d;
  }
  const T inv = d != T(0) ? T(1) / d : T(0);
  for (std::int64_t s = lane; s < T_; s += 32) y[s] = s <= t ? y[s] * inv : T(0);
}

// Backward: dP (= dO_t · v_s) → dA = (dP − δ_t) / den_t on s <= t (0 above, and 0 on a zero-den row), stored in
// place; every block product G_p (recomputed) → 2 c2 dA ⊙ G_p in place; rq_t = 2 ec Σ_s dA_ts.
template <class T>
__global__ void kata_rows_backward(T* __restrict__ dP, T* __restrict__ G, std::int64_t ps, T* __restrict__ rq,
                                   const T* __restrict__ den, const T* __restrict__ dout, const T* __restrict__ o,
                                   std::int64_t ldo, Rows g, Psd<T> c) {
  const std::int64_t r = warp_row();
  if (r >= g.count()) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t T_ = g.T, t = r % T_;
  const std::int64_t hr = g.head_row(r, ldo);
  const T delta = warp_dot(dout + hr, o + hr, static_cast<int>(g.dh));
  const T d = den[r];
  const T inv = d != T(0) ? T(1) / d : T(0);
  T* x = dP + r * T_;
  T* gp = G + r * T_;
  T sum = T(0);
  for (std::int64_t s = lane; s < T_; s += 32) {
    const T a = s <= t ? (x[s] - delta) * inv : T(0);
    x[s] = a;
    sum += a;
    for (int p = 0; p < c.pairs; ++p) gp[p * ps + s] *= T(2) * c.c2 * a;
  }
  sum = warp_sum(sum);
  if (lane == 0) rq[r] = T(2) * c.ec * sum;
}

// rk_s = 2 ec Σ_{t >= s} dA_ts (one thread per key row s; consecutive threads read consecutive columns).
template <class T>
__global__ void kata_cols_sum(T* __restrict__ rk, const T* __restrict__ dA, Rows g, T two_ec) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= g.nb * g.H * g.T) return;
  const std::int64_t T_ = g.T, s = r % T_, bh = r / T_;
  const T* a = dA + bh * T_ * T_;
  T sum = T(0);
  for (std::int64_t t = s; t < T_; ++t) sum += a[t * T_ + s];
  rk[r] = two_ec * sum;
}

// dx_row += w_r · x_row for every head row (the ε terms of the PSD kernel).
template <class T>
__global__ void add_scaled_rows(T* __restrict__ dx, std::int64_t lddx, const T* __restrict__ w, const T* __restrict__ x,
                                std::int64_t ldx, Rows g) {
  const std::int64_t r = warp_row();
  if (r >= g.count()) return;
  const T wr = w[r];
  T* d = dx + g.head_row(r, lddx);
  const T* xr = x + g.head_row(r, ldx);
  for (int j = threadIdx.x % 32; j < g.dh; j += 32) d[j] += wr * xr[j];
}

// ---------------------------------------------------------------------------------------------- host helpers

void check_shape(const HeadShape& s, const char* what) {
  if (s.B < 0 || s.T < 0 || s.H < 1 || s.dh < 1)
    cuda_detail::throw_user_error(std::string(what) + ": head shape needs H >= 1 and d_head >= 1 (got H = " +
                                  std::to_string(s.H) + ", d_head = " + std::to_string(s.dh) + ")");
}

template <class T>
Psd<T> psd_of(const MapParams& map) {
  const bool sum = map.kind == MapKind::SumPsd;
  const double c = sum ? map.scale : 1.0, m = static_cast<double>(map.d / map.g);
  Psd<T> p;
  p.pairs = sum ? map.g * map.g : map.g;
  p.c2 = static_cast<T>(c * c);
  p.ec = static_cast<T>(map.eps * c);
  p.cst = static_cast<T>(map.eps * map.eps * m * (sum ? 1.0 : static_cast<double>(map.g)));
  return p;
}

// One strided-batched product over the nb sequences of a group (column-major, strides in elements).
template <class T>
void gemm(cublasHandle_t h, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* A,
          std::int64_t lda, std::int64_t sa, const T* B, std::int64_t ldb, std::int64_t sb, T beta, T* C,
          std::int64_t ldc, std::int64_t sc, std::int64_t batch) {
  nc::gemm_cm_strided<T>(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, alpha, A, lda, sa,
                         B, ldb, sb, beta, C, ldc, sc, batch);
}

}  // namespace

// ---------------------------------------------------------------------------------------------- softmax

std::size_t softmax_gemm_workspace_bytes(const HeadShape& s, std::size_t elem) {
  const std::size_t per_seq = 2 * static_cast<std::size_t>(s.H) * s.T * s.T * elem;  // P and dS
  return per_seq == 0 ? 0 : capped(s, per_seq);
}

template <class T>
void softmax_heads_forward_gemm(T* o, std::int64_t ldo, T* lse, const T* q, const T* k, const T* v,
                                std::int64_t ldqkv, const HeadShape& s, double scale, cublasHandle_t h, void* ws,
                                std::size_t ws_bytes, cudaStream_t stream) {
  check_shape(s, "softmax_heads_forward_gemm");
  if (s.B == 0 || s.T == 0) return;
  nc::check_handle_stream(h, stream);
  const std::int64_t TT = s.T * s.T;
  const std::int64_t nb_max =
      group_size(s, static_cast<std::size_t>(s.H * TT) * sizeof(T), ws_bytes, "softmax_heads_forward_gemm");
  T* S = static_cast<T*>(ws);
  for (std::int64_t b0 = 0; b0 < s.B; b0 += nb_max) {
    const std::int64_t nb = std::min(nb_max, s.B - b0), seq = s.T * ldqkv, seqo = s.T * ldo;
    const T* qb = q + b0 * seq;
    const T* kb = k + b0 * seq;
    const T* vb = v + b0 * seq;
    for (std::int64_t hh = 0; hh < s.H; ++hh) {
      const std::int64_t off = hh * s.dh;
      gemm<T>(h, true, false, s.T, s.T, s.dh, T(1), kb + off, ldqkv, seq, qb + off, ldqkv, seq, T(0), S + hh * TT, s.T,
              s.H * TT, nb);
    }
    const Rows g{nb, s.H, s.T, s.dh};
    softmax_rows_forward<T><<<row_blocks(nb * s.H * s.T), kWarps * 32, 0, stream>>>(S, lse + b0 * s.H * s.T, g,
                                                                                    static_cast<T>(scale));
    MEMCAP_CUDA_CHECK_LAUNCH("softmax_rows_forward");
    for (std::int64_t hh = 0; hh < s.H; ++hh) {
      const std::int64_t off = hh * s.dh;
      gemm<T>(h, false, false, s.dh, s.T, s.T, T(1), vb + off, ldqkv, seq, S + hh * TT, s.T, s.H * TT, T(0),
              o + b0 * seqo + off, ldo, seqo, nb);
    }
  }
}

template <class T>
void softmax_heads_backward_gemm(T* dq, T* dk, T* dv, std::int64_t lddqkv, const T* dout, const T* o,
                                 std::int64_t ldo, const T* q, const T* k, const T* v, std::int64_t ldqkv,
                                 const T* lse, const HeadShape& s, double scale, cublasHandle_t h, void* ws,
                                 std::size_t ws_bytes, cudaStream_t stream) {
  check_shape(s, "softmax_heads_backward_gemm");
  if (s.B == 0 || s.T == 0) return;
  nc::check_handle_stream(h, stream);
  const std::int64_t TT = s.T * s.T;
  const std::int64_t nb_max =
      group_size(s, 2 * static_cast<std::size_t>(s.H * TT) * sizeof(T), ws_bytes, "softmax_heads_backward_gemm");
  const T sc = static_cast<T>(scale);
  for (std::int64_t b0 = 0; b0 < s.B; b0 += nb_max) {
    const std::int64_t nb = std::min(nb_max, s.B - b0), seq = s.T * ldqkv, seqo = s.T * ldo, seqd = s.T * lddqkv;
    T* P = static_cast<T*>(ws);
    T* dS = P + nb * s.H * TT;
    const T* qb = q + b0 * seq;
    const T* kb = k + b0 * seq;
    const T* vb = v + b0 * seq;
    const T* dob = dout + b0 * seqo;
    const T* ob = o + b0 * seqo;
    const Rows g{nb, s.H, s.T, s.dh};
    const unsigned blocks = row_blocks(nb * s.H * s.T);
    for (std::int64_t hh = 0; hh < s.H; ++hh) {
      const std::int64_t off = hh * s.dh;
      gemm<T>(h, true, false, s.T, s.T, s.dh, T(1), kb + off, ldqkv, seq, qb + off, ldqkv, seq, T(0), P + hh * TT, s.T,
              s.H * TT, nb);
      gemm<T>(h, true, false, s.T, s.T, s.dh, T(1), vb + off, ldqkv, seq, dob + off, ldo, seqo, T(0), dS + hh * TT, s.T,
              s.H * TT, nb);
    }
    softmax_rows_probs<T><<<blocks, kWarps * 32, 0, stream>>>(P, lse + b0 * s.H * s.T, g, sc);
    MEMCAP_CUDA_CHECK_LAUNCH("softmax_rows_probs");
    softmax_rows_backward<T><<<blocks, kWarps * 32, 0, stream>>>(dS, P, dob, ob, ldo, g);
    MEMCAP_CUDA_CHECK_LAUNCH("softmax_rows_backward");
    for (std::int64_t hh = 0; hh < s.H; ++hh) {
      const std::int64_t off = hh * s.dh;
      // dV_cm = dO_cm · P_cmᵀ; dQ_cm = scale K_cm · dS_cm; dK_cm = scale Q_cm · dS_cmᵀ
      gemm<T>(h, false, true, s.dh, s.T, s.T, T(1), dob + off, ldo, seqo, P + hh * TT, s.T, s.H * TT, T(0),
              dv + b0 * seqd + off, lddqkv, seqd, nb);
      gemm<T>(h, false, false, s.dh, s.T, s.T, sc, kb + off, ldqkv, seq, dS + hh * TT, s.T, s.H * TT, T(0),
              dq + b0 * seqd + off, lddqkv, seqd, nb);
      gemm<T>(h, false, true, s.dh, s.T, s.T, sc, qb + off, ldqkv, seq, dS + hh * TT, s.T, s.H * TT, T(0),
              dk + b0 * seqd + off, lddqkv, seqd, nb);
    }
  }
}

// ---------------------------------------------------------------------------------------------- KATA (PSD maps)

bool kata_gemm_applies(const MapParams& map, const HeadShape& s) {
  return map.is_psd() && map.g >= 1 && map.d == s.dh && s.dh % map.g == 0;
}

namespace {
// Elements per sequence: block products, P and dA (backward), and 4 per-row vectors (nq, nk, rq, rk).
std::size_t kata_per_seq(const MapParams& map, const HeadShape& s) {
  const std::size_t pairs = map.kind == MapKind::SumPsd ? map.g * map.g : map.g;
  return (pairs + 2) * static_cast<std::size_t>(s.H) * s.T * s.T + 4 * static_cast<std::size_t>(s.H) * s.T;
}
void check_kata(const MapParams& map, const HeadShape& s, const char* what) {
  check_shape(s, what);
  if (!kata_gemm_applies(map, s))
    cuda_detail::throw_user_error(std::string(what) +
                                  ": the gemm variant needs a PSD map (m<g>, sigma<g>) built for this head width "
                                  "(d_head = " + std::to_string(s.dh) + ")");
}

// Block products G_(a,b) = Q_a K_bᵀ of pair p into G + p·ps (per head hh at + hh·TT, per sequence stride H·TT).
template <class T>
void block_products(cublasHandle_t h, T* G, std::int64_t ps, const MapParams& map, const T* q, const T* k,
                    std::int64_t ld, const HeadShape& s, std::int64_t nb) {
  const bool sum = map.kind == MapKind::SumPsd;
  const std::int64_t gg = map.g, m = s.dh / gg, TT = s.T * s.T, seq = s.T * ld;
  for (std::int64_t hh = 0; hh < s.H; ++hh)
    for (std::int64_t a = 0, p = 0; a < gg; ++a)
      for (std::int64_t b = 0; b < gg; ++b) {
        if (!sum && a != b) continue;
        gemm<T>(h, true, false, s.T, s.T, m, T(1), k + hh * s.dh + b * m, ld, seq, q + hh * s.dh + a * m, ld, seq, T(0),
                G + p * ps + hh * TT, s.T, s.H * TT, nb);
        ++p;
      }
}
// ‖q‖², ‖k‖² of every head row of the group (the ε terms of the PSD kernel).
template <class T>
void qk_sqnorms(T* nq, T* nk, const T* q, const T* k, std::int64_t ld, const Rows& g, cudaStream_t stream) {
  const unsigned blocks = row_blocks(g.nb * g.H * g.T);
  head_sqnorms<T><<<blocks, kWarps * 32, 0, stream>>>(nq, q, ld, g);
  MEMCAP_CUDA_CHECK_LAUNCH("head_sqnorms");
  head_sqnorms<T><<<blocks, kWarps * 32, 0, stream>>>(nk, k, ld, g);
  MEMCAP_CUDA_CHECK_LAUNCH("head_sqnorms");
}
}  // namespace

std::size_t kata_gemm_workspace_bytes(const MapParams& map, const HeadShape& s, std::size_t elem) {
  if (!kata_gemm_applies(map, s) || s.T == 0) return 0;
  return capped(s, kata_per_seq(map, s) * elem);
}

template <class T>
void kata_heads_forward_gemm(T* o, std::int64_t ldo, T* den, const MapParams& map, const T* q, const T* k,
                             const T* v, std::int64_t ldqkv, const HeadShape& s, cublasHandle_t h, void* ws,
                             std::size_t ws_bytes, cudaStream_t stream) {
  check_kata(map, s, "kata_heads_forward_gemm");
  if (s.B == 0 || s.T == 0) return;
  nc::check_handle_stream(h, stream);
  const Psd<T> c = psd_of<T>(map);
  const std::int64_t TT = s.T * s.T;
  const std::int64_t nb_max = group_size(s, kata_per_seq(map, s) * sizeof(T), ws_bytes, "kata_heads_forward_gemm");
  for (std::int64_t b0 = 0; b0 < s.B; b0 += nb_max) {
    const std::int64_t nb = std::min(nb_max, s.B - b0), seq = s.T * ldqkv, seqo = s.T * ldo;
    const std::int64_t ps = nb * s.H * TT, rows = nb * s.H * s.T;
    T* G = static_cast<T*>(ws);
    T* nq = G + c.pairs * ps;
    T* nk = nq + rows;
    const T* qb = q + b0 * seq;
    const T* kb = k + b0 * seq;
    const Rows g{nb, s.H, s.T, s.dh};
    const unsigned blocks = row_blocks(rows);
    block_products<T>(h, G, ps, map, qb, kb, ldqkv, s, nb);
    qk_sqnorms<T>(nq, nk, qb, kb, ldqkv, g, stream);
    kata_rows_probs<T><<<blocks, kWarps * 32, 0, stream>>>(G, G, ps, den + b0 * s.H * s.T, nullptr, nq, nk, g, c);
    MEMCAP_CUDA_CHECK_LAUNCH("kata_rows_probs");
    for (std::int64_t hh = 0; hh < s.H; ++hh) {
      const std::int64_t off = hh * s.dh;
      gemm<T>(h, false, false, s.dh, s.T, s.T, T(1), v + b0 * seq + off, ldqkv, seq, G + hh * TT, s.T, s.H * TT, T(0),
              o + b0 * seqo + off, ldo, seqo, nb);
    }
  }
}

template <class T>
void kata_heads_backward_gemm(T* dq, T* dk, T* dv, std::int64_t lddqkv, const T* dout, const T* o, std::int64_t ldo,
                              const MapParams& map, const T* q, const T* k, const T* v, std::int64_t ldqkv,
                              const T* den, const HeadShape& s, cublasHandle_t h, void* ws, std::size_t ws_bytes,
                              cudaStream_t stream) {
  check_kata(map, s, "kata_heads_backward_gemm");
  if (s.B == 0 || s.T == 0) return;
  nc::check_handle_stream(h, stream);
  const Psd<T> c = psd_of<T>(map);
  const bool sum = map.kind == MapKind::SumPsd;
  const std::int64_t TT = s.T * s.T, gg = map.g, m = s.dh / gg;
  const std::int64_t nb_max = group_size(s, kata_per_seq(map, s) * sizeof(T), ws_bytes, "kata_heads_backward_gemm");
  for (std::int64_t b0 = 0; b0 < s.B; b0 += nb_max) {
    const std::int64_t nb = std::min(nb_max, s.B - b0), seq = s.T * ldqkv, seqo = s.T * ldo, seqd = s.T * lddqkv;
    const std::int64_t ps = nb * s.H * TT, rows = nb * s.H * s.T;
    T* G = static_cast<T*>(ws);       // pairs block products → 2 c2 dA ⊙ G_p
    T* P = G + c.pairs * ps;          // A / den
    T* dA = P + ps;                   // dO vᵀ → dA
    T* nq = dA + ps;
    T* nk = nq + rows;
    T* rq = nk + rows;
    T* rk = rq + rows;
    const T* qb = q + b0 * seq;
    const T* kb = k + b0 * seq;
    const T* vb = v + b0 * seq;
    const T* dob = dout + b0 * seqo;
    const T* ob = o + b0 * seqo;
    const T* denb = den + b0 * s.H * s.T;
    const Rows g{nb, s.H, s.T, s.dh};
    const unsigned blocks = row_blocks(rows);
    block_products<T>(h, G, ps, map, qb, kb, ldqkv, s, nb);
    qk_sqnorms<T>(nq, nk, qb, kb, ldqkv, g, stream);
    kata_rows_probs<T><<<blocks, kWarps * 32, 0, stream>>>(P, G, ps, nullptr, denb, nq, nk, g, c);
    MEMCAP_CUDA_CHECK_LAUNCH("kata_rows_probs");
    for (std::int64_t hh = 0; hh < s.H; ++hh) {
      const std::int64_t off = hh * s.dh;
      gemm<T>(h, false, true, s.dh, s.T, s.T, T(1), dob + off, ldo, seqo, P + hh * TT, s.T, s.H * TT, T(0),
              dv + b0 * seqd + off, lddqkv, seqd, nb);
      gemm<T>(h, true, false, s.T, s.T, s.dh, T(1), vb + off, ldqkv, seq, dob + off, ldo, seqo, T(0), dA + hh * TT, s.T,
              s.H * TT, nb);
    }
    kata_rows_backward<T><<<blocks, kWarps * 32, 0, stream>>>(dA, G, ps, rq, denb, dob, ob, ldo, g, c);
    MEMCAP_CUDA_CHECK_LAUNCH("kata_rows_backward");
    // dQ_a = Σ_b dG_ab K_b, dK_b = Σ_a dG_abᵀ Q_a (first contribution overwrites).
    for (std::int64_t hh = 0; hh < s.H; ++hh) {
      const std::int64_t off = hh * s.dh;
      for (std::int64_t a = 0, p = 0; a < gg; ++a)
        for (std::int64_t b = 0; b < gg; ++b) {
          if (!sum && a != b) continue;
          const T* dG = G + p * ps + hh * TT;
          gemm<T>(h, false, false, m, s.T, s.T, T(1), kb + off + b * m, ldqkv, seq, dG, s.T, s.H * TT,
                  T(b == 0 || !sum ? 0 : 1), dq + b0 * seqd + off + a * m, lddqkv, seqd, nb);
          gemm<T>(h, false, true, m, s.T, s.T, T(1), qb + off + a * m, ldqkv, seq, dG, s.T, s.H * TT,
                  T(a == 0 || !sum ? 0 : 1), dk + b0 * seqd + off + b * m, lddqkv, seqd, nb);
          ++p;
        }
    }
    if (c.ec != T(0)) {
      kata_cols_sum<T><<<static_cast<unsigned>((rows + 255) / 256), 256, 0, stream>>>(rk, dA, g, T(2) * c.ec);
      MEMCAP_CUDA_CHECK_LAUNCH("kata_cols_sum");
      add_scaled_rows<T><<<blocks, kWarps * 32, 0, stream>>>(dq + b0 * seqd, lddqkv, rq, qb, ldqkv, g);
      MEMCAP_CUDA_CHECK_LAUNCH("add_scaled_rows");
      add_scaled_rows<T><<<blocks, kWarps * 32, 0, stream>>>(dk + b0 * seqd, lddqkv, rk, kb, ldqkv, g);
      MEMCAP_CUDA_CHECK_LAUNCH("add_scaled_rows");
    }
  }
}

// ---------------------------------------------------------------------------------------------- delta rule

// The delta rule of one whole sequence in kernel space (S_0 = 0, one chunk of length T; spec §2.11.4 Eq. 28,
// §5.4 with Ψ never formed): A_kk = κ(K, K), A_qk = κ(Q, K) from the block products, the pseudo-values
// U = (I + diag(β) tril(A_kk, −1))^{-1} diag(β) V by one unit-lower triangular solve, o = tril(A_qk) U.
// CPU twin: gated_delta_head_* of src/kata/mqar_mixers.cpp with g = 0 (Γ = lower ones).

namespace {

// κ of row r against every column s of its head from the block products: masked to s <= t (A_qk), or the full
// row (full: A_kk, symmetric, read by rows in both solves). out may be G itself (each element is read before the
// same thread writes it).
template <class T>
__global__ void delta_rows_kernel(T* out, const T* G, std::int64_t ps, const T* __restrict__ nx,
                                  const T* __restrict__ nk, Rows g, Psd<T> c, bool full) {
  const std::int64_t r = warp_row();
  if (r >= g.count()) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t T_ = g.T, t = r % T_, base = r - t, last = full ? T_ - 1 : t;
  const T* x = G + r * T_;
  T* y = out + r * T_;
  const T x2 = nx[r];
  for (std::int64_t s = lane; s < T_; s += 32) {
    T a = T(0);
    if (s <= last) {
      for (int p = 0; p < c.pairs; ++p) {
        const T v = x[p * ps + s];
        a += v * v;
      }
      a = c.c2 * a + c.ec * (x2 + nk[base + s]) + c.cst;
    }
    y[s] = a;
  }
}

// Threads of the triangular solves: column c = tid / P of the head, partial sum p = tid % P (P lanes of one
// warp, P = 256 / (dh rounded up to a power of two), at most 32).
constexpr int kSolveThreads = 256;
inline int solve_parts(std::int64_t dh) {
  int w = 1;
  while (w < dh) w *= 2;
  return std::min(32, std::max(1, kSolveThreads / w));
}
template <class T>
__device__ __forceinline__ T part_sum(T x, int P) {
  for (int o = P / 2; o >= 1; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
// Σ_{s in [lo, hi), s ≡ lo (mod P)} w_s a_s X[s][c] with four independent accumulators (w_s = 1 unless WEIGHTED).
template <class T, bool WEIGHTED>
__device__ __forceinline__ T strided_dot(const T* a, const T* w, const T* X, std::int64_t dh, int c, std::int64_t lo,
                                         std::int64_t hi, int P) {
  auto term = [&](std::int64_t s) { return (WEIGHTED ? w[s] * a[s] : a[s]) * X[s * dh + c]; };
  T acc0 = T(0), acc1 = T(0), acc2 = T(0), acc3 = T(0);
  std::int64_t s = lo;
  for (; s + 3 * P < hi; s += 4 * P) {
    acc0 += term(s);
    acc1 += term(s + P);
    acc2 += term(s + 2 * P);
    acc3 += term(s + 3 * P);
  }
  for (; s < hi; s += P) acc0 += term(s);
  return (acc0 + acc1) + (acc2 + acc3);
}
// Row `row` of the head's T × T matrix A into registers (kRowRegs per thread; T <= kRowRegs · 256), then shared.
constexpr int kRowRegs = (kDeltaGemmMaxT + kSolveThreads - 1) / kSolveThreads;
template <class T>
__device__ __forceinline__ void row_fetch(T (&r)[kRowRegs], const T* A, std::int64_t row, std::int64_t T_) {
#pragma unroll
  for (int i = 0; i < kRowRegs; ++i) {
    const std::int64_t s = threadIdx.x + static_cast<std::int64_t>(i) * kSolveThreads;
    r[i] = (row >= 0 && row < T_ && s < T_) ? A[row * T_ + s] : T(0);
  }
}
template <class T>
__device__ __forceinline__ void row_store(T* dst, const T (&r)[kRowRegs], std::int64_t T_) {
#pragma unroll
  for (int i = 0; i < kRowRegs; ++i) {
    const std::int64_t s = threadIdx.x + static_cast<std::int64_t>(i) * kSolveThreads;
    if (s < T_) dst[s] = r[i];
  }
}

// Forward substitution, one block per (sequence, head) of the group: U_t = β_t (v_t − Σ_{s<t} A_kk[t,s] U_s),
// U kept in shared memory (T × dh) and written to U (row b·T + t, columns h·dh.., leading dimension ldu). Row t + 1
// of A_kk is fetched from global memory while step t runs (two shared row buffers), so the loop reads shared
// memory only.
template <class T>
__global__ void __launch_bounds__(kSolveThreads) delta_solve_forward(T* __restrict__ U, std::int64_t ldu,
                                                                     const T* __restrict__ Akk,
                                                                     const T* __restrict__ v, std::int64_t ldv,
                                                                     const T* __restrict__ beta, Rows g, int P) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sU = reinterpret_cast<T*>(smem_raw);
  const std::int64_t T_ = g.T, dh = g.dh, bh = blockIdx.x, b = bh / g.H, h = bh % g.H;
  T* sB = sU + T_ * dh;
  T* sA = sB + T_;  // two rows
  const T* A = Akk + bh * T_ * T_;
  for (std::int64_t t = threadIdx.x; t < T_; t += blockDim.x) sB[t] = beta[(b * T_ + t) * g.H + h];
  T nxt[kRowRegs];
  row_fetch(nxt, A, 0, T_);
  row_store(sA, nxt, T_);
  __syncthreads();
  const int c = static_cast<int>(threadIdx.x) / P, p = static_cast<int>(threadIdx.x) % P;
  const bool col = c < dh;
  for (std::int64_t t = 0; t < T_; ++t) {
    row_fetch(nxt, A, t + 1, T_);  // in flight during this step
    const T* arow = sA + (t & 1) * T_;
    T acc = col ? strided_dot<T, false>(arow, nullptr, sU, dh, c, p, t, P) : T(0);
    acc = part_sum(acc, P);
    if (col && p == 0) sU[t * dh + c] = sB[t] * (v[(b * T_ + t) * ldv + h * dh + c] - acc);
    row_store(sA + ((t + 1) & 1) * T_, nxt, T_);
    __syncthreads();
  }
  for (std::int64_t e = threadIdx.x; e < T_ * dh; e += blockDim.x) {
    const std::int64_t t = e / dh, j = e - t * dh;
    U[(b * T_ + t) * ldu + h * dh + j] = sU[e];
  }
}

// Backward substitution of the transposed system: W_s = dU_s − Σ_{t>s} β_t A_kk[t,s] W_t (W = M^{-T} dU), written
// to W (leading dimension ldw) and dv_s = β_s W_s to dv (leading dimension lddv). A_kk is the full symmetric
// kernel matrix (κ(k_t, k_s) = κ(k_s, k_t)), so column s is read as row s, fetched a step ahead as above.
template <class T>
__global__ void __launch_bounds__(kSolveThreads) delta_solve_backward(T* __restrict__ W, std::int64_t ldw,
                                                                      T* __restrict__ dv, std::int64_t lddv,
                                                                      const T* __restrict__ dU, std::int64_t lddu,
                                                                      const T* __restrict__ Akk,
                                                                      const T* __restrict__ beta, Rows g, int P) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sW = reinterpret_cast<T*>(smem_raw);
  const std::int64_t T_ = g.T, dh = g.dh, bh = blockIdx.x, b = bh / g.H, h = bh % g.H;
  T* sB = sW + T_ * dh;
  T* sA = sB + T_;
  const T* A = Akk + bh * T_ * T_;
  for (std::int64_t t = threadIdx.x; t < T_; t += blockDim.x) sB[t] = beta[(b * T_ + t) * g.H + h];
  T nxt[kRowRegs];
  row_fetch(nxt, A, T_ - 1, T_);
  row_store(sA + ((T_ - 1) & 1) * T_, nxt, T_);
  __syncthreads();
  const int c = static_cast<int>(threadIdx.x) / P, p = static_cast<int>(threadIdx.x) % P;
  const bool col = c < dh;
  for (std::int64_t s = T_ - 1; s >= 0; --s) {
    row_fetch(nxt, A, s - 1, T_);
    const T* arow = sA + (s & 1) * T_;
    T acc = col ? strided_dot<T, true>(arow, sB, sW, dh, c, s + 1 + p, T_, P) : T(0);
    acc = part_sum(acc, P);
    if (col && p == 0) sW[s * dh + c] = dU[(b * T_ + s) * lddu + h * dh + c] - acc;
    if (s > 0) row_store(sA + ((s - 1) & 1) * T_, nxt, T_);
    __syncthreads();
  }
  for (std::int64_t e = threadIdx.x; e < T_ * dh; e += blockDim.x) {
    const std::int64_t t = e / dh, j = e - t * dh;
    W[(b * T_ + t) * ldw + h * dh + j] = sW[e];
    dv[(b * T_ + t) * lddv + h * dh + j] = sB[t] * sW[e];
  }
}

// Backward rows (one warp per row r = (b, h, t)): dA_qk = tril(dO Uᵀ) (in place over the raw product), the block
// products G_qk scaled to 2 c² dA_qk ⊙ G_qk; dA_kk = −β_t (W Uᵀ)_ts for s < t (in place over Y = W Uᵀ), G_kk scaled
// likewise; dβ_t = W_t·v_t − Σ_{s<t} A_kk[t,s] (W Uᵀ)_ts; rq_t = 2 εc Σ_s dA_qk, rk1_t = 2 εc Σ_s dA_kk.
template <class T>
__global__ void delta_rows_backward(T* __restrict__ dAqk, T* __restrict__ Gqk, T* __restrict__ Y,
                                    T* __restrict__ Gkk, std::int64_t ps, const T* __restrict__ Akk,
                                    const T* __restrict__ beta, const T* __restrict__ W, std::int64_t ldw,
                                    const T* __restrict__ v, std::int64_t ldv, T* __restrict__ dbeta,
                                    T* __restrict__ rq, T* __restrict__ rk1, Rows g, Psd<T> c) {
  const std::int64_t r = warp_row();
  if (r >= g.count()) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t T_ = g.T, t = r % T_, bh = r / T_, b = bh / g.H, h = bh % g.H;
  const std::int64_t tok = (b * T_ + t) * g.H + h;
  const T bt = beta[tok];
  const T wv = warp_dot(W + (b * T_ + t) * ldw + h * g.dh, v + (b * T_ + t) * ldv + h * g.dh, static_cast<int>(g.dh));
  T* aq = dAqk + r * T_;
  T* ak = Y + r * T_;
  const T* kk = Akk + r * T_;
  T* gq = Gqk + r * T_;
  T* gk = Gkk + r * T_;
  T sdb = T(0), sq = T(0), sk = T(0);
  for (std::int64_t s = lane; s < T_; s += 32) {
    const T a = s <= t ? aq[s] : T(0);
    aq[s] = a;
    sq += a;
    T d = T(0);
    if (s < t) {
      const T y = ak[s];
      sdb += kk[s] * y;
      d = -bt * y;
    }
    ak[s] = d;
    sk += d;
    for (int p = 0; p < c.pairs; ++p) {
      gq[p * ps + s] *= T(2) * c.c2 * a;
      gk[p * ps + s] *= T(2) * c.c2 * d;
    }
  }
  sdb = warp_sum(sdb);
  sq = warp_sum(sq);
  sk = warp_sum(sk);
  if (lane == 0) {
    dbeta[tok] = wv - sdb;
    rq[r] = T(2) * c.ec * sq;
    rk1[r] = T(2) * c.ec * sk;
  }
}

// Elements per sequence of the backward (the larger pass): block products of (q, k) and (k, k), A_qk, A_kk, dA_qk,
// W Uᵀ (T × T per head each), U, dU, W (T × H·dh each) and six per-row vectors.
std::size_t delta_per_seq(const MapParams& map, const HeadShape& s) {
  const std::size_t pairs = map.kind == MapKind::SumPsd ? map.g * map.g : map.g;
  const std::size_t TT = static_cast<std::size_t>(s.T) * s.T, rows = static_cast<std::size_t>(s.H) * s.T;
  return (2 * pairs + 4) * s.H * TT + 3 * rows * s.dh + 6 * rows;
}
std::size_t delta_solve_smem(const HeadShape& s, std::size_t elem) {  // the T × dh block, β, two rows of A_kk
  return (static_cast<std::size_t>(s.T) * s.dh + 3 * static_cast<std::size_t>(s.T)) * elem;
}
void check_delta_gemm(const MapParams& map, const HeadShape& s, std::size_t elem, const char* what) {
  check_shape(s, what);
  if (!delta_gemm_applies(map, s, elem))
    cuda_detail::throw_user_error(std::string(what) + ": the gemm delta core needs a PSD map (m<g>, sigma<g>) built for "
                                  "d_head = " + std::to_string(s.dh) + " <= 256 and T <= " +
                                  std::to_string(kDeltaGemmMaxT) + " (got T = " + std::to_string(s.T) + ")");
}
template <class T>
void set_solve_smem(const HeadShape& s) {
  const int bytes = static_cast<int>(delta_solve_smem(s, sizeof(T)));
  ::memcap::cuda_detail::raise_dynamic_smem(delta_solve_forward<T>, bytes);
  ::memcap::cuda_detail::raise_dynamic_smem(delta_solve_backward<T>, bytes);
}

// Group pieces shared by forward and backward: block products of (q, k) and (k, k), the norms, A_qk and A_kk (in
// place over the first block product of each when in_place), and U by forward substitution.
template <class T>
struct DeltaGroup {
  T *Gqk, *Gkk, *Aqk, *Akk, *U, *nq, *nk;
};
template <class T>
void delta_group_forward(const DeltaGroup<T>& w, std::int64_t ps, const MapParams& map, const Psd<T>& c, const T* qb,
                         const T* kb, const T* vb, std::int64_t ldqkv, const T* betab, const HeadShape& s,
                         std::int64_t nb, cublasHandle_t h, cudaStream_t stream) {
  const Rows g{nb, s.H, s.T, s.dh};
  const unsigned blocks = row_blocks(nb * s.H * s.T);
  block_products<T>(h, w.Gqk, ps, map, qb, kb, ldqkv, s, nb);
  block_products<T>(h, w.Gkk, ps, map, kb, kb, ldqkv, s, nb);
  qk_sqnorms<T>(w.nq, w.nk, qb, kb, ldqkv, g, stream);
  delta_rows_kernel<T><<<blocks, kWarps * 32, 0, stream>>>(w.Aqk, w.Gqk, ps, w.nq, w.nk, g, c, false);
  MEMCAP_CUDA_CHECK_LAUNCH("delta_rows_kernel");
  delta_rows_kernel<T><<<blocks, kWarps * 32, 0, stream>>>(w.Akk, w.Gkk, ps, w.nk, w.nk, g, c, /*full=*/true);
  MEMCAP_CUDA_CHECK_LAUNCH("delta_rows_kernel");
  delta_solve_forward<T><<<static_cast<unsigned>(nb * s.H), kSolveThreads, delta_solve_smem(s, sizeof(T)), stream>>>(
      w.U, s.H * s.dh, w.Akk, vb, ldqkv, betab, g, solve_parts(s.dh));
  MEMCAP_CUDA_CHECK_LAUNCH("delta_solve_forward");
}

}  // namespace

bool delta_gemm_applies(const MapParams& map, const HeadShape& s, std::size_t elem) {
  return kata_gemm_applies(map, s) && s.dh <= 256 && s.T <= kDeltaGemmMaxT &&
         delta_solve_smem(s, elem) <= kDeltaGemmMaxSmem;
}

std::size_t delta_gemm_workspace_bytes(const MapParams& map, const HeadShape& s, std::size_t elem) {
  if (!delta_gemm_applies(map, s, elem) || s.T == 0) return 0;
  return capped(s, delta_per_seq(map, s) * elem);
}

template <class T>
void delta_heads_forward_gemm(T* o, std::int64_t ldo, const MapParams& map, const T* q, const T* k, const T* v,
                              std::int64_t ldqkv, const T* beta, const HeadShape& s, cublasHandle_t h, void* ws,
                              std::size_t ws_bytes, cudaStream_t stream) {
  check_delta_gemm(map, s, sizeof(T), "delta_heads_forward_gemm");
  if (s.B == 0 || s.T == 0) return;
  nc::check_handle_stream(h, stream);
  set_solve_smem<T>(s);
  const Psd<T> c = psd_of<T>(map);
  const std::int64_t TT = s.T * s.T, D = s.H * s.dh;
  const std::int64_t nb_max = group_size(s, delta_per_seq(map, s) * sizeof(T), ws_bytes, "delta_heads_forward_gemm");
  for (std::int64_t b0 = 0; b0 < s.B; b0 += nb_max) {
    const std::int64_t nb = std::min(nb_max, s.B - b0), seq = s.T * ldqkv, seqo = s.T * ldo;
    const std::int64_t ps = nb * s.H * TT, rows = nb * s.H * s.T;
    DeltaGroup<T> w{};
    w.Gqk = static_cast<T*>(ws);
    w.Gkk = w.Gqk + c.pairs * ps;
    w.Aqk = w.Gqk;  // in place over the first block products
    w.Akk = w.Gkk;
    w.U = w.Gkk + c.pairs * ps;
    w.nq = w.U + rows * s.dh;
    w.nk = w.nq + rows;
    delta_group_forward<T>(w, ps, map, c, q + b0 * seq, k + b0 * seq, v + b0 * seq, ldqkv, beta + b0 * s.T * s.H, s,
                           nb, h, stream);
    for (std::int64_t hh = 0; hh < s.H; ++hh) {
      const std::int64_t off = hh * s.dh;  // o_cm = U_cm · A_qk_cm
      gemm<T>(h, false, false, s.dh, s.T, s.T, T(1), w.U + off, D, s.T * D, w.Aqk + hh * TT, s.T, s.H * TT, T(0),
              o + b0 * seqo + off, ldo, seqo, nb);
    }
  }
}

template <class T>
void delta_heads_backward_gemm(T* dq, T* dk, T* dv, std::int64_t lddqkv, T* dbeta, const T* dout, std::int64_t ldo,
                               const MapParams& map, const T* q, const T* k, const T* v, std::int64_t ldqkv,
                               const T* beta, const HeadShape& s, cublasHandle_t h, void* ws, std::size_t ws_bytes,
                               cudaStream_t stream) {
  check_delta_gemm(map, s, sizeof(T), "delta_heads_backward_gemm");
  if (s.B == 0 || s.T == 0) return;
  nc::check_handle_stream(h, stream);
  set_solve_smem<T>(s);
  const Psd<T> c = psd_of<T>(map);
  const bool sum = map.kind == MapKind::SumPsd;
  const std::int64_t TT = s.T * s.T, gg = map.g, m = s.dh / gg, D = s.H * s.dh;
  const std::int64_t nb_max = group_size(s, delta_per_seq(map, s) * sizeof(T), ws_bytes, "delta_heads_backward_gemm");
  for (std::int64_t b0 = 0; b0 < s.B; b0 += nb_max) {
    const std::int64_t nb = std::min(nb_max, s.B - b0), seq = s.T * ldqkv, seqo = s.T * ldo, seqd = s.T * lddqkv;
    const std::int64_t ps = nb * s.H * TT, rows = nb * s.H * s.T, sequ = s.T * D;
    DeltaGroup<T> w{};
    w.Gqk = static_cast<T*>(ws);
    w.Gkk = w.Gqk + c.pairs * ps;
    w.Aqk = w.Gkk + c.pairs * ps;
    w.Akk = w.Aqk + ps;
    T* dA = w.Akk + ps;  // dO Uᵀ → dA_qk
    T* Y = dA + ps;      // W Uᵀ → dA_kk
    w.U = Y + ps;
    T* dU = w.U + rows * s.dh;
    T* W = dU + rows * s.dh;
    w.nq = W + rows * s.dh;
    w.nk = w.nq + rows;
    T* rq = w.nk + rows;
    T* rk = rq + rows;
    T* rk1 = rk + rows;
    T* rk2 = rk1 + rows;
    const T* qb = q + b0 * seq;
    const T* kb = k + b0 * seq;
    const T* vb = v + b0 * seq;
    const T* dob = dout + b0 * seqo;
    const T* betab = beta + b0 * s.T * s.H;
    const Rows g{nb, s.H, s.T, s.dh};
    const unsigned blocks = row_blocks(rows);
    delta_group_forward<T>(w, ps, map, c, qb, kb, vb, ldqkv, betab, s, nb, h, stream);
    for (std::int64_t hh = 0; hh < s.H; ++hh) {
      const std::int64_t off = hh * s.dh;
      // dU_cm = dO_cm · A_qk_cmᵀ (dU = tril(A_qk)ᵀ dO); dA_cm(s, t) = U_s · dO_t
      gemm<T>(h, false, true, s.dh, s.T, s.T, T(1), dob + off, ldo, seqo, w.Aqk + hh * TT, s.T, s.H * TT, T(0),
              dU + off, D, sequ, nb);
      gemm<T>(h, true, false, s.T, s.T, s.dh, T(1), w.U + off, D, sequ, dob + off, ldo, seqo, T(0), dA + hh * TT, s.T,
              s.H * TT, nb);
    }
    delta_solve_backward<T><<<static_cast<unsigned>(nb * s.H), kSolveThreads, delta_solve_smem(s, sizeof(T)), stream>>>(
        W, D, dv + b0 * seqd, lddqkv, dU, D, w.Akk, betab, g, solve_parts(s.dh));
    MEMCAP_CUDA_CHECK_LAUNCH("delta_solve_backward");
    for (std::int64_t hh = 0; hh < s.H; ++hh) {  // Y_cm(s, t) = U_s · W_t
      const std::int64_t off = hh * s.dh;
      gemm<T>(h, true, false, s.T, s.T, s.dh, T(1), w.U + off, D, sequ, W + off, D, sequ, T(0), Y + hh * TT, s.T,
              s.H * TT, nb);
    }
    delta_rows_backward<T><<<blocks, kWarps * 32, 0, stream>>>(dA, w.Gqk, Y, w.Gkk, ps, w.Akk, betab, W, D, vb, ldqkv,
                                                              dbeta + b0 * s.T * s.H, rq, rk1, g, c);
    MEMCAP_CUDA_CHECK_LAUNCH("delta_rows_backward");
    // (q, k) products: dQ_a = Σ_b dG_ab K_b, dK_b = Σ_a dG_abᵀ Q_a (first contribution overwrites); (k, k)
    // products: dK_a += Σ_b dG_ab K_b (k as the row argument), dK_b += Σ_a dG_abᵀ K_a (as the column argument).
    for (std::int64_t hh = 0; hh < s.H; ++hh) {
      const std::int64_t off = hh * s.dh;
      for (std::int64_t a = 0, p = 0; a < gg; ++a)
        for (std::int64_t b = 0; b < gg; ++b) {
          if (!sum && a != b) continue;
          const T* dGq = w.Gqk + p * ps + hh * TT;
          gemm<T>(h, false, false, m, s.T, s.T, T(1), kb + off + b * m, ldqkv, seq, dGq, s.T, s.H * TT,
                  T(b == 0 || !sum ? 0 : 1), dq + b0 * seqd + off + a * m, lddqkv, seqd, nb);
          gemm<T>(h, false, true, m, s.T, s.T, T(1), qb + off + a * m, ldqkv, seq, dGq, s.T, s.H * TT,
                  T(a == 0 || !sum ? 0 : 1), dk + b0 * seqd + off + b * m, lddqkv, seqd, nb);
          ++p;
        }
      for (std::int64_t a = 0, p = 0; a < gg; ++a)
        for (std::int64_t b = 0; b < gg; ++b) {
          if (!sum && a != b) continue;
          const T* dGk = w.Gkk + p * ps + hh * TT;
          gemm<T>(h, false, false, m, s.T, s.T, T(1), kb + off + b * m, ldqkv, seq, dGk, s.T, s.H * TT, T(1),
                  dk + b0 * seqd + off + a * m, lddqkv, seqd, nb);
          gemm<T>(h, false, true, m, s.T, s.T, T(1), kb + off + a * m, ldqkv, seq, dGk, s.T, s.H * TT, T(1),
                  dk + b0 * seqd + off + b * m, lddqkv, seqd, nb);
          ++p;
        }
    }
    if (c.ec != T(0)) {
      const unsigned cblocks = static_cast<unsigned>((rows + 255) / 256);
      kata_cols_sum<T><<<cblocks, 256, 0, stream>>>(rk, dA, g, T(2) * c.ec);
      MEMCAP_CUDA_CHECK_LAUNCH("kata_cols_sum");
      kata_cols_sum<T><<<cblocks, 256, 0, stream>>>(rk2, Y, g, T(2) * c.ec);
      MEMCAP_CUDA_CHECK_LAUNCH("kata_cols_sum");
      add_scaled_rows<T><<<blocks, kWarps * 32, 0, stream>>>(dq + b0 * seqd, lddqkv, rq, qb, ldqkv, g);
      MEMCAP_CUDA_CHECK_LAUNCH("add_scaled_rows");
      for (const T* r : {static_cast<const T*>(rk), static_cast<const T*>(rk1), static_cast<const T*>(rk2)}) {
        add_scaled_rows<T><<<blocks, kWarps * 32, 0, stream>>>(dk + b0 * seqd, lddqkv, r, kb, ldqkv, g);
        MEMCAP_CUDA_CHECK_LAUNCH("add_scaled_rows");
      }
    }
  }
}

#define MEMCAP_MQAR_GEMM(T)                                                                                           \
  template void softmax_heads_forward_gemm<T>(T*, std::int64_t, T*, const T*, const T*, const T*, std::int64_t,       \
                                              const HeadShape&, double, cublasHandle_t, void*, std::size_t,           \
                                              cudaStream_t);                                                          \
  template void softmax_heads_backward_gemm<T>(T*, T*, T*, std::int64_t, const T*, const T*, std::int64_t, const T*,  \
                                               const T*, const T*, std::int64_t, const T*, const HeadShape&, double,  \
                                               cublasHandle_t, void*, std::size_t, cudaStream_t);                     \
  template void kata_heads_forward_gemm<T>(T*, std::int64_t, T*, const MapParams&, const T*, const T*, const T*,      \
                                           std::int64_t, const HeadShape&, cublasHandle_t, void*, std::size_t,        \
                                           cudaStream_t);                                                             \
  template void kata_heads_backward_gemm<T>(T*, T*, T*, std::int64_t, const T*, const T*, std::int64_t,               \
                                            const MapParams&, const T*, const T*, const T*, std::int64_t, const T*,   \
                                            const HeadShape&, cublasHandle_t, void*, std::size_t, cudaStream_t); \
  template void delta_heads_forward_gemm<T>(T*, std::int64_t, const MapParams&, const T*, const T*, const T*,     \
                                            std::int64_t, const T*, const HeadShape&, cublasHandle_t, void*,          \
                                            std::size_t, cudaStream_t);                                               \
  template void delta_heads_backward_gemm<T>(T*, T*, T*, std::int64_t, T*, const T*, std::int64_t, const MapParams&,  \
                                             const T*, const T*, const T*, std::int64_t, const T*, const HeadShape&,  \
                                             cublasHandle_t, void*, std::size_t, cudaStream_t);
MEMCAP_MQAR_GEMM(float)
MEMCAP_MQAR_GEMM(double)
#undef MEMCAP_MQAR_GEMM

}  // namespace memcap::kata::mqar::cuda

// Device helpers shared by the KATA attention kernels: feature-map parameters and psi evaluation in
// fp32 (spec kata.md §2), bf16 tensor-core fragments (ldmatrix + mma.sync m16n8k16, fp32 accumulate)
// and cp.async tile copies. Included only by kernels/kata_attention_*.cu.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace memcap::kata::cuda {

// Feature map as the kernels see it (kind values = memcap::kata::AttentionMapKind).
struct MapParams {
  int kind;        // 0 linear, 1 orthant, 2 lorentz, 3 psd_block (M_g), 4 psd_sum (Sigma_g)
  int groups;      // g
  int m;           // block width d / g (PSD), d otherwise
  int d;           // raw width
  int n_features;  // packed n_psi
  int n_padded;    // n_psi rounded up to the feature block (64)
  float eps;
  float scale;     // Sigma_g scale c
  int normalized;  // 1: o = num / den, 0: o = num
};
constexpr int kLinear = 0, kOrthant = 1, kLorentz = 2, kPsdBlock = 3, kPsdSum = 4;
constexpr int kFeatureBlock = 64;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16(x); }

// Packed index l of an m x m symmetric factor -> (i, j): l < m diagonal, then upper triangle rows.
__device__ __forceinline__ void packed_pair(int m, int l, int& i, int& j) {
  if (l < m) {
    i = j = l;
    return;
  }
  const int r = l - m;
  // row i starts at off(i) = i*(2m-i-1)/2
  const float b = 2.f * m - 1.f;
  int row = static_cast<int>((b - sqrtf(fmaxf(b * b - 8.f * r, 0.f))) * 0.5f);
  row = max(0, min(row, m - 2));
  while (row > 0 && row * (2 * m - row - 1) / 2 > r) --row;
  while ((row + 1) * (2 * m - row - 2) / 2 <= r) ++row;
  i = row;
  j = row + 1 + (r - row * (2 * m - row - 1) / 2);
}

// psi_f(x) in fp32 for one raw row x (element type E, in shared memory). lorentz_norm: ||x_{1:d-1}||
// (only read by the Lorentz map). Features at f >= n_features are 0 (padding).
template <class E>
__device__ __forceinline__ float feature_value(const MapParams& mp, const E* x, int f, float lorentz_norm) {
  if (f >= mp.n_features) return 0.f;
  switch (mp.kind) {
    case kLinear: return to_f(x[f]);
    case kOrthant: return fmaxf(to_f(x[f]), 0.f) + mp.eps;
    case kLorentz: {
      if (f < mp.d - 1) return to_f(x[f]);
      const float s = to_f(x[mp.d - 1]);
      return lorentz_norm * (1.f + s * s);
    }
    default: {
      const int np = mp.m * (mp.m + 1) / 2;
      int a0 = 0, a1 = mp.groups, l = f;
      if (mp.kind == kPsdBlock) {
        a0 = f / np;
        a1 = a0 + 1;
        l = f - a0 * np;
      }
      int i, j;
      packed_pair(mp.m, l, i, j);
      float acc = 0.f;
      for (int a = a0; a < a1; ++a) acc += to_f(x[a * mp.m + i]) * to_f(x[a * mp.m + j]);
      if (i != j) acc *= 1.41421356237309515f;
      if (mp.kind == kPsdSum) acc *= mp.scale;
      if (i == j) acc += mp.eps;
      return acc;
    }
  }
}

template <class E>
__device__ __forceinline__ float lorentz_norm_of(const MapParams& mp, const E* x) {
  if (mp.kind != kLorentz) return 0.f;
  float s = 0.f;
  for (int i = 0; i < mp.d - 1; ++i) {
    const float v = to_f(x[i]);
    s += v * v;
  }
  return sqrtf(s);
}

// Closed-form kernel <psi(q), psi(k)> for two raw rows in fp32 (spec §2.7) — SIMT paths.
template <class E>
__device__ __forceinline__ float kernel_value(const MapParams& mp, const E* q, const E* k) {
  if (mp.kind == kPsdBlock || mp.kind == kPsdSum) {
    float sq = 0.f, qq = 0.f, kk = 0.f;
    for (int i = 0; i < mp.d; ++i) {
      const float a = to_f(q[i]), b = to_f(k[i]);
      qq += a * a;
      kk += b * b;
    }
    if (mp.kind == kPsdBlock) {
      for (int a = 0; a < mp.groups; ++a) {
        float s = 0.f;
        for (int i = 0; i < mp.m; ++i) s += to_f(q[a * mp.m + i]) * to_f(k[a * mp.m + i]);
        sq += s * s;
      }
      return sq + mp.eps * (qq + kk) + mp.eps * mp.eps * mp.m * mp.groups;
    }
    for (int a = 0; a < mp.groups; ++a)
      for (int b = 0; b < mp.groups; ++b) {
        float s = 0.f;
        for (int i = 0; i < mp.m; ++i) s += to_f(q[a * mp.m + i]) * to_f(k[b * mp.m + i]);
        sq += s * s;
      }
    return mp.scale * mp.scale * sq + mp.eps * mp.scale * (qq + kk) + mp.eps * mp.eps * mp.m;
  }
  const float nq = lorentz_norm_of(mp, q), nk = lorentz_norm_of(mp, k);
  float s = 0.f;
  for (int f = 0; f < mp.d; ++f) s += feature_value(mp, q, f, nq) * feature_value(mp, k, f, nk);
  return s;
}


// One feature column f, precomputed once per thread: psi_f(x) = mult * sum_a x[a*m+i] x[a*m+j] + add
// (PSD maps; M_g has a single block a0) or the elementwise maps.
struct FeatureSlot {
  int i = 0, j = 0, a0 = 0, a1 = 0;
  float mult = 0.f, add = 0.f;
  bool active = false;
};
__device__ __forceinline__ FeatureSlot make_slot(const MapParams& mp, int f) {
  FeatureSlot s;
  if (f >= mp.n_features) return s;
  s.active = true;
  if (mp.kind == kPsdBlock || mp.kind == kPsdSum) {
    const int np = mp.m * (mp.m + 1) / 2;
    int l = f;
    s.a0 = 0;
    s.a1 = mp.groups;
    if (mp.kind == kPsdBlock) {
      s.a0 = f / np;
      s.a1 = s.a0 + 1;
      l = f - s.a0 * np;
    }
    packed_pair(mp.m, l, s.i, s.j);
    s.mult = (s.i != s.j ? 1.41421356237309515f : 1.f) * (mp.kind == kPsdSum ? mp.scale : 1.f);
    s.add = s.i == s.j ? mp.eps : 0.f;
  } else {
    s.i = f;
    s.add = mp.eps;
  }
  return s;
}
template <class E>
__device__ __forceinline__ float eval_slot(const MapParams& mp, const FeatureSlot& s, const E* x, float lnorm) {
  if (!s.active) return 0.f;
  switch (mp.kind) {
    case kLinear: return to_f(x[s.i]);
    case kOrthant: return fmaxf(to_f(x[s.i]), 0.f) + s.add;
    case kLorentz: {
      if (s.i < mp.d - 1) return to_f(x[s.i]);
      const float z = to_f(x[mp.d - 1]);
      return lnorm * (1.f + z * z);
    }
    default: {
      float acc = 0.f;
      for (int a = s.a0; a < s.a1; ++a) acc += to_f(x[a * mp.m + s.i]) * to_f(x[a * mp.m + s.j]);
      return s.mult * acc + s.add;
    }
  }
}

// eval_slot with the map kind known at compile time for the PSD maps (no branch on mp.kind in
// the inner loops); KIND = kLinear means "decide at run time" (linear, orthant, Lorentz).
template <int KIND, class E>
__device__ __forceinline__ float eval_slot_k(const MapParams& mp, const FeatureSlot& s, const E* x, float lnorm) {
  if constexpr (KIND == kPsdBlock) {
    return s.active ? s.mult * (to_f(x[s.a0 * mp.m + s.i]) * to_f(x[s.a0 * mp.m + s.j])) + s.add : 0.f;
  } else if constexpr (KIND == kPsdSum) {
    if (!s.active) return 0.f;
    float acc = 0.f;
    for (int a = 0; a < mp.groups; ++a) acc += to_f(x[a * mp.m + s.i]) * to_f(x[a * mp.m + s.j]);
    return s.mult * acc + s.add;
  } else {
    return eval_slot(mp, s, x, lnorm);
  }
}

// ---- tensor-core fragments (sm_80+ mma.sync m16n8k16 bf16 -> fp32) -------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
// D = A(16x16 bf16) * B(16x8 bf16) + D (fp32)
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// A fragment (16 rows x 16 k) from a row-major bf16 tile X[row][k] (stride in elements).
__device__ __forceinline__ void load_a(uint32_t (&r)[4], const __nv_bfloat16* X, int stride, int row0, int k0,
                                       int lane) {
  const int i = lane >> 3;
  ldmatrix_x4(r, X + (row0 + (i & 1) * 8 + (lane & 7)) * stride + k0 + (i >> 1) * 8);
}
// A fragment (16 rows x 16 k) of X^T, where X is stored [k][row] (e.g. Psi(K)^T from Psi(K)[t][f]).
__device__ __forceinline__ void load_a_trans(uint32_t (&r)[4], const __nv_bfloat16* X, int stride, int row0,
                                             int k0, int lane) {
  const int i = lane >> 3;
  ldmatrix_x4_trans(r, X + (k0 + (i >> 1) * 8 + (lane & 7)) * stride + row0 + (i & 1) * 8);
}
// B fragments for two n-blocks (n0..n0+7, n0+8..n0+15) x 16 k, where B[k][n] = X[n][k] (X row-major
// [n][k], e.g. K for S = Q K^T). b[0],b[1]: n-block 0; b[2],b[3]: n-block 1.
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const __nv_bfloat16* X, int stride, int n0, int k0,
                                          int lane) {
  const int i = lane >> 3;
  ldmatrix_x4(b, X + (n0 + (i >> 1) * 8 + (lane & 7)) * stride + k0 + (i & 1) * 8);
}
// Same, where B[k][n] = X[k][n] (X row-major [k][n], e.g. V for P V, or a state S[f][v]).
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const __nv_bfloat16* X, int stride, int n0, int k0,
                                          int lane) {
  const int i = lane >> 3;
  ldmatrix_x4_trans(b, X + (k0 + (i & 1) * 8 + (lane & 7)) * stride + n0 + (i >> 1) * 8);
}

// acc (16 rows x 64 columns: 8 n-blocks of 8) += A (16 rows x one 16-wide k-slice, fragment a) times rows
// k0..k0+15 of a row-major [k][n] bf16 tile X (64 columns; stride in elements).
__device__ __forceinline__ void mma_rows_x_tile64(float (&acc)[8][4], const uint32_t (&a)[4], const __nv_bfloat16* X,
                                                  int stride, int k0, int lane) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t b[4];
    load_b_kn(b, X, stride, j * 16, k0, lane);
    mma_bf16(acc[2 * j], a, b[0], b[1]);
    mma_bf16(acc[2 * j + 1], a, b[2], b[3]);
  }
}

// Scores of one warp's 16 query rows against 16 keys (two n-blocks of 8) into p[2][4] (fp32),
// from Q fragments qf (registers) and the key tile (smem, row-major [key][d], stride 72).
constexpr int kStride = 72;  // padded smem row (elements) of 64-wide bf16 tiles

template <int KIND, int G>
__device__ __forceinline__ void psd_scores(float (&p)[2][4], const uint32_t (&qf)[4][4], const __nv_bfloat16* sK,
                                           int key0, int lane, float c2) {
  constexpr int M = 64 / G, KS = M / 16;
#pragma unroll
  for (int nb = 0; nb < 2; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) p[nb][e] = 0.f;
#pragma unroll
  for (int a = 0; a < G; ++a) {
#pragma unroll
    for (int b = 0; b < G; ++b) {
      if (KIND == kPsdBlock && a != b) continue;
      float s[2][4] = {};
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        uint32_t bf[4];
        load_b_nk(bf, sK, kStride, key0, b * M + ks * 16, lane);
        mma_bf16(s[0], qf[(a * M) / 16 + ks], bf[0], bf[1]);
        mma_bf16(s[1], qf[(a * M) / 16 + ks], bf[2], bf[3]);
      }
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) p[nb][e] += s[nb][e] * s[nb][e];
    }
  }
  if (KIND == kPsdSum)
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[nb][e] *= c2;
}

// Plain dot-product scores (features already applied, width 64) of 16 rows against 16 keys.
__device__ __forceinline__ void dot_scores(float (&p)[2][4], const uint32_t (&qf)[4][4], const __nv_bfloat16* sK,
                                           int key0, int lane) {
#pragma unroll
  for (int nb = 0; nb < 2; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e) p[nb][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    uint32_t bf[4];
    load_b_nk(bf, sK, kStride, key0, ks * 16, lane);
    mma_bf16(p[0], qf[ks], bf[0], bf[1]);
    mma_bf16(p[1], qf[ks], bf[2], bf[3]);
  }
}

// ---- cp.async 16-byte copies (zero-fill when !valid) -------------------------------------------
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }
__device__ __forceinline__ void cp_async_wait_one_pending() { asm volatile("cp.async.wait_group 1;\n" ::); }

// Copy rows [t0, t0+rows) of a [T][64] bf16 matrix into a padded smem tile (stride 72); rows >= T
// are zero-filled. All threads of the block take part.
template <int ROWS>
__device__ __forceinline__ void load_tile64(__nv_bfloat16* dst, const __nv_bfloat16* src, int t0, int T,
                                            int tid, int nthreads) {
  for (int c = tid; c < ROWS * 8; c += nthreads) {
    const int r = c >> 3, col = (c & 7) * 8;
    const bool valid = t0 + r < T;
    cp_async16(dst + r * 72 + col, src + (valid ? (static_cast<int64_t>(t0 + r) * 64 + col) : 0), valid);
  }
}

}  // namespace memcap::kata::cuda

#include "kata_attention_launch.cuh"
namespace memcap::kata::cuda {
// Host: MapParams for a launch (n_padded = n_psi rounded up to the 64-wide feature block).
inline MapParams map_params(const AttentionLaunch& p) {
  MapParams mp{};
  mp.kind = p.map_kind;
  mp.groups = (p.map_kind >= kPsdBlock) ? p.groups : 1;
  mp.d = p.d;
  mp.m = (p.map_kind >= kPsdBlock) ? p.d / p.groups : p.d;
  const int np = mp.m * (mp.m + 1) / 2;
  mp.n_features = p.map_kind == kPsdBlock ? mp.groups * np : (p.map_kind == kPsdSum ? np : p.d);
  mp.n_padded = (mp.n_features + kFeatureBlock - 1) / kFeatureBlock * kFeatureBlock;
  mp.eps = p.eps;
  mp.scale = p.scale;
  mp.normalized = p.normalized ? 1 : 0;
  return mp;
}
}  // namespace memcap::kata::cuda

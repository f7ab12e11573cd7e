// Device helpers shared by the KATA attention kernels: the attention view of the map (ψ itself comes from
// kata_feature_map.cuh, the one device implementation), the closed-form kernel for the scalar paths, bf16
// tensor-core fragments (ldmatrix + mma.sync m16n8k16, fp32 accumulate) and cp.async tile copies, for tiles of
// any width W that is a multiple of 16 (row stride W + 8 elements: conflict-free ldmatrix).
// Included only by kernels/kata_attention_*.cu.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kata_attention_launch.cuh"
#include "kata_feature_map.cuh"
#include "mma_bf16.cuh"

namespace memcap::kata::cuda {

// The map as the attention kernels see it: DeviceMap + the readout.
struct AttnMap : DeviceMap {
  int normalized = 1;  // 1: o = num / den, 0: o = num
};
inline AttnMap attn_map(const AttentionLaunch& p) {
  AttnMap a;
  static_cast<DeviceMap&>(a) = device_map(p.map);
  a.normalized = p.normalized ? 1 : 0;
  return a;
}

// Padded shared-memory row stride (elements) of a W-wide bf16 tile.
template <int W>
constexpr int stride_of() {
  return W + 8;
}

// Closed-form kernel <psi(q), psi(k)> for two raw rows in fp32 (spec §2.7) — the scalar (SIMT) paths.
template <class E>
__device__ __forceinline__ float kernel_value(const AttnMap& mp, const E* q, const E* k) {
  if (mp.kind == MapKind::BlockPsd || mp.kind == MapKind::SumPsd) {
    float sq = 0.f, qq = 0.f, kk = 0.f;
    for (int i = 0; i < mp.d; ++i) {
      const float a = to_f(q[i]), b = to_f(k[i]);
      qq += a * a;
      kk += b * b;
    }
    if (mp.kind == MapKind::BlockPsd) {
      for (int a = 0; a < mp.g; ++a) {
        float s = 0.f;
        for (int i = 0; i < mp.m; ++i) s += to_f(q[a * mp.m + i]) * to_f(k[a * mp.m + i]);
        sq += s * s;
      }
      return sq + mp.eps * (qq + kk) + mp.eps * mp.eps * mp.m * mp.g;
    }
    for (int a = 0; a < mp.g; ++a)
      for (int b = 0; b < mp.g; ++b) {
        float s = 0.f;
        for (int i = 0; i < mp.m; ++i) s += to_f(q[a * mp.m + i]) * to_f(k[b * mp.m + i]);
        sq += s * s;
      }
    return mp.scale * mp.scale * sq + mp.eps * mp.scale * (qq + kk) + mp.eps * mp.eps * mp.m;
  }
  return with_map_kind(mp.kind, [&](auto kind) {
    constexpr MapKind K = decltype(kind)::value;
    const float nq = psi_aux<K>(mp, q), nk = psi_aux<K>(mp, k);
    float s = 0.f;
    for (int f = 0; f < mp.d; ++f) s += psi_value<K>(mp, q, f, nq) * psi_value<K>(mp, k, f, nk);
    return s;
  });
}

// Fragment and cp.async helpers (kernels/mma_bf16.cuh), shared with the nn kernels.
using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait_all;
using mma::cp_async_wait_one_pending;
using mma::ldmatrix_x4;
using mma::ldmatrix_x4_trans;
using mma::load_a;
using mma::load_a_trans;
using mma::load_b_kn;
using mma::load_b_nk;
using mma::load_tile;
using mma::mma_bf16;
using mma::pack_bf16;
using mma::smem_u32;

// acc (16 rows x N columns: N/8 n-blocks of 8) += A (16 rows x one 16-wide k-slice, fragment a) times rows
// k0..k0+15 of a row-major [k][n] bf16 tile X (N columns; stride in elements).
template <int N>
__device__ __forceinline__ void mma_rows_x_tile(float (&acc)[N / 8][4], const uint32_t (&a)[4], const __nv_bfloat16* X,
                                                int stride, int k0, int lane) {
#pragma unroll
  for (int j = 0; j < N / 16; ++j) {
    uint32_t b[4];
    load_b_kn(b, X, stride, j * 16, k0, lane);
    mma_bf16(acc[2 * j], a, b[0], b[1]);
    mma_bf16(acc[2 * j + 1], a, b[2], b[3]);
  }
}

// A fragment of block a (width 8: M_4 / Σ_4 at d = 32) placed in the k-half `half` of a 16-wide k-slice, from
// the fragment qf of the slice holding it (a at half a & 1), zeros elsewhere: (Q_a ⊙ mask) K_bᵀ over that slice
// gives Q_a · K_b when block b sits in half `half` of its slice.
__device__ __forceinline__ void half_fragment(uint32_t (&r)[4], const uint32_t (&qf)[4], int a_half, int half) {
  const uint32_t lo0 = a_half == 0 ? qf[0] : qf[2], lo1 = a_half == 0 ? qf[1] : qf[3];
  r[0] = half == 0 ? lo0 : 0u;
  r[1] = half == 0 ? lo1 : 0u;
  r[2] = half == 1 ? lo0 : 0u;
  r[3] = half == 1 ? lo1 : 0u;
}

// Σ over the map's block pairs of (q_a · k_b)² — the closed form of ⟨ψ(q), ψ(k)⟩ for M_g (pairs a = b) and
// Σ_g (every pair, before the c² scale) — for MT query row tiles of 16 against one tile of 16 keys, accumulated
// into p[mt][n-half][fragment]. qf[mt][s]: A fragments of query tile mt, k-slice s (16 wide); the keys are rows
// krow.. of sK (row stride ld). Block width M >= 16 uses its own slices; M = 8 (M_4 / Σ_4 at d = 32) masks
// block a into the k-half of block b (half_fragment). The tensor-core quadratic, two-pass chunked and fused
// chunk kernels all score PSD tiles through this one function.
template <MapKind KIND, int G, int M, int MT, int NS>
__device__ __forceinline__ void psd_pair_squares(float (&p)[MT][2][4], const uint32_t (&qf)[MT][NS][4],
                                                 const __nv_bfloat16* sK, int ld, int krow, int lane) {
#pragma unroll
  for (int a = 0; a < G; ++a) {
#pragma unroll
    for (int b = 0; b < G; ++b) {
      if (KIND == MapKind::BlockPsd && a != b) continue;
      float sc[MT][2][4] = {};
      if constexpr (M >= 16) {
#pragma unroll
        for (int ks = 0; ks < M / 16; ++ks) {
          uint32_t bf[4];
          load_b_nk(bf, sK, ld, krow, b * M + ks * 16, lane);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(sc[mt][0], qf[mt][(a * M) / 16 + ks], bf[0], bf[1]);
            mma_bf16(sc[mt][1], qf[mt][(a * M) / 16 + ks], bf[2], bf[3]);
          }
        }
      } else {  // M == 8
        uint32_t bf[4];
        load_b_nk(bf, sK, ld, krow, (b / 2) * 16, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          uint32_t am[4];
          half_fragment(am, qf[mt][a / 2], a & 1, b & 1);
          mma_bf16(sc[mt][0], am, bf[0], bf[1]);
          mma_bf16(sc[mt][1], am, bf[2], bf[3]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nb = 0; nb < 2; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) p[mt][nb][e] += sc[mt][nb][e] * sc[mt][nb][e];
    }
  }
}
// One query tile (MT = 1) with plain fragment arrays.
template <MapKind KIND, int G, int M, int NS>
__device__ __forceinline__ void psd_pair_squares(float (&p)[2][4], const uint32_t (&qf)[NS][4],
                                                 const __nv_bfloat16* sK, int ld, int krow, int lane) {
  psd_pair_squares<KIND, G, M, 1, NS>(reinterpret_cast<float(&)[1][2][4]>(p),
                                      reinterpret_cast<const uint32_t(&)[1][NS][4]>(qf), sK, ld, krow, lane);
}

// The PSD closed form's remaining terms on a 16-row x 16-key score tile p (two n8 halves, mma.sync C layout):
// Σ_g's c², then ε_lin (‖q‖² + ‖k‖²) + ε_const, with qn0 / qn1 the ‖q‖² of the lane's two rows and kn the
// ‖k‖² of the tile's 16 keys. A no-op for the other kinds when !use_eps.
template <MapKind KIND>
__device__ __forceinline__ void psd_score_terms(float (&p)[2][4], float c2, bool use_eps, float eps_lin,
                                                float eps_const, float qn0, float qn1, const float* kn, int tq) {
#pragma unroll
  for (int nb = 0; nb < 2; ++nb) {
    if (KIND == MapKind::SumPsd)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[nb][e] *= c2;
    if (use_eps) {
      const float kn0 = kn[nb * 8 + 2 * tq], kn1 = kn[nb * 8 + 2 * tq + 1];
      p[nb][0] += eps_lin * (qn0 + kn0) + eps_const;
      p[nb][1] += eps_lin * (qn0 + kn1) + eps_const;
      p[nb][2] += eps_lin * (qn1 + kn0) + eps_const;
      p[nb][3] += eps_lin * (qn1 + kn1) + eps_const;
    }
  }
}
// A score tile p (16 rows x 16 keys, C layout) as the bf16 A fragment of P·V.
__device__ __forceinline__ void pack_scores(uint32_t (&pa)[4], const float (&p)[2][4]) {
  pa[0] = pack_bf16(p[0][0], p[0][1]);
  pa[1] = pack_bf16(p[0][2], p[0][3]);
  pa[2] = pack_bf16(p[1][0], p[1][1]);
  pa[3] = pack_bf16(p[1][2], p[1][3]);
}
// ‖x‖² of one bf16 row of n elements, summed in order in fp32.
__device__ __forceinline__ float row_sq_norm(const __nv_bfloat16* row, int n) {
  float s = 0.f;
  for (int i = 0; i < n; ++i) {
    const float x = __bfloat162float(row[i]);
    s += x * x;
  }
  return s;
}

// Byte offset of bf16 element (r, c), c < 64, in a 64-column tile stored as 128-byte-swizzled atoms (row r: 128
// bytes at r * 128, its 16-byte piece p at p ^ (r & 7)): the layout TMA's 128B swizzle writes and wgmma reads.
__device__ __forceinline__ int sw128_offset(int r, int c) {
  return r * 128 + (((c >> 3) ^ (r & 7)) << 4) + (c & 7) * 2;
}
// load_tile for a 64-row, 64-column tile stored as one such atom; dst 1024-aligned.
__device__ __forceinline__ void load_tile_sw64(unsigned char* dst, const __nv_bfloat16* src, int t0, int T, int tid,
                                               int nthreads) {
  for (int c = tid; c < 64 * 8; c += nthreads) {
    const int r = c >> 3, p = c & 7;
    const bool valid = t0 + r < T;
    cp_async16(dst + sw128_offset(r, p * 8), src + (valid ? (static_cast<int64_t>(t0 + r) * 64 + p * 8) : 0),
               valid);
  }
}

}  // namespace memcap::kata::cuda

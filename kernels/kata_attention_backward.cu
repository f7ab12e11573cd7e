// Backward of the quadratic causal KATA form on tensor cores (kata_attention_backward.cuh says what it computes).
// Both kernels: 4 warps, 16 rows per warp, 64-row tiles of the other operand double-buffered through cp.async; the
// M_g scores are recomputed per 16 x 16 slice from fp32 mma accumulators (one product per block a, squares summed
// after accumulation, as the forward does), so the per-block products S_a needed by the chain rule stay in
// registers. Element-wise terms (G, A / z) are formed in fp32 and rounded to bf16 only as mma operands.
// One 16-row m-tile per warp: a variant with two m-tiles per warp (each B fragment feeding two mma) was measured
// in the tenth session and was 1-7 % slower at every Table 9 shape (docs/perf.md), so it was removed.
#include "cuda_check.cuh"
#include "smem_limit.cuh"
#include "kata_attention_backward.cuh"
#include "kata_attention_common.cuh"

#include <string>

namespace memcap::kata::cuda {
namespace quad_bwd {

constexpr int kTile = 64, kThreads = 128;

template <int D>
constexpr int smem_bytes() {
  return (2 * kTile + 4 * kTile) * (D + 8) * 2 + 6 * kTile * 4;
}

// Per-row |x|² of the two rows (g, g + 8) of a 16-row slice held by this thread, from a bf16 smem tile:
// each of the 4 threads of a quad sums D/4 columns, then the quad reduces.
template <int D>
__device__ __forceinline__ void row_sq_norms(float (&n)[2], const __nv_bfloat16* tile, int r, int g, int tq) {
  constexpr int SD = D + 8;
  n[0] = n[1] = 0.f;
  for (int c = tq * (D / 4); c < (tq + 1) * (D / 4); ++c) {
    const float a = __bfloat162float(tile[(r + g) * SD + c]);
    const float b = __bfloat162float(tile[(r + g + 8) * SD + c]);
    n[0] += a * a;
    n[1] += b * b;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    n[h] += __shfl_xor_sync(0xffffffffu, n[h], 1);
    n[h] += __shfl_xor_sync(0xffffffffu, n[h], 2);
  }
}

// |x|² of each of the kTile rows of a bf16 smem tile (stride D + 8) into dst[0..kTile), one thread per row; then a
// block barrier (every thread of the block must call it).
template <int D>
__device__ __forceinline__ void tile_sq_norms(float* dst, const __nv_bfloat16* tile, int tid) {
  if (tid < kTile) dst[tid] = row_sq_norm(tile + tid * (D + 8), D);
  __syncthreads();
}

// A fragment (16 x 16, bf16) from one C-layout accumulator slice (two n-blocks of 8).
__device__ __forceinline__ void pack_frag(uint32_t (&r)[4], const float (&x)[2][4]) {
  r[0] = pack_bf16(x[0][0], x[0][1]);
  r[1] = pack_bf16(x[0][2], x[0][3]);
  r[2] = pack_bf16(x[1][0], x[1][1]);
  r[3] = pack_bf16(x[1][2], x[1][3]);
}

// Fragment (16 x 16, bf16) of x ⊙ y for two C-layout accumulators of the same slice.
__device__ __forceinline__ void pack_product(uint32_t (&r)[4], const float (&x)[2][4], const float (&y)[2][4]) {
  r[0] = pack_bf16(x[0][0] * y[0][0], x[0][1] * y[0][1]);
  r[1] = pack_bf16(x[0][2] * y[0][2], x[0][3] * y[0][3]);
  r[2] = pack_bf16(x[1][0] * y[1][0], x[1][1] * y[1][1]);
  r[3] = pack_bf16(x[1][2] * y[1][2], x[1][3] * y[1][3]);
}

// Query-block kernel: dq, and 1/z_t, δ_t/z_t into the workspace. Block = 64 query rows of one (b, h), longest
// (last) query tiles first.
template <int G, int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(AttnMap mp, const __nv_bfloat16* __restrict__ q,
                                                      const __nv_bfloat16* __restrict__ k,
                                                      const __nv_bfloat16* __restrict__ v,
                                                      const __nv_bfloat16* __restrict__ o,
                                                      const __nv_bfloat16* __restrict__ dout,
                                                      __nv_bfloat16* __restrict__ dq, float* __restrict__ zinv_out,
                                                      float* __restrict__ dl_out, int T) {
  constexpr int SD = D + 8, M = D / G, KS = D / 16;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* sO = sQ + kTile * SD;  // dout rows
  __nv_bfloat16* sK = sO + kTile * SD;  // 2 stages
  __nv_bfloat16* sV = sK + 2 * kTile * SD;
  float* sKn = reinterpret_cast<float*>(sV + 2 * kTile * SD);  // 2 x 64 key norms

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int nqt = (T + kTile - 1) / kTile;
  const int qt = nqt - 1 - static_cast<int>(blockIdx.x);
  const std::int64_t bh = blockIdx.y, base = bh * static_cast<std::int64_t>(T) * D;
  q += base;
  k += base;
  v += base;
  o += base;
  dout += base;
  dq += base;
  const int q0 = qt * kTile, lr = warp * 16;
  const int row_lo = q0 + lr, row_hi = row_lo + 15;
  const int r0 = row_lo + g, r1 = r0 + 8;
  const int nkt = qt + 1;  // keys up to the block's last row
  const bool use_eps = mp.eps != 0.f;
  const float eps_const = mp.eps * mp.eps * mp.m * mp.g;

  load_tile<kTile, D>(sQ, q, q0, T, tid, kThreads);
  load_tile<kTile, D>(sO, dout, q0, T, tid, kThreads);
  load_tile<kTile, D>(sK, k, 0, T, tid, kThreads);
  load_tile<kTile, D>(sV, v, 0, T, tid, kThreads);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  uint32_t qf[KS][4], of[KS][4];
#pragma unroll
  for (int s = 0; s < KS; ++s) {
    load_a(qf[s], sQ, SD, lr, s * 16, lane);
    load_a(of[s], sO, SD, lr, s * 16, lane);
  }
  // δ_t = dout_t · o_t (o read once from global memory), |q_t|²
  float dl[2] = {0.f, 0.f}, qn[2] = {0.f, 0.f};
  for (int c = tq * (D / 4); c < (tq + 1) * (D / 4); ++c) {
    if (r0 < T) dl[0] += __bfloat162float(sO[(lr + g) * SD + c]) * __bfloat162float(o[static_cast<std::int64_t>(r0) * D + c]);
    if (r1 < T)
      dl[1] += __bfloat162float(sO[(lr + g + 8) * SD + c]) * __bfloat162float(o[static_cast<std::int64_t>(r1) * D + c]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    dl[h] += __shfl_xor_sync(0xffffffffu, dl[h], 1);
    dl[h] += __shfl_xor_sync(0xffffffffu, dl[h], 2);
  }
  if (use_eps) row_sq_norms<D>(qn, sQ, lr, g, tq);

  float acc[D / 8][4] = {};
  float zs[2] = {0.f, 0.f}, rs[2] = {0.f, 0.f};
  for (int kt = 0; kt < nkt; ++kt) {
    if (kt > 0) {
      cp_async_wait_all();
      __syncthreads();
    }
    if (kt + 1 < nkt) {
      const int st = (kt + 1) & 1;
      load_tile<kTile, D>(sK + st * kTile * SD, k, (kt + 1) * kTile, T, tid, kThreads);
      load_tile<kTile, D>(sV + st * kTile * SD, v, (kt + 1) * kTile, T, tid, kThreads);
      cp_async_commit();
    }
    const __nv_bfloat16* cK = sK + (kt & 1) * kTile * SD;
    const __nv_bfloat16* cV = sV + (kt & 1) * kTile * SD;
    float* cKn = sKn + (kt & 1) * kTile;
    if (use_eps) tile_sq_norms<D>(cKn, cK, tid);
    const int k0 = kt * kTile;
    if (k0 > row_hi) continue;
#pragma unroll
    for (int kb = 0; kb < kTile / 16; ++kb) {
      const int kbase = k0 + kb * 16;
      if (kbase > row_hi) break;
      float sc[G][2][4] = {};
#pragma unroll
      for (int a = 0; a < G; ++a)
#pragma unroll
        for (int s = 0; s < M / 16; ++s) {
          uint32_t bf[4];
          load_b_nk(bf, cK, SD, kb * 16, a * M + s * 16, lane);
          mma_bf16(sc[a][0], qf[(a * M) / 16 + s], bf[0], bf[1]);
          mma_bf16(sc[a][1], qf[(a * M) / 16 + s], bf[2], bf[3]);
        }
      float dp[2][4] = {};
#pragma unroll
      for (int s = 0; s < KS; ++s) {
        uint32_t bf[4];
        load_b_nk(bf, cV, SD, kb * 16, s * 16, lane);
        mma_bf16(dp[0], of[s], bf[0], bf[1]);
        mma_bf16(dp[1], of[s], bf[2], bf[3]);
      }
      float g2[2][4];  // 2 (dp - δ) where the key is visible, else 0
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1, row = h ? r1 : r0, kc = kb * 16 + nb * 8 + 2 * tq + (e & 1), key = k0 + kc;
          const bool vis = key <= row;
          float A = 0.f;
#pragma unroll
          for (int a = 0; a < G; ++a) A += sc[a][nb][e] * sc[a][nb][e];
          if (use_eps) A += mp.eps * (qn[h] + cKn[kc]) + eps_const;
          const float gr = vis ? dp[nb][e] - dl[h] : 0.f;
          zs[h] += vis ? A : 0.f;
          rs[h] += gr;
          g2[nb][e] = 2.f * gr;
        }
#pragma unroll
      for (int a = 0; a < G; ++a) {
        uint32_t pa[4];
        pack_product(pa, g2, sc[a]);
#pragma unroll
        for (int j = 0; j < M / 16; ++j) {
          uint32_t b[4];
          load_b_kn(b, cK, SD, a * M + j * 16, kb * 16, lane);
          mma_bf16(acc[(a * M) / 8 + 2 * j], pa, b[0], b[1]);
          mma_bf16(acc[(a * M) / 8 + 2 * j + 1], pa, b[2], b[3]);
        }
      }
    }
  }
  float zi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    zs[h] += __shfl_xor_sync(0xffffffffu, zs[h], 1);
    zs[h] += __shfl_xor_sync(0xffffffffu, zs[h], 2);
    rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 1);
    rs[h] += __shfl_xor_sync(0xffffffffu, rs[h], 2);
    zi[h] = zs[h] != 0.f ? 1.f / zs[h] : 0.f;
  }
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    const int col = j * 8 + 2 * tq;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = h ? r1 : r0;
      if (row >= T) continue;
      float x0 = acc[j][2 * h], x1 = acc[j][2 * h + 1];
      if (use_eps) {
        const float e2 = 2.f * mp.eps * rs[h];
        x0 += e2 * __bfloat162float(sQ[(lr + g + 8 * h) * SD + col]);
        x1 += e2 * __bfloat162float(sQ[(lr + g + 8 * h) * SD + col + 1]);
      }
      *reinterpret_cast<__nv_bfloat162*>(dq + static_cast<std::int64_t>(row) * D + col) =
          __floats2bfloat162_rn(x0 * zi[h], x1 * zi[h]);
    }
  }
  if (tq == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = h ? r1 : r0;
      if (row < T) {
        zinv_out[bh * T + row] = zi[h];
        dl_out[bh * T + row] = dl[h] * zi[h];
      }
    }
  }
}

// Key-block kernel: dk, dv. Block = 64 keys of one (b, h), against every query tile at or after its own
// (key tile 0, the most work, first).
template <int G, int D>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(AttnMap mp, const __nv_bfloat16* __restrict__ q,
                                                        const __nv_bfloat16* __restrict__ k,
                                                        const __nv_bfloat16* __restrict__ v,
                                                        const __nv_bfloat16* __restrict__ dout,
                                                        const float* __restrict__ zinv, const float* __restrict__ dlz,
                                                        __nv_bfloat16* __restrict__ dk, __nv_bfloat16* __restrict__ dv,
                                                        int T) {
  constexpr int SD = D + 8, M = D / G, KS = D / 16;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* sV = sK + kTile * SD;
  __nv_bfloat16* sQ = sV + kTile * SD;  // 2 stages
  __nv_bfloat16* sO = sQ + 2 * kTile * SD;
  float* sZ = reinterpret_cast<float*>(sO + 2 * kTile * SD);  // 2 x 64: 1 / z
  float* sL = sZ + 2 * kTile;                                  // 2 x 64: δ / z
  float* sQn = sL + 2 * kTile;                                 // 2 x 64: |q|²

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int nqt = (T + kTile - 1) / kTile;
  const int kt = static_cast<int>(blockIdx.x);
  const std::int64_t bh = blockIdx.y, base = bh * static_cast<std::int64_t>(T) * D;
  q += base;
  k += base;
  v += base;
  dout += base;
  dk += base;
  dv += base;
  zinv += bh * T;
  dlz += bh * T;
  const int k0 = kt * kTile, lr = warp * 16;
  const int key_lo = k0 + lr, r0 = key_lo + g, r1 = r0 + 8;
  const bool use_eps = mp.eps != 0.f;
  const float eps_const = mp.eps * mp.eps * mp.m * mp.g;

  auto stage_rows = [&](int st, int qt) {  // the per-query scalars of tile qt into stage st (plain loads)
    if (tid < kTile) {
      const int t = qt * kTile + tid;
      sZ[st * kTile + tid] = t < T ? zinv[t] : 0.f;
      sL[st * kTile + tid] = t < T ? dlz[t] : 0.f;
    }
  };
  load_tile<kTile, D>(sK, k, k0, T, tid, kThreads);
  load_tile<kTile, D>(sV, v, k0, T, tid, kThreads);
  load_tile<kTile, D>(sQ, q, k0, T, tid, kThreads);
  load_tile<kTile, D>(sO, dout, k0, T, tid, kThreads);
  cp_async_commit();
  stage_rows(0, kt);
  cp_async_wait_all();
  __syncthreads();

  uint32_t kf[KS][4], vf[KS][4];
#pragma unroll
  for (int s = 0; s < KS; ++s) {
    load_a(kf[s], sK, SD, lr, s * 16, lane);
    load_a(vf[s], sV, SD, lr, s * 16, lane);
  }
  float kn[2] = {0.f, 0.f};
  if (use_eps) row_sq_norms<D>(kn, sK, lr, g, tq);

  float dka[D / 8][4] = {}, dva[D / 8][4] = {};
  float rk[2] = {0.f, 0.f};
  for (int qt = kt, i = 0; qt < nqt; ++qt, ++i) {
    const int st = i & 1;
    if (i > 0) {
      cp_async_wait_all();
      __syncthreads();
    }
    if (qt + 1 < nqt) {
      load_tile<kTile, D>(sQ + (st ^ 1) * kTile * SD, q, (qt + 1) * kTile, T, tid, kThreads);
      load_tile<kTile, D>(sO + (st ^ 1) * kTile * SD, dout, (qt + 1) * kTile, T, tid, kThreads);
      cp_async_commit();
      stage_rows(st ^ 1, qt + 1);
    }
    const __nv_bfloat16* cQ = sQ + st * kTile * SD;
    const __nv_bfloat16* cO = sO + st * kTile * SD;
    const float* cZ = sZ + st * kTile;
    const float* cL = sL + st * kTile;
    float* cQn = sQn + st * kTile;
    if (use_eps) tile_sq_norms<D>(cQn, cQ, tid);
    const int q0 = qt * kTile;
#pragma unroll
    for (int qb = 0; qb < kTile / 16; ++qb) {
      if (q0 + qb * 16 + 15 < key_lo) continue;  // every query of the slice precedes this warp's keys
      float sc[G][2][4] = {};
#pragma unroll
      for (int a = 0; a < G; ++a)
#pragma unroll
        for (int s = 0; s < M / 16; ++s) {
          uint32_t bf[4];
          load_b_nk(bf, cQ, SD, qb * 16, a * M + s * 16, lane);
          mma_bf16(sc[a][0], kf[(a * M) / 16 + s], bf[0], bf[1]);
          mma_bf16(sc[a][1], kf[(a * M) / 16 + s], bf[2], bf[3]);
        }
      float dp[2][4] = {};
#pragma unroll
      for (int s = 0; s < KS; ++s) {
        uint32_t bf[4];
        load_b_nk(bf, cO, SD, qb * 16, s * 16, lane);
        mma_bf16(dp[0], vf[s], bf[0], bf[1]);
        mma_bf16(dp[1], vf[s], bf[2], bf[3]);
      }
      float pt[2][4], g2[2][4];
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1, key = h ? r1 : r0, qc = qb * 16 + nb * 8 + 2 * tq + (e & 1), query = q0 + qc;
          const bool vis = query >= key;
          float A = 0.f;
#pragma unroll
          for (int a = 0; a < G; ++a) A += sc[a][nb][e] * sc[a][nb][e];
          if (use_eps) A += mp.eps * (kn[h] + cQn[qc]) + eps_const;
          const float zq = cZ[qc];
          pt[nb][e] = vis ? A * zq : 0.f;
          const float gr = vis ? dp[nb][e] * zq - cL[qc] : 0.f;
          rk[h] += gr;
          g2[nb][e] = 2.f * gr;
        }
      uint32_t pp[4];
      pack_frag(pp, pt);
#pragma unroll
      for (int j = 0; j < D / 16; ++j) {
        uint32_t b[4];
        load_b_kn(b, cO, SD, j * 16, qb * 16, lane);
        mma_bf16(dva[2 * j], pp, b[0], b[1]);
        mma_bf16(dva[2 * j + 1], pp, b[2], b[3]);
      }
#pragma unroll
      for (int a = 0; a < G; ++a) {
        uint32_t pa[4];
        pack_product(pa, g2, sc[a]);
#pragma unroll
        for (int j = 0; j < M / 16; ++j) {
          uint32_t b[4];
          load_b_kn(b, cQ, SD, a * M + j * 16, qb * 16, lane);
          mma_bf16(dka[(a * M) / 8 + 2 * j], pa, b[0], b[1]);
          mma_bf16(dka[(a * M) / 8 + 2 * j + 1], pa, b[2], b[3]);
        }
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    rk[h] += __shfl_xor_sync(0xffffffffu, rk[h], 1);
    rk[h] += __shfl_xor_sync(0xffffffffu, rk[h], 2);
  }
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    const int col = j * 8 + 2 * tq;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = h ? r1 : r0;
      if (row >= T) continue;
      float x0 = dka[j][2 * h], x1 = dka[j][2 * h + 1];
      if (use_eps) {
        const float e2 = 2.f * mp.eps * rk[h];
        x0 += e2 * __bfloat162float(sK[(lr + g + 8 * h) * SD + col]);
        x1 += e2 * __bfloat162float(sK[(lr + g + 8 * h) * SD + col + 1]);
      }
      const std::int64_t off = static_cast<std::int64_t>(row) * D + col;
      *reinterpret_cast<__nv_bfloat162*>(dk + off) = __floats2bfloat162_rn(x0, x1);
      *reinterpret_cast<__nv_bfloat162*>(dv + off) = __floats2bfloat162_rn(dva[j][2 * h], dva[j][2 * h + 1]);
    }
  }
}

template <int G, int D>
void launch(const AttentionLaunch& p, const AttentionGradPtrs& a, cudaStream_t stream) {
  constexpr int smem = smem_bytes<D>();
  const AttnMap mp = attn_map(p);
  const int T = static_cast<int>(p.T);
  const unsigned nt = static_cast<unsigned>((p.T + kTile - 1) / kTile);
  const dim3 grid(nt, static_cast<unsigned>(p.B * p.H));
  float* zinv = static_cast<float*>(a.workspace);
  float* dlz = zinv + p.B * p.H * p.T;
  using bf = __nv_bfloat16;
  auto kq = dq_kernel<G, D>;
  ::memcap::cuda_detail::raise_dynamic_smem(kq, smem);
  kq<<<grid, kThreads, smem, stream>>>(mp, static_cast<const bf*>(a.q), static_cast<const bf*>(a.k),
                                      static_cast<const bf*>(a.v), static_cast<const bf*>(a.o),
                                      static_cast<const bf*>(a.dout), static_cast<bf*>(a.dq), zinv, dlz, T);
  MEMCAP_CUDA_CHECK_LAUNCH("quad_bwd::dq_kernel");
  if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[0], stream));
  auto kk = dkdv_kernel<G, D>;
  ::memcap::cuda_detail::raise_dynamic_smem(kk, smem);
  kk<<<grid, kThreads, smem, stream>>>(mp, static_cast<const bf*>(a.q), static_cast<const bf*>(a.k),
                                      static_cast<const bf*>(a.v), static_cast<const bf*>(a.dout), zinv, dlz,
                                      static_cast<bf*>(a.dk), static_cast<bf*>(a.dv), T);
  MEMCAP_CUDA_CHECK_LAUNCH("quad_bwd::dkdv_kernel");
}

}  // namespace quad_bwd

std::string quad_backward_unsupported(const AttentionLaunch& p) {
  using std::to_string;
  if (p.dtype != gpu::DType::bf16) return "the tensor-core backward runs bf16 inputs only";
  if (!p.normalized) return "the tensor-core backward covers the normalized readout only";
  if (p.map.kind != MapKind::BlockPsd) return "the tensor-core backward covers the M_g maps (m1, m2, m4) only";
  if (p.d != p.dv) return "the tensor-core backward needs d_v = d (got d = " + to_string(p.d) + ", d_v = " + to_string(p.dv) + ")";
  if (p.d != 32 && p.d != 64) return "the tensor-core backward covers d_head 32 and 64 (got " + to_string(p.d) + ")";
  const int g = p.map.g;
  if ((g != 1 && g != 2 && g != 4) || (p.d / g) % 16 != 0)
    return "the tensor-core backward needs g in {1, 2, 4} and a block width d / g that is a multiple of 16 (d = " +
           to_string(p.d) + ", g = " + to_string(g) + ")";
  if (p.B < 1 || p.H < 1 || p.T < 1) return "sizes must be >= 1";
  if (p.B * p.H > 65535) return "B·H must be <= 65535 (got " + to_string(p.B * p.H) + ")";
  if (p.T > (std::int64_t{1} << 30)) return "T must be <= 2^30 (got " + to_string(p.T) + ")";
  return {};
}

std::size_t quad_backward_workspace_bytes(const AttentionLaunch& p) {
  return static_cast<std::size_t>(2 * p.B * p.H * p.T) * sizeof(float);
}

void launch_quad_backward(const AttentionLaunch& p, const AttentionGradPtrs& a, cudaStream_t stream) {
  const std::string why = quad_backward_unsupported(p);
  if (!why.empty()) cuda_detail::throw_user_error("quadratic KATA backward: " + why);
  const int g = p.map.g;
  if (p.d == 64) {
    if (g == 1) quad_bwd::launch<1, 64>(p, a, stream);
    else if (g == 2) quad_bwd::launch<2, 64>(p, a, stream);
    else quad_bwd::launch<4, 64>(p, a, stream);
  } else {
    if (g == 1) quad_bwd::launch<1, 32>(p, a, stream);
    else quad_bwd::launch<2, 32>(p, a, stream);
  }
}

}  // namespace memcap::kata::cuda

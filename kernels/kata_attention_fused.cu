// Chunked causal KATA attention with the state on chip (spec kata.md §5.2), bf16, d = d_v = 64, C = 64.
// One thread-block cluster per (b, h, segment of chunks). CTA r of the cluster owns FPC feature blocks of 64
// features and keeps their slice of the state S (fp32, registers: warp (mt, h) holds feature rows 16mt.. of each
// block, value columns 32h..) and Z (fp32) for the whole segment. Per chunk, for each of its feature blocks, it
// forms ψ(K_c), ψ(Q_c) in shared memory (kata_feature_map.cuh), reads out ψ(Q_c) S into a partial numerator
// (and ψ(Q_c)·Z into a partial denominator), then updates S += ψ(K_c)ᵀ V_c, Z += ψ(K_c)ᵀ1 on tensor cores.
// The intra-chunk term is the closed form (PSD maps: the (m-tile, key-half) units spread over the cluster's
// CTAs) or ψ(q)·ψ(k) (n_ψ = d maps, one CTA). The partials are summed across the cluster through distributed
// shared memory, divided, and written. Nothing of the state goes to memory: per head the pass moves q, k, v in
// and o out. With segments > 1 (small B·H) a first pass forms every segment's local state (fp32) and an
// exclusive scan over segments gives each segment its entering state, so T is split across clusters.
#include <cooperative_groups.h>

#include "cuda_check.cuh"
#include "smem_limit.cuh"
#include "kata_attention_common.cuh"
#include "kata_attention_impl.cuh"
#include "kata_attention_variants.cuh"

namespace memcap::kata::cuda {
namespace {

namespace cg = cooperative_groups;
using bf16 = __nv_bfloat16;

constexpr int kC = 64, kD = 64, kSD = kD + 8, kNT = 256, kRS = 72;  // chunk, width, smem stride, threads, red stride
constexpr int kRedRows = 72;  // >= ncl * ceil(64 / ncl) for every ncl <= 8

__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

template <int FPC>
struct FusedSmem {  // byte offsets
  static constexpr int tile = kC * kSD * 2;                 // one 64 x 64 bf16 tile, padded
  static constexpr int raw = 0;                             // 2 buffers x {Q, K, V}
  static constexpr int psik = raw + 6 * tile;
  static constexpr int psiq = psik + tile;
  static constexpr int st = psiq + tile;                    // S of one feature block, bf16 [64 features][72]
  static constexpr int z4 = st + tile;                      // [4][64] fp32: Z partials entering the chunk
  static constexpr int nq = z4 + 4 * 64 * 4;                // [64] fp32 query row norms / Lorentz aux
  static constexpr int nk = nq + 64 * 4;                    // [64] fp32 key row norms / aux
  // Partials pushed here by every CTA of the cluster for the rows this CTA owns (row i belongs to CTA i % ncl):
  // [ncl][ceil(64 / ncl)][kRS] numerator, <= 72 rows for any ncl <= 8, and the matching denominators.
  static constexpr int red = nk + 64 * 4;
  static constexpr int rden = red + kRedRows * kRS * 4;
  static constexpr int slots = rden + kRedRows * 4;         // FPC * 64 FeatureSlot
  static constexpr int bytes = slots + FPC * 64 * static_cast<int>(sizeof(FeatureSlot));
};

// KIND: a PSD kind (closed-form intra-chunk scores, G blocks) or a family kind (n_ψ = d, FPC = 1).
template <MapKind KIND, int G, int FPC>
__global__ void __launch_bounds__(kNT, FPC <= 3 ? 2 : 1)
    fused_chunk_kernel(AttnMap mp, const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                       const float* __restrict__ s_init, const float* __restrict__ z_init, bf16* __restrict__ out,
                       int T, int nc, int cps, int ncl) {
  constexpr bool PSD = KIND == MapKind::BlockPsd || KIND == MapKind::SumPsd;
  constexpr int M = PSD ? kD / G : kD;
  using L = FusedSmem<FPC>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sPsiK = reinterpret_cast<bf16*>(smem_raw + L::psik);
  bf16* sPsiQ = reinterpret_cast<bf16*>(smem_raw + L::psiq);
  bf16* sS = reinterpret_cast<bf16*>(smem_raw + L::st);
  float* sZ4 = reinterpret_cast<float*>(smem_raw + L::z4);
  float* sNq = reinterpret_cast<float*>(smem_raw + L::nq);
  float* sNk = reinterpret_cast<float*>(smem_raw + L::nk);
  float* red = reinterpret_cast<float*>(smem_raw + L::red);
  float* rden = reinterpret_cast<float*>(smem_raw + L::rden);
  FeatureSlot* sSlot = reinterpret_cast<FeatureSlot*>(smem_raw + L::slots);
  cg::cluster_group cluster = cg::this_cluster();

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int mt = warp & 3, hh = warp >> 2;  // warp's 16-row m-tile and half (value columns / features / keys)
  const int rank = static_cast<int>(blockIdx.x), seg = static_cast<int>(blockIdx.y);
  const std::int64_t bh = blockIdx.z;
  const int nfb = mp.n_padded / 64;
  const int c_begin = seg * cps, c_end = min(nc, c_begin + cps);
  q += bh * T * kD;
  k += bh * T * kD;
  v += bh * T * kD;
  out += bh * T * kD;

  for (int i = tid; i < FPC * 64; i += kNT) {  // this CTA's feature slots, once
    const int f = (rank * FPC + i / 64) * 64 + i % 64;
    if constexpr (PSD) sSlot[i] = make_slot<KIND>(mp, f);
    else sSlot[i] = make_slot<KIND>(mp, f);
  }
  // State slice in registers; the segment's entering state from the scan (segments > 1) or zero.
  float accS[FPC][4][4];
  float zp[FPC];
#pragma unroll
  for (int fb = 0; fb < FPC; ++fb) {
    zp[fb] = 0.f;
    const int gfb = rank * FPC + fb;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) accS[fb][j][e] = 0.f;
    if (s_init != nullptr && gfb < nfb) {
      const std::int64_t base = (bh * gridDim.y + seg) * static_cast<std::int64_t>(mp.n_padded) + gfb * 64;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = hh * 32 + j * 8 + 2 * tq;
        const float* r0 = s_init + (base + mt * 16 + g) * kD + col;
        const float* r1 = s_init + (base + mt * 16 + g + 8) * kD + col;
        accS[fb][j][0] = r0[0];
        accS[fb][j][1] = r0[1];
        accS[fb][j][2] = r1[0];
        accS[fb][j][3] = r1[1];
      }
      if ((tid >> 6) == 0) zp[fb] = z_init[base + (tid & 63)];
    }
  }

  auto raw_tile = [&](int buf, int which) { return reinterpret_cast<bf16*>(smem_raw + L::raw + (buf * 3 + which) * L::tile); };
  if (c_begin < c_end) {
    load_tile<kC, kD>(raw_tile(0, 0), q, c_begin * kC, T, tid, kNT);
    load_tile<kC, kD>(raw_tile(0, 1), k, c_begin * kC, T, tid, kNT);
    load_tile<kC, kD>(raw_tile(0, 2), v, c_begin * kC, T, tid, kNT);
  }
  cp_async_commit();
  const bool use_eps = PSD && mp.eps != 0.f;
  const bool need_rows = use_eps || mp.kind == MapKind::Lorentz;
  const float eps_lin = KIND == MapKind::SumPsd ? mp.eps * mp.scale : mp.eps;
  const float eps_const = KIND == MapKind::SumPsd ? mp.eps * mp.eps * mp.m : mp.eps * mp.eps * mp.m * mp.g;
  const float c2 = mp.scale * mp.scale;

  for (int c = c_begin; c < c_end; ++c) {
    const int buf = (c - c_begin) & 1, t0 = c * kC;
    cp_async_wait_all();
    __syncthreads();
    if (c + 1 < c_end) {
      load_tile<kC, kD>(raw_tile(buf ^ 1, 0), q, (c + 1) * kC, T, tid, kNT);
      load_tile<kC, kD>(raw_tile(buf ^ 1, 1), k, (c + 1) * kC, T, tid, kNT);
      load_tile<kC, kD>(raw_tile(buf ^ 1, 2), v, (c + 1) * kC, T, tid, kNT);
    }
    cp_async_commit();
    const bf16* rQ = raw_tile(buf, 0);
    const bf16* rK = raw_tile(buf, 1);
    const bf16* rV = raw_tile(buf, 2);
    if (need_rows) {  // per-row scalars: ‖q‖², ‖k‖² (PSD ε terms) or the Lorentz aux
      if (tid < 2 * kC) {
        const bf16* row = (tid < kC ? rK : rQ) + (tid % kC) * kSD;
        (tid < kC ? sNk : sNq)[tid % kC] = PSD ? row_sq_norm(row, kD) : psi_aux<KIND>(mp, row);
      }
      __syncthreads();
    }
    float acc[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
    float rs[2] = {0.f, 0.f};

#pragma unroll
    for (int fb = 0; fb < FPC; ++fb) {
      if (rank * FPC + fb >= nfb) continue;  // padding block of the last CTA (uniform over the CTA)
      // (a) ψ(K_c), ψ(Q_c) of this block; S entering the chunk as bf16; Z partials entering the chunk
      {
        const FeatureSlot slot = sSlot[fb * 64 + (tid & 63)];
        const int f = tid & 63;
        float zl = 0.f;
        for (int t = tid >> 6; t < kC; t += 4) {
          const float xk = t0 + t < T ? eval_slot<KIND>(mp, slot, rK + t * kSD, PSD ? 0.f : sNk[t]) : 0.f;
          const bf16 bk = __float2bfloat16(xk);
          sPsiK[t * kSD + f] = bk;
          zl += __bfloat162float(bk);
          sPsiQ[t * kSD + f] = __float2bfloat16(eval_slot<KIND>(mp, slot, rQ + t * kSD, PSD ? 0.f : sNq[t]));
        }
        sZ4[(tid >> 6) * 64 + f] = zp[fb];
        zp[fb] += zl;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int col = hh * 32 + j * 8 + 2 * tq;
          *reinterpret_cast<__nv_bfloat162*>(sS + (mt * 16 + g) * kSD + col) =
              __floats2bfloat162_rn(accS[fb][j][0], accS[fb][j][1]);
          *reinterpret_cast<__nv_bfloat162*>(sS + (mt * 16 + g + 8) * kSD + col) =
              __floats2bfloat162_rn(accS[fb][j][2], accS[fb][j][3]);
        }
      }
      __syncthreads();
      // (b) readout ψ(Q) S over this warp's 32 features, denominator ψ(Q)·Z
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        uint32_t a[4];
        load_a(a, sPsiQ, kSD, mt * 16, hh * 32 + ks * 16, lane);
        mma_rows_x_tile<kD>(acc, a, sS, kSD, hh * 32 + ks * 16, lane);
      }
      if (mp.normalized) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int f = hh * 32 + tq * 8 + i;
          const float z = sZ4[f] + sZ4[64 + f] + sZ4[128 + f] + sZ4[192 + f];
          rs[0] += __bfloat162float(sPsiQ[(mt * 16 + g) * kSD + f]) * z;
          rs[1] += __bfloat162float(sPsiQ[(mt * 16 + g + 8) * kSD + f]) * z;
        }
      }
      if constexpr (!PSD) {  // intra-chunk P = ψ(Q) ψ(K)ᵀ for keys 32hh.. (n_ψ = 64: one block, one CTA)
        float p[4][4] = {};
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          uint32_t a[4];
          load_a(a, sPsiQ, kSD, mt * 16, ks * 16, lane);
#pragma unroll
          for (int nb2 = 0; nb2 < 2; ++nb2) {
            uint32_t b[4];
            load_b_nk(b, sPsiK, kSD, hh * 32 + nb2 * 16, ks * 16, lane);
            mma_bf16(p[2 * nb2], a, b[0], b[1]);
            mma_bf16(p[2 * nb2 + 1], a, b[2], b[3]);
          }
        }
        uint32_t pa[2][4];
#pragma unroll
        for (int nb = 0; nb < 4; ++nb) {
          const int key = hh * 32 + nb * 8 + 2 * tq, r0 = mt * 16 + g, r1 = r0 + 8;
          if (key > r0) p[nb][0] = 0.f;
          if (key + 1 > r0) p[nb][1] = 0.f;
          if (key > r1) p[nb][2] = 0.f;
          if (key + 1 > r1) p[nb][3] = 0.f;
          rs[0] += p[nb][0] + p[nb][1];
          rs[1] += p[nb][2] + p[nb][3];
          pa[nb >> 1][(nb & 1) * 2 + 0] = pack_bf16(p[nb][0], p[nb][1]);
          pa[nb >> 1][(nb & 1) * 2 + 1] = pack_bf16(p[nb][2], p[nb][3]);
        }
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) mma_rows_x_tile<kD>(acc, pa[kk], rV, kSD, hh * 32 + kk * 16, lane);
      }
      // (c) S_fb += ψ(K)ᵀ V for this warp's 16 features x 32 value columns
#pragma unroll
      for (int ks = 0; ks < kC / 16; ++ks) {
        uint32_t a[4];
        load_a_trans(a, sPsiK, kSD, mt * 16, ks * 16, lane);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          uint32_t b[4];
          load_b_kn(b, rV, kSD, hh * 32 + j * 16, ks * 16, lane);
          mma_bf16(accS[fb][2 * j], a, b[0], b[1]);
          mma_bf16(accS[fb][2 * j + 1], a, b[2], b[3]);
        }
      }
      __syncthreads();
    }

    // intra-chunk closed form (PSD maps): the (m-tile, 16-key block) pairs kb <= mt spread over the cluster's
    // warps of that m-tile: pair (mt, kb) on rank kb % ncl, half (kb / ncl) % 2.
    if constexpr (PSD) {
      uint32_t qf[4][4];
      bool have_q = false;
      const float qn0 = use_eps ? sNq[mt * 16 + g] : 0.f, qn1 = use_eps ? sNq[mt * 16 + g + 8] : 0.f;
#pragma unroll
      for (int kb = 0; kb < 4; ++kb) {
        if (kb > mt || kb % ncl != rank || (kb / ncl) % 2 != hh) continue;
        if (!have_q) {
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) load_a(qf[kk], rQ, kSD, mt * 16, kk * 16, lane);
          have_q = true;
        }
        float p[2][4] = {};
        psd_pair_squares<KIND, G, M>(p, qf, rK, kSD, kb * 16, lane);
        psd_score_terms<KIND>(p, c2, use_eps, eps_lin, eps_const, qn0, qn1, sNk + kb * 16, tq);
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
          const int key = kb * 16 + nb * 8 + 2 * tq, r0 = mt * 16 + g, r1 = r0 + 8;
          if (key > r0) p[nb][0] = 0.f;
          if (key + 1 > r0) p[nb][1] = 0.f;
          if (key > r1) p[nb][2] = 0.f;
          if (key + 1 > r1) p[nb][3] = 0.f;
          rs[0] += p[nb][0] + p[nb][1];
          rs[1] += p[nb][2] + p[nb][3];
        }
        uint32_t pa[4];
        pack_scores(pa, p);
        mma_rows_x_tile<kD>(acc, pa, rV, kSD, kb * 16, lane);
      }
    }

    // (d) this CTA's partial numerator and denominator: the two halves summed in shared memory (the ψ tiles are
    // free now), then each row pushed to the CTA that owns it (row i -> rank i % ncl, slot [rank][i / ncl]).
    rs[0] += __shfl_xor_sync(0xffffffffu, rs[0], 1);
    rs[0] += __shfl_xor_sync(0xffffffffu, rs[0], 2);
    rs[1] += __shfl_xor_sync(0xffffffffu, rs[1], 1);
    rs[1] += __shfl_xor_sync(0xffffffffu, rs[1], 2);
    float* tmp = reinterpret_cast<float*>(smem_raw + L::psik);  // [64][kRS] + [64] (the ψ tiles' space)
    float* tmp_den = tmp + kC * kRS;
    const int r0 = mt * 16 + g, r1 = r0 + 8;
    if (hh == 0) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = j * 8 + 2 * tq;
        *reinterpret_cast<float2*>(tmp + r0 * kRS + col) = make_float2(acc[j][0], acc[j][1]);
        *reinterpret_cast<float2*>(tmp + r1 * kRS + col) = make_float2(acc[j][2], acc[j][3]);
      }
      if (tq == 0) {
        tmp_den[r0] = rs[0];
        tmp_den[r1] = rs[1];
      }
    }
    __syncthreads();
    const int rows_cap = (kC + ncl - 1) / ncl;
    if (c > c_begin) cluster_wait();  // every CTA has summed the previous chunk's pushes
    if (hh == 1) {
      float* dst0 = cluster.map_shared_rank(red, r0 % ncl) + (rank * rows_cap + r0 / ncl) * kRS;
      float* dst1 = cluster.map_shared_rank(red, r1 % ncl) + (rank * rows_cap + r1 / ncl) * kRS;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = j * 8 + 2 * tq;
        const float2 x0 = *reinterpret_cast<const float2*>(tmp + r0 * kRS + col);
        const float2 x1 = *reinterpret_cast<const float2*>(tmp + r1 * kRS + col);
        *reinterpret_cast<float2*>(dst0 + col) = make_float2(x0.x + acc[j][0], x0.y + acc[j][1]);
        *reinterpret_cast<float2*>(dst1 + col) = make_float2(x1.x + acc[j][2], x1.y + acc[j][3]);
      }
      if (tq == 0) {
        cluster.map_shared_rank(rden, r0 % ncl)[rank * rows_cap + r0 / ncl] = tmp_den[r0] + rs[0];
        cluster.map_shared_rank(rden, r1 % ncl)[rank * rows_cap + r1 / ncl] = tmp_den[r1] + rs[1];
      }
    }
    cluster_arrive();
    cluster_wait();  // every push of this chunk has landed
    // (e) rows i = rank + u * ncl: sum the ncl pushed partials (local shared memory), divide, write
    const int my_rows = (kC - rank + ncl - 1) / ncl;
    for (int it = tid; it < my_rows * 16; it += kNT) {
      const int u = it >> 4, i = rank + u * ncl, c4 = (it & 15) * 4;
      if (t0 + i >= T) continue;
      float4 num = make_float4(0.f, 0.f, 0.f, 0.f);
      float den = 0.f;
      for (int r = 0; r < ncl; ++r) {
        const float4 x = *reinterpret_cast<const float4*>(red + (r * rows_cap + u) * kRS + c4);
        num.x += x.x;
        num.y += x.y;
        num.z += x.z;
        num.w += x.w;
        den += rden[r * rows_cap + u];
      }
      const float inv = mp.normalized ? (den != 0.f ? 1.f / den : 0.f) : 1.f;
      __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(t0 + i) * kD + c4);
      o2[0] = __floats2bfloat162_rn(num.x * inv, num.y * inv);
      o2[1] = __floats2bfloat162_rn(num.z * inv, num.w * inv);
    }
    cluster_arrive();  // waited on before the next chunk's pushes overwrite red
  }
  if (c_begin < c_end) cluster_wait();  // no CTA leaves while others may still read its shared memory
}

struct FusedShape {
  int nfb, fpc, ncl;
};
FusedShape fused_shape(const AttentionLaunch& p) {
  const int nfb = device_map(p.map).n_padded / 64;
  const int fpc = p.map.is_linear_family() ? 1 : (nfb > 24 ? 5 : 3);
  return {nfb, fpc, (nfb + fpc - 1) / fpc};
}

template <MapKind KIND, int G, int FPC>
void launch_kernel(const AttentionLaunch& p, int segments, int cps, const float* s_init, const float* z_init,
                   const AttentionPtrs& a, cudaStream_t stream) {
  const FusedShape fs = fused_shape(p);
  auto kern = fused_chunk_kernel<KIND, G, FPC>;
  constexpr int smem = FusedSmem<FPC>::bytes;
  ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(fs.ncl), static_cast<unsigned>(segments), static_cast<unsigned>(p.B * p.H));
  cfg.blockDim = dim3(kNT);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(fs.ncl);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const int nc = static_cast<int>((p.T + kC - 1) / kC);
  MEMCAP_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kern, attn_map(p), static_cast<const bf16*>(a.q),
                                       static_cast<const bf16*>(a.k), static_cast<const bf16*>(a.v), s_init, z_init,
                                       static_cast<bf16*>(a.out), static_cast<int>(p.T), nc, cps, fs.ncl));
  MEMCAP_CUDA_CHECK_LAUNCH("fused_chunk_kernel");
}

template <MapKind KIND>
void launch_psd(const AttentionLaunch& p, int segments, int cps, const float* s_init, const float* z_init,
                const AttentionPtrs& a, cudaStream_t stream) {
  const int fpc = fused_shape(p).fpc;
  // At d = 64 the feature blocks per CTA follow from g: g = 1 has 33 blocks (5 per CTA, 7 CTAs), g = 2 and 4
  // have 17 or fewer (3 per CTA).
  if (p.map.g == 1 && fpc == 5) launch_kernel<KIND, 1, 5>(p, segments, cps, s_init, z_init, a, stream);
  else if (p.map.g == 2 && fpc == 3) launch_kernel<KIND, 2, 3>(p, segments, cps, s_init, z_init, a, stream);
  else if (p.map.g == 4 && fpc == 3) launch_kernel<KIND, 4, 3>(p, segments, cps, s_init, z_init, a, stream);
  else cuda_detail::throw_device_error("fused chunked kernel: no instantiation for this g (internal)");
}

}  // namespace

bool fused_supported(const AttentionLaunch& p) {
  if (p.dtype != gpu::DType::bf16 || p.d != kD || p.dv != kD || p.chunk != kC) return false;
  if (!p.map.is_psd() && !p.map.is_linear_family()) return false;
  if (p.map.is_psd()) {
    const int fpc = fused_shape(p).fpc;
    if (!((p.map.g == 1 && fpc == 5) || ((p.map.g == 2 || p.map.g == 4) && fpc == 3))) return false;
  }
  return fused_shape(p).ncl <= 8;  // portable cluster size
}

int fused_segments(const AttentionLaunch& p, bool split) {
  if (!split) return 1;
  const int sms = current_arch().sms;
  const std::int64_t nc = (p.T + kC - 1) / kC, ctas = p.B * p.H * fused_shape(p).ncl;
  const std::int64_t want = (2 * static_cast<std::int64_t>(sms) + ctas - 1) / ctas;  // two CTAs per SM
  const std::int64_t most = nc / 4 > 1 ? nc / 4 : 1;                                   // >= 4 chunks per segment
  std::int64_t segs = want < most ? want : most;
  if (segs < 1) segs = 1;
  if (segs > 65535) segs = 65535;
  const std::int64_t cps = (nc + segs - 1) / segs;
  return static_cast<int>((nc + cps - 1) / cps);  // no empty segment
}

// Segments > 1: s_loc, s_pre fp32 [bh][seg][np][64], z_loc, z_pre fp32 [bh][seg][np].
std::size_t fused_workspace(const AttentionLaunch& p, int segments) {
  if (segments <= 1) return 0;
  const std::size_t np = device_map(p.map).n_padded, bh = p.B * p.H;
  return 2 * bh * segments * np * (kD + 1) * sizeof(float);
}

void launch_fused(const AttentionLaunch& p, int segments, const AttentionPtrs& a, cudaStream_t stream) {
  const int nc = static_cast<int>((p.T + kC - 1) / kC);
  const int cps = (nc + segments - 1) / segments;
  const float *s_init = nullptr, *z_init = nullptr;
  if (segments > 1) {
    const std::int64_t np = device_map(p.map).n_padded, bh = p.B * p.H;
    float* s_loc = static_cast<float*>(a.workspace);
    float* z_loc = s_loc + bh * segments * np * kD;
    float* s_pre = z_loc + bh * segments * np;
    float* z_pre = s_pre + bh * segments * np * kD;
    launch_segment_states(p, cps, a.k, a.v, s_loc, z_loc, stream);
    if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[0], stream));
    launch_scan_sequential(s_loc, s_pre, gpu::DType::f32, bh, segments, np * kD, stream);
    launch_scan_sequential(z_loc, z_pre, gpu::DType::f32, bh, segments, np, stream);
    if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[1], stream));
    s_init = s_pre;
    z_init = z_pre;
  } else if (p.stage_events) {  // state and output are one kernel: the whole time is the output stage
    MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[0], stream));
    MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[1], stream));
  }
  switch (p.map.kind) {
    case MapKind::BlockPsd: launch_psd<MapKind::BlockPsd>(p, segments, cps, s_init, z_init, a, stream); break;
    case MapKind::SumPsd: launch_psd<MapKind::SumPsd>(p, segments, cps, s_init, z_init, a, stream); break;
    case MapKind::Orthant: launch_kernel<MapKind::Orthant, 1, 1>(p, segments, cps, s_init, z_init, a, stream); break;
    case MapKind::Lorentz: launch_kernel<MapKind::Lorentz, 1, 1>(p, segments, cps, s_init, z_init, a, stream); break;
    default: launch_kernel<MapKind::Linear, 1, 1>(p, segments, cps, s_init, z_init, a, stream); break;
  }
}

}  // namespace memcap::kata::cuda

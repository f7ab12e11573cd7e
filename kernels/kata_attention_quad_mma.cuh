// Quadratic causal KATA attention forward on tensor cores with mma.sync (spec kata.md §5.1), any head width
// D in {32, 64, 128} (d_v = d), every attention map: FlashAttention-2 tiling with no exponentials. PSD maps
// (M_g, Σ_g, g in {1,2,4}) score in closed form: P = Σ_a (q_a·k_a)² (M_g) or c² Σ_{a,b} (q_a·k_b)² (Σ_g) plus the
// ε rank-1 terms, squares taken after fp32 accumulation; the n_ψ = d maps (linear, orthant, Lorentz) apply ψ
// to the Q and K tiles in shared memory (kata_feature_map.cuh) and score P = ψ(q)·ψ(k) (the linear map is plain
// causal linear attention (QKᵀ ⊙ M) V, unnormalized). Internal to kernels/kata_attention_quad_mma_d*.cu.
#pragma once
#include "cuda_check.cuh"
#include "smem_limit.cuh"
#include "kata_attention_common.cuh"

#include <type_traits>

namespace memcap::kata::cuda {
namespace quad_mma {

constexpr int kBr = 128, kBc = 64;

// ψ applied in place to the rows of a bf16 smem tile (stride W + 8), for the maps whose ψ_f reads only x_f
// (and the per-row aux): orthant, Lorentz. aux: ROWS floats of scratch. Ends with __syncthreads.
template <MapKind K, int ROWS, int W>
__device__ __forceinline__ void psi_tile_inplace(const DeviceMap& mp, __nv_bfloat16* tile, float* aux, int tid,
                                                 int nthreads) {
  constexpr int S = W + 8;
  if constexpr (K == MapKind::Lorentz) {
    for (int r = tid; r < ROWS; r += nthreads) aux[r] = psi_aux<K>(mp, tile + r * S);
    __syncthreads();
  }
  for (int e = tid; e < ROWS * W; e += nthreads) {
    const int r = e / W, f = e % W;
    __nv_bfloat16* row = tile + r * S;
    const float v = eval_slot<K>(mp, make_slot<K>(mp, f), row, K == MapKind::Lorentz ? aux[r] : 0.f);
    row[f] = __float2bfloat16(v);
  }
  __syncthreads();
}

// MT m-tiles (16 query rows each) per warp; kBr / (16 MT) warps; each K / V fragment feeds MT mma.
template <MapKind KIND, int G, int D, int MT>
__global__ void __launch_bounds__(kBr / MT * 2) quad_mma_kernel(AttnMap mp, const __nv_bfloat16* __restrict__ q,
                                                                const __nv_bfloat16* __restrict__ k,
                                                                const __nv_bfloat16* __restrict__ v,
                                                                __nv_bfloat16* __restrict__ out, int T) {
  constexpr int NT = kBr / MT * 2;
  constexpr int SD = D + 8;
  constexpr bool PSD = KIND == MapKind::BlockPsd || KIND == MapKind::SumPsd;
  constexpr bool XFORM = KIND == MapKind::Orthant || KIND == MapKind::Lorentz;
  constexpr bool NORM = KIND != MapKind::Linear;  // the linear map is always read out unnormalized
  constexpr int M = PSD ? D / G : D;
  constexpr int KSD = D / 16;
  static_assert(!PSD || M % 16 == 0 || M == 8, "PSD block width must be 8 or a multiple of 16");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* sK = sQ + kBr * SD;
  __nv_bfloat16* sV = sK + 2 * kBc * SD;
  float* sKn = reinterpret_cast<float*>(sV + 2 * kBc * SD);  // 2 x kBc key norms (eps) / kBr Lorentz aux

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int nqt = (T + kBr - 1) / kBr;
  const int qt = nqt - 1 - blockIdx.x;  // longest query tiles first
  const std::int64_t bh = blockIdx.y;
  q += bh * T * D;
  k += bh * T * D;
  v += bh * T * D;
  out += bh * T * D;
  const int q0 = qt * kBr;
  const int row_lo = q0 + warp * 16 * MT;
  const int row_hi = row_lo + 16 * MT - 1;
  const int nkt = min((q0 + kBr - 1) / kBc + 1, (T + kBc - 1) / kBc);
  const bool use_eps = PSD && mp.eps != 0.f;
  const float c2 = mp.scale * mp.scale;
  const float eps_lin = KIND == MapKind::SumPsd ? mp.eps * mp.scale : mp.eps;
  const float eps_const = KIND == MapKind::SumPsd ? mp.eps * mp.eps * mp.m : mp.eps * mp.eps * mp.m * mp.g;

  load_tile<kBr, D>(sQ, q, q0, T, tid, NT);
  load_tile<kBc, D>(sK, k, 0, T, tid, NT);
  load_tile<kBc, D>(sV, v, 0, T, tid, NT);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  if constexpr (XFORM) psi_tile_inplace<KIND, kBr, D>(mp, sQ, sKn, tid, NT);

  uint32_t qf[MT][KSD][4];
  float qn[MT][2] = {};
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int r = warp * 16 * MT + mt * 16;
#pragma unroll
    for (int kk = 0; kk < KSD; ++kk) load_a(qf[mt][kk], sQ, SD, r, kk * 16, lane);
    if (use_eps) {
      for (int c = tq * (D / 4); c < (tq + 1) * (D / 4); ++c) {
        const float a = __bfloat162float(sQ[(r + g) * SD + c]);
        const float b = __bfloat162float(sQ[(r + g + 8) * SD + c]);
        qn[mt][0] += a * a;
        qn[mt][1] += b * b;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        qn[mt][h] += __shfl_xor_sync(0xffffffffu, qn[mt][h], 1);
        qn[mt][h] += __shfl_xor_sync(0xffffffffu, qn[mt][h], 2);
      }
    }
  }
  if constexpr (XFORM) __syncthreads();  // sKn held the Q aux; the key loop reuses it

  float acc[MT][D / 8][4] = {};
  float rs[MT][2] = {};
  for (int kt = 0; kt < nkt; ++kt) {
    if (kt > 0) {
      cp_async_wait_all();
      __syncthreads();
    }
    if (kt + 1 < nkt) {
      const int st = (kt + 1) & 1;
      load_tile<kBc, D>(sK + st * kBc * SD, k, (kt + 1) * kBc, T, tid, NT);
      load_tile<kBc, D>(sV + st * kBc * SD, v, (kt + 1) * kBc, T, tid, NT);
      cp_async_commit();
    }
    __nv_bfloat16* cK = sK + (kt & 1) * kBc * SD;
    const __nv_bfloat16* cV = sV + (kt & 1) * kBc * SD;
    float* cKn = sKn + (kt & 1) * kBc;
    if constexpr (XFORM) psi_tile_inplace<KIND, kBc, D>(mp, cK, cKn, tid, NT);
    if (use_eps) {
      if (tid < kBc) cKn[tid] = row_sq_norm(cK + tid * SD, D);
      __syncthreads();
    }
    const int k0 = kt * kBc;
    if (k0 > row_hi) continue;  // this warp's rows see none of these keys
#pragma unroll
    for (int kb = 0; kb < kBc / 16; ++kb) {
      if (k0 + kb * 16 > row_hi) break;
      const int kbase = k0 + kb * 16;
      float p[MT][2][4] = {};
      if constexpr (PSD) {
        psd_pair_squares<KIND, G, M>(p, qf, cK, SD, kb * 16, lane);
      } else {
#pragma unroll
        for (int ks = 0; ks < KSD; ++ks) {
          uint32_t bf[4];
          load_b_nk(bf, cK, SD, kb * 16, ks * 16, lane);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(p[mt][0], qf[mt][ks], bf[0], bf[1]);
            mma_bf16(p[mt][1], qf[mt][ks], bf[2], bf[3]);
          }
        }
      }
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int r0 = row_lo + mt * 16 + g, r1 = r0 + 8;
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
          if (KIND == MapKind::SumPsd)
#pragma unroll
            for (int e = 0; e < 4; ++e) p[mt][nb][e] *= c2;
          if (use_eps) {
            const float kn0 = cKn[kb * 16 + nb * 8 + 2 * tq], kn1 = cKn[kb * 16 + nb * 8 + 2 * tq + 1];
            p[mt][nb][0] += eps_lin * (qn[mt][0] + kn0) + eps_const;
            p[mt][nb][1] += eps_lin * (qn[mt][0] + kn1) + eps_const;
            p[mt][nb][2] += eps_lin * (qn[mt][1] + kn0) + eps_const;
            p[mt][nb][3] += eps_lin * (qn[mt][1] + kn1) + eps_const;
          }
          if (kbase + 15 > row_lo + mt * 16) {  // diagonal: causal mask key > row
            const int key = kbase + nb * 8 + 2 * tq;
            if (key > r0) p[mt][nb][0] = 0.f;
            if (key + 1 > r0) p[mt][nb][1] = 0.f;
            if (key > r1) p[mt][nb][2] = 0.f;
            if (key + 1 > r1) p[mt][nb][3] = 0.f;
          }
        }
        pa[mt][0] = pack_bf16(p[mt][0][0], p[mt][0][1]);
        pa[mt][1] = pack_bf16(p[mt][0][2], p[mt][0][3]);
        pa[mt][2] = pack_bf16(p[mt][1][0], p[mt][1][1]);
        pa[mt][3] = pack_bf16(p[mt][1][2], p[mt][1][3]);
        if constexpr (NORM) {
          rs[mt][0] += p[mt][0][0] + p[mt][0][1] + p[mt][1][0] + p[mt][1][1];
          rs[mt][1] += p[mt][0][2] + p[mt][0][3] + p[mt][1][2] + p[mt][1][3];
        }
      }
#pragma unroll
      for (int j = 0; j < D / 16; ++j) {
        uint32_t bv[4];
        load_b_kn(bv, cV, SD, j * 16, kb * 16, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(acc[mt][2 * j], pa[mt], bv[0], bv[1]);
          mma_bf16(acc[mt][2 * j + 1], pa[mt], bv[2], bv[3]);
        }
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2] = {1.f, 1.f};
    if (NORM && mp.normalized) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float r = rs[mt][h];
        r += __shfl_xor_sync(0xffffffffu, r, 1);
        r += __shfl_xor_sync(0xffffffffu, r, 2);
        inv[h] = r != 0.f ? 1.f / r : 0.f;
      }
    }
    const int r0 = row_lo + mt * 16 + g, r1 = r0 + 8;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int col = j * 8 + 2 * tq;
      if (r0 < T)
        *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(r0) * D + col) =
            __floats2bfloat162_rn(acc[mt][j][0] * inv[0], acc[mt][j][1] * inv[0]);
      if (r1 < T)
        *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(r1) * D + col) =
            __floats2bfloat162_rn(acc[mt][j][2] * inv[1], acc[mt][j][3] * inv[1]);
    }
  }
}

template <MapKind KIND, int G, int D, int MT>
void launch_kernel(const AttentionLaunch& p, const void* q, const void* k, const void* v, void* out,
                   cudaStream_t stream) {
  constexpr int SD = D + 8;
  constexpr int smem = (kBr + 4 * kBc) * SD * 2 + (kBr > 2 * kBc ? kBr : 2 * kBc) * 4;
  auto kern = quad_mma_kernel<KIND, G, D, MT>;
  ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
  const dim3 grid(static_cast<unsigned>((p.T + kBr - 1) / kBr), static_cast<unsigned>(p.B * p.H));
  kern<<<grid, kBr / MT * 2, smem, stream>>>(attn_map(p), static_cast<const __nv_bfloat16*>(q),
                                             static_cast<const __nv_bfloat16*>(k),
                                             static_cast<const __nv_bfloat16*>(v), static_cast<__nv_bfloat16*>(out),
                                             static_cast<int>(p.T));
  MEMCAP_CUDA_CHECK_LAUNCH("quad_mma_kernel");
}

// Every (map kind, g) at head width D, MT rows-per-warp tiles.
template <int D, int MT>
void launch_width(const AttentionLaunch& p, const void* q, const void* k, const void* v, void* out,
                  cudaStream_t stream) {
  const int g = p.map.is_psd() ? p.map.g : 1;
  auto by_g = [&](auto kind) {
    constexpr MapKind K = decltype(kind)::value;
    if (g == 1) launch_kernel<K, 1, D, MT>(p, q, k, v, out, stream);
    else if (g == 2) launch_kernel<K, 2, D, MT>(p, q, k, v, out, stream);
    else launch_kernel<K, 4, D, MT>(p, q, k, v, out, stream);
  };
  switch (p.map.kind) {
    case MapKind::BlockPsd: by_g(std::integral_constant<MapKind, MapKind::BlockPsd>{}); break;
    case MapKind::SumPsd: by_g(std::integral_constant<MapKind, MapKind::SumPsd>{}); break;
    case MapKind::Orthant: launch_kernel<MapKind::Orthant, 1, D, MT>(p, q, k, v, out, stream); break;
    case MapKind::Lorentz: launch_kernel<MapKind::Lorentz, 1, D, MT>(p, q, k, v, out, stream); break;
    default: launch_kernel<MapKind::Linear, 1, D, MT>(p, q, k, v, out, stream); break;
  }
}

}  // namespace quad_mma
}  // namespace memcap::kata::cuda

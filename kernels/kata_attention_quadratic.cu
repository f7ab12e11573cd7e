// Quadratic causal KATA attention forward (spec kata.md §5.1): tiled like FlashAttention-2, but the
// score is sum_a (q_a.k_a)^2 (M_g) or c^2 sum_{a,b} (q_a.k_b)^2 (Sigma_g) plus the eps rank-1 terms,
// with no running max, no rescaling and no exponentials. bf16 tensor-core paths (mma.sync here; M_1/M_2 in
// an sm_90a build go to the warp-specialised wgmma kernel of kata_attention_wgmma.cu) + fp32 SIMT path.
#include "cuda_check.cuh"
#include "kata_attention_common.cuh"
#include "kata_attention_quadratic.cuh"
#include "kata_attention_wgmma.cuh"

#include <cstdlib>
#include <type_traits>
#include <string>

namespace memcap::kata::cuda {
namespace {

constexpr int kBr = 128, kBc = 64;

// MT m-tiles (16 query rows each) per warp: with MT = 2 every K / V fragment loaded from shared
// memory feeds two mma instead of one (half the shared-memory traffic per tensor-core op).
// SPLIT: tiles entirely below the diagonal run a branch-free unrolled path (more registers, more
// freedom for the scheduler); otherwise every 16-key sub-block checks the diagonal.
template <int KIND, int G, int MT, bool SPLIT>
__global__ void __launch_bounds__(kBr / MT * 2) quadratic_mma_kernel(MapParams mp, const __nv_bfloat16* __restrict__ q,
                                                                     const __nv_bfloat16* __restrict__ k,
                                                                     const __nv_bfloat16* __restrict__ v,
                                                                     __nv_bfloat16* __restrict__ out, int T) {
  constexpr int NT = kBr / MT * 2;  // threads: kBr / (16 MT) warps
  constexpr int M = 64 / G, KS = M / 16;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* sK = sQ + kBr * kStride;
  __nv_bfloat16* sV = sK + 2 * kBc * kStride;
  float* sKn = reinterpret_cast<float*>(sV + 2 * kBc * kStride);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int nqt = (T + kBr - 1) / kBr;
  const int qt = nqt - 1 - blockIdx.x;  // longest query tiles first
  const std::int64_t bh = blockIdx.y;
  q += bh * T * 64;
  k += bh * T * 64;
  v += bh * T * 64;
  out += bh * T * 64;
  const int q0 = qt * kBr;
  const int row_lo = q0 + warp * 16 * MT;       // first row of this warp
  const int row_hi = row_lo + 16 * MT - 1;      // last row of this warp
  const int nkt = min((q0 + kBr - 1) / kBc + 1, (T + kBc - 1) / kBc);
  const bool use_eps = mp.eps != 0.f;
  const float c2 = mp.scale * mp.scale;
  const float eps_lin = KIND == kPsdSum ? mp.eps * mp.scale : mp.eps;
  const float eps_const = KIND == kPsdSum ? mp.eps * mp.eps * mp.m : mp.eps * mp.eps * mp.m * mp.groups;

  load_tile64<kBr>(sQ, q, q0, T, tid, NT);
  load_tile64<kBc>(sK, k, 0, T, tid, NT);
  load_tile64<kBc>(sV, v, 0, T, tid, NT);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  uint32_t qf[MT][4][4];
  float qn[MT][2] = {};
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int r = warp * 16 * MT + mt * 16;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) load_a(qf[mt][kk], sQ, kStride, r, kk * 16, lane);
    if (use_eps) {
      for (int c = tq * 16; c < tq * 16 + 16; ++c) {
        const float a = __bfloat162float(sQ[(r + g) * kStride + c]);
        const float b = __bfloat162float(sQ[(r + g + 8) * kStride + c]);
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

  float acc[MT][8][4] = {};
  float rs[MT][2] = {};
  for (int kt = 0; kt < nkt; ++kt) {
    if (kt > 0) {
      cp_async_wait_all();
      __syncthreads();
    }
    if (kt + 1 < nkt) {
      const int st = (kt + 1) & 1;
      load_tile64<kBc>(sK + st * kBc * kStride, k, (kt + 1) * kBc, T, tid, NT);
      load_tile64<kBc>(sV + st * kBc * kStride, v, (kt + 1) * kBc, T, tid, NT);
      cp_async_commit();
    }
    const __nv_bfloat16* cK = sK + (kt & 1) * kBc * kStride;
    const __nv_bfloat16* cV = sV + (kt & 1) * kBc * kStride;
    float* cKn = sKn + (kt & 1) * kBc;
    if (use_eps) {
      if (tid < kBc) {
        float s = 0.f;
        for (int c = 0; c < 64; ++c) {
          const float x = __bfloat162float(cK[tid * kStride + c]);
          s += x * x;
        }
        cKn[tid] = s;
      }
      __syncthreads();
    }
    const int k0 = kt * kBc;
    if (k0 > row_hi) continue;  // this warp's rows see none of these keys
    auto sub_block = [&](int kb, auto diag_tag) {  // 16 keys: scores, square, mask, P V
      constexpr bool DIAG = decltype(diag_tag)::value;
      const int kbase = k0 + kb * 16;
      float p[MT][2][4] = {};
#pragma unroll
      for (int a = 0; a < G; ++a) {
#pragma unroll
        for (int b = 0; b < G; ++b) {
          if (KIND == kPsdBlock && a != b) continue;
          float sc[MT][2][4] = {};
#pragma unroll
          for (int ks = 0; ks < KS; ++ks) {
            uint32_t bf[4];
            load_b_nk(bf, cK, kStride, kb * 16, b * M + ks * 16, lane);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              mma_bf16(sc[mt][0], qf[mt][(a * M) / 16 + ks], bf[0], bf[1]);
              mma_bf16(sc[mt][1], qf[mt][(a * M) / 16 + ks], bf[2], bf[3]);
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
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int r0 = row_lo + mt * 16 + g, r1 = r0 + 8;
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
          if (KIND == kPsdSum)
#pragma unroll
            for (int e = 0; e < 4; ++e) p[mt][nb][e] *= c2;
          if (use_eps) {
            const float kn0 = cKn[kb * 16 + nb * 8 + 2 * tq], kn1 = cKn[kb * 16 + nb * 8 + 2 * tq + 1];
            p[mt][nb][0] += eps_lin * (qn[mt][0] + kn0) + eps_const;
            p[mt][nb][1] += eps_lin * (qn[mt][0] + kn1) + eps_const;
            p[mt][nb][2] += eps_lin * (qn[mt][1] + kn0) + eps_const;
            p[mt][nb][3] += eps_lin * (qn[mt][1] + kn1) + eps_const;
          }
          if (DIAG && kbase + 15 > row_lo + mt * 16) {  // diagonal: causal mask key > row
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
        rs[mt][0] += p[mt][0][0] + p[mt][0][1] + p[mt][1][0] + p[mt][1][1];
        rs[mt][1] += p[mt][0][2] + p[mt][0][3] + p[mt][1][2] + p[mt][1][3];
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t bv[4];
        load_b_kn(bv, cV, kStride, j * 16, kb * 16, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(acc[mt][2 * j], pa[mt], bv[0], bv[1]);
          mma_bf16(acc[mt][2 * j + 1], pa[mt], bv[2], bv[3]);
        }
      }
    };
    if (SPLIT && k0 + kBc - 1 <= row_lo) {  // tile fully below the diagonal for every row of this warp
#pragma unroll
      for (int kb = 0; kb < kBc / 16; ++kb) sub_block(kb, std::false_type{});
    } else {
#pragma unroll
      for (int kb = 0; kb < kBc / 16; ++kb) {
        if (k0 + kb * 16 > row_hi) break;
        sub_block(kb, std::true_type{});
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float r = rs[mt][h];
      r += __shfl_xor_sync(0xffffffffu, r, 1);
      r += __shfl_xor_sync(0xffffffffu, r, 2);
      inv[h] = mp.normalized ? (r != 0.f ? 1.f / r : 0.f) : 1.f;
    }
    const int r0 = row_lo + mt * 16 + g, r1 = r0 + 8;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = j * 8 + 2 * tq;
      if (r0 < T)
        *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(r0) * 64 + col) =
            __floats2bfloat162_rn(acc[mt][j][0] * inv[0], acc[mt][j][1] * inv[0]);
      if (r1 < T)
        *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(r1) * 64 + col) =
            __floats2bfloat162_rn(acc[mt][j][2] * inv[1], acc[mt][j][3] * inv[1]);
    }
  }
}

// ---- SIMT path: any d, dv, map, fp32 or bf16 inputs; fp32 arithmetic --------------------------
constexpr int kSimtRows = 32, kSimtThreads = 128;

template <class E>
__global__ void __launch_bounds__(kSimtThreads) quadratic_simt_kernel(MapParams mp, const E* __restrict__ q,
                                                                      const E* __restrict__ k,
                                                                      const E* __restrict__ v, E* __restrict__ out,
                                                                      int T, int d, int dv) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sQ = reinterpret_cast<float*>(smem_raw);
  float* sK = sQ + kSimtRows * d;
  float* sV = sK + kSimtRows * d;
  float* sP = sV + kSimtRows * dv;
  float* sAcc = sP + kSimtRows * (kSimtRows + 1);
  float* sDen = sAcc + kSimtRows * dv;
  const int tid = threadIdx.x;
  const std::int64_t bh = blockIdx.y;
  const int q0 = blockIdx.x * kSimtRows;
  q += bh * T * d;
  k += bh * T * d;
  v += bh * T * dv;
  out += bh * T * dv;
  for (int e = tid; e < kSimtRows * d; e += kSimtThreads) {
    const int r = e / d;
    sQ[e] = q0 + r < T ? to_f(q[static_cast<std::int64_t>(q0) * d + e]) : 0.f;
  }
  for (int e = tid; e < kSimtRows * dv; e += kSimtThreads) sAcc[e] = 0.f;
  if (tid < kSimtRows) sDen[tid] = 0.f;
  const int last = min(q0 + kSimtRows, T) - 1;
  for (int k0 = 0; k0 <= last; k0 += kSimtRows) {
    __syncthreads();
    for (int e = tid; e < kSimtRows * d; e += kSimtThreads)
      sK[e] = k0 + e / d < T ? to_f(k[static_cast<std::int64_t>(k0) * d + e]) : 0.f;
    for (int e = tid; e < kSimtRows * dv; e += kSimtThreads)
      sV[e] = k0 + e / dv < T ? to_f(v[static_cast<std::int64_t>(k0) * dv + e]) : 0.f;
    __syncthreads();
    for (int e = tid; e < kSimtRows * kSimtRows; e += kSimtThreads) {
      const int i = e / kSimtRows, j = e % kSimtRows;
      const int row = q0 + i, key = k0 + j;
      sP[i * (kSimtRows + 1) + j] = (key <= row && row < T) ? kernel_value(mp, sQ + i * d, sK + j * d) : 0.f;
    }
    __syncthreads();
    for (int e = tid; e < kSimtRows * dv; e += kSimtThreads) {
      const int i = e / dv, c = e % dv;
      float s = 0.f;
      for (int j = 0; j < kSimtRows; ++j) s += sP[i * (kSimtRows + 1) + j] * sV[j * dv + c];
      sAcc[e] += s;
    }
    if (tid < kSimtRows) {
      float s = 0.f;
      for (int j = 0; j < kSimtRows; ++j) s += sP[tid * (kSimtRows + 1) + j];
      sDen[tid] += s;
    }
  }
  __syncthreads();
  for (int e = tid; e < kSimtRows * dv; e += kSimtThreads) {
    const int i = e / dv;
    if (q0 + i >= T) continue;
    const float den = sDen[i];
    const float o = mp.normalized ? (den != 0.f ? sAcc[e] / den : 0.f) : sAcc[e];
    out[static_cast<std::int64_t>(q0) * dv + e] = from_f<E>(o);
  }
}

template <int KIND, int G, int MT, bool SPLIT>
void launch_mma_mt(const MapParams& mp, const AttentionLaunch& p, const void* q, const void* k, const void* v, void* out,
                   cudaStream_t stream) {
  constexpr int smem = (kBr + 4 * kBc) * kStride * 2 + 2 * kBc * 4;
  auto kern = quadratic_mma_kernel<KIND, G, MT, SPLIT>;
  MEMCAP_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((p.T + kBr - 1) / kBr), static_cast<unsigned>(p.B * p.H));
  kern<<<grid, kBr / MT * 2, smem, stream>>>(mp, static_cast<const __nv_bfloat16*>(q),
                                             static_cast<const __nv_bfloat16*>(k), static_cast<const __nv_bfloat16*>(v),
                                             static_cast<__nv_bfloat16*>(out), static_cast<int>(p.T));
  MEMCAP_CUDA_CHECK_LAUNCH("quadratic_mma_kernel");
}

// Tensor-core variant: "ws3" / "ws2" (sm_90a build, M_g with g <= 2: the warp-specialised wgmma kernel
// of kata_attention_wgmma.cu with 3 or 2 consumer warpgroups; default ws3 where it applies), "mt2"
// (mma.sync, 32 rows per warp, 4 warps; default otherwise), "mt1" (16 rows per warp, 8 warps), "mt2split"
// (mt2 + branch-free path below the diagonal). MEMCAP_KATA_QUAD_VARIANT overrides (ws* only where it applies).
const std::string& quad_variant() {
  static const std::string v = [] {
    const char* e = std::getenv("MEMCAP_KATA_QUAD_VARIANT");
    const std::string s = e ? e : "";
    return (s == "mt1" || s == "mt2split" || s == "mt2" || s == "ws2") ? s : std::string("ws3");
  }();
  return v;
}

template <int KIND, int G>
void launch_mma(const MapParams& mp, const AttentionLaunch& p, const void* q, const void* k, const void* v, void* out,
                cudaStream_t stream) {
  if (quad_variant() == "mt1")
    launch_mma_mt<KIND, G, 1, false>(mp, p, q, k, v, out, stream);
  else if (quad_variant() == "mt2split")
    launch_mma_mt<KIND, G, 2, true>(mp, p, q, k, v, out, stream);
  else
    launch_mma_mt<KIND, G, 2, false>(mp, p, q, k, v, out, stream);
}

template <class E>
void launch_simt(const MapParams& mp, const AttentionLaunch& p, const void* q, const void* k, const void* v, void* out,
                 cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(float)) *
                   (kSimtRows * (2 * p.d + 2 * p.dv) + kSimtRows * (kSimtRows + 1) + kSimtRows);
  if (smem > 200 * 1024)
    cuda_detail::throw_user_error("quadratic SIMT kernel: d_head + d_v too large for shared memory (max about 700)");
  auto kern = quadratic_simt_kernel<E>;
  MEMCAP_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((p.T + kSimtRows - 1) / kSimtRows), static_cast<unsigned>(p.B * p.H));
  kern<<<grid, kSimtThreads, smem, stream>>>(mp, static_cast<const E*>(q), static_cast<const E*>(k),
                                             static_cast<const E*>(v), static_cast<E*>(out), static_cast<int>(p.T),
                                             p.d, p.dv);
  MEMCAP_CUDA_CHECK_LAUNCH("quadratic_simt_kernel");
}

}  // namespace

const char* launch_quadratic(const AttentionLaunch& p, const void* q, const void* k, const void* v, void* out,
                             cudaStream_t stream) {
  if (p.B < 1 || p.H < 1 || p.T < 1 || p.d < 1 || p.dv < 1 || p.B * p.H > 65535 || p.T > (1 << 30))
    cuda_detail::throw_user_error("quadratic attention: sizes must be >= 1, B*H <= 65535, T < 2^30");
  const MapParams mp = map_params(p);
  const bool psd = p.map_kind == kPsdBlock || p.map_kind == kPsdSum;
  if (p.dtype == DType::bf16 && p.d == 64 && p.dv == 64 && psd &&
      (p.groups == 1 || p.groups == 2 || p.groups == 4)) {
    if (quad_variant().rfind("ws", 0) == 0)
      if (const char* name = launch_quadratic_wgmma(mp, p, q, k, v, out, stream, quad_variant().c_str())) return name;
    if (p.map_kind == kPsdBlock) {
      if (p.groups == 1) launch_mma<kPsdBlock, 1>(mp, p, q, k, v, out, stream);
      if (p.groups == 2) launch_mma<kPsdBlock, 2>(mp, p, q, k, v, out, stream);
      if (p.groups == 4) launch_mma<kPsdBlock, 4>(mp, p, q, k, v, out, stream);
    } else {
      if (p.groups == 1) launch_mma<kPsdSum, 1>(mp, p, q, k, v, out, stream);
      if (p.groups == 2) launch_mma<kPsdSum, 2>(mp, p, q, k, v, out, stream);
      if (p.groups == 4) launch_mma<kPsdSum, 4>(mp, p, q, k, v, out, stream);
    }
    static const std::string name =
        "quadratic/mma-bf16/" + (quad_variant().rfind("ws", 0) == 0 ? std::string("mt2") : quad_variant());
    return name.c_str();
  }
  if (p.dtype == DType::bf16)
    launch_simt<__nv_bfloat16>(mp, p, q, k, v, out, stream);
  else
    launch_simt<float>(mp, p, q, k, v, out, stream);
  return "quadratic/simt";
}

}  // namespace memcap::kata::cuda

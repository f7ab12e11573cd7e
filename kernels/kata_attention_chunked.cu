// Chunked-state and tree-scan forms of causal KATA attention (spec kata.md §5.2, §5.3).
// Kernels: chunk_state (sequential carry or chunk-local), the scans (kata_attention_scan.cu) and
// chunk_output; each in a bf16 tensor-core version (d = dv = 64) and an fp32 SIMT version.
#include <cstdlib>
#include <type_traits>

#include "cuda_check.cuh"
#include "kata_attention_chunked.cuh"
#include "kata_attention_common.cuh"
#include "kata_attention_scan.cuh"

namespace memcap::kata::cuda {
namespace {

using bf16 = __nv_bfloat16;

// ---- bf16 tensor-core chunk-state: S (64 features x 64) per program, 4 warps x 16 feature rows ----
// MODE 0: sequential over all chunks, writes the state entering each chunk (S bf16, Z fp32).
// MODE 1: one chunk per program (blockIdx.y), writes its local state (S, Z fp32).
// KS: shared-memory stages for the K tile (2: prefetched a whole chunk ahead; 1: the next K tile is
// fetched once psi(K) of this chunk is built, which frees shared memory for more blocks per SM).
template <int C, int MODE, int KIND, int KS>
__global__ void __launch_bounds__(128) chunk_state_mma_kernel(MapParams mp, const bf16* __restrict__ k,
                                                              const bf16* __restrict__ v, void* __restrict__ s_out,
                                                              float* __restrict__ z_out, int T, int nc) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);
  bf16* sV = sK + KS * C * kStride;
  bf16* sPsi = sV + 2 * C * kStride;
  float* sNorm = reinterpret_cast<float*>(sPsi + C * kStride);
  float* sZ = sNorm + C;  // [128]: per-thread partial column sums (two row halves per feature column)
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int fb = blockIdx.x;
  const std::int64_t bh = blockIdx.z;
  const int np = mp.n_padded;
  k += bh * T * 64;
  v += bh * T * 64;
  const FeatureSlot slot = make_slot(mp, fb * 64 + (tid & 63));
  const int c_begin = MODE == 1 ? static_cast<int>(blockIdx.y) : 0;
  const int c_end = MODE == 1 ? c_begin + 1 : nc;
  load_tile64<C>(sK, k, c_begin * C, T, tid, 128);
  load_tile64<C>(sV, v, c_begin * C, T, tid, 128);
  cp_async_commit();
  float acc[8][4] = {};
  float zrun = 0.f;  // this thread's share of Z (column tid & 63, rows of parity tid >> 6), chunks before c
  for (int c = c_begin; c < c_end; ++c) {
    cp_async_wait_all();
    __syncthreads();
    const int st = (c - c_begin) & 1;
    if (c + 1 < c_end) {
      if (KS == 2) load_tile64<C>(sK + (st ^ 1) * C * kStride, k, (c + 1) * C, T, tid, 128);
      load_tile64<C>(sV + (st ^ 1) * C * kStride, v, (c + 1) * C, T, tid, 128);
      if (KS == 2) cp_async_commit();
    }
    const bf16* cK = sK + (KS == 2 ? st : 0) * C * kStride;
    const bf16* cV = sV + st * C * kStride;
    const int t0 = c * C;
    if (mp.kind == kLorentz) {
      if (tid < C) sNorm[tid] = lorentz_norm_of(mp, cK + tid * kStride);
      __syncthreads();
    }
    float zl = 0.f;
    for (int t = tid >> 6; t < C; t += 2) {
      const __nv_bfloat16 x = __float2bfloat16(t0 + t < T ? eval_slot_k<KIND>(mp, slot, cK + t * kStride, sNorm[t]) : 0.f);
      sPsi[t * kStride + (tid & 63)] = x;
      zl += __bfloat162float(x);
    }
    sZ[tid] = MODE == 0 ? zrun : zl;
    zrun += zl;
    __syncthreads();
    if (KS == 1 && c + 1 < c_end) {  // psi(K_c) is built: the single K stage is free
      load_tile64<C>(sK, k, (c + 1) * C, T, tid, 128);
      cp_async_commit();
    }
    const std::int64_t base = (bh * nc + c) * static_cast<std::int64_t>(np) + fb * 64;
    if (tid < 64) z_out[base + tid] = sZ[tid] + sZ[tid + 64];
    if (MODE == 0) {  // state entering chunk c
      bf16* S = static_cast<bf16*>(s_out) + base * 64;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = j * 8 + 2 * tq;
        *reinterpret_cast<__nv_bfloat162*>(S + (warp * 16 + g) * 64 + col) = __floats2bfloat162_rn(acc[j][0], acc[j][1]);
        *reinterpret_cast<__nv_bfloat162*>(S + (warp * 16 + g + 8) * 64 + col) =
            __floats2bfloat162_rn(acc[j][2], acc[j][3]);
      }
    }
#pragma unroll
    for (int ks = 0; ks < C / 16; ++ks) {
      uint32_t a[4];
      load_a_trans(a, sPsi, kStride, warp * 16, ks * 16, lane);
      mma_rows_x_tile64(acc, a, cV, kStride, ks * 16, lane);
    }
    if (MODE == 1) {
      float* S = static_cast<float*>(s_out) + base * 64;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = j * 8 + 2 * tq;
        *reinterpret_cast<float2*>(S + (warp * 16 + g) * 64 + col) = make_float2(acc[j][0], acc[j][1]);
        *reinterpret_cast<float2*>(S + (warp * 16 + g + 8) * 64 + col) = make_float2(acc[j][2], acc[j][3]);
      }
    }
  }
}

// ---- bf16 tensor-core chunk-output: C/16 warps x 16 query rows ------------------------------------
// KIND: kPsdBlock / kPsdSum (intra scores from raw q, k in closed form) or kLinear (= any map with
// n_psi = 64: intra scores psi(q).psi(k) with psi formed in smem).
template <int C, int KIND, int G>
__global__ void __launch_bounds__(C * 2) chunk_output_mma_kernel(MapParams mp, const bf16* __restrict__ q,
                                                                 const bf16* __restrict__ k,
                                                                 const bf16* __restrict__ v,
                                                                 const bf16* __restrict__ s_pre,
                                                                 const float* __restrict__ z_pre,
                                                                 bf16* __restrict__ out, int T, int nc) {
  constexpr int NT = C * 2;
  constexpr bool PSD = KIND == kPsdBlock || KIND == kPsdSum;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sK = sQ + C * kStride;
  bf16* sV = sK + C * kStride;
  bf16* sPQ = sV + C * kStride;
  bf16* sPK = sPQ + C * kStride;
  bf16* sS = sPK + (PSD ? 0 : C * kStride);                       // 2 buffers of 64 x 72 (no sPK for PSD)
  float* sZt = reinterpret_cast<float*>(sS + 2 * 64 * kStride);    // 2 buffers of 64
  float* sNormQ = sZt + 2 * 64;
  float* sNormK = sNormQ + C;
  float* sDen = sNormK + C;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int c = blockIdx.x;
  const std::int64_t bh = blockIdx.y;
  const int np = mp.n_padded, nfb = np / 64, t0 = c * C;
  q += bh * T * 64;
  k += bh * T * 64;
  v += bh * T * 64;
  out += bh * T * 64;
  load_tile64<C>(sQ, q, t0, T, tid, NT);
  load_tile64<C>(sK, k, t0, T, tid, NT);
  load_tile64<C>(sV, v, t0, T, tid, NT);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  const bool use_eps = PSD && mp.eps != 0.f;
  if (tid < C) {
    sDen[tid] = 0.f;
    if (mp.kind == kLorentz) {
      sNormQ[tid] = lorentz_norm_of(mp, sQ + tid * kStride);
      sNormK[tid] = lorentz_norm_of(mp, sK + tid * kStride);
    } else if (use_eps) {
      float a = 0.f, b = 0.f;
      for (int i = 0; i < 64; ++i) {
        const float x = __bfloat162float(sQ[tid * kStride + i]), y = __bfloat162float(sK[tid * kStride + i]);
        a += x * x;
        b += y * y;
      }
      sNormQ[tid] = a;
      sNormK[tid] = b;
    }
  }
  __syncthreads();
  float acc[8][4] = {};
  const std::int64_t cbase = (bh * nc + c) * static_cast<std::int64_t>(np);
  auto issue_state = [&](int fb, int buf) {  // S_pre and Z_pre tiles of feature block fb -> smem buffer
    const bf16* S = s_pre + (cbase + fb * 64) * 64;
    for (int e = tid; e < 64 * 8; e += NT)
      cp_async16(sS + buf * 64 * kStride + (e >> 3) * kStride + (e & 7) * 8, S + (e >> 3) * 64 + (e & 7) * 8, true);
    if (tid < 16) cp_async16(sZt + buf * 64 + tid * 4, z_pre + cbase + fb * 64 + tid * 4, mp.normalized != 0);
    cp_async_commit();
  };
  issue_state(0, 0);
  for (int fb = 0; fb < nfb; ++fb) {  // inter-chunk: psi(Q) S_pre, next tiles prefetched
    const int buf = fb & 1;
    if (fb + 1 < nfb) issue_state(fb + 1, buf ^ 1);
    const FeatureSlot slot = make_slot(mp, fb * 64 + (tid & 63));
    for (int t = tid >> 6; t < C; t += NT / 64)
      sPQ[t * kStride + (tid & 63)] = __float2bfloat16(eval_slot_k<PSD ? KIND : kLinear>(mp, slot, sQ + t * kStride, sNormQ[t]));
    if (fb + 1 < nfb)
      cp_async_wait_one_pending();
    else
      cp_async_wait_all();
    __syncthreads();
    const bf16* cS = sS + buf * 64 * kStride;
    if (mp.normalized) {
      const int row = tid % C, half = tid / C;
      const float* Z = sZt + buf * 64 + half * 32;
      float part = 0.f;
#pragma unroll 8
      for (int f = 0; f < 32; ++f) part += __bfloat162float(sPQ[row * kStride + half * 32 + f]) * Z[f];
      atomicAdd(&sDen[row], part);
    }
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t a[4];
      load_a(a, sPQ, kStride, warp * 16, ks * 16, lane);
      mma_rows_x_tile64(acc, a, cS, kStride, ks * 16, lane);
    }
    __syncthreads();
  }
  // intra-chunk: causal P V with P from the closed form (PSD) or psi(q).psi(k) (n_psi = 64 maps)
  if (!PSD) {
    const FeatureSlot slot = make_slot(mp, tid & 63);
    for (int t = tid >> 6; t < C; t += NT / 64)
      sPK[t * kStride + (tid & 63)] = __float2bfloat16(eval_slot(mp, slot, sK + t * kStride, sNormK[t]));
    __syncthreads();
  }
  uint32_t qf[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) load_a(qf[kk], PSD ? sQ : sPQ, kStride, warp * 16, kk * 16, lane);
  const float eps_lin = KIND == kPsdSum ? mp.eps * mp.scale : mp.eps;
  const float eps_const = KIND == kPsdSum ? mp.eps * mp.eps * mp.m : mp.eps * mp.eps * mp.m * mp.groups;
  const float qn0 = use_eps ? sNormQ[warp * 16 + g] : 0.f, qn1 = use_eps ? sNormQ[warp * 16 + g + 8] : 0.f;
  float rs0 = 0.f, rs1 = 0.f;
  for (int kb = 0; kb <= warp; ++kb) {
    float p[2][4];
    if (PSD)
      psd_scores<PSD ? KIND : kPsdBlock, G>(p, qf, sK, kb * 16, lane, mp.scale * mp.scale);
    else
      dot_scores(p, qf, sPK, kb * 16, lane);
    if (use_eps) {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        const float kn0 = sNormK[kb * 16 + nb * 8 + 2 * tq], kn1 = sNormK[kb * 16 + nb * 8 + 2 * tq + 1];
        p[nb][0] += eps_lin * (qn0 + kn0) + eps_const;
        p[nb][1] += eps_lin * (qn0 + kn1) + eps_const;
        p[nb][2] += eps_lin * (qn1 + kn0) + eps_const;
        p[nb][3] += eps_lin * (qn1 + kn1) + eps_const;
      }
    }
    if (kb == warp) {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        const int key = nb * 8 + 2 * tq;  // relative to the warp's first row
        if (key > g) p[nb][0] = 0.f;
        if (key + 1 > g) p[nb][1] = 0.f;
        if (key > g + 8) p[nb][2] = 0.f;
        if (key + 1 > g + 8) p[nb][3] = 0.f;
      }
    }
    uint32_t pa[4];
    pa[0] = pack_bf16(p[0][0], p[0][1]);
    pa[1] = pack_bf16(p[0][2], p[0][3]);
    pa[2] = pack_bf16(p[1][0], p[1][1]);
    pa[3] = pack_bf16(p[1][2], p[1][3]);
    rs0 += p[0][0] + p[0][1] + p[1][0] + p[1][1];
    rs1 += p[0][2] + p[0][3] + p[1][2] + p[1][3];
    mma_rows_x_tile64(acc, pa, sV, kStride, kb * 16, lane);
  }
  rs0 += __shfl_xor_sync(0xffffffffu, rs0, 1);
  rs0 += __shfl_xor_sync(0xffffffffu, rs0, 2);
  rs1 += __shfl_xor_sync(0xffffffffu, rs1, 1);
  rs1 += __shfl_xor_sync(0xffffffffu, rs1, 2);
  const int l0 = warp * 16 + g, l1 = l0 + 8;
  const float d0 = rs0 + sDen[l0], d1 = rs1 + sDen[l1];
  const float inv0 = mp.normalized ? (d0 != 0.f ? 1.f / d0 : 0.f) : 1.f;
  const float inv1 = mp.normalized ? (d1 != 0.f ? 1.f / d1 : 0.f) : 1.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int col = j * 8 + 2 * tq;
    if (t0 + l0 < T)
      *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(t0 + l0) * 64 + col) =
          __floats2bfloat162_rn(acc[j][0] * inv0, acc[j][1] * inv0);
    if (t0 + l1 < T)
      *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(t0 + l1) * 64 + col) =
          __floats2bfloat162_rn(acc[j][2] * inv1, acc[j][3] * inv1);
  }
}

// ---- SIMT (fp32 arithmetic; any d, dv; C <= 64) ------------------------------------------------------
template <class E>
__global__ void __launch_bounds__(128) chunk_state_simt_kernel(MapParams mp, const E* __restrict__ k,
                                                               const E* __restrict__ v, float* __restrict__ s_loc,
                                                               float* __restrict__ z_loc, int T, int nc, int d, int dv,
                                                               int C) {
  extern __shared__ __align__(16) float fsm[];
  float* sK = fsm;
  float* sV = sK + C * d;
  float* sPsi = sV + C * dv;
  float* sNorm = sPsi + C * 64;
  const int tid = threadIdx.x, fb = blockIdx.x, c = blockIdx.y;
  const std::int64_t bh = blockIdx.z;
  const int t0 = c * C, np = mp.n_padded;
  k += bh * T * d;
  v += bh * T * dv;
  for (int e = tid; e < C * d; e += 128) sK[e] = t0 + e / d < T ? to_f(k[static_cast<std::int64_t>(t0) * d + e]) : 0.f;
  for (int e = tid; e < C * dv; e += 128)
    sV[e] = t0 + e / dv < T ? to_f(v[static_cast<std::int64_t>(t0) * dv + e]) : 0.f;
  __syncthreads();
  if (tid < C) sNorm[tid] = lorentz_norm_of(mp, sK + tid * d);
  __syncthreads();
  for (int e = tid; e < C * 64; e += 128) {
    const int t = e / 64, f = e % 64;
    sPsi[e] = t0 + t < T ? eval_slot(mp, make_slot(mp, fb * 64 + f), sK + t * d, sNorm[t]) : 0.f;
  }
  __syncthreads();
  const std::int64_t base = (bh * nc + c) * static_cast<std::int64_t>(np) + fb * 64;
  for (int e = tid; e < 64 * dv; e += 128) {
    const int f = e / dv, cc = e % dv;
    float s = 0.f;
    for (int t = 0; t < C; ++t) s += sPsi[t * 64 + f] * sV[t * dv + cc];
    s_loc[base * dv + e] = s;
  }
  if (tid < 64) {
    float s = 0.f;
    for (int t = 0; t < C; ++t) s += sPsi[t * 64 + tid];
    z_loc[base + tid] = s;
  }
}

template <class E>
__global__ void __launch_bounds__(128) chunk_output_simt_kernel(MapParams mp, const E* __restrict__ q,
                                                                const E* __restrict__ k, const E* __restrict__ v,
                                                                const float* __restrict__ s_pre,
                                                                const float* __restrict__ z_pre, E* __restrict__ out,
                                                                int T, int nc, int d, int dv, int C) {
  extern __shared__ __align__(16) float fsm[];
  float* sQ = fsm;
  float* sK = sQ + C * d;
  float* sV = sK + C * d;
  float* sPsi = sV + C * dv;
  float* sS = sPsi + C * 64;
  float* sP = sS + 64 * dv;
  float* sAcc = sP + C * (C + 1);
  float* sDen = sAcc + C * dv;
  float* sNorm = sDen + C;
  const int tid = threadIdx.x, c = blockIdx.x;
  const std::int64_t bh = blockIdx.y;
  const int t0 = c * C, np = mp.n_padded;
  q += bh * T * d;
  k += bh * T * d;
  v += bh * T * dv;
  out += bh * T * dv;
  for (int e = tid; e < C * d; e += 128) {
    const bool ok = t0 + e / d < T;
    sQ[e] = ok ? to_f(q[static_cast<std::int64_t>(t0) * d + e]) : 0.f;
    sK[e] = ok ? to_f(k[static_cast<std::int64_t>(t0) * d + e]) : 0.f;
  }
  for (int e = tid; e < C * dv; e += 128) {
    sV[e] = t0 + e / dv < T ? to_f(v[static_cast<std::int64_t>(t0) * dv + e]) : 0.f;
    sAcc[e] = 0.f;
  }
  if (tid < C) sDen[tid] = 0.f;
  __syncthreads();
  if (tid < C) sNorm[tid] = lorentz_norm_of(mp, sQ + tid * d);
  const std::int64_t cbase = (bh * nc + c) * static_cast<std::int64_t>(np);
  for (int fb = 0; fb < np / 64; ++fb) {
    __syncthreads();
    for (int e = tid; e < C * 64; e += 128) {
      const int t = e / 64, f = e % 64;
      sPsi[e] = eval_slot(mp, make_slot(mp, fb * 64 + f), sQ + t * d, sNorm[t]);
    }
    for (int e = tid; e < 64 * dv; e += 128) sS[e] = s_pre[(cbase + fb * 64) * dv + e];
    __syncthreads();
    for (int e = tid; e < C * dv; e += 128) {
      const int i = e / dv, cc = e % dv;
      float s = 0.f;
      for (int f = 0; f < 64; ++f) s += sPsi[i * 64 + f] * sS[f * dv + cc];
      sAcc[e] += s;
    }
    if (tid < C) {
      float s = 0.f;
      for (int f = 0; f < 64; ++f) s += sPsi[tid * 64 + f] * z_pre[cbase + fb * 64 + f];
      sDen[tid] += s;
    }
  }
  __syncthreads();
  for (int e = tid; e < C * C; e += 128) {
    const int i = e / C, j = e % C;
    sP[i * (C + 1) + j] = j <= i ? kernel_value(mp, sQ + i * d, sK + j * d) : 0.f;
  }
  __syncthreads();
  for (int e = tid; e < C * dv; e += 128) {
    const int i = e / dv, cc = e % dv;
    float s = 0.f;
    for (int j = 0; j <= i; ++j) s += sP[i * (C + 1) + j] * sV[j * dv + cc];
    sAcc[e] += s;
  }
  if (tid < C) {
    float s = 0.f;
    for (int j = 0; j <= tid; ++j) s += sP[tid * (C + 1) + j];
    sDen[tid] += s;
  }
  __syncthreads();
  for (int e = tid; e < C * dv; e += 128) {
    const int i = e / dv;
    if (t0 + i >= T) continue;
    const float den = sDen[i];
    out[static_cast<std::int64_t>(t0) * dv + e] = from_f<E>(mp.normalized ? (den != 0.f ? sAcc[e] / den : 0.f) : sAcc[e]);
  }
}

bool fast_path(const AttentionLaunch& p) {
  const bool psd = p.map_kind == kPsdBlock || p.map_kind == kPsdSum;
  return p.dtype == DType::bf16 && p.d == 64 && p.dv == 64 && (p.chunk == 64 || p.chunk == 128) &&
         (!psd || p.groups == 1 || p.groups == 2 || p.groups == 4);
}

struct Sizes {
  std::int64_t bh, nc, np;
};
Sizes sizes_of(const AttentionLaunch& p) {
  const MapParams mp = map_params(p);
  return {p.B * p.H, (p.T + p.chunk - 1) / p.chunk, mp.n_padded};
}

// K stages of the chunk-state kernel: 1 by default; MEMCAP_KATA_STATE_KSTAGES=2 prefetches K a chunk ahead.
int state_k_stages() {
  static const int ks = [] {
    const char* e = std::getenv("MEMCAP_KATA_STATE_KSTAGES");
    return e && e[0] == '2' ? 2 : 1;
  }();
  return ks;
}

template <int C>
void run_fast(const AttentionLaunch& p, ChunkForm form, const MapParams& mp, const bf16* q, const bf16* k,
              const bf16* v, bf16* out, unsigned char* ws, cudaStream_t stream) {
  const Sizes z = sizes_of(p);
  const int T = static_cast<int>(p.T), nc = static_cast<int>(z.nc);
  const std::int64_t nS = z.bh * z.nc * z.np * 64, nZ = z.bh * z.nc * z.np;
  bf16* s_pre = reinterpret_cast<bf16*>(ws);
  float* z_pre = reinterpret_cast<float*>(ws + nS * 2);
  const int ks = state_k_stages();
  const int state_smem = ((ks + 3) * C * kStride) * 2 + (C + 128) * 4;
  auto state_kernel = [&](auto tag_mode, auto tag_kind) {
    constexpr int MODE = decltype(tag_mode)::value, KIND = decltype(tag_kind)::value;
    auto kern = ks == 2 ? chunk_state_mma_kernel<C, MODE, KIND, 2> : chunk_state_mma_kernel<C, MODE, KIND, 1>;
    MEMCAP_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, state_smem));
    return kern;
  };
  auto run_state = [&](auto tag_mode, void* s_out, float* z_out) {
    constexpr int MODE = decltype(tag_mode)::value;
    const dim3 grid(z.np / 64, MODE == 1 ? nc : 1, z.bh);
    if (p.map_kind == kPsdBlock)
      state_kernel(tag_mode, std::integral_constant<int, kPsdBlock>{})<<<grid, 128, state_smem, stream>>>(mp, k, v, s_out, z_out, T, nc);
    else if (p.map_kind == kPsdSum)
      state_kernel(tag_mode, std::integral_constant<int, kPsdSum>{})<<<grid, 128, state_smem, stream>>>(mp, k, v, s_out, z_out, T, nc);
    else
      state_kernel(tag_mode, std::integral_constant<int, kLinear>{})<<<grid, 128, state_smem, stream>>>(mp, k, v, s_out, z_out, T, nc);
    MEMCAP_CUDA_CHECK_LAUNCH("chunk_state_mma_kernel");
  };
  if (form == ChunkForm::chunked) {
    run_state(std::integral_constant<int, 0>{}, s_pre, z_pre);
    if (p.stage_events) {
      MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[0], stream));
      MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[1], stream));
    }
  } else {
    float* s_loc = reinterpret_cast<float*>(ws + nS * 2 + nZ * 4);
    float* z_loc = s_loc + nS;
    run_state(std::integral_constant<int, 1>{}, s_loc, z_loc);
    if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[0], stream));
    launch_scan_tree(s_loc, s_pre, DType::bf16, z.bh, z.nc, z.np * 64, stream);
    if (p.normalized) launch_scan_tree(z_loc, z_pre, DType::f32, z.bh, z.nc, z.np, stream);
    if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[1], stream));
  }
  const bool psd = p.map_kind == kPsdBlock || p.map_kind == kPsdSum;
  const int out_smem = ((psd ? 4 : 5) * C * kStride + 2 * 64 * kStride) * 2 + (2 * 64 + 3 * C) * 4;
  auto launch_out = [&](auto kern) {
    MEMCAP_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, out_smem));
    kern<<<dim3(nc, z.bh), C * 2, out_smem, stream>>>(mp, q, k, v, s_pre, z_pre, out, T, nc);
    MEMCAP_CUDA_CHECK_LAUNCH("chunk_output_mma_kernel");
  };
  if (p.map_kind == kPsdBlock) {
    if (p.groups == 1) launch_out(chunk_output_mma_kernel<C, kPsdBlock, 1>);
    if (p.groups == 2) launch_out(chunk_output_mma_kernel<C, kPsdBlock, 2>);
    if (p.groups == 4) launch_out(chunk_output_mma_kernel<C, kPsdBlock, 4>);
  } else if (p.map_kind == kPsdSum) {
    if (p.groups == 1) launch_out(chunk_output_mma_kernel<C, kPsdSum, 1>);
    if (p.groups == 2) launch_out(chunk_output_mma_kernel<C, kPsdSum, 2>);
    if (p.groups == 4) launch_out(chunk_output_mma_kernel<C, kPsdSum, 4>);
  } else {
    launch_out(chunk_output_mma_kernel<C, kLinear, 1>);
  }
}

template <class E>
void run_simt(const AttentionLaunch& p, ChunkForm form, const MapParams& mp, const E* q, const E* k, const E* v,
              E* out, unsigned char* ws, cudaStream_t stream) {
  const Sizes z = sizes_of(p);
  const int T = static_cast<int>(p.T), nc = static_cast<int>(z.nc), C = p.chunk;
  const std::int64_t nS = z.bh * z.nc * z.np * p.dv, nZ = z.bh * z.nc * z.np;
  float* s_loc = reinterpret_cast<float*>(ws);
  float* z_loc = s_loc + nS;
  float* s_pre = z_loc + nZ;
  float* z_pre = s_pre + nS;
  const int state_smem = 4 * (C * p.d + C * p.dv + C * 64 + C);
  const int out_smem = 4 * (2 * C * p.d + C * p.dv + C * 64 + 64 * p.dv + C * (C + 1) + C * p.dv + 2 * C);
  if (out_smem > 220 * 1024 || state_smem > 220 * 1024)
    cuda_detail::throw_user_error("chunked SIMT kernels: chunk, d_head and d_v too large for shared memory");
  MEMCAP_CUDA_CHECK(
      cudaFuncSetAttribute(chunk_state_simt_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, state_smem));
  chunk_state_simt_kernel<E><<<dim3(z.np / 64, nc, z.bh), 128, state_smem, stream>>>(mp, k, v, s_loc, z_loc, T, nc,
                                                                                      p.d, p.dv, C);
  MEMCAP_CUDA_CHECK_LAUNCH("chunk_state_simt_kernel");
  if (form == ChunkForm::chunked) {
    launch_scan_sequential(s_loc, s_pre, DType::f32, z.bh, z.nc, z.np * p.dv, stream);
    launch_scan_sequential(z_loc, z_pre, DType::f32, z.bh, z.nc, z.np, stream);
  } else {
    launch_scan_tree(s_loc, s_pre, DType::f32, z.bh, z.nc, z.np * p.dv, stream);
    launch_scan_tree(z_loc, z_pre, DType::f32, z.bh, z.nc, z.np, stream);
  }
  MEMCAP_CUDA_CHECK(
      cudaFuncSetAttribute(chunk_output_simt_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize, out_smem));
  chunk_output_simt_kernel<E><<<dim3(nc, z.bh), 128, out_smem, stream>>>(mp, q, k, v, s_pre, z_pre, out, T, nc, p.d,
                                                                         p.dv, C);
  MEMCAP_CUDA_CHECK_LAUNCH("chunk_output_simt_kernel");
}

void validate(const AttentionLaunch& p, ChunkForm form) {
  if (p.B < 1 || p.H < 1 || p.T < 1 || p.d < 1 || p.dv < 1 || p.chunk < 1 || p.B * p.H > 65535)
    cuda_detail::throw_user_error("chunked attention: sizes must be >= 1 and B*H <= 65535");
  if ((p.T + p.chunk - 1) / p.chunk > 65535)
    cuda_detail::throw_user_error("chunked attention: more than 65535 chunks per sequence; use a larger --chunk");
  if (form == ChunkForm::tree && (p.map_kind == kPsdBlock || p.map_kind == kPsdSum))
    cuda_detail::throw_user_error(
        "tree scan is for the linear, orthant and Lorentz maps (spec §5.3: a PSD chunk state is too large to "
        "scan); use the chunked or quadratic form for M_g / Sigma_g");
  if (!fast_path(p) && p.chunk > 64)
    cuda_detail::throw_user_error("chunked attention: the SIMT path (fp32, or d/dv != 64) needs --chunk <= 64");
}

}  // namespace

std::size_t chunk_workspace_bytes(const AttentionLaunch& p, ChunkForm form) {
  validate(p, form);
  const Sizes z = sizes_of(p);
  if (fast_path(p)) {
    const std::size_t nS = z.bh * z.nc * z.np * 64, nZ = z.bh * z.nc * z.np;
    return nS * 2 + nZ * 4 + (form == ChunkForm::tree ? nS * 4 + nZ * 4 : 0);
  }
  const std::size_t nS = z.bh * z.nc * z.np * p.dv, nZ = z.bh * z.nc * z.np;
  return 2 * (nS + nZ) * 4;
}

const char* launch_chunk_form(const AttentionLaunch& p, ChunkForm form, const void* q, const void* k, const void* v,
                              void* out, void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  validate(p, form);
  if (workspace_bytes < chunk_workspace_bytes(p, form))
    cuda_detail::throw_user_error("chunked attention: workspace too small (ask chunk_workspace_bytes)");
  const MapParams mp = map_params(p);
  auto* ws = static_cast<unsigned char*>(workspace);
  if (fast_path(p)) {
    auto* qb = static_cast<const bf16*>(q);
    auto* kb = static_cast<const bf16*>(k);
    auto* vb = static_cast<const bf16*>(v);
    auto* ob = static_cast<bf16*>(out);
    if (p.chunk == 64)
      run_fast<64>(p, form, mp, qb, kb, vb, ob, ws, stream);
    else
      run_fast<128>(p, form, mp, qb, kb, vb, ob, ws, stream);
    return form == ChunkForm::chunked ? "chunked/mma-bf16" : "tree/mma-bf16";
  }
  if (p.dtype == DType::bf16)
    run_simt<bf16>(p, form, mp, static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v),
                   static_cast<bf16*>(out), ws, stream);
  else
    run_simt<float>(p, form, mp, static_cast<const float*>(q), static_cast<const float*>(k),
                    static_cast<const float*>(v), static_cast<float*>(out), ws, stream);
  return form == ChunkForm::chunked ? "chunked/simt" : "tree/simt";
}

}  // namespace memcap::kata::cuda

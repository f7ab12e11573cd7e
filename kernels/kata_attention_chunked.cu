// Chunked-state and tree-scan forms of causal KATA attention (spec kata.md §5.2, §5.3): the scalar (SIMT, fp32
// arithmetic) fallback for any d, d_v and dtype (C <= 64), and the dispatch of the tensor-core two-pass kernels
// by head width (kata_attention_chunk2_d*.cu). Which one runs is decided by the variant table
// (kata_attention_variants.cu). Every path records the stage events (state | scan | output) when asked.
#include "cuda_check.cuh"
#include "smem_limit.cuh"
#include "kata_attention_common.cuh"
#include "kata_attention_impl.cuh"
#include "kata_attention_variants.cuh"

namespace memcap::kata::cuda {
namespace {

// ---- SIMT (fp32 arithmetic; any d, dv; C <= 64) ------------------------------------------------------
template <class E>
__global__ void __launch_bounds__(128) chunk_state_simt_kernel(AttnMap mp, const E* __restrict__ k,
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
  if (tid < C) sNorm[tid] = with_map_kind(mp.kind, [&](auto kd) { return psi_aux<decltype(kd)::value>(mp, sK + tid * d); });
  __syncthreads();
  for (int e = tid; e < C * 64; e += 128) {
    const int t = e / 64, f = e % 64;
    sPsi[e] = t0 + t < T ? with_map_kind(mp.kind, [&](auto kd) {
      return psi_value<decltype(kd)::value>(mp, sK + t * d, fb * 64 + f, sNorm[t]);
    }) : 0.f;
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
__global__ void __launch_bounds__(128) chunk_output_simt_kernel(AttnMap mp, const E* __restrict__ q,
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
  if (tid < C) sNorm[tid] = with_map_kind(mp.kind, [&](auto kd) { return psi_aux<decltype(kd)::value>(mp, sQ + tid * d); });
  const std::int64_t cbase = (bh * nc + c) * static_cast<std::int64_t>(np);
  for (int fb = 0; fb < np / 64; ++fb) {
    __syncthreads();
    for (int e = tid; e < C * 64; e += 128) {
      const int t = e / 64, f = e % 64;
      sPsi[e] = with_map_kind(mp.kind, [&](auto kd) {
        return psi_value<decltype(kd)::value>(mp, sQ + t * d, fb * 64 + f, sNorm[t]);
      });
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

int simt_state_smem(const AttentionLaunch& p) {
  const int C = p.chunk;
  return 4 * (C * p.d + C * p.dv + C * 64 + C);
}
int simt_output_smem(const AttentionLaunch& p) {
  const int C = p.chunk;
  return 4 * (2 * C * p.d + C * p.dv + C * 64 + 64 * p.dv + C * (C + 1) + C * p.dv + 2 * C);
}

template <class E>
void run_simt(const AttentionLaunch& p, AttentionForm form, const AttnMap& mp, const E* q, const E* k, const E* v,
              E* out, unsigned char* ws, cudaStream_t stream) {
  const std::int64_t zbh = p.B * p.H, znc = (p.T + p.chunk - 1) / p.chunk, znp = mp.n_padded;
  const int T = static_cast<int>(p.T), nc = static_cast<int>(znc), C = p.chunk;
  const std::int64_t nS = zbh * znc * znp * p.dv, nZ = zbh * znc * znp;
  float* s_loc = reinterpret_cast<float*>(ws);
  float* z_loc = s_loc + nS;
  float* s_pre = z_loc + nZ;
  float* z_pre = s_pre + nS;
  const int state_smem = simt_state_smem(p), out_smem = simt_output_smem(p);
  ::memcap::cuda_detail::raise_dynamic_smem(chunk_state_simt_kernel<E>, state_smem);
  chunk_state_simt_kernel<E><<<dim3(znp / 64, nc, zbh), 128, state_smem, stream>>>(mp, k, v, s_loc, z_loc, T, nc,
                                                                                      p.d, p.dv, C);
  MEMCAP_CUDA_CHECK_LAUNCH("chunk_state_simt_kernel");
  if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[0], stream));
  if (form == AttentionForm::chunked) {
    launch_scan_sequential(s_loc, s_pre, gpu::DType::f32, zbh, znc, znp * p.dv, stream);
    launch_scan_sequential(z_loc, z_pre, gpu::DType::f32, zbh, znc, znp, stream);
  } else {
    launch_scan_tree(s_loc, s_pre, gpu::DType::f32, zbh, znc, znp * p.dv, stream);
    launch_scan_tree(z_loc, z_pre, gpu::DType::f32, zbh, znc, znp, stream);
  }
  if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[1], stream));
  ::memcap::cuda_detail::raise_dynamic_smem(chunk_output_simt_kernel<E>, out_smem);
  chunk_output_simt_kernel<E><<<dim3(nc, zbh), 128, out_smem, stream>>>(mp, q, k, v, s_pre, z_pre, out, T, nc, p.d,
                                                                         p.dv, C);
  MEMCAP_CUDA_CHECK_LAUNCH("chunk_output_simt_kernel");
}

}  // namespace

int chunk_simt_smem_bytes(const AttentionLaunch& p) {
  return simt_state_smem(p) > simt_output_smem(p) ? simt_state_smem(p) : simt_output_smem(p);
}

std::size_t chunk_simt_workspace(const AttentionLaunch& p) {
  const std::size_t nc = (p.T + p.chunk - 1) / p.chunk, np = device_map(p.map).n_padded;
  const std::size_t nS = p.B * p.H * nc * np * p.dv, nZ = p.B * p.H * nc * np;
  return 2 * (nS + nZ) * 4;
}

void launch_chunk_simt(const AttentionLaunch& p, AttentionForm form, const AttentionPtrs& a, cudaStream_t stream) {
  const AttnMap mp = attn_map(p);
  auto* ws = static_cast<unsigned char*>(a.workspace);
  if (p.dtype == gpu::DType::bf16)
    run_simt<__nv_bfloat16>(p, form, mp, static_cast<const __nv_bfloat16*>(a.q), static_cast<const __nv_bfloat16*>(a.k),
                            static_cast<const __nv_bfloat16*>(a.v), static_cast<__nv_bfloat16*>(a.out), ws, stream);
  else
    run_simt<float>(p, form, mp, static_cast<const float*>(a.q), static_cast<const float*>(a.k),
                    static_cast<const float*>(a.v), static_cast<float*>(a.out), ws, stream);
}

bool chunk2_supported(const AttentionLaunch& p, AttentionForm form) {
  if (p.dtype != gpu::DType::bf16 || p.d != p.dv) return false;
  if (form == AttentionForm::tree && !p.map.is_linear_family()) return false;
  if (p.d == 64) {
    if (p.chunk != 64 && p.chunk != 128) return false;
  } else if (p.d == 32 || p.d == 128) {
    if (p.chunk != 64) return false;
  } else {
    return false;
  }
  if (p.map.is_psd()) {
    if (p.map.g != 1 && p.map.g != 2 && p.map.g != 4) return false;
    const int m = p.d / p.map.g;
    if (m % 16 != 0 && m != 8) return false;
  }
  return true;
}

int chunk2_segments(const AttentionLaunch& p) {
  const int sms = current_arch().sms;
  // about eight state programs per SM (one feature block each) over all segments, at least two chunks per walk
  const std::int64_t nc = (p.T + p.chunk - 1) / p.chunk, nfb = device_map(p.map).n_padded / 64;
  const std::int64_t per_seg = p.B * p.H * nfb;
  std::int64_t segs = (8 * static_cast<std::int64_t>(sms) + per_seg - 1) / per_seg;
  if (segs > nc / 2) segs = nc / 2;
  if (segs > 65535) segs = 65535;
  if (segs < 2) return 1;
  const std::int64_t cps = (nc + segs - 1) / segs;
  return static_cast<int>((nc + cps - 1) / cps);  // no empty segment
}

std::size_t chunk2_workspace(const AttentionLaunch& p, AttentionForm form, int segments, int stride) {
  const std::size_t nc = (p.T + p.chunk - 1) / p.chunk, np = device_map(p.map).n_padded;
  const std::size_t slots = (nc + stride - 1) / stride;
  const std::size_t nS = p.B * p.H * slots * np * p.d, nZ = p.B * p.H * slots * np;
  std::size_t extra = form == AttentionForm::tree ? nS * 4 + nZ * 4 : 0;
  if (form == AttentionForm::chunked && segments > 1)
    extra = 2 * static_cast<std::size_t>(p.B * p.H) * static_cast<std::size_t>(segments) * np * (p.d + 1) * 4;
  if (form == AttentionForm::chunked && (segments == kChunk2BlockScan || segments == kChunk2BlockScanColumns))
    extra = static_cast<std::size_t>(p.B * p.H) * slots * np * (p.d + 1) * 4;
  return nS * 2 + nZ * 4 + extra;
}

void launch_chunk2(const AttentionLaunch& p, AttentionForm form, int segments, int stride, const AttentionPtrs& a,
                   cudaStream_t stream, unsigned opts) {
  if (opts != 0 && p.d != 64)
    cuda_detail::throw_user_error("chunked attention: the wgmma output pass and the paired order are built for d = 64 "
                                  "only");
  if (p.d == 32) launch_chunk2_d32(p, form, segments, stride, a, stream);
  else if (p.d == 64) launch_chunk2_d64(p, form, segments, stride, a, stream, opts);
  else launch_chunk2_d128(p, form, segments, stride, a, stream);
}

}  // namespace memcap::kata::cuda

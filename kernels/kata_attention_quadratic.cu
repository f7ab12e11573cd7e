// Quadratic causal KATA attention forward (spec kata.md §5.1): the scalar (SIMT, fp32 arithmetic) fallback for
// any d, d_v, map and dtype, and the dispatch of the mma.sync tensor-core kernel by head width (the kernel
// template is kata_attention_quad_mma.cuh, instantiated per width in kata_attention_quad_mma_d*.cu; the Hopper
// kernel is kata_attention_wgmma*.cu). Which one runs is decided by the variant table
// (kata_attention_variants.cu).
#include "cuda_check.cuh"
#include "smem_limit.cuh"
#include "kata_attention_common.cuh"
#include "kata_attention_impl.cuh"

namespace memcap::kata::cuda {
namespace {

// ---- SIMT path: any d, dv, map, fp32 or bf16 inputs; fp32 arithmetic --------------------------
constexpr int kSimtRows = 32, kSimtThreads = 128;

template <class E>
__global__ void __launch_bounds__(kSimtThreads) quadratic_simt_kernel(AttnMap mp, const E* __restrict__ q,
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

template <class E>
void launch_simt_typed(const AttentionLaunch& p, const void* q, const void* k, const void* v, void* out,
                 cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(float)) *
                   (kSimtRows * (2 * p.d + 2 * p.dv) + kSimtRows * (kSimtRows + 1) + kSimtRows);
  auto kern = quadratic_simt_kernel<E>;
  ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
  const dim3 grid(static_cast<unsigned>((p.T + kSimtRows - 1) / kSimtRows), static_cast<unsigned>(p.B * p.H));
  kern<<<grid, kSimtThreads, smem, stream>>>(attn_map(p), static_cast<const E*>(q), static_cast<const E*>(k),
                                             static_cast<const E*>(v), static_cast<E*>(out), static_cast<int>(p.T),
                                             p.d, p.dv);
  MEMCAP_CUDA_CHECK_LAUNCH("quadratic_simt_kernel");
}

}  // namespace

int quad_simt_smem_bytes(const AttentionLaunch& p) {
  return static_cast<int>(sizeof(float)) *
         (kSimtRows * (2 * p.d + 2 * p.dv) + kSimtRows * (kSimtRows + 1) + kSimtRows);
}

void launch_quad_simt(const AttentionLaunch& p, const AttentionPtrs& a, cudaStream_t stream) {
  if (p.dtype == gpu::DType::bf16)
    launch_simt_typed<__nv_bfloat16>(p, a.q, a.k, a.v, a.out, stream);
  else
    launch_simt_typed<float>(p, a.q, a.k, a.v, a.out, stream);
}

bool quad_mma_supported(const AttentionLaunch& p, int mt) {
  if (p.dtype != gpu::DType::bf16 || p.d != p.dv) return false;
  if (p.d != 32 && p.d != 64 && p.d != 128) return false;
  if (mt == 2 && p.d > 64) return false;  // MT = 2 at d = 128 needs more registers than a thread has
  if (p.map.is_linear_family()) return true;
  if (!p.map.is_psd() || (p.map.g != 1 && p.map.g != 2 && p.map.g != 4)) return false;
  const int m = p.d / p.map.g;
  return m % 16 == 0 || m == 8;
}

void launch_quad_mma(const AttentionLaunch& p, int mt, const AttentionPtrs& a, cudaStream_t stream) {
  if (p.d == 32) launch_quad_mma_d32(p, mt, a, stream);
  else if (p.d == 64) launch_quad_mma_d64(p, mt, a, stream);
  else launch_quad_mma_d128(p, mt, a, stream);
}

}  // namespace memcap::kata::cuda

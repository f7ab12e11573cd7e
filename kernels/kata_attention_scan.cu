// Exclusive prefix scans over chunk states for the chunked and tree forms of KATA attention.
// Tree: Hillis-Steele in shared memory, one block per (bh, group of EG consecutive state elements).
#include "cuda_check.cuh"
#include "smem_limit.cuh"
#include "kata_attention_common.cuh"
#include "kata_attention_impl.cuh"

namespace memcap::kata::cuda {
namespace {

template <class O>
__global__ void scan_sequential_kernel(const float* __restrict__ in, O* __restrict__ out, std::int64_t nc,
                                       std::int64_t e) {
  const std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t bh = blockIdx.y;
  if (idx >= e) return;
  const float* src = in + bh * nc * e + idx;
  O* dst = out + bh * nc * e + idx;
  float run = 0.f;
  for (std::int64_t c = 0; c < nc; ++c) {
    const float x = src[c * e];
    dst[c * e] = from_f<O>(run);
    run += x;
  }
}

// A column's running sum: a float for fp32 states; for bf16 states a thread owns two adjacent elements (one bf16x2
// load and store per chunk, the same 4 bytes a load as the fp32 kernel), summed as a float2.
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float2 widen(__nv_bfloat162 x) { return __bfloat1622float2(x); }
__device__ __forceinline__ void accumulate(float& r, float x) { r += x; }
__device__ __forceinline__ void accumulate(float2& r, float2 x) {
  r.x += x.x;
  r.y += x.y;
}
template <class O>
__device__ __forceinline__ void put(O* p, float r) { *p = from_f<O>(r); }
__device__ __forceinline__ void put(__nv_bfloat162* p, float2 r) { *p = __float22bfloat162_rn(r); }

// scan_sequential_kernel with the loads of U chunks issued together (independent addresses), then their U
// dependent adds and stores: U loads in flight per thread instead of one. In: float (O float or bf16) or
// __nv_bfloat162 (O the same; e counts pairs). (Once `scan-g4c` has run on a GPU, scan_sequential_kernel can become
// this kernel with U = 1: kept apart until then, since `fused` runs it by default and was validated with it.)
template <class In, class O, int U>
__global__ void scan_columns_kernel(const In* __restrict__ in, O* __restrict__ out, std::int64_t nc, std::int64_t e) {
  const std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t bh = blockIdx.y;
  if (idx >= e) return;
  const In* src = in + bh * nc * e + idx;
  O* dst = out + bh * nc * e + idx;
  decltype(widen(In{})) run{};
  std::int64_t c = 0;
  for (; c + U <= nc; c += U) {
    In x[U];
#pragma unroll
    for (int u = 0; u < U; ++u) x[u] = src[(c + u) * e];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      put(dst + (c + u) * e, run);
      accumulate(run, widen(x[u]));
    }
  }
  for (; c < nc; ++c) {
    const In x = src[c * e];
    put(dst + c * e, run);
    accumulate(run, widen(x));
  }
}

// One block per (bh, group of EG consecutive elements); thread t owns element t % EG of chunks
// t / EG, t / EG + blockDim / EG, ... (EG is a compile-time power of two: no divisions in the loops).
template <class O, int EG>
__global__ void scan_tree_kernel(const float* __restrict__ in, O* __restrict__ out, int nc, std::int64_t e) {
  extern __shared__ __align__(16) float tile[];  // two buffers of nc * EG
  float* a = tile;
  float* b = tile + nc * EG;
  const std::int64_t bh = blockIdx.y;
  const std::int64_t e0 = static_cast<std::int64_t>(blockIdx.x) * EG;
  const int x = threadIdx.x % EG, c0 = threadIdx.x / EG, cstep = blockDim.x / EG;
  const bool valid = e0 + x < e;
  for (int c = c0; c < nc; c += cstep) a[c * EG + x] = valid ? in[(bh * nc + c) * e + e0 + x] : 0.f;
  __syncthreads();
  for (int step = 1; step < nc; step *= 2) {  // inclusive Hillis-Steele rounds, double-buffered
    for (int c = c0; c < nc; c += cstep) b[c * EG + x] = a[c * EG + x] + (c >= step ? a[(c - step) * EG + x] : 0.f);
    __syncthreads();
    float* t = a;
    a = b;
    b = t;
  }
  if (valid)  // shift by one chunk: exclusive prefix
    for (int c = c0; c < nc; c += cstep) out[(bh * nc + c) * e + e0 + x] = from_f<O>(c == 0 ? 0.f : a[(c - 1) * EG + x]);
}

template <class O, int EG>
void launch_tree_eg(const float* in, O* out, std::int64_t bh, std::int64_t nc, std::int64_t e, int smem,
                    cudaStream_t stream) {
  ::memcap::cuda_detail::raise_dynamic_smem(scan_tree_kernel<O, EG>, smem);
  const dim3 grid(static_cast<unsigned>((e + EG - 1) / EG), static_cast<unsigned>(bh));
  scan_tree_kernel<O, EG><<<grid, 512, smem, stream>>>(in, out, static_cast<int>(nc), e);
  MEMCAP_CUDA_CHECK_LAUNCH("scan_tree_kernel");
}

template <class O>
void launch_tree_typed(const float* in, O* out, std::int64_t bh, std::int64_t nc, std::int64_t e, int eg, int smem,
                       cudaStream_t stream) {
  switch (eg) {
    case 64: return launch_tree_eg<O, 64>(in, out, bh, nc, e, smem, stream);
    case 32: return launch_tree_eg<O, 32>(in, out, bh, nc, e, smem, stream);
    case 16: return launch_tree_eg<O, 16>(in, out, bh, nc, e, smem, stream);
    case 8: return launch_tree_eg<O, 8>(in, out, bh, nc, e, smem, stream);
    case 4: return launch_tree_eg<O, 4>(in, out, bh, nc, e, smem, stream);
    case 2: return launch_tree_eg<O, 2>(in, out, bh, nc, e, smem, stream);
    default: return launch_tree_eg<O, 1>(in, out, bh, nc, e, smem, stream);
  }
}

}  // namespace

void launch_scan_sequential(const float* in, void* out, gpu::DType out_type, std::int64_t bh, std::int64_t nc,
                            std::int64_t e, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((e + 255) / 256), static_cast<unsigned>(bh));
  if (out_type == gpu::DType::bf16)
    scan_sequential_kernel<<<grid, 256, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out), nc, e);
  else
    scan_sequential_kernel<<<grid, 256, 0, stream>>>(in, static_cast<float*>(out), nc, e);
  MEMCAP_CUDA_CHECK_LAUNCH("scan_sequential_kernel");
}

void launch_scan_columns(const float* in, void* out, gpu::DType out_type, std::int64_t bh, std::int64_t nc,
                         std::int64_t e, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((e + 255) / 256), static_cast<unsigned>(bh));
  if (out_type == gpu::DType::bf16)
    scan_columns_kernel<float, __nv_bfloat16, 8><<<grid, 256, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out), nc,
                                                                            e);
  else
    scan_columns_kernel<float, float, 8><<<grid, 256, 0, stream>>>(in, static_cast<float*>(out), nc, e);
  MEMCAP_CUDA_CHECK_LAUNCH("scan_columns_kernel");
}

void launch_scan_columns_bf16(const void* in, void* out, std::int64_t bh, std::int64_t nc, std::int64_t e,
                              cudaStream_t stream) {
  if (e % 2 != 0) cuda_detail::throw_user_error("bf16 column scan: the state width must be even");
  const std::int64_t e2 = e / 2;
  const dim3 grid(static_cast<unsigned>((e2 + 255) / 256), static_cast<unsigned>(bh));
  scan_columns_kernel<__nv_bfloat162, __nv_bfloat162, 8><<<grid, 256, 0, stream>>>(
      static_cast<const __nv_bfloat162*>(in), static_cast<__nv_bfloat162*>(out), nc, e2);
  MEMCAP_CUDA_CHECK_LAUNCH("scan_columns_kernel");
}

bool scan_tree_fits(std::int64_t nc) { return 2 * nc * 4 <= 192 * 1024; }

void launch_scan_tree(const float* in, void* out, gpu::DType out_type, std::int64_t bh, std::int64_t nc, std::int64_t e,
                      cudaStream_t stream) {
  // bytes of shared memory for the two buffers: 64 KB (3 blocks per SM), up to 192 KB for long sequences
  std::int64_t budget = 64 * 1024;
  int eg = 64;
  while (eg > 1 && 2 * nc * eg * 4 > budget) eg /= 2;
  if (2 * nc * eg * 4 > budget) budget = 192 * 1024;
  if (2 * nc * eg * 4 > budget)
    cuda_detail::throw_user_error("tree scan: more than 24576 chunks per sequence; use a larger --chunk");
  const int smem = static_cast<int>(2 * nc * eg * 4);
  if (out_type == gpu::DType::bf16)
    launch_tree_typed(in, static_cast<__nv_bfloat16*>(out), bh, nc, e, eg, smem, stream);
  else
    launch_tree_typed(in, static_cast<float*>(out), bh, nc, e, eg, smem, stream);
}

}  // namespace memcap::kata::cuda

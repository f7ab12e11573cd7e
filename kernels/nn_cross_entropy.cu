// Softmax cross-entropy on the GPU (kernels/nn_layers.cuh; CPU reference nn::cpu::cross_entropy_* in
// src/nn/layers.cpp). One block per row as in llm.c: pass 1 finds the row max and its index (smallest
// index on ties), pass 2 sums exp(x − max) over every other entry in double, so that
//   loss = (max − x[target]) + log1p(Σ_{j≠argmax} exp(x_j − max))
// keeps full relative precision as the loss goes to zero (a plain log(Σ) in float32 cannot resolve a
// loss below ~6e-8). The backward uses expm1(−loss) for the target entry for the same reason.
// The mean loss and the correct count are reduced by one block in a fixed order (no float atomics).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "nn_bf16x3.cuh"
#include "nn_device.cuh"
#include "nn_layers.cuh"

namespace memcap::nn::cuda {

namespace {

constexpr int kRowThreads = 256;

// Where the float gradient goes instead of dlogits (cross_entropy_forward_backward_split): planes hi = bf16(g),
// lo = bf16(g − hi), row stride ld. hi == nullptr: write dlogits.
struct SplitOut {
  __nv_bfloat16* hi = nullptr;
  __nv_bfloat16* lo = nullptr;
  std::int64_t ld = 0;
};

__device__ inline void put_split(const SplitOut& o, std::int64_t n, std::int64_t j, float g) {
  const __nv_bfloat16 h = __float2bfloat16_rn(g);
  o.hi[n * o.ld + j] = h;
  o.lo[n * o.ld + j] = __float2bfloat16_rn(g - __bfloat162float(h));
}

struct RowStats {
  double mx;      // row max (as double)
  int arg;        // its index (smallest on ties; -1 when no entry compares, e.g. all NaN)
  double others;  // Σ_{j≠arg} exp(x_j − mx)
};

// Block-wide argmax (smallest index on ties) of each thread's (best, bi) candidate: every thread gets the
// same answer (a fixed reduction tree). bi = -1 means "no entry" (e.g. all NaN); argmax_merge never picks
// -1 over a real index because real indices are >= 0 and -1 only pairs with -inf.
template <class T>
__device__ void block_argmax(T& best, int& bi, T* s_val, int* s_idx) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  dev::warp_argmax(best, bi);
  __syncthreads();
  if (lane == 0) {
    s_val[warp] = best;
    s_idx[warp] = bi;
  }
  __syncthreads();
  best = -INFINITY;
  bi = -1;
  for (int w = 0; w < nw; ++w) {
    const T v = s_val[w];
    const int i = s_idx[w];
    if (i >= 0) {
      if (bi < 0)
        best = v, bi = i;
      else
        dev::argmax_merge(best, bi, v, i);
    }
  }
}

// Every thread of the block returns the same stats (fixed reduction trees).
template <class T>
__device__ RowStats row_stats(const T* __restrict__ x, std::int64_t P) {
  __shared__ T s_val[32];
  __shared__ int s_idx[32];
  __shared__ double s_sum[32];
  T best = -INFINITY;
  int bi = -1;
  for (std::int64_t j = threadIdx.x; j < P; j += blockDim.x) dev::argmax_merge(best, bi, x[j], static_cast<int>(j));
  block_argmax(best, bi, s_val, s_idx);
  const double mx = static_cast<double>(best);
  double s = 0;
  for (std::int64_t j = threadIdx.x; j < P; j += blockDim.x)
    if (j != bi) s += static_cast<double>(dev::exp_(static_cast<T>(static_cast<double>(x[j]) - mx)));
  s = dev::block_sum(s, s_sum);
  return RowStats{mx, bi, s};
}

// dx[j] = scale·softmax_j (scale·expm1(−loss) at the target), after a __syncthreads() so that an
// in-place dx = x sees every read of the row first.
// With so.hi set (float only) the gradient of row n goes to the split planes instead of dx.
template <class T>
__device__ void write_grad_row(T* dx, const T* x, std::int64_t P, int t, double loss, double lse, double scale,
                               const SplitOut& so = SplitOut{}, std::int64_t n = 0) {
  __syncthreads();
  for (std::int64_t j = threadIdx.x; j < P; j += blockDim.x) {
    const double v = j == t ? scale * static_cast<double>(dev::expm1_(static_cast<T>(-loss)))
                            : scale * static_cast<double>(dev::exp_(static_cast<T>(static_cast<double>(x[j]) - lse)));
    if constexpr (std::is_same_v<T, float>) {
      if (so.hi) {
        put_split(so, n, j, static_cast<float>(v));
        continue;
      }
    }
    dx[j] = static_cast<T>(v);
  }
}

template <class T>
__device__ double row_loss(const RowStats& st, double zt) {
  if (st.arg < 0) return NAN;  // every entry NaN
  return (st.mx - zt) + log1p(st.others);
}

template <class T>
__global__ void __launch_bounds__(kRowThreads) ce_forward_kernel(T* __restrict__ losses, std::uint8_t* __restrict__ correct,
                                                                 const T* __restrict__ logits,
                                                                 const std::int32_t* __restrict__ targets, std::int64_t P) {
  const std::int64_t n = blockIdx.x;
  const T* x = logits + n * P;
  const RowStats st = row_stats(x, P);
  if (threadIdx.x == 0) {
    const int t = targets[n];
    const bool ok = t >= 0 && t < P;
    losses[n] = ok ? static_cast<T>(row_loss<T>(st, static_cast<double>(x[t]))) : static_cast<T>(NAN);
    if (correct) correct[n] = (ok && st.arg == t) ? 1 : 0;
  }
}

template <class T>
__global__ void __launch_bounds__(kRowThreads) ce_backward_kernel(T* dlogits, const T* logits,
                                                                  const std::int32_t* __restrict__ targets,
                                                                  std::int64_t P, double scale) {
  const std::int64_t n = blockIdx.x;
  const T* x = logits + n * P;
  const RowStats st = row_stats(x, P);
  const int t = targets[n];
  const bool ok = t >= 0 && t < P;
  const double loss = ok ? row_loss<T>(st, static_cast<double>(x[t])) : NAN;
  const double lse = st.mx + log1p(st.others);
  write_grad_row(dlogits + n * P, x, P, t, loss, lse, scale);
}

// Forward and backward in one pass (generic form): the row stats once, then the gradient; the second
// read of the row hits the cache. Same per-row formulas as ce_forward_kernel / ce_backward_kernel.
template <class T>
__global__ void __launch_bounds__(kRowThreads) ce_fused_kernel(T* dlogits, T* __restrict__ losses,
                                                               std::uint8_t* __restrict__ correct, const T* logits,
                                                               const std::int32_t* __restrict__ targets,
                                                               std::int64_t P, double scale, SplitOut so) {
  const std::int64_t n = blockIdx.x;
  const T* x = logits + n * P;
  const RowStats st = row_stats(x, P);
  const int t = targets[n];
  const bool ok = t >= 0 && t < P;
  const double loss = ok ? row_loss<T>(st, static_cast<double>(x[t])) : NAN;
  const double lse = st.mx + log1p(st.others);
  if (threadIdx.x == 0) {
    losses[n] = static_cast<T>(loss);
    if (correct) correct[n] = (ok && st.arg == t) ? 1 : 0;
  }
  write_grad_row(so.hi ? dlogits : dlogits + n * P, x, P, t, loss, lse, scale, so, n);
}

// The same for float rows with P % 4 == 0 and P ≤ 4·NV·kRowThreads: the row is read once as float4
// into registers (DRAM traffic = one read + one write of the logits). Element j = 4·(c·kRowThreads +
// threadIdx.x) + q. Argmax ties resolve by index (argmax_merge), so the answer does not depend on the
// assignment; the double sum's order is fixed (bit-identical run to run).
template <int NV>
__global__ void __launch_bounds__(kRowThreads) ce_fused_vec_kernel(float* dlogits, float* __restrict__ losses,
                                                                   std::uint8_t* __restrict__ correct,
                                                                   const float* logits,
                                                                   const std::int32_t* __restrict__ targets, int P,
                                                                   double scale, SplitOut so) {
  __shared__ float s_val[32];
  __shared__ int s_idx[32];
  __shared__ double s_sum[32];
  const std::int64_t n = blockIdx.x;
  const float* x = logits + n * static_cast<std::int64_t>(P);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const int P4 = P >> 2;
  float4 r[NV];
  float best = -INFINITY;
  int bi = -1;
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    const int j4 = c * kRowThreads + static_cast<int>(threadIdx.x);
    if (j4 < P4) {
      r[c] = x4[j4];
      dev::argmax_merge(best, bi, r[c].x, 4 * j4);
      dev::argmax_merge(best, bi, r[c].y, 4 * j4 + 1);
      dev::argmax_merge(best, bi, r[c].z, 4 * j4 + 2);
      dev::argmax_merge(best, bi, r[c].w, 4 * j4 + 3);
    }
  }
  block_argmax(best, bi, s_val, s_idx);
  const double mx = static_cast<double>(best);
  double s = 0;
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    const int j4 = c * kRowThreads + static_cast<int>(threadIdx.x);
    if (j4 < P4) {
      const float e[4] = {r[c].x, r[c].y, r[c].z, r[c].w};
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (4 * j4 + q != bi) s += static_cast<double>(expf(static_cast<float>(static_cast<double>(e[q]) - mx)));
    }
  }
  s = dev::block_sum(s, s_sum);
  const int t = targets[n];
  const bool ok = t >= 0 && t < P;
  const double loss = ok ? (bi < 0 ? NAN : (mx - static_cast<double>(x[t])) + log1p(s)) : NAN;
  const double lse = mx + log1p(s);
  if (threadIdx.x == 0) {
    losses[n] = static_cast<float>(loss);
    if (correct) correct[n] = (ok && bi == t) ? 1 : 0;
  }
  __syncthreads();  // x[t] read by every thread before any in-place write
  float4* d4 = so.hi ? nullptr : reinterpret_cast<float4*>(dlogits + n * static_cast<std::int64_t>(P));
  const float tgt = static_cast<float>(scale * static_cast<double>(expm1f(static_cast<float>(-loss))));
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    const int j4 = c * kRowThreads + static_cast<int>(threadIdx.x);
    if (j4 < P4) {
      const float e[4] = {r[c].x, r[c].y, r[c].z, r[c].w};
      float o[4];
#pragma unroll
      for (int q = 0; q < 4; ++q)
        o[q] = 4 * j4 + q == t
                   ? tgt
                   : static_cast<float>(scale * static_cast<double>(expf(static_cast<float>(static_cast<double>(e[q]) - lse))));
      if (so.hi) {
#pragma unroll
        for (int q = 0; q < 4; ++q) put_split(so, n, 4 * j4 + q, o[q]);
      } else {
        d4[j4] = make_float4(o[0], o[1], o[2], o[3]);
      }
    }
  }
}

// One block: *loss_mean = Σ losses / N (double, fixed order), *n_correct = Σ correct.
template <class T>
__global__ void __launch_bounds__(1024) ce_reduce_kernel(const T* __restrict__ losses, const std::uint8_t* __restrict__ correct,
                                                         std::int64_t N, double* loss_mean, std::int64_t* n_correct) {
  __shared__ double s_sum[32];
  __shared__ long long s_cnt[32];
  double s = 0;
  long long c = 0;
  for (std::int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    s += static_cast<double>(losses[i]);
    if (correct) c += correct[i];
  }
  s = dev::block_sum(s, s_sum);
  c = dev::block_sum(c, s_cnt);
  if (threadIdx.x == 0) {
    if (loss_mean) *loss_mean = s / static_cast<double>(N);
    if (n_correct) *n_correct = c;
  }
}

void check_rows(std::int64_t N, std::int64_t P) {
  if (N < 1 || P < 1 || N > 2147483647LL || P > 2147483647LL)
    cuda_detail::throw_user_error("cross-entropy needs 1 <= N, P < 2^31 (got " + std::to_string(N) + " x " +
                                  std::to_string(P) + ")");
}

}  // namespace

template <class T>
void cross_entropy_forward(T* losses, const T* logits, const std::int32_t* targets, std::int64_t N, std::int64_t P,
                           std::uint8_t* correct, double* loss_mean, std::int64_t* n_correct, cudaStream_t stream) {
  check_rows(N, P);
  if (!losses) cuda_detail::throw_user_error("nn::cuda::cross_entropy_forward needs a device buffer for the N row losses");
  ce_forward_kernel<T><<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(losses, correct, logits, targets, P);
  MEMCAP_CUDA_CHECK_LAUNCH("ce_forward_kernel");
  if (loss_mean || n_correct) {
    ce_reduce_kernel<T><<<1, 1024, 0, stream>>>(losses, correct, N, loss_mean, n_correct);
    MEMCAP_CUDA_CHECK_LAUNCH("ce_reduce_kernel");
  }
}

template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N, std::int64_t P,
                            double dloss, cudaStream_t stream) {
  check_rows(N, P);
  ce_backward_kernel<T><<<static_cast<unsigned>(N), kRowThreads, 0, stream>>>(dlogits, logits, targets, P,
                                                                              dloss / static_cast<double>(N));
  MEMCAP_CUDA_CHECK_LAUNCH("ce_backward_kernel");
}

namespace {

// cross_entropy_forward_backward, with the gradient written to dlogits or (so.hi set, float only) to split planes.
template <class T>
void ce_forward_backward_impl(T* dlogits, const SplitOut& so, T* losses, const T* logits, const std::int32_t* targets,
                              std::int64_t N, std::int64_t P, std::uint8_t* correct, double* loss_mean,
                              std::int64_t* n_correct, double dloss, cudaStream_t stream) {
  check_rows(N, P);
  if (!losses)
    cuda_detail::throw_user_error("nn::cuda::cross_entropy_forward_backward needs a device buffer for the N row losses");
  const double scale = dloss / static_cast<double>(N);
  const unsigned grid = static_cast<unsigned>(N);
  bool done = false;
  if constexpr (std::is_same_v<T, float>) {
    const bool vec = P % 4 == 0 && (reinterpret_cast<std::uintptr_t>(logits) & 15u) == 0 &&
                     (so.hi || (reinterpret_cast<std::uintptr_t>(dlogits) & 15u) == 0);
    const std::int64_t per = 4LL * kRowThreads;  // floats per register chunk
    const int p = static_cast<int>(P);
    if (vec && P <= per) {
      ce_fused_vec_kernel<1><<<grid, kRowThreads, 0, stream>>>(dlogits, losses, correct, logits, targets, p, scale,
                                                                   so), done = true;
    } else if (vec && P <= 2 * per) {
      ce_fused_vec_kernel<2><<<grid, kRowThreads, 0, stream>>>(dlogits, losses, correct, logits, targets, p, scale,
                                                                   so), done = true;
    } else if (vec && P <= 4 * per) {
      ce_fused_vec_kernel<4><<<grid, kRowThreads, 0, stream>>>(dlogits, losses, correct, logits, targets, p, scale,
                                                                   so), done = true;
    } else if (vec && P <= 8 * per) {
      ce_fused_vec_kernel<8><<<grid, kRowThreads, 0, stream>>>(dlogits, losses, correct, logits, targets, p, scale,
                                                                   so), done = true;
    }
    if (done) MEMCAP_CUDA_CHECK_LAUNCH("ce_fused_vec_kernel");
  }
  if (!done) {
    ce_fused_kernel<T><<<grid, kRowThreads, 0, stream>>>(dlogits, losses, correct, logits, targets, P, scale, so);
    MEMCAP_CUDA_CHECK_LAUNCH("ce_fused_kernel");
  }
  if (loss_mean || n_correct) {
    ce_reduce_kernel<T><<<1, 1024, 0, stream>>>(losses, correct, N, loss_mean, n_correct);
    MEMCAP_CUDA_CHECK_LAUNCH("ce_reduce_kernel");
  }
}

}  // namespace

template <class T>
void cross_entropy_forward_backward(T* dlogits, T* losses, const T* logits, const std::int32_t* targets,
                                    std::int64_t N, std::int64_t P, std::uint8_t* correct, double* loss_mean,
                                    std::int64_t* n_correct, double dloss, cudaStream_t stream) {
  ce_forward_backward_impl<T>(dlogits, SplitOut{}, losses, logits, targets, N, P, correct, loss_mean, n_correct, dloss,
                              stream);
}

void cross_entropy_forward_backward_split(__nv_bfloat16* d_hi, __nv_bfloat16* d_lo, float* losses,
                                          const float* logits, const std::int32_t* targets, std::int64_t N,
                                          std::int64_t P, std::uint8_t* correct, double* loss_mean,
                                          std::int64_t* n_correct, double dloss, cudaStream_t stream) {
  if (!d_hi || !d_lo)
    cuda_detail::throw_user_error("nn::cuda::cross_entropy_forward_backward_split needs both gradient planes");
  ce_forward_backward_impl<float>(nullptr, SplitOut{d_hi, d_lo, split_plane_ld(P)}, losses, logits, targets, N, P,
                                  correct, loss_mean, n_correct, dloss, stream);
}

#define MEMCAP_NN_CE(T)                                                                                          \
  template void cross_entropy_forward<T>(T*, const T*, const std::int32_t*, std::int64_t, std::int64_t,          \
                                         std::uint8_t*, double*, std::int64_t*, cudaStream_t);                 \
  template void cross_entropy_backward<T>(T*, const T*, const std::int32_t*, std::int64_t, std::int64_t, double, \
                                          cudaStream_t);                                                        \
  template void cross_entropy_forward_backward<T>(T*, T*, const T*, const std::int32_t*, std::int64_t,          \
                                                  std::int64_t, std::uint8_t*, double*, std::int64_t*, double,   \
                                                  cudaStream_t);
MEMCAP_NN_CE(float)
MEMCAP_NN_CE(double)
#undef MEMCAP_NN_CE

}  // namespace memcap::nn::cuda

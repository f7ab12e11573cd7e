// Softmax cross-entropy on the GPU (kernels/nn_layers.cuh; CPU reference nn::cpu::cross_entropy_* in
// src/nn/layers.cpp). One block per row as in llm.c: pass 1 finds the row max and its index (smallest
// index on ties), pass 2 sums exp(x − max) over every other entry in double, so that
//   loss = (max − x[target]) + log1p(Σ_{j≠argmax} exp(x_j − max))
// keeps full relative precision as the loss goes to zero (a plain log(Σ) in float32 cannot resolve a
// loss below ~6e-8). The backward uses expm1(−loss) for the target entry for the same reason.
// The mean loss and the correct count are reduced by one block in a fixed order (no float atomics).
#include <cuda_runtime.h>

#include <cmath>

#include "nn_device.cuh"
#include "nn_layers.cuh"

namespace memcap::nn::cuda {

namespace {

constexpr int kRowThreads = 256;

struct RowStats {
  double mx;      // row max (as double)
  int arg;        // its index (smallest on ties; -1 when no entry compares, e.g. all NaN)
  double others;  // Σ_{j≠arg} exp(x_j − mx)
};

// Every thread of the block returns the same stats (fixed reduction trees).
template <class T>
__device__ RowStats row_stats(const T* __restrict__ x, std::int64_t P) {
  __shared__ T s_val[32];
  __shared__ int s_idx[32];
  __shared__ double s_sum[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  T best = -INFINITY;
  int bi = -1;
  for (std::int64_t j = threadIdx.x; j < P; j += blockDim.x) dev::argmax_merge(best, bi, x[j], static_cast<int>(j));
  // argmax_merge treats bi = -1 as "no entry": a later (v2 == v, i2 < i) comparison never picks -1
  // because real indices are >= 0 and -1 only pairs with -inf.
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
  const double mx = static_cast<double>(best);
  double s = 0;
  for (std::int64_t j = threadIdx.x; j < P; j += blockDim.x)
    if (j != bi) s += static_cast<double>(dev::exp_(static_cast<T>(static_cast<double>(x[j]) - mx)));
  s = dev::block_sum(s, s_sum);
  return RowStats{mx, bi, s};
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
  __syncthreads();  // every read of the row happens before any in-place write
  T* dx = dlogits + n * P;
  for (std::int64_t j = threadIdx.x; j < P; j += blockDim.x) {
    const double v = j == t ? scale * static_cast<double>(dev::expm1_(static_cast<T>(-loss)))
                            : scale * static_cast<double>(dev::exp_(static_cast<T>(static_cast<double>(x[j]) - lse)));
    dx[j] = static_cast<T>(v);
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

#define MEMCAP_NN_CE(T)                                                                                          \
  template void cross_entropy_forward<T>(T*, const T*, const std::int32_t*, std::int64_t, std::int64_t,          \
                                         std::uint8_t*, double*, std::int64_t*, cudaStream_t);                 \
  template void cross_entropy_backward<T>(T*, const T*, const std::int32_t*, std::int64_t, std::int64_t, double, \
                                          cudaStream_t);
MEMCAP_NN_CE(float)
MEMCAP_NN_CE(double)
#undef MEMCAP_NN_CE

}  // namespace memcap::nn::cuda

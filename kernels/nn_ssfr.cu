// CUDA kernels of the SSFR block (kernels/nn_ssfr.cuh). One warp per row for the row-wise kernels
// (attention softmax, unit norms); reductions by xor-shuffle trees (every lane gets the same bits);
// scatters onto vocabulary rows run on lane 0 in position order, so repeated tokens add up in the
// same order as the CPU reference, run to run.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda_check.cuh"
#include "nn_device.cuh"
#include "nn_ssfr.cuh"
#include "nn_train_state_dev.cuh"

namespace memcap::nn::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block of the row kernels
constexpr int kThreads = 256;

unsigned row_blocks(std::int64_t N) {
  const std::int64_t b = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}
unsigned elem_blocks(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 524280 ? 524280 : b));
}

__global__ void batch_kernel(std::int32_t* tokens, std::int32_t* len, std::int32_t* qrow, std::int32_t* target,
                             const std::int32_t* map, SsfrDims dims, std::uint64_t seed, std::uint64_t stream,
                             std::uint64_t batch, const TrainState* st, std::int64_t B) {
  const std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (i >= B) return;
  const std::uint64_t b = st ? static_cast<std::uint64_t>(static_cast<const volatile TrainState*>(st)->step) : batch;
  std::int32_t* tok = tokens + i * dims.seq_len;
  const SsfrSeqInfo info =
      ssfr_draw(tok, map, dims, seed, stream, ssfr_sequence_index(b, static_cast<std::uint64_t>(B), static_cast<std::uint64_t>(i)));
  len[i] = info.query_pos + 1;
  qrow[i] = tok[info.query_pos];
  target[i] = map[info.key];
}

template <class T>
__global__ void gather_kernel(T* out, const T* table, const std::int32_t* rows, std::int64_t N, std::int64_t C) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < N * C;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t n = i / C, c = i % C;
    out[i] = table[static_cast<std::int64_t>(rows[n]) * C + c];
  }
}

template <class T>
__global__ void softmax_kernel(T* att, T* A, const T* QK, const std::int32_t* tokens, const std::int32_t* len,
                               std::int64_t N, std::int64_t Tn, std::int64_t V, T scale) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (n >= N) return;  // whole warps leave together
  const std::int64_t L = len[n];
  const std::int32_t* tok = tokens + n * Tn;
  T* a = att + n * Tn;
  const T* qk = QK + n * V;
  T mx = -INFINITY;
  for (std::int64_t t = lane; t < L; t += 32) {
    const T s = qk[tok[t]] * scale;
    a[t] = s;
    mx = fmax(mx, s);
  }
  mx = dev::warp_max(mx);
  T z = 0;
  for (std::int64_t t = lane; t < L; t += 32) {
    const T e = dev::exp_(a[t] - mx);
    a[t] = e;
    z += e;
  }
  z = dev::warp_sum(z);
  for (std::int64_t t = lane; t < L; t += 32) a[t] /= z;
  for (std::int64_t t = L + lane; t < Tn; t += 32) a[t] = 0;
  T* Ar = A + n * V;
  for (std::int64_t v = lane; v < V; v += 32) Ar[v] = 0;
  __syncwarp();
  if (lane == 0)
    for (std::int64_t t = 0; t < L; ++t) Ar[tok[t]] += a[t];
}

template <class T>
__global__ void softmax_bwd_kernel(T* S, T* ds, const T* dA, const T* att, const std::int32_t* tokens,
                                   const std::int32_t* len, std::int64_t N, std::int64_t Tn, std::int64_t V, T scale) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (n >= N) return;
  const std::int64_t L = len[n];
  const std::int32_t* tok = tokens + n * Tn;
  const T* a = att + n * Tn;
  const T* da = dA + n * V;
  T* d = ds + n * Tn;
  T mean = 0;
  for (std::int64_t t = lane; t < L; t += 32) {
    const T g = da[tok[t]];
    d[t] = g;
    mean += a[t] * g;
  }
  mean = dev::warp_sum(mean);
  for (std::int64_t t = lane; t < L; t += 32) d[t] = a[t] * (d[t] - mean) * scale;
  T* Sr = S + n * V;
  for (std::int64_t v = lane; v < V; v += 32) Sr[v] = 0;
  __syncwarp();
  if (lane == 0)
    for (std::int64_t t = 0; t < L; ++t) Sr[tok[t]] += d[t];
}

template <class T>
__global__ void l2norm_kernel(T* out, T* norm, T* sum, const T* inp, const T* add, std::int64_t N, std::int64_t C,
                              T eps) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (n >= N) return;
  const T* x = inp + n * C;
  const T* y = add ? add + n * C : nullptr;
  T ss = 0;
  for (std::int64_t c = lane; c < C; c += 32) {
    const T v = y ? x[c] + y[c] : x[c];
    if (y) sum[n * C + c] = v;
    ss += v * v;
  }
  ss = dev::warp_sum(ss);
  const T r = sqrt(ss);
  const T s = T(1) / (r + eps);
  for (std::int64_t c = lane; c < C; c += 32) out[n * C + c] = (y ? x[c] + y[c] : x[c]) * s;
  if (norm && lane == 0) norm[n] = r;
}

template <class T>
__global__ void l2norm_bwd_kernel(T* dinp, const T* dout, const T* inp, std::int64_t N, std::int64_t C, T eps) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (n >= N) return;
  const T* x = inp + n * C;
  const T* dy = dout + n * C;
  T ss = 0, dot = 0;
  for (std::int64_t c = lane; c < C; c += 32) {
    ss += x[c] * x[c];
    dot += x[c] * dy[c];
  }
  ss = dev::warp_sum(ss);
  dot = dev::warp_sum(dot);
  const T r = sqrt(ss);
  const T s = T(1) / (r + eps);
  const T k = r > T(0) ? dot / (r * (r + eps) * (r + eps)) : T(0);
  for (std::int64_t c = lane; c < C; c += 32) dinp[n * C + c] = dy[c] * s - x[c] * k;
}

template <class T>
__global__ void add_kernel(T* y, const T* x, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void accumulate_kernel(double* acc_loss, long long* acc_correct, const double* loss,
                                  const std::int64_t* n_correct) {
  *acc_loss += *loss;
  *acc_correct += static_cast<long long>(*n_correct);
}

}  // namespace

void ssfr_batch(std::int32_t* tokens, std::int32_t* len, std::int32_t* qrow, std::int32_t* target,
                const std::int32_t* map, const SsfrDims& dims, std::uint64_t seed, std::uint64_t stream,
                std::uint64_t batch, const TrainState* st, std::int64_t B, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((B + 127) / 128);
  batch_kernel<<<blocks, 128, 0, s>>>(tokens, len, qrow, target, map, dims, seed, stream, batch, st, B);
  MEMCAP_CUDA_CHECK_LAUNCH("ssfr batch_kernel");
}

template <class T>
void ssfr_gather_rows(T* out, const T* table, const std::int32_t* rows, std::int64_t N, std::int64_t C,
                      cudaStream_t s) {
  gather_kernel<T><<<elem_blocks(N * C), kThreads, 0, s>>>(out, table, rows, N, C);
  MEMCAP_CUDA_CHECK_LAUNCH("ssfr gather_kernel");
}

template <class T>
void ssfr_attention_softmax(T* att, T* A, const T* QK, const std::int32_t* tokens, const std::int32_t* len,
                            std::int64_t N, std::int64_t T_, std::int64_t V, double scale, cudaStream_t s) {
  softmax_kernel<T><<<row_blocks(N), 32 * kRowsPerBlock, 0, s>>>(att, A, QK, tokens, len, N, T_, V,
                                                                  static_cast<T>(scale));
  MEMCAP_CUDA_CHECK_LAUNCH("ssfr softmax_kernel");
}

template <class T>
void ssfr_attention_softmax_backward(T* S, T* ds, const T* dA, const T* att, const std::int32_t* tokens,
                                     const std::int32_t* len, std::int64_t N, std::int64_t T_, std::int64_t V,
                                     double scale, cudaStream_t s) {
  softmax_bwd_kernel<T><<<row_blocks(N), 32 * kRowsPerBlock, 0, s>>>(S, ds, dA, att, tokens, len, N, T_, V,
                                                                      static_cast<T>(scale));
  MEMCAP_CUDA_CHECK_LAUNCH("ssfr softmax_bwd_kernel");
}

template <class T>
void ssfr_l2norm_forward(T* out, T* norm, T* sum, const T* inp, const T* add, std::int64_t N, std::int64_t C,
                         double eps, cudaStream_t s) {
  l2norm_kernel<T><<<row_blocks(N), 32 * kRowsPerBlock, 0, s>>>(out, norm, sum, inp, add, N, C, static_cast<T>(eps));
  MEMCAP_CUDA_CHECK_LAUNCH("ssfr l2norm_kernel");
}

template <class T>
void ssfr_l2norm_backward(T* dinp, const T* dout, const T* inp, std::int64_t N, std::int64_t C, double eps,
                          cudaStream_t s) {
  l2norm_bwd_kernel<T><<<row_blocks(N), 32 * kRowsPerBlock, 0, s>>>(dinp, dout, inp, N, C, static_cast<T>(eps));
  MEMCAP_CUDA_CHECK_LAUNCH("ssfr l2norm_bwd_kernel");
}

template <class T>
void ssfr_add(T* y, const T* x, std::int64_t n, cudaStream_t s) {
  add_kernel<T><<<elem_blocks(n), kThreads, 0, s>>>(y, x, n);
  MEMCAP_CUDA_CHECK_LAUNCH("ssfr add_kernel");
}

void ssfr_accumulate(double* acc_loss, long long* acc_correct, const double* loss, const std::int64_t* n_correct,
                     cudaStream_t s) {
  accumulate_kernel<<<1, 1, 0, s>>>(acc_loss, acc_correct, loss, n_correct);
  MEMCAP_CUDA_CHECK_LAUNCH("ssfr accumulate_kernel");
}

#define MEMCAP_NN_SSFR(T)                                                                                          \
  template void ssfr_gather_rows<T>(T*, const T*, const std::int32_t*, std::int64_t, std::int64_t, cudaStream_t);  \
  template void ssfr_attention_softmax<T>(T*, T*, const T*, const std::int32_t*, const std::int32_t*,              \
                                          std::int64_t, std::int64_t, std::int64_t, double, cudaStream_t);         \
  template void ssfr_attention_softmax_backward<T>(T*, T*, const T*, const T*, const std::int32_t*,                \
                                                   const std::int32_t*, std::int64_t, std::int64_t, std::int64_t,  \
                                                   double, cudaStream_t);                                          \
  template void ssfr_l2norm_forward<T>(T*, T*, T*, const T*, const T*, std::int64_t, std::int64_t, double,         \
                                       cudaStream_t);                                                              \
  template void ssfr_l2norm_backward<T>(T*, const T*, const T*, std::int64_t, std::int64_t, double, cudaStream_t); \
  template void ssfr_add<T>(T*, const T*, std::int64_t, cudaStream_t);
MEMCAP_NN_SSFR(float)
MEMCAP_NN_SSFR(double)
#undef MEMCAP_NN_SSFR

}  // namespace memcap::nn::cuda

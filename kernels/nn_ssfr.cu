// CUDA kernels of the SSFR block (kernels/nn_ssfr.cuh). One warp per row for the row-wise kernels
// (query attention, unit norms); reductions by xor-shuffle trees (every lane gets the same bits) and
// sums over positions in position order, so runs are bit-identical.
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
__global__ void gather_kernel(T* out, const T* table, const std::int32_t* rows, std::int64_t N,
                              cuda_detail::FastDivmod Cd) {
  const std::int64_t C = Cd.divisor();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < N * C;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    std::int64_t n, c;
    Cd.divmod(i, n, c);
    out[i] = table[static_cast<std::int64_t>(rows[n]) * C + c];
  }
}

// Query attention over gathered rows, one warp per row n (the device twin of cpu::attention_query_forward):
// scores in position order (each a warp-reduced dot product, written by lane 0), the softmax by lanes,
// then ctx by lanes over columns with t in position order: a fixed order for every element.
template <class T>
__global__ void attn_query_fwd_kernel(T* ctx, T* att, const T* q, const T* K, const T* V, const std::int32_t* rows,
                                      const std::int32_t* len, std::int64_t N, std::int64_t Tn, std::int64_t C,
                                      T scale) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (n >= N) return;  // whole warps leave together
  const std::int64_t L = len[n];
  const std::int32_t* r = rows + n * Tn;
  const T* qn = q + n * C;
  T* a = att + n * Tn;
  T mx = -INFINITY;
  for (std::int64_t t = 0; t < L; ++t) {
    const T* k = K + static_cast<std::int64_t>(r[t]) * C;
    T s = 0;
    for (std::int64_t c = lane; c < C; c += 32) s += qn[c] * k[c];
    s = dev::warp_sum(s) * scale;
    if (lane == 0) a[t] = s;
    mx = fmax(mx, s);
  }
  __syncwarp();
  T z = 0;
  for (std::int64_t t = lane; t < L; t += 32) {
    const T e = dev::exp_(a[t] - mx);
    a[t] = e;
    z += e;
  }
  z = dev::warp_sum(z);
  for (std::int64_t t = lane; t < L; t += 32) a[t] /= z;
  for (std::int64_t t = L + lane; t < Tn; t += 32) a[t] = 0;
  __syncwarp();
  for (std::int64_t c = lane; c < C; c += 32) {
    T o = 0;
    for (std::int64_t t = 0; t < L; ++t) o += a[t] * V[static_cast<std::int64_t>(r[t]) * C + c];
    ctx[n * C + c] = o;
  }
}

// Its backward (cpu::attention_query_backward without the table scatters): dα_t = dctx·V_t,
// ds_t = α_t (dα_t − Σ_u α_u dα_u)/√C into dscores, dq = Σ_t ds_t K_t.
template <class T>
__global__ void attn_query_bwd_kernel(T* dq, T* dscores, const T* dctx, const T* att, const T* K, const T* V,
                                      const std::int32_t* rows, const std::int32_t* len, std::int64_t N,
                                      std::int64_t Tn, std::int64_t C, T scale) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (n >= N) return;
  const std::int64_t L = len[n];
  const std::int32_t* r = rows + n * Tn;
  const T* g = dctx + n * C;
  const T* a = att + n * Tn;
  T* ds = dscores + n * Tn;
  T mean = 0;
  for (std::int64_t t = 0; t < L; ++t) {
    const T* v = V + static_cast<std::int64_t>(r[t]) * C;
    T s = 0;
    for (std::int64_t c = lane; c < C; c += 32) s += g[c] * v[c];
    s = dev::warp_sum(s);
    if (lane == 0) ds[t] = s;
    mean += a[t] * s;
  }
  __syncwarp();
  for (std::int64_t t = lane; t < L; t += 32) ds[t] = a[t] * (ds[t] - mean) * scale;
  for (std::int64_t t = L + lane; t < Tn; t += 32) ds[t] = 0;
  __syncwarp();
  for (std::int64_t c = lane; c < C; c += 32) {
    T o = 0;
    for (std::int64_t t = 0; t < L; ++t) o += ds[t] * K[static_cast<std::int64_t>(r[t]) * C + c];
    dq[n * C + c] = o;
  }
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
  if (N <= 0 || C <= 0) return;  // nothing to gather
  gather_kernel<T><<<elem_blocks(N * C), kThreads, 0, s>>>(out, table, rows, N, cuda_detail::FastDivmod(C));
  MEMCAP_CUDA_CHECK_LAUNCH("ssfr gather_kernel");
}

template <class T>
void attention_query_forward(T* ctx, T* att, const T* q, const T* K, const T* V, const std::int32_t* rows,
                             const std::int32_t* len, std::int64_t N, std::int64_t T_, std::int64_t C,
                             cudaStream_t s) {
  if (N <= 0) return;
  attn_query_fwd_kernel<T><<<row_blocks(N), 32 * kRowsPerBlock, 0, s>>>(
      ctx, att, q, K, V, rows, len, N, T_, C, static_cast<T>(1.0 / std::sqrt(static_cast<double>(C))));
  MEMCAP_CUDA_CHECK_LAUNCH("attn_query_fwd_kernel");
}

template <class T>
void attention_query_backward(T* dq, T* dscores, const T* dctx, const T* att, const T* K, const T* V,
                              const std::int32_t* rows, const std::int32_t* len, std::int64_t N, std::int64_t T_,
                              std::int64_t C, cudaStream_t s) {
  if (N <= 0) return;
  attn_query_bwd_kernel<T><<<row_blocks(N), 32 * kRowsPerBlock, 0, s>>>(
      dq, dscores, dctx, att, K, V, rows, len, N, T_, C, static_cast<T>(1.0 / std::sqrt(static_cast<double>(C))));
  MEMCAP_CUDA_CHECK_LAUNCH("attn_query_bwd_kernel");
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
  template void attention_query_forward<T>(T*, T*, const T*, const T*, const T*, const std::int32_t*,             \
                                           const std::int32_t*, std::int64_t, std::int64_t, std::int64_t,         \
                                           cudaStream_t);                                                         \
  template void attention_query_backward<T>(T*, T*, const T*, const T*, const T*, const T*, const std::int32_t*,  \
                                            const std::int32_t*, std::int64_t, std::int64_t, std::int64_t,        \
                                            cudaStream_t);                                                        \
  template void ssfr_l2norm_forward<T>(T*, T*, T*, const T*, const T*, std::int64_t, std::int64_t, double,         \
                                       cudaStream_t);                                                              \
  template void ssfr_l2norm_backward<T>(T*, const T*, const T*, std::int64_t, std::int64_t, double, cudaStream_t); \
  template void ssfr_add<T>(T*, const T*, std::int64_t, cudaStream_t);
MEMCAP_NN_SSFR(float)
MEMCAP_NN_SSFR(double)
#undef MEMCAP_NN_SSFR

}  // namespace memcap::nn::cuda

// CUDA sequence-model layers (kernels/nn_seq_layers.cuh): LayerNorm, RMSNorm with gain, embedding,
// depthwise causal conv, ℓ2 row norm and element-wise glue. Row kernels: one warp per row, statistics in
// float64 by fixed shuffle trees. Column reductions: fixed 256-row chunks (float64) then chunks in order.
// Embedding backward: CUB stable radix sort of the token ids, then each token's rows in position order.
#include <cuda_runtime.h>

#include <cmath>
#include <cub/device/device_radix_sort.cuh>

#include "cuda_check.cuh"
#include "nn_device.cuh"
#include "nn_seq_layers.cuh"

namespace memcap::nn::cuda {

using cuda_detail::FastDivmod;  // index splits in the element-wise kernels (fast_divmod.cuh)

namespace {

constexpr int kWarps = 8;  // rows (warps) per block of the row kernels

unsigned row_blocks(std::int64_t N) {
  const std::int64_t b = (N + kWarps - 1) / kWarps;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

__device__ __forceinline__ double warp_sum_d(double v) { return dev::warp_sum(v); }

// ---------------------------------------------------------------------------------------------- row kernels

// kAdd: the row is a + b (inp = a, inp2 = b), written to sum first (each lane writes, then rereads, its own
// columns; sum may alias a or b), so the residual add costs no pass of its own.
template <class T, bool kAdd>
__global__ void layernorm_fwd_kernel(T* out, T* mean, T* rstd, const T* inp, const T* inp2, T* sum, const T* w,
                                     const T* b, std::int64_t N, std::int64_t C, double eps) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kWarps) + (threadIdx.x >> 5);
  if (n >= N) return;
  const T* x = inp + n * C;
  double s = 0;
  if constexpr (kAdd) {
    T* sr = sum + n * C;
    const T* x2 = inp2 + n * C;
    for (std::int64_t c = lane; c < C; c += 32) {
      const T v = x[c] + x2[c];
      sr[c] = v;
      s += static_cast<double>(v);
    }
    x = sr;
  } else {
    for (std::int64_t c = lane; c < C; c += 32) s += static_cast<double>(x[c]);
  }
  const double m = warp_sum_d(s) / static_cast<double>(C);
  double v = 0;
  for (std::int64_t c = lane; c < C; c += 32) {
    const double d = static_cast<double>(x[c]) - m;
    v += d * d;
  }
  const double r = 1.0 / sqrt(warp_sum_d(v) / static_cast<double>(C) + eps);
  T* y = out + n * C;
  for (std::int64_t c = lane; c < C; c += 32)
    y[c] = static_cast<T>((static_cast<double>(x[c]) - m) * r * static_cast<double>(w[c]) +
                          (b ? static_cast<double>(b[c]) : 0.0));
  if (lane == 0) {
    if (mean) mean[n] = static_cast<T>(m);
    if (rstd) rstd[n] = static_cast<T>(r);
  }
}

// add (may be null): dinp = add + the LayerNorm gradient (rounded to T first, as residual_add of the two).
template <class T>
__global__ void layernorm_bwd_kernel(T* dinp, const T* dout, const T* inp, const T* w, const T* mean, const T* rstd,
                                     const T* add, std::int64_t N, std::int64_t C) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kWarps) + (threadIdx.x >> 5);
  if (n >= N) return;
  const T* x = inp + n * C;
  const T* dy = dout + n * C;
  const double m = static_cast<double>(mean[n]), r = static_cast<double>(rstd[n]);
  double mg = 0, mgx = 0;
  for (std::int64_t c = lane; c < C; c += 32) {
    const double xh = (static_cast<double>(x[c]) - m) * r, g = static_cast<double>(dy[c]) * static_cast<double>(w[c]);
    mg += g;
    mgx += g * xh;
  }
  mg = warp_sum_d(mg) / static_cast<double>(C);
  mgx = warp_sum_d(mgx) / static_cast<double>(C);
  T* dx = dinp + n * C;
  const T* ad = add ? add + n * C : nullptr;
  for (std::int64_t c = lane; c < C; c += 32) {
    const double xh = (static_cast<double>(x[c]) - m) * r, g = static_cast<double>(dy[c]) * static_cast<double>(w[c]);
    const T val = static_cast<T>(r * (g - mg - xh * mgx));
    dx[c] = ad ? ad[c] + val : val;  // reads of dy[c], ad[c] precede the write: dinp may alias either
  }
}

template <class T>
__global__ void rmsnorm_fwd_kernel(T* out, T* rstd, const T* inp, const T* w, std::int64_t N, std::int64_t C,
                                   double eps) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kWarps) + (threadIdx.x >> 5);
  if (n >= N) return;
  const T* x = inp + n * C;
  double ss = 0;
  for (std::int64_t c = lane; c < C; c += 32) ss += static_cast<double>(x[c]) * static_cast<double>(x[c]);
  const double r = 1.0 / sqrt(warp_sum_d(ss) / static_cast<double>(C) + eps);
  T* y = out + n * C;
  for (std::int64_t c = lane; c < C; c += 32)
    y[c] = static_cast<T>(static_cast<double>(x[c]) * r * static_cast<double>(w[c]));
  if (rstd && lane == 0) rstd[n] = static_cast<T>(r);
}

template <class T>
__global__ void rmsnorm_bwd_kernel(T* dinp, const T* dout, const T* inp, const T* w, const T* rstd, std::int64_t N,
                                   std::int64_t C) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kWarps) + (threadIdx.x >> 5);
  if (n >= N) return;
  const T* x = inp + n * C;
  const T* dy = dout + n * C;
  const double r = static_cast<double>(rstd[n]);
  double gx = 0;
  for (std::int64_t c = lane; c < C; c += 32)
    gx += static_cast<double>(dy[c]) * static_cast<double>(w[c]) * static_cast<double>(x[c]);
  gx = warp_sum_d(gx) / static_cast<double>(C);
  T* dx = dinp + n * C;
  for (std::int64_t c = lane; c < C; c += 32)
    dx[c] = static_cast<T>(
        r * (static_cast<double>(dy[c]) * static_cast<double>(w[c]) - static_cast<double>(x[c]) * r * r * gx));
}

template <class T>
__global__ void l2norm_fwd_kernel(T* out, T* rstd, const T* inp, std::int64_t N, std::int64_t C, double eps) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kWarps) + (threadIdx.x >> 5);
  if (n >= N) return;
  const T* x = inp + n * C;
  double ss = 0;
  for (std::int64_t c = lane; c < C; c += 32) ss += static_cast<double>(x[c]) * static_cast<double>(x[c]);
  const T r = static_cast<T>(1.0 / sqrt(warp_sum_d(ss) + eps));
  T* y = out + n * C;
  for (std::int64_t c = lane; c < C; c += 32) y[c] = x[c] * r;
  if (rstd && lane == 0) rstd[n] = r;
}

template <class T>
__global__ void l2norm_bwd_kernel(T* dinp, const T* dout, const T* inp, const T* rstd, std::int64_t N, std::int64_t C) {
  const int lane = threadIdx.x & 31;
  const std::int64_t n = blockIdx.x * std::int64_t(kWarps) + (threadIdx.x >> 5);
  if (n >= N) return;
  const T* x = inp + n * C;
  const T* dy = dout + n * C;
  double dot = 0;
  for (std::int64_t c = lane; c < C; c += 32) dot += static_cast<double>(x[c]) * static_cast<double>(dy[c]);
  const T r = rstd[n];
  const T k =
      static_cast<T>(static_cast<double>(r) * static_cast<double>(r) * static_cast<double>(r) * warp_sum_d(dot));
  T* dx = dinp + n * C;
  for (std::int64_t c = lane; c < C; c += 32) dx[c] = r * dy[c] - k * x[c];
}

// ---------------------------------------------------------------------------------------------- column sums

// Per-(row, column) terms of the parameter gradients.
template <class T>
struct LnWeightTerm {  // dout ⊙ x̂
  const T *dout, *inp, *mean, *rstd;
  std::int64_t C;
  __device__ double operator()(std::int64_t n, std::int64_t c) const {
    return static_cast<double>(dout[n * C + c]) *
           ((static_cast<double>(inp[n * C + c]) - static_cast<double>(mean[n])) * static_cast<double>(rstd[n]));
  }
};
template <class T>
struct PlainTerm {  // dout
  const T* dout;
  std::int64_t C;
  __device__ double operator()(std::int64_t n, std::int64_t c) const { return static_cast<double>(dout[n * C + c]); }
};
template <class T>
struct RmsWeightTerm {  // dout ⊙ x·rstd
  const T *dout, *inp, *rstd;
  std::int64_t C;
  __device__ double operator()(std::int64_t n, std::int64_t c) const {
    return static_cast<double>(dout[n * C + c]) * static_cast<double>(inp[n * C + c]) * static_cast<double>(rstd[n]);
  }
};
template <class T>
struct ConvWeightTerm {  // column c·K + j: dout[b,t,c] · inp[b, t−(K−1)+j, c]
  const T *dout, *inp;
  FastDivmod Tlen;  // t = n % Tlen for every element (fast_divmod.cuh)
  std::int64_t C, K;
  __device__ double operator()(std::int64_t n, std::int64_t col) const {
    const std::int64_t c = col / K, j = col % K, t = Tlen.mod(n), sh = K - 1 - j;
    if (t < sh) return 0.0;
    return static_cast<double>(dout[n * C + c]) * static_cast<double>(inp[(n - sh) * C + c]);
  }
};

// Stage 1: block (32, 8) over 32 columns × one chunk of rows; partial[chunk, col] in float64.
template <class Term>
__global__ void colsum_partial_kernel(double* partial, Term term, std::int64_t N, std::int64_t cols) {
  __shared__ double sh[8][33];
  const std::int64_t col = blockIdx.x * std::int64_t(32) + threadIdx.x;
  const std::int64_t r0 = blockIdx.y * kColChunkRows, r1 = min(N, r0 + kColChunkRows);
  double acc = 0;
  if (col < cols)
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += 8) acc += term(r, col);
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    double s = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) s += sh[k][threadIdx.x];
    partial[blockIdx.y * cols + col] = s;
  }
}

// Stage 2: out[col] += Σ_chunk partial[chunk, col]. Block (32, 32) over 32 columns: thread (x, y) sums chunks
// y, y + 32, ... in order, then the 32 partial sums of a column are added in a fixed tree (deterministic).
template <class T>
__global__ void colsum_final_kernel(T* out, const double* partial, std::int64_t chunks, std::int64_t cols) {
  __shared__ double sh[32][33];
  const std::int64_t col = blockIdx.x * std::int64_t(32) + threadIdx.x;
  double s = 0;
  if (col < cols)
    for (std::int64_t k = threadIdx.y; k < chunks; k += 32) s += partial[k * cols + col];
  sh[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
#pragma unroll
  for (int w = 16; w >= 1; w /= 2) {
    if (threadIdx.y < w) sh[threadIdx.y][threadIdx.x] += sh[threadIdx.y + w][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && col < cols) out[col] = static_cast<T>(static_cast<double>(out[col]) + sh[0][threadIdx.x]);
}

template <class T, class Term>
void column_sum_add(T* out, const Term& term, std::int64_t N, std::int64_t cols, double* scratch, cudaStream_t s) {
  if (N <= 0 || cols <= 0) return;
  const std::int64_t chunks = (N + kColChunkRows - 1) / kColChunkRows;
  if (chunks > 65535) cuda_detail::throw_user_error("column reduction: too many rows for one launch");
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(chunks)), block(32, 8);
  colsum_partial_kernel<Term><<<grid, block, 0, s>>>(scratch, term, N, cols);
  MEMCAP_CUDA_CHECK_LAUNCH("colsum_partial_kernel");
  colsum_final_kernel<T><<<static_cast<unsigned>((cols + 31) / 32), dim3(32, 32), 0, s>>>(out, scratch, chunks, cols);
  MEMCAP_CUDA_CHECK_LAUNCH("colsum_final_kernel");
}

// ---------------------------------------------------------------------------------------------- conv

template <class T>
__global__ void conv_fwd_kernel(T* out, const T* inp, const T* w, const T* bias, std::int64_t N,
                                FastDivmod Tlen, FastDivmod Cd, std::int64_t K) {
  const std::int64_t C = Cd.divisor();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < N * C;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    std::int64_t n, c;
    Cd.divmod(i, n, c);
    const std::int64_t t = Tlen.mod(n);
    T y = bias ? bias[c] : T(0);
    for (std::int64_t j = (K - 1 - t > 0 ? K - 1 - t : 0); j < K; ++j)
      y += w[c * K + j] * inp[(n - (K - 1) + j) * C + c];
    out[i] = y;
  }
}

// dinp[b,s,c] = Σ_j w[c,j] · dout[b, s+(K−1)−j, c] (t ascending = j descending, as the CPU adds).
template <class T>
__global__ void conv_bwd_kernel(T* dinp, const T* dout, const T* w, std::int64_t N, FastDivmod Td,
                                FastDivmod Cd, std::int64_t K) {
  const std::int64_t C = Cd.divisor(), Tlen = Td.divisor();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < N * C;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    std::int64_t n, c;
    Cd.divmod(i, n, c);
    const std::int64_t s = Td.mod(n);
    T acc = 0;
    for (std::int64_t j = K - 1; j >= 0; --j) {
      const std::int64_t t = s + (K - 1) - j;
      if (t >= Tlen) continue;
      acc += w[c * K + j] * dout[(n + (K - 1) - j) * C + c];
    }
    dinp[i] = acc;
  }
}

// ---------------------------------------------------------------------------------------------- embedding

template <class T>
__global__ void gather_tokens_kernel(T* out, const std::int32_t* tokens, const T* table, std::int64_t N,
                                     FastDivmod Cd) {
  const std::int64_t C = Cd.divisor();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < N * C;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    std::int64_t n, c;
    Cd.divmod(i, n, c);
    out[i] = table[static_cast<std::int64_t>(tokens[n]) * C + c];
  }
}

__global__ void iota_kernel(std::int32_t* v, std::int64_t N) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < N;
       i += std::int64_t(gridDim.x) * blockDim.x)
    v[i] = static_cast<std::int32_t>(i);
}

// One warp per sorted position; the first position of each token's run adds the run's rows (ascending
// positions: the stable sort keeps them in order) onto the table row, starting from its current value.
template <class T>
__global__ void segment_add_kernel(T* dtable, const std::int32_t* keys, const std::int32_t* pos, const T* dout,
                                   std::int64_t N, std::int64_t C) {
  const int lane = threadIdx.x & 31;
  const std::int64_t i = blockIdx.x * std::int64_t(kWarps) + (threadIdx.x >> 5);
  if (i >= N) return;
  const std::int32_t key = keys[i];
  if (i > 0 && keys[i - 1] == key) return;
  std::int64_t e = i + 1;
  while (e < N && keys[e] == key) ++e;
  T* d = dtable + static_cast<std::int64_t>(key) * C;
  for (std::int64_t c = lane; c < C; c += 32) {
    T acc = d[c];
    for (std::int64_t j = i; j < e; ++j) acc += dout[static_cast<std::int64_t>(pos[j]) * C + c];
    d[c] = acc;
  }
}

int key_bits(std::int64_t V) {
  int b = 1;
  while ((std::int64_t(1) << b) < V) ++b;
  return b;
}

std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }

std::size_t cub_sort_bytes(std::int64_t N, std::int64_t V) {
  std::size_t bytes = 0;
  MEMCAP_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const std::int32_t*>(nullptr),
                                      static_cast<std::int32_t*>(nullptr), static_cast<const std::int32_t*>(nullptr),
                                      static_cast<std::int32_t*>(nullptr), static_cast<int>(N), 0, key_bits(V)));
  return bytes;
}

// ---------------------------------------------------------------------------------------------- element-wise

template <class T>
__global__ void sigmoid_kernel(T* y, const T* x, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    y[i] = dev::sigmoid(x[i]);
}
template <class T>
__global__ void sigmoid_bwd_kernel(T* dx, const T* dy, const T* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dx[i] = dy[i] * y[i] * (T(1) - y[i]);
}
template <class T>
__global__ void add_kernel(T* out, const T* a, const T* b, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}
template <class T>
__global__ void gate_kernel(T* y, const T* conv, const T* proj, const T* x, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    y[i] = conv[i] * proj[i] + x[i];
}
template <class T>
__global__ void gate_bwd_kernel(T* dconv, T* dproj, const T* dy, const T* conv, const T* proj, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const T g = dy[i], c = conv[i], p = proj[i];
    dconv[i] = g * p;
    dproj[i] = g * c;
  }
}
template <class T>
__global__ void gather_rows_kernel(T* out, const T* src, const std::int64_t* rows, std::int64_t n,
                                   FastDivmod Cd) {
  const std::int64_t C = Cd.divisor();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n * C;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    std::int64_t r, c;
    Cd.divmod(i, r, c);
    out[i] = src[rows[r] * C + c];
  }
}
template <class T>
__global__ void scatter_add_rows_kernel(T* dst, const std::int64_t* rows, const T* in, std::int64_t n,
                                        FastDivmod Cd) {
  const std::int64_t C = Cd.divisor();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n * C;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    std::int64_t r, c;
    Cd.divmod(i, r, c);
    dst[rows[r] * C + c] += in[i];
  }
}

void check_shape(bool ok, const char* what) {
  if (!ok) cuda_detail::throw_user_error(std::string(what) + ": bad shape");
}

}  // namespace

std::size_t seq_col_scratch_elems(std::int64_t N, std::int64_t cols) {
  const std::int64_t chunks = (N + kColChunkRows - 1) / kColChunkRows;
  return static_cast<std::size_t>((chunks < 1 ? 1 : chunks) * (cols < 1 ? 1 : cols));
}

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, std::int64_t N,
                       std::int64_t C, double eps, cudaStream_t s) {
  check_shape(N >= 0 && C >= 1, "layernorm_forward");
  if (N == 0) return;
  layernorm_fwd_kernel<T, false>
      <<<row_blocks(N), 32 * kWarps, 0, s>>>(out, mean, rstd, inp, nullptr, nullptr, weight, bias, N, C, eps);
  MEMCAP_CUDA_CHECK_LAUNCH("layernorm_fwd_kernel");
}

template <class T>
void add_layernorm_forward(T* sum, T* out, T* mean, T* rstd, const T* a, const T* b, const T* weight, const T* bias,
                           std::int64_t N, std::int64_t C, double eps, cudaStream_t s) {
  check_shape(N >= 0 && C >= 1, "add_layernorm_forward");
  if (N == 0) return;
  layernorm_fwd_kernel<T, true><<<row_blocks(N), 32 * kWarps, 0, s>>>(out, mean, rstd, a, b, sum, weight, bias, N, C, eps);
  MEMCAP_CUDA_CHECK_LAUNCH("layernorm_fwd_kernel (add)");
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, std::int64_t N, std::int64_t C, double* scratch, cudaStream_t s) {
  check_shape(N >= 0 && C >= 1, "layernorm_backward");
  if (N == 0) return;
  if (dweight) column_sum_add(dweight, LnWeightTerm<T>{dout, inp, mean, rstd, C}, N, C, scratch, s);
  if (dbias) column_sum_add(dbias, PlainTerm<T>{dout, C}, N, C, scratch, s);
  if (dinp) {
    layernorm_bwd_kernel<T><<<row_blocks(N), 32 * kWarps, 0, s>>>(dinp, dout, inp, weight, mean, rstd, nullptr, N, C);
    MEMCAP_CUDA_CHECK_LAUNCH("layernorm_bwd_kernel");
  }
}

template <class T>
void layernorm_backward_add(T* dinp, T* dweight, T* dbias, const T* add, const T* dout, const T* inp, const T* weight,
                            const T* mean, const T* rstd, std::int64_t N, std::int64_t C, double* scratch,
                            cudaStream_t s) {
  check_shape(N >= 0 && C >= 1 && dinp && add, "layernorm_backward_add");
  if (N == 0) return;
  // the column sums read dout before the row kernel may overwrite it (dinp == dout)
  if (dweight) column_sum_add(dweight, LnWeightTerm<T>{dout, inp, mean, rstd, C}, N, C, scratch, s);
  if (dbias) column_sum_add(dbias, PlainTerm<T>{dout, C}, N, C, scratch, s);
  layernorm_bwd_kernel<T><<<row_blocks(N), 32 * kWarps, 0, s>>>(dinp, dout, inp, weight, mean, rstd, add, N, C);
  MEMCAP_CUDA_CHECK_LAUNCH("layernorm_bwd_kernel (add)");
}

template <class T>
void rmsnorm_gain_forward(T* out, T* rstd, const T* inp, const T* weight, std::int64_t N, std::int64_t C, double eps,
                          cudaStream_t s) {
  check_shape(N >= 0 && C >= 1, "rmsnorm_gain_forward");
  if (N == 0) return;
  rmsnorm_fwd_kernel<T><<<row_blocks(N), 32 * kWarps, 0, s>>>(out, rstd, inp, weight, N, C, eps);
  MEMCAP_CUDA_CHECK_LAUNCH("rmsnorm_fwd_kernel");
}

template <class T>
void rmsnorm_gain_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd,
                           std::int64_t N, std::int64_t C, double* scratch, cudaStream_t s) {
  check_shape(N >= 0 && C >= 1, "rmsnorm_gain_backward");
  if (N == 0) return;
  if (dweight) column_sum_add(dweight, RmsWeightTerm<T>{dout, inp, rstd, C}, N, C, scratch, s);
  if (dinp) {
    rmsnorm_bwd_kernel<T><<<row_blocks(N), 32 * kWarps, 0, s>>>(dinp, dout, inp, weight, rstd, N, C);
    MEMCAP_CUDA_CHECK_LAUNCH("rmsnorm_bwd_kernel");
  }
}

template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* table, std::int64_t N, std::int64_t V,
                       std::int64_t C, cudaStream_t s) {
  check_shape(N >= 0 && V >= 1 && C >= 1, "embedding_forward");
  if (N == 0) return;
  gather_tokens_kernel<T><<<dev::elem_blocks(N * C), dev::kElemThreads, 0, s>>>(out, tokens, table, N, FastDivmod(C));
  MEMCAP_CUDA_CHECK_LAUNCH("gather_tokens_kernel");
}

std::size_t embedding_backward_workspace_bytes(std::int64_t N, std::int64_t V) {
  if (N <= 0) return 0;
  if (N > 2147483647LL) cuda_detail::throw_user_error("embedding_backward: more than 2^31 tokens");
  return 3 * align256(static_cast<std::size_t>(N) * sizeof(std::int32_t)) + align256(cub_sort_bytes(N, V));
}

template <class T>
void embedding_backward(T* dtable, const std::int32_t* tokens, const T* dout, std::int64_t N, std::int64_t V,
                        std::int64_t C, void* workspace, std::size_t workspace_bytes, cudaStream_t s) {
  check_shape(N >= 0 && V >= 1 && C >= 1, "embedding_backward");
  if (N == 0) return;
  const std::size_t need = embedding_backward_workspace_bytes(N, V);
  if (workspace_bytes < need) cuda_detail::throw_user_error("embedding_backward: workspace too small");
  char* w = static_cast<char*>(workspace);
  const std::size_t a = align256(static_cast<std::size_t>(N) * sizeof(std::int32_t));
  auto* keys_out = reinterpret_cast<std::int32_t*>(w);
  auto* pos_in = reinterpret_cast<std::int32_t*>(w + a);
  auto* pos_out = reinterpret_cast<std::int32_t*>(w + 2 * a);
  void* temp = w + 3 * a;
  std::size_t temp_bytes = need - 3 * a;
  iota_kernel<<<dev::elem_blocks(N), dev::kElemThreads, 0, s>>>(pos_in, N);
  MEMCAP_CUDA_CHECK_LAUNCH("iota_kernel");
  MEMCAP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, keys_out, pos_in, pos_out,
                                                    static_cast<int>(N), 0, key_bits(V), s));
  segment_add_kernel<T><<<row_blocks(N), 32 * kWarps, 0, s>>>(dtable, keys_out, pos_out, dout, N, C);
  MEMCAP_CUDA_CHECK_LAUNCH("segment_add_kernel");
}

template <class T>
void causal_conv_forward(T* out, const T* inp, const T* weight, const T* bias, std::int64_t B, std::int64_t Tlen,
                         std::int64_t C, std::int64_t K, cudaStream_t s) {
  check_shape(B >= 0 && Tlen >= 0 && C >= 1 && K >= 1, "causal_conv_forward");
  if (B * Tlen == 0) return;
  conv_fwd_kernel<T><<<dev::elem_blocks(B * Tlen * C), dev::kElemThreads, 0, s>>>(out, inp, weight, bias, B * Tlen,
                                                                                  FastDivmod(Tlen), FastDivmod(C), K);
  MEMCAP_CUDA_CHECK_LAUNCH("conv_fwd_kernel");
}

template <class T>
void causal_conv_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, std::int64_t B,
                          std::int64_t Tlen, std::int64_t C, std::int64_t K, double* scratch, cudaStream_t s) {
  check_shape(B >= 0 && Tlen >= 0 && C >= 1 && K >= 1, "causal_conv_backward");
  const std::int64_t N = B * Tlen;
  if (N == 0) return;
  if (dbias) column_sum_add(dbias, PlainTerm<T>{dout, C}, N, C, scratch, s);
  const FastDivmod fT(Tlen);
  if (dweight) column_sum_add(dweight, ConvWeightTerm<T>{dout, inp, fT, C, K}, N, C * K, scratch, s);
  if (dinp) {
    conv_bwd_kernel<T>
        <<<dev::elem_blocks(N * C), dev::kElemThreads, 0, s>>>(dinp, dout, weight, N, fT, FastDivmod(C), K);
    MEMCAP_CUDA_CHECK_LAUNCH("conv_bwd_kernel");
  }
}

template <class T>
void l2norm_rows_forward(T* out, T* rstd, const T* inp, std::int64_t N, std::int64_t C, double eps, cudaStream_t s) {
  check_shape(N >= 0 && C >= 1, "l2norm_rows_forward");
  if (N == 0) return;
  l2norm_fwd_kernel<T><<<row_blocks(N), 32 * kWarps, 0, s>>>(out, rstd, inp, N, C, eps);
  MEMCAP_CUDA_CHECK_LAUNCH("l2norm_fwd_kernel");
}

template <class T>
void l2norm_rows_backward(T* dinp, const T* dout, const T* inp, const T* rstd, std::int64_t N, std::int64_t C,
                          cudaStream_t s) {
  check_shape(N >= 0 && C >= 1, "l2norm_rows_backward");
  if (N == 0) return;
  l2norm_bwd_kernel<T><<<row_blocks(N), 32 * kWarps, 0, s>>>(dinp, dout, inp, rstd, N, C);
  MEMCAP_CUDA_CHECK_LAUNCH("l2norm_bwd_kernel");
}

#define MEMCAP_ELEM_LAUNCH(kernel, n, ...)                                    \
  do {                                                                        \
    if ((n) <= 0) return;                                                     \
    kernel<T><<<dev::elem_blocks(n), dev::kElemThreads, 0, s>>>(__VA_ARGS__); \
    MEMCAP_CUDA_CHECK_LAUNCH(#kernel);                                        \
  } while (0)

template <class T>
void sigmoid_forward(T* y, const T* x, std::int64_t n, cudaStream_t s) {
  MEMCAP_ELEM_LAUNCH(sigmoid_kernel, n, y, x, n);
}
template <class T>
void sigmoid_backward(T* dx, const T* dy, const T* y, std::int64_t n, cudaStream_t s) {
  MEMCAP_ELEM_LAUNCH(sigmoid_bwd_kernel, n, dx, dy, y, n);
}
template <class T>
void residual_add(T* out, const T* a, const T* b, std::int64_t n, cudaStream_t s) {
  MEMCAP_ELEM_LAUNCH(add_kernel, n, out, a, b, n);
}
template <class T>
void baseconv_gate_forward(T* y, const T* conv, const T* proj, const T* x, std::int64_t n, cudaStream_t s) {
  MEMCAP_ELEM_LAUNCH(gate_kernel, n, y, conv, proj, x, n);
}
template <class T>
void baseconv_gate_backward(T* dconv, T* dproj, const T* dy, const T* conv, const T* proj, std::int64_t n,
                            cudaStream_t s) {
  MEMCAP_ELEM_LAUNCH(gate_bwd_kernel, n, dconv, dproj, dy, conv, proj, n);
}
template <class T>
void gather_rows(T* out, const T* src, const std::int64_t* rows, std::int64_t n, std::int64_t C, cudaStream_t s) {
  MEMCAP_ELEM_LAUNCH(gather_rows_kernel, n * C, out, src, rows, n, FastDivmod(C));
}
template <class T>
void column_sums_add(T* out, const T* x, std::int64_t N, std::int64_t cols, double* scratch, cudaStream_t s) {
  column_sum_add(out, PlainTerm<T>{x, cols}, N, cols, scratch, s);
}
template <class T>
void scatter_add_rows(T* dst, const std::int64_t* rows, const T* in, std::int64_t n, std::int64_t C, cudaStream_t s) {
  MEMCAP_ELEM_LAUNCH(scatter_add_rows_kernel, n * C, dst, rows, in, n, FastDivmod(C));
}
#undef MEMCAP_ELEM_LAUNCH

#define MEMCAP_NN_SEQ(T)                                                                                               \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, std::int64_t, std::int64_t, double,     \
                                     cudaStream_t);                                                                    \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, std::int64_t,      \
                                      std::int64_t, double*, cudaStream_t);                                            \
  template void add_layernorm_forward<T>(T*, T*, T*, T*, const T*, const T*, const T*, const T*, std::int64_t,         \
                                         std::int64_t, double, cudaStream_t);                                          \
  template void layernorm_backward_add<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*,      \
                                          std::int64_t, std::int64_t, double*, cudaStream_t);                          \
  template void rmsnorm_gain_forward<T>(T*, T*, const T*, const T*, std::int64_t, std::int64_t, double, cudaStream_t); \
  template void rmsnorm_gain_backward<T>(T*, T*, const T*, const T*, const T*, const T*, std::int64_t, std::int64_t,   \
                                         double*, cudaStream_t);                                                       \
  template void embedding_forward<T>(T*, const std::int32_t*, const T*, std::int64_t, std::int64_t, std::int64_t,      \
                                     cudaStream_t);                                                                    \
  template void embedding_backward<T>(T*, const std::int32_t*, const T*, std::int64_t, std::int64_t, std::int64_t,     \
                                      void*, std::size_t, cudaStream_t);                                               \
  template void causal_conv_forward<T>(T*, const T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t,     \
                                       std::int64_t, cudaStream_t);                                                    \
  template void causal_conv_backward<T>(T*, T*, T*, const T*, const T*, const T*, std::int64_t, std::int64_t,          \
                                        std::int64_t, std::int64_t, double*, cudaStream_t);                            \
  template void l2norm_rows_forward<T>(T*, T*, const T*, std::int64_t, std::int64_t, double, cudaStream_t);            \
  template void l2norm_rows_backward<T>(T*, const T*, const T*, const T*, std::int64_t, std::int64_t, cudaStream_t);   \
  template void sigmoid_forward<T>(T*, const T*, std::int64_t, cudaStream_t);                                          \
  template void sigmoid_backward<T>(T*, const T*, const T*, std::int64_t, cudaStream_t);                               \
  template void residual_add<T>(T*, const T*, const T*, std::int64_t, cudaStream_t);                                   \
  template void baseconv_gate_forward<T>(T*, const T*, const T*, const T*, std::int64_t, cudaStream_t);                \
  template void baseconv_gate_backward<T>(T*, T*, const T*, const T*, const T*, std::int64_t, cudaStream_t);           \
  template void gather_rows<T>(T*, const T*, const std::int64_t*, std::int64_t, std::int64_t, cudaStream_t);           \
  template void scatter_add_rows<T>(T*, const std::int64_t*, const T*, std::int64_t, std::int64_t, cudaStream_t);      \
  template void column_sums_add<T>(T*, const T*, std::int64_t, std::int64_t, double*, cudaStream_t);
MEMCAP_NN_SEQ(float)
MEMCAP_NN_SEQ(double)
#undef MEMCAP_NN_SEQ

}  // namespace memcap::nn::cuda

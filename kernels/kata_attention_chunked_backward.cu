// Chunked O(T) KATA backward (kata_attention_chunked_backward.cuh says what it computes): the feature rows, the
// scans, the readout cotangents and the VJP as kernels here; every product through cuBLAS (bf16 in, fp32
// accumulation) on row-major buffers, one batch entry per (head, chunk).
#include <cublas_v2.h>

#include <algorithm>
#include <string>

#include "cuda_check.cuh"
#include "fast_divmod.cuh"
#include "kata_attention_chunked_backward.cuh"
#include "kata_feature_map.cuh"

#define MEMCAP_CB_CUBLAS(call)                                                                             \
  do {                                                                                                     \
    const cublasStatus_t st_ = (call);                                                                     \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                      \
      ::memcap::cuda_detail::throw_device_error(std::string("cuBLAS error ") +                 \
                                                            std::to_string(static_cast<int>(st_)) + " in " \
                                                            #call);                                        \
  } while (0)

namespace memcap::kata::cuda {
namespace chunk_bwd {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;
constexpr int kRowsPerTile = 16;    // ψ kernel: rows staged in shared memory at a time
constexpr int kRowsPerBlock = 128;  // ψ kernel: rows per block (kRowsPerBlock / kRowsPerTile tiles)
constexpr int kMaxPlainD = 128;    // VJP of the n_ψ = d maps: one thread per row, gx in registers
constexpr int kMaxD = 512;         // ψ kernel: kRowsPerTile rows of d floats in (default-size) shared memory
constexpr std::int64_t kMaxHeadsPerGroup = 65535;  // the ψ kernel's grid z

std::int64_t round8(std::int64_t x) { return (x + 7) / 8 * 8; }

// Sizes of one launch; n_ld: the feature count n_ψ rounded up to 8 (16-byte rows for the tensor cores, zero columns).
struct Dims {
  std::int64_t T = 0, Tp = 0, nc = 0, C = 0, d = 0, dv = 0, n_ld = 0, W = 0;
};
Dims dims_of(const AttentionLaunch& p) {
  Dims s;
  s.C = p.chunk;
  s.T = p.T;
  s.nc = (p.T + s.C - 1) / s.C;
  s.Tp = s.nc * s.C;
  s.d = p.d;
  s.dv = p.dv;
  s.n_ld = round8(p.map.n_features);
  s.W = round8(s.dv + 1);
  return s;
}

// The workspace of `h` heads, carved in this order (each piece 256-byte aligned). Per chunk, the q side and the k side
// each hold one (W + C) x n_ld block: W rows of a transposed state, then the C feature rows, so that a dΦ product is
// one GEMM over K = W + C ([Ĝ | dA] · [Ŝᵀ ; Φk] and [V̂ | dAᵀ] · [GŜᵀ ; Φq]). The value side and the cotangent side
// hold C rows of W + C columns per chunk: [V̂ | dAᵀ] and [Ĝ | dA].
struct Carve {
  bf16 *qx = nullptr, *kx = nullptr, *vda = nullptr, *gda = nullptr, *abf = nullptr, *dphq = nullptr, *dphk = nullptr;
  float* r32 = nullptr;
  std::size_t bytes = 0;
};
Carve carve(const Dims& s, std::int64_t h, void* base) {
  Carve c;
  unsigned char* p = static_cast<unsigned char*>(base);
  std::size_t off = 0;
  auto take = [&](std::int64_t elems, std::size_t size) {
    void* at = p ? p + off : nullptr;
    off += (static_cast<std::size_t>(elems) * size + 255) / 256 * 256;
    return at;
  };
  const std::int64_t rows = h * s.Tp, chunks = h * s.nc, L = s.W + s.C;
  c.qx = static_cast<bf16*>(take(chunks * L * s.n_ld, 2));
  c.kx = static_cast<bf16*>(take(chunks * L * s.n_ld, 2));
  c.vda = static_cast<bf16*>(take(rows * L, 2));
  c.gda = static_cast<bf16*>(take(rows * L, 2));
  c.abf = static_cast<bf16*>(take(chunks * s.C * s.C, 2));
  c.r32 = static_cast<float*>(take(rows * s.W, 4));
  c.dphq = static_cast<bf16*>(take(rows * s.n_ld, 2));
  c.dphk = static_cast<bf16*>(take(rows * s.n_ld, 2));
  c.bytes = off;
  return c;
}

unsigned grid1(std::int64_t n, int threads = kThreads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// Φ rows of the (W + C) x n_ld chunk blocks (Carve): row t of head h at ((h·nc + t / C)·(W + C) + W + t % C)·n_ld;
// ψ_f(x[h][t]) for t < T and f < n_ψ, else 0. Block: 256 features × kRowsPerBlock rows, staged kRowsPerTile rows at
// a time (a block of one tile did too little work for its launch and setup: 0.53 TB/s at T = 32K).
// Each tile's row starts are computed once, by kRowsPerTile threads, into shared memory: the 64-bit division by C
// in the store address of every element cost more than the feature itself (1.1 TB/s at T = 32K).
template <MapKind K>
__global__ void __launch_bounds__(kThreads) psi_kernel(DeviceMap mp, const bf16* __restrict__ x,
                                                       bf16* __restrict__ phi, std::int64_t T, std::int64_t Tp,
                                                       std::int64_t n_ld, std::int64_t C, std::int64_t W) {
  __shared__ std::int64_t row_at[kRowsPerTile];  // the current tile's row starts in phi (elements)
  extern __shared__ float sx[];                  // [kRowsPerTile][d] then aux[kRowsPerTile]
  const int d = mp.d, tid = threadIdx.x;
  float* aux = sx + kRowsPerTile * d;
  const std::int64_t nc = Tp / C;
  const std::int64_t h = blockIdx.z;
  const int f = blockIdx.x * kThreads + tid;
  const bool active = f < n_ld;
  const FeatureSlot slot = make_slot<K>(mp, active ? f : 0);  // inactive (0) for f >= n_ψ
  for (int tile = 0; tile < kRowsPerBlock / kRowsPerTile; ++tile) {
    const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.y) * kRowsPerBlock + tile * kRowsPerTile;
    if (t0 >= Tp) break;  // the same for every thread of the block
    if (tile > 0) __syncthreads();  // the previous tile's rows are no longer read
    // the tile's rows are contiguous in x: element e is row t0 + e / d, inside x while t0·d + e < T·d
    const bf16* xt = x + (h * T + t0) * d;
    const std::int64_t in_x = (T - t0) * d;
    for (int e = tid; e < kRowsPerTile * d; e += kThreads) sx[e] = e < in_x ? __bfloat162float(xt[e]) : 0.f;
    __syncthreads();
    if (tid < kRowsPerTile) {
      aux[tid] = psi_aux<K>(mp, sx + tid * d);
      const std::int64_t t = t0 + tid;
      row_at[tid] = ((h * nc + t / C) * (W + C) + W + t % C) * n_ld;
    }
    __syncthreads();
    if (!active) continue;
    const int rows = static_cast<int>(Tp - t0 < kRowsPerTile ? Tp - t0 : kRowsPerTile);
    for (int r = 0; r < rows; ++r) {
      const float val = t0 + r < T ? eval_slot<K>(mp, slot, sx + r * d, aux[r]) : 0.f;
      phi[row_at[r] + f] = __float2bfloat16(val);
    }
  }
}

// The row of the one-warp-per-row kernels below, and this thread's lane in it.
struct WarpRow {
  std::int64_t row;
  int lane;
};
__device__ __forceinline__ WarpRow warp_row() {
  return {(static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32, static_cast<int>(threadIdx.x & 31)};
}

// V̂[h][t] = [v_t | 1 | 0 …] (W columns of rows of `ld`) for t < T, zero rows past T. One warp per row, so the
// row's head and position cost one division per row, not three 64-bit divisions per element.
__global__ void augment_kernel(const bf16* __restrict__ v, bf16* __restrict__ out, std::int64_t heads,
                               std::int64_t T, std::int64_t Tp, std::int64_t dv, std::int64_t W, std::int64_t ld) {
  const auto [row, lane] = warp_row();
  if (row >= heads * Tp) return;
  const std::int64_t h = row / Tp, t = row - h * Tp;
  const bf16* vr = v + (h * T + t) * dv;
  bf16* o = out + row * ld;
  for (std::int64_t c = lane; c < W; c += 32) {
    float val = 0.f;
    if (t < T) val = c < dv ? __bfloat162float(vr[c]) : (c == dv ? 1.f : 0.f);
    o[c] = __float2bfloat16(val);
  }
}

// Exclusive scan in place over the chunks of each head: buf[h][c] = Σ_{c' < c} buf[h][c'] (forward) or
// Σ_{c' > c} buf[h][c'] (reverse), summed in fp32, stored bf16. E: the elements of one chunk's state (contiguous, a
// multiple of 8), stride: the elements from one chunk's state to the next (a multiple of 8). One thread per (head,
// 8 consecutive elements): 16-byte loads and stores, kScanAhead chunks loaded before they are rewritten, so each
// thread keeps several loads in flight (one 2-byte element per thread per chunk ran at ~0.5 TB/s).
constexpr int kScanAhead = 4;
__global__ void scan_kernel(bf16* __restrict__ buf, std::int64_t heads, std::int64_t nc, std::int64_t E,
                            std::int64_t stride, bool reverse) {
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t groups = E / 8;
  if (idx >= heads * groups) return;
  const std::int64_t h = idx / groups, e = (idx % groups) * 8;
  bf16* base = buf + h * nc * stride + e;
  float run[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) run[j] = 0.f;
  for (std::int64_t i0 = 0; i0 < nc; i0 += kScanAhead) {
    uint4 in[kScanAhead];
#pragma unroll
    for (int u = 0; u < kScanAhead; ++u) {
      const std::int64_t i = i0 + u;
      if (i < nc) in[u] = *reinterpret_cast<const uint4*>(base + (reverse ? nc - 1 - i : i) * stride);
    }
#pragma unroll
    for (int u = 0; u < kScanAhead; ++u) {
      const std::int64_t i = i0 + u;
      if (i >= nc) break;
      uint4 out;
      bf16* o = reinterpret_cast<bf16*>(&out);
      const bf16* x = reinterpret_cast<const bf16*>(&in[u]);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        o[j] = __float2bfloat16(run[j]);
        run[j] += __bfloat162float(x[j]);
      }
      *reinterpret_cast<uint4*>(base + (reverse ? nc - 1 - i : i) * stride) = out;
    }
  }
}

// Causal mask in place on each chunk's C x C block (rows of `ld`): zero where key > query (lower: keep col <= row)
// or, for a transposed block, where col < row (upper). One thread per 8 columns of a row (16-byte loads and stores;
// C, ld and the block's start are multiples of 8 elements); groups with nothing to zero return at once.
__global__ void mask_kernel(bf16* __restrict__ out, std::int64_t chunks, cuda_detail::FastDivmod Cd,
                            cuda_detail::FastDivmod groups, std::int64_t ld, bool upper) {
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= chunks * Cd.divisor() * groups.divisor()) return;
  std::int64_t row, g;
  groups.divmod(idx, row, g);  // row: the chunk's rows one after another
  const int r = static_cast<int>(Cd.mod(row)), c0 = static_cast<int>(g * 8);
  if (upper ? c0 >= r : c0 + 7 <= r) return;  // nothing to zero in this group
  uint4* at = reinterpret_cast<uint4*>(out + row * ld + c0);
  uint4 w = *at;
  bf16* e = reinterpret_cast<bf16*>(&w);
#pragma unroll
  for (int j = 0; j < 8; ++j)
    if (upper ? c0 + j < r : c0 + j > r) e[j] = __float2bfloat16(0.f);
  *at = w;
}

// Ĝ[h][t] = [dnum | dden | 0 …] (W columns of rows of `ld`) from z_t = R[h][t][dv], dout and o (one warp per row; zero rows past T).
__global__ void readout_kernel(const float* __restrict__ r, const bf16* __restrict__ dout, const bf16* __restrict__ o,
                               bf16* __restrict__ gaug, std::int64_t heads, std::int64_t T, std::int64_t Tp,
                               std::int64_t dv, std::int64_t W, std::int64_t ld) {
  const auto [row, lane] = warp_row();
  if (row >= heads * Tp) return;
  const std::int64_t h = row / Tp, t = row % Tp;
  bf16* g = gaug + row * ld;
  if (t >= T) {
    for (std::int64_t c = lane; c < W; c += 32) g[c] = __float2bfloat16(0.f);
    return;
  }
  const bf16* dr = dout + (h * T + t) * dv;
  const bf16* orow = o + (h * T + t) * dv;
  const float z = r[row * W + dv];
  const float inv = z != 0.f ? 1.f / z : 0.f;  // z = 0: o = 0 and no gradient (the CPU's convention)
  float dot = 0.f;
  for (std::int64_t c = lane; c < dv; c += 32) dot += __bfloat162float(dr[c]) * __bfloat162float(orow[c]);
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, s);
  for (std::int64_t c = lane; c < W; c += 32) {
    float val = 0.f;
    if (c < dv) val = __bfloat162float(dr[c]) * inv;
    else if (c == dv) val = -dot * inv;
    g[c] = __float2bfloat16(val);
  }
}

// dx[h][t] = J_ψ(x[h][t])ᵀ dΦ[h][t] for t < T. PSD maps: one warp per row, one coordinate per lane at a time
// (psi_vjp_coord_psd, fixed order); the n_ψ = d maps: one thread per row (psi_vjp_row).
// The PSD kernel first copies its row of dΦ (16-byte loads) and of x into shared memory when kVjpWarps rows fit
// (kVjpWarps x vjp_row_bytes <= kVjpStagedMax): a coordinate's partners lie across the packed row, and reading them
// from global memory one bf16 at a time ran at ~0.8 TB/s. Larger rows (M1 past d ≈ 75, M2 past d ≈ 105) read
// global memory as before.
constexpr int kVjpWarps = kThreads / 32;
constexpr std::int64_t kVjpStagedMax = 48 * 1024;  // default dynamic shared memory
// Shared bytes of one warp's row: n_ld bf16 (a multiple of 16 bytes) and d floats rounded up to 4 (16 bytes).
__host__ __device__ inline std::int64_t vjp_row_bytes(std::int64_t n_ld, int d) { return n_ld * 2 + (d + 3) / 4 * 16; }
template <MapKind K, bool Staged>
__global__ void vjp_psd_kernel(DeviceMap mp, const bf16* __restrict__ x, const bf16* __restrict__ dphi,
                               bf16* __restrict__ dx, std::int64_t heads, std::int64_t T, std::int64_t Tp,
                               std::int64_t n_ld) {
  extern __shared__ uint4 vjp_smem[];  // per warp: n_ld bf16 of dΦ, then d floats of x
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kVjpWarps + warp;
  if (row >= heads * T) return;  // whole warps only: no block-wide barrier below
  const std::int64_t h = row / T, t = row % T;
  const bf16* xr = x + row * mp.d;
  const bf16* gr = dphi + (h * Tp + t) * n_ld;
  if constexpr (Staged) {
    const std::int64_t per_warp = vjp_row_bytes(n_ld, mp.d);
    unsigned char* mine = reinterpret_cast<unsigned char*>(vjp_smem) + warp * per_warp;
    uint4* g16 = reinterpret_cast<uint4*>(mine);
    float* xs = reinterpret_cast<float*>(mine + n_ld * 2);
    for (std::int64_t i = lane; i < n_ld / 8; i += 32) g16[i] = reinterpret_cast<const uint4*>(gr)[i];
    for (int c = lane; c < mp.d; c += 32) xs[c] = __bfloat162float(xr[c]);
    __syncwarp();
    const bf16* gs = reinterpret_cast<const bf16*>(mine);
    for (int c = lane; c < mp.d; c += 32) dx[row * mp.d + c] = __float2bfloat16(psi_vjp_coord_psd<K>(mp, xs, gs, c));
  } else {
    for (int c = lane; c < mp.d; c += 32) dx[row * mp.d + c] = __float2bfloat16(psi_vjp_coord_psd<K>(mp, xr, gr, c));
  }
}
template <MapKind K>
__global__ void vjp_plain_kernel(DeviceMap mp, const bf16* __restrict__ x, const bf16* __restrict__ dphi,
                                 bf16* __restrict__ dx, std::int64_t heads, std::int64_t T, std::int64_t Tp,
                                 std::int64_t n_ld) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= heads * T) return;
  const std::int64_t h = row / T, t = row % T;
  float gx[kMaxPlainD], gpsi[kMaxPlainD + 1];  // n_ψ <= d + 1 for these maps
  const bf16* gr = dphi + (h * Tp + t) * n_ld;
  for (int f = 0; f < mp.n_features; ++f) gpsi[f] = __bfloat162float(gr[f]);
  psi_vjp_row<K>(mp, x + row * mp.d, gpsi, gx);
  for (int c = 0; c < mp.d; ++c) dx[row * mp.d + c] = __float2bfloat16(gx[c]);
}

// dv[h][t] = dV̂[h][t][:dv] for t < T. One warp per row (one division per row, as augment_kernel).
__global__ void extract_kernel(const float* __restrict__ src, bf16* __restrict__ dv, std::int64_t heads,
                               std::int64_t T, std::int64_t Tp, std::int64_t dvw, std::int64_t W) {
  const auto [row, lane] = warp_row();
  if (row >= heads * T) return;
  const std::int64_t h = row / T, t = row - h * T;
  const float* sr = src + (h * Tp + t) * W;
  bf16* o = dv + row * dvw;
  for (std::int64_t c = lane; c < dvw; c += 32) o[c] = __float2bfloat16(sr[c]);
}

// Row-major strided-batched C[i] = op(A[i]) · op(B[i]) + beta C[i] (op(A) M x K, op(B) K x N; ta: A stored K x M,
// tb: B stored N x K; ld* = stored columns), bf16 inputs, fp32 accumulation, C in `ct`. As column-major:
// Cᵀ = op(B)ᵀ op(A)ᵀ.
void gemm(cublasHandle_t h, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const bf16* A,
          std::int64_t lda, std::int64_t sa, const bf16* B, std::int64_t ldb, std::int64_t sb, void* C,
          cudaDataType ct, std::int64_t ldc, std::int64_t sc, std::int64_t batch, float beta) {
  const float alpha = 1.f;
  MEMCAP_CB_CUBLAS(cublasGemmStridedBatchedEx(
      h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
      static_cast<int>(K), &alpha, B, CUDA_R_16BF, static_cast<int>(ldb), sb, A, CUDA_R_16BF, static_cast<int>(lda), sa,
      &beta, C, ct, static_cast<int>(ldc), sc, static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void vjp(const DeviceMap& mp, const bf16* x, const bf16* dphi, bf16* dx, std::int64_t heads, const Dims& s,
         cudaStream_t stream) {
  with_map_kind(mp.kind, [&](auto kind) {
    constexpr MapKind K = decltype(kind)::value;
    if constexpr (K == MapKind::BlockPsd || K == MapKind::SumPsd) {
      const unsigned blocks = grid1(heads * s.T, kVjpWarps);
      const std::int64_t smem = kVjpWarps * vjp_row_bytes(s.n_ld, static_cast<int>(s.d));
      if (smem <= kVjpStagedMax) {
        vjp_psd_kernel<K, true><<<blocks, kThreads, static_cast<std::size_t>(smem), stream>>>(mp, x, dphi, dx, heads, s.T, s.Tp, s.n_ld);
      } else {
        vjp_psd_kernel<K, false><<<blocks, kThreads, 0, stream>>>(mp, x, dphi, dx, heads, s.T, s.Tp, s.n_ld);
      }
      MEMCAP_CUDA_CHECK_LAUNCH("chunk_bwd::vjp_psd_kernel");
    } else {
      vjp_plain_kernel<K><<<grid1(heads * s.T, 128), 128, 0, stream>>>(mp, x, dphi, dx, heads, s.T, s.Tp, s.n_ld);
      MEMCAP_CUDA_CHECK_LAUNCH("chunk_bwd::vjp_plain_kernel");
    }
  });
}

void features(const DeviceMap& mp, const bf16* x, bf16* phi, std::int64_t heads, const Dims& s, cudaStream_t stream) {
  const dim3 grid(grid1(s.n_ld), static_cast<unsigned>((s.Tp + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(heads));
  const std::size_t smem = (kRowsPerTile * s.d + kRowsPerTile) * sizeof(float);
  with_map_kind(mp.kind, [&](auto kind) {
    constexpr MapKind K = decltype(kind)::value;
    psi_kernel<K><<<grid, kThreads, smem, stream>>>(mp, x, phi, s.T, s.Tp, s.n_ld, s.C, s.W);
    MEMCAP_CUDA_CHECK_LAUNCH("chunk_bwd::psi_kernel");
  });
}

// One group of `h` heads (pointers already offset to the group's first head). Per chunk (batch entry):
// qx = [GŜᵀ ; Φq], kx = [Ŝᵀ ; Φk] ((W + C) x n_ld), vda = [V̂ | dAᵀ], gda = [Ĝ | dA] (C x (W + C)).
void run_group(const Dims& s, const DeviceMap& mp, const bf16* q, const bf16* k,
               const bf16* v, const bf16* o, const bf16* dout, bf16* dq, bf16* dk, bf16* dv, std::int64_t h,
               const Carve& w, cublasHandle_t blas, cudaStream_t stream, cudaEvent_t* stages) {
  int stage = 0;
  auto mark = [&] {  // the end of a stage (kChunkedBackwardStageNames), when the caller asked for events
    if (stages) MEMCAP_CUDA_CHECK(cudaEventRecord(stages[stage], stream));
    ++stage;
  };
  const std::int64_t C = s.C, n = s.n_ld, W = s.W, L = W + C, batch = h * s.nc;
  const std::int64_t sX = L * n, sRow = C * L, sPhi = C * n, sAug = C * W, sBlk = C * C;
  bf16 *const phq = w.qx + W * n, *const phk = w.kx + W * n;  // the feature rows inside the chunk blocks
  const auto to16 = CUDA_R_16BF;
  const auto to32 = CUDA_R_32F;
  // the transposed chunk states X_cᵀ Φ_c (W x n_ld) into the first W rows of the chunk blocks of `blk`, bf16, then
  // scanned over the chunks in place (exclusive; reverse: from the end)
  auto states = [&](const bf16* x, const bf16* phi, bf16* blk, bool reverse) {
    gemm(blas, true, false, W, n, C, x, L, sRow, phi, n, sX, blk, to16, n, sX, batch, 0.f);
    scan_kernel<<<grid1(h * W * n / 8), kThreads, 0, stream>>>(blk, h, s.nc, W * n, sX, reverse);
    MEMCAP_CUDA_CHECK_LAUNCH("chunk_bwd::scan_kernel");
  };
  // the C x C block X_c Y_cᵀ of each chunk over K columns (rows of ldx, ldy), bf16 into `out` (rows of ldo), masked
  auto block = [&](const bf16* x, std::int64_t ldx, std::int64_t sx, const bf16* y, std::int64_t ldy,
                   std::int64_t sy, std::int64_t K, bf16* out, std::int64_t ldo, std::int64_t so, bool upper) {
    gemm(blas, false, true, C, C, K, x, ldx, sx, y, ldy, sy, out, to16, ldo, so, batch, 0.f);
    mask_kernel<<<grid1(batch * sBlk / 8), kThreads, 0, stream>>>(out, batch, cuda_detail::FastDivmod(C),
                                                                   cuda_detail::FastDivmod(C / 8), ldo, upper);
    MEMCAP_CUDA_CHECK_LAUNCH("chunk_bwd::mask_kernel");
  };
  features(mp, q, w.qx, h, s, stream);
  features(mp, k, w.kx, h, s, stream);
  augment_kernel<<<grid1(h * s.Tp * 32), kThreads, 0, stream>>>(v, w.vda, h, s.T, s.Tp, s.dv, W, L);
  MEMCAP_CUDA_CHECK_LAUNCH("chunk_bwd::augment_kernel");
  mark();
  // pass 1: Ŝ_cᵀ = Σ_{c' < c} V̂_{c'}ᵀ Φk_{c'}; the intra-chunk kernel block A_c = mask(Φq_c Φk_cᵀ)
  states(w.vda, phk, w.kx, false);
  mark();
  block(phq, n, sX, phk, n, sX, n, w.abf, C, sBlk, false);
  // R_c = Φq_c Ŝ_c + A_c V̂_c: column dv is z_t
  gemm(blas, false, true, C, W, n, phq, n, sX, w.kx, n, sX, w.r32, to32, W, sAug, batch, 0.f);
  gemm(blas, false, false, C, W, C, w.abf, C, sBlk, w.vda, L, sRow, w.r32, to32, W, sAug, batch, 1.f);
  readout_kernel<<<grid1(h * s.Tp * 32), kThreads, 0, stream>>>(w.r32, dout, o, w.gda, h, s.T, s.Tp, s.dv, W, L);
  MEMCAP_CUDA_CHECK_LAUNCH("chunk_bwd::readout_kernel");
  mark();
  // pass 2: GŜ_cᵀ = Σ_{c' > c} Ĝ_{c'}ᵀ Φq_{c'}; dA_c = mask(Ĝ_c V̂_cᵀ) beside Ĝ, dA_cᵀ = mask(V̂_c Ĝ_cᵀ) beside V̂
  states(w.gda, phq, w.qx, true);
  mark();
  block(w.gda, L, sRow, w.vda, L, sRow, W, w.gda + W, L, sRow, false);
  block(w.vda, L, sRow, w.gda, L, sRow, W, w.vda + W, L, sRow, true);
  mark();
  // dΦq_c = [Ĝ_c | dA_c] · [Ŝ_cᵀ ; Φk_c],  dΦk_c = [V̂_c | dA_cᵀ] · [GŜ_cᵀ ; Φq_c]  (one product each, K = W + C)
  gemm(blas, false, false, C, n, L, w.gda, L, sRow, w.kx, n, sX, w.dphq, to16, n, sPhi, batch, 0.f);
  gemm(blas, false, false, C, n, L, w.vda, L, sRow, w.qx, n, sX, w.dphk, to16, n, sPhi, batch, 0.f);
  mark();
  // dV̂_c = Φk_c GŜ_c + A_cᵀ Ĝ_c (into r32, no longer needed)
  gemm(blas, false, true, C, W, n, phk, n, sX, w.qx, n, sX, w.r32, to32, W, sAug, batch, 0.f);
  gemm(blas, true, false, C, W, C, w.abf, C, sBlk, w.gda, L, sRow, w.r32, to32, W, sAug, batch, 1.f);
  extract_kernel<<<grid1(h * s.T * 32), kThreads, 0, stream>>>(w.r32, dv, h, s.T, s.Tp, s.dv, W);
  MEMCAP_CUDA_CHECK_LAUNCH("chunk_bwd::extract_kernel");
  mark();
  vjp(mp, q, w.dphq, dq, h, s, stream);
  vjp(mp, k, w.dphk, dk, h, s, stream);
  mark();
}

}  // namespace chunk_bwd

std::string chunked_backward_unsupported(const AttentionLaunch& p) {
  using std::to_string;
  if (p.dtype != gpu::DType::bf16) return "the chunked backward runs bf16 inputs only";
  if (!p.normalized) return "the chunked backward covers the normalized readout only";
  const MapKind k = p.map.kind;
  if (k == MapKind::EvenDegree || k == MapKind::Softmax)
    return "the chunked backward needs a map with a device feature map (not deg<2r> or softmax)";
  if (p.map.n_features < 1) return "the map has no features";
  if (!p.map.is_psd() && (p.d > chunk_bwd::kMaxPlainD || p.map.n_features > chunk_bwd::kMaxPlainD + 1))
    return "the chunked backward of the n_psi = d maps covers d <= " + to_string(chunk_bwd::kMaxPlainD);
  if (p.chunk < 8 || p.chunk > 256 || p.chunk % 8 != 0)
    return "the chunked backward needs a chunk C that is a multiple of 8 in [8, 256] (got " + to_string(p.chunk) + ")";
  if (p.B < 1 || p.H < 1 || p.T < 1 || p.d < 1 || p.dv < 1) return "sizes must be >= 1";
  if (p.d > chunk_bwd::kMaxD) return "the chunked backward covers d <= " + to_string(chunk_bwd::kMaxD);
  const chunk_bwd::Dims s = chunk_bwd::dims_of(p);
  if (s.nc > 2147483647LL) return "too many chunks (T = " + to_string(p.T) + ")";
  if ((s.Tp + chunk_bwd::kRowsPerBlock - 1) / chunk_bwd::kRowsPerBlock > 65535)
    return "T must be <= " + to_string(65535 * chunk_bwd::kRowsPerBlock) + " (got " + to_string(p.T) + ")";
  return {};
}

std::size_t chunked_backward_workspace_bytes(const AttentionLaunch& p, std::int64_t heads) {
  return chunk_bwd::carve(chunk_bwd::dims_of(p), std::max<std::int64_t>(heads, 1), nullptr).bytes;
}

std::int64_t chunked_backward_heads_fitting(const AttentionLaunch& p, std::size_t budget) {
  const std::int64_t bh = p.B * p.H;
  const std::size_t one = chunked_backward_workspace_bytes(p, 1);
  if (one > budget) return 0;
  std::int64_t h = std::min<std::int64_t>(bh, static_cast<std::int64_t>(budget / one));
  while (h > 1 && chunked_backward_workspace_bytes(p, h) > budget) --h;  // alignment padding
  // the batched products take one batch entry per (head, chunk): keep it within cuBLAS's int
  const std::int64_t nc = chunk_bwd::dims_of(p).nc;
  h = std::min<std::int64_t>(h, 2147483647LL / std::max<std::int64_t>(nc, 1));
  return std::max<std::int64_t>(1, std::min(h, chunk_bwd::kMaxHeadsPerGroup));
}

void launch_chunked_backward(const AttentionLaunch& p, const AttentionGradPtrs& g, std::int64_t heads_per_group,
                             cublasHandle_t blas, cudaStream_t stream) {
  const std::string why = chunked_backward_unsupported(p);
  if (!why.empty()) cuda_detail::throw_user_error("chunked KATA backward: " + why);
  if (heads_per_group < 1 || heads_per_group > chunk_bwd::kMaxHeadsPerGroup ||
      heads_per_group * chunk_bwd::dims_of(p).nc > 2147483647LL)
    cuda_detail::throw_user_error("chunked KATA backward: heads per group must be in [1, 65535] with heads x chunks "
                                  "within 2^31 (got " + std::to_string(heads_per_group) + ")");
  cudaStream_t bound = nullptr;
  MEMCAP_CB_CUBLAS(cublasGetStream(blas, &bound));
  if (bound != stream) cuda_detail::throw_device_error("chunked KATA backward: the cuBLAS handle is bound to another stream");
  using bf = __nv_bfloat16;
  const chunk_bwd::Dims s = chunk_bwd::dims_of(p);
  const DeviceMap mp = device_map(p.map);
  const chunk_bwd::Carve w = chunk_bwd::carve(s, heads_per_group, g.workspace);
  const std::int64_t bh = p.B * p.H;
  for (std::int64_t h0 = 0; h0 < bh; h0 += heads_per_group) {
    const std::int64_t h = std::min(heads_per_group, bh - h0);
    const std::int64_t oq = h0 * s.T * s.d, ov = h0 * s.T * s.dv;
    chunk_bwd::run_group(s, mp, static_cast<const bf*>(g.q) + oq, static_cast<const bf*>(g.k) + oq,
                         static_cast<const bf*>(g.v) + ov, static_cast<const bf*>(g.o) + ov,
                         static_cast<const bf*>(g.dout) + ov, static_cast<bf*>(g.dq) + oq, static_cast<bf*>(g.dk) + oq,
                         static_cast<bf*>(g.dv) + ov, h, w, blas, stream, p.stage_events);
  }
}

}  // namespace memcap::kata::cuda

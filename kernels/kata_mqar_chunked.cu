// "chunked" variant of the MQAR KATA mixer core, forward only (kata_mqar_chunked.cuh): explicit features from the
// one device ψ, per-chunk states and the intra-chunk scores on cuBLAS strided-batched products, an exclusive scan
// over the chunks, the causal mask and the normalized readout in small element kernels (fixed order, no atomics).
// CPU twin: mqar::kata_head_forward_chunked (src/kata/mqar_mixers.cpp).
//
// Column-major views (as kata_mqar_gemm.cu): a row-major [rows, w] block with ld w is the column-major w × rows
// matrix. Per (sequence, head) the group's buffers hold Tp = nc·C rows (zero past T), so chunk i = bh·nc + c of
// Φ (np4 columns), V̂ and R (W columns) starts at i·C·np4 resp. i·C·W, and its state U_i (row-major np4 × W) at
// i·np4·W. Then U_cm = V̂_cm Φ_cmᵀ, R_cm = S_cm Φq_cm (+ V̂_cm P_cm), P_cm = Φk_cmᵀ Φq_cm with P_cm(s, t) = A(t, s).
#include <algorithm>
#include <string>
#include <type_traits>

#include "cuda_check.cuh"
#include "kata_feature_map.cuh"
#include "kata_mqar_chunked.cuh"
#include "kata_mqar_psi.cuh"
#include "kata_mqar_workspace.cuh"
#include "nn_layers.cuh"

namespace memcap::kata::mqar::cuda {
namespace {

namespace kc = ::memcap::kata::cuda;
namespace nc = ::memcap::nn::cuda;

constexpr std::int64_t kC = kChunkedEvalChunk;
constexpr int kThreadsPerBlock = 256;

// Geometry of one group of nb sequences.
struct Geo {
  std::int64_t nb, H, T, dh, nc, Tp;
  int np4, W;
  __host__ __device__ std::int64_t heads() const { return nb * H; }
  __host__ __device__ std::int64_t rows() const { return nb * H * Tp; }  // padded rows of Φ, V̂, R
};

int round4(std::int64_t x) { return static_cast<int>((x + 3) / 4 * 4); }

Geo geo_of(const MapParams& map, const HeadShape& s, std::int64_t nb) {
  Geo g;
  g.nb = nb;
  g.H = s.H;
  g.T = s.T;
  g.dh = s.dh;
  g.nc = (s.T + kC - 1) / kC;
  g.Tp = g.nc * kC;
  g.np4 = round4(map.n_features);
  g.W = round4(s.dh + 1);
  return g;
}

// Elements of one sequence's workspace: Φq, Φk, V̂, R (Tp rows each), the chunk states, the chunk scores.
std::size_t per_seq_elems(const Geo& g1) {
  const std::size_t H = static_cast<std::size_t>(g1.H), Tp = static_cast<std::size_t>(g1.Tp);
  return H * Tp * (2 * static_cast<std::size_t>(g1.np4) + 2 * static_cast<std::size_t>(g1.W)) +
         H * static_cast<std::size_t>(g1.nc) * g1.np4 * g1.W + H * static_cast<std::size_t>(g1.nc) * kC * kC;
}

unsigned blocks_for(std::int64_t n, int per_block) {
  const std::int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(std::min<std::int64_t>(std::max<std::int64_t>(b, 1), 1 << 20));
}

// V̂ rows: [v | 1 | 0 …] (W columns), zero rows past T.
template <class T>
__global__ void chunk_values(T* __restrict__ vh, const T* __restrict__ v, std::int64_t ld, Geo g) {
  const std::int64_t n = g.rows() * g.W;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / g.W, j = e - r * g.W;
    const std::int64_t t = r % g.Tp, bh = r / g.Tp, h = bh % g.H, b = bh / g.H;
    T val = T(0);
    if (t < g.T) val = j < g.dh ? v[(b * g.T + t) * ld + h * g.dh + j] : (j == g.dh ? T(1) : T(0));
    vh[e] = val;
  }
}

// Exclusive scan over the chunks of each head, in place: U_c ← Σ_{c' < c} U_c' (ascending c, one thread per
// state element).
template <class T>
__global__ void chunk_scan(T* __restrict__ U, Geo g) {
  const std::int64_t E = static_cast<std::int64_t>(g.np4) * g.W, n = g.heads() * E;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t bh = i / E, e = i - bh * E;
    T* u = U + bh * g.nc * E + e;
    T acc = T(0);
    for (std::int64_t c = 0; c < g.nc; ++c) {
      const T x = u[c * E];
      u[c * E] = acc;
      acc += x;
    }
  }
}

// Causal mask of the chunk scores: row-major P[t][s] = A(t, s) for s <= t, 0 above.
template <class T>
__global__ void chunk_mask(T* __restrict__ P, std::int64_t n) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t s = e % kC, t = (e / kC) % kC;
    if (s > t) P[e] = T(0);
  }
}

// o = R[:, :d_v] / R[:, d_v] (0 where the denominator is 0), den = R[:, d_v]; real rows only.
template <class T>
__global__ void chunk_readout(T* __restrict__ o, std::int64_t ldo, T* __restrict__ den, const T* __restrict__ R,
                              Geo g) {
  const std::int64_t n = g.heads() * g.T * g.dh;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t j = e % g.dh, row = e / g.dh, t = row % g.T, bh = row / g.T, h = bh % g.H, b = bh / g.H;
    const T* rr = R + (bh * g.Tp + t) * g.W;
    const T z = rr[g.dh];
    o[(b * g.T + t) * ldo + h * g.dh + j] = z != T(0) ? rr[j] / z : T(0);
    if (j == 0) den[bh * g.T + t] = z;
  }
}

void check_args(const MapParams& map, const HeadShape& s, const char* what) {
  if (s.B < 0 || s.T < 0 || s.H < 1 || s.dh < 1)
    cuda_detail::throw_user_error(std::string(what) + ": head shape needs H >= 1 and d_head >= 1 (got H = " +
                                  std::to_string(s.H) + ", d_head = " + std::to_string(s.dh) + ")");
  if (!kata_chunked_applies(map, s))
    cuda_detail::throw_user_error(std::string(what) +
                                  ": the chunked variant needs a map with a device ψ (m<g>, sigma<g>, orthant, "
                                  "lorentz, linear) built for this head width (d_head = " +
                                  std::to_string(s.dh) + ")");
}

}  // namespace

bool kata_chunked_applies(const MapParams& map, const HeadShape& s) {
  return map.has_device_psi() && map.d == s.dh && map.n_features >= 1;
}

std::size_t kata_chunked_workspace_bytes(const MapParams& map, const HeadShape& s, std::size_t elem) {
  if (!kata_chunked_applies(map, s) || s.T < 1) return 0;
  return wsp::capped(s, per_seq_elems(geo_of(map, s, 1)) * elem);
}

template <class T>
void kata_heads_forward_chunked(T* o, std::int64_t ldo, T* den, const MapParams& map, const T* q, const T* k,
                                const T* v, std::int64_t ldqkv, const HeadShape& s, cublasHandle_t h, void* ws,
                                std::size_t ws_bytes, cudaStream_t stream) {
  const char* what = "kata_heads_forward_chunked";
  check_args(map, s, what);
  if (s.B == 0 || s.T == 0) return;
  nc::check_handle_stream(h, stream);
  const std::int64_t nb_max =
      wsp::group_size(s, per_seq_elems(geo_of(map, s, 1)) * sizeof(T), ws_bytes, what);
  const kc::DeviceMap dm = kc::device_map(map);
  for (std::int64_t b0 = 0; b0 < s.B; b0 += nb_max) {
    const Geo g = geo_of(map, s, std::min(nb_max, s.B - b0));
    const std::int64_t rows = g.rows(), chunks = g.heads() * g.nc, np4 = g.np4, W = g.W;
    T* phq = static_cast<T*>(ws);
    T* phk = phq + rows * np4;
    T* vh = phk + rows * np4;
    T* R = vh + rows * W;
    T* U = R + rows * W;
    T* P = U + chunks * np4 * W;
    const std::int64_t seq = s.T * ldqkv;
    const detail::PsiRows pr{g.heads(), g.H, g.T, g.Tp, g.dh, g.np4};
    kc::with_map_kind(map.kind, [&](auto kind) {
      constexpr MapKind K = decltype(kind)::value;
      const unsigned fb = blocks_for(rows, detail::kPsiRowWarps);
      detail::psi_rows_kernel<T, K><<<fb, detail::kPsiRowWarps * 32, 0, stream>>>(phq, q + b0 * seq, ldqkv, dm, pr);
      MEMCAP_CUDA_CHECK_LAUNCH("psi_rows_kernel");
      detail::psi_rows_kernel<T, K><<<fb, detail::kPsiRowWarps * 32, 0, stream>>>(phk, k + b0 * seq, ldqkv, dm, pr);
      MEMCAP_CUDA_CHECK_LAUNCH("psi_rows_kernel");
    });
    chunk_values<T>
        <<<blocks_for(rows * W, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(vh, v + b0 * seq, ldqkv, g);
    MEMCAP_CUDA_CHECK_LAUNCH("chunk_values");
    // Chunk states U_i = Φk_iᵀ V̂_i, then the exclusive scan S_c.
    nc::gemm_cm_strided<T>(h, CUBLAS_OP_N, CUBLAS_OP_T, W, np4, kC, T(1), vh, W, kC * W, phk, np4, kC * np4, T(0), U, W,
                           np4 * W, chunks);
    chunk_scan<T><<<blocks_for(g.heads() * np4 * W, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(U, g);
    MEMCAP_CUDA_CHECK_LAUNCH("chunk_scan");
    // R_i = Φq_i S_i; P_i = Φq_i Φk_iᵀ masked; R_i += P_i V̂_i.
    nc::gemm_cm_strided<T>(h, CUBLAS_OP_N, CUBLAS_OP_N, W, kC, np4, T(1), U, W, np4 * W, phq, np4, kC * np4, T(0), R, W,
                           kC * W, chunks);
    nc::gemm_cm_strided<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, kC, kC, np4, T(1), phk, np4, kC * np4, phq, np4, kC * np4, T(0),
                           P, kC, kC * kC, chunks);
    chunk_mask<T><<<blocks_for(chunks * kC * kC, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(P, chunks * kC * kC);
    MEMCAP_CUDA_CHECK_LAUNCH("chunk_mask");
    nc::gemm_cm_strided<T>(h, CUBLAS_OP_N, CUBLAS_OP_N, W, kC, kC, T(1), vh, W, kC * W, P, kC, kC * kC, T(1), R, W,
                           kC * W, chunks);
    chunk_readout<T><<<blocks_for(g.heads() * g.T * g.dh, kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(
        o + b0 * s.T * ldo, ldo, den + b0 * s.H * s.T, R, g);
    MEMCAP_CUDA_CHECK_LAUNCH("chunk_readout");
  }
}

#define MEMCAP_MQAR_CHUNKED(T)                                                                                      \
  template void kata_heads_forward_chunked<T>(T*, std::int64_t, T*, const MapParams&, const T*, const T*, const T*, \
                                              std::int64_t, const HeadShape&, cublasHandle_t, void*, std::size_t,   \
                                              cudaStream_t);
MEMCAP_MQAR_CHUNKED(float)
MEMCAP_MQAR_CHUNKED(double)
#undef MEMCAP_MQAR_CHUNKED

}  // namespace memcap::kata::mqar::cuda

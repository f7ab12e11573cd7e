// bf16 fused GD kernels (see nn_gd_bf16.cuh). Tiles of 64 units / values; each warp owns 16-row m-tiles (two in the
// forward at d ≤ 64) of mma.sync m16n8k16 products, fp32 accumulators in the m16n8 C layout: lane (g, t) = (lane/4,
// lane % 4) holds rows g, g + 8, columns 2t, 2t + 1 of every 8-column n-tile. C fragments become the next product's
// A fragments in registers (h in the forward, the one-pass CE's softmax weights), as in flash attention; the
// backward's transposed products go through shared memory (ldmatrix .trans).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "mma_bf16.cuh"
#include "nn_device.cuh"
#include "nn_gd_bf16.cuh"
#include "nn_train_state_dev.cuh"
#include "pdl.cuh"
#include "smem_limit.cuh"

namespace memcap::nn::cuda {

namespace {

using bf16 = __nv_bfloat16;
using mma::load_a;
using mma::load_a_trans;
using mma::load_b_kn;
using mma::load_b_nk;
using mma::load_tile;
using mma::mma_bf16;
using mma::pack_bf16;
using pdl::pdl_launch_dependents;
using pdl::pdl_wait;

constexpr int BT = static_cast<int>(kBf16Tile);
constexpr int kFwdThreads = 128, kCeThreads = 128, kBwdThreads = 256;
// The backward's ring of (x, dy) row tiles: tile t + 2 is issued while tile t is worked on, so one barrier a tile
// suffices (see bwd_kernel).
constexpr int kBwdStages = 3;  // bwd_kernel's ring index arithmetic assumes 3

template <int W>
constexpr int ld_of() {
  return W + 8;  // padded shared-memory row stride (elements): conflict-free ldmatrix
}

// C fragment (n-tile nt, entry q) -> (row offset, column offset) inside the warp's 16 x N block.
__device__ __forceinline__ int c_row(int lane, int q) { return (lane >> 2) + ((q & 2) ? 8 : 0); }
__device__ __forceinline__ int c_col(int lane, int nt, int q) { return nt * 8 + 2 * (lane & 3) + (q & 1); }

// A fragments (16 rows x DK) of rows r0.. of a row-major fp32 [N][d] matrix, rounded to bf16 (zero outside).
template <int DK>
__device__ __forceinline__ void rows_to_a(uint32_t (&a)[DK / 16][4], const float* __restrict__ y, long long N, int d,
                                          long long r0, int lane) {
  const long long ra = r0 + (lane >> 2), rb = ra + 8;
  auto pair = [&](long long r, int c) -> uint32_t {
    float v0 = 0.f, v1 = 0.f;
    if (r < N) {
      if (c < d) v0 = y[r * d + c];
      if (c + 1 < d) v1 = y[r * d + c + 1];
    }
    return pack_bf16(v0, v1);
  };
#pragma unroll
  for (int ks = 0; ks < DK / 16; ++ks) {
    const int c0 = ks * 16 + 2 * (lane & 3);
    a[ks][0] = pair(ra, c0);
    a[ks][1] = pair(rb, c0);
    a[ks][2] = pair(ra, c0 + 8);
    a[ks][3] = pair(rb, c0 + 8);
  }
}

// The A fragment of the 16-column k-slice kk of a 16 x N C-layout accumulator block (values v[nt][q]).
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&v0)[4], const float (&v1)[4]) {
  a[0] = pack_bf16(v0[0], v0[1]);
  a[1] = pack_bf16(v0[2], v0[3]);
  a[2] = pack_bf16(v1[0], v1[1]);
  a[3] = pack_bf16(v1[2], v1[3]);
}

// ---- split operands (precision bf16x3, kernels/nn_bf16x3.cuh): v = hi + lo, hi = bf16(v), lo = bf16(v − hi) ----
__device__ __forceinline__ float bf16_residual(float v) { return v - __bfloat162float(__float2bfloat16_rn(v)); }

// rows_to_a's fragments of y (hi) and of its residual (lo).
template <int DK>
__device__ __forceinline__ void rows_to_a_split(uint32_t (&hi)[DK / 16][4], uint32_t (&lo)[DK / 16][4],
                                                const float* __restrict__ y, long long N, int d, long long r0,
                                                int lane) {
  const long long ra = r0 + (lane >> 2), rb = ra + 8;
  auto pair = [&](long long r, int c, uint32_t& h, uint32_t& l) {
    float v0 = 0.f, v1 = 0.f;
    if (r < N) {
      if (c < d) v0 = y[r * d + c];
      if (c + 1 < d) v1 = y[r * d + c + 1];
    }
    h = pack_bf16(v0, v1);
    l = pack_bf16(bf16_residual(v0), bf16_residual(v1));
  };
#pragma unroll
  for (int ks = 0; ks < DK / 16; ++ks) {
    const int c0 = ks * 16 + 2 * (lane & 3);
    pair(ra, c0, hi[ks][0], lo[ks][0]);
    pair(rb, c0, hi[ks][1], lo[ks][1]);
    pair(ra, c0 + 8, hi[ks][2], lo[ks][2]);
    pair(rb, c0 + 8, hi[ks][3], lo[ks][3]);
  }
}

// c_to_a of the block (hi) and of its residual (lo).
__device__ __forceinline__ void c_to_a_split(uint32_t (&hi)[4], uint32_t (&lo)[4], const float (&v0)[4],
                                             const float (&v1)[4]) {
  c_to_a(hi, v0, v1);
  lo[0] = pack_bf16(bf16_residual(v0[0]), bf16_residual(v0[1]));
  lo[1] = pack_bf16(bf16_residual(v0[2]), bf16_residual(v0[3]));
  lo[2] = pack_bf16(bf16_residual(v1[0]), bf16_residual(v1[1]));
  lo[3] = pack_bf16(bf16_residual(v1[2]), bf16_residual(v1[3]));
}

// ---- operand conversion (8 bf16 = one 16-byte store per thread; 32-bit indices: callers check the sizes) ----
__device__ __forceinline__ void store8(bf16* dst, const float (&v)[8]) {
  uint4 u;
  u.x = pack_bf16(v[0], v[1]);
  u.y = pack_bf16(v[2], v[3]);
  u.z = pack_bf16(v[4], v[5]);
  u.w = pack_bf16(v[6], v[7]);
  *reinterpret_cast<uint4*>(dst) = u;
}

// hi, lo [n_pad][dk] = the split of x [N][d] (zero padding); dk8_shift = log2(dk / 8).
__global__ void split_rows_bf16_kernel(bf16* __restrict__ hi, bf16* __restrict__ lo, const float* __restrict__ x,
                                       int N, int d, int dk8_shift, int total8) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total8) return;
  const int r = i >> dk8_shift, c0 = (i & ((1 << dk8_shift) - 1)) * 8;
  float h[8], l[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float v = (r < N && c0 + j < d) ? x[static_cast<long long>(r) * d + c0 + j] : 0.f;
    h[j] = __bfloat162float(__float2bfloat16_rn(v));
    l[j] = v - h[j];
  }
  const long long o = static_cast<long long>(i) * 8;
  store8(hi + o, h);
  store8(lo + o, l);
}

// dst [n_pad][dk] from nparts float [N][d] partials; dk8_shift = log2(dk / 8).
__global__ void sum_rows_bf16_kernel(bf16* __restrict__ dst, const float* __restrict__ parts, int nparts, int N, int d,
                                     int dk8_shift, int total8, const TrainState* gate) {
  if (!dev::step_active(gate)) return;
  const long long stride = static_cast<long long>(N) * d;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total8; e += gridDim.x * blockDim.x) {
    const int r = e >> dk8_shift, c0 = (e - (r << dk8_shift)) * 8;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int c = c0 + j;
      float x = 0.f;
      if (r < N && c < d) {
        const float* p = parts + static_cast<long long>(r) * d + c;
        x = p[0];
        for (int q = 1; q < nparts; ++q) x += p[q * stride];
      }
      v[j] = x;
    }
    store8(dst + static_cast<long long>(e) * 8, v);
  }
}

// Ub, Gb [m_pad][dk] and the D panels [m_pad/64][dk][64] (total8 = m_pad·dk/8 each).
__global__ void weights_bf16_kernel(bf16* __restrict__ Ub, bf16* __restrict__ Gb, bf16* __restrict__ Db,
                                    const float* __restrict__ U, const float* __restrict__ G,
                                    const float* __restrict__ D, int m, int d_in, int d_out, int dk8_shift, int total8,
                                    const TrainState* gate) {
  if (!dev::step_active(gate)) return;
  const int dk = 8 << dk8_shift;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total8; e += gridDim.x * blockDim.x) {
    const int r = e >> dk8_shift, c0 = (e - (r << dk8_shift)) * 8;
    float u[8], g[8], w[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const bool in = r < m && c0 + j < d_in;
      u[j] = in ? U[static_cast<long long>(r) * d_in + c0 + j] : 0.f;
      g[j] = in ? G[static_cast<long long>(r) * d_in + c0 + j] : 0.f;
    }
    // panel element e·8..e·8+7: row R = e / 8 of the [m_pad/64 · dk][64] panel stack, units (e % 8)·8..
    const int R = e >> 3, panel = R / dk, cd = R - panel * dk, u0 = panel * BT + (e & 7) * 8;
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j] = cd < d_out && u0 + j < m ? D[static_cast<long long>(cd) * m + u0 + j] : 0.f;
    store8(Ub + static_cast<long long>(e) * 8, u);
    store8(Gb + static_cast<long long>(e) * 8, g);
    store8(Db + static_cast<long long>(e) * 8, w);
  }
}

// ---- forward: y_part[split] = Σ_{units of the split} (x Uᵀ ⊙ σ(x Gᵀ)) Dᵀ -------------------------------------
// Each warp owns 16·FMT rows (FMT = fwd_mtiles(DK) m-tiles sharing every B fragment: half the shared-memory reads
// per product of one m-tile), the block 4 warps = 64·FMT rows; units in 64-unit tiles (U, G, D panel) double
// buffered by cp.async; h stays in registers (C fragments -> A fragments of the y product).
struct FwdArgs {
  float* y_part;
  const bf16 *X, *U, *G, *D;
  long long N;
  int d_out;
  int unit_tiles;   // m_pad / 64
  int chunk_tiles;  // unit tiles per split
  const TrainState* gate;
};

template <int DK>
constexpr int fwd_mtiles() {
  return DK == 64 ? 2 : 1;  // DK = 128 at 2 m-tiles would hold 2 x 64 y accumulators: past the register file
}

template <int DK>
constexpr std::size_t fwd_smem() {
  constexpr int LK = ld_of<DK>(), LU = ld_of<BT>(), ROWS = 4 * 16 * fwd_mtiles<DK>();
  return sizeof(bf16) * (std::size_t(ROWS) * LK + 2 * (2 * std::size_t(BT) * LK + std::size_t(DK) * LU));
}

template <int DK, int ACT>
__global__ void __launch_bounds__(kFwdThreads) fwd_kernel(FwdArgs a) {
  pdl_launch_dependents();
  constexpr int LK = ld_of<DK>(), LU = ld_of<BT>(), KS = DK / 16, FMT = fwd_mtiles<DK>(), ROWS = 4 * 16 * FMT;
  constexpr int kStage = 2 * BT * LK + DK * LU;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Xs = reinterpret_cast<bf16*>(smem_raw);
  bf16* St = Xs + ROWS * LK;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const long long i0 = static_cast<long long>(blockIdx.x) * ROWS;
  const int jt0 = blockIdx.y * a.chunk_tiles, jt1 = min(a.unit_tiles, jt0 + a.chunk_tiles);
  const int n_pad = static_cast<int>((a.N + BT - 1) / BT * BT), m_pad = a.unit_tiles * BT;
  auto stage = [&](int buf, int jt) {
    bf16* Us = St + buf * kStage;
    load_tile<BT, DK>(Us, a.U, jt * BT, m_pad, tid, kFwdThreads);
    load_tile<BT, DK>(Us + BT * LK, a.G, jt * BT, m_pad, tid, kFwdThreads);
    load_tile<DK, BT>(Us + 2 * BT * LK, a.D + static_cast<long long>(jt) * DK * BT, 0, DK, tid, kFwdThreads);
  };
  load_tile<ROWS, DK>(Xs, a.X, static_cast<int>(i0), n_pad, tid, kFwdThreads);  // rows past n_pad: zeros
  pdl_wait();  // x is the training's fixed input; U, G, D come from the previous step's Adam
  if (!dev::step_active(a.gate)) {
    mma::cp_async_wait_all();
    return;
  }
  if (jt0 < jt1) stage(0, jt0);
  mma::cp_async_commit();

  float y[FMT][DK / 8][4] = {};
  uint32_t xa[FMT][KS][4];
  for (int jt = jt0, it = 0; jt < jt1; ++jt, ++it) {
    mma::cp_async_wait_all();
    __syncthreads();  // tile jt visible to all; everyone is done with the other buffer
    if (jt + 1 < jt1) stage((it + 1) & 1, jt + 1);
    mma::cp_async_commit();
    if (it == 0) {
#pragma unroll
      for (int mt = 0; mt < FMT; ++mt)
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) load_a(xa[mt][ks], Xs, LK, (warp * FMT + mt) * 16, ks * 16, lane);
    }
    const bf16* Us = St + (it & 1) * kStage;
    const bf16* Gs = Us + BT * LK;
    const bf16* Ds = Us + 2 * BT * LK;
#pragma unroll
    for (int qu = 0; qu < 4; ++qu) {  // 16 units at a time: a, g of the quarter only (register pressure)
      float ac[FMT][2][4] = {}, gc[FMT][2][4] = {};
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        uint32_t bu[4], bg[4];
        load_b_nk(bu, Us, LK, qu * 16, ks * 16, lane);
        load_b_nk(bg, Gs, LK, qu * 16, ks * 16, lane);
#pragma unroll
        for (int mt = 0; mt < FMT; ++mt) {
          mma_bf16(ac[mt][0], xa[mt][ks], bu[0], bu[1]);
          mma_bf16(ac[mt][1], xa[mt][ks], bu[2], bu[3]);
          mma_bf16(gc[mt][0], xa[mt][ks], bg[0], bg[1]);
          mma_bf16(gc[mt][1], xa[mt][ks], bg[2], bg[3]);
        }
      }
      uint32_t ha[FMT][4];
#pragma unroll
      for (int mt = 0; mt < FMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int q = 0; q < 4; ++q) ac[mt][nt][q] *= dev::act_value(gc[mt][nt][q], ACT);
        c_to_a(ha[mt], ac[mt][0], ac[mt][1]);
      }
#pragma unroll
      for (int cp = 0; cp < DK / 16; ++cp) {
        uint32_t b[4];
        load_b_nk(b, Ds, LU, cp * 16, qu * 16, lane);
#pragma unroll
        for (int mt = 0; mt < FMT; ++mt) {
          mma_bf16(y[mt][2 * cp], ha[mt], b[0], b[1]);
          mma_bf16(y[mt][2 * cp + 1], ha[mt], b[2], b[3]);
        }
      }
    }
  }
  float* out = a.y_part + static_cast<long long>(blockIdx.y) * a.N * a.d_out;
#pragma unroll
  for (int mt = 0; mt < FMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < DK / 8; ++nt)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const long long r = i0 + (warp * FMT + mt) * 16 + c_row(lane, q);
        const int c = c_col(lane, nt, q);
        if (r < a.N && c < a.d_out) out[r * a.d_out + c] = y[mt][nt][q];
      }
}

// ---- backward: gradient partial arena per row split -----------------------------------------------------------
struct BwdArgs {
  float* gpart;
  long long part_stride;
  GatedMlpGradOffsets off;
  const bf16 *X, *dY, *U, *G, *D;
  int m, d_in, d_out;
  int row_tiles;    // N_pad / 64
  int split_tiles;  // row tiles per split
  const TrainState* gate;
};

template <int DK>
constexpr std::size_t bwd_smem() {  // U, G, D; kBwdStages x (x, dy); 2 x (h, da, dg)
  constexpr int LK = ld_of<DK>(), LU = ld_of<BT>();
  return sizeof(bf16) * (2 * std::size_t(BT) * LK + std::size_t(DK) * LU + kBwdStages * 2 * std::size_t(BT) * LK +
                         2 * 3 * std::size_t(BT) * LU);
}

template <int DK, int ACT>
__global__ void __launch_bounds__(kBwdThreads, 1) bwd_kernel(BwdArgs a) {
  pdl_launch_dependents();
  constexpr int LK = ld_of<DK>(), LU = ld_of<BT>(), KS = DK / 16;
  // DK = 64: the warp's B fragments of U, G and D (its 32 units, fixed for the block) stay in registers (96), so
  // the per-tile products read only x and dy from shared memory; DK = 128 would need 192: reloaded per tile.
  constexpr bool BREG = DK == 64;
  constexpr int MT = DK / 64;  // dD m-tiles per warp (16 output features each)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Us = reinterpret_cast<bf16*>(smem_raw);
  bf16* Gs = Us + BT * LK;
  bf16* Ds = Gs + BT * LK;  // [DK][LU]: Ds[c][u] = D[c][j0 + u]
  bf16* St = Ds + DK * LU;                     // kBwdStages x (X [64][LK], dY [64][LK])
  bf16* Hb = St + kBwdStages * 2 * BT * LK;  // 2 x (h, da, dg [64][LU])
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int jt = blockIdx.x, j0 = jt * BT, m_pad = static_cast<int>(gridDim.x) * BT, n_pad = a.row_tiles * BT;
  const int rt0 = blockIdx.y * a.split_tiles, rt1 = min(a.row_tiles, rt0 + a.split_tiles);
  auto stage = [&](int buf, int rt) {
    bf16* Xs = St + buf * 2 * BT * LK;
    load_tile<BT, DK>(Xs, a.X, rt * BT, n_pad, tid, kBwdThreads);
    load_tile<BT, DK>(Xs + BT * LK, a.dY, rt * BT, n_pad, tid, kBwdThreads);
  };
  if (rt0 < rt1) load_tile<BT, DK>(St, a.X, rt0 * BT, n_pad, tid, kBwdThreads);  // x: the fixed input
  pdl_wait();  // dy from the CE, U, G, D from the previous step's Adam
  if (!dev::step_active(a.gate)) {
    mma::cp_async_wait_all();
    return;
  }
  load_tile<BT, DK>(Us, a.U, j0, m_pad, tid, kBwdThreads);
  load_tile<BT, DK>(Gs, a.G, j0, m_pad, tid, kBwdThreads);
  load_tile<DK, BT>(Ds, a.D + static_cast<long long>(jt) * DK * BT, 0, DK, tid, kBwdThreads);
  if (rt0 < rt1) load_tile<BT, DK>(St + BT * LK, a.dY, rt0 * BT, n_pad, tid, kBwdThreads);  // stage 0's dy
  mma::cp_async_commit();
  if (rt0 + 1 < rt1) stage(1, rt0 + 1);
  mma::cp_async_commit();
  mma::cp_async_wait_one_pending();  // U, G, D and stage 0
  __syncthreads();

  // phase 1 (rows x units): warp = (wr rows 16 wr.., wu units 32 wu..); phase 2: wm = warp & 3, wn = warp >> 2
  const int wr = warp & 3, wu = warp >> 2, wm = warp & 3, wn = warp >> 2;
  uint32_t bfr[BREG ? 3 : 1][BREG ? KS : 1][2][4];  // [U, G, D][ks][unit pair] (BREG)
  if constexpr (BREG) {  // the warp's B fragments of its 32 units, fixed for the block
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        const int u = wu * 32 + np * 16;
        load_b_nk(bfr[0][ks][np], Us, LK, u, ks * 16, lane);
        load_b_nk(bfr[1][ks][np], Gs, LK, u, ks * 16, lane);
        load_b_kn(bfr[2][ks][np], Ds, LU, u, ks * 16, lane);
      }
  }
  float du[DK / 16][4] = {}, dg[DK / 16][4] = {};  // units 16 wm.. x features (DK/2) wn..
  float dd[MT][4][4] = {};                          // output features (16 MT) wm.. x units 32 wn..
  // One barrier a tile: phase 1 of tile it writes (h, da, dg) buffer it & 1 and stage it + 1 is waited for; the
  // barrier then makes both visible, and since every warp has passed phase 2 of tile it − 1 (before its phase 1 of
  // tile it), stage (it + 2) % 3 and the other (h, da, dg) buffer are free: tile it + 2 is issued behind it.
  for (int rt = rt0, it = 0, sb = 0; rt < rt1; ++rt, ++it, sb = sb == kBwdStages - 1 ? 0 : sb + 1) {
    const bf16* Xs = St + sb * 2 * BT * LK;
    const bf16* dYs = Xs + BT * LK;
    bf16* Hs = Hb + (it & 1) * 3 * BT * LU;
    bf16* dAs = Hs + BT * LU;
    bf16* dGs = dAs + BT * LU;
    {
      float ac[4][4] = {}, gc[4][4] = {}, hc[4][4] = {};
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        uint32_t xa[4], ya[4];
        load_a(xa, Xs, LK, wr * 16, ks * 16, lane);
        load_a(ya, dYs, LK, wr * 16, ks * 16, lane);
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          const int u = wu * 32 + np * 16;
          uint32_t bl[3][4];
          if constexpr (!BREG) {
            load_b_nk(bl[0], Us, LK, u, ks * 16, lane);
            load_b_nk(bl[1], Gs, LK, u, ks * 16, lane);
            load_b_kn(bl[2], Ds, LU, u, ks * 16, lane);
          }
          const uint32_t(&bu)[4] = BREG ? bfr[0][BREG ? ks : 0][np] : bl[0];
          const uint32_t(&bg)[4] = BREG ? bfr[1][BREG ? ks : 0][np] : bl[1];
          const uint32_t(&bd)[4] = BREG ? bfr[2][BREG ? ks : 0][np] : bl[2];
          mma_bf16(ac[2 * np], xa, bu[0], bu[1]);
          mma_bf16(ac[2 * np + 1], xa, bu[2], bu[3]);
          mma_bf16(gc[2 * np], xa, bg[0], bg[1]);
          mma_bf16(gc[2 * np + 1], xa, bg[2], bg[3]);
          mma_bf16(hc[2 * np], ya, bd[0], bd[1]);
          mma_bf16(hc[2 * np + 1], ya, bd[2], bd[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int q = 0; q < 4; q += 2) {
          float h[2], da[2], dgv[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float sv, ds;
            dev::act_value_deriv(gc[nt][q + e], ACT, sv, ds);
            const float av = ac[nt][q + e], dh = hc[nt][q + e];
            h[e] = av * sv;
            da[e] = dh * sv;
            dgv[e] = dh * av * ds;
          }
          const int o = (wr * 16 + c_row(lane, q)) * LU + wu * 32 + c_col(lane, nt, q);
          *reinterpret_cast<uint32_t*>(Hs + o) = pack_bf16(h[0], h[1]);
          *reinterpret_cast<uint32_t*>(dAs + o) = pack_bf16(da[0], da[1]);
          *reinterpret_cast<uint32_t*>(dGs + o) = pack_bf16(dgv[0], dgv[1]);
        }
    }
    mma::cp_async_wait_all();  // tile it + 1
    __syncthreads();           // h, da, dg of tile it and the x, dy of tile it + 1 complete
    if (rt + 2 < rt1) stage(sb == 0 ? 2 : sb - 1, rt + 2);  // (it + 2) % 3
    mma::cp_async_commit();
#pragma unroll
    for (int ks = 0; ks < BT / 16; ++ks) {
      uint32_t aa[4], ga[4];
      load_a_trans(aa, dAs, LU, wm * 16, ks * 16, lane);  // daᵀ: units x rows
      load_a_trans(ga, dGs, LU, wm * 16, ks * 16, lane);
#pragma unroll
      for (int fp = 0; fp < DK / 32; ++fp) {
        uint32_t b[4];
        load_b_kn(b, Xs, LK, wn * (DK / 2) + fp * 16, ks * 16, lane);  // x: rows x features
        mma_bf16(du[2 * fp], aa, b[0], b[1]);
        mma_bf16(du[2 * fp + 1], aa, b[2], b[3]);
        mma_bf16(dg[2 * fp], ga, b[0], b[1]);
        mma_bf16(dg[2 * fp + 1], ga, b[2], b[3]);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t ya[4];
        load_a_trans(ya, dYs, LK, wm * 16 * MT + mt * 16, ks * 16, lane);  // dyᵀ: features x rows
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t b[4];
          load_b_kn(b, Hs, LU, wn * 32 + np * 16, ks * 16, lane);  // h: rows x units
          mma_bf16(dd[mt][2 * np], ya, b[0], b[1]);
          mma_bf16(dd[mt][2 * np + 1], ya, b[2], b[3]);
        }
      }
    }
  }
  float* part = a.gpart + static_cast<long long>(blockIdx.y) * a.part_stride;
#pragma unroll
  for (int fn = 0; fn < DK / 16; ++fn)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int j = j0 + wm * 16 + c_row(lane, q), k = wn * (DK / 2) + c_col(lane, fn, q);
      if (j < a.m && k < a.d_in) {
        part[a.off.U + static_cast<long long>(j) * a.d_in + k] = du[fn][q];
        part[a.off.G + static_cast<long long>(j) * a.d_in + k] = dg[fn][q];
      }
    }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int c = wm * 16 * MT + mt * 16 + c_row(lane, q), j = j0 + wn * 32 + c_col(lane, nt, q);
        if (c < a.d_out && j < a.m) part[a.off.D + static_cast<long long>(c) * a.m + j] = dd[mt][nt][q];
      }
}

// ---- cross-entropy over the value logits z = y Vᵀ ------------------------------------------------------------
// What both CE kernels read: y [N][d] (float), the bf16 values Vb [P_pad][DK], the targets, the value split.
struct CeRows {
  const float* y;
  const bf16* V;
  const std::int32_t* targets;
  long long N, P;
  int d;
  int value_tiles;  // P_pad / 64
  int chunk_tiles;  // value tiles per split
  const TrainState* gate;
  const bf16* V_lo = nullptr;  // split operands (bf16x3): V = V (hi) + V_lo, same layout
};

struct CeArgs {
  CeStats<float> st;
  CeRows r;
  bool at_record_epochs;
};

// S: split operands (bf16x3): the V_lo tiles follow the V tiles in shared memory, two buffers each.
template <int DK, bool S = false>
constexpr std::size_t ce_smem() {
  return sizeof(bf16) * (S ? 4 : 2) * std::size_t(BT) * ld_of<DK>();
}

// The value tiles of a CE block, double buffered: waits for tile pt (issued one iteration earlier), then issues
// tile pt + 1 into the other buffer (free: every warp passed the barrier after its last use) and returns tile pt.
// With Vlo (split operands) its tiles go 2 buffers further on, in the same commit group.
template <int DK>
__device__ __forceinline__ const bf16* next_value_tile(bf16* Vs0, const bf16* V, int pt, int it, int pt1, int p_pad,
                                                       int tid, const bf16* Vlo = nullptr) {
  constexpr int LK = ld_of<DK>();
  mma::cp_async_wait_all();
  __syncthreads();
  if (pt + 1 < pt1) {
    load_tile<BT, DK>(Vs0 + ((it + 1) & 1) * BT * LK, V, (pt + 1) * BT, p_pad, tid, kCeThreads);
    if (Vlo) load_tile<BT, DK>(Vs0 + (2 + ((it + 1) & 1)) * BT * LK, Vlo, (pt + 1) * BT, p_pad, tid, kCeThreads);
  }
  mma::cp_async_commit();
  return Vs0 + (it & 1) * BT * LK;
}

__device__ __forceinline__ void zero_tile(float (&s)[8][4]) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int q = 0; q < 4; ++q) s[nt][q] = 0.f;
}

// One split-operand product step on two n-tiles (c0: b[0..1], c1: b[2..3]): c += a_hi b_lo + a_lo b_hi + a_hi b_hi,
// the small terms first, fp32 accumulation (the a_lo b_lo term is dropped).
__device__ __forceinline__ void mma_split(float (&c0)[4], float (&c1)[4], const uint32_t (&ah)[4],
                                          const uint32_t (&al)[4], const uint32_t (&bh)[4], const uint32_t (&bl)[4]) {
  mma_bf16(c0, ah, bl[0], bl[1]);
  mma_bf16(c1, ah, bl[2], bl[3]);
  mma_bf16(c0, al, bh[0], bh[1]);
  mma_bf16(c1, al, bh[2], bh[3]);
  mma_bf16(c0, ah, bh[0], bh[1]);
  mma_bf16(c1, ah, bh[2], bh[3]);
}

// s = the warp's 16 rows (A fragments ya) times the 64 values of the tile Vs: z = y Vᵀ, C layout. S (split operands,
// bf16x3): yl holds y's residual fragments and Vl the V_lo tile, and z = y_hi V_lo + y_lo V_hi + y_hi V_hi.
template <int DK, bool S = false>
__device__ __forceinline__ void logits_tile(float (&s)[8][4], const uint32_t (&ya)[DK / 16][4],
                                            const uint32_t (*yl)[4], const bf16* Vs, const bf16* Vl, int lane) {
  zero_tile(s);
#pragma unroll
  for (int ks = 0; ks < DK / 16; ++ks)
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];
      load_b_nk(b, Vs, ld_of<DK>(), np * 16, ks * 16, lane);
      if constexpr (S) {
        uint32_t bl[4];
        load_b_nk(bl, Vl, ld_of<DK>(), np * 16, ks * 16, lane);
        mma_split(s[2 * np], s[2 * np + 1], ya[ks], yl[ks], b, bl);
      } else {
        mma_bf16(s[2 * np], ya[ks], b[0], b[1]);
        mma_bf16(s[2 * np + 1], ya[ks], b[2], b[3]);
      }
    }
}

// This lane's max of row h (0: g, 1: g + 8) over its columns of the logit tile s (values p0.., masked past P) and
// the first index holding it (strict >: the first index wins a tie; NaN and -inf never win: ti = -1 if nothing
// does); the lane holding the target column records its logit in zt[row].
__device__ __forceinline__ void lane_row_max(const float (&s)[8][4], int h, int p0, bool full, long long P, int tg,
                                             float* zt, long long row, int lane, float& tm, int& ti) {
  tm = -INFINITY;
  ti = -1;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int p = p0 + c_col(lane, nt, 2 * h + e);
      const float z = s[nt][2 * h + e];
      if (full || p < P) {
        if (p == tg) zt[row] = z;
        if (z > tm) {
          tm = z;
          ti = p;
        }
      }
    }
}

// What both CE kernels set up per block: the warp's two rows per lane (g, g + 8), their targets and the y rows'
// A fragments, the split's value tiles [pt0, pt1) with the first one in flight, and the tile-by-tile staging.
// The first value tile and the targets (fixed inputs) are read before pdl_wait, y after.
// S (split operands, bf16x3): ya holds y's hi fragments and yl its residual's, and the V_lo tiles are staged too.
template <int DK, bool S = false>
struct CeBlock {
  bf16* Vs0;
  int tid, lane, pt0, pt1, p_pad;
  long long rows[2];
  int tg[2];
  uint32_t ya[DK / 16][4];
  uint32_t yl[S ? DK / 16 : 1][4];
  __device__ __forceinline__ CeBlock(const CeRows& c, unsigned char* smem) {
    Vs0 = reinterpret_cast<bf16*>(smem);
    tid = threadIdx.x;
    lane = tid & 31;
    const long long r0 = static_cast<long long>(blockIdx.x) * BT + (tid >> 5) * 16;
    rows[0] = r0 + (lane >> 2);
    rows[1] = rows[0] + 8;
    pt0 = blockIdx.y * c.chunk_tiles;
    pt1 = min(c.value_tiles, pt0 + c.chunk_tiles);
    p_pad = c.value_tiles * BT;
    if (pt0 < pt1) {  // the first value tile
      load_tile<BT, DK>(Vs0, c.V, pt0 * BT, p_pad, tid, kCeThreads);
      if constexpr (S) load_tile<BT, DK>(Vs0 + 2 * BT * ld_of<DK>(), c.V_lo, pt0 * BT, p_pad, tid, kCeThreads);
    }
    mma::cp_async_commit();
    tg[0] = rows[0] < c.N ? c.targets[rows[0]] : -1;
    tg[1] = rows[1] < c.N ? c.targets[rows[1]] : -1;
    pdl_wait();
    if constexpr (S)
      rows_to_a_split<DK>(ya, yl, c.y, c.N, c.d, r0, lane);
    else
      rows_to_a<DK>(ya, c.y, c.N, c.d, r0, lane);
  }
  // Tile pt (the it-th of the block), with tile pt + 1 issued behind it; with S its V_lo tile is 2 buffers on.
  __device__ __forceinline__ const bf16* tile(int pt, int it, const CeRows& c) {
    return next_value_tile<DK>(Vs0, c.V, pt, it, pt1, p_pad, tid, S ? c.V_lo : nullptr);
  }
};

// Merge two (max, others, argmax) partials of one row; the larger max wins, equal maxima keep the smaller index.
__device__ __forceinline__ void ce_merge_sym(float& m, double& o, int& i, float m2, double o2, int i2) {
  if (i2 < 0) return;
  if (i < 0) {
    m = m2;
    o = o2;
    i = i2;
    return;
  }
  if (m2 > m || (m2 == m && i2 < i)) {
    o = o2 + (o + 1.0) * static_cast<double>(__expf(m - m2));
    m = m2;
    i = i2;
  } else {
    o = o + (o2 + 1.0) * static_cast<double>(__expf(m2 - m));
  }
}

// The stats of softmax_ce_stats_fused (the MSE trainer's accuracy at recorded epochs): per split and row the max,
// its first index and Σ_{j≠argmax} exp(z_j − max), and the target logit.
template <int DK>
__global__ void __launch_bounds__(kCeThreads) ce_stats_kernel(CeArgs a) {
  pdl_launch_dependents();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  CeBlock<DK> b(a.r, smem_raw);
  if (a.at_record_epochs ? !dev::record_epoch(a.r.gate) : !dev::step_active(a.r.gate)) {
    mma::cp_async_wait_all();
    return;
  }
  const int lane = b.lane;
  const long long(&rows)[2] = b.rows;
  const int(&tg)[2] = b.tg;
  float rm[2] = {-INFINITY, -INFINITY};
  double ro[2] = {0.0, 0.0};
  int ri[2] = {-1, -1};

  for (int pt = b.pt0, it = 0; pt < b.pt1; ++pt, ++it) {
    const bf16* Vs = b.tile(pt, it, a.r);
    float s[8][4];
    logits_tile<DK>(s, b.ya, nullptr, Vs, nullptr, lane);
    const int p0 = pt * BT;
    const bool full = p0 + BT <= a.r.P;  // every column of the tile is a value (all but the last tile)
    // Running (max, Σ_{j≠argmax} exp(z_j − max), argmax) per row over this thread's columns; a NaN logit never
    // wins the max and makes the sum NaN, which the combine reports as a non-finite loss.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tm;
      int ti;
      lane_row_max(s, h, p0, full, a.r.P, tg[h], a.st.zt, rows[h], lane, tm, ti);
      if (ti >= 0 && (ri[h] < 0 || tm > rm[h])) {
        ro[h] = ri[h] < 0 ? 0.0 : (ro[h] + 1.0) * static_cast<double>(__expf(rm[h] - tm));
        rm[h] = tm;
        ri[h] = ti;
      }
      float so = 0.f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int p = p0 + c_col(lane, nt, 2 * h + e);
          if ((full || p < a.r.P) && p != ri[h]) so += __expf(s[nt][2 * h + e] - rm[h]);
        }
      ro[h] += static_cast<double>(so);
    }
  }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int o = 1; o <= 2; o <<= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, rm[h], o);
        const double o2 = __shfl_xor_sync(0xffffffffu, ro[h], o);
        const int i2 = __shfl_xor_sync(0xffffffffu, ri[h], o);
        ce_merge_sym(rm[h], ro[h], ri[h], m2, o2, i2);
      }
      if ((lane & 3) == 0 && rows[h] < a.r.N) {
        const long long k = static_cast<long long>(blockIdx.y) * a.r.N + rows[h];
        a.st.max[k] = rm[h];
        a.st.others[k] = ro[h];
        a.st.arg[k] = ri[h];
      }
    }
}

// ---- one-pass cross-entropy (nn_gd_bf16.cuh) ------------------------------------------------------------------
struct OnePassArgs {
  CeOnePass st;
  CeRows r;
};

// At d ≤ 64 three blocks per SM (144 registers, no spills; 202 unbounded: two blocks). S: split operands (bf16x3:
// the logits and the numerator products from hi / lo parts in three passes each; its occupancy bound is a guess
// of the thirty-sixth session, not measured).
template <int DK, bool S = false>
__global__ void __launch_bounds__(kCeThreads, DK == 64 ? (S ? 2 : 3) : 1) ce_onepass_kernel(OnePassArgs a) {
  pdl_launch_dependents();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  CeBlock<DK, S> b(a.r, smem_raw);
  if (!dev::step_active(a.r.gate)) {
    mma::cp_async_wait_all();
    return;
  }
  const int lane = b.lane;
  const long long(&rows)[2] = b.rows;
  const int(&tg)[2] = b.tg;
  float rm[2] = {-INFINITY, -INFINITY};  // running row max (the same in the 4 lanes of a row)
  int ri[2] = {-1, -1};
  double rl[2] = {0.0, 0.0};  // this lane's share of Σ_{p≠t} exp(z_p − rm)
  float num[DK / 8][4] = {};

  for (int pt = b.pt0, it = 0; pt < b.pt1; ++pt, ++it) {
    const bf16* Vs = b.tile(pt, it, a.r);
    [[maybe_unused]] const bf16* Vl = Vs + 2 * BT * ld_of<DK>();  // the V_lo tile (S only)
    float s[8][4];
    logits_tile<DK, S>(s, b.ya, b.yl, Vs, Vl, lane);
    const int p0 = pt * BT;
    if (p0 + BT > a.r.P) {  // the last tile: columns past P never win and weigh nothing
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (p0 + c_col(lane, nt, q) >= a.r.P) s[nt][q] = -INFINITY;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // The row's tile max: the lane's 16 values by a tree, then the row's 4 lanes (fmaxf: NaN never wins).
      float t8[8];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) t8[nt] = fmaxf(s[nt][2 * h], s[nt][2 * h + 1]);
      float tm = fmaxf(fmaxf(fmaxf(t8[0], t8[1]), fmaxf(t8[2], t8[3])),
                       fmaxf(fmaxf(t8[4], t8[5]), fmaxf(t8[6], t8[7])));
      tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
      tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
      const unsigned quad = 0xfu << (lane & ~3);  // the row's 4 lanes: the branches below are uniform over them
      if (tm > rm[h]) {  // a new running max (strict: an earlier tile keeps a tie); its first column is the argmax
        int ti = 0x7fffffff;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (s[nt][2 * h + e] == tm) ti = min(ti, p0 + c_col(lane, nt, 2 * h + e));
        ti = min(ti, __shfl_xor_sync(quad, ti, 1));
        ti = min(ti, __shfl_xor_sync(quad, ti, 2));
        const float f = ri[h] < 0 ? 0.f : __expf(rm[h] - tm);
        rl[h] *= static_cast<double>(f);
#pragma unroll
        for (int nt = 0; nt < DK / 8; ++nt) {
          num[nt][2 * h] *= f;
          num[nt][2 * h + 1] *= f;
        }
        rm[h] = tm;
        ri[h] = ti;
      }
      // The target's tile: its lane records the logit, and the target's weight is left out of the sums below.
      const int tcol = tg[h] - p0;
      const bool holds_t = tcol >= 0 && tcol < BT && (lane & 3) == ((tcol & 7) >> 1);
      auto at_target = [&](auto&& f) {  // f(the target's entry of s), in the lane holding it
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (nt * 8 + 2 * (lane & 3) + e == tcol) f(s[nt][2 * h + e]);
      };
      if (holds_t) at_target([&](float& z) { a.st.zt[rows[h]] = z; });
      const float base = rm[h] == -INFINITY ? 0.f : rm[h];  // no finite logit yet: every weight 0 (or NaN)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) s[nt][2 * h + e] = __expf(s[nt][2 * h + e] - base);
      if (holds_t) at_target([](float& w) { w = 0.f; });
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) t8[nt] = s[nt][2 * h] + s[nt][2 * h + 1];
      rl[h] += static_cast<double>(((t8[0] + t8[1]) + (t8[2] + t8[3])) + ((t8[4] + t8[5]) + (t8[6] + t8[7])));
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t wa[4];
      if constexpr (S) {  // w V = w_hi V_lo + w_lo V_hi + w_hi V_hi
        uint32_t wl[4];
        c_to_a_split(wa, wl, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int cp = 0; cp < DK / 16; ++cp) {
          uint32_t b[4], bl[4];
          load_b_kn(b, Vs, ld_of<DK>(), cp * 16, kk * 16, lane);
          load_b_kn(bl, Vl, ld_of<DK>(), cp * 16, kk * 16, lane);
          mma_split(num[2 * cp], num[2 * cp + 1], wa, wl, b, bl);
        }
      } else {
        c_to_a(wa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int cp = 0; cp < DK / 16; ++cp) {
          uint32_t b[4];
          load_b_kn(b, Vs, ld_of<DK>(), cp * 16, kk * 16, lane);  // V: values x features
          mma_bf16(num[2 * cp], wa, b[0], b[1]);
          mma_bf16(num[2 * cp + 1], wa, b[2], b[3]);
        }
      }
    }
  }
  const long long n = a.r.N;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    rl[h] += __shfl_xor_sync(0xffffffffu, rl[h], 1);
    rl[h] += __shfl_xor_sync(0xffffffffu, rl[h], 2);
    if ((lane & 3) == 0 && rows[h] < n) {
      const long long k = static_cast<long long>(blockIdx.y) * n + rows[h];
      a.st.max[k] = rm[h];
      a.st.rest[k] = rl[h];
      a.st.arg[k] = ri[h];
    }
  }
  float* out = a.st.num + static_cast<long long>(blockIdx.y) * n * a.r.d;
#pragma unroll
  for (int nt = 0; nt < DK / 8; ++nt)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const long long r = rows[q >> 1];
      const int c = c_col(lane, nt, q);
      if (r < n && c < a.r.d) out[r * a.r.d + c] = num[nt][q];
    }
}

constexpr int kFinishThreads = 256, kFinishRows = kFinishThreads / 8;  // 8 lanes a row

// This lane's CW columns c0.. of one split's numerator row ns (zero past d): 16-byte loads where aligned.
template <int CW>
__device__ __forceinline__ void load_num(float (&v)[CW], const float* __restrict__ ns, int c0, int d) {
  if ((d & 3) == 0 && c0 + CW <= d) {
#pragma unroll
    for (int j = 0; j < CW; j += 4) {
      const float4 q = __ldcg(reinterpret_cast<const float4*>(ns + c0 + j));
      v[j] = q.x;
      v[j + 1] = q.y;
      v[j + 2] = q.z;
      v[j + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < CW; ++j) v[j] = c0 + j < d ? __ldcg(ns + c0 + j) : 0.f;
  }
}

// F32OUT (precision bf16x3): dy goes to dyf [N][d] in float, with the target's value row from the float table Vf
// [P][d]; else to the padded bf16 copy dyb with V's bf16 row (Vf, dyf unused).
template <int DK, bool F32OUT = false>
__global__ void __launch_bounds__(kFinishThreads)
    ce_finish_kernel(CeOnePass st, int splits, const bf16* __restrict__ V, const std::int32_t* __restrict__ targets,
                     long long N, int d, double scale, bf16* __restrict__ dyb, TrainState* state, double* hist_loss,
                     long long* hist_correct, const float* __restrict__ Vf, float* __restrict__ dyf) {
  pdl_launch_dependents();
  pdl_wait();
  if (!dev::step_active(state)) return;
  __shared__ double s_sum[32];
  constexpr int CW = DK / 8;  // columns per lane
  const int tid = threadIdx.x, l8 = tid & 7, c0 = l8 * CW;
  const long long i = static_cast<long long>(blockIdx.x) * kFinishRows + (tid >> 3);
  double loss = 0.0, correct = 0.0;
  float out[CW];
#pragma unroll
  for (int j = 0; j < CW; ++j) out[j] = 0.f;
  if (i < N) {
    // One pass over the splits in value order with a running max (smallest index on ties: a later split wins
    // only with a larger max); unrolled, so the loads of 4 splits go out before the first merge.
    float m = -INFINITY;
    int arg = -1;
    double rest = 0.0;
    float acc[CW];
#pragma unroll
    for (int j = 0; j < CW; ++j) acc[j] = 0.f;
#pragma unroll 4
    for (int s = 0; s < splits; ++s) {
      const long long k = static_cast<long long>(s) * N + i;
      const int as = __ldcg(st.arg + k);
      const float ms = __ldcg(st.max + k);
      const double rs = __ldcg(st.rest + k);
      float ns[CW];
      load_num<CW>(ns, st.num + k * d, c0, d);
      if (as < 0) continue;  // an empty split (no finite logit) holds nothing
      if (arg < 0 || ms > m) {
        const float f = arg < 0 ? 0.f : __expf(m - ms);
        rest *= static_cast<double>(f);
#pragma unroll
        for (int j = 0; j < CW; ++j) acc[j] *= f;
        m = ms;
        arg = as;
      }
      const float f = __expf(ms - m);
      rest += rs * static_cast<double>(f);
#pragma unroll
      for (int j = 0; j < CW; ++j) acc[j] += f * ns[j];
    }
    const int t = targets[i];
    const double wt = exp(static_cast<double>(st.zt[i]) - static_cast<double>(m));
    loss = arg < 0 ? static_cast<double>(NAN) : log1p(rest / wt);
    correct = (l8 == 0 && arg == t) ? 1.0 : 0.0;
    const double inv = scale / (wt + rest);
#pragma unroll
    for (int j = 0; j < CW; ++j)
      if (c0 + j < d) {
        const double vtc = F32OUT ? static_cast<double>(Vf[static_cast<long long>(t) * d + c0 + j])
                                  : static_cast<double>(__bfloat162float(V[static_cast<long long>(t) * DK + c0 + j]));
        out[j] = static_cast<float>((static_cast<double>(acc[j]) - rest * vtc) * inv);
      }
    if (l8 != 0) loss = 0.0;
    if constexpr (F32OUT)
#pragma unroll
      for (int j = 0; j < CW; ++j)
        if (c0 + j < d) dyf[i * d + c0 + j] = out[j];
  }
  if (!F32OUT && i < static_cast<long long>(gridDim.x) * kFinishRows) {  // every row of the padded copy, pads zero
#pragma unroll
    for (int j = 0; j < CW; j += 8) {
      float v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = out[j + u];
      store8(dyb + i * DK + c0 + j, v);
    }
  }
  dev::record_block_totals(loss, correct, st.block_part, N, state, hist_loss, hist_correct, false, s_sum);
}

// ---- host side --------------------------------------------------------------------------------------------
// Every kernel of this file that a training step runs is launched with programmatic dependent launch (pdl.cuh).
template <class Args>
void launch(void (*kern)(Args), std::size_t smem, unsigned gx, unsigned gy, int threads, const Args& a,
            cudaStream_t stream, const char* name) {
  pdl::launch_pdl(kern, dim3(gx, gy), dim3(threads), smem, stream, name, a);
}

template <class Args>
int occupancy(void (*kern)(Args), std::size_t smem, int threads) {
  ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
  int n = 0;
  MEMCAP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, threads, smem));
  return std::max(n, 1);
}

// f(std::integral_constant<int, DK>, std::integral_constant<int, ACT>)
template <class F>
void with_dk_act(int dk, int act, F&& f) {
  auto by_act = [&](auto dkc) {
    if (act == dev::kAct_relu) return f(dkc, std::integral_constant<int, dev::kAct_relu>{});
    if (act == dev::kAct_silu) return f(dkc, std::integral_constant<int, dev::kAct_silu>{});
    return f(dkc, std::integral_constant<int, dev::kAct_identity>{});
  };
  if (dk == 64) return by_act(std::integral_constant<int, 64>{});
  return by_act(std::integral_constant<int, 128>{});
}

void check_mlp(const GatedMlpShape& s, const char* what) {
  if (s.N < 1 || s.m < 1 || !fused_mlp_supported(s.d_in, s.d_out) || bf16_pad_rows(s.N) / kBf16Tile > 2147483647LL ||
      bf16_pad_rows(s.m) * kFusedMaxDim >= (1LL << 31))
    cuda_detail::throw_user_error(std::string(what) + ": shape outside the bf16 kernels' range (N = " +
                                  std::to_string(s.N) + ", m = " + std::to_string(s.m) + ", d_in = " +
                                  std::to_string(s.d_in) + ", d_out = " + std::to_string(s.d_out) +
                                  "; need N, m >= 1 and 1 <= d <= 128)");
}

void check_ce(std::int64_t N, std::int64_t P, std::int64_t d, int splits, const char* what) {
  if (N < 1 || P < 1 || d < 1 || d > kFusedMaxDim || bf16_pad_rows(N) / kBf16Tile > 2147483647LL ||
      bf16_pad_rows(P) > 2147483647LL)
    cuda_detail::throw_user_error(std::string(what) + ": shape outside the bf16 kernels' range (N = " +
                                  std::to_string(N) + ", P = " + std::to_string(P) + ", d = " + std::to_string(d) +
                                  "; need N, P >= 1 and 1 <= d <= 128)");
  if (splits < 1 || splits > bf16_pad_rows(P) / kBf16Tile)
    cuda_detail::throw_user_error(std::string(what) + ": splits must be in [1, ceil(P / 64)]");
}

void ce_launch(const CeArgs& a, int dk, unsigned gx, unsigned gy, cudaStream_t stream) {
  if (dk == 64)
    return launch(ce_stats_kernel<64>, ce_smem<64>(), gx, gy, kCeThreads, a, stream, "launch of ce_stats_kernel");
  launch(ce_stats_kernel<128>, ce_smem<128>(), gx, gy, kCeThreads, a, stream, "launch of ce_stats_kernel");
}

}  // namespace

namespace {
int dk8_shift(int dk) { return dk == 64 ? 3 : 4; }
}  // namespace

void sum_rows_to_bf16(bf16* dst, const float* parts, int nparts, std::int64_t N, std::int64_t d, int dk,
                      const TrainState* gate, cudaStream_t stream) {
  if (N < 1 || d < 1 || d > dk || nparts < 1 || (dk != 64 && dk != 128) || bf16_pad_rows(N) * dk >= (1LL << 31))
    cuda_detail::throw_user_error("sum_rows_to_bf16: need N, d, nparts >= 1, d <= dk in {64, 128} and N·dk < 2^31");
  const std::int64_t total8 = bf16_pad_rows(N) * dk / 8;
  sum_rows_bf16_kernel<<<dev::elem_blocks(total8), dev::kElemThreads, 0, stream>>>(
      dst, parts, nparts, static_cast<int>(N), static_cast<int>(d), dk8_shift(dk), static_cast<int>(total8), gate);
  MEMCAP_CUDA_CHECK_LAUNCH("sum_rows_bf16_kernel");
}

void gated_mlp_weights_bf16(bf16* Ub, bf16* Gb, bf16* Db, const float* U, const float* G, const float* D,
                            const GatedMlpShape& s, const TrainState* gate, cudaStream_t stream) {
  check_mlp(s, "gated_mlp_weights_bf16");
  const int dk = bf16_dk(std::max(s.d_in, s.d_out));
  const std::int64_t total8 = bf16_pad_rows(s.m) * dk / 8;
  weights_bf16_kernel<<<dev::elem_blocks(total8), dev::kElemThreads, 0, stream>>>(
      Ub, Gb, Db, U, G, D, static_cast<int>(s.m), static_cast<int>(s.d_in), static_cast<int>(s.d_out), dk8_shift(dk),
      static_cast<int>(total8), gate);
  MEMCAP_CUDA_CHECK_LAUNCH("weights_bf16_kernel");
}

std::int64_t gd_bf16_forward_rows(std::int64_t d) { return bf16_dk(d) == 64 ? 4 * 16 * fwd_mtiles<64>() : 64; }

int gd_bf16_blocks_per_sm(int which, std::int64_t d) {
  int n = 1;
  with_dk_act(bf16_dk(d), dev::kAct_identity, [&](auto dkc, auto actc) {
    constexpr int DK = decltype(dkc)::value, ACT = decltype(actc)::value;
    if (which == 0) n = occupancy(fwd_kernel<DK, ACT>, fwd_smem<DK>(), kFwdThreads);
    else if (which == 1) n = occupancy(bwd_kernel<DK, ACT>, bwd_smem<DK>(), kBwdThreads);
    else if (which == 2) n = occupancy(ce_stats_kernel<DK>, ce_smem<DK>(), kCeThreads);
    else if (which == 3) n = occupancy(ce_onepass_kernel<DK>, ce_smem<DK>(), kCeThreads);
    else n = occupancy(ce_onepass_kernel<DK, true>, ce_smem<DK, true>(), kCeThreads);
  });
  return n;
}

void gated_mlp_forward_bf16(float* y_part, int splits, const bf16* Xb, const bf16* Ub, const bf16* Gb, const bf16* Db,
                            const GatedMlpShape& s, const TrainState* gate, cudaStream_t stream) {
  check_mlp(s, "gated_mlp_forward_bf16");
  const std::int64_t unit_tiles = bf16_pad_rows(s.m) / kBf16Tile;
  const std::int64_t fr = gd_bf16_forward_rows(std::max(s.d_in, s.d_out)), row_tiles = (s.N + fr - 1) / fr;
  if (splits < 1 || splits > unit_tiles)
    cuda_detail::throw_user_error("gated_mlp_forward_bf16: splits must be in [1, ceil(m / 64)]");
  const std::int64_t per = (unit_tiles + splits - 1) / splits;
  FwdArgs a{y_part, Xb, Ub, Gb, Db, s.N, static_cast<int>(s.d_out), static_cast<int>(unit_tiles),
            static_cast<int>(per), gate};
  with_dk_act(bf16_dk(std::max(s.d_in, s.d_out)), static_cast<int>(s.act), [&](auto dkc, auto actc) {
    constexpr int DK = decltype(dkc)::value, ACT = decltype(actc)::value;
    launch(fwd_kernel<DK, ACT>, fwd_smem<DK>(), static_cast<unsigned>(row_tiles), static_cast<unsigned>(splits),
           kFwdThreads, a, stream, "launch of fwd_kernel (bf16)");
  });
}

void gated_mlp_backward_bf16(float* grad_part, std::int64_t part_stride, int row_splits, const GatedMlpGradOffsets& off,
                             const bf16* Xb, const bf16* dYb, const bf16* Ub, const bf16* Gb, const bf16* Db,
                             const GatedMlpShape& s, const TrainState* gate, cudaStream_t stream) {
  check_mlp(s, "gated_mlp_backward_bf16");
  const std::int64_t unit_tiles = bf16_pad_rows(s.m) / kBf16Tile, row_tiles = bf16_pad_rows(s.N) / kBf16Tile;
  if (row_splits < 1 || row_splits > row_tiles)
    cuda_detail::throw_user_error("gated_mlp_backward_bf16: row_splits must be in [1, ceil(N / 64)]");
  const std::int64_t per = (row_tiles + row_splits - 1) / row_splits;
  BwdArgs a{grad_part, part_stride, off, Xb, dYb, Ub, Gb, Db, static_cast<int>(s.m), static_cast<int>(s.d_in),
            static_cast<int>(s.d_out), static_cast<int>(row_tiles), static_cast<int>(per), gate};
  with_dk_act(bf16_dk(std::max(s.d_in, s.d_out)), static_cast<int>(s.act), [&](auto dkc, auto actc) {
    constexpr int DK = decltype(dkc)::value, ACT = decltype(actc)::value;
    launch(bwd_kernel<DK, ACT>, bwd_smem<DK>(), static_cast<unsigned>(unit_tiles), static_cast<unsigned>(row_splits),
           kBwdThreads, a, stream, "launch of bwd_kernel (bf16)");
  });
}

void softmax_ce_stats_bf16(const CeStats<float>& st, int splits, const float* y, const bf16* Vb,
                           const std::int32_t* targets, std::int64_t N, std::int64_t P, std::int64_t d,
                           const TrainState* gate, bool at_record_epochs, cudaStream_t stream) {
  check_ce(N, P, d, splits, "softmax_ce_stats_bf16");
  const std::int64_t vt = bf16_pad_rows(P) / kBf16Tile, per = (vt + splits - 1) / splits;
  CeArgs a{st,
           CeRows{y, Vb, targets, N, P, static_cast<int>(d), static_cast<int>(vt), static_cast<int>(per), gate},
           at_record_epochs};
  ce_launch(a, bf16_dk(d), static_cast<unsigned>(bf16_pad_rows(N) / kBf16Tile), static_cast<unsigned>(splits),
            stream);
}


std::int64_t ce_finish_blocks(std::int64_t N) { return bf16_pad_rows(N) / kFinishRows; }

void softmax_ce_partials_bf16(const CeOnePass& st, int splits, const float* y, const bf16* Vb,
                              const std::int32_t* targets, std::int64_t N, std::int64_t P, std::int64_t d,
                              const TrainState* gate, cudaStream_t stream) {
  check_ce(N, P, d, splits, "softmax_ce_partials_bf16");
  const std::int64_t vt = bf16_pad_rows(P) / kBf16Tile, per = (vt + splits - 1) / splits;
  OnePassArgs a{st, CeRows{y, Vb, targets, N, P, static_cast<int>(d), static_cast<int>(vt),
                           static_cast<int>(per), gate}};
  const unsigned gx = static_cast<unsigned>(bf16_pad_rows(N) / kBf16Tile), gy = static_cast<unsigned>(splits);
  if (bf16_dk(d) == 64)
    launch(ce_onepass_kernel<64>, ce_smem<64>(), gx, gy, kCeThreads, a, stream, "launch of ce_onepass_kernel");
  else
    launch(ce_onepass_kernel<128>, ce_smem<128>(), gx, gy, kCeThreads, a, stream, "launch of ce_onepass_kernel");
}

void softmax_ce_finish_bf16(const CeOnePass& st, int splits, const bf16* Vb, const std::int32_t* targets,
                            std::int64_t N, std::int64_t d, double scale, bf16* dyb, TrainState* state,
                            double* hist_loss, long long* hist_correct, cudaStream_t stream) {
  if (!state || !st.block_part || N < 1 || d < 1 || d > kFusedMaxDim || splits < 1)
    cuda_detail::throw_user_error("softmax_ce_finish_bf16: needs a TrainState, block partials, N >= 1, 1 <= d <= 128");
  const dim3 blocks(static_cast<unsigned>(ce_finish_blocks(N)));
  pdl::launch_pdl(bf16_dk(d) == 64 ? ce_finish_kernel<64> : ce_finish_kernel<128>, blocks, dim3(kFinishThreads), 0,
                  stream, "launch of ce_finish_kernel", st, splits, Vb, targets, static_cast<long long>(N),
                  static_cast<int>(d), scale, dyb, state, hist_loss, hist_correct, static_cast<const float*>(nullptr),
                  static_cast<float*>(nullptr));
}

void split_rows_to_bf16(bf16* hi, bf16* lo, const float* x, std::int64_t N, std::int64_t d, int dk,
                        cudaStream_t stream) {
  if (N < 1 || d < 1 || d > dk || (dk != 64 && dk != 128) || bf16_pad_rows(N) * dk >= (1LL << 31))
    cuda_detail::throw_user_error("split_rows_to_bf16: need N, d >= 1, d <= dk in {64, 128} and N·dk < 2^31");
  const std::int64_t total8 = bf16_pad_rows(N) * dk / 8;
  split_rows_bf16_kernel<<<dev::elem_blocks(total8), dev::kElemThreads, 0, stream>>>(
      hi, lo, x, static_cast<int>(N), static_cast<int>(d), dk8_shift(dk), static_cast<int>(total8));
  MEMCAP_CUDA_CHECK_LAUNCH("split_rows_bf16_kernel");
}

void softmax_ce_partials_bf16x3(const CeOnePass& st, int splits, const float* y, const bf16* Vb_hi,
                                const bf16* Vb_lo, const std::int32_t* targets, std::int64_t N, std::int64_t P,
                                std::int64_t d, const TrainState* gate, cudaStream_t stream) {
  check_ce(N, P, d, splits, "softmax_ce_partials_bf16x3");
  if (!Vb_hi || !Vb_lo) cuda_detail::throw_user_error("softmax_ce_partials_bf16x3 needs both value planes");
  const std::int64_t vt = bf16_pad_rows(P) / kBf16Tile, per = (vt + splits - 1) / splits;
  OnePassArgs a{st, CeRows{y, Vb_hi, targets, N, P, static_cast<int>(d), static_cast<int>(vt),
                           static_cast<int>(per), gate, Vb_lo}};
  const unsigned gx = static_cast<unsigned>(bf16_pad_rows(N) / kBf16Tile), gy = static_cast<unsigned>(splits);
  if (bf16_dk(d) == 64)
    launch(ce_onepass_kernel<64, true>, ce_smem<64, true>(), gx, gy, kCeThreads, a, stream,
           "launch of ce_onepass_kernel (bf16x3)");
  else
    launch(ce_onepass_kernel<128, true>, ce_smem<128, true>(), gx, gy, kCeThreads, a, stream,
           "launch of ce_onepass_kernel (bf16x3)");
}

void softmax_ce_finish_f32(const CeOnePass& st, int splits, const float* V, const std::int32_t* targets,
                           std::int64_t N, std::int64_t d, double scale, float* dy, TrainState* state,
                           double* hist_loss, long long* hist_correct, cudaStream_t stream) {
  if (!state || !st.block_part || !V || !dy || N < 1 || d < 1 || d > kFusedMaxDim || splits < 1)
    cuda_detail::throw_user_error("softmax_ce_finish_f32: needs a TrainState, block partials, V, dy, N >= 1, "
                                  "1 <= d <= 128");
  const dim3 blocks(static_cast<unsigned>(ce_finish_blocks(N)));
  pdl::launch_pdl(bf16_dk(d) == 64 ? ce_finish_kernel<64, true> : ce_finish_kernel<128, true>, blocks,
                  dim3(kFinishThreads), 0, stream, "launch of ce_finish_kernel (float dy)", st, splits, static_cast<const bf16*>(nullptr),
                  targets, static_cast<long long>(N), static_cast<int>(d), scale, static_cast<bf16*>(nullptr), state,
                  hist_loss, hist_correct, V, dy);
}

}  // namespace memcap::nn::cuda

// Hopper (sm_90a) quadratic causal KATA attention forward (spec kata.md §5.1), bf16, FlashAttention-3-style
// warp specialisation: one producer warpgroup streams 64-key K/V tiles with TMA into an mbarrier-guarded ring;
// each consumer warpgroup owns 64 query rows and overlaps, within itself, the squaring of score sub-tile j with
// the P·V wgmma of sub-tile j-1 (and, across warpgroups, everything else). Templated on the map (M_g with
// g in {1,2,4}, Σ_2, linear), the head width (d = d_v in {32, 64, 128}: tiles of DP = 64 or 128 columns in
// 64-column 128-byte-swizzled atoms; d = 32 loads 64-wide boxes whose upper half the TMA fills with zeros and
// runs only the k-steps over the 32 real columns), the consumer warpgroups NWG and the keys per sub-step BN
// (32 when the score accumulators of 64 keys would not fit: g = 4 and Σ_2). Internal to
// kernels/kata_attention_wgmma*.cu.
#pragma once
#include <cuda.h>  // CUtensorMap and its enums only; the encode function comes through the runtime
#include <cudaTypedefs.h>

#include <type_traits>

#include "cuda_check.cuh"
#include "smem_limit.cuh"
#include "kata_attention_common.cuh"
#include "kata_attention_impl.cuh"

namespace memcap::kata::cuda {
namespace ws {

constexpr int kKeys = 64;          // keys per K/V tile, = query rows per consumer warpgroup
constexpr int kAtom = 64 * 128;    // one 64 x 64 bf16 atom in the 128-byte-swizzled layout TMA writes

template <int NWG, int STAGES, int A>
struct Layout {  // byte offsets from the 1024-aligned start of dynamic shared memory; A atoms per tile
  static constexpr int q = 0;                           // NWG query tiles
  static constexpr int k = q + NWG * A * kAtom;         // STAGES key tiles
  static constexpr int v = k + STAGES * A * kAtom;      // STAGES value tiles
  static constexpr int kn = v + STAGES * A * kAtom;     // per warpgroup 2 x 64 key norms (eps only)
  static constexpr int ones = kn + NWG * 2 * kKeys * 4;  // 1 KB of bf16 ones: the row sums' B operand (PSD maps)
  static constexpr int bar = ones + 1024;                // full[STAGES], empty[STAGES], q
  static constexpr int smem = 1024 + bar + (2 * STAGES + 1) * 8;
};

#define MEMCAP_WS_D32                                                                                          \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),  \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),    \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),   \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define MEMCAP_WS_DLIST32                                                                                \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27," \
  "%28,%29,%30,%31}"
#define MEMCAP_WS_D16                                                                                          \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),  \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define MEMCAP_WS_DLIST16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define MEMCAP_WS_D8X4 \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), \
      "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), \
      "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), \
      "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), \
      "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), \
      "+f"(d[7][3])

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Shared-memory matrix descriptor for a 128B-swizzled atom: both byte offsets 1024 (8 rows of 128 B), so
// either reading of LBO/SBO gives the stride between 8-row groups.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(1024 >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}
// Element (r, c) of a tile of 64-column swizzled atoms (c < 64 * atoms).
__device__ __forceinline__ float sw128_elem(const unsigned char* tile, int r, int c) {
  const unsigned char* atom = tile + (c >> 6) * kAtom;
  const int cc = c & 63;
  return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(atom + sw128_offset(r, cc)));
}
// Descriptor offset (16-byte units) of column c (multiple of 16) in a tile of atoms, from row `row0`.
__device__ __forceinline__ uint32_t col_off(int c, int row0) {
  return static_cast<uint32_t>((c >> 6) * kAtom + row0 * 128 + (c & 63) * 2) >> 4;
}
// Register fences: keep the compiler from moving reads/writes of wgmma operands across async regions.
__device__ __forceinline__ void fence_f(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void fence_u(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }
// Shared-memory writes of the generic proxy (st.shared, cp.async) made visible to wgmma's operand reads (async
// proxy): each writing thread fences, then the block barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// D(64xN fp32) (+)= A(64x16, smem descriptor, K-major) * B(16xN, smem descriptor, K-major), N in {64, 32}.
template <int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate) {
  if constexpr (N == 64) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " MEMCAP_WS_DLIST32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : MEMCAP_WS_D32
        : "l"(da), "l"(db), "r"(accumulate));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " MEMCAP_WS_DLIST16 ", %16, %17, p, 1, 1, 0, 0;\n}\n"
        : MEMCAP_WS_D16
        : "l"(da), "l"(db), "r"(accumulate));
  }
}
// D(64x64 fp32) += A(64x16, registers) * B(16x64, smem descriptor, MN-major)
__device__ __forceinline__ void wgmma_rs_mn(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " MEMCAP_WS_DLIST32
      ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
      : MEMCAP_WS_D32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// The same with the accumulator as eight mma.sync m16n8 tiles (acc[j][e]: n-block j, the same element as d[4j+e]
// above: row 16 warp + g + 8 (e >> 1), column 8 j + 2 tq + (e & 1)), for kernels that mix the two.
__device__ __forceinline__ void wgmma_rs_mn(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " MEMCAP_WS_DLIST32
      ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
      : MEMCAP_WS_D8X4
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// D(64x8 fp32) += A(64x16, registers) * B(16x8, smem descriptor): with B all ones (plain_desc of L::ones), every
// column of D gains the row sums of A. Thread element e: row 16 warp + g + 8 (e >> 1) of the warpgroup's 64.
__device__ __forceinline__ void wgmma_rs_n8(float (&d)[4], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// Descriptor of a 16 x 8 B operand without swizzle (core matrices of 8 rows x 16 bytes, 128 and 256 bytes apart):
// for a region of at least 640 bytes that holds the same value everywhere (the ones), any element order reads it.
__device__ __forceinline__ uint64_t plain_desc(uint32_t saddr) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(128 >> 4) << 16) |
         (static_cast<uint64_t>(256 >> 4) << 32);
}
// Register fences of a k64 product's operands (acc and the four k-step A fragments): before its issue, and after
// the wait that ends it (until then the compiler must not reuse the registers wgmma reads asynchronously).
__device__ __forceinline__ void fence_operands(float (&acc)[8][4], uint32_t (&a)[4][4]) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) fence_f(acc[j][e]);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int h = 0; h < 4; ++h) fence_u(a[ks][h]);
}
// acc (64 x 64, as eight m16n8 tiles) += A · B over 64 k: A as four k-step fragments in registers, B the 64 x 64
// MN-major swizzled atom at descriptor db (k-step ks at 16 rows = 2 KB on); waited on, so on return acc is final
// and a may be rewritten.
__device__ __forceinline__ void wgmma_rs_mn_k64(float (&acc)[8][4], uint32_t (&a)[4][4], uint64_t db) {
  fence_operands(acc, a);
  wg_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) wgmma_rs_mn(acc, a[ks], db + ks * 128);
  wg_commit();
  wg_wait<0>();
  fence_operands(acc, a);
}
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_LOOP:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_LOOP;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Box {64 columns, 64 rows, 1 head} at (col, row, head) of a [BH][T][d] bf16 tensor -> smem, completing on
// `bar`; rows >= T and columns >= d arrive as zeros.
__device__ __forceinline__ void tma_load_box(uint32_t dst, const CUtensorMap* map, uint32_t bar, int col, int row,
                                             int head) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(col), "r"(row), "r"(head)
      : "memory");
}

// P from the NS score accumulators of one sub-tile (BN keys from key `key0` of the tile): Σ_a S_a² (M_g),
// c² Σ_{a,b} S_ab² (Σ_g) or S (linear), + ε terms, causal mask on the diagonal tile, packed to bf16 A fragments
// of P·V (k-step kk = keys 16kk..16kk+15 of the sub-tile); the PSD maps' row sums come from the same fragments
// on the tensor cores (wgmma_rs_n8). Accumulator layout of m64nN: element 4j+e of this thread is row
// lrow0 + 8*(e>>1), key 8j + 2tq + (e&1).
template <MapKind KIND, int NS, int BN, bool DIAG, bool EPS>
__device__ __forceinline__ void square_scores(const float (&s)[NS][BN / 2], uint32_t (&pa)[BN / 16][4],
                                              int lrow0, int tq, int key0, const float (&qn)[2],
                                              const float* kn, float c2, float eps_lin, float eps_const) {
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x;
      if constexpr (KIND == MapKind::Linear) {
        x = s[0][4 * j + e];
      } else {
        x = 0.f;
#pragma unroll
        for (int a = 0; a < NS; ++a) x = fmaf(s[a][4 * j + e], s[a][4 * j + e], x);
        if (KIND == MapKind::SumPsd) x *= c2;
      }
      const int key = key0 + 8 * j + 2 * tq + (e & 1), row = lrow0 + 8 * (e >> 1);
      if (EPS) x += eps_lin * (qn[e >> 1] + kn[key]) + eps_const;
      if (DIAG && key > row) x = 0.f;
      p[e] = x;
    }
    pa[j >> 1][(j & 1) * 2 + 0] = pack_bf16(p[0], p[1]);
    pa[j >> 1][(j & 1) * 2 + 1] = pack_bf16(p[2], p[3]);
  }
}
#endif

// Grid (query tiles of 64*NWG rows, longest first; B*H). Threads: NWG consumer warpgroups + 1 producer.
// DP: tile width (64 or 128 columns = DP/64 atoms); DK: real d = d_v (32, 64, 128).
template <MapKind KIND, int G, int DP, int DK, int NWG, int BN, int STAGES>
__global__ void __launch_bounds__(128 * (NWG + 1), 1)
    quad_ws_kernel(const __grid_constant__ CUtensorMap tmq, const __grid_constant__ CUtensorMap tmk,
                   const __grid_constant__ CUtensorMap tmv, AttnMap mp, __nv_bfloat16* __restrict__ out, int T) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int A = DP / 64;                            // atoms per tile
  constexpr int SUB = kKeys / BN;                       // sub-steps per key tile
  constexpr bool PSD = KIND != MapKind::Linear;
  constexpr int NS = KIND == MapKind::SumPsd ? G * G : (PSD ? G : 1);  // score accumulators
  constexpr int M = PSD ? DK / G : DK, KSB = M / 16;                    // block width, k-steps per block
  constexpr int TILE = A * kAtom;
  using L = Layout<NWG, STAGES, A>;
  static_assert(M % 16 == 0, "block width must be a multiple of 16");
  static_assert(STAGES >= NWG - 1, "a warpgroup past its diagonal releases no stages: the ring must cover that");
  constexpr int kProducerRegs = 24, kConsumerRegs = NWG == 3 ? 160 : 240;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* sbase = smem_raw + (base - raw);
  const uint32_t bar_full = base + L::bar, bar_empty = bar_full + 8 * STAGES, bar_q = bar_empty + 8 * STAGES;

  const int tid = threadIdx.x, wg = tid >> 7;
  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int head = static_cast<int>(blockIdx.y);
  const int q0 = qt * 64 * NWG;
  const int nkt = min(NWG * qt + NWG, (T + kKeys - 1) / kKeys);  // key tiles this CTA streams

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bar_full + 8 * s, 1);
      mbar_init(bar_empty + 8 * s, NWG * 4);  // lane 0 of every consumer warp
    }
    mbar_init(bar_q, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (PSD && tid < 64) {  // the row sums' B operand: 1 KB of bf16 ones, read by wgmma (async proxy)
    reinterpret_cast<uint4*>(sbase + L::ones)[tid] = make_uint4(0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u);
    fence_proxy_async();
  }
  __syncthreads();

  if (wg == NWG) {  // ---- producer warpgroup: one thread drives the TMA engine
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (tid == NWG * 128) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmk)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmv)) : "memory");
      mbar_expect_tx(bar_q, NWG * TILE);
#pragma unroll
      for (int w = 0; w < NWG; ++w)
#pragma unroll
        for (int a = 0; a < A; ++a) tma_load_box(base + L::q + w * TILE + a * kAtom, &tmq, bar_q, 64 * a, q0 + 64 * w, head);
      for (int j = 0; j < nkt; ++j) {
        const int s = j % STAGES;
        if (j >= STAGES) mbar_wait(bar_empty + 8 * s, ((j / STAGES) - 1) & 1);
        mbar_expect_tx(bar_full + 8 * s, 2 * TILE);
#pragma unroll
        for (int a = 0; a < A; ++a) {
          tma_load_box(base + L::k + s * TILE + a * kAtom, &tmk, bar_full + 8 * s, 64 * a, j * kKeys, head);
          tma_load_box(base + L::v + s * TILE + a * kAtom, &tmv, bar_full + 8 * s, 64 * a, j * kKeys, head);
        }
      }
    }
    return;
  }

  // ---- consumer warpgroup wg: query rows q0 + 64*wg ..
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int wwarp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int lrow0 = wwarp * 16 + g;
  const int diag = NWG * qt + wg;          // this warpgroup's diagonal key tile
  const int last = min(nkt - 1, diag);     // tiles 0..last; >= the CTA's first diagonal, see static_assert
  const int last_sub = last * SUB + SUB - 1;
  const bool use_eps = PSD && mp.eps != 0.f;
  const float c2 = mp.scale * mp.scale;
  const float eps_lin = KIND == MapKind::SumPsd ? mp.eps * mp.scale : mp.eps;
  const float eps_const = KIND == MapKind::SumPsd ? mp.eps * mp.eps * mp.m : mp.eps * mp.eps * mp.m * mp.g;
  const unsigned char* myq = sbase + L::q + wg * TILE;
  float* kn_buf = reinterpret_cast<float*>(sbase + L::kn) + wg * 2 * kKeys;
  const uint64_t dq = sw128_desc(base + L::q + wg * TILE);
  const uint64_t dk = sw128_desc(base + L::k), dv = sw128_desc(base + L::v);

  mbar_wait(bar_q, 0);
  float qn[2] = {0.f, 0.f};
  if (use_eps) {
    for (int c = tq * (DK / 4); c < (tq + 1) * (DK / 4); ++c) {
      const float x0 = sw128_elem(myq, lrow0, c), x1 = sw128_elem(myq, lrow0 + 8, c);
      qn[0] += x0 * x0;
      qn[1] += x1 * x1;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      qn[h] += __shfl_xor_sync(0xffffffffu, qn[h], 1);
      qn[h] += __shfl_xor_sync(0xffffffffu, qn[h], 2);
    }
  }

  // rs: the row sums of P (PSD maps), P · ones on the tensor cores beside P · V (every column the same sum) instead
  // of an add per score on the CUDA cores, whose squaring and packing are what separates M_g from the linear map.
  // Thirtieth session, H100, B = 8: M_1 d = 64 8K / 16K / 32K 1.86 / 7.08 / 30.1 -> 1.75 / 6.58 / 28.2 ms, M_2
  // 2.01 / 7.64 / 31.6 -> 1.98 / 7.58 / 31.3, M_1 d = 128 (H = 8) 28.3 -> 26.5 ms at 32K, M_4 53.5 -> 51.5; the
  // denominator now sums the bf16 P that the numerator multiplies (relative error vs float64 2.36e-3 -> 2.17e-3).
  float o[A][32], s[NS][BN / 2], rs[4] = {0.f, 0.f, 0.f, 0.f};
  const uint64_t d_ones = plain_desc(base + L::ones);
#pragma unroll
  for (int a = 0; a < A; ++a)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[a][i] = 0.f;
#pragma unroll
  for (int a = 0; a < NS; ++a)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[a][i] = 0.f;

  // One pipeline step on sub-tile j (tile j / SUB, keys (j % SUB) * BN ..): with SCORES, wait for the tile (and
  // its key norms, eps only) at its first sub-step and issue the score wgmmas; with PV, issue O += P V_pv with
  // P in pa; one commit group each (both flags compile-time: a wgmma under a run-time branch makes ptxas
  // serialise them, C7520). Every register operand is fenced before wgmma.fence. Returns the tile's key norms.
  auto issue_step = [&](auto scores_tag, auto pv_tag, int j, int pv, uint32_t(&pa)[BN / 16][4]) -> const float* {
    constexpr bool SCORES = decltype(scores_tag)::value, PV = decltype(pv_tag)::value;
    const int tile = j / SUB, half = j % SUB;
    const float* kn = kn_buf + (tile & 1) * kKeys;
    const int st = tile % STAGES;
    if constexpr (SCORES) {
      if (half == 0) {
        mbar_wait(bar_full + 8 * st, (tile / STAGES) & 1);
        if (use_eps) {  // 2 threads per key; double-buffered, one named barrier per tile for this warpgroup
          const int key = (tid & 127) >> 1, part = tid & 1;
          const unsigned char* ktile = sbase + L::k + st * TILE;
          float acc = 0.f;
          for (int c = part * (DK / 2); c < (part + 1) * (DK / 2); ++c) {
            const float x = sw128_elem(ktile, key, c);
            acc += x * x;
          }
          acc += __shfl_xor_sync(0xffffffffu, acc, 1);
          if (part == 0) const_cast<float*>(kn)[key] = acc;
          asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
        }
      }
    }
#pragma unroll
    for (int a = 0; a < NS; ++a)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fence_f(s[a][i]);
#pragma unroll
    for (int a = 0; a < A; ++a)
#pragma unroll
      for (int i = 0; i < 32; ++i) fence_f(o[a][i]);
#pragma unroll
    for (int i = 0; i < 4; ++i) fence_f(rs[i]);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int h = 0; h < 4; ++h) fence_u(pa[kk][h]);
    wg_fence();
    if constexpr (SCORES) {
      const uint64_t dks = dk + ((st * TILE) >> 4);
#pragma unroll
      for (int a = 0; a < G; ++a)
#pragma unroll
        for (int b = 0; b < G; ++b) {
          if (KIND != MapKind::SumPsd && a != b) continue;
          const int acc_i = KIND == MapKind::SumPsd ? a * G + b : a;
#pragma unroll
          for (int ks = 0; ks < KSB; ++ks)
            wgmma_ss<BN>(s[acc_i], dq + col_off(a * M + ks * 16, 0), dks + col_off(b * M + ks * 16, half * BN), ks > 0);
        }
      wg_commit();
    }
    if constexpr (PV) {
      const int ptile = pv / SUB, phalf = pv % SUB;
      const uint64_t dvs = dv + ((ptile % STAGES) * TILE >> 4);
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int a = 0; a < A; ++a)
          wgmma_rs_mn(o[a], pa[kk], dvs + ((a * kAtom + (phalf * BN + kk * 16) * 128) >> 4));
      if constexpr (PSD) {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs_n8(rs, pa[kk], d_ones);
      }
      wg_commit();
    }
    return kn;
  };
  auto square = [&](int j, const float* kn, uint32_t(&dst)[BN / 16][4]) {
    const int tile = j / SUB, key0 = (j % SUB) * BN;
    if (use_eps) {
      if (tile == diag) square_scores<KIND, NS, BN, true, true>(s, dst, lrow0, tq, key0, qn, kn, c2, eps_lin, eps_const);
      else square_scores<KIND, NS, BN, false, true>(s, dst, lrow0, tq, key0, qn, kn, c2, eps_lin, eps_const);
    } else {
      if (tile == diag) square_scores<KIND, NS, BN, true, false>(s, dst, lrow0, tq, key0, qn, kn, c2, eps_lin, eps_const);
      else square_scores<KIND, NS, BN, false, false>(s, dst, lrow0, tq, key0, qn, kn, c2, eps_lin, eps_const);
    }
  };
  auto release = [&](int j) {  // the last sub-step of a tile retired: every wgmma that read its stage is done
    if (j % SUB == SUB - 1 && lane == 0) mbar_arrive(bar_empty + 8 * ((j / SUB) % STAGES));
  };

  // P fragments alternate between two register sets (no copies: a wgmma may still read the other one).
  uint32_t pa0[BN / 16][4], pa1[BN / 16][4];
  {
    const float* kn = issue_step(std::true_type{}, std::false_type{}, 0, -1, pa0);
    wg_wait<0>();
#pragma unroll
    for (int a = 0; a < NS; ++a)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fence_f(s[a][i]);
    square(0, kn, pa0);
  }
  // Step j: tensor core runs S_j, then P_{j-1} V_{j-1} (P in cur); meanwhile S_j is squared into nxt.
  auto step = [&](int j, uint32_t(&cur)[BN / 16][4], uint32_t(&nxt)[BN / 16][4]) {
    const float* kn = issue_step(std::true_type{}, std::true_type{}, j, j - 1, cur);
    wg_wait<1>();  // S_j has landed; P V may still run while we square
#pragma unroll
    for (int a = 0; a < NS; ++a)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fence_f(s[a][i]);
    square(j, kn, nxt);
    wg_wait<0>();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int h = 0; h < 4; ++h) fence_u(cur[kk][h]);  // cur stays unclobbered until P V retired
    release(j - 1);
  };
  int j = 1;
  for (; j + 1 <= last_sub; j += 2) {
    step(j, pa0, pa1);
    step(j + 1, pa1, pa0);
  }
  if (j <= last_sub) {
    step(j, pa0, pa1);
    issue_step(std::false_type{}, std::true_type{}, 0, last_sub, pa1);
  } else {
    issue_step(std::false_type{}, std::true_type{}, 0, last_sub, pa0);
  }
  wg_wait<0>();
#pragma unroll
  for (int a = 0; a < A; ++a)
#pragma unroll
    for (int i = 0; i < 32; ++i) fence_f(o[a][i]);
#pragma unroll
  for (int i = 0; i < 4; ++i) fence_f(rs[i]);
  release(last_sub);

  float inv[2] = {1.f, 1.f};
  if (PSD && mp.normalized) {  // rs[0] (= rs[1]): row lrow0; rs[2]: row lrow0 + 8
#pragma unroll
    for (int h = 0; h < 2; ++h) inv[h] = rs[2 * h] != 0.f ? 1.f / rs[2 * h] : 0.f;
  }
  out += static_cast<std::int64_t>(head) * T * DK;
  const int r0 = q0 + wg * 64 + lrow0, r1 = r0 + 8;
#pragma unroll
  for (int a = 0; a < A; ++a)
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const int col = a * 64 + jj * 8 + 2 * tq;
      if (col >= DK) continue;
      if (r0 < T)
        *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(r0) * DK + col) =
            __floats2bfloat162_rn(o[a][4 * jj] * inv[0], o[a][4 * jj + 1] * inv[0]);
      if (r1 < T)
        *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(r1) * DK + col) =
            __floats2bfloat162_rn(o[a][4 * jj + 2] * inv[1], o[a][4 * jj + 3] * inv[1]);
    }
#endif
}

// [BH][T][d] bf16 as a 3-D tensor map, boxes of 64 x 64 x 1, 128-byte swizzle, zero fill past T and d
// (kata_attention_wgmma.cu).
CUtensorMap tile_map(const void* ptr, std::int64_t T, std::int64_t BH, int d);

template <MapKind KIND, int G, int DK, int NWG, int BN>
void launch_kernel(const AttentionLaunch& p, const AttentionPtrs& a, cudaStream_t stream) {
  constexpr int DP = DK < 64 ? 64 : DK, STAGES = 4;
  auto kern = quad_ws_kernel<KIND, G, DP, DK, NWG, BN, STAGES>;
  constexpr int smem = Layout<NWG, STAGES, DP / 64>::smem;
  ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
  const std::int64_t BH = p.B * p.H;
  const CUtensorMap mq = tile_map(a.q, p.T, BH, DK), mk = tile_map(a.k, p.T, BH, DK), mv = tile_map(a.v, p.T, BH, DK);
  const dim3 grid(static_cast<unsigned>((p.T + 64 * NWG - 1) / (64 * NWG)), static_cast<unsigned>(BH));
  kern<<<grid, 128 * (NWG + 1), smem, stream>>>(mq, mk, mv, attn_map(p), static_cast<__nv_bfloat16*>(a.out),
                                                static_cast<int>(p.T));
  MEMCAP_CUDA_CHECK_LAUNCH("quad_ws_kernel");
}

// Registers of the score accumulators (NS of BN/2) and of O (32 per 64 value columns): which (map, width,
// warpgroups) the kernel is built for; quad_ws_supported asks this. A deeper schedule with two score register sets
// (scores issued two sub-tiles ahead) was tried: ptxas serialises its wgmmas (C7511 / C7514), so it is not kept.
constexpr int score_regs(MapKind k, int g, int bn) { return (k == MapKind::SumPsd ? g * g : (k == MapKind::Linear ? 1 : g)) * bn / 2; }
constexpr int keys_per_step(MapKind k, int g) { return (k == MapKind::SumPsd || g == 4) ? 32 : 64; }
constexpr bool ws_fits(MapKind k, int g, int dk, int nwg) {
  const int regs = score_regs(k, g, keys_per_step(k, g)) + 32 * (dk < 64 ? 1 : dk / 64);
  return nwg == 3 ? (dk <= 64 && regs <= 96) : regs <= 192;
}

template <MapKind K, int G, int DK, int NWG>
void launch_if_fits(const AttentionLaunch& p, const AttentionPtrs& a, cudaStream_t stream) {
  if constexpr (ws_fits(K, G, DK, NWG) && (K == MapKind::Linear || (DK / G) % 16 == 0))
    launch_kernel<K, G, DK, NWG, keys_per_step(K, G)>(p, a, stream);
  else
    cuda_detail::throw_device_error("quad_ws: no instantiation for this map (internal: quad_ws_supported)");
}

// Every map the Hopper kernel runs at head width DK with NWG consumer warpgroups: BN = 64 keys per step where the
// score accumulators fit (M_1, M_2, linear), 32 otherwise (M_4, Σ_2).
template <int DK, int NWG>
void launch_width(const AttentionLaunch& p, const AttentionPtrs& a, cudaStream_t stream) {
  if (p.map.kind == MapKind::Linear) return launch_if_fits<MapKind::Linear, 1, DK, NWG>(p, a, stream);
  if (p.map.kind == MapKind::SumPsd) return launch_if_fits<MapKind::SumPsd, 2, DK, NWG>(p, a, stream);
  if (p.map.g == 1) return launch_if_fits<MapKind::BlockPsd, 1, DK, NWG>(p, a, stream);
  if (p.map.g == 2) return launch_if_fits<MapKind::BlockPsd, 2, DK, NWG>(p, a, stream);
  return launch_if_fits<MapKind::BlockPsd, 4, DK, NWG>(p, a, stream);
}

}  // namespace ws
}  // namespace memcap::kata::cuda

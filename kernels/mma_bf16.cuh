// bf16 tensor-core building blocks shared by every mma.sync kernel (kata attention, nn fused GD): ldmatrix
// fragment loads of padded row-major shared-memory tiles, mma.sync m16n8k16 bf16 -> fp32, bf16x2 packing and
// cp.async 16-byte tile copies (tile row stride W + 8 elements: conflict-free ldmatrix). Device code only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace memcap::mma {

// ---- tensor-core fragments (sm_80+ mma.sync m16n8k16 bf16 -> fp32) -------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
// D = A(16x16 bf16) * B(16x8 bf16) + D (fp32)
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// A fragment (16 rows x 16 k) from a row-major bf16 tile X[row][k] (stride in elements).
__device__ __forceinline__ void load_a(uint32_t (&r)[4], const __nv_bfloat16* X, int stride, int row0, int k0,
                                       int lane) {
  const int i = lane >> 3;
  ldmatrix_x4(r, X + (row0 + (i & 1) * 8 + (lane & 7)) * stride + k0 + (i >> 1) * 8);
}
// A fragment (16 rows x 16 k) of X^T, where X is stored [k][row] (e.g. Psi(K)^T from Psi(K)[t][f]).
__device__ __forceinline__ void load_a_trans(uint32_t (&r)[4], const __nv_bfloat16* X, int stride, int row0,
                                             int k0, int lane) {
  const int i = lane >> 3;
  ldmatrix_x4_trans(r, X + (k0 + (i >> 1) * 8 + (lane & 7)) * stride + row0 + (i & 1) * 8);
}
// B fragments for two n-blocks (n0..n0+7, n0+8..n0+15) x 16 k, where B[k][n] = X[n][k] (X row-major
// [n][k], e.g. K for S = Q K^T). b[0],b[1]: n-block 0; b[2],b[3]: n-block 1.
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const __nv_bfloat16* X, int stride, int n0, int k0,
                                          int lane) {
  const int i = lane >> 3;
  ldmatrix_x4(b, X + (n0 + (i >> 1) * 8 + (lane & 7)) * stride + k0 + (i & 1) * 8);
}
// Same, where B[k][n] = X[k][n] (X row-major [k][n], e.g. V for P V, or a state S[f][v]).
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const __nv_bfloat16* X, int stride, int n0, int k0,
                                          int lane) {
  const int i = lane >> 3;
  ldmatrix_x4_trans(b, X + (k0 + (i & 1) * 8 + (lane & 7)) * stride + n0 + (i >> 1) * 8);
}

// ---- cp.async 16-byte copies (zero-fill when !valid) -------------------------------------------
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }
__device__ __forceinline__ void cp_async_wait_one_pending() { asm volatile("cp.async.wait_group 1;\n" ::); }

// Copy rows [t0, t0+ROWS) of a [T][W] bf16 matrix into a padded smem tile (stride W + 8); rows >= T are
// zero-filled. All threads of the block take part.
template <int ROWS, int W>
__device__ __forceinline__ void load_tile(__nv_bfloat16* dst, const __nv_bfloat16* src, int t0, int T, int tid,
                                          int nthreads) {
  constexpr int CPR = W / 8;  // 16-byte pieces per row
  for (int c = tid; c < ROWS * CPR; c += nthreads) {
    const int r = c / CPR, col = (c % CPR) * 8;
    const bool valid = t0 + r < T;
    cp_async16(dst + r * (W + 8) + col, src + (valid ? (static_cast<int64_t>(t0 + r) * W + col) : 0), valid);
  }
}

}  // namespace memcap::mma

// Hopper quadratic KATA attention kernels (kata_attention_wgmma.cuh): the sm_90a probe, the TMA tensor maps,
// what the kernel supports and the dispatch by head width (instantiations in kata_attention_wgmma_d*.cu).
#include "kata_attention_wgmma.cuh"

#include <cstring>
#include <string>

namespace memcap::kata::cuda {
namespace {

__global__ void wgmma_probe_kernel(int* flag) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *flag = 1;
#else
  *flag = 0;
#endif
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda, so the
// binaries still start on machines without a driver).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    MEMCAP_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                                       &status));
    if (status != cudaDriverEntryPointSuccess || p == nullptr)
      cuda_detail::throw_device_error("the CUDA driver has no cuTensorMapEncodeTiled (TMA needs driver >= 12.0)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace

namespace ws {
CUtensorMap tile_map(const void* ptr, std::int64_t T, std::int64_t BH, int d) {
  CUtensorMap map;
  std::memset(&map, 0, sizeof map);
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(T), static_cast<cuuint64_t>(BH)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(d) * 2, static_cast<cuuint64_t>(T) * d * 2};
  const cuuint32_t box[3] = {64, 64, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(ptr), dims,
                                          strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    cuda_detail::throw_device_error("cuTensorMapEncodeTiled failed with CUresult " + std::to_string(static_cast<int>(r)));
  return map;
}
}  // namespace ws

bool wgmma_available() {
  static const bool ok = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    if (major != 9) return false;
    gpu::Buffer d(sizeof(int));
    int h = 0;
    wgmma_probe_kernel<<<1, 1>>>(static_cast<int*>(d.get()));
    MEMCAP_CUDA_CHECK_LAUNCH("wgmma_probe_kernel");
    MEMCAP_CUDA_CHECK(cudaMemcpy(&h, d.get(), sizeof(int), cudaMemcpyDeviceToHost));
    return h == 1;
  }();
  return ok;
}

bool quad_ws_supported(const AttentionLaunch& p, int nwg) {
  if (p.dtype != gpu::DType::bf16 || p.d != p.dv) return false;
  if (p.d != 32 && p.d != 64 && p.d != 128) return false;
  if (p.T > (std::int64_t(1) << 31) - 64) return false;
  const MapParams& m = p.map;
  int g = 1;
  if (m.kind == MapKind::SumPsd) {
    if (m.g != 2) return false;  // Σ_4: 16 score accumulators, more than the registers hold
    g = 2;
  } else if (m.kind == MapKind::BlockPsd) {
    if (m.g != 1 && m.g != 2 && m.g != 4) return false;
    g = m.g;
  } else if (m.kind != MapKind::Linear) {
    return false;  // orthant, Lorentz: ψ on the tiles runs in the mma.sync kernels
  }
  if (m.kind != MapKind::Linear && (p.d / g) % 16 != 0) return false;
  return ws::ws_fits(m.kind, g, p.d, nwg);
}

void launch_quad_ws(const AttentionLaunch& p, int nwg, const AttentionPtrs& a, cudaStream_t stream) {
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v) || !aligned16(a.out))
    cuda_detail::throw_user_error("quadratic attention (Hopper kernel): q, k, v and out must be 16-byte aligned");
  if (p.d == 32) launch_quad_ws_d32(p, nwg, a, stream);
  else if (p.d == 64) launch_quad_ws_d64(p, nwg, a, stream);
  else launch_quad_ws_d128(p, nwg, a, stream);
}

}  // namespace memcap::kata::cuda

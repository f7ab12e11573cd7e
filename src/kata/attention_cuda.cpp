// Host side of the CUDA KATA attention kernels: buffer management, dtype conversion, NaN poisoning,
// CUDA-event timing and the copy / cuBLAS-GEMM ceilings. Without MEMCAP_HAVE_CUDA every entry point
// throws DeviceError.
#include "kata/attention_cuda.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "cuda_check.cuh"
#include "kata_attention_chunked.cuh"
#include "kata_attention_fill.cuh"
#include "kata_attention_quadratic.cuh"
#endif

namespace memcap {
namespace kata {

AttentionForm parse_attention_form(const std::string& s) {
  if (s == "quadratic") return AttentionForm::quadratic;
  if (s == "chunked") return AttentionForm::chunked;
  if (s == "tree") return AttentionForm::tree;
  throw UserError(fmt::format("unknown attention form '{}': use quadratic, chunked or tree", s));
}
const char* to_string(AttentionForm f) {
  return f == AttentionForm::quadratic ? "quadratic" : (f == AttentionForm::chunked ? "chunked" : "tree");
}
GpuDType parse_gpu_dtype(const std::string& s) {
  if (s == "bf16") return GpuDType::bf16;
  if (s == "fp32" || s == "f32") return GpuDType::f32;
  throw UserError(fmt::format("unknown dtype '{}': use bf16 or fp32", s));
}
const char* to_string(GpuDType t) { return t == GpuDType::bf16 ? "bf16" : "fp32"; }

namespace {
float bf16_round(float x) {  // round to nearest even on the upper 16 bits (NaN kept)
  if (std::isnan(x)) return x;
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
}  // namespace

std::vector<double> round_to_dtype(GpuDType t, const std::vector<double>& x) {
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float f = static_cast<float>(x[i]);
    r[i] = t == GpuDType::bf16 ? bf16_round(f) : f;
  }
  return r;
}

#ifndef MEMCAP_HAVE_CUDA
bool attention_cuda_built() { return false; }
namespace {
[[noreturn]] void no_cuda() {
  throw DeviceError("this build of memcap has no CUDA support (configured with MEMCAP_ENABLE_CUDA=OFF); "
                    "use --device cpu or rebuild with CUDA");
}
}  // namespace
GpuAttentionResult attention_cuda(AttentionForm, const AttentionShape&, const AttentionOptions&, GpuDType,
                                  const double*, const double*, const double*) {
  no_cuda();
}
GpuTiming time_attention_cuda(AttentionForm, const AttentionShape&, const AttentionOptions&, GpuDType, int, int,
                              std::uint64_t) {
  no_cuda();
}
GpuCeilings measure_gpu_ceilings(int) { no_cuda(); }
#else
bool attention_cuda_built() { return true; }

namespace {

// Owning device buffer.
struct DeviceBuffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  explicit DeviceBuffer(std::size_t n) : bytes(n) {
    if (n) MEMCAP_CUDA_CHECK(cudaMalloc(&p, n));
  }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

cuda::AttentionLaunch launch_of(const AttentionShape& s, const AttentionOptions& o, GpuDType t) {
  s.validate();
  o.validate(s);
  if (s.d > 1024 || s.dv > 1024) throw UserError("CUDA attention: d_head and d_v must be <= 1024");
  cuda::AttentionLaunch p;
  p.B = s.B;
  p.H = s.H;
  p.T = s.T;
  p.d = static_cast<int>(s.d);
  p.dv = static_cast<int>(s.dv);
  p.chunk = static_cast<int>(std::min<std::int64_t>(o.chunk, 1 << 20));
  const AttentionMap m = attention_map(o.map);  // kind codes = AttentionMapKind (kata_attention_common.cuh)
  p.map_kind = static_cast<int>(m.kind);
  p.groups = m.groups;
  p.eps = static_cast<float>(m.eps);
  p.scale = static_cast<float>(m.scale);
  p.normalized = o.normalized;
  p.dtype = t == GpuDType::bf16 ? cuda::DType::bf16 : cuda::DType::f32;
  return p;
}

std::size_t elem_bytes(GpuDType t) { return t == GpuDType::bf16 ? 2 : 4; }

void upload(void* dst, const double* src, std::size_t n, GpuDType t) {
  if (t == GpuDType::bf16) {
    std::vector<__nv_bfloat16> h(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = __float2bfloat16(static_cast<float>(src[i]));
    MEMCAP_CUDA_CHECK(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice));
  } else {
    std::vector<float> h(src, src + n);
    MEMCAP_CUDA_CHECK(cudaMemcpy(dst, h.data(), n * 4, cudaMemcpyHostToDevice));
  }
}

std::vector<double> download(const void* src, std::size_t n, GpuDType t) {
  std::vector<double> out(n);
  if (t == GpuDType::bf16) {
    std::vector<__nv_bfloat16> h(n);
    MEMCAP_CUDA_CHECK(cudaMemcpy(h.data(), src, n * 2, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < n; ++i) out[i] = __bfloat162float(h[i]);
  } else {
    std::vector<float> h(n);
    MEMCAP_CUDA_CHECK(cudaMemcpy(h.data(), src, n * 4, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < n; ++i) out[i] = h[i];
  }
  return out;
}

std::size_t workspace_for(AttentionForm f, const cuda::AttentionLaunch& p) {
  if (f == AttentionForm::quadratic) return 0;
  return cuda::chunk_workspace_bytes(p, f == AttentionForm::chunked ? cuda::ChunkForm::chunked : cuda::ChunkForm::tree);
}

const char* run_form(AttentionForm f, const cuda::AttentionLaunch& p, const void* q, const void* k, const void* v,
                     void* out, void* ws, std::size_t ws_bytes, cudaStream_t stream) {
  if (f == AttentionForm::quadratic) return cuda::launch_quadratic(p, q, k, v, out, stream);
  return cuda::launch_chunk_form(p, f == AttentionForm::chunked ? cuda::ChunkForm::chunked : cuda::ChunkForm::tree, q,
                                 k, v, out, ws, ws_bytes, stream);
}

void require_gpu() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    cudaGetLastError();
    throw DeviceError(fmt::format("no usable CUDA GPU ({}); use --device cpu",
                                  err != cudaSuccess ? cudaGetErrorString(err) : "no device visible"));
  }
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

}  // namespace

GpuAttentionResult attention_cuda(AttentionForm form, const AttentionShape& s, const AttentionOptions& o, GpuDType t,
                                  const double* q, const double* k, const double* v) {
  require_gpu();
  const cuda::AttentionLaunch p = launch_of(s, o, t);
  const std::size_t eb = elem_bytes(t);
  DeviceBuffer dq(s.qk_size() * eb), dk(s.qk_size() * eb), dv(s.v_size() * eb), dout(s.v_size() * eb);
  const std::size_t ws_bytes = workspace_for(form, p);
  DeviceBuffer ws(ws_bytes);
  upload(dq.p, q, s.qk_size(), t);
  upload(dk.p, k, s.qk_size(), t);
  upload(dv.p, v, s.v_size(), t);
  cuda::fill_nan(dout.p, p.dtype, s.v_size(), nullptr);
  if (ws_bytes) cuda::fill_nan(ws.p, cuda::DType::f32, static_cast<std::int64_t>(ws_bytes / 4), nullptr);
  GpuAttentionResult r;
  r.variant = run_form(form, p, dq.p, dk.p, dv.p, dout.p, ws.p, ws_bytes, nullptr);
  MEMCAP_CUDA_CHECK(cudaDeviceSynchronize());
  r.out = download(dout.p, s.v_size(), t);
  return r;
}

GpuTiming time_attention_cuda(AttentionForm form, const AttentionShape& s, const AttentionOptions& o, GpuDType t,
                              int warmup, int repeats, std::uint64_t seed) {
  require_gpu();
  if (repeats < 1 || warmup < 0) throw UserError("--repeats must be >= 1 and --warmup >= 0");
  const cuda::AttentionLaunch p = launch_of(s, o, t);
  const std::size_t eb = elem_bytes(t);
  DeviceBuffer dq(s.qk_size() * eb), dk(s.qk_size() * eb), dv(s.v_size() * eb), dout(s.v_size() * eb);
  GpuTiming r;
  r.workspace_bytes = workspace_for(form, p);
  DeviceBuffer ws(r.workspace_bytes);
  cuda::fill_normal(dq.p, p.dtype, s.qk_size(), seed, 31, 1.f, nullptr);
  cuda::fill_normal(dk.p, p.dtype, s.qk_size(), seed, 1, 1.f, nullptr);
  cuda::fill_normal(dv.p, p.dtype, s.v_size(), seed, 2, 1.f, nullptr);
  cuda::fill_nan(dout.p, p.dtype, s.v_size(), nullptr);
  cudaEvent_t e0, e1;
  MEMCAP_CUDA_CHECK(cudaEventCreate(&e0));
  MEMCAP_CUDA_CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < warmup; ++i) r.variant = run_form(form, p, dq.p, dk.p, dv.p, dout.p, ws.p, r.workspace_bytes, nullptr);
  MEMCAP_CUDA_CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < repeats; ++i) {
    MEMCAP_CUDA_CHECK(cudaEventRecord(e0, nullptr));
    r.variant = run_form(form, p, dq.p, dk.p, dv.p, dout.p, ws.p, r.workspace_bytes, nullptr);
    MEMCAP_CUDA_CHECK(cudaEventRecord(e1, nullptr));
    MEMCAP_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    MEMCAP_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    r.ms.push_back(ms);
  }
  if (form != AttentionForm::quadratic) {  // one more launch with events between the stages
    cudaEvent_t st[2];
    MEMCAP_CUDA_CHECK(cudaEventCreate(&st[0]));
    MEMCAP_CUDA_CHECK(cudaEventCreate(&st[1]));
    cuda::AttentionLaunch pp = p;
    pp.stage_events = st;
    MEMCAP_CUDA_CHECK(cudaEventRecord(e0, nullptr));
    run_form(form, pp, dq.p, dk.p, dv.p, dout.p, ws.p, r.workspace_bytes, nullptr);
    MEMCAP_CUDA_CHECK(cudaEventRecord(e1, nullptr));
    MEMCAP_CUDA_CHECK(cudaEventSynchronize(e1));
    float a = 0, b = 0, c = 0;
    MEMCAP_CUDA_CHECK(cudaEventElapsedTime(&a, e0, st[0]));
    MEMCAP_CUDA_CHECK(cudaEventElapsedTime(&b, st[0], st[1]));
    MEMCAP_CUDA_CHECK(cudaEventElapsedTime(&c, st[1], e1));
    r.stage_ms = {a, b, c};
    cudaEventDestroy(st[0]);
    cudaEventDestroy(st[1]);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  r.median_ms = median(r.ms);
  return r;
}

GpuCeilings measure_gpu_ceilings(int repeats) {
  require_gpu();
  GpuCeilings c;
  cudaEvent_t e0, e1;
  MEMCAP_CUDA_CHECK(cudaEventCreate(&e0));
  MEMCAP_CUDA_CHECK(cudaEventCreate(&e1));
  auto timed = [&](auto&& fn) {
    fn();
    MEMCAP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<double> ms;
    for (int i = 0; i < std::max(repeats, 3); ++i) {
      MEMCAP_CUDA_CHECK(cudaEventRecord(e0, nullptr));
      fn();
      MEMCAP_CUDA_CHECK(cudaEventRecord(e1, nullptr));
      MEMCAP_CUDA_CHECK(cudaEventSynchronize(e1));
      float x = 0;
      MEMCAP_CUDA_CHECK(cudaEventElapsedTime(&x, e0, e1));
      ms.push_back(x);
    }
    return median(ms);
  };
  {  // device-to-device copy of 4 GiB
    c.copy_bytes = std::int64_t(1) << 32;
    DeviceBuffer a(c.copy_bytes), b(c.copy_bytes);
    cuda::fill_normal(a.p, cuda::DType::f32, c.copy_bytes / 4, 5, 7, 1.f, nullptr);
    const double ms = timed([&] { MEMCAP_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, c.copy_bytes, cudaMemcpyDeviceToDevice, nullptr)); });
    c.copy_gbps = 2.0 * static_cast<double>(c.copy_bytes) / (ms * 1e-3) / 1e9;
  }
  {  // cuBLAS bf16 GEMM, fp32 accumulate, random data
    c.gemm_n = 8192;
    const std::int64_t n = c.gemm_n;
    DeviceBuffer a(n * n * 2), b(n * n * 2), d(n * n * 2);
    cuda::fill_normal(a.p, cuda::DType::bf16, n * n, 5, 8, 1.f, nullptr);
    cuda::fill_normal(b.p, cuda::DType::bf16, n * n, 5, 9, 1.f, nullptr);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw DeviceError("cublasCreate failed");
    const float alpha = 1.f, beta = 0.f;
    auto gemm = [&] {
      const cublasStatus_t st =
          cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(n), static_cast<int>(n),
                       &alpha, a.p, CUDA_R_16BF, static_cast<int>(n), b.p, CUDA_R_16BF, static_cast<int>(n), &beta,
                       d.p, CUDA_R_16BF, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (st != CUBLAS_STATUS_SUCCESS) throw DeviceError(fmt::format("cublasGemmEx failed (status {})", int(st)));
    };
    const double ms = timed(gemm);
    cublasDestroy(h);
    c.gemm_tflops = 2.0 * double(n) * double(n) * double(n) / (ms * 1e-3) / 1e12;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return c;
}
#endif

}  // namespace kata
}  // namespace memcap

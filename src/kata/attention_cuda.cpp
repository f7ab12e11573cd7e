// Host side of the CUDA KATA attention kernels: device tensors (core/gpu.hpp), dtype conversion, NaN
// poisoning, CUDA-event timing and the copy / cuBLAS-GEMM ceilings, all on one stream per call.
// Without MEMCAP_HAVE_CUDA every entry point throws DeviceError.
#include "kata/attention_cuda.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/error.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <cuda_bf16.h>

#include "core/gpu.hpp"
#include "kata_attention_backward.cuh"
#include "kata_attention_chunked_backward.cuh"
#include "kata_attention_fill.cuh"
#include "kata_attention_variants.cuh"
#include "kata_feature_map.cuh"
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
std::vector<std::string> attention_variant_names(AttentionForm) { return {}; }
std::vector<std::string> attention_variants(AttentionForm, const AttentionShape&, const AttentionOptions&, GpuDType) {
  no_cuda();
}
std::string validate_attention_cuda(AttentionForm, const AttentionShape&, const AttentionOptions&, GpuDType,
                                    const std::string&, bool, std::string*) {
  no_cuda();
}
GpuAttentionResult attention_cuda(AttentionForm, const AttentionShape&, const AttentionOptions&, GpuDType,
                                  const double*, const double*, const double*, const std::string&) {
  no_cuda();
}
GpuTiming time_attention_cuda(AttentionForm, const AttentionShape&, const AttentionOptions&, GpuDType, int, int,
                              std::uint64_t, const std::string&) {
  no_cuda();
}
GpuCeilings measure_gpu_ceilings(int) { no_cuda(); }
std::string attention_backward_unsupported(const AttentionShape&, const AttentionOptions&) {
  return "this build has no CUDA kernels";
}
GpuAttentionGrads attention_backward_cuda(const AttentionShape&, const AttentionOptions&, const double*, const double*,
                                          const double*, const double*, const double*) {
  no_cuda();
}
std::string attention_backward_chunked_unsupported(const AttentionShape&, const AttentionOptions&) {
  return "this build has no CUDA kernels";
}
std::size_t chunked_fwdbwd_workspace_bytes(const AttentionShape&, const AttentionOptions&, std::int64_t) { return 0; }
GpuAttentionGrads attention_backward_chunked_cuda(const AttentionShape&, const AttentionOptions&, const double*,
                                                  const double*, const double*, const double*, const double*,
                                                  std::int64_t) {
  no_cuda();
}
std::vector<double> psi_vjp_cuda(const FeatureMap&, const std::vector<double>&, const std::vector<double>&,
                                 std::int64_t) {
  no_cuda();
}
std::vector<double> psi_cuda(const FeatureMap&, const std::vector<double>&, std::int64_t) { no_cuda(); }
#else
bool attention_cuda_built() { return true; }

namespace {

// The launch description of a form call; `variant` must outlive it (the launch keeps the pointer).
cuda::AttentionLaunch launch_of(const AttentionShape& s, const AttentionOptions& o, GpuDType t,
                                const std::string& variant) {
  s.validate();
  o.validate(s);
  cuda::AttentionLaunch p;
  p.B = s.B;
  p.H = s.H;
  p.T = s.T;
  require(s.d <= 1024 && s.dv <= 1024, "CUDA attention: d_head and d_v must be <= 1024 (got {} and {})", s.d, s.dv);
  p.d = static_cast<int>(s.d);
  p.dv = static_cast<int>(s.dv);
  p.chunk = static_cast<int>(std::min<std::int64_t>(o.chunk, 1 << 20));
  p.map = attention_map(o.map);
  p.normalized = o.normalized;
  p.dtype = t == GpuDType::bf16 ? gpu::DType::bf16 : gpu::DType::f32;
  p.variant = variant.empty() ? nullptr : variant.c_str();
  return p;
}

std::string full_name(AttentionForm f, const cuda::KernelVariant& v) { return std::string(to_string(f)) + "/" + v.name; }

gpu::DType tensor_dtype(GpuDType t) { return t == GpuDType::bf16 ? gpu::DType::bf16 : gpu::DType::f32; }

gpu::Tensor device_tensor(std::size_t n, GpuDType t) {
  return gpu::Tensor({static_cast<std::int64_t>(n)}, tensor_dtype(t));
}

// Host doubles -> the tensor's dtype; waits for the copy (the staging vector is local).
void upload(gpu::Tensor& dst, const double* src, const gpu::Stream& s) {
  const auto n = static_cast<std::size_t>(dst.numel());
  if (dst.dtype() == gpu::DType::bf16) {
    std::vector<__nv_bfloat16> h(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = __float2bfloat16(static_cast<float>(src[i]));
    dst.upload(h.data(), s);
    s.synchronize();
  } else {
    std::vector<float> h(src, src + n);
    dst.upload(h.data(), s);
    s.synchronize();
  }
}

std::vector<double> download(const gpu::Tensor& src, const gpu::Stream& s) {
  const auto n = static_cast<std::size_t>(src.numel());
  std::vector<double> out(n);
  if (src.dtype() == gpu::DType::bf16) {
    std::vector<__nv_bfloat16> h(n);
    src.download(h.data(), s);
    s.synchronize();
    for (std::size_t i = 0; i < n; ++i) out[i] = __bfloat162float(h[i]);
  } else {
    std::vector<float> h(n);
    src.download(h.data(), s);
    s.synchronize();
    for (std::size_t i = 0; i < n; ++i) out[i] = h[i];
  }
  return out;
}

std::size_t workspace_for(AttentionForm f, const cuda::AttentionLaunch& p) {
  return cuda::select_variant(f, p, cuda::current_arch()).workspace(p);
}

const cuda::KernelVariant& run_form(AttentionForm f, const cuda::AttentionLaunch& p, const gpu::Tensor& q,
                                    const gpu::Tensor& k, const gpu::Tensor& v, gpu::Tensor& out, const gpu::Buffer& ws,
                                    const gpu::Stream& stream) {
  cuda::AttentionPtrs a;
  a.q = q.raw();
  a.k = k.raw();
  a.v = v.raw();
  a.out = out.raw();
  a.workspace = ws.get();
  a.workspace_bytes = ws.bytes();
  return cuda::launch_attention(f, p, a, stream.get());
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

std::vector<std::string> attention_variant_names(AttentionForm form) {
  std::vector<std::string> out;
  for (const auto& v : cuda::variant_table())
    if (v.form == form) out.push_back(v.name);
  return out;
}

std::vector<std::string> attention_variants(AttentionForm form, const AttentionShape& s, const AttentionOptions& o,
                                            GpuDType t) {
  require_gpu();
  const cuda::AttentionLaunch p = launch_of(s, o, t, "");
  cuda::validate_launch(form, p);
  std::vector<std::string> out;
  for (const auto* v : cuda::applicable_variants(form, p, cuda::current_arch())) out.push_back(v->name);
  return out;
}

std::string validate_attention_cuda(AttentionForm form, const AttentionShape& s, const AttentionOptions& o,
                                    GpuDType t, const std::string& variant, bool check_memory, std::string* path) {
  require_gpu();
  const cuda::AttentionLaunch p = launch_of(s, o, t, variant);
  const cuda::KernelVariant& v = cuda::select_variant(form, p, cuda::current_arch());
  if (check_memory) {
    const std::size_t eb = t == GpuDType::bf16 ? 2 : 4;
    const std::size_t bytes = (2 * s.qk_size() + 2 * s.v_size()) * eb + v.workspace(p);
    gpu::require_device_memory(bytes, fmt::format("{} attention B={} H={} T={} d={} ({})", to_string(form), s.B, s.H,
                                                  s.T, s.d, full_name(form, v)));
  }
  if (path) *path = v.path;
  return full_name(form, v);
}

GpuAttentionResult attention_cuda(AttentionForm form, const AttentionShape& s, const AttentionOptions& o, GpuDType t,
                                  const double* q, const double* k, const double* v, const std::string& variant) {
  require_gpu();
  const cuda::AttentionLaunch p = launch_of(s, o, t, variant);
  const std::size_t ws_bytes = workspace_for(form, p);  // validates the launch before any allocation
  gpu::Stream stream;
  gpu::Tensor dq = device_tensor(s.qk_size(), t), dk = device_tensor(s.qk_size(), t);
  gpu::Tensor dv = device_tensor(s.v_size(), t), dout = device_tensor(s.v_size(), t);
  gpu::Buffer ws(ws_bytes);
  upload(dq, q, stream);
  upload(dk, k, stream);
  upload(dv, v, stream);
  cuda::fill_nan(dout.raw(), p.dtype, s.v_size(), stream.get());
  if (ws_bytes) cuda::fill_nan(ws.get(), gpu::DType::f32, static_cast<std::int64_t>(ws_bytes / 4), stream.get());
  GpuAttentionResult r;
  const cuda::KernelVariant& kv = run_form(form, p, dq, dk, dv, dout, ws, stream);
  r.variant = full_name(form, kv);
  r.path = kv.path;
  stream.synchronize();
  r.out = download(dout, stream);
  return r;
}

std::string attention_backward_unsupported(const AttentionShape& s, const AttentionOptions& o) {
  return cuda::quad_backward_unsupported(launch_of(s, o, GpuDType::bf16, ""));
}

namespace {

// Float64 host data through one of the bf16 backwards: upload (rounded to bf16), o = `out_given` or the `form`
// forward's own (its default variant), then `backward` (launches on the stream with the pointers and a workspace
// of `bws_bytes`, NaN-poisoned like every output), synchronize, download.
GpuAttentionGrads backward_on_host_data(
    AttentionForm form, const cuda::AttentionLaunch& p, const AttentionShape& s, const double* q, const double* k,
    const double* v, const double* dout, const double* out_given, std::size_t bws_bytes,
    const std::function<void(const cuda::AttentionGradPtrs&, const gpu::Stream&)>& backward) {
  require_gpu();
  gpu::Stream stream;
  const GpuDType t = GpuDType::bf16;
  gpu::Tensor tq = device_tensor(s.qk_size(), t), tk = device_tensor(s.qk_size(), t);
  gpu::Tensor tv = device_tensor(s.v_size(), t), to = device_tensor(s.v_size(), t), tdo = device_tensor(s.v_size(), t);
  gpu::Tensor gq = device_tensor(s.qk_size(), t), gk = device_tensor(s.qk_size(), t), gv = device_tensor(s.v_size(), t);
  gpu::Buffer bws(std::max<std::size_t>(bws_bytes, 4));
  upload(tq, q, stream);
  upload(tk, k, stream);
  upload(tv, v, stream);
  upload(tdo, dout, stream);
  for (gpu::Tensor* x : {&to, &gq, &gk, &gv}) cuda::fill_nan(x->raw(), p.dtype, x->numel(), stream.get());
  cuda::fill_nan(bws.get(), gpu::DType::f32, static_cast<std::int64_t>(bws.bytes() / 4), stream.get());
  GpuAttentionGrads r;
  if (out_given) {
    upload(to, out_given, stream);
    r.forward_variant = "given";
  } else {
    gpu::Buffer ws(std::max<std::size_t>(workspace_for(form, p), 1));
    r.forward_variant = full_name(form, run_form(form, p, tq, tk, tv, to, ws, stream));
    stream.synchronize();  // ws is freed here
  }
  cuda::AttentionGradPtrs a;
  a.q = tq.raw();
  a.k = tk.raw();
  a.v = tv.raw();
  a.o = to.raw();
  a.dout = tdo.raw();
  a.dq = gq.raw();
  a.dk = gk.raw();
  a.dv = gv.raw();
  a.workspace = bws.get();
  backward(a, stream);
  stream.synchronize();
  r.out = download(to, stream);
  r.dq = download(gq, stream);
  r.dk = download(gk, stream);
  r.dv = download(gv, stream);
  return r;
}

}  // namespace

GpuAttentionGrads attention_backward_cuda(const AttentionShape& s, const AttentionOptions& o, const double* q,
                                          const double* k, const double* v, const double* dout,
                                          const double* out_given) {
  const cuda::AttentionLaunch p = launch_of(s, o, GpuDType::bf16, "");
  const std::string why = cuda::quad_backward_unsupported(p);
  if (!why.empty()) throw UserError(fmt::format("quadratic KATA backward: {}", why));
  return backward_on_host_data(AttentionForm::quadratic, p, s, q, k, v, dout, out_given,
                               cuda::quad_backward_workspace_bytes(p),
                               [&](const cuda::AttentionGradPtrs& a, const gpu::Stream& st) {
                                 cuda::launch_quad_backward(p, a, st.get());
                               });
}

namespace {
// The chunked backward's launch: the forward's, with C = o.backward_chunk when set.
cuda::AttentionLaunch backward_launch_of(const cuda::AttentionLaunch& forward, const AttentionOptions& o) {
  cuda::AttentionLaunch p = forward;
  if (o.backward_chunk > 0) p.chunk = static_cast<int>(std::min<std::int64_t>(o.backward_chunk, 1 << 20));
  return p;
}
}  // namespace

std::string attention_backward_chunked_unsupported(const AttentionShape& s, const AttentionOptions& o) {
  return cuda::chunked_backward_unsupported(backward_launch_of(launch_of(s, o, GpuDType::bf16, ""), o));
}

std::size_t chunked_fwdbwd_workspace_bytes(const AttentionShape& s, const AttentionOptions& o, std::int64_t heads) {
  const cuda::AttentionLaunch p = launch_of(s, o, GpuDType::bf16, "");
  return workspace_for(AttentionForm::chunked, p) +
         cuda::chunked_backward_workspace_bytes(backward_launch_of(p, o), heads);
}

GpuAttentionGrads attention_backward_chunked_cuda(const AttentionShape& s, const AttentionOptions& o, const double* q,
                                                  const double* k, const double* v, const double* dout,
                                                  const double* out_given, std::int64_t heads_per_group) {
  const cuda::AttentionLaunch p = launch_of(s, o, GpuDType::bf16, "");
  const cuda::AttentionLaunch pb = backward_launch_of(p, o);
  const std::string why = cuda::chunked_backward_unsupported(pb);
  if (!why.empty()) throw UserError(fmt::format("chunked KATA backward: {}", why));
  require_gpu();
  if (heads_per_group <= 0)
    heads_per_group = cuda::chunked_backward_heads_fitting(pb, gpu::memory_info().free / 2);
  require(heads_per_group >= 1, "chunked KATA backward: the workspace of one (b, h) slice ({:.2f} GB) does not fit "
          "half the free device memory", cuda::chunked_backward_workspace_bytes(pb, 1) / 1e9);
  heads_per_group = std::min(heads_per_group, s.B * s.H);
  return backward_on_host_data(AttentionForm::chunked, p, s, q, k, v, dout, out_given,
                               cuda::chunked_backward_workspace_bytes(pb, heads_per_group),
                               [&](const cuda::AttentionGradPtrs& a, const gpu::Stream& st) {
                                 gpu::Handles hd(st);
                                 cuda::launch_chunked_backward(pb, a, heads_per_group, hd.blas(), st.get());
                                 st.synchronize();
                               });
}

GpuTiming time_attention_cuda(AttentionForm form, const AttentionShape& s, const AttentionOptions& o, GpuDType t,
                              int warmup, int repeats, std::uint64_t seed, const std::string& variant) {
  require_gpu();
  if (repeats < 1 || warmup < 0) throw UserError("--repeats must be >= 1 and --warmup >= 0");
  const cuda::AttentionLaunch p = launch_of(s, o, t, variant);
  GpuTiming r;
  r.workspace_bytes = workspace_for(form, p);
  gpu::Stream stream;
  gpu::Tensor dq = device_tensor(s.qk_size(), t), dk = device_tensor(s.qk_size(), t);
  gpu::Tensor dv = device_tensor(s.v_size(), t), dout = device_tensor(s.v_size(), t);
  gpu::Buffer ws(r.workspace_bytes);
  cuda::fill_normal(dq.raw(), p.dtype, s.qk_size(), seed, 31, 1.f, stream.get());
  cuda::fill_normal(dk.raw(), p.dtype, s.qk_size(), seed, 1, 1.f, stream.get());
  cuda::fill_normal(dv.raw(), p.dtype, s.v_size(), seed, 2, 1.f, stream.get());
  cuda::fill_nan(dout.raw(), p.dtype, s.v_size(), stream.get());
  gpu::Event e0, e1;
  for (int i = 0; i < warmup; ++i) run_form(form, p, dq, dk, dv, dout, ws, stream);
  stream.synchronize();
  for (int i = 0; i < repeats; ++i) {
    e0.record(stream);
    const cuda::KernelVariant& kv = run_form(form, p, dq, dk, dv, dout, ws, stream);
    e1.record(stream);
    r.ms.push_back(gpu::Event::elapsed_ms(e0, e1));
    r.variant = full_name(form, kv);
    r.path = kv.path;
  }
  if (form != AttentionForm::quadratic) {  // one more launch with events between the stages (every variant records them)
    gpu::Event st0, st1;
    cudaEvent_t st[2] = {st0.get(), st1.get()};
    cuda::AttentionLaunch pp = p;
    pp.stage_events = st;
    e0.record(stream);
    run_form(form, pp, dq, dk, dv, dout, ws, stream);
    e1.record(stream);
    r.stage_ms = {gpu::Event::elapsed_ms(e0, st0), gpu::Event::elapsed_ms(st0, st1), gpu::Event::elapsed_ms(st1, e1)};
  }
  r.median_ms = median(r.ms);
  return r;
}

namespace {
std::vector<float> to_f32(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }
}  // namespace

std::vector<double> psi_vjp_cuda(const FeatureMap& map, const std::vector<double>& X, const std::vector<double>& G,
                                 std::int64_t rows) {
  require_gpu();
  const MapParams mp = map.params();
  require(mp.kind != MapKind::Softmax && mp.kind != MapKind::EvenDegree,
          "psi_vjp_cuda: map '{}' has no device psi (deg<2r> and softmax)", map.spec());
  require(static_cast<std::int64_t>(X.size()) == rows * mp.d && static_cast<std::int64_t>(G.size()) == rows * mp.n_features,
          "psi_vjp_cuda: X must be rows x d and G rows x n_psi");
  gpu::Stream stream;
  gpu::Tensor dX({rows * mp.d}, gpu::DType::f32), dG({rows * mp.n_features}, gpu::DType::f32),
      dOut({rows * mp.d}, gpu::DType::f32);
  const auto xf = to_f32(X), gf = to_f32(G);
  dX.upload(xf.data(), stream);
  dG.upload(gf.data(), stream);
  dOut.fill_nan(stream);
  cuda::launch_psi_vjp_rows(cuda::device_map(mp), dX.data<float>(), dG.data<float>(), rows, dOut.data<float>(),
                            stream.get());
  std::vector<float> h(static_cast<std::size_t>(rows * mp.d));
  dOut.download(h.data(), stream);
  stream.synchronize();
  return std::vector<double>(h.begin(), h.end());
}

std::vector<double> psi_cuda(const FeatureMap& map, const std::vector<double>& X, std::int64_t rows) {
  require_gpu();
  const MapParams mp = map.params();
  require(mp.kind != MapKind::Softmax && mp.kind != MapKind::EvenDegree,
          "psi_cuda: map '{}' has no device psi (deg<2r> and softmax)", map.spec());
  require(static_cast<std::int64_t>(X.size()) == rows * mp.d, "psi_cuda: X must be rows x d");
  gpu::Stream stream;
  gpu::Tensor dX({rows * mp.d}, gpu::DType::f32), dOut({rows * mp.n_features}, gpu::DType::f32),
      aux({rows}, gpu::DType::f32);
  const auto xf = to_f32(X);
  dX.upload(xf.data(), stream);
  dOut.fill_nan(stream);
  cuda::launch_psi_rows(cuda::device_map(mp), dX.data<float>(), rows, dOut.data<float>(), mp.n_features,
                        aux.data<float>(), stream.get());
  std::vector<float> h(static_cast<std::size_t>(rows * mp.n_features));
  dOut.download(h.data(), stream);
  stream.synchronize();
  return std::vector<double>(h.begin(), h.end());
}

GpuCeilings measure_gpu_ceilings(int repeats) {
  require_gpu();
  GpuCeilings c;
  gpu::Stream stream;
  gpu::Event e0, e1;
  auto timed = [&](auto&& fn) {
    fn();
    stream.synchronize();
    std::vector<double> ms;
    for (int i = 0; i < std::max(repeats, 3); ++i) {
      e0.record(stream);
      fn();
      e1.record(stream);
      ms.push_back(gpu::Event::elapsed_ms(e0, e1));
    }
    return median(ms);
  };
  {  // device-to-device copy of 4 GiB
    c.copy_bytes = std::int64_t(1) << 32;
    const auto bytes = static_cast<std::size_t>(c.copy_bytes);
    gpu::Buffer a(bytes), b(bytes);
    cuda::fill_normal(a.get(), gpu::DType::f32, c.copy_bytes / 4, 5, 7, 1.f, stream.get());
    const double ms = timed(
        [&] { MEMCAP_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream.get())); });
    c.copy_gbps = 2.0 * static_cast<double>(c.copy_bytes) / (ms * 1e-3) / 1e9;
  }
  {  // cuBLAS bf16 GEMM, fp32 accumulate, random data
    c.gemm_n = 8192;
    const std::int64_t n = c.gemm_n;
    gpu::Tensor a({n, n}, gpu::DType::bf16), b({n, n}, gpu::DType::bf16), d({n, n}, gpu::DType::bf16);
    cuda::fill_normal(a.raw(), gpu::DType::bf16, n * n, 5, 8, 1.f, stream.get());
    cuda::fill_normal(b.raw(), gpu::DType::bf16, n * n, 5, 9, 1.f, stream.get());
    gpu::Handles h(stream);
    cublasHandle_t blas = h.blas();
    const float alpha = 1.f, beta = 0.f;
    const int ni = static_cast<int>(n);
    auto gemm = [&] {
      MEMCAP_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, a.raw(), CUDA_R_16BF, ni,
                                       b.raw(), CUDA_R_16BF, ni, &beta, d.raw(), CUDA_R_16BF, ni, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT));
    };
    const double ms = timed(gemm);
    c.gemm_tflops = 2.0 * double(n) * double(n) * double(n) / (ms * 1e-3) / 1e12;
  }
  return c;
}
#endif

}  // namespace kata
}  // namespace memcap

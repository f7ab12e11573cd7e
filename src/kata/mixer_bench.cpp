// Forward + backward timing of the MQAR mixer cores (mixer_bench.hpp). Without MEMCAP_HAVE_CUDA the timing entry
// point throws DeviceError; the plan functions (kernel choice, memory) work in every build.
#include "kata/mixer_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "kata/attention.hpp"
#include "kata/attention_cuda.hpp"
#include "kata/attention_features.hpp"
#include "kata/mqar_model.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#include "kata/mqar_mixers.hpp"
#include "kata_attention_backward.cuh"
#include "kata_attention_chunked_backward.cuh"
#include "kata_attention_fill.cuh"
#include "kata_attention_variants.cuh"
#include "kata_mqar_gemm.cuh"
#include "kata_mqar_mixers.cuh"
#endif

namespace memcap::kata {

namespace {

// The MQAR model whose mixer layer has this shape (d_model = H·d, H heads): its kind, map and kernel table.
MqarModel model_of(const MixerBenchItem& it) {
  require(it.B >= 1 && it.H >= 1 && it.T >= 1 && it.d >= 1, "mixer bench: bad shape B = {}, H = {}, T = {}, d = {}",
          it.B, it.H, it.T, it.d);
  MqarModelConfig cfg;
  cfg.mixer = it.mixer;
  cfg.d_model = it.H * it.d;
  cfg.heads = it.H;
  cfg.validate();
  MqarModel m = MqarModel::build(cfg);
  require(m.kind == MixerKind::softmax || m.kind == MixerKind::kata,
          "mixer bench: '{}' is not a softmax or KATA mixer (the forward + backward benchmark covers those)", it.mixer);
  return m;
}

constexpr std::size_t kElem = 4;  // float32 storage

// Bytes of the gemm variant's workspace for `seqs` sequences at once (its T x T blocks per head).
double gemm_seq_bytes(const MqarModel& m, std::int64_t T) { return mqar_gemm_bytes_per_sequence(m, T); }

std::size_t io_bytes(const MixerBenchItem& it) {
  const double N = double(it.B) * double(it.T), D = double(it.H) * double(it.d);
  // q|k|v, their gradients, o, dout, and the per-row statistic (lse or den)
  return static_cast<std::size_t>((N * 3 * D * 2 + N * D * 2 + double(it.B) * double(it.H) * double(it.T)) * kElem);
}

// Sequences the gemm workspace holds at once within `budget` bytes (0: not even one).
std::int64_t gemm_group(const MqarModel& m, const MixerBenchItem& it, double budget) {
  const double per = gemm_seq_bytes(m, it.T);
  if (per <= 0) return 0;
  return std::min<std::int64_t>(it.B, static_cast<std::int64_t>(std::floor(budget / per)));
}

// Budget for the gemm workspace: at most this much of the device's free memory after the I/O buffers.
constexpr double kGemmShareOfFree = 0.8;

}  // namespace

namespace {

constexpr std::int64_t kBenchChunk = 64;  // C of the chunked pair (the forward's tensor-core variants take 64)

// The attention view of a KATA mixer's map (normalized readout) at the item's shape.
AttentionShape attn_shape(const MixerBenchItem& it) {
  AttentionShape s;
  s.B = it.B;
  s.H = it.H;
  s.T = it.T;
  s.d = it.d;
  s.dv = it.d;
  return s;
}
// The chunked backward's own C is the item's (MixerBenchItem::backward_chunk: it recomputes its states, so it need
// not share the forward's C).
AttentionOptions attn_options(const MqarModel& m, const MixerBenchItem& it) {
  AttentionOptions o;
  o.map = m.map;
  o.normalized = true;
  o.chunk = kBenchChunk;
  o.backward_chunk = it.backward_chunk;
  return o;
}

// Why the chunked pair (chunked forward + kernels/kata_attention_chunked_backward.cuh) cannot run this item.
std::string chunked_unsupported(const MqarModel& m, const MixerBenchItem& it) {
  if (m.kind != MixerKind::kata) return "it is the KATA chunked form (softmax has no chunked variant)";
  if (!attention_cuda_built()) return "this build has no CUDA kernels";
  return attention_backward_chunked_unsupported(attn_shape(it), attn_options(m, it));
}

// Why the bf16 tensor-core pair (quadratic forward + kernels/kata_attention_backward.cuh) cannot run this item.
std::string mma_unsupported(const MqarModel& m, const MixerBenchItem& it) {
  if (m.kind != MixerKind::kata) return "it is the KATA tensor-core backward (softmax has no mma variant here)";
  if (!attention_cuda_built()) return "this build has no CUDA kernels";
  return attention_backward_unsupported(attn_shape(it), attn_options(m, it));
}

constexpr std::size_t kBf16 = 2;

}  // namespace

std::string mixer_bench_kernel(const MixerBenchItem& item, std::size_t free_bytes) {
  const MqarModel m = model_of(item);
  const double budget = (static_cast<double>(free_bytes) - static_cast<double>(io_bytes(item))) * kGemmShareOfFree;
  // The bench times forward + backward of the trainer's gemm and tiled variants (gemm-psi, Σ4's training core, is
  // timed against gemm by gpu_test_kata_mqar_mixers' training-shape case; chunked-eval has no backward).
  const auto timed = [](const MixerKernelVariant& v) {
    return v.backward && v.in_auto && std::string(v.name) != "gemm-psi";
  };
  const auto applies = [&](const MixerKernelVariant& v) { return timed(v) && v.applies(m); };
  std::string names;
  for (const auto& v : mqar_mixer_kernels())
    if (timed(v)) names += (names.empty() ? "" : ", ") + std::string(v.name);
  names += ", mma, chunked";
  if (item.kernel == "chunked") {
    const std::string why = chunked_unsupported(m, item);
    require(why.empty(), "mixer bench: kernel 'chunked' does not apply to {} at d_head = {}: {}", item.mixer, item.d,
            why);
    return item.kernel;
  }
  if (item.kernel == "mma") {
    const std::string why = mma_unsupported(m, item);
    require(why.empty(), "mixer bench: kernel '{}' does not apply to {} at d_head = {}: {}", item.kernel, item.mixer,
            item.d, why);
    return item.kernel;
  }
  if (item.kernel == "auto") {
    for (const auto& v : mqar_mixer_kernels()) {
      if (!applies(v)) continue;
      if (std::string(v.name) == "gemm" && gemm_group(m, item, budget) < 1) continue;  // T x T blocks do not fit
      return v.name;
    }
    throw UserError(fmt::format("mixer bench: no mixer kernel applies to {} at d_head = {}, T = {}", item.mixer,
                                item.d, item.T));
  }
  for (const auto& v : mqar_mixer_kernels()) {
    if (item.kernel != v.name) continue;
    require(timed(v), "mixer bench: kernel '{}' is not one the bench times (use {})", item.kernel, names);
    require(applies(v), "mixer bench: kernel '{}' does not apply to {} at d_head = {} ({} covers: {})", item.kernel,
            item.mixer, item.d, v.name, v.what);
    if (std::string(v.name) == "gemm")
      require(gemm_group(m, item, budget) >= 1,
              "mixer bench: kernel gemm needs {:.1f} GB of T x T blocks for one sequence at T = {}; {:.1f} GB are free",
              gemm_seq_bytes(m, item.T) / 1e9, item.T, budget / 1e9);
    return v.name;
  }
  throw UserError(fmt::format("mixer bench: unknown kernel '{}' (auto, {})", item.kernel, names));
}

std::size_t mixer_bench_bytes(const MixerBenchItem& item, const std::string& kernel) {
  const MqarModel m = model_of(item);
  if (kernel == "chunked")  // q, k, v, o, dout, dq, dk, dv in bf16 + the forward's workspace + one head's backward
    return static_cast<std::size_t>(8.0 * double(item.B * item.H * item.T * item.d) * kBf16) +
           chunked_fwdbwd_workspace_bytes(attn_shape(item), attn_options(m, item), 1);
  if (kernel == "mma")  // q, k, v, o, dout, dq, dk, dv in bf16 + 1/z and δ/z per row
    return static_cast<std::size_t>(8.0 * double(item.B * item.H * item.T * item.d) * kBf16 +
                                    2.0 * double(item.B * item.H * item.T) * 4);
  double ws = 0;
  if (kernel == "gemm") {
    ws = gemm_seq_bytes(m, item.T) * double(item.B);  // the largest group; the caller's budget caps it
  } else {
    // the tiled backward's workspace is O(B·H·T) (per-row terms), bounded here by one more q|k|v
    ws = double(item.B) * double(item.T) * double(item.H) * double(item.d) * 3 * kElem;
  }
  return io_bytes(item) + static_cast<std::size_t>(ws);
}

#ifndef MEMCAP_HAVE_CUDA

std::string plan_mixer_bench(const MixerBenchItem&) {
  throw DeviceError("the forward + backward mixer benchmark needs memcap built with CUDA and a GPU (--device cuda)");
}

MixerBenchResult mixer_bench_cuda(const MixerBenchItem&, const std::string&, std::int64_t, int, int, std::uint64_t) {
  throw DeviceError("the forward + backward mixer benchmark needs memcap built with CUDA and a GPU (--device cuda)");
}

#else

namespace {

namespace mc = mqar::cuda;
namespace mx = mqar;

struct Buffers {
  gpu::Buffer qkv, dqkv, o, dout, stat, ws;
  std::size_t ws_bytes = 0;
};

// One forward and one backward of the chosen core on packed q|k|v (ld 3D), outputs o (ld D), stat [B, H, T].
struct Core {
  const MqarModel& m;
  std::string kernel;
  mc::HeadShape hs;
  std::int64_t D;
  Buffers& b;
  cublasHandle_t blas;
  cudaStream_t cs;
  float* q() const { return static_cast<float*>(b.qkv.get()); }
  float* dq() const { return static_cast<float*>(b.dqkv.get()); }
  float* o() const { return static_cast<float*>(b.o.get()); }
  float* st() const { return static_cast<float*>(b.stat.get()); }
  float* dout() const { return static_cast<float*>(b.dout.get()); }
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(hs.dh)); }

  void forward() const {
    const float *qp = q(), *kp = q() + D, *vp = q() + 2 * D;
    if (m.kind == MixerKind::softmax) {
      if (kernel == "gemm")
        mc::softmax_heads_forward_gemm<float>(o(), D, st(), qp, kp, vp, 3 * D, hs, scale(), blas, b.ws.get(),
                                              b.ws_bytes, cs);
      else
        mc::softmax_heads_forward<float>(o(), D, st(), qp, kp, vp, 3 * D, hs, scale(), cs);
    } else {
      const MapParams mp = m.map.params();
      if (kernel == "gemm")
        mc::kata_heads_forward_gemm<float>(o(), D, st(), mp, qp, kp, vp, 3 * D, hs, blas, b.ws.get(), b.ws_bytes, cs);
      else
        mc::kata_heads_forward<float>(o(), D, st(), mp, qp, kp, vp, 3 * D, hs, cs);
    }
  }
  void backward() const {
    const float *qp = q(), *kp = q() + D, *vp = q() + 2 * D;
    float *dqp = dq(), *dkp = dq() + D, *dvp = dq() + 2 * D;
    if (m.kind == MixerKind::softmax) {
      if (kernel == "gemm")
        mc::softmax_heads_backward_gemm<float>(dqp, dkp, dvp, 3 * D, dout(), o(), D, qp, kp, vp, 3 * D, st(), hs,
                                               scale(), blas, b.ws.get(), b.ws_bytes, cs);
      else
        mc::softmax_heads_backward<float>(dqp, dkp, dvp, 3 * D, dout(), o(), D, qp, kp, vp, 3 * D, st(), hs, scale(),
                                          b.ws.get(), cs);
    } else {
      const MapParams mp = m.map.params();
      if (kernel == "gemm")
        mc::kata_heads_backward_gemm<float>(dqp, dkp, dvp, 3 * D, dout(), o(), D, mp, qp, kp, vp, 3 * D, st(), hs, blas,
                                            b.ws.get(), b.ws_bytes, cs);
      else
        mc::kata_heads_backward<float>(dqp, dkp, dvp, 3 * D, dout(), o(), D, mp, qp, kp, vp, 3 * D, st(), hs,
                                       b.ws.get(), cs);
    }
  }
};

// Buffers for item's shape; the gemm workspace is capped at `gemm_budget` bytes (whole sequences).
Buffers make_buffers(const MqarModel& m, const MixerBenchItem& it, const std::string& kernel, double gemm_budget) {
  const std::size_t N = static_cast<std::size_t>(it.B * it.T), D = static_cast<std::size_t>(it.H * it.d);
  Buffers b;
  b.qkv = gpu::Buffer(N * 3 * D * kElem);
  b.dqkv = gpu::Buffer(N * 3 * D * kElem);
  b.o = gpu::Buffer(N * D * kElem);
  b.dout = gpu::Buffer(N * D * kElem);
  b.stat = gpu::Buffer(static_cast<std::size_t>(it.B * it.H * it.T) * kElem);
  const mc::HeadShape hs{it.B, it.T, it.H, it.d};
  if (kernel == "gemm") {
    const std::size_t full = m.kind == MixerKind::softmax ? mc::softmax_gemm_workspace_bytes(hs, kElem)
                                                          : mc::kata_gemm_workspace_bytes(m.map.params(), hs, kElem);
    const std::int64_t group = std::max<std::int64_t>(1, gemm_group(m, it, gemm_budget));
    const mc::HeadShape one{group, it.T, it.H, it.d};
    const std::size_t part = m.kind == MixerKind::softmax ? mc::softmax_gemm_workspace_bytes(one, kElem)
                                                          : mc::kata_gemm_workspace_bytes(m.map.params(), one, kElem);
    b.ws_bytes = std::min(full, part);
  } else {
    b.ws_bytes = m.kind == MixerKind::softmax ? mc::softmax_heads_backward_workspace_bytes(hs, kElem)
                                              : mc::kata_heads_backward_workspace_bytes(m.map.params(), hs, kElem);
  }
  b.ws = gpu::Buffer(std::max<std::size_t>(b.ws_bytes, 1));
  return b;
}

std::vector<double> host_normals(std::size_t n, std::uint64_t seed, std::uint64_t stream, double scale) {
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<double>(static_cast<float>(scale * rng::normal(seed, stream, i)));
  return x;
}

double rel(const mx::Mat<double>& got, const mx::Mat<double>& ref) {
  const double den = ref.norm();
  return den > 0 ? (got - ref).norm() / den : (got - ref).norm();
}

// One (sequence, head) of length T against the CPU float64 reference: the largest relative error of o, dq, dk, dv.
double validate(const MqarModel& m, const MixerBenchItem& item, const std::string& kernel, std::int64_t T,
                std::uint64_t seed, const gpu::Stream& st, gpu::Handles& hd) {
  MixerBenchItem one = item;
  one.B = 1;
  one.H = 1;
  one.T = T;
  MqarModelConfig cfg = m.cfg;
  cfg.d_model = item.d;
  cfg.heads = 1;
  const MqarModel m1 = MqarModel::build(cfg);
  Buffers b = make_buffers(m1, one, kernel, 1e18);
  const std::int64_t d = item.d;
  const std::size_t n = static_cast<std::size_t>(T * d);
  const double qk_scale = 1.0 / std::sqrt(std::sqrt(static_cast<double>(d)));
  const auto q = host_normals(n, seed, rng::kQueries, qk_scale), k = host_normals(n, seed, rng::kKeys, qk_scale),
             v = host_normals(n, seed, rng::kValues, 1.0), dout = host_normals(n, seed, rng::kUser + 91, 1.0);
  std::vector<float> packed(n * 3), dpacked(n);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t j = 0; j < d; ++j) {
      const std::size_t i = static_cast<std::size_t>(t * d + j), r = static_cast<std::size_t>(t * 3 * d + j);
      packed[r] = static_cast<float>(q[i]);
      packed[r + static_cast<std::size_t>(d)] = static_cast<float>(k[i]);
      packed[r + static_cast<std::size_t>(2 * d)] = static_cast<float>(v[i]);
      dpacked[i] = static_cast<float>(dout[i]);
    }
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(b.qkv.get(), packed.data(), packed.size() * kElem, cudaMemcpyHostToDevice, st.get()));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(b.dout.get(), dpacked.data(), dpacked.size() * kElem, cudaMemcpyHostToDevice, st.get()));
  const Core core{m1, kernel, mc::HeadShape{1, T, 1, d}, d, b, hd.blas(), st.get()};
  core.forward();
  core.backward();
  std::vector<float> o(n), dq(n * 3);
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(o.data(), b.o.get(), n * kElem, cudaMemcpyDeviceToHost, st.get()));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dq.data(), b.dqkv.get(), n * 3 * kElem, cudaMemcpyDeviceToHost, st.get()));
  st.synchronize();
  auto mat = [&](const std::vector<double>& x) {
    mx::Mat<double> a(T, d);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t j = 0; j < d; ++j) a(t, j) = x[static_cast<std::size_t>(t * d + j)];
    return a;
  };
  auto col = [&](const std::vector<float>& x, std::int64_t ld, std::int64_t c0) {
    mx::Mat<double> a(T, d);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t j = 0; j < d; ++j) a(t, j) = x[static_cast<std::size_t>(t * ld + c0 + j)];
    return a;
  };
  const auto Q = mat(q), K = mat(k), V = mat(v), dO = mat(dout);
  mx::Mat<double> O(T, d), dQ(T, d), dK(T, d), dV(T, d);
  mx::Vec<double> stat(T);
  if (m1.kind == MixerKind::softmax) {
    const double sc = 1.0 / std::sqrt(static_cast<double>(d));
    mx::softmax_head_forward(O, stat, Q, K, V, sc);
    mx::softmax_head_backward(dQ, dK, dV, dO, Q, K, V, O, stat, sc);
  } else {
    mx::kata_head_forward(O, stat, m1.map, Q, K, V);
    mx::kata_head_backward(dQ, dK, dV, dO, m1.map, Q, K, V, O, stat);
  }
  return std::max({rel(col(o, d, 0), O), rel(col(dq, 3 * d, 0), dQ), rel(col(dq, 3 * d, d), dK),
                   rel(col(dq, 3 * d, 2 * d), dV)});
}

// The bf16 pairs' validation: one (sequence, head) slice of T tokens, inputs rounded to bf16, against the float64
// CPU forward and backward (the quadratic form; the chunked one equals it to 1e-12); `grads` runs the GPU pair on
// it (its own forward). Returns the largest relative error of o, dq, dk, dv; NumericError beyond 5e-2.
using GradsOnHost = std::function<GpuAttentionGrads(const AttentionShape&, const AttentionOptions&, const double*,
                                                    const double*, const double*, const double*)>;
double validate_bf16_pair(const MqarModel& m, const MixerBenchItem& item, const std::string& name, std::int64_t T,
                          std::uint64_t seed, const GradsOnHost& grads) {
  const std::int64_t d = item.d;
  const std::size_t n = static_cast<std::size_t>(T * d);
  const double qk_scale = 1.0 / std::sqrt(std::sqrt(static_cast<double>(d)));
  const auto q = round_to_dtype(GpuDType::bf16, host_normals(n, seed, rng::kQueries, qk_scale));
  const auto k = round_to_dtype(GpuDType::bf16, host_normals(n, seed, rng::kKeys, qk_scale));
  const auto v = round_to_dtype(GpuDType::bf16, host_normals(n, seed, rng::kValues, 1.0));
  const auto dout = round_to_dtype(GpuDType::bf16, host_normals(n, seed, rng::kUser + 91, 1.0));
  MixerBenchItem one = item;
  one.B = 1;
  one.H = 1;
  one.T = T;
  const GpuAttentionGrads g = grads(attn_shape(one), attn_options(m, one), q.data(), k.data(), v.data(), dout.data());
  auto mat = [&](const std::vector<double>& x) {
    mx::Mat<double> a(T, d);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t j = 0; j < d; ++j) a(t, j) = x[static_cast<std::size_t>(t * d + j)];
    return a;
  };
  const auto Q = mat(q), K = mat(k), V = mat(v), dO = mat(dout);
  mx::Mat<double> O(T, d), dQ(T, d), dK(T, d), dV(T, d);
  mx::Vec<double> den(T);
  mx::kata_head_forward(O, den, m.map, Q, K, V);
  mx::kata_head_backward(dQ, dK, dV, dO, m.map, Q, K, V, O, den);
  const double err = std::max({rel(mat(g.out), O), rel(mat(g.dq), dQ), rel(mat(g.dk), dK), rel(mat(g.dv), dV)});
  if (!(err < 5e-2))
    throw NumericError(fmt::format("mixer bench: {} {} (d = {}) differs from the float64 CPU reference by {:.3e} "
                                   "(tolerance 5e-2) at T = {}; not timing a wrong kernel",
                                   item.mixer, name, d, err, T));
  return err;
}

// The bf16 pairs' timing buffers: [B,H,T,d] q, k, v (Philox normals generated on the device), o, dout (normals),
// dq, dk, dv; the launch description of the item (normalized readout, C = kBenchChunk).
struct Bf16Io {
  cuda::AttentionLaunch p;
  gpu::Buffer q, k, v, o, dout, dq, dk, dv;
  std::int64_t nel = 0;
  Bf16Io(const MqarModel& m, const MixerBenchItem& item, std::uint64_t seed, const gpu::Stream& st)
      : nel(item.B * item.H * item.T * item.d) {
    const std::size_t bytes = static_cast<std::size_t>(nel) * kBf16;
    for (gpu::Buffer* b : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) *b = gpu::Buffer(bytes);
    p.B = item.B;
    p.H = item.H;
    p.T = item.T;
    p.d = p.dv = static_cast<int>(item.d);
    p.chunk = static_cast<int>(kBenchChunk);
    p.map = attention_map(m.map);
    p.normalized = true;
    p.dtype = gpu::DType::bf16;
    const float qk_scale = static_cast<float>(1.0 / std::sqrt(std::sqrt(static_cast<double>(item.d))));
    cuda::fill_normal(q.get(), gpu::DType::bf16, nel, seed, rng::kQueries, qk_scale, st.get());
    cuda::fill_normal(k.get(), gpu::DType::bf16, nel, seed, rng::kKeys, qk_scale, st.get());
    cuda::fill_normal(v.get(), gpu::DType::bf16, nel, seed, rng::kValues, 1.0f, st.get());
    cuda::fill_normal(dout.get(), gpu::DType::bf16, nel, seed, rng::kUser + 91, 1.0f, st.get());
  }
  cuda::AttentionPtrs fwd(const gpu::Buffer& ws) const {
    cuda::AttentionPtrs a;
    a.q = q.get();
    a.k = k.get();
    a.v = v.get();
    a.out = o.get();
    a.workspace = ws.get();
    a.workspace_bytes = ws.bytes();
    return a;
  }
  cuda::AttentionGradPtrs bwd(void* ws) const {
    cuda::AttentionGradPtrs a;
    a.q = q.get();
    a.k = k.get();
    a.v = v.get();
    a.o = o.get();
    a.dout = dout.get();
    a.dq = dq.get();
    a.dk = dk.get();
    a.dv = dv.get();
    a.workspace = ws;
    return a;
  }
  std::size_t bytes() const { return static_cast<std::size_t>(8 * nel) * kBf16; }
  // NumericError when the first rows of dq hold a non-finite value (bf16 exponent all ones)
  void check_finite(const MixerBenchItem& item, const std::string& name) const {
    std::vector<std::uint16_t> probe(static_cast<std::size_t>(3 * item.d));
    MEMCAP_CUDA_CHECK(cudaMemcpy(probe.data(), dq.get(), probe.size() * kBf16, cudaMemcpyDeviceToHost));
    for (std::uint16_t x : probe)
      if ((x & 0x7f80u) == 0x7f80u)
        throw NumericError(fmt::format("mixer bench: {} {} produced a non-finite gradient", item.mixer, name));
  }
};

// The bf16 mma pair: the quadratic forward's default variant + the tensor-core backward, validated then timed.
MixerBenchResult mixer_bench_mma(const MqarModel& m, const MixerBenchItem& item, const std::string& kernel,
                                 std::int64_t validate_T, int warmup, int repeats, std::uint64_t seed) {
  MixerBenchResult r;
  r.precision = "bf16";
  r.validate_T = std::min(item.T, validate_T);
  r.rel_err = validate_bf16_pair(m, item, kernel, r.validate_T, seed,
                                 [](const AttentionShape& s, const AttentionOptions& o, const double* q,
                                    const double* k, const double* v, const double* dout) {
                                   return attention_backward_cuda(s, o, q, k, v, dout);
                                 });
  gpu::Stream st;
  const Bf16Io io(m, item, seed, st);
  const cuda::AttentionLaunch& p = io.p;
  const cuda::KernelVariant& fv = cuda::select_variant(AttentionForm::quadratic, p, cuda::current_arch());
  gpu::Buffer fws(std::max<std::size_t>(fv.workspace(p), 1)), bws(cuda::quad_backward_workspace_bytes(p));
  r.kernel = kernel + "/" + fv.name;  // the forward's variant after the slash
  r.device_bytes = mixer_bench_bytes(item, kernel) + fv.workspace(p);
  const cuda::AttentionPtrs fa = io.fwd(fws);
  const cuda::AttentionGradPtrs ga = io.bwd(bws.get());
  gpu::Event e0, e1, e2, emid;
  cudaEvent_t split[2] = {emid.get(), emid.get()};  // recorded between the two backward kernels
  cuda::AttentionLaunch pb = p;
  pb.stage_events = split;
  for (int i = 0; i < warmup + repeats; ++i) {
    e0.record(st);
    cuda::launch_attention(AttentionForm::quadratic, p, fa, st.get());
    e1.record(st);
    cuda::launch_quad_backward(pb, ga, st.get());
    e2.record(st);
    e2.synchronize();
    if (i < warmup) continue;
    r.ms_fwd.push_back(gpu::Event::elapsed_ms(e0, e1));
    r.ms_fwdbwd.push_back(gpu::Event::elapsed_ms(e0, e2));
    r.ms_bwd_dq.push_back(gpu::Event::elapsed_ms(e1, emid));
  }
  io.check_finite(item, kernel);
  return r;
}

// The chunked pair: the chunked forward's default variant (C = kBenchChunk) + the chunked O(T) backward
// (kernels/kata_attention_chunked_backward.cu, C = item.backward_chunk), validated (the GPU's own chunked forward,
// then its backward) then timed; the backward's heads per group as many as fit 90 % of the memory left after the buffers.
MixerBenchResult mixer_bench_chunked(const MqarModel& m, const MixerBenchItem& item, std::int64_t validate_T,
                                     int warmup, int repeats, std::uint64_t seed) {
  MixerBenchResult r;
  r.precision = "bf16";
  r.validate_T = std::min(item.T, validate_T);
  r.rel_err = validate_bf16_pair(m, item, "chunked", r.validate_T, seed,
                                 [](const AttentionShape& s, const AttentionOptions& o, const double* q,
                                    const double* k, const double* v, const double* dout) {
                                   return attention_backward_chunked_cuda(s, o, q, k, v, dout);
                                 });
  gpu::Stream st;
  gpu::Handles hd(st);
  const Bf16Io io(m, item, seed, st);
  const cuda::AttentionLaunch& p = io.p;
  cuda::AttentionLaunch pb = p;  // the backward's launch: its own C
  pb.chunk = static_cast<int>(item.backward_chunk);
  const cuda::KernelVariant& fv = cuda::select_variant(AttentionForm::chunked, p, cuda::current_arch());
  gpu::Buffer fws(std::max<std::size_t>(fv.workspace(p), 1));
  const std::size_t free = gpu::memory_info().free;
  const std::int64_t hpg = cuda::chunked_backward_heads_fitting(pb, static_cast<std::size_t>(0.9 * double(free)));
  require(hpg >= 1, "mixer bench: the chunked backward's workspace for one (b, h) slice ({:.2f} GB) does not fit "
          "the {:.2f} GB left", cuda::chunked_backward_workspace_bytes(pb, 1) / 1e9, double(free) / 1e9);
  gpu::Buffer bws(cuda::chunked_backward_workspace_bytes(pb, hpg));
  r.kernel = "chunked/" + std::string(fv.name);  // the forward's variant after the slash
  r.device_bytes = io.bytes() + fws.bytes() + bws.bytes();
  const cuda::AttentionPtrs fa = io.fwd(fws);
  const cuda::AttentionGradPtrs ga = io.bwd(bws.get());
  gpu::Event e0, e1, e2;
  // the backward's stage split, when it runs as one group (consecutive events then time consecutive stages)
  const bool split = hpg >= item.B * item.H;
  std::vector<gpu::Event> ev(cuda::kChunkedBackwardStages);
  std::vector<cudaEvent_t> raw;
  for (const gpu::Event& e : ev) raw.push_back(e.get());
  if (split) pb.stage_events = raw.data();
  std::vector<std::vector<double>> stage_ms(cuda::kChunkedBackwardStages);
  for (int i = 0; i < warmup + repeats; ++i) {
    e0.record(st);
    cuda::launch_attention(AttentionForm::chunked, p, fa, st.get());
    e1.record(st);
    cuda::launch_chunked_backward(pb, ga, hpg, hd.blas(), st.get());
    e2.record(st);
    e2.synchronize();
    if (i < warmup) continue;
    r.ms_fwd.push_back(gpu::Event::elapsed_ms(e0, e1));
    r.ms_fwdbwd.push_back(gpu::Event::elapsed_ms(e0, e2));
    for (int j = 0; split && j < cuda::kChunkedBackwardStages; ++j)
      stage_ms[static_cast<std::size_t>(j)].push_back(gpu::Event::elapsed_ms(j == 0 ? e1 : ev[j - 1], ev[j]));
  }
  for (int j = 0; split && j < cuda::kChunkedBackwardStages; ++j) {
    auto& x = stage_ms[static_cast<std::size_t>(j)];
    std::sort(x.begin(), x.end());
    r.bwd_stages.emplace_back(cuda::kChunkedBackwardStageNames[j], x[x.size() / 2]);
  }
  io.check_finite(item, "chunked");
  return r;
}

}  // namespace

std::string plan_mixer_bench(const MixerBenchItem& item) {
  const std::string kernel = mixer_bench_kernel(item, gpu::memory_info().free);
  // the gemm workspace is capped to what fits when the timing starts; the rest must fit as a whole
  const std::size_t need = kernel == "gemm" ? io_bytes(item) : mixer_bench_bytes(item, kernel);
  gpu::require_device_memory(need, fmt::format("kata bench {} B={} H={} T={} d={} ({})", item.mixer, item.B, item.H,
                                               item.T, item.d, kernel));
  return kernel;
}

MixerBenchResult mixer_bench_cuda(const MixerBenchItem& item, const std::string& kernel, std::int64_t validate_T,
                                  int warmup, int repeats, std::uint64_t seed) {
  require(repeats >= 1 && warmup >= 0 && validate_T >= 1, "mixer bench: repeats >= 1, warmup >= 0, validate-T >= 1");
  const MqarModel m = model_of(item);
  if (kernel == "mma") return mixer_bench_mma(m, item, kernel, validate_T, warmup, repeats, seed);
  if (kernel == "chunked") return mixer_bench_chunked(m, item, validate_T, warmup, repeats, seed);
  gpu::Stream st;
  gpu::Handles hd(st);
  MEMCAP_CUBLAS_CHECK(cublasSetMathMode(hd.blas(), item.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  MixerBenchResult r;
  r.kernel = kernel;
  r.precision = item.tf32 && kernel == "gemm" ? "tf32" : "f32";
  r.validate_T = std::min(item.T, validate_T);
  r.rel_err = validate(m, item, kernel, r.validate_T, seed, st, hd);
  const double tol = r.precision == "tf32" ? 2e-2 : 1e-4;
  if (!(r.rel_err < tol))
    throw NumericError(fmt::format("mixer bench: {} {} (d = {}) differs from the float64 CPU reference by {:.3e} "
                                   "(tolerance {:.0e}) at T = {}; not timing a wrong kernel",
                                   item.mixer, kernel, item.d, r.rel_err, tol, r.validate_T));
  const gpu::MemoryInfo mem = gpu::memory_info();
  const double budget = (static_cast<double>(mem.free) - static_cast<double>(io_bytes(item))) * kGemmShareOfFree;
  Buffers b = make_buffers(m, item, kernel, budget);
  r.device_bytes = io_bytes(item) + b.ws_bytes;
  const std::int64_t N = item.B * item.T, D = item.H * item.d;
  const double qk_scale = 1.0 / std::sqrt(std::sqrt(static_cast<double>(item.d)));
  // v and dout unit normals; the q|k columns are overwritten with N(0, 1/sqrt(d)) rows (same scale as the
  // validation slice), copied in as a 2-D region (row pitch 3D, width 2D)
  cuda::fill_normal(b.qkv.get(), gpu::DType::f32, N * 3 * D, seed, rng::kValues, 1.0f, st.get());
  cuda::fill_normal(b.dout.get(), gpu::DType::f32, N * D, seed, rng::kUser + 91, 1.0f, st.get());
  {
    gpu::Buffer qk(static_cast<std::size_t>(N * 2 * D) * kElem);
    cuda::fill_normal(qk.get(), gpu::DType::f32, N * 2 * D, seed, rng::kKeys, static_cast<float>(qk_scale), st.get());
    MEMCAP_CUDA_CHECK(cudaMemcpy2DAsync(b.qkv.get(), static_cast<std::size_t>(3 * D) * kElem, qk.get(),
                                        static_cast<std::size_t>(2 * D) * kElem, static_cast<std::size_t>(2 * D) * kElem,
                                        static_cast<std::size_t>(N), cudaMemcpyDeviceToDevice, st.get()));
    st.synchronize();
  }
  const Core core{m, kernel, mc::HeadShape{item.B, item.T, item.H, item.d}, D, b, hd.blas(), st.get()};
  gpu::Event e0, e1, e2;
  for (int i = 0; i < warmup + repeats; ++i) {
    e0.record(st);
    core.forward();
    e1.record(st);
    core.backward();
    e2.record(st);
    e2.synchronize();
    if (i < warmup) continue;
    r.ms_fwd.push_back(gpu::Event::elapsed_ms(e0, e1));
    r.ms_fwdbwd.push_back(gpu::Event::elapsed_ms(e0, e2));
  }
  std::vector<float> probe(static_cast<std::size_t>(3 * D));
  MEMCAP_CUDA_CHECK(cudaMemcpy(probe.data(), b.dqkv.get(), probe.size() * kElem, cudaMemcpyDeviceToHost));
  for (float x : probe)
    if (!std::isfinite(x)) throw NumericError(fmt::format("mixer bench: {} {} produced a non-finite gradient", item.mixer, kernel));
  return r;
}

#endif  // MEMCAP_HAVE_CUDA

}  // namespace memcap::kata

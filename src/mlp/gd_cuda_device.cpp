// Device buffers and the per-step kernel sequence of the GPU GD trainer (see gd_cuda_device.hpp).
// Fused step (CE):  fwd partials -> y (+ b_d) -> CE stats -> CE combine (records loss, flags) ->
//                   CE grad (dy partials) -> fused backward (gradient partial arenas) -> Adam (sums
//                   the partials, advances the step): 7 kernels.
// Fused step (MSE): fwd -> y, dy, loss partials -> record -> [CE stats + combine for the argmax
//                   accuracy, only at recorded epochs] -> backward -> Adam.
// cuBLAS step: the nn::cuda layer chain of the CPU reference (gd_train_cpu.cpp) on one gradient arena.
// bf16 step (fused only; CE): forward -> y -> one-pass CE partials (max, argmax, Σ_{p≠t} e^{z−max} and its
//                   V-weighted sum per value split) -> finish (loss, accuracy, dy as bf16, records) -> backward ->
//                   Adam (also writes the bf16 copies of U, G, D the next step reads): 6 kernels. MSE: the fused MSE
//                   step's order, with the bf16 kernels.
#include "mlp/gd_cuda_device.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/error.hpp"
#include "nn_bf16x3.cuh"
#include "nn_gated_mlp_fused.cuh"
#include "nn_gd_bf16.cuh"
#include "nn_layers.cuh"
#include "nn_softmax_ce_fused.cuh"

namespace memcap::mlp {

namespace cu = nn::cuda;
using gpu::DType;
using gpu::Tensor;

namespace {

int sm_count() {
  int dev = 0, n = 0;
  MEMCAP_CUDA_CHECK(cudaGetDevice(&dev));
  MEMCAP_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return std::max(n, 1);
}

std::string env_or(const char* name, const char* fallback) {
  const char* e = std::getenv(name);
  return e && *e ? std::string(e) : std::string(fallback);
}

template <class T>
std::vector<T> convert(const std::vector<double>& v) {
  if constexpr (std::is_same_v<T, double>) return v;
  return std::vector<T>(v.begin(), v.end());
}

std::vector<double> row_major(const Eigen::MatrixXd& M) {
  std::vector<double> out(static_cast<std::size_t>(M.size()));
  Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(out.data(), M.rows(), M.cols()) = M;
  return out;
}

// Variant choice of MEMCAP_GD_KERNEL=auto, from the training loop's time (/summary train_loop_s) on an
// H200, 2026-12-01, d = 64, gd method (experiments/bench/gd_perf_probe.sh; docs/perf.md "GD training
// speed"), ms per step:
//     F x m          fused f32   fused tf32   cublas f32   cublas tf32
//     256 x 64       0.086       0.068        0.052        0.040
//     1024 x 1024    0.165       0.132        0.106        0.071
//     4096 x 512     0.711       0.537        0.402        0.208
//     4096 x 4096    1.631       1.046        0.772        0.426
// cuBLAS wins at every measured size and precision, so auto = cublas; "fused" (d ≤ 128: hidden
// activations and logits never in global memory, 7 kernels a step) stays selectable. Raise
// kFusedAutoMaxFm above 0 if a faster fused kernel takes back the small sizes. Precision bf16 exists only
// as the fused variant (nn_gd_bf16: mma.sync bf16 tensor cores), so auto = fused there.
// Precision bf16x3, H100, 2026-12-07 (`hebb train --method gd,precision=bf16x3,epochs=E`, ms a step from
// E = 1000 minus E = 200; two runs; docs/perf.md "Thirty-eighth session"):
//     d, F x m               f32 cublas    bf16x3 cublas   bf16x3 onepass
//     128, 16384 x 256       5.98 / 5.92   3.79 / 3.58     1.87 / 1.74
// and onepass gave f32's m* on all 21 (point, seed) pairs of the fig2c grid at d = 64, so auto = onepass
// for bf16x3 wherever it applies (d <= kFusedMaxDim, CE loss), else cublas.
constexpr std::int64_t kFusedAutoMaxFm = 0;

}  // namespace

GdCudaPlan make_gd_cuda_plan(std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m, const GdConfig& cfg) {
  GdCudaPlan p;
  if (cfg.precision == "f64") {
    require(!cfg.tf32, "GD precision f64 cannot use TF32 tensor cores (tf32 applies to f32 only)");
    p.precision = "f64";
    p.f64 = true;
  } else if (cfg.precision == "tf32" || (cfg.precision == "f32" && cfg.tf32)) {
    p.precision = "tf32";
    p.tf32 = true;
  } else if (cfg.precision == "f32") {
    p.precision = "f32";
  } else if (cfg.precision == "bf16") {
    require(!cfg.tf32, "GD precision bf16 cannot also take TF32 (choose one of tf32, bf16)");
    p.precision = "bf16";
    p.bf16 = true;
  } else if (cfg.precision == "bf16x3") {
    require(!cfg.tf32, "GD precision bf16x3 cannot also take TF32 (choose one of tf32, bf16x3)");
    p.precision = "bf16x3";
    p.bf16x3 = true;
  } else {
    throw UserError(fmt::format("unknown GD precision '{}': use f32 (exact float32), tf32 (float32 storage, "
                                "TF32 tensor-core products), bf16 (float32 storage and Adam, bf16 tensor-core "
                                "products), bf16x3 (float32 but the two logit products, formed on bf16 tensor cores "
                                "from split operands in three passes) or f64",
                                cfg.precision));
  }
  p.F = F;
  p.P = P;
  p.d = d;
  p.m = m;
  p.ce = cfg.loss == nn::Loss::ce;
  p.bias = cfg.bias;
  p.act = cfg.gate;
  p.epochs = cfg.epochs;
  p.layout = GdLayout::make(m, d, cfg.bias);

  const std::string want = env_or("MEMCAP_GD_KERNEL", "auto");
  const bool fused_ok = cu::fused_mlp_supported(d, d);
  if (p.bf16) {
    require(want == "auto" || want == "fused",
            "GD precision bf16 runs only on the fused kernels (MEMCAP_GD_KERNEL={}); unset it or use precision tf32",
            want);
    require(fused_ok, "GD precision bf16 needs d <= {} (d = {}); use precision tf32 or f32", cu::kFusedMaxDim, d);
    require(!cfg.bias, "GD precision bf16 trains the model without biases (bias=0, spec §2.6); use tf32 or f32 "
                       "for bias=1");
    p.kernel = "fused";
  } else if (p.bf16x3) {
    require(want == "auto" || want == "cublas" || want == "onepass",
            "GD precision bf16x3 runs with the one-pass split-operand CE (MEMCAP_GD_KERNEL=onepass; auto's choice "
            "for loss=ce at d <= 128) or on the cuBLAS layer chain (cublas), not {}",
            want);
    if (want == "onepass") {
      require(fused_ok, "MEMCAP_GD_KERNEL=onepass needs d <= {} (d = {}); unset it", cu::kFusedMaxDim, d);
      require(p.ce, "MEMCAP_GD_KERNEL=onepass replaces the CE loss's logits (loss=ce); unset it for loss=mse");
      p.kernel = "onepass";
    } else {  // auto: onepass wherever it applies (table above), else the cuBLAS chain
      p.kernel = want == "auto" && fused_ok && p.ce ? "onepass" : "cublas";
    }
  } else if (want == "onepass") {
    throw UserError("MEMCAP_GD_KERNEL=onepass applies to GD precision bf16x3 only; unset it");
  } else if (want == "auto") {
    p.kernel = fused_ok && F * m <= kFusedAutoMaxFm ? "fused" : "cublas";
  } else if (want == "fused") {
    require(fused_ok, "MEMCAP_GD_KERNEL=fused needs d <= {} (d = {}); unset it or use cublas", cu::kFusedMaxDim, d);
    p.kernel = "fused";
  } else if (want == "cublas") {
    p.kernel = "cublas";
  } else {
    throw UserError(fmt::format("unknown MEMCAP_GD_KERNEL '{}': use auto, fused, cublas or (precision bf16x3) "
                                "onepass",
                                want));
  }
  // cuBLAS takes 32-bit dimensions; the fused kernels take m < 2^30.
  require(F <= 2147483647LL && P <= 2147483647LL && m <= 1073741823LL,
          "GD training on the GPU needs F, P < 2^31 and m < 2^30 (got F = {}, P = {}, m = {})", F, P, m);

  if (p.kernel == "fused") {
    const int sms = sm_count();
    const std::int64_t B = p.f64 ? cu::fused_tile<double>() : cu::fused_tile<float>();
    const std::int64_t row_tiles = (F + B - 1) / B, unit_tiles = (m + B - 1) / B, value_tiles = (P + B - 1) / B;
    // Grid = tiles x splits; splits chosen against the blocks that fit at once (kernel occupancy).
    static_assert(cu::kBf16Tile == cu::fused_tile<float>(), "bf16 and float fused kernels share the tiling");
    auto slots = [&](int per_sm) { return static_cast<std::int64_t>(per_sm) * sms; };
    const int fwd_occ =
        p.bf16 ? cu::gd_bf16_blocks_per_sm(0, d) : cu::gated_mlp_fused_blocks_per_sm(false, p.f64, p.tf32, d);
    const int bwd_occ =
        p.bf16 ? cu::gd_bf16_blocks_per_sm(1, d) : cu::gated_mlp_fused_blocks_per_sm(true, p.f64, p.tf32, d);
    // The CE kernels over the values (stats and grad; bf16: stats and the one-pass partials) share the value
    // split; size it for the slower-filling one.
    const int ce_occ = p.bf16 ? std::min(cu::gd_bf16_blocks_per_sm(2, d), cu::gd_bf16_blocks_per_sm(3, d))
                              : std::min(cu::softmax_ce_fused_blocks_per_sm(false, p.f64, p.tf32, d),
                                         cu::softmax_ce_fused_blocks_per_sm(true, p.f64, p.tf32, d));
    const std::int64_t fwd_row_tiles = p.bf16 ? (F + cu::gd_bf16_forward_rows(d) - 1) / cu::gd_bf16_forward_rows(d)
                                              : row_tiles;
    p.fwd_splits = cu::fused_splits(fwd_row_tiles, unit_tiles, slots(fwd_occ));
    p.bwd_splits = cu::fused_splits(unit_tiles, row_tiles, slots(bwd_occ));
    p.ce_splits = cu::fused_splits(row_tiles, value_tiles, slots(ce_occ));
    p.out_blocks = cu::gated_mlp_output_blocks(F * d);
    // MEMCAP_GD_SPLITS=F,B,C overrides the forward / backward / CE splits (0 keeps the choice above): a tuning
    // knob for benchmarks; the results do not depend on it beyond float summation order.
    const std::string ov = env_or("MEMCAP_GD_SPLITS", "");
    if (!ov.empty()) {
      long v[3] = {0, 0, 0};
      const char* c = ov.c_str();
      bool ok = true;
      for (int k = 0; k < 3 && ok; ++k) {
        char* e = nullptr;
        v[k] = std::strtol(c, &e, 10);
        ok = e != c && v[k] >= 0 && *e == (k < 2 ? ',' : '\0');
        c = e + (k < 2 && ok ? 1 : 0);
      }
      const std::int64_t max_f = unit_tiles, max_b = row_tiles, max_c = value_tiles;
      require(ok && v[0] <= max_f && v[1] <= max_b && v[2] <= max_c,
              "MEMCAP_GD_SPLITS must be F,B,C: forward splits in [0, {}], backward in [0, {}], CE in [0, {}] (0 = "
              "the default; got '{}')",
              max_f, max_b, max_c, ov);
      if (v[0] > 0) p.fwd_splits = static_cast<int>(v[0]);
      if (v[1] > 0) p.bwd_splits = static_cast<int>(v[1]);
      if (v[2] > 0) p.ce_splits = static_cast<int>(v[2]);
    }
  }
  if (p.kernel == "onepass") {  // the split-operand one-pass CE's value split, sized as the fused CE's
    const std::int64_t slots = static_cast<std::int64_t>(cu::gd_bf16_blocks_per_sm(4, d)) * sm_count();
    p.ce_splits = cu::fused_splits((F + cu::kBf16Tile - 1) / cu::kBf16Tile, cu::bf16_pad_rows(P) / cu::kBf16Tile,
                                   slots);
  }
  const std::string steps = env_or("MEMCAP_GD_GRAPH_STEPS", "16");
  char* end = nullptr;
  const long k = std::strtol(steps.c_str(), &end, 10);
  require(end && *end == '\0' && k >= 1 && k <= 256, "MEMCAP_GD_GRAPH_STEPS must be an integer in [1, 256] (got '{}')",
          steps);
  p.graph_steps = static_cast<int>(k);
  return p;
}

std::size_t gd_cuda_plan_bytes(const GdCudaPlan& p) {
  const double t = p.f64 ? 8 : 4;
  const double F = static_cast<double>(p.F), P = static_cast<double>(p.P), d = static_cast<double>(p.d),
               m = static_cast<double>(p.m), total = static_cast<double>(p.layout.total);
  const bool fused = p.kernel == "fused";
  double b = t * total * (3 + (fused ? p.bwd_splits : 1));     // params, m, v + gradient arena(s)
  b += t * (F * d + P * d + (p.ce ? 0 : F * d)) + 4 * F;        // keys, values, C_f, targets
  b += static_cast<double>(p.epochs) * (sizeof(nn::cuda::AdamScalars) + 8 + 8) + 256;  // schedule, histories, state
  if (fused) {
    b += t * F * d * (p.fwd_splits + 1 + std::max(p.ce_splits, 1));  // y partials, y, dy partials
    b += static_cast<double>(p.ce_splits) * F * (t + 8 + 4) + 3 * t * F;  // CE stats, zt, lse, loss
    b += 16.0 * static_cast<double>(std::max(cu::ce_combine_blocks(p.F), p.bf16 ? cu::ce_finish_blocks(p.F) : 0));
    b += 8.0 * static_cast<double>(p.out_blocks);
    if (p.bf16) {  // bf16 operand copies: keys, values, U, G, D panels, dy
      const double dk = cu::bf16_dk(p.d);
      b += 2.0 * dk * (2.0 * cu::bf16_pad_rows(p.F) + cu::bf16_pad_rows(p.P) + 3.0 * cu::bf16_pad_rows(p.m));
    }
  } else {
    b += t * 4 * F * m;  // a, g, h, dh
    b += t * 2 * F * d;  // y, dy
  }
  if (p.kernel == "onepass") {
    b += static_cast<double>(p.ce_splits) * F * (t + 8 + 4 + t * d) + t * F;  // CE partials, zt
    b += 16.0 * static_cast<double>(cu::ce_finish_blocks(p.F));
    b += 2.0 * 2.0 * static_cast<double>(cu::bf16_pad_rows(p.P)) * cu::bf16_dk(p.d);  // the value planes
  } else if (p.kernel == "cublas") {
    b += t * F * P + (t + 1) * F + 16;  // logits (in-place dlogits), row losses, correct, scalars
    if (p.bf16x3) {  // split operands [y_hi|y_hi|y_lo], [V_hi|V_lo|V_hi]; the two bf16 planes of dlogits (CE)
      b += 2.0 * 3.0 * static_cast<double>(cu::split3_width(p.d)) * (F + P);
      if (p.ce) b += 2.0 * 2.0 * F * static_cast<double>(cu::split_plane_ld(p.P));
    }
  }
  return static_cast<std::size_t>(b);
}

struct GdDevice::Impl {
  GdCudaPlan plan;
  const gpu::Stream* stream;
  DType dt;
  Tensor params, grads, mom1, mom2;  // grads: bwd_splits partial arenas (fused) or one (cublas)
  Tensor x, V, C, targets;
  Tensor sched, hist_loss, hist_correct, state;
  // fused
  Tensor y_part, y, dy_part, st_max, st_oth, st_arg, st_zt, row_lse, row_loss, loss_part, ce_part;
  // fused bf16: operand copies (nn_gd_bf16.cuh layouts)
  Tensor xb, vb, ub, gb, db, dyb;
  // cublas
  Tensor a, h, dh, dy, logits, losses, correct, loss_scalar, n_correct;
  // cublas bf16x3 (nn_bf16x3.cuh layouts): y3 [F][3dp], v3 [P][3dp], dz_hi / dz_lo [F][split_plane_ld(P)]
  Tensor y3, v3, dz_hi, dz_lo;
  // onepass (bf16x3): the value planes [P_pad][DK]; the CE partials use st_max, st_oth, st_arg, st_zt, dy_part, ce_part
  Tensor vbh, vbl;

  Impl(const GdCudaPlan& p, const gpu::Stream& s) : plan(p), stream(&s), dt(p.f64 ? DType::f64 : DType::f32) {
    const std::int64_t F = p.F, P = p.P, d = p.d, m = p.m, n = p.layout.total;
    const bool fused = p.kernel == "fused";
    params = Tensor({n}, dt);
    grads = Tensor({fused ? p.bwd_splits : 1, n}, dt);
    mom1 = Tensor({n}, dt);
    mom2 = Tensor({n}, dt);
    x = Tensor({F, d}, dt);
    V = Tensor({P, d}, dt);
    if (!p.ce) C = Tensor({F, d}, dt);
    targets = Tensor({F}, DType::i32);
    sched = Tensor({p.epochs, static_cast<std::int64_t>(sizeof(cu::AdamScalars))}, DType::u8);
    hist_loss = Tensor({p.epochs}, DType::f64);
    hist_correct = Tensor({p.epochs}, DType::i64);
    state = Tensor({static_cast<std::int64_t>(sizeof(cu::TrainState))}, DType::u8);
    if (fused) {
      y_part = Tensor({p.fwd_splits, F, d}, dt);
      y = Tensor({F, d}, dt);
      dy_part = Tensor({std::max(p.ce_splits, 1), F, d}, dt);
      st_max = Tensor({p.ce_splits, F}, dt);
      st_oth = Tensor({p.ce_splits, F}, DType::f64);
      st_arg = Tensor({p.ce_splits, F}, DType::i32);
      st_zt = Tensor({F}, dt);
      row_lse = Tensor({F}, dt);
      row_loss = Tensor({F}, dt);
      ce_part = Tensor({2 * std::max(cu::ce_combine_blocks(F), p.bf16 ? cu::ce_finish_blocks(F) : 0)}, DType::f64);
      if (!p.ce) loss_part = Tensor({p.out_blocks}, DType::f64);
      if (p.bf16) {
        const std::int64_t dk = cu::bf16_dk(d), Fp = cu::bf16_pad_rows(F), mp = cu::bf16_pad_rows(m);
        xb = Tensor({Fp, dk}, DType::bf16);
        vb = Tensor({cu::bf16_pad_rows(P), dk}, DType::bf16);
        ub = Tensor({mp, dk}, DType::bf16);
        gb = Tensor({mp, dk}, DType::bf16);
        db = Tensor({mp, dk}, DType::bf16);
        dyb = Tensor({Fp, dk}, DType::bf16);
      }
    } else {
      a = Tensor({2, F, m}, dt);  // a then g: one strided-batched GEMM writes both
      h = Tensor({F, m}, dt);
      dh = Tensor({F, m}, dt);
      y = Tensor({F, d}, dt);
      dy = Tensor({F, d}, dt);
    }
    if (p.kernel == "onepass") {
      st_max = Tensor({p.ce_splits, F}, dt);
      st_oth = Tensor({p.ce_splits, F}, DType::f64);
      st_arg = Tensor({p.ce_splits, F}, DType::i32);
      st_zt = Tensor({F}, dt);
      dy_part = Tensor({p.ce_splits, F, d}, dt);
      ce_part = Tensor({2 * cu::ce_finish_blocks(F)}, DType::f64);
      vbh = Tensor({cu::bf16_pad_rows(P), cu::bf16_dk(d)}, DType::bf16);
      vbl = Tensor({cu::bf16_pad_rows(P), cu::bf16_dk(d)}, DType::bf16);
    } else if (p.kernel == "cublas") {
      logits = Tensor({F, P}, dt);
      losses = Tensor({F}, dt);
      correct = Tensor({F}, DType::u8);
      loss_scalar = Tensor({1}, DType::f64);
      n_correct = Tensor({1}, DType::i64);
      if (p.bf16x3) {
        const std::int64_t w3 = 3 * cu::split3_width(d);
        y3 = Tensor({F, w3}, DType::bf16);
        v3 = Tensor({P, w3}, DType::bf16);
        if (p.ce) {
          dz_hi = Tensor({F, cu::split_plane_ld(P)}, DType::bf16);
          dz_lo = Tensor({F, cu::split_plane_ld(P)}, DType::bf16);
        }
      }
    }
    // Gradient partial arenas: entries a kernel never writes (none today) must not be garbage.
    grads.fill_zero(s);
  }

  cu::TrainState* st() const { return static_cast<cu::TrainState*>(state.raw()); }
  // The one-pass CE's partials (precision bf16; bf16x3 with the onepass variant): dy_part holds the numerators.
  cu::CeOnePass one_pass() const {
    cu::CeOnePass op;
    op.max = st_max.data<float>();
    op.rest = st_oth.data<double>();
    op.arg = st_arg.data<std::int32_t>();
    op.zt = st_zt.data<float>();
    op.num = dy_part.data<float>();
    op.block_part = ce_part.data<double>();
    return op;
  }
  const cu::AdamScalars* sch() const { return static_cast<const cu::AdamScalars*>(sched.raw()); }

  template <class T>
  void step(cublasHandle_t blas) {
    const cudaStream_t s = stream->get();
    const GdCudaPlan& p = plan;
    const GdLayout& L = p.layout;
    const std::int64_t F = p.F, P = p.P, d = p.d, m = p.m, n = L.total;
    T* prm = params.data<T>();
    const T* U = prm + L.U;
    const T* G = prm + L.G;
    const T* D = prm + L.D;
    const T* b_u = p.bias ? prm + L.b_u : nullptr;
    const T* b_g = p.bias ? prm + L.b_g : nullptr;
    const T* b_d = p.bias ? prm + L.b_d : nullptr;
    const T* X = x.data<T>();
    const T* Vt = V.data<T>();
    const std::int32_t* tg = targets.data<std::int32_t>();
    double* hl = hist_loss.data<double>();
    long long* hc = reinterpret_cast<long long*>(hist_correct.data<std::int64_t>());
    cu::TrainState* state_dev = st();

    if constexpr (std::is_same_v<T, float>) {
      if (p.bf16) return step_bf16(blas);
    }
    if (p.kernel == "fused") {
      const cu::GatedMlpShape shape{F, d, m, d, p.act};
      cu::CeStats<T> stats{st_max.data<T>(), st_oth.data<double>(), st_arg.data<std::int32_t>(), st_zt.data<T>(),
                           ce_part.data<double>()};
      cu::gated_mlp_forward_fused<T>(y_part.data<T>(), p.fwd_splits, X, U, G, D, b_u, b_g, shape, p.tf32, state_dev, s);
      int n_dy = 1;
      if (p.ce) {
        cu::gated_mlp_output<T>(y.data<T>(), y_part.data<T>(), p.fwd_splits, b_d, F, d, nullptr, nullptr, nullptr,
                                state_dev, s);
        cu::softmax_ce_stats_fused<T>(stats, p.ce_splits, y.data<T>(), Vt, tg, F, P, d, p.tf32, state_dev, false, s);
        cu::softmax_ce_combine<T>(stats, p.ce_splits, tg, F, row_lse.data<T>(), row_loss.data<T>(), state_dev, hl, hc,
                                  false, s);
        cu::softmax_ce_grad_fused<T>(dy_part.data<T>(), p.ce_splits, y.data<T>(), Vt, tg, row_lse.data<T>(),
                                     row_loss.data<T>(), F, P, d, 1.0 / static_cast<double>(F), p.tf32, state_dev, s);
        n_dy = p.ce_splits;
      } else {
        cu::gated_mlp_output<T>(y.data<T>(), y_part.data<T>(), p.fwd_splits, b_d, F, d, C.data<T>(), dy_part.data<T>(),
                                loss_part.data<double>(), state_dev, s);
        cu::record_loss_parts(loss_part.data<double>(), static_cast<int>(p.out_blocks), static_cast<double>(F * d),
                              nullptr, state_dev, hl, nullptr, s);
        cu::softmax_ce_stats_fused<T>(stats, p.ce_splits, y.data<T>(), Vt, tg, F, P, d, p.tf32, state_dev, true, s);
        cu::softmax_ce_combine<T>(stats, p.ce_splits, tg, F, nullptr, nullptr, state_dev, hl, hc, true, s);
      }
      cu::GatedMlpGradOffsets off;
      off.U = L.U;
      off.G = L.G;
      off.D = L.D;
      off.b_u = L.b_u;
      off.b_g = L.b_g;
      off.b_d = L.b_d;
      cu::gated_mlp_backward_fused<T>(grads.data<T>(), n, p.bwd_splits, off, X, dy_part.data<T>(), n_dy, U, G, D, b_u,
                                      b_g, shape, p.tf32, state_dev, s);
      cu::adam_step_gated<T>(prm, grads.data<T>(), p.bwd_splits, n, mom1.data<T>(), mom2.data<T>(), n, sch(), state_dev,
                             cfg_beta1, cfg_beta2, cfg_eps, cfg_wd, cfg_adamw, s);
      return;
    }

    // ---- cuBLAS layer chain (same order as the CPU reference)
    T* gr = grads.data<T>();
    T *dU = gr + L.U, *dG = gr + L.G, *dD = gr + L.D;
    T* db_u = p.bias ? gr + L.b_u : nullptr;
    T* db_g = p.bias ? gr + L.b_g : nullptr;
    T* db_d = p.bias ? gr + L.b_d : nullptr;
    T *A = a.data<T>(), *Gt = A + F * m, *H = h.data<T>(), *dH = dh.data<T>(), *Y = y.data<T>(), *dY = dy.data<T>();
    T* Z = logits.empty() ? nullptr : logits.data<T>();  // none with the one-pass CE
    // Without biases every gradient block is overwritten (beta = 0 GEMMs): no memset. U and G are
    // adjacent in the arena (GdLayout), so [A; G] = X·[U; G]ᵀ and [dU; dG] = [dA; dG]ᵀ·X are one
    // strided-batched GEMM each.
    MEMCAP_ASSERT(L.G == L.U + m * d, "GD layout: G follows U");
    if (p.bias) {
      MEMCAP_CUDA_CHECK(cudaMemsetAsync(gr, 0, static_cast<std::size_t>(n) * sizeof(T), s));
      cu::linear_forward<T>(A, X, U, b_u, F, d, m, blas, s);
      cu::linear_forward<T>(Gt, X, G, b_g, F, d, m, blas, s);
    } else {
      cu::linear_forward_batched<T>(A, X, U, 2, F, d, m, blas, s);
    }
    cu::gated_forward<T>(H, A, Gt, F * m, p.act, s);
    cu::linear_forward<T>(Y, H, D, b_d, F, m, d, blas, s);
    double* ls = loss_scalar.empty() ? nullptr : loss_scalar.data<double>();  // none with the one-pass CE
    std::int64_t* nc = n_correct.empty() ? nullptr : n_correct.data<std::int64_t>();
    bool split = false;  // bf16x3: Z = y Vᵀ and dy = dZ V on bf16 tensor cores from split operands (nn_bf16x3.cuh)
    if constexpr (std::is_same_v<T, float>) {
      if (p.kernel == "onepass") {  // the same products in the one-pass CE: the logits never leave the SM
        using bf = __nv_bfloat16;
        split = true;
        const cu::CeOnePass op = one_pass();
        cu::softmax_ce_partials_bf16x3(op, p.ce_splits, Y, vbh.data<bf>(), vbl.data<bf>(), tg, F, P, d, state_dev, s);
        cu::softmax_ce_finish_f32(op, p.ce_splits, Vt, tg, F, d, 1.0 / static_cast<double>(F), dY, state_dev, hl, hc,
                                  s);
      } else if (p.bf16x3) {
        using bf = __nv_bfloat16;
        split = true;
        cu::split3_linear_forward(Z, y3.data<bf>(), Y, v3.data<bf>(), F, d, P, blas, s);
        if (p.ce) {
          cu::cross_entropy_forward_backward_split(dz_hi.data<bf>(), dz_lo.data<bf>(), losses.data<T>(), Z, tg, F, P,
                                                   correct.data<std::uint8_t>(), ls, nc, 1.0, s);
          cu::record_loss_parts(ls, 1, 1.0, nc, state_dev, hl, hc, s);
          cu::split3_linear_backward_input(dY, dz_hi.data<bf>(), dz_lo.data<bf>(), v3.data<bf>(), F, d, P, blas, s);
        }
      }
    }
    if (!split) cu::linear_forward<T>(Z, Y, Vt, nullptr, F, d, P, blas, s);
    if (p.ce) {
      if (!split) {  // loss, accuracy and dlogits (in place) from one read of the logits
        cu::cross_entropy_forward_backward<T>(Z, losses.data<T>(), Z, tg, F, P, correct.data<std::uint8_t>(), ls, nc,
                                              1.0, s);
        cu::record_loss_parts(ls, 1, 1.0, nc, state_dev, hl, hc, s);
        cu::linear_backward<T>(dY, nullptr, nullptr, Z, Y, Vt, F, d, P, blas, s);
      }
    } else {
      cu::mse_forward<T>(Y, C.data<T>(), F, d, ls, s);
      cu::cross_entropy_forward<T>(losses.data<T>(), Z, tg, F, P, correct.data<std::uint8_t>(), nullptr, nc, s);
      cu::record_loss_parts(ls, 1, 1.0, nc, state_dev, hl, hc, s);
      cu::mse_backward<T>(dY, Y, C.data<T>(), F, d, 1.0, s);
    }
    if (p.bias) {
      cu::linear_backward<T>(dH, dD, db_d, dY, H, D, F, m, d, blas, s);
      cu::gated_backward<T>(A, Gt, dH, A, Gt, F * m, p.act, s);
      cu::linear_backward<T>(nullptr, dU, db_u, A, X, U, F, d, m, blas, s);
      cu::linear_backward<T>(nullptr, dG, db_g, Gt, X, G, F, d, m, blas, s);
    } else {
      cu::linear_backward<T>(dH, nullptr, nullptr, dY, H, D, F, m, d, blas, s);
      cu::linear_weight_grad_batched<T>(dD, dY, H, 1, F, m, d, blas, s);
      cu::gated_backward<T>(A, Gt, dH, A, Gt, F * m, p.act, s);
      cu::linear_weight_grad_batched<T>(dU, A, X, 2, F, d, m, blas, s);  // dU then dG
    }
    cu::adam_step_gated<T>(prm, gr, 1, n, mom1.data<T>(), mom2.data<T>(), n, sch(), state_dev, cfg_beta1, cfg_beta2,
                           cfg_eps, cfg_wd, cfg_adamw, s);
  }

  // The fused step at precision bf16 (no biases: make_gd_cuda_plan refuses them).
  void step_bf16(cublasHandle_t) {
    using bf = __nv_bfloat16;
    const cudaStream_t s = stream->get();
    const GdCudaPlan& p = plan;
    const GdLayout& L = p.layout;
    const std::int64_t F = p.F, P = p.P, d = p.d, n = L.total;
    const int dk = cu::bf16_dk(d);
    float* prm = params.data<float>();
    const std::int32_t* tg = targets.data<std::int32_t>();
    double* hl = hist_loss.data<double>();
    long long* hc = reinterpret_cast<long long*>(hist_correct.data<std::int64_t>());
    cu::TrainState* state_dev = st();
    const cu::GatedMlpShape shape{F, d, p.m, d, p.act};
    bf *Ub = ub.data<bf>(), *Gb = gb.data<bf>(), *Db = db.data<bf>();
    cu::CeStats<float> stats{st_max.data<float>(), st_oth.data<double>(), st_arg.data<std::int32_t>(),
                             st_zt.data<float>(), ce_part.data<double>()};
    // Ub, Gb, Db hold this step's weights: converted at upload, then written by every Adam step (mirror below)
    cu::gated_mlp_forward_bf16(y_part.data<float>(), p.fwd_splits, xb.data<bf>(), Ub, Gb, Db, shape, state_dev, s);
    if (p.ce) {  // one pass over the logits: loss, accuracy and dy (bf16) from the partials
      cu::gated_mlp_output<float>(y.data<float>(), y_part.data<float>(), p.fwd_splits, nullptr, F, d, nullptr, nullptr,
                                  nullptr, state_dev, s);
      const cu::CeOnePass op = one_pass();
      cu::softmax_ce_partials_bf16(op, p.ce_splits, y.data<float>(), vb.data<bf>(), tg, F, P, d, state_dev, s);
      cu::softmax_ce_finish_bf16(op, p.ce_splits, vb.data<bf>(), tg, F, d, 1.0 / static_cast<double>(F), dyb.data<bf>(),
                                 state_dev, hl, hc, s);
    } else {
      cu::gated_mlp_output<float>(y.data<float>(), y_part.data<float>(), p.fwd_splits, nullptr, F, d, C.data<float>(),
                                  dy_part.data<float>(), loss_part.data<double>(), state_dev, s);
      cu::record_loss_parts(loss_part.data<double>(), static_cast<int>(p.out_blocks), static_cast<double>(F * d),
                            nullptr, state_dev, hl, nullptr, s);
      cu::softmax_ce_stats_bf16(stats, p.ce_splits, y.data<float>(), vb.data<bf>(), tg, F, P, d, state_dev, true, s);
      cu::softmax_ce_combine<float>(stats, p.ce_splits, tg, F, nullptr, nullptr, state_dev, hl, hc, true, s);
      cu::sum_rows_to_bf16(dyb.data<bf>(), dy_part.data<float>(), 1, F, d, dk, state_dev, s);
    }
    cu::GatedMlpGradOffsets off;
    off.U = L.U;
    off.G = L.G;
    off.D = L.D;
    cu::gated_mlp_backward_bf16(grads.data<float>(), n, p.bwd_splits, off, xb.data<bf>(), dyb.data<bf>(), Ub, Gb, Db,
                                shape, state_dev, s);
    cu::Bf16Mirror mirror;
    mirror.Ub = Ub;
    mirror.Gb = Gb;
    mirror.Db = Db;
    mirror.U_off = L.U;
    mirror.G_off = L.G;
    mirror.D_off = L.D;
    mirror.m = static_cast<int>(p.m);
    mirror.d_in = static_cast<int>(d);
    mirror.d_out = static_cast<int>(d);
    mirror.dk = dk;
    cu::adam_step_gated<float>(prm, grads.data<float>(), p.bwd_splits, n, mom1.data<float>(), mom2.data<float>(), n,
                               sch(), state_dev, cfg_beta1, cfg_beta2, cfg_eps, cfg_wd, cfg_adamw, s, mirror);
  }

  double cfg_beta1 = 0.9, cfg_beta2 = 0.999, cfg_eps = 1e-8, cfg_wd = 0;
  bool cfg_adamw = false;
};

GdDevice::GdDevice(const GdCudaPlan& plan, const gpu::Stream& stream) : impl_(std::make_unique<Impl>(plan, stream)) {}
GdDevice::~GdDevice() = default;

void GdDevice::set_optimizer(double beta1, double beta2, double eps, double weight_decay, bool adamw) {
  impl_->cfg_beta1 = beta1;
  impl_->cfg_beta2 = beta2;
  impl_->cfg_eps = eps;
  impl_->cfg_wd = weight_decay;
  impl_->cfg_adamw = adamw;
}

void GdDevice::upload_tables(const FactSet& facts) {
  Impl& I = *impl_;
  const gpu::Stream& s = *I.stream;
  auto put = [&](Tensor& t, const std::vector<double>& host) {
    if (I.plan.f64) {
      t.upload(host.data(), s);
      s.synchronize();
    } else {
      const std::vector<float> f = convert<float>(host);
      t.upload(f.data(), s);
      s.synchronize();
    }
  };
  put(I.x, row_major(facts.keys));
  put(I.V, row_major(facts.values));
  if (!I.plan.ce) put(I.C, row_major(facts.targets()));
  if (I.plan.kernel == "onepass")  // the values' two planes, once (constant during training)
    nn::cuda::split_rows_to_bf16(I.vbh.data<__nv_bfloat16>(), I.vbl.data<__nv_bfloat16>(), I.V.data<float>(), I.plan.P,
                                 I.plan.d, nn::cuda::bf16_dk(I.plan.d), s.get());
  else if (I.plan.bf16x3)  // the values' split operand, once (constant during training)
    nn::cuda::split3_bf16(I.v3.data<__nv_bfloat16>(), I.V.data<float>(), I.plan.P, I.plan.d, false, s.get());
  if (I.plan.bf16) {  // the constant operands' bf16 copies, once
    const int dk = nn::cuda::bf16_dk(I.plan.d);
    nn::cuda::sum_rows_to_bf16(I.xb.data<__nv_bfloat16>(), I.x.data<float>(), 1, I.plan.F, I.plan.d, dk, nullptr,
                               s.get());
    nn::cuda::sum_rows_to_bf16(I.vb.data<__nv_bfloat16>(), I.V.data<float>(), 1, I.plan.P, I.plan.d, dk, nullptr,
                               s.get());
    s.synchronize();
  }
  std::vector<std::int32_t> tg(static_cast<std::size_t>(facts.F()));
  for (std::int64_t i = 0; i < facts.F(); ++i) tg[static_cast<std::size_t>(i)] = facts.map[i];
  I.targets.upload(tg.data(), s);
  s.synchronize();
}

void GdDevice::upload_arenas(const std::vector<double>& params, const std::vector<double>& m,
                             const std::vector<double>& v) {
  Impl& I = *impl_;
  const gpu::Stream& s = *I.stream;
  const std::size_t n = static_cast<std::size_t>(I.plan.layout.total);
  MEMCAP_ASSERT(params.size() == n && m.size() == n && v.size() == n, "GD arena sizes");
  auto put = [&](Tensor& t, const std::vector<double>& host) {
    if (I.plan.f64) {
      t.upload(host.data(), s);
    } else {
      const std::vector<float> f = convert<float>(host);
      t.upload(f.data(), s);
      s.synchronize();
    }
  };
  put(I.params, params);
  put(I.mom1, m);
  put(I.mom2, v);
  if (I.plan.bf16) {  // the weights' bf16 copies; from here on every Adam step refreshes them
    const GdLayout& L = I.plan.layout;
    const float* p = I.params.data<float>();
    nn::cuda::gated_mlp_weights_bf16(I.ub.data<__nv_bfloat16>(), I.gb.data<__nv_bfloat16>(), I.db.data<__nv_bfloat16>(),
                                     p + L.U, p + L.G, p + L.D,
                                     nn::cuda::GatedMlpShape{I.plan.F, I.plan.d, I.plan.m, I.plan.d, I.plan.act},
                                     nullptr, s.get());
  }
  s.synchronize();
}

void GdDevice::upload_schedule(const std::vector<cu::AdamScalars>& sched) {
  Impl& I = *impl_;
  MEMCAP_ASSERT(static_cast<std::int64_t>(sched.size()) == I.plan.epochs, "GD schedule length");
  I.sched.upload(sched.data(), *I.stream);
  I.stream->synchronize();
}

void GdDevice::upload_state(const cu::TrainState& st) {
  Impl& I = *impl_;
  I.state.upload(&st, *I.stream);
  I.stream->synchronize();
}

cu::TrainState GdDevice::download_state() {
  Impl& I = *impl_;
  cu::TrainState st;
  I.state.download(&st, *I.stream);
  I.stream->synchronize();
  return st;
}

void GdDevice::download_history(std::int64_t from, std::int64_t to, std::vector<double>& loss,
                                std::vector<long long>& correct) {
  Impl& I = *impl_;
  const std::int64_t n = std::max<std::int64_t>(0, to - from);
  loss.resize(static_cast<std::size_t>(n));
  correct.resize(static_cast<std::size_t>(n));
  if (n == 0) return;
  MEMCAP_ASSERT(from >= 0 && to <= I.plan.epochs, "GD history range");
  const cudaStream_t s = I.stream->get();
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(loss.data(), I.hist_loss.data<double>() + from,
                                    static_cast<std::size_t>(n) * sizeof(double), cudaMemcpyDeviceToHost, s));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(correct.data(), I.hist_correct.data<std::int64_t>() + from,
                                    static_cast<std::size_t>(n) * sizeof(long long), cudaMemcpyDeviceToHost, s));
  I.stream->synchronize();
}

void GdDevice::download_arenas(std::vector<double>* params, std::vector<double>* m, std::vector<double>* v) {
  Impl& I = *impl_;
  const std::size_t n = static_cast<std::size_t>(I.plan.layout.total);
  auto get = [&](const Tensor& t, std::vector<double>* out) {
    if (!out) return;
    out->resize(n);
    if (I.plan.f64) {
      t.download(out->data(), *I.stream);
      I.stream->synchronize();
    } else {
      std::vector<float> f(n);
      t.download(f.data(), *I.stream);
      I.stream->synchronize();
      std::copy(f.begin(), f.end(), out->begin());
    }
  };
  get(I.params, params);
  get(I.mom1, m);
  get(I.mom2, v);
}

void GdDevice::enqueue_step(cublasHandle_t blas) {
  if (impl_->plan.f64)
    impl_->step<double>(blas);
  else
    impl_->step<float>(blas);
}

}  // namespace memcap::mlp
#endif  // MEMCAP_HAVE_CUDA

// GPU path of the closed-form constructions (construct_cuda.hpp): the sketched / exact-K2 / NTK
// stages, the host-side draws of the random matrices, and the public build / probe entry points
// with their memory planning (one counting pass, then the same sequence on a real arena).
#ifdef MEMCAP_HAVE_CUDA
#include "mlp/construct_cuda.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/gpu.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "mlp/construct_cuda_impl.hpp"
#include "mlp/constructions.hpp"
#include "mlp/gd_train.hpp"
#include "mlp_features.cuh"

namespace memcap::mlp {
namespace cudaimpl {

void hebbian_stage(Ctx* c, DeviceArena& a, const DeviceModel& dm, const DeviceFacts& df, const Dims& z,
                   const Tiles& t) {
  double* H = a.take<double>(z.F * t.feat_cols);
  double* W = a.take<double>(z.F * t.feat_cols);
  if (!c) return;
  for (std::int64_t c0 = 0; c0 < z.m; c0 += t.feat_cols) {
    const std::int64_t n = std::min(t.feat_cols, z.m - c0);
    hidden_tile(*c, dm, df.keys, z.F, 0, z.F, c0, n, H, W);
    gemm(*c, true, false, z.d, n, z.F, 1.0 / static_cast<double>(z.F), df.targets, z.F, H, z.F, 0.0, dm.B + c0 * z.d,
         z.d);
  }
}

void ntk_stage(Ctx* c, DeviceArena& a, const DeviceModel& dm, const DeviceFacts& df, const Dims& z, const Tiles& t) {
  double* H = a.take<double>(t.feat_rows * z.m);
  double* CP = a.take<double>(t.feat_rows * z.m);
  if (!c) return;
  for (std::int64_t r0 = 0; r0 < z.F; r0 += t.feat_rows) {
    const std::int64_t T = std::min(t.feat_rows, z.F - r0);
    gemm(*c, false, true, T, z.m, z.d, 1.0, df.keys + r0, z.F, dm.G, z.m, 0.0, H, T);        // K W_gateᵀ
    gemm(*c, false, false, T, z.m, z.d, 1.0, df.targets + r0, z.F, dm.B, z.d, 0.0, CP, T);   // C_f P
    cuda::hadamard(c->s, T * z.m, H, CP);
    gemm(*c, true, false, z.m, z.d, T, 1.0 / static_cast<double>(z.m), H, T, df.keys + r0, z.F, r0 == 0 ? 0.0 : 1.0,
         dm.A, z.m);
  }
  c->zero(dm.bias_up, z.m);
  c->zero(dm.bias_gate, z.m);
  c->zero(dm.bias_out, z.d);
}

}  // namespace cudaimpl

using namespace cudaimpl;

namespace {

// build_mlp's checks, then the width the construction uses.
std::int64_t resolve_width(const MethodSpec& method, const FactSet& fs, std::int64_t width) {
  fs.validate();
  const std::int64_t d = fs.d();
  require(width >= 0, "--width must be >= 1 (got {})", width);
  const std::int64_t k2 = d * (d + 1) / 2;
  switch (method.kind) {
    case MethodKind::sketched:
    case MethodKind::whitened:
    case MethodKind::data_dependent:
    case MethodKind::ntk: break;
    case MethodKind::exact_k2:
      require(width == 0 || width == k2,
              "hebbian:exact-k2 has a fixed width d(d+1)/2 = {} for d = {}; leave --width out (got {})", k2, d,
              width);
      break;
    default:
      throw UserError(fmt::format("method '{}' has no closed-form GPU construction (GD models are trained by "
                                  "train_gd_cuda, then evaluated with evaluate_mlp_cuda)",
                                  method.text));
  }
  return width == 0 ? default_width(method.kind, d) : width;
}

// Random (or exact-K2) first-layer matrices into dm: host draw + upload (bit-identical to the CPU
// path) or the device Philox kernel.
void draw_model(Ctx& c, const MethodSpec& method, const DeviceModel& dm, std::uint64_t seed, bool device_draw) {
  const std::int64_t m = dm.m, d = dm.d;
  if (method.kind == MethodKind::exact_k2) {
    const BilinearFeatureMap f = exact_k2_feature_map(d);
    c.write(dm.A, f.A0.data(), f.A0.size());  // scale 1: A = A0, G = A1
    c.write(dm.G, f.A1.data(), f.A1.size());
    c.sync();
    return;
  }
  if (method.kind == MethodKind::ntk) {
    if (device_draw) {
      cuda::normal_matrix(c.s, m, d, seed, rng::kNtkGate, 1.0, dm.G);
      cuda::normal_matrix(c.s, d, m, seed, rng::kNtkProj, 1.0, dm.B);
      cuda::normalize_columns(c.s, d, m, dm.B);
      return;
    }
    const Eigen::MatrixXd Wg = rng::normal_matrix(m, d, seed, rng::kNtkGate);  // as build_ntk
    Eigen::MatrixXd P = rng::normal_matrix(d, m, seed, rng::kNtkProj);
    for (Eigen::Index j = 0; j < P.cols(); ++j) P.col(j) /= std::max(P.col(j).norm(), 1e-30);
    c.write(dm.G, Wg.data(), Wg.size());
    c.write(dm.B, P.data(), P.size());
    c.sync();
    return;
  }
  const bool scaled = method.kind != MethodKind::data_dependent;  // no 1/√m in the data-dependent variant
  if (device_draw) {
    const double r = scaled ? std::sqrt(1.0 / std::sqrt(static_cast<double>(m))) : 1.0;  // as_mlp: A = √s A0
    cuda::normal_matrix(c.s, m, d, seed, rng::kFeatureA0, r, dm.A);
    cuda::normal_matrix(c.s, m, d, seed, rng::kFeatureA1, r, dm.G);
    return;
  }
  const BilinearFeatureMap f = BilinearFeatureMap::random(m, d, seed, scaled);
  const double r = std::sqrt(f.scale);
  const Eigen::MatrixXd A = r * f.A0, G = r * f.A1;
  c.write(dm.A, A.data(), A.size());
  c.write(dm.G, G.data(), G.size());
  c.sync();
}

struct Request {
  const MethodSpec* method = nullptr;
  const FactSet* facts = nullptr;  // null in a counting pass
  Dims z;
  Tiles t;
  std::uint64_t seed = 0;
  CudaTuning tuning;
  bool careful = true;
  bool evaluate = true;  // probe: build + evaluate; else build only
};

struct Outcome {
  DeviceModel dm;
  std::string note;
  cuda::EvalSummary summary;
  int flags[2] = {0, 0};  // solve_failed, nonfinite
};

// The whole call as one sequence of arena requests; computes when c is non-null.
Outcome run_plan(Ctx* c, DeviceArena& a, const Request& q) {
  const MethodSpec& method = *q.method;
  const Dims& z = q.z;
  Outcome o;
  const DeviceFacts df = layout_facts(a, z);
  o.dm = layout_model(a, z.m, z.d, method.kind == MethodKind::ntk);
  o.dm.gate = method.kind == MethodKind::ntk ? cuda::kGateRelu : cuda::kGateIdentity;
  PerKey pk;
  if (q.evaluate) pk = layout_per_key(a, z);
  int* fl = a.take<int>(2);
  const DeviceFlags flags{fl, fl ? fl + 1 : nullptr};
  if (c) {
    c->zero(fl, 2);
    upload_facts(*c, *q.facts, df);
    draw_model(*c, method, o.dm, q.seed, q.tuning.device_draw);
  }
  const std::size_t mark = a.mark();
  switch (method.kind) {
    case MethodKind::sketched:
    case MethodKind::exact_k2: hebbian_stage(c, a, o.dm, df, z, q.t); break;
    case MethodKind::whitened: {
      const SolveOutcome r = whitened_stage(c, a, o.dm, df, z, q.t, method.ridge, q.careful, flags);
      o.note = fmt::format("{} {}", r.dual ? "dual" : "primal", r.solver);
      break;
    }
    case MethodKind::data_dependent:
      o.note = data_dependent_stage(c, a, o.dm, df, z, q.t, method, q.careful, flags);
      break;
    case MethodKind::ntk: ntk_stage(c, a, o.dm, df, z, q.t); break;
    default: MEMCAP_ASSERT(false, "resolve_width lets only closed-form methods through");
  }
  a.release(mark);
  if (c) {
    cuda::flag_nonfinite(c->s, z.m * z.d, o.dm.A, flags.nonfinite);
    cuda::flag_nonfinite(c->s, z.m * z.d, o.dm.G, flags.nonfinite);
    cuda::flag_nonfinite(c->s, z.m * z.d, o.dm.B, flags.nonfinite);
  }
  if (q.evaluate) {
    evaluate_stage(c, a, pk, o.dm, df, df.keys, z, q.t, false);
    if (c) {
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&o.summary, pk.summary, sizeof(o.summary), cudaMemcpyDeviceToHost, c->s));
      c->read(o.flags, fl, 2);
    }
  } else if (c) {
    c->read(o.flags, fl, 2);
  }
  return o;
}

// Solver workspace estimate (cuSOLVER potrf on the n x n system; outside the arena).
std::size_t solver_bytes(const MethodSpec& method, const Dims& z) {
  if (method.kind != MethodKind::whitened && method.kind != MethodKind::data_dependent) return 0;
  const auto n = static_cast<std::size_t>(std::min(z.m, z.F));
  return (std::size_t(512) * n + (std::size_t(1) << 17)) * sizeof(double);
}

std::size_t plan_bytes(const Request& q) {
  DeviceArena count;
  run_plan(nullptr, count, q);
  return count.peak();
}

std::string describe_size(const char* what, const MethodSpec& method, const Dims& z) {
  return fmt::format("{} of {} (F = {}, P = {}, d = {}, m = {})", what, method.text, z.F, z.P, z.d, z.m);
}

Request make_request(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed,
                     const CudaTuning& tuning, bool evaluate) {
  Request q;
  q.method = &method;
  q.facts = &facts;
  const std::int64_t m = resolve_width(method, facts, width);
  q.z = Dims{facts.F(), facts.P(), facts.d(), m};
  if (evaluate)
    require(facts.P() >= 2, "margins need at least 2 values to have a competitor (P = {})", facts.P());
  q.t = choose_tiles(q.z, tuning.tile);
  q.seed = seed;
  q.tuning = tuning;
  q.evaluate = evaluate;
  return q;
}

void throw_nonfinite(const MethodSpec& method, const Dims& z) {
  throw NumericError(fmt::format("{} construction produced NaN/Inf weights (F = {}, d = {}, m = {})", method.text,
                                 z.F, z.d, z.m));
}

}  // namespace

GatedMLP build_mlp_cuda(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed,
                        gpu::Handles& h, const CudaTuning& tuning) {
  if (method.kind == MethodKind::gd) {  // trained, not constructed: the GD trainer on the same stream
    require(width >= 0, "--width must be >= 1 (got {})", width);
    const std::int64_t m = width == 0 ? default_width(method.kind, facts.d()) : width;
    GatedMLP mlp = train_gd_cuda(facts, m, seed, method.gd, h).mlp;
    mlp.method = method.text;
    mlp.param_count = param_count(method, mlp.width(), facts.d());  // biases included, as build_mlp
    return mlp;
  }
  Request q = make_request(method, facts, width, seed, tuning, false);
  q.careful = true;
  const std::size_t bytes = plan_bytes(q);
  gpu::require_device_memory(bytes + solver_bytes(method, q.z), describe_size("the GPU build", method, q.z));
  Ctx c(h);
  DeviceArena a(bytes, h.stream(), tuning.poison);
  const Outcome o = run_plan(&c, a, q);
  GatedMLP mlp = download_model(c, o.dm);
  if (!mlp.A.allFinite() || !mlp.G.allFinite() || !mlp.B.allFinite()) throw_nonfinite(method, q.z);
  mlp.method = method.text;
  mlp.param_count = param_count(method.kind, q.z.m, q.z.d);
  mlp.solver_note = o.note;
  return mlp;
}

GatedMLP build_mlp_cuda(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed,
                        gpu::Handles& h) {
  return build_mlp_cuda(method, facts, width, seed, h, CudaTuning{});
}

CudaProbe probe_width_cuda(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed,
                           gpu::Handles& h, const CudaTuning& tuning) {
  Request q = make_request(method, facts, width, seed, tuning, true);
  q.careful = false;  // Cholesky without a host sync; redone with the fallback chain if it failed
  const std::size_t bytes = plan_bytes(q);
  gpu::require_device_memory(bytes + solver_bytes(method, q.z), describe_size("the GPU probe", method, q.z));
  Outcome o;
  {
    Ctx c(h);
    DeviceArena a(bytes, h.stream(), tuning.poison);
    o = run_plan(&c, a, q);
  }
  if (o.flags[0]) {
    q.careful = true;
    Ctx c(h);
    DeviceArena a(bytes, h.stream(), tuning.poison);
    o = run_plan(&c, a, q);
  }
  if (o.flags[1]) throw_nonfinite(method, q.z);
  CudaProbe p;
  p.accuracy = o.summary.correct / static_cast<double>(q.z.F);
  p.min_margin = o.summary.min_margin;
  p.solver_note = o.note;
  return p;
}

CudaProbe probe_width_cuda(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed,
                           gpu::Handles& h) {
  return probe_width_cuda(method, facts, width, seed, h, CudaTuning{});
}

std::size_t closed_form_cuda_bytes(const MethodSpec& method, std::int64_t F, std::int64_t P, std::int64_t d,
                                   std::int64_t width) {
  require(F >= 1 && P >= 1 && d >= 1 && width >= 0, "closed_form_cuda_bytes: F, P, d must be >= 1 (got {}, {}, {})",
          F, P, d);
  std::int64_t m = width;
  switch (method.kind) {
    case MethodKind::sketched:
    case MethodKind::whitened:
    case MethodKind::data_dependent:
    case MethodKind::ntk:
    case MethodKind::exact_k2:
      m = method.kind == MethodKind::exact_k2 || width == 0 ? default_width(method.kind, d) : width;
      break;
    default: throw UserError(fmt::format("method '{}' has no closed-form GPU construction", method.text));
  }
  Request q;
  q.method = &method;
  q.z = Dims{F, P, d, m};
  q.t = choose_tiles(q.z, 0);
  q.evaluate = true;
  q.careful = false;
  return plan_bytes(q) + solver_bytes(method, q.z);
}

bool has_cuda_construction(const MethodSpec& method) {
  switch (method.kind) {
    case MethodKind::sketched:
    case MethodKind::exact_k2:
    case MethodKind::whitened:
    case MethodKind::data_dependent:
    case MethodKind::ntk: return true;
    default: return false;
  }
}

Eigen::MatrixXd normal_matrix_cuda(std::int64_t rows, std::int64_t cols, std::uint64_t seed, std::uint64_t stream,
                                   gpu::Handles& h) {
  require(rows >= 0 && cols >= 0, "normal_matrix_cuda: negative shape {} x {}", rows, cols);
  Ctx c(h);
  gpu::Tensor t({std::max<std::int64_t>(rows * cols, 1)}, gpu::DType::f64);
  cuda::normal_matrix(c.s, rows, cols, seed, stream, 1.0, t.data<double>());
  Eigen::MatrixXd out(rows, cols);
  c.read(out.data(), t.data<double>(), rows * cols);
  return out;
}

}  // namespace memcap::mlp
#endif  // MEMCAP_HAVE_CUDA

// GPU evaluation of a gated MLP against all P values (CPU reference: GatedMLP::forward and
// margin::margins_from_outputs): per tile of T keys, hidden (T x m) -> outputs (T x d) -> scores
// (P x T) -> a kernel for argmax / best competitor / margin; nothing F x P or F x m is ever formed.
#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>

#include <limits>

#include "core/gpu.hpp"
#include "mlp/construct_cuda_impl.hpp"
#include "mlp_features.cuh"
#include "mlp_margin.cuh"

namespace memcap::mlp::cudaimpl {

PerKey layout_per_key(DeviceArena& a, const Dims& z) {
  PerKey pk;
  pk.margin = a.take<double>(z.F);
  pk.argmax = a.take<int>(z.F);
  pk.worst = a.take<int>(z.F);
  pk.summary = a.take<cuda::EvalSummary>(1);
  return pk;
}

void evaluate_stage(Ctx* c, DeviceArena& a, const PerKey& pk, const DeviceModel& dm, const DeviceFacts& df,
                    const double* queries, const Dims& z, const Tiles& t, bool normalize) {
  const std::int64_t T0 = t.eval_rows;
  double* up = a.take<double>(T0 * z.m);
  double* gt = a.take<double>(T0 * z.m);
  double* out = a.take<double>(T0 * z.d);
  double* scores = a.take<double>(z.P * T0);
  if (!c) return;
  for (std::int64_t r0 = 0; r0 < z.F; r0 += T0) {
    const std::int64_t T = std::min(T0, z.F - r0);
    hidden_tile(*c, dm, queries, z.F, r0, T, 0, z.m, up, gt);
    gemm(*c, false, true, T, z.d, z.m, 1.0, up, T, dm.B, z.d, 0.0, out, T);  // hidden Bᵀ
    if (dm.bias_out) cuda::add_column_bias(c->s, T, z.d, out, dm.bias_out);
    if (normalize) cuda::normalize_rows(c->s, T, z.d, out);
    gemm(*c, false, true, z.P, T, z.d, 1.0, df.values, z.P, out, T, 0.0, scores, z.P);  // V outᵀ
    cuda::score_margins(c->s, z.P, T, scores, df.map, r0, pk.margin, pk.argmax, pk.worst);
  }
  cuda::summarize(c->s, z.F, pk.margin, pk.argmax, df.map, pk.summary);
}

}  // namespace memcap::mlp::cudaimpl

namespace memcap::mlp {

using namespace cudaimpl;

namespace {

bool has_biases(const GatedMLP& mlp) {
  return mlp.bias_up.size() || mlp.bias_gate.size() || mlp.bias_out.size();
}

Dims checked_dims(const GatedMLP& mlp, const FactSet& facts, const Eigen::MatrixXd& queries) {
  mlp.validate();
  facts.validate();
  require(mlp.dim() == facts.d(), "MLP input dimension {} differs from the fact set's d = {}", mlp.dim(), facts.d());
  require(mlp.B.rows() == facts.values.cols(), "MLP output dimension {} differs from the value dimension {}",
          mlp.B.rows(), facts.values.cols());
  require(queries.rows() == facts.F() && queries.cols() == facts.d(), "queries are {}x{}, expected F x d = {}x{}",
          queries.rows(), queries.cols(), facts.F(), facts.d());
  require(facts.P() >= 2, "margins need at least 2 values to have a competitor (P = {})", facts.P());
  return Dims{facts.F(), facts.P(), facts.d(), mlp.width()};
}

struct EvalPlan {
  DeviceFacts df;
  DeviceModel dm;
  PerKey pk;
  double* queries = nullptr;
};

// Facts, model, (separate queries), per-key results, then the evaluation tiles.
EvalPlan eval_plan(Ctx* c, DeviceArena& a, const GatedMLP& mlp, const FactSet* facts, const Eigen::MatrixXd* queries,
                   const Dims& z, const Tiles& t, bool normalize) {
  EvalPlan p;
  p.df = layout_facts(a, z);
  p.dm = layout_model(a, z.m, z.d, has_biases(mlp));
  p.dm.gate = gate_code(mlp.gate);
  p.queries = queries ? a.take<double>(z.F * z.d) : p.df.keys;
  p.pk = layout_per_key(a, z);
  if (c) {
    upload_facts(*c, *facts, p.df);
    DeviceModel dm = p.dm;  // zero-size biases stay absent (nullptr)
    if (!mlp.bias_up.size()) dm.bias_up = nullptr;
    if (!mlp.bias_gate.size()) dm.bias_gate = nullptr;
    if (!mlp.bias_out.size()) dm.bias_out = nullptr;
    p.dm = dm;
    upload_model(*c, mlp, p.dm);
    if (queries) c->write(p.queries, queries->data(), queries->size());
    c->sync();
  }
  evaluate_stage(c, a, p.pk, p.dm, p.df, p.queries, z, t, normalize);
  return p;
}

std::size_t eval_bytes(const GatedMLP& mlp, const Eigen::MatrixXd* queries, const Dims& z, const Tiles& t) {
  DeviceArena count;
  eval_plan(nullptr, count, mlp, nullptr, queries, z, t, false);
  return count.peak();
}

}  // namespace

CudaProbe evaluate_mlp_cuda(const GatedMLP& mlp, const FactSet& facts, gpu::Handles& h, const CudaTuning& tuning) {
  const Dims z = checked_dims(mlp, facts, facts.keys);
  const Tiles t = choose_tiles(z, tuning.tile);
  const std::size_t bytes = eval_bytes(mlp, nullptr, z, t);
  gpu::require_device_memory(bytes, fmt::format("the GPU evaluation of a width-{} MLP on F = {} facts (P = {}, d = {})",
                                                z.m, z.F, z.P, z.d));
  Ctx c(h);
  DeviceArena a(bytes, h.stream(), tuning.poison);
  const EvalPlan p = eval_plan(&c, a, mlp, &facts, nullptr, z, t, false);
  cuda::EvalSummary s;
  c.read(&s, p.pk.summary);
  CudaProbe r;
  r.accuracy = s.correct / static_cast<double>(z.F);
  r.min_margin = s.min_margin;
  r.solver_note = mlp.solver_note;
  return r;
}

CudaProbe evaluate_mlp_cuda(const GatedMLP& mlp, const FactSet& facts, gpu::Handles& h) {
  return evaluate_mlp_cuda(mlp, facts, h, CudaTuning{});
}

CudaMargins margins_mlp_cuda(const GatedMLP& mlp, const FactSet& facts, const Eigen::MatrixXd& queries,
                             bool normalize, gpu::Handles& h, const CudaTuning& tuning) {
  const Dims z = checked_dims(mlp, facts, queries);
  const Tiles t = choose_tiles(z, tuning.tile);
  const std::size_t bytes = eval_bytes(mlp, &queries, z, t);
  gpu::require_device_memory(bytes, fmt::format("the GPU margins of a width-{} MLP on F = {} facts (P = {}, d = {})",
                                                z.m, z.F, z.P, z.d));
  Ctx c(h);
  DeviceArena a(bytes, h.stream(), tuning.poison);
  const EvalPlan p = eval_plan(&c, a, mlp, &facts, &queries, z, t, normalize);
  CudaMargins r;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  r.per_key = Eigen::VectorXd::Constant(z.F, nan);
  r.worst = Eigen::VectorXi::Constant(z.F, -1);
  r.argmax = Eigen::VectorXi::Constant(z.F, -1);
  cuda::EvalSummary s;
  c.read(r.per_key.data(), p.pk.margin, z.F);
  c.read(r.worst.data(), p.pk.worst, z.F);
  c.read(r.argmax.data(), p.pk.argmax, z.F);
  c.read(&s, p.pk.summary);
  r.accuracy = s.correct / static_cast<double>(z.F);
  r.min_margin = s.min_margin;
  return r;
}

}  // namespace memcap::mlp
#endif  // MEMCAP_HAVE_CUDA

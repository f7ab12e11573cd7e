// `hebb build`: generate or load a fact set, build one MLP construction (spec hebbian.md §2) and
// write both to an HDF5 file (/facts, /mlp, one-row /summary) for `hebb margin --in`.
#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "io/output_file.hpp"
#include "mlp/build_flags.hpp"
#include "mlp/constructions.hpp"
#include "mlp/model_io.hpp"
#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#include "mlp/construct_cuda.hpp"
#endif

namespace {

using namespace memcap;

struct BuildState {
  cli::CommonOptions common;
  mlp::BuildFlags flags;
};

// GPU construction (mlp/construct_cuda.hpp) when the resolved device is cuda and the method has one.
bool gpu_build(const DeviceInfo& dev, const mlp::MethodSpec& method) {
#ifdef MEMCAP_HAVE_CUDA
  return dev.device == Device::cuda && mlp::has_cuda_construction(method);
#else
  (void)dev, (void)method;
  return false;
#endif
}

mlp::GatedMLP build_model(bool on_gpu, const mlp::MethodSpec& method, const mlp::FactSet& fs, std::int64_t width,
                          std::uint64_t seed) {
#ifdef MEMCAP_HAVE_CUDA
  if (on_gpu) {
    gpu::Stream s;
    gpu::Handles h(s);
    return mlp::build_mlp_cuda(method, fs, width, seed, h);
  }
#endif
  (void)on_gpu;
  return mlp::build_mlp(method, fs, width, seed);
}

void run_build(CLI::App* sub, BuildState& st) {
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  require(!st.common.out.empty(), "--out FILE.h5 is required (where the fact set and weights are written)");
  const mlp::ResolvedBuild rb = mlp::resolve_build_flags(st.flags, st.common.seed);
  io::check_output_path(st.common.out);
  const bool on_gpu = gpu_build(prep.ctx.device, rb.method);
  require(prep.ctx.device.device == Device::cpu || st.common.device == "auto" || on_gpu,
          "hebb build has no GPU path for {}; use --device cpu or auto", rb.method.text);

  const auto t0 = std::chrono::steady_clock::now();
  const mlp::FactSet fs = mlp::make_factset(rb.facts);
  const mlp::GatedMLP model = build_model(on_gpu, rb.method, fs, rb.width, st.common.seed);
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  io::OutputFile out(st.common.out, prep.ctx);
  mlp::write_model_facts(out.root(), fs, rb, st.common.seed);
  {
    auto g = out.root().child("mlp");
    mlp::write_mlp(g, model, st.common.seed);
  }
  io::Row row;
  row.set("method", model.method)
      .set("dim", fs.d())
      .set("facts", fs.F())
      .set("values", fs.P())
      .set("width", model.width())
      .set("params", model.param_count)
      .set("seed", static_cast<std::int64_t>(st.common.seed))
      .set("solver", model.solver_note)
      .set("build_s", build_s)
      .set("path", on_gpu ? "cuda" : "cpu")
      .set("status", "ok");
  io::Table t;
  t.append(row);
  out.write_summary(t);
  out.commit();
  fmt::print("method {}  d {}  F {}  P {}  m {}  params {}  seed {}  build {:.3f} s  solver '{}'\n", model.method,
             fs.d(), fs.F(), fs.P(), model.width(), model.param_count, st.common.seed, build_s, model.solver_note);
  fmt::print("wrote {}\n", st.common.out);
}

memcap::cli::Register reg("hebb", 10, [](CLI::App& tool) {
  auto* sub = tool.add_subcommand(
      "build",
      "Build one fact-storing MLP (spec hebbian.md §2) and write the fact set and weights to an HDF5 file.\n"
      "Writes /facts/{keys,values,map} (float64, F x d, P x d, F), /mlp/{A,G,B} (m x d, m x d, d x m; NTK also\n"
      "zero biases) with attributes method, params, gate, solver, and a one-row /summary. Example:\n"
      "  hebb build --method hebbian:whitened --dim 64 --facts 1024 --tied --map permutation --width 512 "
      "--out m.h5");
  auto st = std::make_shared<BuildState>();
  cli::add_common(sub, st->common);
  mlp::add_build_flags(sub, st->flags);
  sub->callback([sub, st] { run_build(sub, *st); });
});

}  // namespace

// `hebb margin`: per-key margins, worst competitors and argmax accuracy (spec hebbian.md §3.1-3.2)
// of a built MLP (--in FILE.h5 from `hebb build`) or of one built here from the same flags.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "core/timing.hpp"
#include "io/output_file.hpp"
#include "margin/margins.hpp"
#include "mlp/build_flags.hpp"
#include "mlp/constructions.hpp"
#include "mlp/model_io.hpp"
#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#include "mlp/construct_cuda.hpp"
#endif

namespace {

using namespace memcap;

struct MarginState {
  cli::CommonOptions common;
  mlp::BuildFlags flags;
  std::string in;
  std::string convention = "normalized";
  double noise = 0;
  std::int64_t tile = 0;
};


// GPU path (mlp/construct_cuda.hpp): resolved device cuda, an output convention it evaluates (raw or
// normalized; kernel-memory margins stay on the CPU) and a model it can build (or one read with --in).
bool gpu_margins(const DeviceInfo& dev, margin::MarginConvention conv, bool from_file, const std::string& method) {
#ifdef MEMCAP_HAVE_CUDA
  return dev.device == Device::cuda && conv != margin::MarginConvention::kernel_memory &&
         (from_file || mlp::has_cuda_construction(mlp::parse_method(method)));
#else
  (void)dev, (void)conv, (void)from_file, (void)method;
  return false;
#endif
}

void run_margin(CLI::App* sub, MarginState& st) {
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  const auto conv = margin::parse_convention(st.convention);
  require(std::isfinite(st.noise) && st.noise >= 0 && st.noise <= 1e6,
          "--noise must be finite and in [0, 1e6] (got {}; keys have unit norm)", st.noise);
  require(sub->get_option("--in")->count() == 0 || !st.in.empty(),
          "--in is an empty file name; give the model file written by 'hebb build' (or drop --in to build one)");
  require(st.tile >= 0, "--tile must be >= 0 (got {})", st.tile);
  const bool on_gpu = gpu_margins(prep.ctx.device, conv, !st.in.empty(), st.flags.method);
  require(prep.ctx.device.device == Device::cpu || st.common.device == "auto" || on_gpu,
          "hebb margin has no GPU path for {}; use --device cpu or auto",
          conv == margin::MarginConvention::kernel_memory ? "--convention kernel" : st.flags.method);
#ifdef MEMCAP_HAVE_CUDA
  std::unique_ptr<gpu::Stream> stream;
  std::unique_ptr<gpu::Handles> handles;
  if (on_gpu) {
    stream = std::make_unique<gpu::Stream>();
    handles = std::make_unique<gpu::Handles>(*stream);
  }
#endif
  mlp::ResolvedBuild rb;
  if (st.in.empty()) {
    rb = mlp::resolve_build_flags(st.flags, st.common.seed);
  } else {
    // a build flag at its default value is no conflict: --print-config writes every option with its value, and
    // the file must read back
    auto set_away_from_default = [&](const char* flag) {
      const CLI::Option* o = sub->get_option(flag);
      if (o->count() == 0) return false;
      if (o->get_expected_max() == 0) return true;  // a flag given
      const auto r = o->results();
      return !(r.size() == 1 && r[0] == o->get_default_str());
    };
    for (const char* flag : {"--method", "--width", "--dim", "--facts", "--values", "--tied", "--map",
                             "--spike-beta", "--spike-target", "--keys", "--values-file"})
      require(!set_away_from_default(flag), "{} builds a model, but --in reads a built one; drop one of them", flag);
  }
  if (!st.common.out.empty()) io::check_output_path(st.common.out);

  const auto t0 = std::chrono::steady_clock::now();
  mlp::FactSet fs;
  mlp::GatedMLP model;
  std::uint64_t seed = st.common.seed;
  if (!st.in.empty()) {
    if (!h5::is_hdf5(st.in)) throw IoError(fmt::format("--in '{}' is missing or not an HDF5 file", st.in));
    const auto f = h5::File::open_read(st.in);
    require(f.exists("facts") && f.exists("mlp"), "--in '{}' has no /facts and /mlp groups (write it with hebb build)",
            st.in);
    fs = mlp::read_factset(f.open_group("facts"));
    const auto g = f.open_group("mlp");
    model = mlp::read_mlp(g);
    seed = static_cast<std::uint64_t>(g.attr_int("seed").value_or(0));
    require(model.dim() == fs.d(), "--in '{}': MLP input dimension {} differs from the fact set's d = {}", st.in,
            model.dim(), fs.d());
    if (!st.common.out.empty()) io::check_output_path(st.common.out);  // --in is open now: never overwrite it
  } else {
    fs = mlp::make_factset(rb.facts);
#ifdef MEMCAP_HAVE_CUDA
    if (on_gpu)
      model = mlp::build_mlp_cuda(rb.method, fs, rb.width, seed, *handles);
    else
#endif
      model = mlp::build_mlp(rb.method, fs, rb.width, seed);
  }
  const double build_s = seconds_since(t0);

  const auto t1 = std::chrono::steady_clock::now();
  const Eigen::MatrixXd queries = margin::noisy_queries(fs.keys, st.noise);
  Eigen::MatrixXd outputs;
  margin::SignalCrosstalk sc;
  Eigen::MatrixXd phiK, phiQ;
  if (conv == margin::MarginConvention::kernel_memory) {
    // Kernel-memory margin (§3.1.1): ŷ_i = Σ_t <φ(k_t), φ(q_i)> c_f(t), φ = the MLP's hidden layer, no 1/F.
    phiK = model.hidden(fs.keys);
    phiQ = st.noise > 0 ? model.hidden(queries) : phiK;
    outputs = margin::kernel_memory_outputs(phiK, phiQ, fs.targets());
  } else if (!on_gpu) {
    outputs = model.forward(queries);
  }
  margin::MarginResult res;
#ifdef MEMCAP_HAVE_CUDA
  if (on_gpu) {  // tiles of keys on the device: hidden -> outputs -> scores -> argmax / margins
    mlp::CudaTuning tuning;
    tuning.tile = st.tile;
    const mlp::CudaMargins g = mlp::margins_mlp_cuda(
        model, fs, queries, conv == margin::MarginConvention::normalized_output, *handles, tuning);
    res.per_key = g.per_key;
    res.worst = g.worst;
    res.argmax = g.argmax;
    res.min_margin = g.min_margin;
    res.accuracy = g.accuracy;
  } else
#endif
    res = margin::margins_from_outputs(outputs, fs.values, fs.map, conv, st.tile);
  if (conv == margin::MarginConvention::kernel_memory)
    sc = margin::signal_crosstalk(phiK, phiQ, outputs, fs.values, fs.targets(), fs.map, res.worst);
  const double eval_s = seconds_since(t1);
  if (std::isnan(res.min_margin) || !res.per_key.allFinite())
    throw NumericError(fmt::format("the margins are not finite (NaN/inf) for this model{}; nothing was written",
                                   st.noise > 0 ? fmt::format(" at --noise {}", st.noise) : std::string()));

  const double mean_margin = res.per_key.mean();
  const std::string job = fmt::format("width={}/seed={}", model.width(), seed);
  io::Row row;
  row.set("job", job)
      .set("method", model.method)
      .set("dim", fs.d())
      .set("facts", fs.F())
      .set("values", fs.P())
      .set("width", model.width())
      .set("params", model.param_count)
      .set("seed", static_cast<std::int64_t>(seed))
      .set("convention", margin::to_string(conv))
      .set("noise", st.noise)
      .set("accuracy", res.accuracy)
      .set("min_margin", res.min_margin)
      .set("mean_margin", mean_margin)
      .set("solver", model.solver_note)
      .set("build_s", build_s)
      .set("eval_s", eval_s)
      .set("path", on_gpu ? "cuda" : "cpu")
      .set("status", "ok");

  fmt::print("{:<28} {:>5} {:>7} {:>7} {:>10} {:>11} {:>9} {:>12} {:>12}\n", "method", "d", "F", "m", "params",
             "convention", "accuracy", "min_margin", "mean_margin");
  fmt::print("{:<28} {:>5} {:>7} {:>7} {:>10} {:>11} {:>9.6f} {:>12.5g} {:>12.5g}\n", model.method, fs.d(), fs.F(),
             model.width(), model.param_count, margin::to_string(conv), res.accuracy, res.min_margin, mean_margin);
  if (!model.solver_note.empty()) fmt::print(stderr, "solver: {}\n", model.solver_note);

  if (st.common.out.empty()) return;
  io::OutputFile out(st.common.out, prep.ctx);
  {
    auto runs = out.root().child("runs");
    // One group per run, named like a sweep job group (job key with '/' -> ','), so single runs and
    // sweeps share one /runs layout.
    auto run = runs.child(fmt::format("width={},seed={}", model.width(), seed));
    const h5::WriteOptions z{true, 0};
    run.write("per_key", std::span<const double>(res.per_key.data(), static_cast<std::size_t>(res.per_key.size())), z);
    std::vector<std::int64_t> worst(res.worst.data(), res.worst.data() + res.worst.size());
    std::vector<std::int64_t> argmax(res.argmax.data(), res.argmax.data() + res.argmax.size());
    run.write("worst", std::span<const std::int64_t>(worst), z);
    run.write("argmax", std::span<const std::int64_t>(argmax), z);
    if (sc.signal.size()) {
      run.write("signal", std::span<const double>(sc.signal.data(), static_cast<std::size_t>(sc.signal.size())), z);
      run.write("crosstalk",
                std::span<const double>(sc.crosstalk.data(), static_cast<std::size_t>(sc.crosstalk.size())), z);
    }
    run.attr("convention", margin::to_string(conv));
    run.attr("noise", st.noise);
    run.attr("noise_seed", static_cast<std::int64_t>(margin::kNoiseSeed));
  }
  io::Table t;
  t.append(row);
  out.write_summary(t);
  out.commit();
  fmt::print("wrote {}\n", st.common.out);
}

memcap::cli::Register reg("hebb", 11, [](CLI::App& tool) {
  auto* sub = tool.add_subcommand(
      "margin",
      "Margins and argmax accuracy of one MLP over all P values (spec hebbian.md §3.1-3.2).\n"
      "Reads a model written by 'hebb build' (--in FILE.h5) or builds one from the same flags.\n"
      "Conventions: normalized = <MLP(k)/||MLP(k)||, v_f - v_j> (default); raw = unnormalized MLP outputs;\n"
      "kernel = kernel-memory margin y_i = sum_t <phi(k_t), phi(q_i)> c_f(t) with the MLP's hidden layer phi\n"
      "(no 1/F, readout ignored). --noise EPS queries k_i + EPS u_i, u_i on the sphere from noise seed 123.\n"
      "Writes /runs/width=M,seed=S/{per_key,worst,argmax[,signal,crosstalk]} (gzip) and a one-row /summary\n"
      "(accuracy, min_margin, mean_margin, params, width, facts, dim, method, seed, path, ...).\n"
      "Example: hebb margin --method hebbian:whitened --dim 32 --facts 128 --width 256 --out margin.h5");
  auto st = std::make_shared<MarginState>();
  cli::add_common(sub, st->common);
  mlp::add_build_flags(sub, st->flags);
  sub->add_option("--in", st->in, "Model file written by 'hebb build' (then the build flags must be left out)");
  sub->add_option("--convention", st->convention, "Margin convention: normalized, raw or kernel")
      ->capture_default_str();
  sub->add_option("--noise", st->noise, "Query noise eps >= 0 (spec §3.2); 0 = clean keys")->capture_default_str();
  sub->add_option("--tile", st->tile, "Rows per score block (0 = automatic: ~128 MiB of scores, at most 1024 rows)")
      ->capture_default_str();
  sub->callback([sub, st] { run_margin(sub, *st); });
});

}  // namespace

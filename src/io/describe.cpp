// The registry of dataset units and descriptions, and the writers that attach them (see describe.hpp).
// Add a line here when a command writes a new column; tests/test_io_describe.cpp lists the names
// the commands write that have no entry yet.
#include "io/describe.hpp"

#include <fmt/format.h>
#include <hdf5_hl.h>

#include <Eigen/Core>
#include <map>
#include <numeric>

#include "core/error.hpp"
#include "core/threads.hpp"


namespace memcap::io {
namespace {

struct Entry {
  const char* name;
  const char* unit;
  const char* text;
};

// name (or "parent/name") -> unit, one line. Units follow CF: "1" dimensionless, "count", "s".
constexpr Entry kEntries[] = {
    // sweep engine and bookkeeping
    {"row", "1", "row number of /summary (dimension scale)"},
    {"job", "", "job key, e.g. width=64/seed=0"},
    {"job_index", "1", "position of the job in the full (unsharded) plan"},
    {"seed", "1", "random seed of the job"},
    {"status", "", "job status (done)"},
    {"wall_s", "s", "wall-clock time of the job"},
    {"path", "", "compute path that ran (cpu / cuda)"},
    {"compute_path", "", "compute path that ran (cpu / cuda, kernel variant)"},
    {"resumed", "1", "1 when the run continued from a checkpoint"},
    {"note", "", "free-text note"},
    {"sweep", "", "name of the swept axis"},
    {"threads", "count", "CPU threads used"},
    // hebb: models, facts, margins
    {"method", "", "construction method spec string, stored verbatim"},
    {"method_id", "1", "position of the method in --methods (numeric /grid axis)"},
    {"dim", "1", "embedding dimension d"},
    {"d", "1", "dimension d"},
    {"facts", "count", "number of stored facts F"},
    {"alpha", "1", "facts per squared dimension, F/d^2"},
    {"beta", "1", "value-code scaling exponent beta"},
    {"width", "count", "hidden width m of the MLP"},
    {"min_width", "count", "smallest hidden width searched"},
    {"max_width", "count", "largest hidden width searched"},
    {"start_width", "count", "hidden width the search started from"},
    {"params", "count", "number of MLP parameters"},
    {"params50", "count", "parameters at the 50% success width m50"},
    {"params100", "count", "parameters at the 100% success width m100"},
    {"params_median", "count", "parameters at the median capacity width"},
    {"params_star", "count", "parameters at the capacity width m*"},
    {"min_margin", "1", "smallest decoding margin over all keys (> 0: every fact is recalled)"},
    {"min_margin_check", "1", "min_margin recomputed by an independent check"},
    {"min_margin_star", "1", "min_margin at the capacity width m*"},
    {"clean_min_margin", "1", "min_margin without noise on the keys"},
    {"mean_margin", "1", "mean decoding margin over keys"},
    {"accuracy", "1", "fraction of keys decoded correctly"},
    {"accuracy_below", "1", "accuracy one search step below m*"},
    {"accuracy_star", "1", "accuracy at the capacity width m*"},
    {"accuracy_curve", "1", "accuracy per evaluation epoch"},
    {"m_min", "count", "smallest width with a successful seed"},
    {"m50", "count", "width at which half of the seeds succeed"},
    {"m100", "count", "width at which every seed succeeds"},
    {"m_median", "count", "median capacity width over seeds"},
    {"m_star", "count", "capacity width m*: smallest width that stores every fact"},
    {"m_below", "count", "largest width that failed, one step below m*"},
    {"found", "1", "1 when the search found a capacity width"},
    {"seeds", "count", "number of seeds"},
    {"probes", "count", "number of widths probed by the search"},
    {"probe_wall_s", "s", "wall time spent in probes"},
    {"threshold", "1", "success threshold of the search"},
    {"note_star", "", "how m* was decided"},
    {"search", "", "search protocol"},
    {"convention", "", "margin convention"},
    {"solver", "", "linear solver used to build the model"},
    {"noise", "1", "query noise level"},
    {"spike_target", "1", "target spike of the fact statistics"},
    {"l_bil", "1", "bilinear-term norm of the fact statistics"},
    {"fact_seed", "1", "seed of the random facts"},
    {"feature_seed", "1", "seed of the random features"},
    {"fit_model", "", "name of the fitted capacity model"},
    {"build_s", "s", "time to build the model"},
    {"eval_s", "s", "time to evaluate"},
    {"total_s", "s", "total run time"},
    {"epochs_run", "count", "training epochs run"},
    {"final_loss", "1", "training loss at the end"},
    {"stopped_early", "1", "1 when training stopped on its criterion before the epoch limit"},
    {"loss", "1", "training loss per evaluation epoch"},
    {"loss_curve", "1", "training loss per evaluation epoch"},
    {"epoch", "count", "epoch of each curve point"},
    {"curve_epoch", "count", "epoch of each curve point"},
    {"per_key", "1", "decoding margin of each key"},
    {"per_key_clean", "1", "decoding margin of each key without noise"},
    {"worst", "1", "index of the competing value with the largest score, per key"},
    {"argmax", "1", "decoded value index per key"},
    {"signal", "1", "signal term of each key's score"},
    {"crosstalk", "1", "crosstalk term of each key's score"},
    {"gamma_seeds", "1", "fitted per-seed constants"},
    {"mlp/A", "1", "MLP first-layer weights (width x d)"},
    {"mlp/G", "1", "MLP gate weights (width x d)"},
    {"mlp/B", "1", "MLP output weights (d x width)"},
    {"facts/keys", "1", "fact keys, one row per fact"},
    {"facts/values", "1", "fact values, one row per fact"},
    {"facts/codes", "1", "value codes, one row per fact"},
    {"probes/m", "count", "width of each probe"},
    {"probes/accuracy", "1", "accuracy of each probe"},
    {"probes/success", "1", "1 when the probe stored every fact"},
    {"probes/min_margin", "1", "min_margin of each probe"},
    {"probes/wall_s", "s", "wall time of each probe"},
    {"probes/cached", "1", "1 when the probe result came from the cache"},
    {"steps", "count", "optimizer steps (full-batch epochs)"},
    {"train_loop_s", "s", "time in the training loop"},
    {"e_k", "1", "key statistic e_k of the fact set (docs/hebb-theory.md)"},
    {"kappa", "1", "key condition statistic kappa (docs/hebb-theory.md)"},
    {"kappa_abs", "1", "absolute-value variant of kappa"},
    {"v_min", "1", "smallest value-code norm statistic"},
    {"v_max", "1", "largest value-code norm statistic"},
    {"l_v", "1", "value-code crosstalk statistic L_V"},
    {"l_v_trunc", "1", "truncated L_V"},
    {"p_key", "1", "key statistic p_key"},
    {"k_max_off", "1", "largest off-diagonal key correlation"},
    {"adam_m", "1", "Adam first moment (checkpoint)"},
    {"adam_v", "1", "Adam second moment (checkpoint)"},
    // kata: feature maps, capacity, bounds, dictionaries
    {"map", "", "feature map spec string"},
    {"map_id", "1", "position of the map in --maps (numeric /grid axis)"},
    {"keys", "", "key source spec string"},
    {"keys_id", "1", "position of the key source in --keys (numeric /grid axis)"},
    {"values", "", "value source"},
    {"d_v", "1", "value dimension"},
    {"d_head", "1", "raw key dimension d_head"},
    {"n_psi", "1", "feature dimension of the map"},
    {"readout", "", "readout rule"},
    {"trials", "count", "trials per K"},
    {"acc_threshold", "1", "accuracy threshold theta of K*_acc"},
    {"psnr_threshold", "1", "pSNR threshold of K*_psnr"},
    {"k_max", "count", "largest K searched"},
    {"k_star_psnr", "count", "largest K with median pSNR above the threshold"},
    {"k_star_acc", "count", "largest K with accuracy above theta"},
    {"k_star_psnr_censored", "1", "1 when K*_psnr reached k_max (a lower bound)"},
    {"k_star_acc_censored", "1", "1 when K*_acc reached k_max (a lower bound)"},
    {"points", "count", "number of K points measured"},
    {"max_deviation", "1", "largest relative deviation of the state readout from the closed form"},
    {"check_tolerance", "1", "tolerance of the readout cross-check"},
    {"K", "count", "number of stored bindings K"},
    {"stage", "", "search stage of the point (grid / bisect)"},
    {"acc", "1", "decode accuracy per K"},
    {"acc_trials", "1", "decode accuracy per K and trial"},
    {"psnr_median", "1", "median pSNR per K"},
    {"psnr_mean_log10", "1", "mean log10 pSNR per K"},
    {"psnr_min", "1", "smallest pSNR per K"},
    {"coherence", "1", "coherence (largest |cosine| between distinct feature vectors)"},
    {"coherence_method", "", "how the coherence was computed"},
    {"coherence_s", "s", "time to compute the coherence"},
    {"psd_coherence", "1", "coherence of the PSD kernel"},
    {"theory_welch_linear", "count", "Welch-bound capacity prediction, linear map"},
    {"theory_welch_psd", "count", "Welch-bound capacity prediction, PSD kernel"},
    {"theory_welch_softmax", "count", "Welch-bound capacity prediction, softmax"},
    {"theory_random_linear", "count", "random-key capacity prediction, linear map"},
    {"theory_random_m1", "count", "random-key capacity prediction, M1 map"},
    {"theory_random_map", "count", "random-key capacity prediction for this map"},
    {"theory_rankin", "count", "Rankin-bound capacity prediction"},
    {"theory_greedy_cap_paper", "count", "greedy spherical-cap prediction (paper formula)"},
    {"theory_greedy_cap_exact", "count", "greedy spherical-cap prediction (exact)"},
    {"T", "count", "number of keys / tokens T"},
    {"D", "1", "feature dimension D"},
    {"p", "1", "probability or exponent parameter p"},
    {"a", "1", "sqrt(eps)"},
    {"eps", "1", "map parameter eps"},
    {"tau", "1", "softmax temperature tau"},
    {"mu", "1", "coherence mu"},
    {"form", "", "bound form"},
    {"value", "1", "value of the bound or quantity"},
    {"meaning", "", "what the value means"},
    {"wall", "1", "wall (bound) value"},
    {"rung", "", "pSNR ladder rung"},
    {"source", "", "source of the rung's formula"},
    {"largest_T", "count", "largest T of the rung"},
    {"threshold_formula", "", "formula of the threshold"},
    {"mc_map", "", "Monte-Carlo check: feature map"},
    {"mc_keys", "", "Monte-Carlo check: key source"},
    {"psnr_welch", "1", "pSNR at the Welch bound"},
    {"log_psnr_welch", "1", "log pSNR at the Welch bound"},
    {"psnr_random_est", "1", "estimated pSNR for random keys"},
    {"psnr_mc_median", "1", "Monte-Carlo median pSNR"},
    {"psnr_mc_q10", "1", "Monte-Carlo 10% quantile of pSNR"},
    {"psnr_mc_q90", "1", "Monte-Carlo 90% quantile of pSNR"},
    {"welch_ceiling", "count", "Welch ceiling"},
    {"welch_d", "1", "Welch dimension"},
    {"welch_mu", "1", "Welch coherence bound"},
    {"exact_cap_lb", "count", "exact cap-packing lower bound"},
    {"log10_exact_cap_lb", "1", "log10 of exact_cap_lb"},
    {"paper_lb", "count", "paper's lower bound"},
    {"log10_paper_lb", "1", "log10 of paper_lb"},
    {"paper_vacuous", "1", "1 when the paper's bound is vacuous"},
    {"mub_d", "1", "MUB dimension"},
    {"mub_s", "1", "MUB parameter s"},
    {"devore_d", "1", "DeVore dimension"},
    {"devore_r", "1", "DeVore degree r"},
    {"devore_s", "1", "DeVore parameter s"},
    {"random_d", "1", "random-code dimension"},
    {"random_d_exact", "1", "random-code dimension (exact)"},
    {"type", "", "dictionary type"},
    {"count", "count", "number of vectors"},
    {"field_size", "1", "finite-field size"},
    {"degree", "1", "polynomial degree"},
    {"vectors", "1", "dictionary vectors, one row each"},
    {"basis_id", "1", "basis of each vector"},
    {"indices", "1", "support indices"},
    {"feature_coherence/map", "", "feature map"},
    {"feature_coherence/value", "1", "coherence of the dictionary under the map"},
    // benchmarks
    {"group", "", "benchmark group"},
    {"kernel", "", "kernel form"},
    {"variant", "", "kernel variant"},
    {"B", "count", "batch size"},
    {"H", "count", "heads"},
    {"chunk", "count", "chunk length"},
    {"dtype", "", "data type"},
    {"repeats", "count", "timed repetitions"},
    {"ms_min", "ms", "fastest repetition"},
    {"ms_median", "ms", "median repetition"},
    {"ms_max", "ms", "slowest repetition"},
    {"stage_ms", "ms", "time of the stage"},
    {"tflops", "TFLOP/s", "achieved throughput"},
    {"gbps", "GB/s", "achieved bandwidth"},
    {"tokens_per_s", "1/s", "tokens per second"},
    {"ceiling_copy_gbps", "GB/s", "measured copy ceiling"},
    {"ceiling_gemm_tflops", "TFLOP/s", "measured GEMM ceiling"},
    {"fraction_of_ceiling", "1", "throughput / ceiling"},
    {"fraction_of_copy_ceiling", "1", "bandwidth / copy ceiling"},
    {"fraction_of_gemm", "1", "throughput / GEMM throughput"},
    {"fraction_of_gemm_ceiling", "1", "throughput / GEMM ceiling"},
    {"fraction_of_gemm_cpu_time", "1", "time / GEMM CPU time"},
    {"construction_gflops", "GFLOP/s", "construction throughput"},
    {"dgemm_gflops", "GFLOP/s", "DGEMM throughput"},
    {"dgemm_gflops_per_cpu_s", "GFLOP/s", "DGEMM throughput per CPU second"},
    {"dgemm_samples", "GFLOP/s", "DGEMM throughput samples"},
    {"peak_rss_gib", "GiB", "peak resident memory"},
    {"rel_err_vs_cpu", "1", "relative error against the CPU reference"},
    {"validated_on", "", "shape the result was validated on"},
    {"flops", "FLOP", "floating-point operations of the stage"},
    {"seconds", "s", "time of the stage"},
    {"cpu_seconds", "s", "CPU time"},
    {"name", "", "stage name"},
};

const std::map<std::string, Description>& registry() {
  static const std::map<std::string, Description> m = [] {
    std::map<std::string, Description> r;
    for (const auto& e : kEntries) r.emplace(e.name, Description{e.unit, e.text});
    return r;
  }();
  return m;
}

std::string basename_of(const std::string& path) {
  const auto s = path.find_last_of('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

// Collects the paths of every dataset below a group.
herr_t collect_cb(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

herr_t attr_names_cb(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

}  // namespace

Description describe(const std::string& name, const std::string& context, bool* known) {
  const auto& r = registry();
  if (known) *known = true;
  if (!context.empty())
    if (auto it = r.find(context + "/" + name); it != r.end()) return it->second;
  if (auto it = r.find(name); it != r.end()) return it->second;
  if (name.rfind("bound_", 0) == 0)  // the margin-sweep theory columns (docs/hebb-theory.md)
    return {"1", fmt::format("theoretical bound '{}' at this point (docs/hebb-theory.md)", name.substr(6))};
  if (known) *known = false;
  return {"", fmt::format("{} (no description registered; see docs/hdf5-schema.md)", name)};
}

std::vector<std::string> described_names() {
  std::vector<std::string> v;
  for (const auto& [k, d] : registry()) v.push_back(k);
  return v;
}

void annotate_datasets(h5::Group& root) {
  std::vector<std::string> paths;
  if (H5Ovisit(root.id(), H5_INDEX_NAME, H5_ITER_NATIVE, collect_cb, &paths) < 0)
    throw IoError(fmt::format("cannot list the datasets of '{}'", root.filename()));
  for (const auto& p : paths) {
    const hid_t id = H5Oopen(root.id(), p.c_str(), H5P_DEFAULT);
    if (id < 0) throw IoError(fmt::format("cannot open dataset '{}' in '{}'", p, root.filename()));
    h5::Group ds(h5::Handle(id, H5Oclose), p, root.filename());
    if (ds.has_attr("units")) continue;
    const auto slash = p.find_last_of('/');
    const std::string parent = slash == std::string::npos ? "" : basename_of(p.substr(0, slash));
    const Description d = describe(basename_of(p), parent);
    ds.attr("units", d.unit);
    ds.attr("long_name", d.text);
  }
}

void write_row_scale(h5::Group& summary, const Table& t) {
  if (summary.exists("row") || t.names.empty()) return;
  std::vector<std::int64_t> rows(t.rows());
  std::iota(rows.begin(), rows.end(), std::int64_t{0});
  summary.write("row", std::span<const std::int64_t>(rows));
  for (const auto& n : t.names) summary.attach_scales(n, {"row"});
}

void write_library_versions(h5::Group& root) {
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  root.attr("hdf5_version", fmt::format("{}.{}.{}", maj, min, rel));
  root.attr("eigen_version", fmt::format("{}.{}.{}", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION));
  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..." -> "0.3.21"
  std::string cfg = blas_config() ? blas_config() : "";
  std::string ver = cfg;
  if (cfg.rfind("OpenBLAS ", 0) == 0) ver = cfg.substr(9, cfg.find(' ', 9) == std::string::npos ? std::string::npos : cfg.find(' ', 9) - 9);
  root.attr("openblas_version", ver);
#if defined(__clang__)
  root.attr("compiler", fmt::format("clang {}", __clang_version__));
#elif defined(__GNUC__)
  root.attr("compiler", fmt::format("gcc {}", __VERSION__));
#else
  root.attr("compiler", "unknown");
#endif
}

std::vector<std::pair<std::string, Cell>> read_attributes(const h5::Group& g) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Aiterate2(g.id(), H5_INDEX_NAME, H5_ITER_INC, &idx, attr_names_cb, &names) < 0)
    throw IoError(fmt::format("cannot list the attributes of {} in '{}'", g.path(), g.filename()));
  std::vector<std::pair<std::string, Cell>> out;
  for (const auto& n : names) {
    h5::Handle a(H5Aopen(g.id(), n.c_str(), H5P_DEFAULT), H5Aclose);
    if (!a.valid()) throw IoError(fmt::format("cannot open attribute '{}' of {} in '{}'", n, g.path(), g.filename()));
    h5::Handle space(H5Aget_space(a.get()), H5Sclose), type(H5Aget_type(a.get()), H5Tclose);
    if (!space.valid() || !type.valid() || H5Sget_simple_extent_npoints(space.get()) != 1) continue;
    switch (H5Tget_class(type.get())) {
      case H5T_STRING: out.emplace_back(n, *g.attr_string(n)); break;
      case H5T_INTEGER: out.emplace_back(n, *g.attr_int(n)); break;
      case H5T_FLOAT: out.emplace_back(n, *g.attr_double(n)); break;
      default: break;
    }
  }
  return out;
}

void write_attributes(h5::Group& g, const std::vector<std::pair<std::string, Cell>>& attrs) {
  for (const auto& [n, c] : attrs) std::visit([&](const auto& v) { g.attr(n, v); }, c);
}

}  // namespace memcap::io

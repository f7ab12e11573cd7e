// Shared pieces of `hebb edit` (edit_common.hpp).
#include "edit_common.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>

#include "core/error.hpp"
#include "nn/edit_data.hpp"
#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#include "mlp/construct_cuda.hpp"
#endif
#include "edit/edit_pipeline.hpp"
#include "mlp/constructions.hpp"
#include "mlp/method.hpp"

namespace memcap::hebb_app {

namespace fs = std::filesystem;

std::string find_edit_data(const std::string& given) {
  const auto ok = [](const fs::path& d) {
    std::error_code ec;
    return fs::exists(d / "book_authors.csv", ec) && fs::exists(d / "author_templates.txt", ec);
  };
  if (!given.empty()) {
    if (!ok(given))
      throw IoError(fmt::format("--data '{}' does not hold book_authors.csv and author_templates.txt", given));
    return given;
  }
  std::vector<fs::path> dirs;
  if (const char* e = std::getenv("MEMCAP_DATA")) dirs.push_back(fs::path(e) / "edit");
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(exe.parent_path().parent_path() / "data" / "edit");
    dirs.push_back(exe.parent_path().parent_path().parent_path() / "data" / "edit");
    dirs.push_back(exe.parent_path().parent_path() / "share" / "memcap" / "data" / "edit");
  }
  if (const char* e = std::getenv("MEMCAP_SRC")) dirs.push_back(fs::path(e) / "data" / "edit");
  dirs.push_back(fs::path("data") / "edit");
  std::string tried;
  for (const auto& d : dirs) {
    if (ok(d)) return d.string();
    tried += (tried.empty() ? "" : ", ") + d.string();
  }
  throw IoError(fmt::format("no fact-editing data (book_authors.csv, author_templates.txt) in {}; pass --data DIR "
                            "(the repository's data/edit)",
                            tried));
}

ExpertBuild build_expert(const std::string& kind, const std::string& method, const mlp::FactSet& facts,
                         std::int64_t width, std::uint64_t seed,
                         const std::function<void(std::int64_t, double)>& on_epoch, bool on_gpu,
                         gpu::Handles* handles) {
  ExpertBuild b;
#ifdef MEMCAP_HAVE_CUDA
  std::unique_ptr<gpu::Stream> own_stream;
  std::unique_ptr<gpu::Handles> own_handles;
  if (on_gpu && !handles) {
    own_stream = std::make_unique<gpu::Stream>();
    own_handles = std::make_unique<gpu::Handles>(*own_stream);
    handles = own_handles.get();
  }
#else
  if (on_gpu) throw DeviceError("this build of hebb has no CUDA support; use --device cpu");
#endif
  const auto t0 = std::chrono::steady_clock::now();
  const mlp::MethodSpec spec = mlp::parse_method(method);
  if (kind == "gd-mse") {
    require(spec.kind == mlp::MethodKind::gd && spec.gd.loss == nn::Loss::mse && spec.gd.gate == nn::Activation::silu &&
                spec.gd.bias,
            "the fact expert must be a gd:edit spec (silu gate, biases, MSE); got '{}'", method);
    mlp::GdConfig cfg = spec.gd;
    cfg.record_every = std::max<std::int64_t>(1, cfg.epochs / 200);
    cfg.on_epoch = on_epoch;
    mlp::GdResult r;
    if (on_gpu) {
#ifdef MEMCAP_HAVE_CUDA
      cfg.precision = "f32";
      r = mlp::train_gd_cuda(facts, width, seed, cfg, *handles);
#else
      throw DeviceError("this build of hebb has no CUDA support; use --device cpu");
#endif
    } else {
      r = mlp::train_gd_cpu(facts, width, seed, cfg);
    }
    b.mlp = std::move(r.mlp);
    b.final_loss = r.final_loss;
    b.epochs_run = r.epochs_run;
    b.stopped_early = r.stopped_early;
    b.loss_curve = std::move(r.loss_curve);
    b.accuracy_curve = std::move(r.accuracy_curve);
    b.curve_epoch = std::move(r.curve_epoch);
  } else if (kind == "data-dependent") {
    require(spec.kind == mlp::MethodKind::data_dependent, "the constructed expert must be hebbian:data-dependent; got '{}'",
            method);
#ifdef MEMCAP_HAVE_CUDA
    if (on_gpu && mlp::has_cuda_construction(spec))
      b.mlp = mlp::build_mlp_cuda(spec, facts, width, seed, *handles);
    else
#endif
      b.mlp = mlp::build_mlp(spec, facts, width, seed);
  } else {
    throw UserError(fmt::format("unknown fact expert '{}': gd or data-dependent", kind));
  }
  b.mlp.method = method;
  b.mlp.param_count = mlp::param_count(spec, b.mlp.width(), facts.d());
  b.accuracy = expert_accuracy_on(b.mlp, facts, on_gpu ? handles : nullptr);
  b.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return b;
}

double expert_accuracy_on(const mlp::GatedMLP& m, const mlp::FactSet& fs, gpu::Handles* handles) {
#ifdef MEMCAP_HAVE_CUDA
  if (handles) return mlp::evaluate_mlp_cuda(m, fs, *handles).accuracy;
#else
  (void)handles;
#endif
  return edit::expert_accuracy(m, fs);
}

namespace {
constexpr const char* kNonfactClassName[nn::kNonfactClasses] = {"prefix", "book", "tail"};
}  // namespace

void set_nonfact_split(io::Row& row, const edit::PromptEval& pre, const edit::PromptEval& post, bool after) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int c = 0; c < nn::kNonfactClasses; ++c) {
    const auto k = static_cast<std::size_t>(c);
    row.set(fmt::format("nf_ce_{}_before", kNonfactClassName[c]), pre.nonfact_ce_class[k])
        .set(fmt::format("nf_ce_{}_after", kNonfactClassName[c]), after ? post.nonfact_ce_class[k] : nan)
        .set(fmt::format("nf_tokens_{}", kNonfactClassName[c]), pre.nonfact_tokens_class[k]);
  }
}

std::string nonfact_split_line(const edit::PromptEval& pre, const edit::PromptEval& post) {
  std::string parts;
  for (int c = 0; c < nn::kNonfactClasses; ++c) {
    const auto k = static_cast<std::size_t>(c);
    const double share = pre.nonfact_tokens > 0 ? static_cast<double>(pre.nonfact_tokens_class[k]) /
                                                      static_cast<double>(pre.nonfact_tokens)
                                                : 0.0;
    parts += fmt::format("  {} {:.4f} -> {:.4f} ({:.1f}% of rows, {:+.4f} of the CE change)", kNonfactClassName[c],
                         pre.nonfact_ce_class[k], post.nonfact_ce_class[k], 100 * share,
                         share * (post.nonfact_ce_class[k] - pre.nonfact_ce_class[k]));
  }
  return "non-fact CE by position:" + parts;
}

}  // namespace memcap::hebb_app

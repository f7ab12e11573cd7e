// `hebb train`: train one gated MLP by gradient descent on a fact set (spec hebbian.md §2.6/§2.7)
// on the CPU (float64 reference) or the GPU, and write it in `hebb build`'s layout (/facts, /mlp)
// plus the loss/accuracy curves (/runs/train) and a one-row /summary, so `hebb margin --in` reads it.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "io/output_file.hpp"
#include "margin/capacity_probe.hpp"
#include "margin/margins.hpp"
#include "mlp/build_flags.hpp"
#include "mlp/constructions.hpp"
#include "mlp/gd_train.hpp"
#include "mlp/model_io.hpp"
#include "sweep/progress.hpp"
#include "sweep/sweep.hpp"
#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#endif

namespace {

using namespace memcap;

struct TrainState {
  cli::CommonOptions common;
  mlp::BuildFlags flags;
  std::int64_t epochs = 0;
  double lr = 0;
  std::string checkpoint;
  double checkpoint_every = 60;
  std::int64_t record_every = 1;
  std::string progress = "auto";
};

// True when the method text already sets option `key` (",key=" or "gd:key=").
bool sets_option(const std::string& text, const std::string& key) {
  return text.find("," + key + "=") != std::string::npos || text.find(":" + key + "=") != std::string::npos;
}

void run_train(CLI::App* sub, TrainState& st) {
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  require(!st.common.out.empty(), "--out FILE.h5 is required (where the fact set, weights and curves are written)");
  // --epochs / --lr become spec options, so the stored method text reproduces the run.
  mlp::BuildFlags flags = st.flags;
  if (sub->get_option("--epochs")->count() > 0) {
    require(!sets_option(flags.method, "epochs"), "--epochs and the method's epochs= both set the epochs; give one");
    flags.method += fmt::format(",epochs={}", st.epochs);
  }
  if (sub->get_option("--lr")->count() > 0) {
    require(!sets_option(flags.method, "lr"), "--lr and the method's lr= both set the learning rate; give one");
    flags.method += fmt::format(",lr={}", st.lr);
  }
  const mlp::ResolvedBuild rb = mlp::resolve_build_flags(flags, st.common.seed);
  require(rb.method.kind == mlp::MethodKind::gd,
          "hebb train trains GD MLPs (--method gd, gd:transformer or gd:edit, with options); build '{}' with "
          "hebb build",
          rb.method.text);
  require(st.record_every >= 1, "--record-every must be >= 1 epoch (got {})", st.record_every);
  require(std::isfinite(st.checkpoint_every) && st.checkpoint_every >= 0,
          "--checkpoint-every must be >= 0 seconds (got {})", st.checkpoint_every);
  io::check_output_path(st.common.out);
  if (!st.checkpoint.empty()) {
    namespace fs = std::filesystem;
    std::error_code e1, e2;
    const fs::path a = fs::weakly_canonical(st.checkpoint, e1), b = fs::weakly_canonical(st.common.out, e2);
    require(e1 || e2 || a != b, "--checkpoint '{}' is the --out file; give the checkpoint its own file name",
            st.checkpoint);
    try {
      io::check_output_path(st.checkpoint);
    } catch (const UserError& e) {
      throw UserError(fmt::format("--checkpoint: {}", e.what()));
    }
  }

  mlp::GdConfig cfg = rb.method.gd;
  cfg.record_every = st.record_every;
  cfg.checkpoint = st.checkpoint;
  cfg.checkpoint_every_s = st.checkpoint_every;

  if (rb.facts.keys_file.empty()) {  // sizes from the flags: refuse what cannot fit before allocating anything
    const std::int64_t F = rb.facts.facts, d = rb.facts.dim, P = rb.facts.values > 0 ? rb.facts.values : F;
    const std::int64_t w = mlp::resolve_width(rb, d);
    const double Fd = static_cast<double>(F), Pd = static_cast<double>(P), dd = static_cast<double>(d),
                 wd = static_cast<double>(w);
    // host: the CPU path's whole training (float64), or the fact set and the model the GPU path keeps on the host
    const double host = prep.ctx.device.device == Device::cuda ? 8 * (5 * Fd * dd + 2 * Pd * dd + 12 * wd * dd)
                                                              : margin::cpu_probe_bytes(rb.method, F, P, d, w);
    sweep::require_memory(host, fmt::format("hebb train with --facts {}, --dim {}, --width {}", F, d, w));
  }
  const mlp::FactSet fs = mlp::make_factset(rb.facts);
  const std::int64_t m = mlp::resolve_width(rb, fs.d());
  sweep::Progress progress(cfg.epochs, st.progress, "hebb train", "epochs");
  cfg.on_epoch = [&progress](std::int64_t done, double loss) { progress.update(done, fmt::format("loss {:.4g}", loss)); };

  const auto t0 = std::chrono::steady_clock::now();
  mlp::GdResult res;
  if (prep.ctx.device.device == Device::cuda) {
#ifdef MEMCAP_HAVE_CUDA
    gpu::Stream stream;
    gpu::Handles handles(stream);
    res = mlp::train_gd_cuda(fs, m, st.common.seed, cfg, handles);
#else
    throw DeviceError("this build of hebb has no CUDA support; use --device cpu");
#endif
  } else {
    res = mlp::train_gd_cpu(fs, m, st.common.seed, cfg);
  }
  progress.update(res.epochs_run, fmt::format("loss {:.4g}", res.final_loss));
  progress.finish();
  const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  mlp::GatedMLP model = std::move(res.mlp);
  model.method = rb.method.text;
  model.param_count = mlp::param_count(rb.method, model.width(), fs.d());
  // Accuracy of the final parameters over all P values, raw-output margins (spec §3.1, §2.6).
  const margin::MarginResult mr =
      margin::margins_from_outputs(model.forward(fs.keys), fs.values, fs.map, margin::MarginConvention::raw_output);

  io::OutputFile out(st.common.out, prep.ctx);
  mlp::write_model_facts(out.root(), fs, rb, st.common.seed);
  {
    auto g = out.root().child("mlp");
    mlp::write_mlp(g, model, st.common.seed);
    g.attr("gd_config", mlp::canonical_gd_spec(cfg));
  }
  {
    auto g = out.root().child("runs").child("train");
    const h5::WriteOptions z{true, 0};
    g.write("loss", std::span<const double>(res.loss_curve), z);
    g.write("accuracy", std::span<const double>(res.accuracy_curve), z);
    g.write("epoch", std::span<const std::int64_t>(res.curve_epoch), z);
    g.attr("gd_config", mlp::canonical_gd_spec(cfg));
    g.attr("record_every", cfg.record_every);
    g.attr("epochs_run", res.epochs_run);
    g.attr("stopped_early", res.stopped_early);
    g.attr("resumed", res.resumed);
    g.attr("final_loss", res.final_loss);
    g.attr("path", res.path);
    g.attr("kernel", res.kernel);
    g.attr("train_loop_s", res.train_loop_s >= 0 ? res.train_loop_s : res.wall_s);
  }
  io::Row row;
  row.set("method", model.method)
      .set("dim", fs.d())
      .set("facts", fs.F())
      .set("values", fs.P())
      .set("width", model.width())
      .set("params", model.param_count)
      .set("seed", static_cast<std::int64_t>(st.common.seed))
      .set("accuracy", mr.accuracy)
      .set("min_margin", mr.min_margin)
      .set("final_loss", res.final_loss)
      .set("epochs_run", res.epochs_run)
      .set("stopped_early", static_cast<std::int64_t>(res.stopped_early))
      .set("resumed", static_cast<std::int64_t>(res.resumed))
      .set("wall_s", res.wall_s)
      .set("train_loop_s", res.train_loop_s >= 0 ? res.train_loop_s : res.wall_s)
      .set("path", res.path)
      .set("status", "ok");
  io::Table t;
  t.append(row);
  out.write_summary(t);
  out.commit();
  fmt::print("method {}  d {}  F {}  P {}  m {}  params {}  seed {}  path {}\n", model.method, fs.d(), fs.F(), fs.P(),
             model.width(), model.param_count, st.common.seed, res.path);
  fmt::print("accuracy {:.6f}  min_margin {:.5g}  final_loss {:.6g}  epochs {}{}{}  train {:.3f} s\n", mr.accuracy,
             mr.min_margin, res.final_loss, res.epochs_run, res.stopped_early ? " (early stop)" : "",
             res.resumed ? " (resumed)" : "", train_s);
  fmt::print("wrote {}\n", st.common.out);
}

memcap::cli::Register reg("hebb", 12, [](CLI::App& tool) {
  auto* sub = tool.add_subcommand(
      "train",
      "Train one gated MLP by gradient descent to store a fact set (spec hebbian.md §2.6, §2.7) and write it\n"
      "in hebb build's layout, so 'hebb margin --in' evaluates it. Model out = D((U k + b_u) * gate(G k + b_g)) + "
      "b_d,\nfull batch, Adam with cosine lr per epoch, PyTorch nn.Linear init. Methods: gd (paper capacity "
      "baseline:\nidentity gate, no bias, CE over the value logits, 10000 epochs, lr 1e-3 -> 1e-6, stop at loss <= "
      "1e-7),\ngd:transformer (relu gate, biases, float64: the released code inside Transformers), gd:edit (silu, "
      "biases,\nMSE: the fact-editing expert); options override them, e.g. --method gd:edit,epochs=2000.\n"
      "CPU: float64 reference; cuda: the method's precision (f32 default). Writes /facts, /mlp (U, G, D as A, G, B),\n"
      "/runs/train/{loss,accuracy,epoch} (every --record-every epochs and the last) and a one-row /summary\n"
      "(accuracy and raw-output min_margin of the final weights, params, final_loss, epochs_run, stopped_early,\n"
      "wall_s, path). --checkpoint FILE saves every --checkpoint-every s and resumes a matching run. Example:\n"
      "  hebb train --method gd --dim 16 --facts 32 --width 64 --tied --map permutation --out gd.h5");
  auto st = std::make_shared<TrainState>();
  st->flags.method = "gd";
  cli::add_common(sub, st->common);
  mlp::add_build_flags(sub, st->flags);
  sub->add_option("--epochs", st->epochs,
                  "Epochs (= full-batch steps); the same as the method option epochs= (default 10000)");
  sub->add_option("--lr", st->lr, "Peak learning rate of the cosine schedule; the same as the method option lr= "
                                  "(default 1e-3)");
  sub->add_option("--checkpoint", st->checkpoint,
                  "Checkpoint FILE.h5: written every --checkpoint-every seconds and at the end; a run whose "
                  "configuration matches resumes from it (a different one is refused)");
  sub->add_option("--checkpoint-every", st->checkpoint_every, "Seconds between checkpoints (0 = every epoch)")
      ->capture_default_str();
  sub->add_option("--record-every", st->record_every, "Record loss and train accuracy every N epochs")
      ->capture_default_str();
  sub->add_option("--progress", st->progress,
                  "Progress on stderr: auto (bar on a terminal, else a line every 5 s), bar, lines, none")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  sub->callback([sub, st] { run_train(sub, *st); });
});

}  // namespace

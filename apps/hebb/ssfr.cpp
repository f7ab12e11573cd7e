// `hebb ssfr train`: train the 1-layer SSFR attention block of spec hebbian.md §6.2 around a frozen
// inserted MLP (identity, GD-trained, any memcap construction, or a model file) on the single-step
// factual-recall task of §6.1, with the evaluation cadence of §6.2 (MLP_B on map B every
// --eval-every steps), and write the curves, the final weights and a one-row /summary.
// docs/hebb-ssfr.md describes the model, the flags and the discrepancy choices.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "io/output_file.hpp"
#include "margin/capacity_probe.hpp"
#include "mlp/constructions.hpp"
#include "mlp/model_io.hpp"
#include "mlp/ssfr_setup.hpp"
#include "margin/ssfr_run.hpp"
#include "nn/ssfr_train.hpp"
#include "ssfr_sweeps.hpp"
#include "sweep/progress.hpp"
#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#endif

namespace {

using namespace memcap;

struct SsfrTrainState {
  cli::CommonOptions common;
  std::string mlp = "hebbian:whitened";
  std::int64_t width = 0, dim = 128, facts = 2048;
  std::int64_t junk = 9, junk_min = 0, junk_vocab = 0, seq_len = 0;
  std::string trainable = "qk";
  bool attn_residual = false;
  nn::SsfrTrainConfig train;
  std::string progress = "auto";
  CLI::Option *width_opt = nullptr, *dim_opt = nullptr, *facts_opt = nullptr, *junk_min_opt = nullptr,
              *junk_vocab_opt = nullptr;
};

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / double(1 << 30)); }

Eigen::MatrixXd square(const std::vector<double>& p, const nn::TensorView& v) {
  using RM = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  return Eigen::Map<const RM>(p.data() + v.offset, v.shape[0], v.shape[1]);
}

std::vector<std::int64_t> to_i64(const std::vector<std::int32_t>& v) { return {v.begin(), v.end()}; }

void run_ssfr_train(CLI::App* sub, SsfrTrainState& st) {
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  require(!st.common.out.empty(), "--out FILE.h5 is required (where the curves, weights and summary are written)");
  io::RunContext ctx = prep.ctx;

  // ---- everything is checked before any work ----
  const mlp::SsfrMlpChoice choice = mlp::parse_ssfr_mlp(st.mlp);
  std::optional<mlp::InsertedMlpFile> file;
  std::int64_t d = st.dim, F = st.facts;
  if (choice.kind == mlp::SsfrMlpKind::file) {
    file = mlp::read_inserted_mlp(choice.file);
    const std::int64_t fd = file->facts.d(), fF = file->facts.F();
    require(st.dim_opt->count() == 0 || st.dim == fd,
            "--mlp '{}' is an MLP for d = {}, but --dim is {}; leave --dim out or give the file's d", choice.file, fd,
            st.dim);
    require(st.facts_opt->count() == 0 || st.facts == fF,
            "--mlp '{}' stores F = {} facts, but --facts is {}; leave --facts out or give the file's F", choice.file, fF,
            st.facts);
    require(st.width_opt->count() == 0 || st.width == file->mlp.width(),
            "--mlp '{}' has width m = {}, but --width is {}; leave --width out", choice.file, file->mlp.width(),
            st.width);
    d = fd;
    F = fF;
  }
  require(d >= 1 && d <= 65536, "--dim must be in [1, 65536] (got {})", d);
  require(choice.kind != mlp::SsfrMlpKind::identity || st.width_opt->count() == 0,
          "--width sets the hidden units of a built MLP; --mlp identity has none (leave --width out)");
  require(st.width_opt->count() == 0 || (st.width >= 1 && st.width <= (std::int64_t{1} << 31)),
          "--width must be in [1, 2^31] hidden units (got {})", st.width);
  require(st.junk >= 0, "--junk must be >= 0 (got {})", st.junk);
  const std::int64_t jmin = st.junk_min_opt->count() > 0 ? st.junk_min : st.junk;
  const std::int64_t vj = st.junk_vocab_opt->count() > 0 ? st.junk_vocab : st.junk;
  require(st.seq_len >= 0, "--seq-len must be >= 0 (0 = 2 J + 3; got {})", st.seq_len);
  const nn::SsfrTask task = nn::SsfrTask::make(F, jmin, st.junk, vj, st.seq_len);
  nn::SsfrBlockConfig block;
  block.dim = d;
  block.vo_trainable = st.trainable == "qkvo";
  block.attn_residual = st.attn_residual;
  nn::SsfrTrainConfig cfg = st.train;
  cfg.seed = st.common.seed;
  cfg.validate();

  std::int64_t m = 0;
  if (choice.kind == mlp::SsfrMlpKind::method) {
    m = st.width_opt->count() > 0 ? st.width : mlp::default_width(choice.method.kind, d);
    if (choice.method.kind == mlp::MethodKind::exact_k2) {
      require(st.width_opt->count() == 0 || st.width == d * (d + 1) / 2,
              "hebbian:exact-k2 has a fixed width d(d+1)/2 = {}; leave --width out (got {})", d * (d + 1) / 2,
              st.width);
      m = d * (d + 1) / 2;
    }
  } else if (file) {
    m = file->mlp.width();
  }
  // Memory: building the MLPs (one construction or GD training at a time, on the CPU) plus the CPU
  // training (workspace for one batch, tables, arenas, both MLPs), or the device memory of the GPU one.
  const bool on_gpu = ctx.device.device == Device::cuda;
  const double train_bytes = on_gpu ? 0.0 : nn::ssfr_cpu_bytes(task, d, m, cfg.batch);
  const double build_bytes =
      choice.kind == mlp::SsfrMlpKind::method ? margin::cpu_probe_bytes(choice.method, F, F, d, m) : 0.0;
  const double avail = margin::host_available_bytes();
  require(avail <= 0 || train_bytes + build_bytes <= avail,
          "this run (d = {}, F = {}, m = {}, batch {}, vocabulary {}) needs about {} of memory, but {} is "
          "available; use a smaller --width, --batch, --facts or --junk-vocab",
          d, F, m, cfg.batch, task.vocab(), gib(train_bytes + build_bytes), gib(avail));
#ifdef MEMCAP_HAVE_CUDA
  std::optional<gpu::Stream> stream;
  std::optional<gpu::Handles> handles;
  if (on_gpu) {
    gpu::require_device_memory(nn::ssfr_cuda_bytes(task, d, m, cfg),
                               fmt::format("hebb ssfr train (d = {}, F = {}, m = {}, batch {}, {})", d, F, m, cfg.batch,
                                           cfg.precision));
    stream.emplace();
    handles.emplace(*stream);
  }
#else
  if (on_gpu) throw DeviceError("this build of hebb has no CUDA support; use --device cpu");
#endif
  io::check_output_path(st.common.out);

  // ---- work ----
  mlp::SsfrSetupSpec spec;
  spec.task = task;
  spec.block = block;
  spec.width = choice.kind == mlp::SsfrMlpKind::method ? m : 0;
  spec.seed = st.common.seed;
  const mlp::SsfrSetup setup = mlp::make_ssfr_setup(spec, choice, file ? &*file : nullptr);
  if (cli::verbosity() >= 0)
    fmt::print(stderr, "hebb ssfr train: inserted MLP {} (m = {}) ready in {:.2f} s; standalone accuracy A {:.4f}{}\n",
               setup.mlp_text, setup.width, setup.build_s, setup.mlp_acc_a,
               setup.has_map_b ? fmt::format(", B {:.4f}", setup.mlp_acc_b) : std::string());

  sweep::Progress progress(cfg.steps, st.progress, "hebb ssfr train", "steps");
  cfg.on_step = [&progress](std::int64_t done, double loss) {
    progress.update(done, fmt::format("loss {:.4g}", loss));
  };
  margin::SsfrRunner runner;
  runner.device = ctx.device.device;
#ifdef MEMCAP_HAVE_CUDA
  if (on_gpu) runner.handles = &*handles;
#endif
  const nn::SsfrTrainResult res = margin::train_ssfr(setup.problem, cfg, std::string(), runner);
  progress.finish();
  const std::int64_t n_eval = cfg.resolved_eval_batches(F);

  // ---- results ----
  const nn::ArenaLayout layout = nn::ssfr_layout(block);
  io::OutputFile out(st.common.out, ctx);
  {
    auto g = out.root().child("facts");
    mlp::write_factset(g, setup.facts);
    g.attr("seed", static_cast<std::int64_t>(file ? file->seed : st.common.seed));
    g.attr("map_kind", choice.kind == mlp::SsfrMlpKind::identity ? "identity"
                       : file                                     ? "file"
                                                                  : "permutation");
  }
  if (choice.kind != mlp::SsfrMlpKind::identity) {
    auto g = out.root().child("mlp");
    mlp::write_mlp(g, setup.mlp_a, file ? file->seed : st.common.seed);
  }
  if (setup.has_map_b) {  // MLP_B (evaluation MLP on map B; runs/train/map_b), e.g. for baselines
    auto g = out.root().child("mlp_b");
    mlp::write_mlp(g, setup.mlp_b, st.common.seed);
  }
  {
    auto g = out.root().child("runs").child("train");
    const h5::WriteOptions z{true, 0};
    margin::write_ssfr_curves(g, res);
    auto w = g.child("weights");
    for (const auto& v : layout.views()) w.write(v.name, square(res.params, v), z);
    {
      using RM = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
      const Eigen::MatrixXd E = Eigen::Map<const RM>(setup.problem.embed_in.data(), task.vocab(), d);
      g.write("embeddings", E, z);
    }
    const auto map_b = to_i64(setup.problem.map_b);
    g.write("map_b", std::span<const std::int64_t>(map_b), z);
    g.attr("mlp", setup.mlp_text);
    g.attr("trainable", st.trainable);
    g.attr("attn_residual", block.attn_residual);
    g.attr("junk_min", task.junk_min);
    g.attr("junk_max", task.junk_max);
    g.attr("junk_vocab", task.junk_vocab);
    g.attr("seq_len", task.seq_len);
    g.attr("vocab", task.vocab());
    g.attr("batch", cfg.batch);
    g.attr("lr", cfg.lr);
    g.attr("weight_decay", cfg.weight_decay);
    g.attr("eval_every", cfg.eval_every);
    g.attr("eval_batches", n_eval);
    g.attr("eval_map", setup.has_map_b ? "B" : "A");
    g.attr("steps", cfg.steps);
    g.attr("steps_run", res.steps_run);
    g.attr("stopped_early", res.stopped_early);
    g.attr("path", res.path);
  }
  io::Row row;
  row.set("mlp", setup.mlp_text)
      .set("dim", d)
      .set("facts", F)
      .set("junk", task.junk_max)
      .set("junk_min", task.junk_min)
      .set("junk_vocab", task.junk_vocab)
      .set("width", setup.width)
      .set("mlp_params", setup.mlp_params)
      .set("attn_params", layout.numel())
      .set("trainable", st.trainable)
      .set("attn_residual", static_cast<std::int64_t>(block.attn_residual))
      .set("seed", static_cast<std::int64_t>(st.common.seed))
      .set("mlp_acc_a", setup.mlp_acc_a)
      .set("mlp_acc_b", setup.mlp_acc_b)
      .set("eval_map", setup.has_map_b ? "B" : "A")
      .set("best_acc", res.best_acc)
      .set("best_train_acc", res.best_train_acc)
      .set("final_acc", res.final_acc)
      .set("final_train_acc", res.final_train_acc)
      .set("final_loss", res.final_loss)
      .set("steps_run", res.steps_run)
      .set("stopped_early", static_cast<std::int64_t>(res.stopped_early))
      .set("evaluations", static_cast<std::int64_t>(res.eval_step.size()))
      .set("build_s", setup.build_s)
      .set("train_s", res.train_loop_s)
      .set("eval_s", res.eval_s)
      .set("wall_s", setup.build_s + res.wall_s)
      .set("path", res.path)
      .set("precision", on_gpu ? cfg.precision : std::string("f64"))
      .set("status", "ok");
  io::Table t;
  t.append(row);
  out.write_summary(t);
  out.commit();
  fmt::print("mlp {}  d {}  F {}  J {}  m {}  trainable {}  residual {}  batch {}  seed {}  path {}\n", setup.mlp_text, d,
             F, task.junk_max, setup.width, st.trainable, block.attn_residual ? "on" : "off", cfg.batch,
             st.common.seed, res.path);
  fmt::print("best_acc {:.6f}  best_train_acc {:.6f}  final_acc {:.6f}  final_loss {:.6g}  steps {}{}  train {:.3f} s  "
             "eval {:.3f} s\n",
             res.best_acc, res.best_train_acc, res.final_acc, res.final_loss, res.steps_run,
             res.stopped_early ? " (early stop)" : "", res.train_loop_s, res.eval_s);
  fmt::print("wrote {}\n", st.common.out);
}

void add_train(CLI::App* ssfr) {
  auto* sub = ssfr->add_subcommand(
      "train",
      "Train the SSFR attention block (spec hebbian.md §6.2: RMSNorm without gain, W_q, W_k, W_v, W_o, causal\n"
      "softmax attention read at the query position, unit L2 norms, the frozen inserted MLP, tied frozen lm_head,\n"
      "CE at Q) on the single-step factual-recall task of §6.1, with AdamW at a constant learning rate (weight\n"
      "decay on every 2-D tensor). --mlp: identity (attention-only, identity map), gd (= gd:transformer, the\n"
      "released code's GD MLP), any method spec (hebbian:whitened, hebbian:data-dependent, ntk, gd:...), or\n"
      "FILE.h5 from hebb build / hebb train (its fact set and map). Built MLPs: MLP_A on map A (random\n"
      "permutation from --seed) for training, MLP_B on a fresh map B (same embeddings, same method seed) for\n"
      "evaluation; after the update of every step whose index is a multiple of --eval-every, train accuracy\n"
      "(MLP_A, map A) and eval accuracy (MLP_B, map B) over --eval-batches fresh batches each; best_acc and\n"
      "best_train_acc are running maxima. Writes /facts, /mlp (MLP_A), /runs/train (loss and batch accuracy per\n"
      "step, evaluations, final weights, embeddings, map B) and a one-row /summary (best_acc, best_train_acc,\n"
      "final_acc, final_train_acc, final_loss, steps_run, mlp_acc_a/b, ...). docs/hebb-ssfr.md has the details.\n"
      "Example: hebb ssfr train --mlp hebbian:whitened --dim 32 --facts 64 --junk 4 --steps 600 --out s.h5");
  auto st = std::make_shared<SsfrTrainState>();
  cli::add_common(sub, st->common);
  sub->add_option("--mlp", st->mlp,
                  fmt::format("Inserted MLP: identity, gd (= gd:transformer), FILE.h5, or a method spec: {}",
                              mlp::method_help()))
      ->capture_default_str();
  st->width_opt = sub->add_option("--width,-m", st->width,
                                  "Hidden units m of the built MLPs (default: 4d; exact-K2: d(d+1)/2; FILE: the file's)");
  st->dim_opt = sub->add_option("--dim,-d", st->dim, "Model and embedding dimension d (FILE: the file's)")
                    ->capture_default_str();
  st->facts_opt = sub->add_option("--facts,-F", st->facts, "Number of facts F (FILE: the file's)")->capture_default_str();
  sub->add_option("--junk,-J", st->junk, "J_max: junk tokens before and after the key, drawn from [J_min, J_max]")
      ->capture_default_str();
  st->junk_min_opt = sub->add_option("--junk-min", st->junk_min, "J_min (default: = --junk, the paper's fixed length)");
  st->junk_vocab_opt = sub->add_option("--junk-vocab", st->junk_vocab,
                                       "V_J: number of distinct junk tokens (default: = --junk, as in the paper)");
  sub->add_option("--seq-len", st->seq_len, "Sequence length T >= 2 J + 3 (0 = 2 J + 3)")->capture_default_str();
  sub->add_option("--trainable", st->trainable,
                  "Trained weights: qk (W_q, W_k; W_v = W_o = I frozen, the fact-adaptive setting) or qkvo (all four)")
      ->capture_default_str()
      ->check(CLI::IsMember({"qk", "qkvo"}));
  sub->add_flag("--attn-residual", st->attn_residual, "Add the query token's embedding to the attention output (z = a + x_Q)");
  sub->add_option("--steps", st->train.steps, "Training steps (one fresh batch each)")->capture_default_str();
  sub->add_option("--batch", st->train.batch, "Sequences per batch (training and evaluation)")->capture_default_str();
  sub->add_option("--lr", st->train.lr, "AdamW learning rate (constant)")->capture_default_str();
  sub->add_option("--weight-decay", st->train.weight_decay, "AdamW weight decay (every 2-D tensor)")->capture_default_str();
  sub->add_option("--eval-every", st->train.eval_every,
                  "Evaluate after the update of every step whose 0-based index is a multiple of this")
      ->capture_default_str();
  sub->add_option("--eval-batches", st->train.eval_batches,
                  "Fresh batches per evaluation and map (0 = 10 max(1, floor(F/1280)), spec §6.2)")
      ->capture_default_str();
  sub->add_option("--precision", st->train.precision,
                  "GPU arithmetic: f32 (the released code's; the MLP is cast to float32) or f64. The CPU path is "
                  "always float64")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f64"}));
  sub->add_flag("--early-stop", st->train.early_stop,
                "Stop after an evaluation where eval and train accuracy are both >= 0.99 (the attention pre-training "
                "protocol, §6.3; off in the inserted-MLP protocols)");
  sub->add_option("--progress", st->progress,
                  "Progress on stderr: auto (bar on a terminal, else a line every 5 s), bar, lines, none")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  sub->callback([sub, st] { run_ssfr_train(sub, *st); });
}

memcap::cli::Register reg("hebb", 14, [](CLI::App& tool) {
  auto* ssfr = tool.add_subcommand(
      "ssfr",
      "The single-step factual-recall Transformer of 'MLPs are Hebbians' (spec hebbian.md §6): a 1-layer attention\n"
      "block trained around a frozen fact-storing MLP. Subcommands: train (one run, any setting), capacity\n"
      "(§4.6 fact-adaptive / §4.7 train-99 searches), noise (§4.4 attention-noise ceiling), usability (§4.3\n"
      "margins vs. accuracy per width, tau* fit).");
  ssfr->require_subcommand(1);
  add_train(ssfr);
  hebb_app::add_ssfr_sweeps(ssfr);
});

}  // namespace

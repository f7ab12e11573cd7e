// `hebb edit base`: train the fact expert on the (book → author) embedding map (§2.7, or the
// data-dependent construction of Fig. 9), insert it into the §6.4 model, train the model (§4.9: AdamW,
// shuffled batches, value-accuracy early stop, best state kept) on the CPU (float64) or, with --device cuda
// (or auto on a GPU), on the GPU (float32, edit/edit_train_cuda.hpp), write base.h5.
#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "core/error.hpp"
#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#endif
#include "edit/edit_io.hpp"
#include "edit/edit_pipeline.hpp"
#include "edit/edit_train_cuda.hpp"
#include "edit_common.hpp"
#include "io/output_file.hpp"
#include "nn/edit_data.hpp"
#include "sweep/progress.hpp"
#include "sweep/sweep.hpp"

namespace memcap::hebb_app {

namespace {

struct BaseState {
  cli::CommonOptions common;
  std::string data;
  std::int64_t facts = nn::kEditFacts, templates = nn::kEditTemplates;
  std::int64_t dim = 256, qk_hidden = 0, rank = 8;
  std::string expert = "gd";
  std::int64_t expert_hidden = 0;
  std::int64_t expert_epochs = 10000;
  std::uint64_t expert_seed = 10042;
  edit::BaseTrainConfig train;
  std::string progress = "auto";
};

void run_base(CLI::App* sub, BaseState& st) {
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  require(!st.common.out.empty(), "--out FILE.h5 is required (where the base model is written)");
  require(st.facts >= 1, "--facts must be >= 1 (got {})", st.facts);
  require(st.templates >= 1, "--templates must be >= 1 (got {})", st.templates);
  require(st.dim >= 2 && st.dim % 2 == 0, "--dim must be even and >= 2 (RoPE rotates pairs); got {}", st.dim);
  require(st.qk_hidden >= 0, "--qk-hidden must be >= 0 (0 = d); got {}", st.qk_hidden);
  require(st.rank >= 1, "--rank must be >= 1 (got {})", st.rank);
  require(st.expert_hidden >= 0, "--expert-hidden must be >= 0 (0 = 512 for gd, 1024 for data-dependent); got {}",
          st.expert_hidden);
  require(st.expert_epochs >= 1, "--expert-epochs must be >= 1 (got {})", st.expert_epochs);
  st.train.seed = st.common.seed;
  st.train.validate();
  // --device cuda (no GPU: DeviceError from prepare) or auto on a GPU: the GPU trainer in float32.
  const bool on_gpu = prep.ctx.device.device == Device::cuda;
  io::check_output_path(st.common.out);
  const std::string data = find_edit_data(st.data);
  const auto t_start = std::chrono::steady_clock::now();

  const nn::EditCorpus corpus = nn::load_edit_corpus(data, st.facts, st.templates);
  const nn::EditSequences seqs = nn::pack_edit_sequences(corpus, nn::EditLabels::all);
  const bool gd = st.expert == "gd";
  edit::EditModelConfig cfg;
  cfg.d = st.dim;
  cfg.vocab = corpus.vocab_size();
  cfg.qk_hidden = st.qk_hidden > 0 ? st.qk_hidden : st.dim;
  cfg.rank = st.rank;
  cfg.fact_hidden = st.expert_hidden > 0 ? st.expert_hidden : (gd ? 512 : 1024);
  cfg.fact_gate = gd ? nn::Activation::silu : nn::Activation::identity;
  {  // host memory, before anything of the model's size is allocated: float64 parameters with their gradients and
     // AdamW moments, the expert's fact set and its training activations, a batch of activations (rough, upper)
    const double d = static_cast<double>(cfg.d), qk = static_cast<double>(cfg.qk_hidden),
                 h = static_cast<double>(cfg.fact_hidden), F = static_cast<double>(corpus.num_facts());
    const double rank = static_cast<double>(cfg.rank), vocab = static_cast<double>(cfg.vocab);
    const double params = vocab * d + 4 * d * qk + d * d + 2 * d * rank + 3 * h * d;
    const double batch = static_cast<double>(std::min(st.train.batch, seqs.S)) * 16 * d * 40;
    sweep::require_memory(8 * (4 * params + 4 * F * d + 6 * F * h + batch),
                          fmt::format("hebb edit base with --dim {}, --expert-hidden {}, --qk-hidden {}", cfg.d,
                                      cfg.fact_hidden, cfg.qk_hidden));
  }
  edit::EditModel model(cfg);
  model.init(st.common.seed);
  const edit::BaseTrainCudaOptions gpu_opt;  // f32, CUDA graphs, evaluation batches of 1024 sequences
  if (on_gpu) {
#ifdef MEMCAP_HAVE_CUDA
    // before the expert is trained: a model that cannot fit is refused at once (exit 2)
    gpu::require_device_memory(edit::edit_base_cuda_bytes(cfg, seqs, st.train, gpu_opt),
                               fmt::format("hebb edit base on the GPU (d = {}, vocabulary {}, {} sequences)", cfg.d,
                                           cfg.vocab, seqs.S));
#endif
  }

  // ---- the fact expert on the identity (book -> author) map ----
  std::vector<std::int32_t> identity(static_cast<std::size_t>(corpus.num_facts()));
  for (std::size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<std::int32_t>(i);
  const mlp::FactSet fs = edit::expert_factset(model, corpus, identity);
  const std::string expert_kind = gd ? "gd-mse" : "data-dependent";
  const std::string expert_method =
      gd ? fmt::format("gd:edit,epochs={}", st.expert_epochs) : std::string("hebbian:data-dependent");
  ExpertBuild ex;
  {
    sweep::Progress p(gd ? st.expert_epochs : 1, st.progress, "hebb edit base: expert", gd ? "epochs" : "builds");
    ex = build_expert(expert_kind, expert_method, fs, cfg.fact_hidden, st.expert_seed,
                      [&p](std::int64_t e, double loss) { p.update(e, fmt::format("mse {:.3g}", loss)); }, on_gpu);
    p.update(gd ? ex.epochs_run : 1);
    p.finish();
  }
  fmt::print("expert {}  h {}  params {}  mlp_accuracy {:.6f}  final_loss {:.4g}  epochs {}  {:.2f} s\n",
             expert_method, cfg.fact_hidden, ex.mlp.param_count, ex.accuracy, ex.final_loss, ex.epochs_run, ex.wall_s);
  std::fflush(stdout);
  edit::load_expert(model, ex.mlp);

  // ---- base-model training ----
  const std::int64_t steps_per_epoch = (seqs.S + std::min(st.train.batch, seqs.S) - 1) / std::min(st.train.batch, seqs.S);
  sweep::Progress progress(st.train.epochs * steps_per_epoch, st.progress, "hebb edit base: model", "steps");
  edit::BaseTrainConfig tc = st.train;
  tc.on_step = [&progress](std::int64_t done, std::int64_t, std::int64_t epoch, double loss) {
    progress.update(done, fmt::format("epoch {} loss {:.4g}", epoch, loss));
  };
  edit::BaseTrainResult res;
  edit::PromptEval ev;
  if (on_gpu) {
    // the kept (best-epoch) state's evaluation comes with the result: the same parameters, evaluated on the GPU
    edit::BaseTrainCudaResult r = edit::train_base_cuda(model, seqs, tc, gpu_opt);
    res = std::move(r.train);
    ev = std::move(r.final_eval);
    progress.finish();
  } else {
    res = edit::train_base(model, seqs, tc);
    progress.finish();
    ev = edit::evaluate_prompts(model, seqs, tc.eval_batch);
  }
  const char* path = on_gpu ? "cuda" : "cpu";
  const char* precision = on_gpu ? "f32" : "f64";
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

  // ---- results ----
  io::OutputFile out(st.common.out, prep.ctx);
  edit::BaseModelInfo info;
  info.facts = corpus.num_facts();
  info.templates = corpus.num_templates();
  info.vocab_fingerprint = edit::vocab_fingerprint(corpus);
  info.facts_fingerprint = edit::facts_fingerprint(corpus);
  info.expert = expert_kind;
  info.expert_method = expert_method;
  info.expert_seed = st.expert_seed;
  info.seed = st.common.seed;
  edit::write_base_model(out.root(), model, ex.mlp, info);
  {
    auto g = out.root().child("runs").child("base");
    const h5::WriteOptions z{true, 0};
    g.write("epoch_loss", std::span<const double>(res.epoch_loss), z);
    g.write("value_accuracy", std::span<const double>(res.epoch_value_acc), z);
    g.write("nonfact_ce", std::span<const double>(res.epoch_nonfact_ce), z);
    g.attr("best_epoch", res.best_epoch);
    g.attr("epochs_run", res.epochs_run);
    g.attr("steps_run", res.steps_run);
    g.attr("stopped_early", res.stopped_early);
    g.attr("batch", st.train.batch);
    g.attr("lr", st.train.lr);
    g.attr("weight_decay", st.train.weight_decay);
    g.attr("target_accuracy", st.train.target_accuracy);
  }
  if (!ex.loss_curve.empty()) {
    auto g = out.root().child("runs").child("expert");
    const h5::WriteOptions z{true, 0};
    g.write("loss", std::span<const double>(ex.loss_curve), z);
    g.write("accuracy", std::span<const double>(ex.accuracy_curve), z);
    g.write("epoch", std::span<const std::int64_t>(ex.curve_epoch), z);
  }
  io::Row row;
  row.set("facts", corpus.num_facts())
      .set("templates", corpus.num_templates())
      .set("vocab", corpus.vocab_size())
      .set("dim", cfg.d)
      .set("expert", expert_kind)
      .set("expert_method", expert_method)
      .set("expert_hidden", cfg.fact_hidden)
      .set("expert_params", ex.mlp.param_count)
      .set("mlp_accuracy", ex.accuracy)
      .set("expert_final_loss", ex.final_loss)
      .set("expert_epochs", ex.epochs_run)
      .set("value_accuracy", ev.value_accuracy)
      .set("nonfact_ce", ev.nonfact_ce)
      .set("epochs", res.epochs_run)
      .set("best_epoch", res.best_epoch)
      .set("steps", res.steps_run)
      .set("stopped_early", static_cast<std::int64_t>(res.stopped_early))
      .set("params", edit::edit_trainable_count(cfg))
      .set("seed", static_cast<std::int64_t>(st.common.seed))
      .set("expert_s", ex.wall_s)
      .set("train_s", res.train_s)
      .set("eval_s", res.eval_s)
      .set("wall_s", wall_s)
      .set("path", path)
      .set("precision", precision)
      .set("status", "ok");
  io::Table t;
  t.append(row);
  out.write_summary(t);
  out.commit();
  fmt::print("facts {}  templates {}  vocab {}  d {}  params {}  seed {}  path {} ({})\n", corpus.num_facts(),
             corpus.num_templates(), corpus.vocab_size(), cfg.d, edit::edit_trainable_count(cfg), st.common.seed, path,
             precision);
  fmt::print("mlp_accuracy {:.6f}  value_accuracy {:.6f}  nonfact_ce {:.6f}  epochs {}  best_epoch {}{}  train {:.2f} s  "
             "eval {:.2f} s\n",
             ex.accuracy, ev.value_accuracy, ev.nonfact_ce, res.epochs_run, res.best_epoch,
             res.stopped_early ? " (early stop)" : "", res.train_s, res.eval_s);
  fmt::print("wrote {}\n", st.common.out);
}

}  // namespace

void add_edit_base(CLI::App* edit) {
  auto* sub = edit->add_subcommand(
      "base",
      "Train the base model of the fact-editing experiment (spec hebbian.md §4.9, §6.4) on the CPU (float64) or,\n"
      "with --device cuda (or auto on a GPU), on the GPU (float32: the GD expert by the GPU GD trainer, the model\n"
      "with one CUDA graph per batch shape):\n"
      "1. the fact expert on the facts' (book -> author) embedding map: keys = L2-normalized book-token\n"
      "   embeddings, values = author-token embeddings, identity map; --expert gd (§2.7: GD-MSE, silu gate,\n"
      "   biases, h = 512, <= 10000 epochs, seed 10042) or data-dependent (Fig. 9: hebbian:data-dependent,\n"
      "   h = 1024);\n"
      "2. the one-layer LM around it (§6.4; tied frozen embeddings U(+-1/sqrt(d)) for the whole vocabulary):\n"
      "   AdamW lr 2e-4, wd 0.1 on >= 2-D trainables, batch 32 shuffled, <= 18 epochs over every fact x template\n"
      "   sentence (all positions trained), value accuracy (argmax at the author position over the full\n"
      "   vocabulary) after every epoch, early stop at >= 0.99, the best state kept.\n"
      "Writes /model (configuration, weights, vocabulary fingerprint), /expert, /runs/base, /runs/expert and a\n"
      "one-row /summary (mlp_accuracy, value_accuracy, epochs, params, ...). The defaults are the paper's (16,384\n"
      "facts, 16 templates, d = 256), which the CPU cannot train in useful time: use --device cuda for them.\n"
      "Miniature (CI, 35 s with the swap; --threads 1 is faster at this size):\n"
      "  hebb edit base --threads 1 --facts 256 --templates 4 --dim 48 --expert-hidden 32 --expert-epochs 3000 \\\n"
      "                 --epochs 120 --lr 4e-3 --target-accuracy 1 --out base.h5");
  auto st = std::make_shared<BaseState>();
  st->common.seed = 10042;
  cli::add_common(sub, st->common);
  sub->add_option("--data", st->data,
                  "Folder with book_authors.csv and author_templates.txt (default: the repository's data/edit, found "
                  "next to the executable, via $MEMCAP_DATA/edit or $MEMCAP_SRC/data/edit)");
  sub->add_option("--facts,-F", st->facts, "Use the first N facts")->capture_default_str();
  sub->add_option("--templates,-K", st->templates, "Use the first K sentence templates")->capture_default_str();
  sub->add_option("--dim,-d", st->dim, "Model width d (even)")->capture_default_str();
  sub->add_option("--qk-hidden", st->qk_hidden, "Hidden width of the Q/K projection MLPs (0 = d)")->capture_default_str();
  sub->add_option("--rank", st->rank, "Rank of the low-rank path U V")->capture_default_str();
  sub->add_option("--expert", st->expert, "Fact expert: gd (GD-MSE, §2.7) or data-dependent (Fig. 9)")
      ->capture_default_str()
      ->check(CLI::IsMember({"gd", "data-dependent"}));
  sub->add_option("--expert-hidden", st->expert_hidden, "Hidden width h of the fact expert (0 = 512 gd, 1024 data-dependent)")
      ->capture_default_str();
  sub->add_option("--expert-epochs", st->expert_epochs, "GD epochs of the fact expert (full batch, early stop at MSE < 1e-7)")
      ->capture_default_str();
  sub->add_option("--expert-seed", st->expert_seed, "Seed of the fact expert (init / random factors)")
      ->capture_default_str()
      ->check(cli::Uint64);
  sub->add_option("--epochs", st->train.epochs, "Most training epochs of the model")->capture_default_str();
  sub->add_option("--batch", st->train.batch, "Sequences per AdamW step")->capture_default_str();
  sub->add_option("--lr", st->train.lr, "AdamW learning rate (constant)")->capture_default_str();
  sub->add_option("--weight-decay", st->train.weight_decay, "AdamW weight decay on >= 2-D trainables")
      ->capture_default_str();
  sub->add_option("--target-accuracy", st->train.target_accuracy,
                  "Stop after the first epoch whose value accuracy reaches this")
      ->capture_default_str();
  sub->add_option("--progress", st->progress,
                  "Progress on stderr: auto (bar on a terminal, else a line every 5 s), bar, lines, none")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  sub->callback([sub, st] { run_base(sub, *st); });
}

}  // namespace memcap::hebb_app

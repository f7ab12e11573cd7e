// `kata mqar train`: train the Zoology-style MQAR language model of the KATA paper (spec kata.md §4.1–4.5)
// with one sequence mixer at one learning rate on the CPU or the GPU, evaluate it per slice, and write the
// curves, the per-slice accuracy, cap_0.99 / cap_0.90, the parameter count and the state size (docs/kata-mqar.md).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "core/device.hpp"
#include "core/gpu.hpp"
#include "core/threads.hpp"
#include "io/output_file.hpp"
#include "kata/mqar_jobs.hpp"
#include "kata/mqar_train.hpp"
#include "kata/mqar_train_cuda.hpp"
#include "mqar_sweeps.hpp"
#include "sweep/progress.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
using namespace memcap::kata;

struct MqarState {
  cli::CommonOptions common;
  MqarTrainConfig cfg;
  std::string task = "mqar";
  std::string ow_examples = "fresh";  // overwrite's training set (as kata mqar table2's --ow-examples)
  std::int64_t seq_len = 0, keys = 0, train_examples = 20000;
  std::string train_slices, eval_slices;
  std::int64_t eval_examples = 1000, eval_max_len = 4096;
  bool dry_run = false;
  std::string progress = "auto";
};

std::string fmt_slices(const std::vector<TaskSlice>& v) {
  std::string s;
  for (const auto& x : v) s += fmt::format("{}{}:{}:{}", s.empty() ? "" : ",", x.seq_len, x.keys, x.examples);
  return s;
}

// Resolves the slice flags into cfg.train / cfg.eval (UserError on conflicting or bad flags).
void resolve_slices(CLI::App* sub, MqarState& st) {
  const TaskKind kind = parse_task(st.task);
  require(kind != TaskKind::induction, "--task induction is not trained by kata mqar train; use mqar or overwrite");
  // by value, not by count: --print-config writes the default, and its file must read back
  require(kind == TaskKind::overwrite || st.ow_examples == MqarState{}.ow_examples,
          "--ow-examples {} sets the training set of --task overwrite; for mqar use --fresh-examples", st.ow_examples);
  if (kind == TaskKind::overwrite)
    st.cfg.fresh_examples = kata_app::overwrite_fresh(st.ow_examples, st.cfg.fresh_examples);
  const std::int64_t V = st.cfg.model.vocab;
  const bool have_T = sub->get_option("--seq-len")->count() > 0, have_K = sub->get_option("--keys")->count() > 0;
  require(have_T == have_K, "--seq-len and --keys go together (one training slice); give both or neither");
  const bool have_list = !st.train_slices.empty();
  require(!(have_T && have_list), "--seq-len/--keys and --train-slices both give the training data; use one");
  require(st.train_examples == MqarState{}.train_examples || have_T,
          "--train-examples {} sizes the --seq-len/--keys slice; with --train-slices write T:K:N", st.train_examples);
  require(st.train_examples >= 1, "--train-examples {} must be >= 1", st.train_examples);
  require(st.eval_examples >= 1, "--eval-examples {} must be >= 1", st.eval_examples);
  require(st.eval_max_len >= 2, "--eval-max-len {} must be >= 2", st.eval_max_len);
  kata_app::require_slice_list_given(sub, "--train-slices", st.train_slices);
  kata_app::require_slice_list_given(sub, "--eval-slices", st.eval_slices);
  if (have_T) {
    TaskSlice s;
    s.kind = kind;
    s.seq_len = st.seq_len;
    s.keys = st.keys;
    s.vocab = V;
    s.examples = st.train_examples;
    s.validate();
    st.cfg.train = {s};
  } else if (have_list) {
    st.cfg.train = parse_slices(st.train_slices, kind, V, st.train_examples);
  } else if (kind == TaskKind::mqar) {
    st.cfg.train = mqar_training_mixture(V);
  } else {
    st.cfg.train = overwrite_training_mixture(V);
  }
  if (!st.eval_slices.empty()) {
    st.cfg.eval = parse_slices(st.eval_slices, kind, V, st.eval_examples);
  } else {
    st.cfg.eval = kind == TaskKind::mqar ? mqar_eval_diagonal(V, st.eval_max_len, st.eval_examples)
                                         : overwrite_eval(V, st.eval_examples);
    st.cfg.eval.erase(std::remove_if(st.cfg.eval.begin(), st.cfg.eval.end(),
                                     [&](const TaskSlice& s) { return s.seq_len > st.eval_max_len; }),
                      st.cfg.eval.end());
    require(!st.cfg.eval.empty(), "--eval-max-len {} leaves no evaluation slice; raise it or give --eval-slices",
            st.eval_max_len);
  }
  for (auto& s : st.cfg.train) s.validate();
  for (auto& s : st.cfg.eval) s.validate();
  kata_app::require_distinct_slices(st.cfg.train, "--train-slices", false);
  kata_app::require_distinct_slices(st.cfg.eval, "--eval-slices", true);
}

// What the memory check names: the mixer and the flags that sized the training and evaluation data.
std::string memory_what(CLI::App* sub, const MqarState& st) {
  double n_train = 0, n_eval = 0;  // double: a sum of huge slice sizes must not overflow
  for (const auto& s : st.cfg.train) n_train += static_cast<double>(s.examples);
  for (const auto& s : st.cfg.eval) n_eval += static_cast<double>(s.examples);
  const char* train_from = sub->get_option("--seq-len")->count() > 0 ? "--train-examples"
                           : st.train_slices.empty()                 ? "the default mixture"
                                                                     : "--train-slices";
  const char* eval_from = st.eval_slices.empty() ? "--eval-examples" : "--eval-slices";
  return fmt::format("kata mqar train --mixer {} ({:.0f} training examples from {}, {:.0f} evaluation examples "
                     "from {}; a workspace per thread, {} thread(s) from --threads)",
                     st.cfg.model.mixer, n_train, train_from, n_eval, eval_from, max_threads());
}

std::string slice_col(const char* what, const TaskSlice& s) { return fmt::format("{}_T{}_K{}", what, s.seq_len, s.keys); }

void print_plan(const MqarState& st, const MqarModel& model, std::int64_t state, double bytes) {
  const auto& c = st.cfg;
  fmt::print("kata mqar train plan\n");
  fmt::print("  model     {}\n", model.describe());
  fmt::print("  params    {}\n", model.param_count());
  fmt::print("  state     {}  ({})\n", state,
             model.kind == MixerKind::softmax ? fmt::format("KV cache 2*d_model*T at T = {}", c.eval.empty() ? 0 : c.eval.back().seq_len)
                                              : std::string("H * n_psi * d_head, Z not counted (Table 2)"));
  fmt::print("  task      {}\n", st.task);
  fmt::print("  train     {}  (T:K:examples)\n", fmt_slices(c.train));
  fmt::print("  eval      {}\n", fmt_slices(c.eval));
  fmt::print("  optimizer AdamW lr {} -> {} cosine, betas ({}, {}), weight decay {}, clip {}\n", c.lr, c.lr_min, c.beta1,
             c.beta2, c.weight_decay, c.clip);
  fmt::print("  schedule  batch {}  epochs {}  steps/epoch {}  steps {}  eval every {} epoch(s)  early stop {}  {}\n",
             c.batch, c.epochs, c.steps_per_epoch(), c.steps_per_epoch() * c.epochs, c.eval_every, c.early_stop,
             c.fresh_examples ? "new training examples every epoch" : "one fixed training set");
  if (c.device == "cuda")
    fmt::print("  compute   cuda:{}  one CUDA graph per batch shape  GPU memory ~{:.0f} MB\n", c.precision, bytes / 1e6);
  else
    fmt::print("  compute   cpu:{}  micro-batch {} tokens  threads {}  memory ~{:.0f} MB\n", c.precision, c.micro_tokens,
               max_threads(), bytes / 1e6);
  fmt::print("  output    {}\n", st.common.out.empty() ? std::string("(none: give --out)") : st.common.out);
}

void run_mqar_train(CLI::App* sub, MqarState& st) {
  // The gated mixers have no CUDA path yet: --device cuda is refused before the device is looked at
  // (exit 2 with or without a GPU); auto takes the CPU and says so.
  if (st.cfg.model.cpu_only()) {
    if (st.common.device == "cuda") st.cfg.model.require_cuda_support();
    if (st.common.device == "auto") {
      st.common.device = "cpu";
      if (cli::verbosity() >= 0)
        std::fprintf(stderr, "device: cpu (auto: gated mixers run on the CPU only for now)\n");
    }
  }
  const auto prep = cli::prepare(sub, st.common);  // auto: the GPU when one is usable (says which)
  if (prep.done) return;
  const bool on_gpu = prep.ctx.device.device == Device::cuda;
  st.cfg.device = on_gpu ? "cuda" : "cpu";
  st.cfg.model.validate();  // model flags first: their messages name the flag (--vocab, --d-model, ...)
  resolve_slices(sub, st);
  st.cfg.seed = st.common.seed;
  st.cfg.validate();
  const MqarModel model = MqarModel::build(st.cfg.model);
  const std::int64_t longest = st.cfg.eval.empty() ? st.cfg.train.back().seq_len : st.cfg.eval.back().seq_len;
  const std::int64_t state = model.state_size(longest);
  const double bytes =
      on_gpu ? static_cast<double>(mqar_cuda_memory_bytes(st.cfg)) : mqar_memory_bytes(st.cfg, max_threads());
  if (st.dry_run) {
    print_plan(st, model, state, bytes);
    return;
  }
  require(!st.common.out.empty(), "--out FILE.h5 is required (where the curves and per-slice accuracy are written)");
  io::check_output_path(st.common.out);
  if (on_gpu) {
    sweep::require_memory(mqar_data_bytes(st.cfg), memory_what(sub, st));  // the host's share: the plan
#ifdef MEMCAP_HAVE_CUDA
    gpu::require_device_memory(static_cast<std::size_t>(bytes),
                               fmt::format("kata mqar train --mixer {} on the GPU", st.cfg.model.mixer));
#endif
  } else {
    sweep::require_memory(bytes, memory_what(sub, st));
  }

  sweep::Progress progress(st.cfg.steps_per_epoch() * st.cfg.epochs, st.progress, "kata mqar train", "steps");
  st.cfg.on_step = [&progress](std::int64_t done, std::int64_t, double loss, double acc) {
    progress.update(done, fmt::format("loss {:.4g} acc {:.3f}", loss, acc));
  };
  const auto t0 = std::chrono::steady_clock::now();
  const MqarTrainResult res = train_mqar(st.cfg);
  progress.finish();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const auto& ev = st.cfg.eval;
  const std::int64_t max_train_T =
      std::max_element(st.cfg.train.begin(), st.cfg.train.end(), [](auto& a, auto& b) { return a.seq_len < b.seq_len; })
          ->seq_len;
  double avg = 0, ood = 0;
  std::int64_t n_ood = 0;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    avg += res.final_eval[i].accuracy;
    if (ev[i].seq_len > max_train_T) {
      ood += res.final_eval[i].accuracy;
      ++n_ood;
    }
  }
  avg /= static_cast<double>(std::max<std::size_t>(1, ev.size()));
  const double nan = std::nan("");
  io::Row row;
  row.set("mixer", st.cfg.model.mixer)
      .set("map", model.map_spec)
      .set("rope", static_cast<std::int64_t>(st.cfg.model.rope))
      .set("rope_base", st.cfg.model.rope ? st.cfg.model.rope_base : nan)
      .set("task", st.task)
      .set("training_set", st.cfg.fresh_examples ? "fresh" : "fixed")
      .set("d_model", st.cfg.model.d_model)
      .set("heads", model.heads)
      .set("d_head", model.d_head)
      .set("layers", st.cfg.model.n_layers)
      .set("backbone", st.cfg.model.backbone)
      .set("vocab", st.cfg.model.vocab)
      .set("params", model.param_count())
      .set("state", state)
      .set("state_T", longest)
      .set("lr", st.cfg.lr)
      .set("batch", st.cfg.batch)
      .set("epochs", st.cfg.epochs)
      .set("epochs_run", res.epochs_run)
      .set("steps", res.steps)
      .set("stopped_early", static_cast<std::int64_t>(res.stopped_early))
      .set("seed", static_cast<std::int64_t>(st.common.seed))
      .set("final_train_loss", res.loss.empty() ? nan : res.loss.back());
  for (std::size_t i = 0; i < ev.size(); ++i) row.set(slice_col("acc", ev[i]), res.final_eval[i].accuracy);
  for (std::size_t i = 0; i < ev.size(); ++i) row.set(slice_col("loss", ev[i]), res.final_eval[i].loss);
  row.set("eval_avg", avg)
      .set("ood_avg", n_ood > 0 ? ood / static_cast<double>(n_ood) : nan)
      .set("cap_0.99", capacity_at(ev, res.final_eval, 0.99))
      .set("cap_0.90", capacity_at(ev, res.final_eval, 0.90))
      .set("wall_s", wall)
      .set("train_s", res.train_s)
      .set("eval_s", res.eval_s)
      .set("path", res.path)
      .set("mixer_kernel", res.mixer_kernel)
      .set("status", "ok");

  io::OutputFile out(st.common.out, prep.ctx);
  {
    auto g = out.root().child("runs").child("train");
    write_mqar_curves(g, st.cfg, res);  // the same /runs layout as the table2 / induction sweeps
    // At most 8 attributes per object (see apps/kata/capacity.cpp); the rest goes into one JSON string.
    g.attr("mixer", st.cfg.model.mixer);
    g.attr("map", model.map_spec);
    g.attr("path", res.path);
    g.attr("params", model.param_count());
    g.attr("state", state);
    g.attr("planned_steps", res.planned_steps);
    const nlohmann::json info = {
        {"model", model.describe()},
        {"task", st.task},
        {"sampling", "keys/values: partial Fisher-Yates on Philox; query slots: exponential keys log(u)/w, "
                     "w = (j+1)^(power_a-1) (law of sequential weighted draws without replacement, spec 7.1.10); "
                     "fillers uniform [0, V); stream = example index"},
        {"power_a", st.cfg.train.front().power_a},
        {"backbone", model.cfg.backbone + " (" + kata::MqarModel::backbone_description(model.cfg.backbone) + ")"},
        {"init", "N(0, 0.02^2) Linear/Embedding, W_o (and fc2) 0.02/sqrt(2 n_layers), zero biases, unit gains, "
                 "conv U(+-1/sqrt(k))"},
        {"optimizer", fmt::format("AdamW betas ({}, {}) eps {} wd {} (all parameters), clip {}, cosine {} -> {} over {} "
                                  "steps",
                                  st.cfg.beta1, st.cfg.beta2, st.cfg.adam_eps, st.cfg.weight_decay, st.cfg.clip,
                                  st.cfg.lr, st.cfg.lr_min, res.planned_steps)},
        {"micro_tokens", st.cfg.micro_tokens},
        {"training_set", st.cfg.fresh_examples ? "new examples every epoch (--fresh-examples)"
                                               : "one fixed set per slice, repeated every epoch"},
        {"rope", st.cfg.model.rope ? fmt::format("RoPE base {} on q, k after the short convs", st.cfg.model.rope_base)
                                   : std::string("none")},
        {"gate", model.kind == MixerKind::gated ? "GatedKATA: log gamma = log sigmoid(W_alpha x + b_alpha), unnormalized"
                 : model.kind == MixerKind::convex
                     ? "convex gate: GatedKATA with v <- (1 - gamma) v, unnormalized"
                     : model.kind == MixerKind::gated_delta
                           ? "GatedDeltaKATA: g = -exp(A_log) softplus(W_alpha x + dt_bias), beta = sigmoid(W_beta x), "
                             "q, k l2-normalized; quadratic form; A_log, dt_bias without weight decay"
                           : ""},
        {"delta", model.kind == MixerKind::delta
                      ? fmt::format("q, k l2-normalized per head (eps 1e-6) before psi; beta = sigmoid(W_beta x); chunk {}",
                                    st.cfg.model.chunk)
                      : std::string()}};
    g.attr("info_json", info.dump());
  }
  io::Table t;
  t.append(row);
  out.write_summary(t);
  out.commit();

  fmt::print("{}\n", model.describe());
  fmt::print("params {}  state {}  steps {}  epochs {}{}  path {}  train {:.2f} s  eval {:.2f} s\n", model.param_count(),
             state, res.steps, res.epochs_run, res.stopped_early ? " (early stop)" : "", res.path, res.train_s, res.eval_s);
  for (std::size_t i = 0; i < ev.size(); ++i)
    fmt::print("  {:<16} acc {:.4f}  loss {:.4g}\n", ev[i].name(), res.final_eval[i].accuracy, res.final_eval[i].loss);
  fmt::print("eval_avg {:.4f}  cap_0.99 {}  cap_0.90 {}\n", avg, capacity_at(ev, res.final_eval, 0.99),
             capacity_at(ev, res.final_eval, 0.90));
  fmt::print("wrote {}\n", st.common.out);
}

void add_train(CLI::App* mqar) {
  auto* sub = mqar->add_subcommand(
      "train",
      "Train the MQAR language model of the KATA paper (spec kata.md §4.4: tied embedding, 2 pre-norm blocks,\n"
      "BaseConv(k=3) in layer 0, the mixer in layer 1, no positional embeddings) with one mixer at one learning\n"
      "rate on the CPU or the GPU (--device: CUDA graphs, fp32 master weights), then evaluate it per slice.\n"
      "Mixers: softmax (MHA, 1 head by default), m1, m2, m4, sigma2,\n"
      "sigma4, orthant, lorentz (normalized KATA, quadratic form, ShortConv(k=4) on q/k/v, per-head output\n"
      "RMSNorm, eps 1e-4 PSD / 1e-6 orthant), delta-m1, delta-m2 (DeltaKATA: delta rule on psi of l2-normalized\n"
      "q, k, beta = sigmoid(W_beta x), chunked with the Neumann-doubling inverse). Data (§4.1): without\n"
      "--seq-len/--keys/--train-slices the Zoology training mixture (T<=256, K<=64); evaluation on the diagonal\n"
      "K = T/4, T = 512..--eval-max-len, or --eval-slices. AdamW (beta2 0.95, wd 0.1), clip 1.0, cosine.\n"
      "Writes /summary (acc_T<T>_K<K> per slice, eval_avg, ood_avg, cap_0.99, cap_0.90, params, state, ...) and\n"
      "/runs/train (loss, accuracy, lr, grad_norm per step; eval_accuracy per evaluation x slice).\n"
      "--dry-run prints the plan (parameter count, state size, slices, steps). docs/kata-mqar.md has the details.\n"
      "Example: kata mqar train --mixer m2 --d-model 128 --seq-len 256 --keys 16 --lr 1e-3 --out r.h5");
  auto st = std::make_shared<MqarState>();
  auto& c = st->cfg;
  cli::add_common(sub, st->common);
  sub->add_option("--mixer", c.model.mixer,
                  "softmax | m1 | m2 | m4 | sigma2 | sigma4 | orthant | lorentz | delta-m1 | delta-m2 (delta-<map>) | "
                  "gated-<map> (GatedKATA) | convex-<map> (convex gate) | gated-delta-<map> (GatedDeltaKATA); the "
                  "gated ones run on the CPU only")
      ->capture_default_str();
  sub->add_option("--task", st->task,
                  "mqar (§4.1) or overwrite (§4.2, T = 8K; its training set: --ow-examples)")
      ->capture_default_str()
      ->check(CLI::IsMember({"mqar", "overwrite"}));
  kata_app::add_ow_examples_option(sub, st->ow_examples, "--task overwrite");
  kata_app::add_model_options(sub, c.model, "Vocabulary V (keys from [1, V/2), values from [V/2, V))");
  sub->add_option("--seq-len", st->seq_len, "Training slice length T (with --keys: one training slice)");
  sub->add_option("--keys", st->keys, "Training slice keys K (with --seq-len)");
  sub->add_option("--train-examples", st->train_examples, "Examples of the --seq-len/--keys slice")
      ->capture_default_str();
  sub->add_option("--train-slices", st->train_slices, "Training slices T:K:N,... (instead of the mixture)");
  sub->add_option("--eval-slices", st->eval_slices, "Evaluation slices T:K[:N],... (default: the §4.1 diagonal)");
  sub->add_option("--eval-examples", st->eval_examples, "Examples per evaluation slice (default for T:K items)")
      ->capture_default_str();
  sub->add_option("--eval-max-len", st->eval_max_len, "Longest T of the default evaluation diagonal")
      ->capture_default_str();
  sub->add_option("--batch", c.batch, "Sequences per step")->capture_default_str();
  sub->add_option("--epochs", c.epochs, "Passes over the training set (cosine over all steps)")->capture_default_str();
  sub->add_option("--lr", c.lr, "Peak learning rate")->capture_default_str();
  sub->add_option("--lr-min", c.lr_min, "Final learning rate of the cosine")->capture_default_str();
  sub->add_option("--weight-decay", c.weight_decay, "AdamW weight decay (every parameter)")->capture_default_str();
  sub->add_option("--beta2", c.beta2, "AdamW beta2")->capture_default_str();
  sub->add_option("--clip", c.clip, "Global gradient-norm clip (0 = none)")->capture_default_str();
  sub->add_option("--eval-every", c.eval_every, kata_app::kEvalEveryHelp)
      ->capture_default_str();
  sub->add_option("--early-stop", c.early_stop, "Stop once every evaluation slice reaches this accuracy (>1 = never)")
      ->capture_default_str();
  sub->add_flag("--fresh-examples", c.fresh_examples, kata_app::kFreshExamplesHelp);
  sub->add_option("--precision", c.precision,
                  "Forward/backward precision: f32 or f64 (float64 reference; on the GPU f64 keeps float64 weights), "
                  "or tf32 (GPU only: f32 storage and master weights, cuBLAS products on TF32 tensor cores)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f64", "tf32"}));
  sub->add_option("--mixer-kernel", c.mixer_kernel,
                  "GPU mixer core, chosen per sequence length: auto, gemm (scores in memory, cuBLAS products; "
                  "softmax and m<g>/sigma<g> at any d_head; delta-m<g>/sigma<g> at d_head <= 128, each sequence of "
                  "up to 512 tokens solved in kernel space, longer ones on the chunked tiled core), tiled "
                  "(shared-memory tiles; every mixer, d_head <= 128), chunked-eval (O(T) chunked KATA, forward "
                  "only: the evaluation lengths; trained lengths take auto's choice) or gemm-psi (gemm with the "
                  "scores from explicit features, one product of depth n_psi; m<g>/sigma<g>). "
                  "auto: chunked-eval for KATA evaluation lengths where it is the faster (H200 cost model: sigma4 "
                  "from T ~ 170, sigma2 and m4 from ~ 1500, m2 from ~ 4400), else gemm-psi where it beats gemm "
                  "(sigma4: 5x at the training shape), else gemm where one sequence's T x T buffers fit in 1 GiB, "
                  "else tiled. What ran is the summary's mixer_kernel (e.g. "
                  "gemm+chunked-eval)")
      ->capture_default_str();
  sub->add_option("--micro-tokens", c.micro_tokens, "Tokens per micro-batch (parallel unit; results do not depend on "
                                                    "--threads)")
      ->capture_default_str();
  sub->add_flag("--dry-run", st->dry_run, "Print the plan (parameter count, state size, slices, steps) and exit");
  sub->add_option("--progress", st->progress,
                  "Progress on stderr: auto (bar on a terminal, else a line every 5 s), bar, lines, none")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  sub->callback([sub, st] { run_mqar_train(sub, *st); });
}

memcap::cli::Register reg("kata", 70, [](CLI::App& tool) {
  auto* mqar = tool.add_subcommand(
      "mqar",
      "Trained recall capacity of KATA mixers on MQAR (spec kata.md §4): a Zoology-style 2-layer language model\n"
      "trained on multi-query associative recall. Subcommands: train (one mixer, one learning rate, CPU or GPU), table2\n"
      "(the Table 2 sweep: mixers x learning rates x seeds, best learning rate per row).");
  mqar->require_subcommand(1);
  add_train(mqar);
  memcap::kata_app::add_mqar_table2(mqar);
});

}  // namespace

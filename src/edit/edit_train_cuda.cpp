// GPU base-model trainer of the fact-editing model (edit/edit_train_cuda.hpp). Per step: the host gathers the
// batch through the epoch's permutation (as train_base), maps the padding and validates it into one of two
// pinned staging slots with the Adam step t, copies them to the device with cudaMemcpyAsync, and launches
// the step's CUDA graph: forward (loss into a device scalar), backward (gradients overwritten), AdamW per
// trainable tensor (weight decay on the ≥ 2-D ones; lr and t read from device memory). The step loss is
// copied to a pinned history asynchronously; the host reads it every kSyncSteps steps and at the end of
// the epoch. Evaluation: EditPromptEval (the corpus on the device, the tied logits only at the distinct rows
// of plan_prompt_rows; the host forms value accuracy and non-fact CE as evaluate_prompts does).
#include "edit/edit_train_cuda.hpp"

#include "core/error.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>

#include "core/gpu.hpp"
#include "core/random_fill.hpp"
#include "core/timing.hpp"
#include "edit/edit_model_cuda.hpp"
#include "nn/tied_ce.hpp"
#include "nn_layers.cuh"

namespace memcap::edit {

namespace {

namespace cu = nn::cuda;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kSyncSteps = 64;  // steps between host reads of the loss history

using Pinned = gpu::PinnedBuffer;

struct Plan {
  std::int64_t S = 0, T = 0, Bmax = 1, steps_per_epoch = 0, eval_batch = 1;
  std::vector<EditShape> shapes;
};

Plan plan_of(const nn::EditSequences& seqs, std::int64_t batch, std::int64_t eval_batch, bool training) {
  require(seqs.S >= 1 && seqs.T >= 1, "edit: no training sequences");
  require(batch >= 1 && eval_batch >= 1, "edit: batch {} and evaluation batch {} must be positive", batch, eval_batch);
  require(static_cast<std::int64_t>(seqs.input_ids.size()) == seqs.S * seqs.T &&
              static_cast<std::int64_t>(seqs.labels.size()) == seqs.S * seqs.T &&
              static_cast<std::int64_t>(seqs.length.size()) == seqs.S,
          "edit: the packed sequences are inconsistent ({} x {})", seqs.S, seqs.T);
  Plan p;
  p.S = seqs.S;
  p.T = seqs.T;
  p.Bmax = std::min(batch, p.S);
  p.steps_per_epoch = (p.S + p.Bmax - 1) / p.Bmax;
  p.eval_batch = std::min(eval_batch, p.S);
  auto add = [&](std::int64_t B) {
    if (B > 0) p.shapes.push_back(EditShape{B, p.T});
  };
  if (training) {
    add(p.Bmax);
    add(p.S % p.Bmax);
  }
  add(p.eval_batch);
  add(p.S % p.eval_batch);
  return p;
}

template <class T>
struct Trainer {
  const EditModelConfig mc;
  const nn::EditSequences& seqs;
  Plan plan;
  gpu::Stream stream;
  gpu::Handles handles;
  std::unique_ptr<EditDeviceModel<T>> dm;
  std::int64_t n = 0;
  nn::ArenaLayout layout;
  gpu::Tensor lr_dev, t_dev, best;
  std::unique_ptr<EditPromptEval<T>> eval;  // the corpus on the device, logits only at the distinct rows
  // Staging slot: emb rows [Bmax·T] int32 | targets [Bmax·T] int32 | t int64 (8-aligned).
  std::size_t off_tg = 0, off_t = 0;
  std::unique_ptr<Pinned> stage[2];
  gpu::Event stage_free[2];
  int slot = 0;
  std::unique_ptr<Pinned> loss_hist;  // steps_per_epoch doubles
  std::vector<std::int32_t> tok, lab;
  std::map<std::int64_t, std::unique_ptr<gpu::Graph>> graphs;  // by B (T is fixed)

  Trainer(const EditModel& model, const nn::EditSequences& s, std::int64_t batch, std::int64_t eval_batch,
          bool training)
      : mc(model.config()),
        seqs(s),
        plan(plan_of(s, batch, eval_batch, training)),
        handles(stream),
        layout(edit_trainable_layout(model.config())) {
    MEMCAP_CUBLAS_CHECK(cublasSetMathMode(handles.blas(), CUBLAS_DEFAULT_MATH));  // exact fp32 / fp64 products
    dm = std::make_unique<EditDeviceModel<T>>(mc, plan.shapes, handles);
    n = dm->n();
    dm->upload_params(model.trainable().params);
    dm->upload_frozen(model.frozen().params);
    eval = std::make_unique<EditPromptEval<T>>(seqs, mc.vocab, plan.eval_batch, stream);
    if (!training) return;
    lr_dev = gpu::Tensor({1}, gpu::DType::f64);
    t_dev = gpu::Tensor({1}, gpu::DType::i64);
    best = gpu::Tensor({n}, gpu::dtype_of<T>());
    const std::size_t nb = static_cast<std::size_t>(plan.Bmax * plan.T);
    off_tg = nb * 4;
    off_t = (off_tg + nb * 4 + 7) / 8 * 8;
    for (auto& st : stage) st = std::make_unique<Pinned>(off_t + 8);
    loss_hist = std::make_unique<Pinned>(static_cast<std::size_t>(plan.steps_per_epoch) * sizeof(double));
    tok.resize(nb);
    lab.resize(nb);
  }

  // Gathers the sequences perm[s0 .. s0+B) into the next staging slot (validated, padding mapped), with the
  // Adam step t, and enqueues the copies to the device inputs.
  void stage_batch(const Eigen::VectorXi& perm, std::int64_t s0, std::int64_t B, std::int64_t t) {
    const std::int64_t Tl = plan.T, N = B * Tl;
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t s = perm(s0 + b);
      std::copy_n(seqs.input_ids.data() + s * Tl, Tl, tok.data() + b * Tl);
      std::copy_n(seqs.labels.data() + s * Tl, Tl, lab.data() + b * Tl);
    }
    stage_free[slot].synchronize();  // the copies that last read this slot have finished
    Pinned& p = *stage[slot];
    edit_batch_rows(tok.data(), lab.data(), N, mc.vocab, p.as<std::int32_t>());
    std::copy_n(lab.data(), N, p.as<std::int32_t>(off_tg));
    *p.as<std::int64_t>(off_t) = t;
    cudaStream_t cs = stream.get();
    const std::size_t bytes = static_cast<std::size_t>(N) * 4;
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dm->emb_rows(), p.as<std::int32_t>(), bytes, cudaMemcpyHostToDevice, cs));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dm->targets(), p.as<std::int32_t>(off_tg), bytes, cudaMemcpyHostToDevice, cs));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(t_dev.raw(), p.as<std::int64_t>(off_t), 8, cudaMemcpyHostToDevice, cs));
    stage_free[slot].record(stream);
    slot ^= 1;
  }

  void step_body(const EditShape& sh, const BaseTrainConfig& cfg) {
    cudaStream_t cs = stream.get();
    dm->forward(sh);
    dm->backward(sh);
    for (const auto& v : layout.views()) {
      const double wd = v.shape.size() >= 2 ? cfg.weight_decay : 0.0;
      cu::adam_update<T>(dm->params() + v.offset, dm->grads() + v.offset, dm->adam_m() + v.offset,
                         dm->adam_v() + v.offset, v.numel, lr_dev.data<double>(), cfg.beta1, cfg.beta2, cfg.eps, wd,
                         t_dev.data<std::int64_t>(), true, cs);
    }
  }

  void launch_step(const EditShape& sh, const BaseTrainConfig& cfg, bool use_graphs) {
    if (!use_graphs) {
      step_body(sh, cfg);
      return;
    }
    auto& g = graphs[sh.B];
    if (!g) {
      // warm-up outside the capture (library first-use work): forward + backward only, no update
      dm->forward(sh);
      dm->backward(sh);
      g = std::make_unique<gpu::Graph>();
      g->capture(stream, [&] { step_body(sh, cfg); });
    }
    g->launch(stream);
  }

  PromptEval evaluate() { return eval->run(*dm); }

  BaseTrainCudaResult run(EditModel& model, const BaseTrainConfig& cfg, bool use_graphs) {
    BaseTrainCudaResult out;
    out.path = std::string("cuda:") + (std::is_same_v<T, double> ? "f64" : "f32");
    BaseTrainResult& res = out.train;
    const std::int64_t S = plan.S, Bmax = plan.Bmax, spe = plan.steps_per_epoch;
    cudaStream_t cs = stream.get();
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(lr_dev.raw(), &cfg.lr, sizeof(double), cudaMemcpyHostToDevice, cs));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(best.raw(), dm->params(), static_cast<std::size_t>(n) * sizeof(T),
                                      cudaMemcpyDeviceToDevice, cs));
    stream.synchronize();
    double* hist = loss_hist->as<double>();
    std::int64_t t = 0;  // Adam step
    for (std::int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
      const auto t0 = Clock::now();
      const Eigen::VectorXi perm =
          rng::permutation(S, cfg.seed, kEditShuffleStream + (static_cast<std::uint64_t>(epoch) << 32));
      double loss_sum = 0;
      std::int64_t fetched = 0;  // steps of this epoch whose loss the host has read
      auto sync = [&](std::int64_t upto) {
        stream.synchronize();
        for (std::int64_t j = fetched; j < upto; ++j) {
          const double loss = hist[j];
          if (!std::isfinite(loss))
            throw NumericError(fmt::format("edit base: non-finite loss {} at epoch {}, step {}; lower --lr", loss,
                                           epoch + 1, j + 1));
          loss_sum += loss;
          ++res.steps_run;
          if (cfg.on_step) cfg.on_step(res.steps_run, spe, epoch + 1, loss);
        }
        fetched = upto;
      };
      for (std::int64_t step = 0; step < spe; ++step) {
        const std::int64_t s0 = step * Bmax, B = std::min(Bmax, S - s0);
        ++t;
        stage_batch(perm, s0, B, t);
        launch_step(EditShape{B, plan.T}, cfg, use_graphs);
        MEMCAP_CUDA_CHECK(cudaMemcpyAsync(hist + step, dm->loss_mean(), sizeof(double), cudaMemcpyDeviceToHost, cs));
        if (step + 1 - fetched >= kSyncSteps) sync(step + 1);
      }
      sync(spe);
      res.train_s += seconds_since(t0);
      const PromptEval ev = evaluate();
      if (res.record_epoch(epoch, loss_sum / static_cast<double>(spe), ev)) {
        out.final_eval = ev;
        MEMCAP_CUDA_CHECK(cudaMemcpyAsync(best.raw(), dm->params(), static_cast<std::size_t>(n) * sizeof(T),
                                          cudaMemcpyDeviceToDevice, cs));
      }
      if (ev.value_accuracy >= cfg.target_accuracy) {
        res.stopped_early = epoch + 1 < cfg.epochs;
        break;
      }
    }
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dm->params(), best.raw(), static_cast<std::size_t>(n) * sizeof(T),
                                      cudaMemcpyDeviceToDevice, cs));
    model.trainable().params = dm->download(0);  // synchronises
    return out;
  }
};

std::size_t bytes_of(const EditModelConfig& c, const nn::EditSequences& seqs, std::int64_t batch,
                     std::int64_t eval_batch, bool training, std::size_t elem) {
  const Plan p = plan_of(seqs, batch, eval_batch, training);
  const double total = static_cast<double>(edit_device_bytes(c, p.shapes, elem)) +
                       static_cast<double>(EditPromptEval<float>::device_bytes(seqs)) +
                       static_cast<double>(edit_trainable_count(c)) * static_cast<double>(elem) +
                       static_cast<double>(gpu::Handles::kBlasWorkspaceBytes) + (64 << 20);
  return total >= 1.8e19 ? static_cast<std::size_t>(1.8e19) : static_cast<std::size_t>(total);
}

void check_precision(const std::string& precision) {
  require(precision == "f32" || precision == "f64", "edit: GPU precision '{}': use f32 or f64", precision);
}

}  // namespace

std::size_t edit_base_cuda_bytes(const EditModelConfig& c, const nn::EditSequences& seqs, const BaseTrainConfig& cfg,
                                 const BaseTrainCudaOptions& opt) {
  check_precision(opt.precision);
  return bytes_of(c, seqs, cfg.batch, opt.eval_batch, true, opt.precision == "f64" ? 8 : 4);
}

BaseTrainCudaResult train_base_cuda(EditModel& model, const nn::EditSequences& seqs, const BaseTrainConfig& cfg,
                                    const BaseTrainCudaOptions& opt) {
  cfg.validate();
  check_precision(opt.precision);
  require(seqs.S >= 1, "edit: no training sequences");
  gpu::require_device_memory(edit_base_cuda_bytes(model.config(), seqs, cfg, opt),
                             fmt::format("hebb edit base on the GPU (d = {}, vocabulary {}, {} sequences, {})",
                                         model.config().d, model.config().vocab, seqs.S, opt.precision));
  if (opt.precision == "f64")
    return Trainer<double>(model, seqs, cfg.batch, opt.eval_batch, true).run(model, cfg, opt.graphs);
  return Trainer<float>(model, seqs, cfg.batch, opt.eval_batch, true).run(model, cfg, opt.graphs);
}

PromptEval evaluate_prompts_cuda(const EditModel& model, const nn::EditSequences& seqs, const std::string& precision,
                                 std::int64_t batch) {
  check_precision(precision);
  gpu::require_device_memory(bytes_of(model.config(), seqs, 1, batch, false, precision == "f64" ? 8 : 4),
                             fmt::format("the GPU evaluation of {} prompts", seqs.S));
  if (precision == "f64") return Trainer<double>(model, seqs, 1, batch, false).evaluate();
  return Trainer<float>(model, seqs, 1, batch, false).evaluate();
}

}  // namespace memcap::edit

#else  // no CUDA in this build

namespace memcap::edit {

BaseTrainCudaResult train_base_cuda(EditModel&, const nn::EditSequences&, const BaseTrainConfig&,
                                    const BaseTrainCudaOptions&) {
  throw DeviceError("this build has no CUDA: the GPU path of hebb edit base is not available; use --device cpu");
}
PromptEval evaluate_prompts_cuda(const EditModel&, const nn::EditSequences&, const std::string&, std::int64_t) {
  throw DeviceError("this build has no CUDA: the GPU prompt evaluation is not available; use --device cpu");
}
std::size_t edit_base_cuda_bytes(const EditModelConfig&, const nn::EditSequences&, const BaseTrainConfig&,
                                 const BaseTrainCudaOptions&) {
  return 0;
}

}  // namespace memcap::edit

#endif  // MEMCAP_HAVE_CUDA

// MQAR GPU trainer (mqar_train_cuda.hpp). Per step: the host draws the batch (generate_example, OpenMP over
// examples) into one of two pinned staging buffers, copies it to the device inputs with cudaMemcpyAsync,
// and launches the step's CUDA graph: forward, fused CE backward, backward (mqar_model_cuda.cpp), the
// global gradient norm in fixed float64 chunks, the step record (loss, correct, norm into device
// histories; non-finite detection), the clip scale and the gated AdamW (nn::cuda::adam_step_gated) whose
// learning rate comes from a device schedule indexed by the device step counter. The host reads the
// histories back every kSyncSteps steps and at every evaluation; a non-finite loss or norm stops the
// device at once (later steps are no-ops) and the host reports it at the next read.
#include "kata/mqar_train_cuda.hpp"

#include "core/error.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "core/gpu.hpp"
#include "core/timing.hpp"
#include "kata/mqar_model_cuda.hpp"
#include "kata_mqar_train.cuh"
#include "nn/layers.hpp"
#include "nn_train_state.cuh"

namespace memcap::kata {

namespace {

namespace cu = nn::cuda;
namespace mc = mqar::cuda;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kSyncSteps = 64;  // steps between host reads of the device histories (progress)

using Pinned = gpu::PinnedBuffer;

// Tokens of one evaluation batch (at least the training batch's): 64 sequences at T = 4096. Larger batches keep
// the GPU busy where a mixer core runs one block per (sequence, head) for a long sequential walk (the chunked
// delta rule), at the price of activation buffers for this many tokens (forward only; the backward workspace is
// sized for the training shapes).
constexpr std::int64_t kEvalTokens = std::int64_t(1) << 18;

std::int64_t eval_batch(const TaskSlice& s, std::int64_t eval_tokens) {
  return std::clamp<std::int64_t>(eval_tokens / s.seq_len, 1, s.examples);
}

// Every batch shape of a training (full and last partial batch per training slice, evaluation batches).
struct Plan {
  std::vector<MqarShape> shapes;
  std::int64_t max_tokens = 1, eval_tokens = 1;
};

Plan plan_of(const MqarTrainConfig& cfg) {
  Plan p;
  for (const auto& s : cfg.train) p.max_tokens = std::max(p.max_tokens, std::min(cfg.batch, s.examples) * s.seq_len);
  p.eval_tokens = std::max(p.max_tokens, kEvalTokens);
  auto add = [&](std::int64_t B, const TaskSlice& s, bool backward) {
    if (B > 0) p.shapes.push_back(MqarShape{B, s.seq_len, B * s.queries(), backward});
  };
  for (const auto& s : cfg.train) {
    add(std::min(cfg.batch, s.examples), s, true);
    add(s.examples % cfg.batch, s, true);
  }
  for (const auto& s : cfg.eval) {
    const std::int64_t eb = eval_batch(s, p.eval_tokens);
    add(eb, s, false);
    add(s.examples % eb, s, false);
  }
  return p;
}

template <class T>
struct CudaTrainer {
  const MqarTrainConfig& cfg;
  const MqarModel& model;
  Plan plan;
  gpu::Stream stream;
  gpu::Handles handles;
  std::unique_ptr<MqarDeviceModel<T>> dm;
  std::int64_t n = 0, planned = 0, chunks = 1;
  gpu::Tensor state, dummy, sched, hist_loss, hist_correct, hist_gn, partial, coef, acc_loss, acc_correct;
  // Pinned staging, two slots: tokens [max_tokens] int32 | rows [max_labelled] int64 | targets int32.
  std::int64_t max_tokens = 1, max_labelled = 1;
  std::unique_ptr<Pinned> stage[2];
  gpu::Event stage_free[2];
  int slot = 0;
  std::vector<std::int32_t> labels;
  std::vector<std::int64_t> rows;
  std::vector<std::int32_t> targets;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::unique_ptr<gpu::Graph>> graphs;

  CudaTrainer(const MqarTrainConfig& c, const MqarModel& m, bool training)
      : cfg(c), model(m), plan(plan_of(c)), handles(stream) {
    n = model.param_count();
    for (const auto& s : plan.shapes) {
      max_tokens = std::max(max_tokens, s.B * s.T);
      max_labelled = std::max(max_labelled, s.labelled);
    }
    dm = std::make_unique<MqarDeviceModel<T>>(model, plan.shapes, handles, cfg.mixer_kernel, cfg.precision == "tf32");
    planned = training ? cfg.steps_per_epoch() * cfg.epochs : 1;
    chunks = mc::grad_norm_chunks(n);
    state = gpu::Tensor({static_cast<std::int64_t>(sizeof(cu::TrainState))}, gpu::DType::u8);
    dummy = gpu::Tensor({static_cast<std::int64_t>(sizeof(cu::TrainState))}, gpu::DType::u8);
    sched = gpu::Tensor({std::max<std::int64_t>(planned, 1) * static_cast<std::int64_t>(sizeof(cu::AdamScalars))},
                        gpu::DType::u8);
    hist_loss = gpu::Tensor({std::max<std::int64_t>(planned, 1)}, gpu::DType::f64);
    hist_correct = gpu::Tensor({std::max<std::int64_t>(planned, 1)}, gpu::DType::i64);
    hist_gn = gpu::Tensor({std::max<std::int64_t>(planned, 1)}, gpu::DType::f64);
    partial = gpu::Tensor({chunks}, gpu::DType::f64);
    coef = gpu::Tensor({1}, gpu::DType::f64);
    acc_loss = gpu::Tensor({1}, gpu::DType::f64);
    acc_correct = gpu::Tensor({1}, gpu::DType::i64);
    const std::size_t bytes =
        static_cast<std::size_t>(max_tokens) * 4 + static_cast<std::size_t>(max_labelled) * 12 + 64;
    for (auto& st : stage) st = std::make_unique<Pinned>(bytes);
    labels.resize(static_cast<std::size_t>(max_tokens));
    cu::TrainState off;
    off.stop = 1;
    off.end = 0;
    upload_state(dummy, off);
  }

  cu::TrainState* st() const { return static_cast<cu::TrainState*>(state.raw()); }
  cu::TrainState* st_dummy() const { return static_cast<cu::TrainState*>(dummy.raw()); }

  void upload_state(const gpu::Tensor& t, const cu::TrainState& s) {
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(t.raw(), &s, sizeof s, cudaMemcpyHostToDevice, stream.get()));
    stream.synchronize();
  }
  cu::TrainState download_state() {
    cu::TrainState s;
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&s, state.raw(), sizeof s, cudaMemcpyDeviceToHost, stream.get()));
    stream.synchronize();
    return s;
  }

  // Draws ne examples (idx[e], or first + e) of slice s into the next staging slot and enqueues the copy
  // to the device inputs; returns the batch shape.
  MqarShape stage_batch(const TaskSlice& s, std::uint64_t sseed, const std::int64_t* idx, std::int64_t first,
                        std::int64_t ne) {
    const std::int64_t Tl = s.seq_len, N = ne * Tl;
    require(N <= max_tokens, "MQAR GPU trainer: batch of {} tokens exceeds the planned {}", N, max_tokens);
    stage_free[slot].synchronize();  // the copy that last read this slot has finished
    Pinned& p = *stage[slot];
    std::int32_t* tok = p.as<std::int32_t>();
#pragma omp parallel for schedule(static)
    for (std::int64_t e = 0; e < ne; ++e)
      generate_example(s, sseed, idx ? idx[e] : first + e, tok + e * Tl, labels.data() + e * Tl);
    mqar_labelled_rows(tok, labels.data(), N, model.cfg.vocab, rows, targets);
    const auto nl = static_cast<std::int64_t>(rows.size());
    require(nl <= max_labelled, "MQAR GPU trainer: {} labelled positions exceed the planned {} (slice {})", nl,
            max_labelled, s.name());
    const std::size_t off_rows = static_cast<std::size_t>(max_tokens) * 4;
    const std::size_t off_rows_al = (off_rows + 7) / 8 * 8;
    const std::size_t off_tg = off_rows_al + static_cast<std::size_t>(max_labelled) * 8;
    std::copy(rows.begin(), rows.end(), p.as<std::int64_t>(off_rows_al));
    std::copy(targets.begin(), targets.end(), p.as<std::int32_t>(off_tg));
    cudaStream_t cs = stream.get();
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dm->tokens(), tok, static_cast<std::size_t>(N) * 4, cudaMemcpyHostToDevice, cs));
    if (nl > 0) {
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dm->rows(), p.as<std::int64_t>(off_rows_al), static_cast<std::size_t>(nl) * 8,
                                        cudaMemcpyHostToDevice, cs));
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dm->targets(), p.as<std::int32_t>(off_tg), static_cast<std::size_t>(nl) * 4,
                                        cudaMemcpyHostToDevice, cs));
    }
    stage_free[slot].record(stream);
    slot ^= 1;
    return MqarShape{ne, Tl, nl};
  }

  // One training step on the device, gated by `s` (the dummy state runs it without any update).
  void step_body(const MqarShape& sh, cu::TrainState* s) {
    cudaStream_t cs = stream.get();
    dm->forward(sh, true);
    dm->backward(sh);
    mc::grad_sumsq<T>(partial.data<double>(), dm->grads(), n, cs);
    mc::record_step(partial.data<double>(), chunks, dm->loss_mean(), dm->n_correct(), cfg.clip, s,
                    hist_loss.data<double>(), static_cast<long long*>(hist_correct.raw()), hist_gn.data<double>(),
                    coef.data<double>(), cs);
    mc::scale_grads<T>(dm->grads(), n, coef.data<double>(), cs);
    cu::adam_step_gated<T>(dm->params(), dm->grads(), 1, 0, dm->adam_m(), dm->adam_v(), n,
                           static_cast<const cu::AdamScalars*>(sched.raw()), s, cfg.beta1, cfg.beta2, cfg.adam_eps,
                           cfg.weight_decay, true, cs);
  }

  // Replays (capturing on first use) the step graph of this shape.
  void launch_step(const MqarShape& sh) {
    auto& g = graphs[std::make_tuple(sh.B, sh.T, sh.labelled)];
    if (!g) {
      step_body(sh, st_dummy());  // warm-up outside the capture (library first-use work), no update
      g = std::make_unique<gpu::Graph>();
      g->capture(stream, [&] { step_body(sh, st()); });
    }
    g->launch(stream);
  }

  // max_errors >= 0 (the early-stop screen): stops after the batch in which more than max_errors predictions
  // were wrong; the result then covers fewer positions than the slice.
  SliceResult evaluate(const TaskSlice& s, std::uint64_t sseed, std::int64_t max_errors = -1) {
    const std::int64_t eb = eval_batch(s, plan.eval_tokens);  // the planned evaluation shapes
    acc_loss.fill_zero(stream);
    acc_correct.fill_zero(stream);
    std::int64_t labelled = 0;
    double loss = 0;
    long long correct = 0;
    for (std::int64_t e0 = 0; e0 < s.examples; e0 += eb) {
      const std::int64_t ne = std::min(s.examples, e0 + eb) - e0;
      const MqarShape sh = stage_batch(s, sseed, nullptr, e0, ne);
      dm->forward(sh, false);
      mc::eval_accumulate(acc_loss.data<double>(), static_cast<long long*>(acc_correct.raw()), dm->loss_mean(),
                          dm->n_correct(), sh.labelled, stream.get());
      labelled += sh.labelled;
      if (max_errors < 0) continue;
      MEMCAP_CUDA_CHECK(
          cudaMemcpyAsync(&correct, acc_correct.raw(), sizeof correct, cudaMemcpyDeviceToHost, stream.get()));
      stream.synchronize();
      if (labelled - correct > max_errors) break;
    }
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&loss, acc_loss.raw(), sizeof loss, cudaMemcpyDeviceToHost, stream.get()));
    MEMCAP_CUDA_CHECK(
        cudaMemcpyAsync(&correct, acc_correct.raw(), sizeof correct, cudaMemcpyDeviceToHost, stream.get()));
    stream.synchronize();
    SliceResult r;
    r.labelled = labelled;
    const double nl = static_cast<double>(std::max<std::int64_t>(1, labelled));
    r.accuracy = static_cast<double>(correct) / nl;
    r.loss = loss / nl;
    return r;
  }

  MqarTrainResult run() {
    MqarTrainResult res;
    res.path = std::string("cuda:") + cfg.precision;
    res.mixer_kernel = dm->mixer_kernel();
    res.params = n;
    res.planned_steps = planned;
    std::vector<std::uint64_t> eseed;
    for (std::size_t i = 0; i < cfg.eval.size(); ++i) eseed.push_back(slice_seed(cfg.seed, "eval", cfg.eval[i], i));
    std::int64_t t = 0, epoch0 = 0, skip = 0;
    if (cfg.resume) {
      const MqarCheckpoint& ck = *cfg.resume;
      require(static_cast<std::int64_t>(ck.params.size()) == n && static_cast<std::int64_t>(ck.m.size()) == n &&
                  static_cast<std::int64_t>(ck.v.size()) == n,
              "the checkpoint holds {} parameters but the model has {}", ck.params.size(), n);
      require(ck.steps >= 0 && ck.epoch >= 0 && ck.epoch <= cfg.epochs && ck.batch_in_epoch >= 0 && ck.steps <= planned,
              "the checkpoint's position (step {}, epoch {}) does not fit this training", ck.steps, ck.epoch);
      upload_arena(ck.params, 0);
      upload_arena(ck.m, 2);
      upload_arena(ck.v, 3);
      MqarTrainResult r = ck.partial;
      r.path = res.path;
      r.mixer_kernel = res.mixer_kernel;
      r.params = res.params;
      r.planned_steps = res.planned_steps;
      res = std::move(r);
      t = ck.steps;
      epoch0 = ck.epoch;
      skip = ck.batch_in_epoch;
    } else {
      dm->upload_params(mqar_init_params(model, cfg.seed));
    }
    {
      const auto sc = cu::adam_schedule(cfg.lr, cfg.lr_min, planned, cfg.beta1, cfg.beta2, cfg.weight_decay);
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(sched.raw(), sc.data(), sc.size() * sizeof(cu::AdamScalars),
                                        cudaMemcpyHostToDevice, stream.get()));
      stream.synchronize();
      cu::TrainState s0;
      s0.step = t;
      s0.end = planned;
      s0.stop_loss = -1;
      upload_state(state, s0);
    }
    std::int64_t fetched = t;  // steps whose history is in res
    std::vector<double> hl, hg;
    std::vector<long long> hc;
    std::vector<std::int64_t> nb_of;  // examples (labelled denominators) of the steps not yet fetched
    std::vector<double> lr_of;
    auto sync = [&](std::int64_t upto) {
      const cu::TrainState s = download_state();
      const std::int64_t k = upto - fetched;
      if (k > 0) {
        hl.resize(static_cast<std::size_t>(k));
        hg.resize(static_cast<std::size_t>(k));
        hc.resize(static_cast<std::size_t>(k));
        cudaStream_t cs = stream.get();
        MEMCAP_CUDA_CHECK(cudaMemcpyAsync(hl.data(), hist_loss.data<double>() + fetched,
                                          static_cast<std::size_t>(k) * 8, cudaMemcpyDeviceToHost, cs));
        MEMCAP_CUDA_CHECK(cudaMemcpyAsync(hg.data(), hist_gn.data<double>() + fetched, static_cast<std::size_t>(k) * 8,
                                          cudaMemcpyDeviceToHost, cs));
        MEMCAP_CUDA_CHECK(cudaMemcpyAsync(hc.data(), static_cast<const long long*>(hist_correct.raw()) + fetched,
                                          static_cast<std::size_t>(k) * 8, cudaMemcpyDeviceToHost, cs));
        stream.synchronize();
      }
      if (s.nonfinite) {
        const std::int64_t bad = s.step + 1;  // the CPU trainer's 1-based step
        throw NumericError(fmt::format("training diverged: non-finite {} at step {}; lower --lr",
                                       s.nonfinite == 1 ? "loss" : "gradient", bad));
      }
      MEMCAP_ASSERT(s.step == upto, "MQAR GPU trainer: step counter out of sync");
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int64_t step = fetched + j + 1;
        const double total = static_cast<double>(nb_of[static_cast<std::size_t>(j)]);
        res.step.push_back(step);
        res.loss.push_back(hl[static_cast<std::size_t>(j)]);
        res.accuracy.push_back(static_cast<double>(hc[static_cast<std::size_t>(j)]) / total);
        res.lr.push_back(lr_of[static_cast<std::size_t>(j)]);
        res.grad_norm.push_back(hg[static_cast<std::size_t>(j)]);
        if (cfg.on_step) cfg.on_step(step, planned, res.loss.back(), res.accuracy.back());
      }
      nb_of.clear();
      lr_of.clear();
      fetched = upto;
    };
    auto checkpoint = [&](std::int64_t epoch, std::int64_t pos, double epoch_s) {
      cfg.on_checkpoint(make_mqar_checkpoint(dm->download(0), dm->download(2), dm->download(3), res, t, epoch, pos,
                                             epoch_s));
    };
    for (std::int64_t epoch = epoch0; epoch < cfg.epochs; ++epoch) {
      const auto t0 = Clock::now();
      const MqarEpochPlan ep = mqar_epoch_plan(cfg, epoch);
      for (auto pos = epoch == epoch0 ? skip : 0; pos < static_cast<std::int64_t>(ep.order.size()); ++pos) {
        const auto [s, b] = ep.batches[static_cast<std::size_t>(ep.order[static_cast<std::size_t>(pos)])];
        const TaskSlice& sl = cfg.train[s];
        const std::int64_t e0 = b * cfg.batch, nb = std::min(sl.examples, e0 + cfg.batch) - e0;
        const MqarShape sh = stage_batch(sl, ep.seed[s], ep.perm[s].data() + e0, 0, nb);
        launch_step(sh);
        nb_of.push_back(nb * sl.queries());
        lr_of.push_back(nn::cosine_lr(cfg.lr, cfg.lr_min, t, planned));
        ++t;
        const bool ck_now = cfg.on_checkpoint && cfg.checkpoint_every > 0 && t % cfg.checkpoint_every == 0;
        if (t - fetched >= kSyncSteps || ck_now) sync(t);
        if (ck_now) checkpoint(epoch, pos + 1, seconds_since(t0));
      }
      sync(t);
      res.train_s += seconds_since(t0);
      res.epochs_run = epoch + 1;
      const bool last = epoch + 1 == cfg.epochs;
      const auto te = Clock::now();
      std::vector<SliceResult> ev;
      const MqarEpochEnd end = mqar_epoch_end(cfg, res, epoch, ev, [&](std::size_t i, std::int64_t max_errors) {
        return evaluate(cfg.eval[i], eseed[i], max_errors);
      });
      res.eval_s += seconds_since(te);
      if (end == MqarEpochEnd::none) continue;
      if (end == MqarEpochEnd::record && record_mqar_evaluation(res, cfg, epoch + 1, t, std::move(ev)) && !last) {
        res.stopped_early = true;
        break;
      }
      if (!last && cfg.on_checkpoint) checkpoint(epoch + 1, 0, 0.0);
    }
    res.steps = t;
    res.final_params = dm->download(0);
    return res;
  }

  void upload_arena(const std::vector<double>& host, int region) {
    const std::vector<T> c(host.begin(), host.end());
    T* dst = region == 0 ? dm->params() : region == 2 ? dm->adam_m() : dm->adam_v();
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dst, c.data(), c.size() * sizeof(T), cudaMemcpyHostToDevice, stream.get()));
    stream.synchronize();
  }
};

std::size_t bytes_of(const MqarTrainConfig& cfg) {
  const MqarModel model = MqarModel::build(cfg.model);
  const Plan p = plan_of(cfg);
  const std::size_t elem = cfg.precision == "f64" ? 8 : 4;
  const double planned = static_cast<double>(cfg.steps_per_epoch() * cfg.epochs);
  const double total = static_cast<double>(mqar_device_bytes(model, p.shapes, elem, cfg.mixer_kernel)) + 48 * planned +
                       static_cast<double>(gpu::Handles::kBlasWorkspaceBytes) + (64 << 20);
  return total >= 1.8e19 ? static_cast<std::size_t>(1.8e19) : static_cast<std::size_t>(total);
}

}  // namespace

std::size_t mqar_cuda_memory_bytes(const MqarTrainConfig& cfg) { return bytes_of(cfg); }

MqarTrainResult train_mqar_cuda(const MqarTrainConfig& cfg) {
  cfg.validate();
  const MqarModel model = MqarModel::build(cfg.model);
  gpu::require_device_memory(bytes_of(cfg), fmt::format("kata mqar train --mixer {} on the GPU (batch {}, {})",
                                                        cfg.model.mixer, cfg.batch, cfg.precision));
  if (cfg.precision == "f64") return CudaTrainer<double>(cfg, model, true).run();
  return CudaTrainer<float>(cfg, model, true).run();
}

SliceResult evaluate_mqar_cuda(const MqarModel& model, const std::vector<double>& params, const TaskSlice& slice,
                               std::uint64_t seed, const std::string& precision) {
  slice.validate();
  require(static_cast<std::int64_t>(params.size()) == model.param_count(), "evaluate_mqar: {} parameters, model has {}",
          params.size(), model.param_count());
  require(precision == "f32" || precision == "f64" || precision == "tf32", "--precision '{}': use f32, f64 or tf32",
          precision);
  MqarTrainConfig c;
  c.model = model.cfg;
  c.precision = precision;
  c.batch = std::max<std::int64_t>(1, std::min<std::int64_t>(slice.examples, 65536 / slice.seq_len));
  TaskSlice tr = slice;  // sizes the buffers: one batch of at most 64k tokens of this slice
  tr.examples = c.batch;
  c.train = {tr};
  c.eval = {slice};
  auto run = [&](auto tag) {
    using T = decltype(tag);
    CudaTrainer<T> tr(c, model, false);
    tr.dm->upload_params(params);
    return tr.evaluate(slice, seed);
  };
  if (precision == "f64") return run(double{});
  return run(float{});
}

}  // namespace memcap::kata

#else  // no CUDA in this build

namespace memcap::kata {

MqarTrainResult train_mqar_cuda(const MqarTrainConfig&) {
  throw DeviceError("this build has no CUDA: the GPU path of kata mqar train is not available; use --device cpu");
}
SliceResult evaluate_mqar_cuda(const MqarModel&, const std::vector<double>&, const TaskSlice&, std::uint64_t,
                               const std::string&) {
  throw DeviceError("this build has no CUDA: the GPU path of the MQAR evaluation is not available; use --device cpu");
}
std::size_t mqar_cuda_memory_bytes(const MqarTrainConfig&) { return 0; }

}  // namespace memcap::kata

#endif  // MEMCAP_HAVE_CUDA

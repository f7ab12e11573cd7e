// MQAR training loop and evaluation (mqar_train.hpp). One step: the batch's micro-batches run in
// parallel (OpenMP, dynamic), each into its own gradient buffer; the buffers are summed in index order
// into the float64 master gradient, clipped by global norm, and AdamW (nn::cpu::adam_update) updates
// the float64 master parameters, which are copied to the working precision.
#include "kata/mqar_train.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/threads.hpp"
#include "core/timing.hpp"
#include "kata/mqar_train_cuda.hpp"
#include "nn/layers.hpp"

namespace memcap::kata {

namespace {

constexpr std::uint64_t kShuffleStream = rng::kUser + 121;  // epoch permutations (stream id | epoch, slice)
constexpr std::int64_t kSumChunk = 1 << 14;                  // fixed chunking of the float64 reductions
constexpr std::int64_t kSlots = 16;                          // gradient buffers per step (fixed: determinism)
constexpr std::int64_t kScreenBlock = 16;                    // micro-batches between early-stop screen checks

std::int64_t micro_size(std::int64_t micro_tokens, std::int64_t T) { return std::max<std::int64_t>(1, micro_tokens / T); }

// Σ x² in fixed chunks summed in order (independent of the thread count).
double norm2(const std::vector<double>& g) {
  const auto n = static_cast<std::int64_t>(g.size());
  const std::int64_t nc = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> part(static_cast<std::size_t>(nc), 0.0);
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < nc; ++c) {
    double s = 0;
    for (std::int64_t i = c * kSumChunk; i < std::min(n, (c + 1) * kSumChunk); ++i) s += g[static_cast<std::size_t>(i)] * g[static_cast<std::size_t>(i)];
    part[static_cast<std::size_t>(c)] = s;
  }
  return std::accumulate(part.begin(), part.end(), 0.0);
}

// Permutation of [0, n) for (epoch, slice): Fisher–Yates on Philox draws.
std::vector<std::int64_t> permutation(std::uint64_t seed, std::uint64_t stream, std::int64_t n) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng::below(seed, stream, static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(i + 1)));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

// The first exception thrown inside an OpenMP loop, rethrown after it (an exception must not leave a
// parallel region).
struct ErrorSlot {
  std::exception_ptr e;
  std::atomic<bool> flag{false};
  bool failed() const { return flag.load(std::memory_order_relaxed); }
  void capture() {
#pragma omp critical(mqar_error_slot)
    if (!e) e = std::current_exception();
    flag = true;
  }
  void rethrow() const {
    if (e) std::rethrow_exception(e);
  }
};

template <class T>
struct Trainer {
  const MqarTrainConfig& cfg;
  const MqarModel& model;
  std::vector<double> params, grads, m, v;  // float64 master arenas
  std::vector<T> work;                      // working-precision parameters
  std::vector<std::vector<T>> gbuf;         // gradient buffers of a step (micro-batch u -> slot u % kSlots)
  std::vector<MqarWorkspace<T>> ws;         // one per thread
  std::vector<std::vector<std::int32_t>> in, lab;  // one per thread

  Trainer(const MqarTrainConfig& c, const MqarModel& mo) : cfg(c), model(mo) {
    params = mqar_init_params(model, cfg.seed);
    grads.assign(params.size(), 0.0);
    m.assign(params.size(), 0.0);
    v.assign(params.size(), 0.0);
    work.assign(params.begin(), params.end());
    const int nt = std::max(1, omp_get_max_threads());
    ws.resize(static_cast<std::size_t>(nt));
    in.resize(static_cast<std::size_t>(nt));
    lab.resize(static_cast<std::size_t>(nt));
  }

  // Forward (and, when grad is not null, backward with loss scale `scale`) of `ne` examples of slice s on
  // the calling thread: example e is idx[e] when idx is given, else first + e.
  MqarForward micro(const TaskSlice& s, std::uint64_t sseed, const std::int64_t* idx, std::int64_t first,
                    std::int64_t ne, T* grad, double scale) {
    const auto th = static_cast<std::size_t>(omp_get_thread_num());
    const std::int64_t Tl = s.seq_len;
    auto& I = in[th];
    auto& L = lab[th];
    I.resize(static_cast<std::size_t>(ne * Tl));
    L.resize(I.size());
    for (std::int64_t e = 0; e < ne; ++e)
      generate_example(s, sseed, idx ? idx[e] : first + e, I.data() + e * Tl, L.data() + e * Tl);
    const MqarForward f = mqar_forward(model, work.data(), ws[th], I.data(), L.data(), ne, Tl);
    if (grad) mqar_backward(model, work.data(), grad, ws[th], scale);
    return f;
  }

  // One optimizer step on examples `idx` of training slice s; returns (loss, accuracy, grad norm).
  std::tuple<double, double, double> step(const TaskSlice& s, std::uint64_t sseed, const std::int64_t* idx,
                                          std::int64_t nb, double lr, std::int64_t t) {
    const std::int64_t mb = micro_size(cfg.micro_tokens, s.seq_len), nu = (nb + mb - 1) / mb;
    const double total = static_cast<double>(nb * s.queries());
    // Micro-batch u accumulates into slot u % kSlots; slots run in parallel, each over its micro-batches in
    // order, and are summed in slot order: the same sums for any thread count.
    const std::int64_t ns = std::min(nu, kSlots);
    if (static_cast<std::int64_t>(gbuf.size()) < ns) gbuf.resize(static_cast<std::size_t>(ns));
    std::vector<double> loss(static_cast<std::size_t>(nu), 0.0);
    std::vector<std::int64_t> correct(static_cast<std::size_t>(nu), 0);
    ErrorSlot err;
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t slot = 0; slot < ns; ++slot) {
      if (err.failed()) continue;
      try {
        auto& g = gbuf[static_cast<std::size_t>(slot)];
        g.assign(params.size(), T(0));
        for (std::int64_t u = slot; u < nu; u += kSlots) {
          const std::int64_t e0 = u * mb, ne = std::min(nb, e0 + mb) - e0;
          const MqarForward f = micro(s, sseed, idx + e0, 0, ne, g.data(), 1.0 / total);
          loss[static_cast<std::size_t>(u)] = f.loss_sum;
          correct[static_cast<std::size_t>(u)] = f.correct;
        }
      } catch (...) {
        err.capture();
      }
    }
    err.rethrow();
    const double mean_loss = std::accumulate(loss.begin(), loss.end(), 0.0) / total;
    if (!std::isfinite(mean_loss))
      throw NumericError(fmt::format("training diverged: non-finite loss at step {}; lower --lr", t));
    const auto n = static_cast<std::int64_t>(params.size());
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      double acc = 0;
      for (std::int64_t u = 0; u < ns; ++u) acc += static_cast<double>(gbuf[static_cast<std::size_t>(u)][static_cast<std::size_t>(i)]);
      grads[static_cast<std::size_t>(i)] = acc;
    }
    const double gn = std::sqrt(norm2(grads));
    if (!std::isfinite(gn)) throw NumericError(fmt::format("training diverged: non-finite gradient at step {}; lower --lr", t));
    if (cfg.clip > 0 && gn > cfg.clip) {  // torch.nn.utils.clip_grad_norm_
      const double c = cfg.clip / (gn + 1e-6);
      for (auto& x : grads) x *= c;
    }
    // AdamW over the arena; §2.11.5: A_log and dt_bias (GatedDeltaKATA) without weight decay.
    for (const auto& vw : model.layout.views()) {
      const auto o = static_cast<std::size_t>(vw.offset);
      nn::cpu::adam_update(params.data() + o, grads.data() + o, m.data() + o, v.data() + o, vw.numel, lr, cfg.beta1,
                           cfg.beta2, cfg.adam_eps, MqarModel::no_weight_decay(vw.name) ? 0.0 : cfg.weight_decay, t,
                           true);
    }
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) work[static_cast<std::size_t>(i)] = static_cast<T>(params[static_cast<std::size_t>(i)]);
    const double acc = static_cast<double>(std::accumulate(correct.begin(), correct.end(), std::int64_t(0))) / total;
    return {mean_loss, acc, gn};
  }

  // max_errors >= 0 (the early-stop screen): stops after the block of micro-batches in which more than
  // max_errors predictions were wrong; the result then covers fewer positions than the slice.
  SliceResult evaluate(const TaskSlice& s, std::uint64_t sseed, std::int64_t max_errors = -1) {
    const std::int64_t mb = micro_size(cfg.micro_tokens, s.seq_len), nu = (s.examples + mb - 1) / mb;
    std::vector<double> loss(static_cast<std::size_t>(nu), 0.0);
    std::vector<std::int64_t> correct(static_cast<std::size_t>(nu), 0), labelled(static_cast<std::size_t>(nu), 0);
    const std::int64_t block = max_errors < 0 ? nu : kScreenBlock;
    std::int64_t done = 0, wrong = 0;
    for (; done < nu && (max_errors < 0 || wrong <= max_errors); done = std::min(nu, done + block)) {
      const std::int64_t u1 = std::min(nu, done + block);
      ErrorSlot err;
#pragma omp parallel for schedule(dynamic, 1)
      for (std::int64_t u = done; u < u1; ++u) {
        if (err.failed()) continue;
        try {
          const std::int64_t e0 = u * mb, ne = std::min(s.examples, e0 + mb) - e0;
          const MqarForward f = micro(s, sseed, nullptr, e0, ne, nullptr, 0.0);
          loss[static_cast<std::size_t>(u)] = f.loss_sum;
          correct[static_cast<std::size_t>(u)] = f.correct;
          labelled[static_cast<std::size_t>(u)] = f.labelled;
        } catch (...) {
          err.capture();
        }
      }
      err.rethrow();
      for (std::int64_t u = done; u < u1; ++u)
        wrong += labelled[static_cast<std::size_t>(u)] - correct[static_cast<std::size_t>(u)];
    }
    SliceResult r;
    r.labelled = std::accumulate(labelled.begin(), labelled.end(), std::int64_t(0));
    const double nl = static_cast<double>(std::max<std::int64_t>(1, r.labelled));
    r.accuracy = static_cast<double>(std::accumulate(correct.begin(), correct.end(), std::int64_t(0))) / nl;
    r.loss = std::accumulate(loss.begin(), loss.end(), 0.0) / nl;
    return r;
  }

  // Continue from a checkpoint: arenas, position and the result so far.
  void restore(const MqarCheckpoint& ck, MqarTrainResult& res, std::int64_t& t, std::int64_t& epoch,
               std::int64_t& skip) {
    require(ck.params.size() == params.size() && ck.m.size() == params.size() && ck.v.size() == params.size(),
            "the checkpoint holds {} parameters but the model has {}", ck.params.size(), params.size());
    require(ck.steps >= 0 && ck.epoch >= 0 && ck.epoch <= cfg.epochs && ck.batch_in_epoch >= 0 &&
                ck.steps <= res.planned_steps,
            "the checkpoint's position (step {}, epoch {}) does not fit this training", ck.steps, ck.epoch);
    params = ck.params;
    m = ck.m;
    v = ck.v;
    work.assign(params.begin(), params.end());
    MqarTrainResult r = ck.partial;
    r.path = res.path;
    r.params = res.params;
    r.planned_steps = res.planned_steps;
    res = std::move(r);
    t = ck.steps;
    epoch = ck.epoch;
    skip = ck.batch_in_epoch;
  }

  // Hands the state after step t (epoch `epoch`, `pos` batches of its order done) to cfg.on_checkpoint.
  void checkpoint(const MqarTrainResult& res, std::int64_t t, std::int64_t epoch, std::int64_t pos,
                  double epoch_s) const {
    cfg.on_checkpoint(make_mqar_checkpoint(params, m, v, res, t, epoch, pos, epoch_s));
  }

  MqarTrainResult run() {
    MqarTrainResult res;
    res.path = std::string("cpu:") + cfg.precision;
    res.params = model.param_count();
    const std::int64_t spe = cfg.steps_per_epoch();
    res.planned_steps = spe * cfg.epochs;
    std::vector<std::uint64_t> eseed;
    for (std::size_t i = 0; i < cfg.eval.size(); ++i) eseed.push_back(slice_seed(cfg.seed, "eval", cfg.eval[i], i));
    std::int64_t t = 0, epoch0 = 0, skip = 0;
    if (cfg.resume) restore(*cfg.resume, res, t, epoch0, skip);
    for (std::int64_t epoch = epoch0; epoch < cfg.epochs; ++epoch) {
      const auto t0 = std::chrono::steady_clock::now();
      const MqarEpochPlan ep = mqar_epoch_plan(cfg, epoch);  // example order, batch order, example seeds
      for (auto pos = epoch == epoch0 ? skip : 0; pos < static_cast<std::int64_t>(ep.order.size()); ++pos) {
        const auto [s, b] = ep.batches[static_cast<std::size_t>(ep.order[static_cast<std::size_t>(pos)])];
        const std::int64_t e0 = b * cfg.batch, nb = std::min(cfg.train[s].examples, e0 + cfg.batch) - e0;
        const double lr = nn::cosine_lr(cfg.lr, cfg.lr_min, t, res.planned_steps);
        const auto [loss, acc, gn] = step(cfg.train[s], ep.seed[s], ep.perm[s].data() + e0, nb, lr, t + 1);
        ++t;
        res.step.push_back(t);
        res.loss.push_back(loss);
        res.accuracy.push_back(acc);
        res.lr.push_back(lr);
        res.grad_norm.push_back(gn);
        if (cfg.on_step) cfg.on_step(t, res.planned_steps, loss, acc);
        if (cfg.on_checkpoint && cfg.checkpoint_every > 0 && t % cfg.checkpoint_every == 0)
          checkpoint(res, t, epoch, pos + 1, seconds_since(t0));
      }
      res.train_s += seconds_since(t0);
      res.epochs_run = epoch + 1;
      const bool last = epoch + 1 == cfg.epochs;
      const auto te = std::chrono::steady_clock::now();
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
      if (!last && cfg.on_checkpoint) checkpoint(res, t, epoch + 1, 0, 0.0);
    }
    res.steps = t;
    res.final_params = params;
    return res;
  }
};

}  // namespace

void MqarTrainConfig::validate() const {
  model.validate();
  require(!train.empty(), "no training slice: give --seq-len and --keys, or --train-slices");
  for (const auto& s : train) {
    s.validate();
    require(s.examples >= 1, "training slice {} has no examples", s.name());
    require(s.vocab == model.vocab, "training slice {} uses vocabulary {} but the model has {}", s.name(), s.vocab,
            model.vocab);
  }
  for (const auto& s : eval) {
    s.validate();
    require(s.examples >= 1, "evaluation slice {} has no examples", s.name());
    require(s.vocab == model.vocab, "evaluation slice {} uses vocabulary {} but the model has {}", s.name(), s.vocab,
            model.vocab);
  }
  require(batch >= 1 && batch <= 1 << 20, "--batch {} must be in [1, 2^20]", batch);
  require(epochs >= 1 && epochs <= 1 << 20, "--epochs {} must be in [1, 2^20]", epochs);
  require(std::isfinite(lr) && lr > 0 && lr <= 10, "--lr {} must be in (0, 10]", lr);
  require(std::isfinite(lr_min) && lr_min >= 0 && lr_min <= lr, "--lr-min {} must be in [0, --lr]", lr_min);
  require(std::isfinite(weight_decay) && weight_decay >= 0 && weight_decay < 1 / lr,
          "--weight-decay {} must be >= 0 and below 1/lr", weight_decay);
  require(std::isfinite(beta1) && beta1 >= 0 && beta1 < 1, "beta1 {} must be in [0, 1)", beta1);
  require(std::isfinite(beta2) && beta2 >= 0 && beta2 < 1, "--beta2 {} must be in [0, 1)", beta2);
  require(std::isfinite(clip) && clip >= 0, "--clip {} must be >= 0 (0 = no clipping)", clip);
  require(eval_every >= 1, "--eval-every {} must be >= 1 epoch", eval_every);
  require(std::isfinite(early_stop) && early_stop >= 0, "--early-stop {} must be >= 0 (> 1 never stops)", early_stop);
  require(micro_tokens >= 1, "--micro-tokens {} must be >= 1", micro_tokens);
  require(checkpoint_every >= 0, "--checkpoint-every {} must be >= 0 steps (0 = after evaluations only)",
          checkpoint_every);
  require(precision == "f32" || precision == "f64" || precision == "tf32",
          "--precision '{}': use f32, f64 or tf32 (GPU only)", precision);
  require(device == "cpu" || device == "cuda", "device '{}': use cpu or cuda", device);
  require(precision != "tf32" || device == "cuda",
          "--precision tf32 (TF32 tensor-core products in cuBLAS) runs on the GPU only: use --device cuda, or f32 on "
          "the CPU");
  {
    bool known = mixer_kernel == "auto";
    for (const auto& v : mqar_mixer_kernels()) known = known || mixer_kernel == v.name;
    require(known, "--mixer-kernel '{}': unknown variant; use {}", mixer_kernel, mqar_mixer_kernel_names());
    require(mixer_kernel == "auto" || device == "cuda",
            "--mixer-kernel {} picks a GPU mixer core, and this training runs on the CPU (its own reference cores): "
            "use --device cuda, or leave --mixer-kernel at auto",
            mixer_kernel);
  }
  if (device == "cuda") {
    model.require_cuda_support();
    (void)resolve_mixer_kernel(MqarModel::build(model), mixer_kernel);
  }
}

std::int64_t MqarTrainConfig::steps_per_epoch() const {
  std::int64_t n = 0;
  for (const auto& s : train) n += (s.examples + batch - 1) / batch;
  return n;
}

std::uint64_t slice_seed(std::uint64_t seed, const char* role, const TaskSlice& s, std::size_t index) {
  return rng::derive_seed(seed, fmt::format("mqar/{}/{}/{}/{}", role, to_string(s.kind), s.name(), index));
}

MqarEpochPlan mqar_epoch_plan(const MqarTrainConfig& cfg, std::int64_t epoch) {
  const std::uint64_t shuffle_seed = rng::derive_seed(cfg.seed, "mqar/shuffle");
  MqarEpochPlan p;
  p.perm.resize(cfg.train.size());
  for (std::size_t s = 0; s < cfg.train.size(); ++s) {
    const auto stream = kShuffleStream ^ ((static_cast<std::uint64_t>(epoch) << 20) | (s << 4));
    p.perm[s] = permutation(shuffle_seed, stream, cfg.train[s].examples);
    for (std::int64_t b = 0; b * cfg.batch < cfg.train[s].examples; ++b) p.batches.emplace_back(s, b);
  }
  p.order = permutation(shuffle_seed, kShuffleStream ^ ((static_cast<std::uint64_t>(epoch) << 20) | 0xF),
                        static_cast<std::int64_t>(p.batches.size()));
  for (std::size_t s = 0; s < cfg.train.size(); ++s) {
    const std::uint64_t base = slice_seed(cfg.seed, "train", cfg.train[s], s);
    // epoch 0 draws the fixed set's examples in both modes
    p.seed.push_back(cfg.fresh_examples && epoch > 0 ? rng::derive_seed(base, fmt::format("epoch/{}", epoch)) : base);
  }
  return p;
}

MqarCheckpoint make_mqar_checkpoint(std::vector<double> params, std::vector<double> m, std::vector<double> v,
                                    const MqarTrainResult& res, std::int64_t t, std::int64_t epoch, std::int64_t pos,
                                    double epoch_s) {
  MqarCheckpoint ck;
  ck.params = std::move(params);
  ck.m = std::move(m);
  ck.v = std::move(v);
  ck.steps = t;
  ck.epoch = epoch;
  ck.batch_in_epoch = pos;
  ck.partial = res;
  ck.partial.steps = t;
  ck.partial.train_s += epoch_s;
  ck.partial.final_eval.clear();
  ck.partial.final_params.clear();
  return ck;
}

bool record_mqar_evaluation(MqarTrainResult& res, const MqarTrainConfig& cfg, std::int64_t epochs_done,
                            std::int64_t step, std::vector<SliceResult> ev) {
  res.eval_epoch.push_back(epochs_done);
  res.eval_step.push_back(step);
  std::vector<double> accs;
  for (const auto& r : ev) {
    res.eval_accuracy.push_back(r.accuracy);
    res.eval_loss.push_back(r.loss);
    accs.push_back(r.accuracy);
  }
  res.final_eval = std::move(ev);
  if (cfg.on_eval) cfg.on_eval(epochs_done, accs);
  return !accs.empty() && *std::min_element(accs.begin(), accs.end()) >= cfg.early_stop;
}

std::int64_t mqar_error_budget(std::int64_t labelled, double threshold) {
  const double nl = static_cast<double>(std::max<std::int64_t>(1, labelled));
  auto reaches = [&](std::int64_t wrong) { return static_cast<double>(labelled - wrong) / nl >= threshold; };
  if (!reaches(0)) return -1;
  auto e = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::floor((1.0 - threshold) * nl)), 0, labelled);
  while (e > 0 && !reaches(e)) --e;  // the same division as SliceResult::accuracy decides
  while (e < labelled && reaches(e + 1)) ++e;
  return e;
}

MqarEpochEnd mqar_epoch_end(const MqarTrainConfig& cfg, const MqarTrainResult& res, std::int64_t epoch,
                            std::vector<SliceResult>& ev,
                            const std::function<SliceResult(std::size_t, std::int64_t)>& eval) {
  ev.clear();
  const bool last = epoch + 1 == cfg.epochs;
  if (last || (epoch + 1) % cfg.eval_every == 0) {
    for (std::size_t i = 0; i < cfg.eval.size(); ++i) ev.push_back(eval(i, -1));
    return MqarEpochEnd::record;
  }
  if (cfg.eval.empty() || cfg.early_stop > 1) return MqarEpochEnd::none;
  // The lowest last recorded accuracy first; before any evaluation the last slice listed (the diagonal's longest).
  const std::size_t ns = cfg.eval.size();
  std::vector<std::size_t> order(ns);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::reverse(order.begin(), order.end());
  if (res.eval_accuracy.size() >= ns) {
    const double* prev = res.eval_accuracy.data() + (res.eval_accuracy.size() - ns);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return prev[a] < prev[b]; });
  }
  ev.resize(ns);
  for (const std::size_t i : order) {
    const TaskSlice& s = cfg.eval[i];
    const std::int64_t total = s.examples * s.queries();
    const std::int64_t budget = mqar_error_budget(total, cfg.early_stop);
    if (budget < 0) return MqarEpochEnd::screened;
    SliceResult r = eval(i, budget);
    if (r.labelled < total || r.accuracy < cfg.early_stop) return MqarEpochEnd::screened;
    MEMCAP_ASSERT(r.labelled == total, "MQAR early-stop screen: a slice's labelled positions differ from the plan");
    ev[i] = r;
  }
  return MqarEpochEnd::record;  // every slice reached the threshold: a full evaluation, recorded, then stop
}

MqarTrainResult train_mqar(const MqarTrainConfig& cfg) {
  cfg.validate();
  if (cfg.device == "cuda") return train_mqar_cuda(cfg);
  set_threads(0);  // BLAS single-threaded (results independent of --threads); OpenMP setting unchanged
  const MqarModel model = MqarModel::build(cfg.model);
  if (cfg.precision == "f64") return Trainer<double>(cfg, model).run();
  return Trainer<float>(cfg, model).run();
}

SliceResult evaluate_mqar(const MqarModel& model, const std::vector<double>& params, const TaskSlice& slice,
                          std::uint64_t seed, const std::string& precision, std::int64_t micro_tokens,
                          const std::string& device) {
  slice.validate();
  require(static_cast<std::int64_t>(params.size()) == model.param_count(), "evaluate_mqar: {} parameters, model has {}",
          params.size(), model.param_count());
  MqarTrainConfig c;
  c.model = model.cfg;
  c.micro_tokens = micro_tokens;
  c.precision = precision;
  if (device == "cuda") {
    model.cfg.require_cuda_support();
    return evaluate_mqar_cuda(model, params, slice, seed, precision);
  }
  require(device == "cpu", "evaluate_mqar: device '{}': use cpu or cuda", device);
  require(precision != "tf32", "evaluate_mqar: precision tf32 runs on the GPU only");
  set_threads(0);
  if (precision == "f64") {
    Trainer<double> tr(c, model);
    tr.work = params;
    return tr.evaluate(slice, seed);
  }
  Trainer<float> tr(c, model);
  tr.work.assign(params.begin(), params.end());
  return tr.evaluate(slice, seed);
}

double mqar_memory_bytes(const MqarTrainConfig& cfg, int threads) {
  const MqarModel model = MqarModel::build(cfg.model);
  const double P = static_cast<double>(model.param_count()), sz = cfg.precision == "f64" ? 8.0 : 4.0;
  const double D = static_cast<double>(cfg.model.d_model), V = static_cast<double>(cfg.model.vocab);
  double per_thread = 0, grads = 0;
  auto consider = [&](const TaskSlice& s, bool train) {
    const double T = static_cast<double>(s.seq_len);
    const double mb = static_cast<double>(micro_size(cfg.micro_tokens, s.seq_len));
    const double tokens = mb * T;
    double head = 6 * T * T;  // score matrices of one head
    if (model.is_gated()) head = 14 * T * T;  // kernel, decay, solve and their cotangents (gated cores)
    if (model.kind == MixerKind::delta) {
      const double C = static_cast<double>(cfg.model.chunk), n = static_cast<double>(model.map.feature_dim());
      head = 4 * T * n + std::ceil(T / C) * n * static_cast<double>(model.d_head) + 8 * C * C;
    }
    const double ws = tokens * D * 40 * static_cast<double>(cfg.model.n_layers) + mb * static_cast<double>(s.queries()) * V + head;
    per_thread = std::max(per_thread, ws * sz);
    if (train)
      grads = std::max(grads, std::min(16.0, std::ceil(static_cast<double>(std::min(cfg.batch, s.examples)) / mb)) * P * sz);
  };
  for (const auto& s : cfg.train) consider(s, true);
  for (const auto& s : cfg.eval) consider(s, false);
  return 5 * P * 8 + grads + per_thread * std::max(1, threads) + mqar_data_bytes(cfg);
}

double mqar_data_bytes(const MqarTrainConfig& cfg) {
  const double batch = static_cast<double>(std::max<std::int64_t>(1, cfg.batch));
  double examples = 0, batches = 0, tallies = 0;  // in double: counts near 2^63 must not overflow
  for (const auto& s : cfg.train) {
    examples += static_cast<double>(s.examples);
    batches += std::ceil(static_cast<double>(s.examples) / batch);
  }
  for (const auto& s : cfg.eval) {
    const double mb = static_cast<double>(micro_size(cfg.micro_tokens, s.seq_len));
    tallies += std::ceil(static_cast<double>(s.examples) / mb);
  }
  const double steps = batches * static_cast<double>(std::max<std::int64_t>(1, cfg.epochs));
  return 8 * examples + 24 * batches + 40 * steps + 24 * tallies;
}

std::int64_t capacity_at(const std::vector<TaskSlice>& slices, const std::vector<SliceResult>& r, double theta) {
  std::int64_t best = 0;
  for (std::size_t i = 0; i < slices.size() && i < r.size(); ++i)
    if (r[i].accuracy >= theta) best = std::max(best, slices[i].keys);
  return best;
}

}  // namespace memcap::kata

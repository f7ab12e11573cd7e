// The fact editors on the GPU (edit/edit_local_cuda.hpp).
#include "edit/edit_local_cuda.hpp"

#include "core/error.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <type_traits>

#include "core/gpu.hpp"
#include "core/timing.hpp"
#include "edit/edit_model_cuda.hpp"
#include "nn/tied_ce.hpp"
#include "nn_edit_residual.cuh"

namespace memcap::edit {

namespace {

namespace cu = nn::cuda;
using Clock = std::chrono::steady_clock;

void check_options(const EditGpuOptions& o) {
  require(o.precision == "f32" || o.precision == "f64", "edit: GPU precision '{}': use f32 or f64", o.precision);
  require(o.eval_batch >= 1 && o.edit_batch >= 1, "edit: GPU batches must be >= 1 (evaluation {}, edit {})",
          o.eval_batch, o.edit_batch);
}

std::vector<EditShape> shapes_of(const nn::EditSequences& seqs, std::int64_t facts, const EditGpuOptions& o) {
  return {EditShape{std::max<std::int64_t>(1, std::min(o.eval_batch, seqs.S)), seqs.T},
          EditShape{std::max<std::int64_t>(1, std::min(o.edit_batch, facts)), seqs.T}};
}

template <class T>
struct Engine {
  const EditModel& base;
  const nn::EditSequences& seqs;
  gpu::Handles& h;
  const EditGpuOptions opt;
  const EditModelConfig mc;
  std::int64_t edit_B = 1;
  std::unique_ptr<EditDeviceModel<T>> dm;
  std::unique_ptr<EditPromptEval<T>> eval;  // the corpus on the device, logits only at the distinct rows
  bool base_expert = true;
  EditModel work;  // the base with a swapped expert (set_expert), host side

  Engine(const EditModel& b, const nn::EditSequences& s, gpu::Handles& hd, const EditGpuOptions& o)
      : base(b), seqs(s), h(hd), opt(o), mc(b.config()), work(b.config()) {
    require(seqs.S >= 1 && seqs.T >= 1 && static_cast<std::int64_t>(seqs.input_ids.size()) == seqs.S * seqs.T &&
                static_cast<std::int64_t>(seqs.labels.size()) == seqs.S * seqs.T &&
                static_cast<std::int64_t>(seqs.length.size()) == seqs.S,
            "edit: the packed sequences are inconsistent ({} x {})", seqs.S, seqs.T);
    const auto shapes = shapes_of(seqs, seqs.S, opt);
    edit_B = std::min(opt.edit_batch, seqs.S);
    dm = std::make_unique<EditDeviceModel<T>>(mc, shapes, h);
    dm->upload_params(base.trainable().params);
    dm->upload_frozen(base.frozen().params);
    work.trainable().params = base.trainable().params;
    work.frozen().params = base.frozen().params;
    eval = std::make_unique<EditPromptEval<T>>(seqs, mc.vocab, opt.eval_batch, h.stream());
  }

  cudaStream_t cs() const { return h.stream().get(); }

  // Uploads the fact.* tensors of `fr` (a host frozen arena of this configuration) into the device arena.
  void upload_expert(const nn::ParamArena<double>& fr) {
    for (const auto& v : fr.layout.views()) {
      if (v.name.rfind("fact.", 0) != 0) continue;
      const std::vector<T> c(fr.params.begin() + v.offset, fr.params.begin() + v.offset + v.numel);
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dm->frozen() + v.offset, c.data(), c.size() * sizeof(T),
                                        cudaMemcpyHostToDevice, cs()));
      h.stream().synchronize();  // c goes out of scope
    }
  }
  void set_expert(const mlp::GatedMLP& m) {
    load_expert(work, m);
    upload_expert(work.frozen());
    base_expert = false;
  }
  void reset_expert() {
    if (base_expert) return;
    upload_expert(base.frozen());
    base_expert = true;
  }

  PromptEval evaluate() { return eval->run(*dm); }

  // Uploads B sequences (their inputs; every target ignored) and the device row index b·T + last_b of each,
  // as int32 (rows32) and int64 (rows64).
  EditShape stage(const std::vector<std::int64_t>& seq, const std::vector<std::int64_t>& last, std::int64_t i0,
                  std::int64_t B, gpu::Tensor& rows32, gpu::Tensor& rows64) {
    const std::int64_t Tl = seqs.T;
    std::vector<std::int32_t> tok(static_cast<std::size_t>(B * Tl)), lab(tok.size(), nn::kIgnoreLabel), r32(B);
    std::vector<std::int64_t> r64(static_cast<std::size_t>(B));
    for (std::int64_t b = 0; b < B; ++b) {
      const std::size_t i = static_cast<std::size_t>(i0 + b);
      std::copy_n(seqs.input_ids.data() + seq[i] * Tl, Tl, tok.data() + b * Tl);
      r64[static_cast<std::size_t>(b)] = b * Tl + last[i];
      r32[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(r64[static_cast<std::size_t>(b)]);
    }
    const EditShape sh = dm->upload_batch(tok.data(), lab.data(), B, Tl);
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(rows32.raw(), r32.data(), static_cast<std::size_t>(B) * 4,
                                      cudaMemcpyHostToDevice, cs()));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(rows64.raw(), r64.data(), static_cast<std::size_t>(B) * 8,
                                      cudaMemcpyHostToDevice, cs()));
    h.stream().synchronize();
    return sh;
  }

  // C = K[:, c0 : c0+n] K[:, c0 : c0+n]ᵀ (h × h, float64) with K the device keys (column-major h × F).
  Eigen::MatrixXd gram(const gpu::Tensor& K, std::int64_t c0, std::int64_t n, gpu::Tensor& C) {
    const int hf = static_cast<int>(mc.fact_hidden);
    const double one = 1, zero = 0;
    MEMCAP_CUBLAS_CHECK(cublasDgemm(h.blas(), CUBLAS_OP_N, CUBLAS_OP_T, hf, hf, static_cast<int>(n), &one,
                                    K.data<double>() + c0 * hf, hf, K.data<double>() + c0 * hf, hf, &zero,
                                    C.data<double>(), hf));
    Eigen::MatrixXd out(hf, hf);
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(out.data(), C.raw(), static_cast<std::size_t>(hf) * hf * 8,
                                      cudaMemcpyDeviceToHost, cs()));
    h.stream().synchronize();
    return out;
  }

  LocalEditResult local_edit(const EditSet& set, const std::vector<std::int32_t>& author_token,
                             const LocalEditConfig& cfg) {
    cfg.validate();
    const auto t0 = Clock::now();
    require(set.n_preserved >= 1,
            "--method {} needs preserved facts for the key covariance C_p; use --fraction < 1", cfg.method);
    require(set.facts * set.templates == seqs.S, "edit: the edit set ({} x {}) does not match the {} sequences",
            set.facts, set.templates, seqs.S);
    require(static_cast<std::int64_t>(author_token.size()) == set.facts, "edit: {} author tokens for {} facts",
            author_token.size(), set.facts);
    reset_expert();
    const std::int64_t d = mc.d, hf = mc.fact_hidden, F = set.facts, np = set.n_preserved,
                       na = set.n_altered;
    const std::int64_t CB = std::min(edit_B, F);
    std::vector<std::int64_t> seq(static_cast<std::size_t>(F)), last(seq.size());
    for (std::int64_t f = 0; f < F; ++f) {
      seq[static_cast<std::size_t>(f)] = f * set.templates + set.prompt_order[static_cast<std::size_t>(f * set.templates)];
      last[static_cast<std::size_t>(f)] = seqs.length[static_cast<std::size_t>(seq[static_cast<std::size_t>(f)])] - 1;
    }
    gpu::Tensor rows_dev({CB}, gpu::DType::i32), rows64({CB}, gpu::DType::i64);

    // ---- keys: the expert's hidden activation at the last position of every train prompt ----
    gpu::Tensor Kdev({F, hf}, gpu::DType::f64);  // column-major h × F
    for (std::int64_t f0 = 0; f0 < F; f0 += CB) {
      const std::int64_t B = std::min(CB, F - f0);
      const EditShape sh = stage(seq, last, f0, B, rows_dev, rows64);
      dm->forward(sh, false);
      cu::edit_gather_rows<T>(Kdev.data<double>() + f0 * hf, dm->fh(), rows_dev.data<std::int32_t>(), B, hf, cs());
    }
    Eigen::MatrixXd Kall(hf, F);
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(Kall.data(), Kdev.raw(), Kdev.bytes(), cudaMemcpyDeviceToHost, cs()));
    h.stream().synchronize();
    gpu::Tensor Cdev({hf, hf}, gpu::DType::f64);
    const Eigen::MatrixXd KpKpT = gram(Kdev, 0, np, Cdev);
    const Eigen::MatrixXd KaKaT = gram(Kdev, np, na, Cdev);
    Kdev = gpu::Tensor();
    Eigen::MatrixXd Kp = Kall.leftCols(np), Ka = Kall.rightCols(na);
    Kall.resize(0, 0);

    // ---- target residuals: Adam on the CE of the new author at the last position, on the device ----
    // The residual is added to the expert's output at the last position only, and nothing before the expert
    // depends on it: one forward of the chunk (no logits), then every Adam step runs the model's tail
    // (router mix, RMSNorm_γf, tied CE) on the chunk's last rows alone (EditDeviceModel::tail_*).
    LocalEditResult res;
    Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> D(
        base.frozen().param("fact.D"), d, hf);
    const Eigen::VectorXd lim_all =
        cfg.clip > 0 ? Eigen::VectorXd(cfg.clip * (D * Ka).colwise().norm().transpose()) : Eigen::VectorXd::Zero(na);
    Eigen::MatrixXd R = Eigen::MatrixXd::Zero(d, na);
    const std::int64_t AB = std::min(CB, na);
    gpu::Tensor r({AB, d}, gpu::DType::f64), m({AB, d}, gpu::DType::f64), v({AB, d}, gpu::DType::f64);
    gpu::Tensor active({AB}, gpu::DType::i32), bad({AB}, gpu::DType::i32), loss({AB}, gpu::DType::f64);
    gpu::Tensor limit({AB}, gpu::DType::f64), counts({2}, gpu::DType::i32), ident({AB}, gpu::DType::i32),
        tgt({AB}, gpu::DType::i32);
    {
      std::vector<std::int32_t> id(static_cast<std::size_t>(AB));
      for (std::int64_t b = 0; b < AB; ++b) id[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(b);
      ident.upload(id.data(), h.stream());
      h.stream().synchronize();
    }
    double loss_sum = 0;
    for (std::int64_t a0 = 0; a0 < na; a0 += AB) {
      const std::int64_t B = std::min(AB, na - a0);
      std::vector<std::int32_t> target(static_cast<std::size_t>(B));
      for (std::int64_t b = 0; b < B; ++b)
        target[static_cast<std::size_t>(b)] =
            author_token[static_cast<std::size_t>(set.target_fact[static_cast<std::size_t>(np + a0 + b)])];
      const EditShape sh = stage(seq, last, np + a0, B, rows_dev, rows64);
      const std::vector<std::int32_t> ones(static_cast<std::size_t>(B), 1), minus(static_cast<std::size_t>(B), -1);
      MEMCAP_CUDA_CHECK(cudaMemsetAsync(r.raw(), 0, r.bytes(), cs()));
      MEMCAP_CUDA_CHECK(cudaMemsetAsync(m.raw(), 0, m.bytes(), cs()));
      MEMCAP_CUDA_CHECK(cudaMemsetAsync(v.raw(), 0, v.bytes(), cs()));
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(active.raw(), ones.data(), static_cast<std::size_t>(B) * 4,
                                        cudaMemcpyHostToDevice, cs()));
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(bad.raw(), minus.data(), static_cast<std::size_t>(B) * 4,
                                        cudaMemcpyHostToDevice, cs()));
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(limit.raw(), lim_all.data() + a0, static_cast<std::size_t>(B) * 8,
                                        cudaMemcpyHostToDevice, cs()));
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(tgt.raw(), target.data(), static_cast<std::size_t>(B) * 4,
                                        cudaMemcpyHostToDevice, cs()));
      dm->forward(sh, false);
      dm->tail_capture(rows64.data<std::int64_t>(), tgt.data<std::int32_t>(), B);
      T* add = dm->tail_add();
      MEMCAP_CUDA_CHECK(cudaMemsetAsync(add, 0, static_cast<std::size_t>(B * d) * sizeof(T), cs()));
      std::int32_t cnt[2] = {0, 0};
      for (std::int64_t step = 0; step <= cfg.steps; ++step) {
        dm->tail_forward(B);
        cu::edit_residual_check<T>(dm->losses(), ident.data<std::int32_t>(), B, cfg.early_stop, step,
                                   active.data<std::int32_t>(), loss.data<double>(), bad.data<std::int32_t>(),
                                   counts.data<std::int32_t>(), cs());
        MEMCAP_CUDA_CHECK(cudaMemcpyAsync(cnt, counts.raw(), sizeof cnt, cudaMemcpyDeviceToHost, cs()));
        h.stream().synchronize();
        if (cnt[1] > 0) {
          std::vector<std::int32_t> bs(static_cast<std::size_t>(B));
          MEMCAP_CUDA_CHECK(cudaMemcpyAsync(bs.data(), bad.raw(), bs.size() * 4, cudaMemcpyDeviceToHost, cs()));
          h.stream().synchronize();
          std::int64_t first = 0;
          while (first < B && bs[static_cast<std::size_t>(first)] < 0) ++first;
          throw NumericError(fmt::format("--method {}: the residual loss of fact {} is not finite at step {}; lower "
                                         "--edit-lr",
                                         cfg.method, np + a0 + first, step));
        }
        if (step == cfg.steps || cnt[0] == 0) break;
        dm->tail_backward(B);
        // g_f is the gradient of the mean over the B rows; each fact's own loss has B times it
        cu::edit_residual_adam<T>(r.data<double>(), m.data<double>(), v.data<double>(), add, dm->g_f(),
                                  ident.data<std::int32_t>(), active.data<std::int32_t>(), limit.data<double>(), B, d,
                                  static_cast<double>(B), cfg.lr, 0.9, 0.999, 1e-8, cfg.weight_decay, step + 1,
                                  cfg.clip > 0, cs());
      }
      std::vector<double> lh(static_cast<std::size_t>(B));
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(R.data() + a0 * d, r.raw(), static_cast<std::size_t>(B * d) * 8,
                                        cudaMemcpyDeviceToHost, cs()));
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(lh.data(), loss.raw(), lh.size() * 8, cudaMemcpyDeviceToHost, cs()));
      h.stream().synchronize();
      for (double l : lh) {
        loss_sum += l;
        res.converged += cfg.early_stop > 0 && l < cfg.early_stop;
      }
    }
    res.residual_loss = loss_sum / static_cast<double>(na);
    res.residual_norm = R.colwise().norm().mean();

    // ---- closed-form update (CPU, float64: the CPU editors' code) ----
    local_closed_form(cfg, KpKpT, KaKaT, Ka, R, np, res);
    res.residuals = std::move(R);
    res.keys_altered = std::move(Ka);
    res.keys_preserved = std::move(Kp);
    res.wall_s = seconds_since(t0);
    return res;
  }
};

}  // namespace

struct EditGpu::Impl {
  std::string precision;
  std::unique_ptr<Engine<float>> f;
  std::unique_ptr<Engine<double>> d;
  template <class Fn>
  decltype(auto) run(Fn&& fn) {
    if (f) return fn(*f);
    return fn(*d);
  }
};

EditGpu::EditGpu(const EditModel& base, const nn::EditSequences& seqs, gpu::Handles& h, const EditGpuOptions& opt)
    : impl_(std::make_unique<Impl>()) {
  check_options(opt);
  gpu::require_device_memory(edit_gpu_bytes(base.config(), seqs, seqs.S, opt),
                             fmt::format("the GPU fact editors (d = {}, vocabulary {}, {} sequences, {})",
                                         base.config().d, base.config().vocab, seqs.S, opt.precision));
  impl_->precision = opt.precision;
  if (opt.precision == "f64")
    impl_->d = std::make_unique<Engine<double>>(base, seqs, h, opt);
  else
    impl_->f = std::make_unique<Engine<float>>(base, seqs, h, opt);
}
EditGpu::~EditGpu() = default;

void EditGpu::set_expert(const mlp::GatedMLP& mlp) {
  impl_->run([&](auto& e) { e.set_expert(mlp); });
}
void EditGpu::reset_expert() {
  impl_->run([&](auto& e) { e.reset_expert(); });
}
PromptEval EditGpu::evaluate() {
  return impl_->run([&](auto& e) { return e.evaluate(); });
}
LocalEditResult EditGpu::local_edit(const EditSet& set, const std::vector<std::int32_t>& author_token,
                                    const LocalEditConfig& cfg) {
  return impl_->run([&](auto& e) { return e.local_edit(set, author_token, cfg); });
}
const std::string& EditGpu::precision() const { return impl_->precision; }

std::size_t edit_gpu_bytes(const EditModelConfig& c, const nn::EditSequences& seqs, std::int64_t facts,
                           const EditGpuOptions& opt) {
  check_options(opt);
  const std::size_t elem = opt.precision == "f64" ? 8 : 4;
  const double F = static_cast<double>(std::max<std::int64_t>(facts, 1)), h = static_cast<double>(c.fact_hidden),
               d = static_cast<double>(c.d), B = static_cast<double>(std::min(opt.edit_batch, facts));
  const double total = static_cast<double>(edit_device_bytes(c, shapes_of(seqs, facts, opt), elem)) +
                       static_cast<double>(EditPromptEval<float>::device_bytes(seqs)) + F * h * 8 + 2 * h * h * 8 +
                       B * (3 * d + 6) * 8 +
                       static_cast<double>(gpu::Handles::kBlasWorkspaceBytes) + (64 << 20);
  return total >= 1.8e19 ? static_cast<std::size_t>(1.8e19) : static_cast<std::size_t>(total);
}

}  // namespace memcap::edit

#else  // no CUDA in this build

namespace memcap::edit {

struct EditGpu::Impl {
  std::string precision;
};
EditGpu::EditGpu(const EditModel&, const nn::EditSequences&, gpu::Handles&, const EditGpuOptions&) {
  throw DeviceError("this build has no CUDA: the GPU fact editors are not available; use --device cpu");
}
EditGpu::~EditGpu() = default;
void EditGpu::set_expert(const mlp::GatedMLP&) {}
void EditGpu::reset_expert() {}
PromptEval EditGpu::evaluate() { return {}; }
LocalEditResult EditGpu::local_edit(const EditSet&, const std::vector<std::int32_t>&, const LocalEditConfig&) {
  return {};
}
const std::string& EditGpu::precision() const { return impl_->precision; }
std::size_t edit_gpu_bytes(const EditModelConfig&, const nn::EditSequences&, std::int64_t, const EditGpuOptions&) {
  return 0;
}

}  // namespace memcap::edit

#endif  // MEMCAP_HAVE_CUDA

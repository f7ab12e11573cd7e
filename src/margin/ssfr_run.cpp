// SSFR training with checkpoints for sweep jobs (margin/ssfr_run.hpp).
#include "margin/ssfr_run.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "mlp/gd_checkpoint.hpp"

namespace memcap::margin {

namespace {
constexpr const char* kFormat = "memcap-ssfr-checkpoint-1";
}

std::string ssfr_fingerprint(const nn::SsfrProblem& p, const std::string& mlp_text, std::int64_t width,
                             const nn::SsfrTrainConfig& cfg, Device device) {
  // A cheap digest of the frozen tables (they follow from the seed, but a file MLP need not).
  double sum = 0;
  for (std::size_t i = 0; i < p.embed_in.size(); i += 7) sum += p.embed_in[i] * static_cast<double>(i % 13 + 1);
  for (std::size_t i = 0; i < p.mlp_a.B.size(); i += 11) sum += p.mlp_a.B[i];
  const nlohmann::json j = {
      {"facts", p.task.facts},         {"junk_min", p.task.junk_min},   {"junk_max", p.task.junk_max},
      {"junk_vocab", p.task.junk_vocab}, {"seq_len", p.task.seq_len},   {"dim", p.block.dim},
      {"vo", p.block.vo_trainable},    {"residual", p.block.attn_residual}, {"mlp", mlp_text},
      {"width", width},                {"steps", cfg.steps},            {"batch", cfg.batch},
      {"lr", cfg.lr},                  {"wd", cfg.weight_decay},        {"eval_every", cfg.eval_every},
      {"eval_batches", cfg.eval_batches}, {"early_stop", cfg.early_stop}, {"early_stop_acc", cfg.early_stop_acc},
      {"seed", cfg.seed},              {"precision", device == Device::cuda ? cfg.precision : "f64"},
      {"device", device == Device::cuda ? "cuda" : "cpu"}, {"digest", fmt::format("{:.17g}", sum)}};
  return j.dump();
}

void write_ssfr_curves(h5::Group& g, const nn::SsfrTrainResult& r) {
  const h5::WriteOptions z{true, 0};
  g.write("loss", std::span<const double>(r.loss_curve), z);
  g.write("batch_accuracy", std::span<const double>(r.batch_acc_curve), z);
  g.write("eval_step", std::span<const std::int64_t>(r.eval_step));
  g.write("eval_accuracy", std::span<const double>(r.eval_acc));
  g.write("eval_loss", std::span<const double>(r.eval_loss));
  g.write("train_accuracy", std::span<const double>(r.train_acc));
  g.write("train_loss", std::span<const double>(r.train_loss));
}

void write_ssfr_checkpoint(const std::string& path, const nn::SsfrCheckpoint& ck, const std::string& fingerprint) {
  mlp::write_checkpoint_file(path, "the SSFR checkpoint", kFormat, fingerprint, [&ck](h5::File& f) {
    f.attr("next_step", ck.next_step);
    f.attr("round", ck.round);
    f.attr("best_acc", ck.partial.best_acc);
    f.attr("best_train_acc", ck.partial.best_train_acc);
    f.attr("final_loss", ck.partial.final_loss);
    f.attr("wall_s", ck.partial.wall_s);
    f.attr("eval_s", ck.partial.eval_s);
    f.write("params", std::span<const double>(ck.params));
    f.write("adam_m", std::span<const double>(ck.adam_m));
    f.write("adam_v", std::span<const double>(ck.adam_v));
    write_ssfr_curves(f, ck.partial);
  });
}

std::optional<nn::SsfrCheckpoint> read_ssfr_checkpoint(const std::string& path, const std::string& fingerprint) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec) || !h5::is_hdf5(path)) return std::nullopt;
  const auto f = h5::File::open_read(path);
  if (f.attr_string("format").value_or("") != kFormat || f.attr_string("fingerprint").value_or("") != fingerprint)
    return std::nullopt;
  nn::SsfrCheckpoint ck;
  ck.next_step = f.attr_int("next_step").value_or(0);
  ck.round = f.attr_int("round").value_or(0);
  nn::SsfrTrainResult& r = ck.partial;
  r.best_acc = f.attr_double("best_acc").value_or(0);
  r.best_train_acc = f.attr_double("best_train_acc").value_or(0);
  r.final_loss = f.attr_double("final_loss").value_or(0);
  r.wall_s = f.attr_double("wall_s").value_or(0);
  r.eval_s = f.attr_double("eval_s").value_or(0);
  ck.params = f.read_doubles("params");
  ck.adam_m = f.read_doubles("adam_m");
  ck.adam_v = f.read_doubles("adam_v");
  r.loss_curve = f.read_doubles("loss");
  r.batch_acc_curve = f.read_doubles("batch_accuracy");
  r.eval_step = f.read_int64s("eval_step");
  r.eval_acc = f.read_doubles("eval_accuracy");
  r.eval_loss = f.read_doubles("eval_loss");
  r.train_acc = f.read_doubles("train_accuracy");
  r.train_loss = f.read_doubles("train_loss");
  r.steps_run = ck.next_step;
  return ck;
}

nn::SsfrTrainResult train_ssfr(const nn::SsfrProblem& p, nn::SsfrTrainConfig cfg, const std::string& fingerprint,
                               const SsfrRunner& run) {
  std::optional<nn::SsfrCheckpoint> ck;
  if (!run.checkpoint.empty()) {
    ck = read_ssfr_checkpoint(run.checkpoint, fingerprint);
    if (ck) {
      cfg.resume = &*ck;
      std::fprintf(stderr, "hebb ssfr: resuming a training from its checkpoint at step %lld\n",
                   static_cast<long long>(ck->next_step));
    }
    const std::string path = run.checkpoint;
    cfg.on_checkpoint = [path, fingerprint](const nn::SsfrCheckpoint& c) { write_ssfr_checkpoint(path, c, fingerprint); };
  }
  nn::SsfrTrainResult r;
#ifdef MEMCAP_HAVE_CUDA
  if (run.device == Device::cuda) {
    MEMCAP_ASSERT(run.handles != nullptr, "train_ssfr: a GPU run needs handles");
    r = nn::train_ssfr_cuda(p, cfg, *run.handles);
  } else {
    r = nn::train_ssfr_cpu(p, cfg);
  }
#else
  if (run.device == Device::cuda) throw DeviceError("this build of hebb has no CUDA support; use --device cpu");
  r = nn::train_ssfr_cpu(p, cfg);
#endif
  if (!run.checkpoint.empty()) {
    std::error_code ec;
    std::filesystem::remove(run.checkpoint, ec);
  }
  return r;
}

}  // namespace memcap::margin

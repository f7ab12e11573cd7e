// MQAR checkpoint files (mqar_checkpoint.hpp). Layout: root attributes format, fingerprint; datasets
// params, adam_m, adam_v (float64), position [steps, epoch, batch_in_epoch, epochs_run], times
// [train_s, eval_s], the per-step curves step, loss, accuracy, lr, grad_norm and the evaluation
// history eval_epoch, eval_step, eval_accuracy, eval_loss (evaluations x slices, flattened).
#include "kata/mqar_checkpoint.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "core/error.hpp"
#include "io/h5.hpp"
#include "mlp/gd_checkpoint.hpp"

namespace memcap::kata {

namespace {
constexpr const char* kFormat = "memcap-mqar-checkpoint-1";

nlohmann::json slices_json(const std::vector<TaskSlice>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : v)
    a.push_back({to_string(s.kind), s.seq_len, s.keys, s.vocab, fmt::format("{:.17g}", s.power_a), s.examples});
  return a;
}

std::string g17(double x) { return fmt::format("{:.17g}", x); }
}  // namespace

std::string mqar_fingerprint(const MqarTrainConfig& c, const std::string& device) {
  const auto& m = c.model;
  nlohmann::json j = {
      {"mixer", m.mixer},         {"vocab", m.vocab},       {"d_model", m.d_model},   {"layers", m.n_layers},
      {"heads", m.heads},         {"chunk", m.chunk},       {"map_eps", g17(m.map_eps)}, {"init_std", g17(m.init_std)},
      {"train", slices_json(c.train)}, {"eval", slices_json(c.eval)}, {"batch", c.batch}, {"epochs", c.epochs},
      {"lr", g17(c.lr)},          {"lr_min", g17(c.lr_min)}, {"wd", g17(c.weight_decay)}, {"beta1", g17(c.beta1)},
      {"beta2", g17(c.beta2)},    {"adam_eps", g17(c.adam_eps)}, {"clip", g17(c.clip)}, {"eval_every", c.eval_every},
      {"early_stop", g17(c.early_stop)}, {"micro_tokens", c.micro_tokens}, {"precision", c.precision},
      {"seed", c.seed},           {"device", device}};
  if (m.rope) j["rope_base"] = g17(m.rope_base);  // only when on: fingerprints of runs without RoPE unchanged
  if (c.fresh_examples) j["fresh_examples"] = true;  // likewise
  if (m.backbone != "zoology") j["backbone"] = m.backbone;  // likewise
  return j.dump();
}

void write_mqar_checkpoint(const std::string& path, const MqarCheckpoint& ck, const std::string& fingerprint) {
  mlp::write_checkpoint_file(path, "the MQAR checkpoint", kFormat, fingerprint, [&ck](h5::File& f) {
    const auto& r = ck.partial;
    const std::vector<std::int64_t> pos = {ck.steps, ck.epoch, ck.batch_in_epoch, r.epochs_run};
    const std::vector<double> times = {r.train_s, r.eval_s};
    f.write("params", std::span<const double>(ck.params));
    f.write("adam_m", std::span<const double>(ck.m));
    f.write("adam_v", std::span<const double>(ck.v));
    f.write("position", std::span<const std::int64_t>(pos));
    f.write("times", std::span<const double>(times));
    f.write("step", std::span<const std::int64_t>(r.step));
    f.write("loss", std::span<const double>(r.loss));
    f.write("accuracy", std::span<const double>(r.accuracy));
    f.write("lr", std::span<const double>(r.lr));
    f.write("grad_norm", std::span<const double>(r.grad_norm));
    f.write("eval_epoch", std::span<const std::int64_t>(r.eval_epoch));
    f.write("eval_step", std::span<const std::int64_t>(r.eval_step));
    f.write("eval_accuracy", std::span<const double>(r.eval_accuracy));
    f.write("eval_loss", std::span<const double>(r.eval_loss));
  });
}

std::optional<MqarCheckpoint> read_mqar_checkpoint(const std::string& path, const std::string& fingerprint) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec) || !h5::is_hdf5(path)) return std::nullopt;
  const auto f = h5::File::open_read(path);
  if (f.attr_string("format").value_or("") != kFormat || f.attr_string("fingerprint").value_or("") != fingerprint)
    return std::nullopt;
  MqarCheckpoint ck;
  auto& r = ck.partial;
  ck.params = f.read_doubles("params");
  ck.m = f.read_doubles("adam_m");
  ck.v = f.read_doubles("adam_v");
  const auto pos = f.read_int64s("position");
  const auto times = f.read_doubles("times");
  r.step = f.read_int64s("step");
  r.loss = f.read_doubles("loss");
  r.accuracy = f.read_doubles("accuracy");
  r.lr = f.read_doubles("lr");
  r.grad_norm = f.read_doubles("grad_norm");
  r.eval_epoch = f.read_int64s("eval_epoch");
  r.eval_step = f.read_int64s("eval_step");
  r.eval_accuracy = f.read_doubles("eval_accuracy");
  r.eval_loss = f.read_doubles("eval_loss");
  const std::size_t n = r.step.size(), ne = r.eval_epoch.size();
  if (pos.size() != 4 || times.size() != 2 || ck.m.size() != ck.params.size() || ck.v.size() != ck.params.size() ||
      r.loss.size() != n || r.accuracy.size() != n || r.lr.size() != n || r.grad_norm.size() != n ||
      r.eval_step.size() != ne || r.eval_accuracy.size() != r.eval_loss.size() ||
      (ne == 0 ? !r.eval_accuracy.empty() : r.eval_accuracy.size() % ne != 0) || pos[0] != static_cast<std::int64_t>(n))
    throw IoError(fmt::format("MQAR checkpoint '{}' is inconsistent (arena or curve lengths differ); delete it", path));
  ck.steps = pos[0];
  ck.epoch = pos[1];
  ck.batch_in_epoch = pos[2];
  r.epochs_run = pos[3];
  r.steps = ck.steps;
  r.train_s = times[0];
  r.eval_s = times[1];
  return ck;
}

}  // namespace memcap::kata

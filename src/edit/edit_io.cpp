// Base-model file of `hebb edit` (edit/edit_io.hpp).
#include "edit/edit_io.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"
#include "mlp/model_io.hpp"

namespace memcap::edit {

namespace {

const char* gate_text(nn::Activation a) {
  return a == nn::Activation::identity ? "identity" : a == nn::Activation::relu ? "relu" : "silu";
}

void write_arena(h5::Group& g, const nn::ParamArena<double>& a) {
  const h5::WriteOptions z{true, 0};
  for (const auto& v : a.layout.views())
    g.write_nd(v.name, std::span<const double>(a.params.data() + v.offset, static_cast<std::size_t>(v.numel)), v.shape,
               z);
}

void read_arena(const h5::Group& g, nn::ParamArena<double>& a) {
  for (const auto& v : a.layout.views()) {
    if (!g.exists(v.name))
      throw IoError(fmt::format("'{}': {}/{} is missing; the base file is incomplete (rerun hebb edit base)",
                                g.filename(), g.path(), v.name));
    const auto shape = g.shape(v.name);
    if (shape != v.shape)
      throw IoError(fmt::format("'{}': {}/{} has another shape than the model's configuration", g.filename(), g.path(),
                                v.name));
    const std::vector<double> x = g.read_doubles(v.name);
    for (const double e : x)
      if (!std::isfinite(e))
        throw IoError(fmt::format("'{}': {}/{} holds a non-finite value", g.filename(), g.path(), v.name));
    std::copy(x.begin(), x.end(), a.params.begin() + v.offset);
  }
}

std::int64_t need_int(const h5::Group& g, const char* name) {
  const auto v = g.attr_int(name);
  if (!v) throw IoError(fmt::format("'{}': attribute /model@{} is missing; not a hebb edit base file", g.filename(), name));
  return *v;
}
double need_double(const h5::Group& g, const char* name) {
  const auto v = g.attr_double(name);
  if (!v) throw IoError(fmt::format("'{}': attribute /model@{} is missing; not a hebb edit base file", g.filename(), name));
  return *v;
}
std::string need_string(const h5::Group& g, const char* name) {
  const auto v = g.attr_string(name);
  if (!v) throw IoError(fmt::format("'{}': attribute /model@{} is missing; not a hebb edit base file", g.filename(), name));
  return *v;
}

}  // namespace

void write_base_model(h5::Group& root, const EditModel& model, const mlp::GatedMLP& expert, const BaseModelInfo& info) {
  const auto& c = model.config();
  auto g = root.child("model");
  g.attr("kind", "hebb edit base");
  g.attr("d", c.d);
  g.attr("vocab", c.vocab);
  g.attr("qk_hidden", c.qk_hidden);
  g.attr("rank", c.rank);
  g.attr("fact_hidden", c.fact_hidden);
  g.attr("fact_gate", gate_text(c.fact_gate));
  g.attr("rms_eps", c.rms_eps);
  g.attr("ln_eps", c.ln_eps);
  g.attr("facts", info.facts);
  g.attr("templates", info.templates);
  g.attr("vocab_fingerprint", fmt::format("{:016x}", info.vocab_fingerprint));
  if (info.facts_fingerprint) g.attr("facts_fingerprint", fmt::format("{:016x}", *info.facts_fingerprint));
  g.attr("expert", info.expert);
  g.attr("expert_method", info.expert_method);
  g.attr("expert_seed", static_cast<std::int64_t>(info.expert_seed));
  g.attr("seed", static_cast<std::int64_t>(info.seed));
  auto t = g.child("trainable");
  write_arena(t, model.trainable());
  auto f = g.child("frozen");
  write_arena(f, model.frozen());
  auto e = root.child("expert");
  mlp::write_mlp(e, expert, info.expert_seed);
}

BaseModelFile read_base_model(const h5::Group& root) {
  if (!root.exists("model") || !root.exists("expert"))
    throw IoError(fmt::format("'{}' has no /model and /expert; give a file written by 'hebb edit base'",
                              root.filename()));
  const h5::Group g = root.open_group("model");
  if (need_string(g, "kind") != "hebb edit base")
    throw IoError(fmt::format("'{}' is not a hebb edit base file (/model@kind)", root.filename()));
  BaseModelFile b;
  b.config.d = need_int(g, "d");
  b.config.vocab = need_int(g, "vocab");
  b.config.qk_hidden = need_int(g, "qk_hidden");
  b.config.rank = need_int(g, "rank");
  b.config.fact_hidden = need_int(g, "fact_hidden");
  b.config.fact_gate = nn::parse_activation(need_string(g, "fact_gate").c_str());
  b.config.rms_eps = need_double(g, "rms_eps");
  b.config.ln_eps = need_double(g, "ln_eps");
  try {
    b.config.validate();
  } catch (const UserError& e) {
    throw IoError(fmt::format("'{}': {}", root.filename(), e.what()));
  }
  b.info.facts = need_int(g, "facts");
  b.info.templates = need_int(g, "templates");
  auto hex = [&](const char* name, const std::string& fp) {
    try {
      std::size_t pos = 0;
      const std::uint64_t v = std::stoull(fp, &pos, 16);
      if (pos != fp.size() || fp.empty() || fp[0] == '-' || fp[0] == '+') throw std::invalid_argument("not hex");
      return v;
    } catch (const std::exception&) {
      throw IoError(fmt::format("'{}': /model@{} '{}' is not a hex number", root.filename(), name, fp));
    }
  };
  b.info.vocab_fingerprint = hex("vocab_fingerprint", need_string(g, "vocab_fingerprint"));
  if (g.has_attr("facts_fingerprint"))
    b.info.facts_fingerprint = hex("facts_fingerprint", need_string(g, "facts_fingerprint"));
  b.info.expert = need_string(g, "expert");
  b.info.expert_method = need_string(g, "expert_method");
  b.info.expert_seed = static_cast<std::uint64_t>(need_int(g, "expert_seed"));
  b.info.seed = static_cast<std::uint64_t>(need_int(g, "seed"));
  b.expert = mlp::read_mlp(root.open_group("expert"));
  return b;
}

void load_base_weights(const h5::Group& root, EditModel& model) {
  const h5::Group g = root.open_group("model");
  read_arena(g.open_group("trainable"), model.trainable());
  read_arena(g.open_group("frozen"), model.frozen());
}

}  // namespace memcap::edit

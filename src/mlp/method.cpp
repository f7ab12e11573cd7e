// Method spec parser: FAMILY[:VARIANT][,key=value...]. Every option is checked against the
// variant it belongs to, so a typo never silently falls back to a default.
#include "mlp/method.hpp"

#include <fmt/format.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "core/text.hpp"

namespace memcap::mlp {

namespace {

constexpr const char* kValidMethods =
    "hebbian, hebbian:exact-k2, hebbian:whitened[,ridge=R], "
    "hebbian:data-dependent[,ridge=R,cg-tol=T,cg-max-iter=N,cg-precision=auto|float32|float64], ntk, "
    "gd|gd:transformer|gd:edit[,gate=identity|relu|silu,bias=0|1,loss=ce|mse,epochs=N,lr=X,lr-min=X,"
    "optimizer=adam|adamw,wd=X,precision=f32|f64|tf32|bf16|bf16x3,stop-loss=X] (gd: identity gate, no bias, CE, "
    "10000 epochs, lr 1e-3 -> 1e-6 cosine, Adam, f32, stop at loss <= 1e-7; gd:transformer: relu, bias=1, "
    "f64; gd:edit: silu, bias=1, mse)";

const std::vector<std::string> kGdOptions = {"gate", "bias",      "loss", "epochs",    "lr",
                                             "lr-min", "optimizer", "wd", "precision", "stop-loss"};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

double parse_double(const std::string& key, const std::string& v, const std::string& text) {
  try {
    std::size_t used = 0;
    const double x = std::stod(v, &used);
    if (used == v.size() && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  throw UserError(fmt::format("method '{}': option {}={} is not a number", text, key, v));
}

std::int64_t parse_count(const std::string& key, const std::string& v, const std::string& text) {
  const double n = parse_double(key, v, text);
  require(n >= 1 && n == std::floor(n) && n < 9.2e18, "method '{}': {} must be a positive integer (got {})", text,
          key, v);
  return static_cast<std::int64_t>(n);
}

// One gd option onto cfg (values checked here; cross-option checks after all options).
void apply_gd_option(GdConfig& g, const std::string& key, const std::string& val, const std::string& text) {
  if (key == "gate") {
    require(val == "identity" || val == "relu" || val == "silu",
            "method '{}': gate must be identity, relu or silu (got {})", text, val);
    g.gate = nn::parse_activation(val.c_str());
  } else if (key == "bias") {
    require(val == "0" || val == "1", "method '{}': bias must be 0 or 1 (got {})", text, val);
    g.bias = val == "1";
  } else if (key == "loss") {
    require(val == "ce" || val == "mse", "method '{}': loss must be ce or mse (got {})", text, val);
    g.loss = nn::parse_loss(val.c_str());
  } else if (key == "epochs") {
    g.epochs = parse_count(key, val, text);
  } else if (key == "lr") {
    g.lr = parse_double(key, val, text);
    require(g.lr > 0, "method '{}': lr must be > 0 (got {})", text, val);
  } else if (key == "lr-min") {
    g.lr_min = parse_double(key, val, text);
    require(g.lr_min >= 0, "method '{}': lr-min must be >= 0 (got {})", text, val);
  } else if (key == "optimizer") {
    require(val == "adam" || val == "adamw", "method '{}': optimizer must be adam or adamw (got {})", text, val);
    g.adamw = val == "adamw";
  } else if (key == "wd") {
    g.weight_decay = parse_double(key, val, text);
    require(g.weight_decay >= 0, "method '{}': wd must be >= 0 (got {})", text, val);
  } else if (key == "precision") {
    require(val == "f32" || val == "f64" || val == "tf32" || val == "bf16" || val == "bf16x3",
            "method '{}': precision must be f32, f64, tf32, bf16 or bf16x3 (got {})", text, val);
    g.precision = val == "tf32" ? "f32" : val;
    g.tf32 = val == "tf32";
  } else if (key == "stop-loss") {
    g.stop_loss = parse_double(key, val, text);
  }
}

}  // namespace

std::string canonical_gd_spec(const GdConfig& g) {
  return fmt::format("gd,gate={},bias={},loss={},epochs={},lr={},lr-min={},optimizer={},wd={},precision={},stop-loss={}",
                     nn::to_string(g.gate), g.bias ? 1 : 0, nn::to_string(g.loss), g.epochs, g.lr, g.lr_min,
                     g.adamw ? "adamw" : "adam", g.weight_decay, g.tf32 ? "tf32" : g.precision, g.stop_loss);
}

std::string MethodSpec::name() const {
  switch (kind) {
    case MethodKind::sketched: return "hebbian";
    case MethodKind::exact_k2: return "hebbian:exact-k2";
    case MethodKind::whitened: return "hebbian:whitened";
    case MethodKind::data_dependent: return "hebbian:data-dependent";
    case MethodKind::ntk: return "ntk";
    case MethodKind::gd: return "gd";
  }
  return "?";
}

const char* method_help() { return kValidMethods; }

std::vector<std::string> split_method_list(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& item : in) {
    for (const std::string& tok : split_list(item, ',', "method list")) {
      const auto eq = tok.find('='), colon = tok.find(':');
      const bool option = eq != std::string::npos && (colon == std::string::npos || colon > eq);
      if (option && !out.empty()) out.back() += "," + tok;
      else out.push_back(tok);
    }
  }
  return out;
}

MethodSpec parse_method(const std::string& text) {
  MethodSpec m;
  m.text = text;
  auto parts = split(text, ',');
  std::string head = parts.empty() ? std::string() : parts[0];
  // "gd:loss=ce" (option right after the colon) is "gd,loss=ce".
  if (head.rfind("gd:", 0) == 0 && head.find('=') != std::string::npos) {
    parts.insert(parts.begin() + 1, head.substr(3));
    head = parts[0] = "gd";
  }
  if (head == "hebbian" || head == "hebbian:sketched" || head == "hebbian:unwhitened")
    m.kind = MethodKind::sketched;
  else if (head == "hebbian:exact-k2")
    m.kind = MethodKind::exact_k2;
  else if (head == "hebbian:whitened")
    m.kind = MethodKind::whitened;
  else if (head == "hebbian:data-dependent")
    m.kind = MethodKind::data_dependent;
  else if (head == "ntk")
    m.kind = MethodKind::ntk;
  else if (head == "gd")
    m.kind = MethodKind::gd;
  else if (head == "gd:transformer") {
    m.kind = MethodKind::gd;  // §2.6 DISCREPANCY: the released code's GD MLP inside Transformers
    m.gd.gate = nn::Activation::relu;
    m.gd.bias = true;
    m.gd.precision = "f64";
  } else if (head == "gd:edit") {
    m.kind = MethodKind::gd;  // §2.7: fact-editing expert (SwiGLU-style gate, MSE)
    m.gd.gate = nn::Activation::silu;
    m.gd.bias = true;
    m.gd.loss = nn::Loss::mse;
  } else
    throw UserError(fmt::format("unknown method '{}'; valid methods: {}", text, kValidMethods));

  std::vector<std::string> allowed;
  if (m.kind == MethodKind::whitened) allowed = {"ridge"};
  if (m.kind == MethodKind::data_dependent) allowed = {"ridge", "cg-tol", "cg-max-iter", "cg-precision"};
  if (m.kind == MethodKind::gd) allowed = kGdOptions;
  std::vector<std::string> seen;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const auto eq = parts[i].find('=');
    const std::string key = parts[i].substr(0, eq);
    const std::string val = eq == std::string::npos ? std::string() : parts[i].substr(eq + 1);
    bool ok = eq != std::string::npos && !val.empty();
    bool known = false;
    for (const auto& a : allowed) known = known || a == key;
    if (!known || !ok) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a + "=VALUE";
      throw UserError(fmt::format("method '{}': unknown or malformed option '{}'; {} takes {}", text, parts[i],
                                  m.name(), list.empty() ? std::string("no options") : list));
    }
    for (const auto& k : seen)
      require(k != key, "method '{}': option {} is given twice; give each option once", text, key);
    seen.push_back(key);
    if (m.kind == MethodKind::gd) {
      apply_gd_option(m.gd, key, val, text);
    } else if (key == "ridge") {
      m.ridge = parse_double(key, val, text);
      require(m.ridge > 0, "method '{}': ridge must be > 0 (got {})", text, m.ridge);
    } else if (key == "cg-tol") {
      m.cg_tol = parse_double(key, val, text);
      require(m.cg_tol > 0 && m.cg_tol < 1, "method '{}': cg-tol must be in (0, 1) (got {})", text, m.cg_tol);
    } else if (key == "cg-max-iter") {
      const double n = parse_double(key, val, text);
      require(n >= 1 && n == std::floor(n), "method '{}': cg-max-iter must be a positive integer (got {})", text,
              val);
      m.cg_max_iter = static_cast<std::int64_t>(n);
    } else if (key == "cg-precision") {
      require(val == "auto" || val == "float32" || val == "float64",
              "method '{}': cg-precision must be auto, float32 or float64 (got {})", text, val);
      m.cg_precision = val;
    }
  }
  if (m.kind == MethodKind::gd)
    require(m.gd.lr_min <= m.gd.lr, "method '{}': lr-min ({}) must not exceed lr ({}); lower lr-min", text, m.gd.lr_min,
            m.gd.lr);
  return m;
}

}  // namespace memcap::mlp

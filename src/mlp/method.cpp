// Method spec parser: FAMILY[:VARIANT][,key=value...]. Every option is checked against the
// variant it belongs to, so a typo never silently falls back to a default.
#include "mlp/method.hpp"

#include <fmt/format.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "core/error.hpp"

namespace memcap::mlp {

namespace {

constexpr const char* kValidMethods =
    "hebbian, hebbian:exact-k2, hebbian:whitened[,ridge=R], "
    "hebbian:data-dependent[,ridge=R,cg-tol=T,cg-max-iter=N,cg-precision=auto|float32|float64], ntk";

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

}  // namespace

std::string MethodSpec::name() const {
  switch (kind) {
    case MethodKind::sketched: return "hebbian";
    case MethodKind::exact_k2: return "hebbian:exact-k2";
    case MethodKind::whitened: return "hebbian:whitened";
    case MethodKind::data_dependent: return "hebbian:data-dependent";
    case MethodKind::ntk: return "ntk";
  }
  return "?";
}

const char* method_help() { return kValidMethods; }

MethodSpec parse_method(const std::string& text) {
  MethodSpec m;
  m.text = text;
  const auto parts = split(text, ',');
  const std::string head = parts.empty() ? std::string() : parts[0];
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
  else
    throw UserError(fmt::format("unknown method '{}'; valid methods: {}", text, kValidMethods));

  std::vector<std::string> allowed;
  if (m.kind == MethodKind::whitened) allowed = {"ridge"};
  if (m.kind == MethodKind::data_dependent) allowed = {"ridge", "cg-tol", "cg-max-iter", "cg-precision"};
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
    if (key == "ridge") {
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
  return m;
}

}  // namespace memcap::mlp

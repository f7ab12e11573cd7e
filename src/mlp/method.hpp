// The one parser of method spec strings ("hebbian", "hebbian:whitened,ridge=1e-6", "ntk", ...).
// Results store MethodSpec::text verbatim; code switches on MethodSpec::kind.
#pragma once
#include <cstdint>
#include <string>

namespace memcap::mlp {

enum class MethodKind { sketched, exact_k2, whitened, data_dependent, ntk };

struct MethodSpec {
  std::string text;                 // verbatim, as the user wrote it
  MethodKind kind = MethodKind::sketched;
  double ridge = 1e-6;              // whitened, data-dependent (spec §2.3/§2.4)
  double cg_tol = 0;                // data-dependent; 0 = 1e-5 (float32 CG) / 1e-10 (float64 CG)
  std::int64_t cg_max_iter = 0;     // data-dependent; 0 = min(max(2m,128),1024)
  std::string cg_precision = "auto";  // data-dependent: auto (float32 iff m*d > 8192) | float32 | float64

  // Canonical name of the construction: hebbian | hebbian:exact-k2 | hebbian:whitened |
  // hebbian:data-dependent | ntk.
  std::string name() const;
};

// Parse a spec string; UserError listing the valid methods/options on anything unknown.
MethodSpec parse_method(const std::string& text);

// One line per accepted spec, for --help texts.
const char* method_help();

}  // namespace memcap::mlp

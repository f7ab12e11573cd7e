// The one parser of method spec strings ("hebbian", "hebbian:whitened,ridge=1e-6", "ntk", ...).
// Results store MethodSpec::text verbatim; code switches on MethodSpec::kind.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mlp/gd_train.hpp"

namespace memcap::mlp {

enum class MethodKind { sketched, exact_k2, whitened, data_dependent, ntk, gd };

struct MethodSpec {
  std::string text;                 // verbatim, as the user wrote it
  MethodKind kind = MethodKind::sketched;
  double ridge = 1e-6;              // whitened, data-dependent (spec §2.3/§2.4)
  double cg_tol = 0;                // data-dependent; 0 = 1e-5 (float32 CG) / 1e-10 (float64 CG)
  std::int64_t cg_max_iter = 0;     // data-dependent; 0 = min(max(2m,128),1024)
  std::string cg_precision = "auto";  // data-dependent: auto (float32 iff m*d > 8192) | float32 | float64
  GdConfig gd;                      // gd: training configuration (spec §2.6/§2.7), defaults of the preset

  // Canonical name of the construction: hebbian | hebbian:exact-k2 | hebbian:whitened |
  // hebbian:data-dependent | ntk | gd (all GD presets).
  std::string name() const;
};

// Parse a spec string; UserError listing the valid methods/options on anything unknown.
MethodSpec parse_method(const std::string& text);

// One line per accepted spec, for --help texts.
const char* method_help();

// A --methods list as typed ("a,b:x,opt=1,c", possibly repeated flags): split at commas, where a token with
// '=' (and no ':' before it) is an option of the method before it, so method specs keep their own commas:
// {"hebbian:whitened,ridge=1e-6,ntk"} -> {"hebbian:whitened,ridge=1e-6", "ntk"}. Specs are not parsed here.
std::vector<std::string> split_method_list(const std::vector<std::string>& in);

// GD specs: "gd" (§2.6 defaults), "gd:transformer" (§2.6 DISCREPANCY: relu, bias=1, ce, f64),
// "gd:edit" (§2.7: silu, bias=1, mse, f32), then options gate=, bias=, loss=, epochs=, lr=,
// lr-min=, optimizer=, wd=, precision=, stop-loss= overriding the preset (each at most once).
// The full spec string that parses back to exactly `cfg`'s training fields (recorded in results).
std::string canonical_gd_spec(const GdConfig& cfg);

}  // namespace memcap::mlp

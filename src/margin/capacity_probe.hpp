// The capacity oracle of `hebb capacity` (spec hebbian.md §4.2): build one method's MLP at one
// width for a fact set and measure its argmax accuracy over all F facts (and the raw-output min
// margin), on the CPU (mlp::build_mlp / train_gd_cpu + margin::margins_from_outputs) or on a GPU
// (mlp::probe_width_cuda / train_gd_cuda + evaluate_mlp_cuda); plus the size estimates used to
// refuse a search that cannot fit before anything is allocated. Lives in margin/ because it needs
// both the constructions (memcap_mlp) and the margins (memcap_margin).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device.hpp"
#include "mlp/capacity.hpp"
#include "mlp/factset.hpp"
#include "mlp/method.hpp"

namespace memcap::gpu { class Handles; }

namespace memcap::margin {

// True for the gradient-descent baseline (method kind gd, spec §2.6).
bool is_gd_method(const mlp::MethodSpec& method);
// Parameter count W at width m (spec §3.7): 3md for the Hebbian family and for gd without biases,
// 3md + 2m + d for NTK and for gd with biases.
std::int64_t capacity_param_count(const mlp::MethodSpec& method, std::int64_t m, std::int64_t d);

// The fast search's default first width and first gallop factor for one job (`hebb capacity` --start-width 0,
// --growth 0). Closed forms: 1 and 2 (their probes below m* are cheap). gd with the training fields of plain `gd`
// (any precision but tf32/bf16) at spike beta in [0, kGdFitMaxBeta]: round(0.6645 F^1.1133 / d) and kGdFitGrowth,
// the power law fitted to the 63 m* of the fig2c grid (beta = 0, d = 64, 90, 128; fact seeds 42-44; within 3% of
// every m* >= 10, and fitted on d = 64 and 90 alone within 1.5% of d = 128's), with a first step of the fit's
// out-of-sample error; fig11's 21 m* at beta = 1.5, d = 64 lie within 4.4% of it (m* >= 10).
// Any other gd job: round(1.5 F/d) and 1.25. Either way at least 1; the caller clamps it to the search range.
// The search's m* does not depend on these when success is monotone in m; only the widths probed do.
inline constexpr double kGdFitGrowth = 1.015;
inline constexpr double kGdFitMaxBeta = 1.5;
struct SearchStart {
  std::int64_t start = 1;
  double growth = 2;
};
SearchStart default_search_start(const mlp::MethodSpec& method, std::int64_t dim, std::int64_t facts, double beta);

// Rough peak host bytes of one CPU probe (build + evaluation) and its floating-point work; the
// device bytes of one GPU probe (0 in a build without CUDA). Used before anything is allocated.
double cpu_probe_bytes(const mlp::MethodSpec& method, std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m);
double probe_flops(const mlp::MethodSpec& method, std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m);
double cuda_probe_bytes(const mlp::MethodSpec& method, std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m);

// Bytes of host memory available now (MemAvailable of /proc/meminfo; physical memory otherwise).
double host_available_bytes();

// Where a gd probe keeps its training's checkpoint (mlp/gd_checkpoint.hpp): file "" = none; else written every
// every_s seconds (0 = at every host sync) and at the end, and a matching file left by a killed run is resumed.
// kGdProbeCheckpointEvery is `hebb capacity --checkpoint-every`'s default.
inline constexpr double kGdProbeCheckpointEvery = 30;
struct ProbeCheckpoint {
  std::string file;
  double every_s = kGdProbeCheckpointEvery;
};

// Build + evaluate one width. device cpu: handles is ignored; cuda: handles must be non-null and
// bound to a stream of the current device. seed: the feature / initialisation seed of the method
// (the fact set carries its own). ck: gd only (closed forms ignore it). NumericError (exit 4) on a
// non-finite loss, weight or margin.
mlp::ProbeOutcome probe_width(const mlp::MethodSpec& method, const mlp::FactSet& facts, std::int64_t m,
                              std::uint64_t seed, Device device, gpu::Handles* handles,
                              const ProbeCheckpoint& ck = {});

}  // namespace memcap::margin

// The capacity oracle of `hebb capacity` (spec hebbian.md §4.2): build one method's MLP at one
// width for a fact set and measure its argmax accuracy over all F facts (and the raw-output min
// margin), on the CPU (mlp::build_mlp / train_gd_cpu + margin::margins_from_outputs) or on a GPU
// (mlp::probe_width_cuda / train_gd_cuda + evaluate_mlp_cuda); plus the size estimates used to
// refuse a search that cannot fit before anything is allocated. Lives in margin/ because it needs
// both the constructions (memcap_mlp) and the margins (memcap_margin).
#pragma once
#include <cstddef>
#include <cstdint>

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

// Rough peak host bytes of one CPU probe (build + evaluation) and its floating-point work; the
// device bytes of one GPU probe (0 in a build without CUDA). Used before anything is allocated.
double cpu_probe_bytes(const mlp::MethodSpec& method, std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m);
double probe_flops(const mlp::MethodSpec& method, std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m);
double cuda_probe_bytes(const mlp::MethodSpec& method, std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m);

// Bytes of host memory available now (MemAvailable of /proc/meminfo; physical memory otherwise).
double host_available_bytes();

// Build + evaluate one width. device cpu: handles is ignored; cuda: handles must be non-null and
// bound to a stream of the current device. seed: the feature / initialisation seed of the method
// (the fact set carries its own). NumericError (exit 4) on a non-finite loss, weight or margin.
mlp::ProbeOutcome probe_width(const mlp::MethodSpec& method, const mlp::FactSet& facts, std::int64_t m,
                              std::uint64_t seed, Device device, gpu::Handles* handles);

}  // namespace memcap::margin

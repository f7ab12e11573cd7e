// Host-side launch description shared by the KATA attention launchers (plain pointers + shape).
// Layout: q, k [B,H,T,d]; v, out [B,H,T,dv]; row-major contiguous device buffers of `dtype`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/gpu.hpp"
#include "kata/attention_form.hpp"
#include "kata/map_params.hpp"

namespace memcap::kata::cuda {

struct AttentionLaunch {
  std::int64_t B = 1, H = 1, T = 1;
  int d = 64, dv = 64;
  int chunk = 64;                     // C (chunked and tree forms)
  MapParams map;                      // the parsed map (FeatureMap::params via attention_map)
  bool normalized = true;
  gpu::DType dtype = gpu::DType::bf16;  // bf16 or f32
  // Kernel variant by name (kata_attention_variants.cuh); nullptr or "" = the table's default for the shape.
  const char* variant = nullptr;
  // Optional profiling (chunked/tree forms): when set, every chunk variant records events[0] after its
  // state pass and events[1] after its scan (== events[0] where there is no separate scan), on the stream.
  cudaEvent_t* stage_events = nullptr;
};

}  // namespace memcap::kata::cuda

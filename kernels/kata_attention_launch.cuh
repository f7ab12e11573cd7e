// Host-side launch description shared by the KATA attention launchers (plain pointers + shape).
// Layout: q, k [B,H,T,d]; v, out [B,H,T,dv]; row-major contiguous device buffers of `dtype`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace memcap::kata::cuda {

enum class DType : int { f32 = 0, bf16 = 1 };

struct AttentionLaunch {
  std::int64_t B = 1, H = 1, T = 1;
  int d = 64, dv = 64;
  int chunk = 64;          // C (chunked and tree forms)
  int map_kind = 3;        // memcap::kata::AttentionMapKind as int (0 linear .. 4 psd_sum)
  int groups = 2;
  float eps = 0.f, scale = 1.f;
  bool normalized = true;
  DType dtype = DType::bf16;
  // Optional profiling (chunked/tree forms): when set, events[0] is recorded after the chunk-state
  // kernel and events[1] after the scan (== events[0] for the chunked form), on the launch stream.
  cudaEvent_t* stage_events = nullptr;
};

}  // namespace memcap::kata::cuda

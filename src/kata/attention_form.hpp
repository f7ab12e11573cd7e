// The three forms of causal KATA attention (spec kata.md §5.1–5.3), shared by the CPU reference, the CUDA
// launchers (kernels/kata_attention_variants.cuh) and `kata bench`. Plain C++ (nvcc includes it).
#pragma once

namespace memcap::kata {

enum class AttentionForm { quadratic, chunked, tree };

}  // namespace memcap::kata

// Embedding forward/backward (nn/embedding.hpp).
#include "nn/embedding.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace memcap::nn::cpu {

template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* table, std::int64_t N, std::int64_t V,
                       std::int64_t C) {
  require(N >= 0 && V >= 1 && C >= 1, "embedding: bad shape N = {}, V = {}, C = {}", N, V, C);
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t t = tokens[n];
    require(t >= 0 && t < V, "embedding: token {} at position {} is outside the vocabulary [0, {})", t, n, V);
    std::copy(table + t * C, table + (t + 1) * C, out + n * C);
  }
}

template <class T>
void embedding_backward(T* dtable, const std::int32_t* tokens, const T* dout, std::int64_t N, std::int64_t C) {
  for (std::int64_t n = 0; n < N; ++n) {
    T* d = dtable + static_cast<std::int64_t>(tokens[n]) * C;
    const T* g = dout + n * C;
    for (std::int64_t c = 0; c < C; ++c) d[c] += g[c];
  }
}

template void embedding_forward<double>(double*, const std::int32_t*, const double*, std::int64_t, std::int64_t,
                                        std::int64_t);
template void embedding_forward<float>(float*, const std::int32_t*, const float*, std::int64_t, std::int64_t,
                                       std::int64_t);
template void embedding_backward<double>(double*, const std::int32_t*, const double*, std::int64_t, std::int64_t);
template void embedding_backward<float>(float*, const std::int32_t*, const float*, std::int64_t, std::int64_t);

}  // namespace memcap::nn::cpu

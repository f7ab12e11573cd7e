// Token embedding lookup (PyTorch nn.Embedding) in llm.c's shape, CPU, templated on the scalar,
// single-threaded. With a tied LM head the same table also receives the head's gradient.
#pragma once
#include <cstdint>

namespace memcap::nn::cpu {

// out[n,:] = table[tokens[n],:] (table: V × C). UserError for a token outside [0, V).
template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* table, std::int64_t N, std::int64_t V,
                       std::int64_t C);
// dtable[tokens[n],:] += dout[n,:] (rows added in n order).
template <class T>
void embedding_backward(T* dtable, const std::int32_t* tokens, const T* dout, std::int64_t N, std::int64_t C);

}  // namespace memcap::nn::cpu

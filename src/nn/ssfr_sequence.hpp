// One single-step factual-recall (SSFR) sequence of spec hebbian.md §6.1 as a pure function of
// (seed, stream, sequence index): the same tokens on the CPU and in a CUDA kernel (header usable
// from .cu files: no fmt, no exceptions). Validation of the sizes lives in nn/ssfr_data.hpp.
//
// Vocabulary: ids 0..F-1 facts (keys and values share them), F..F+V_J-1 junk, F+V_J the query
// token Q. Sequence of length T: junk prefix of p tokens (p ~ U{J_min..J_max}), the key k (uniform
// over F), a junk suffix of s tokens (s ~ U{J_min..J_max}), Q at position p+s+1, the value token
// f(k) at p+s+2 (input only), then padding (kSsfrPad). Junk tokens i.i.d. uniform over V_J.
//
// Counters: sequence n of a stream owns the Philox counters [n·1024, n·1024 + 1024): slot 0 draws
// p, slot 1 the key, slot 2 s, slot 3+t the junk token at position t (so T <= 1021). Batch `b` of
// size B holds sequences n = b·B + i, i < B.
#pragma once
#include <cstdint>

#include "core/rng.hpp"

namespace memcap::nn {

inline constexpr std::int32_t kSsfrPad = -100;             // padding token (zero embedding)
inline constexpr std::uint64_t kSsfrSlots = 1024;          // Philox counters per sequence
inline constexpr std::int64_t kSsfrMaxSeqLen = 1024 - 3;   // slots 3 .. 1023 hold junk positions

// The sizes one draw needs (plain ints so the struct can be passed to a kernel by value).
struct SsfrDims {
  std::int32_t facts = 0;       // F
  std::int32_t junk_min = 0;    // J_min
  std::int32_t junk_max = 0;    // J_max
  std::int32_t junk_vocab = 0;  // V_J
  std::int32_t seq_len = 0;     // T >= 2 J_max + 3
};

// What a sequence holds besides its tokens.
struct SsfrSeqInfo {
  std::int32_t prefix = 0;     // p
  std::int32_t key = 0;        // k in [0, F)
  std::int32_t suffix = 0;     // s
  std::int32_t query_pos = 0;  // Q = p + s + 1
};

MEMCAP_HD inline std::uint64_t ssfr_sequence_index(std::uint64_t batch, std::uint64_t batch_size, std::uint64_t i) {
  return batch * batch_size + i;
}

// Draws sequence `seq` of (seed, stream). tokens (may be null): seq_len entries, written in full.
// map: F entries, the value token of each key (only read when tokens is non-null and the value
// position lies inside the sequence, which T >= 2 J_max + 3 guarantees).
MEMCAP_HD inline SsfrSeqInfo ssfr_draw(std::int32_t* tokens, const std::int32_t* map, const SsfrDims& dims,
                                       std::uint64_t seed, std::uint64_t stream, std::uint64_t seq) {
  const std::uint64_t base = seq * kSsfrSlots;
  const std::uint64_t span = static_cast<std::uint64_t>(dims.junk_max - dims.junk_min + 1);
  SsfrSeqInfo info;
  info.prefix = dims.junk_min + static_cast<std::int32_t>(rng::below(seed, stream, base + 0, span));
  info.key = static_cast<std::int32_t>(rng::below(seed, stream, base + 1, static_cast<std::uint64_t>(dims.facts)));
  info.suffix = dims.junk_min + static_cast<std::int32_t>(rng::below(seed, stream, base + 2, span));
  info.query_pos = info.prefix + info.suffix + 1;
  if (tokens) {
    const std::int32_t q_token = dims.facts + dims.junk_vocab;
    for (std::int32_t t = 0; t < dims.seq_len; ++t) {
      std::int32_t tok;
      if (t == info.prefix) {
        tok = info.key;
      } else if (t < info.query_pos) {
        tok = dims.facts + static_cast<std::int32_t>(rng::below(seed, stream, base + 3 + static_cast<std::uint64_t>(t),
                                                                static_cast<std::uint64_t>(dims.junk_vocab)));
      } else if (t == info.query_pos) {
        tok = q_token;
      } else if (t == info.query_pos + 1) {
        tok = map[info.key];
      } else {
        tok = kSsfrPad;
      }
      tokens[t] = tok;
    }
  }
  return info;
}

}  // namespace memcap::nn

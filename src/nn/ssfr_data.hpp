// SSFR task sizes and batches (spec hebbian.md §6.1): checked sizes (SsfrTask) and fresh batches
// drawn from the counter-based sequence function of nn/ssfr_sequence.hpp, so the CPU trainer and
// a CUDA kernel see the same tokens for the same (seed, stream, batch).
#pragma once
#include <cstdint>
#include <vector>

#include "nn/ssfr_sequence.hpp"

namespace memcap::nn {

struct SsfrTask {
  std::int64_t facts = 0;       // F
  std::int64_t junk_min = 0;    // J_min
  std::int64_t junk_max = 0;    // J_max
  std::int64_t junk_vocab = 0;  // V_J
  std::int64_t seq_len = 0;     // T (0 in make(): 2 J_max + 3)

  // Sizes with the defaults of the paper runs filled in: T = 2 J_max + 3 when seq_len == 0.
  // UserError (exit 2) naming the flag for: F < 1; J_min < 0 or J_min > J_max; V_J < 1 while junk
  // is drawn; T < 2 J_max + 3 ("J too long for T"); T > kSsfrMaxSeqLen; a vocabulary F + V_J + 1
  // beyond the int32 token ids.
  static SsfrTask make(std::int64_t facts, std::int64_t junk_min, std::int64_t junk_max, std::int64_t junk_vocab,
                       std::int64_t seq_len = 0);
  void validate() const;

  std::int64_t vocab() const { return facts + junk_vocab + 1; }
  std::int32_t query_token() const { return static_cast<std::int32_t>(facts + junk_vocab); }
  SsfrDims dims() const;
};

// B sequences of one batch: tokens row-major B×T (kSsfrPad for padding), and per sequence the
// drawn prefix/key/suffix, the query position Q and the target f(key) read at Q.
struct SsfrBatch {
  std::int64_t B = 0, T = 0;
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> prefix, key, suffix, query_pos, target;
};

// Fills `out` with batch `batch` (sequences batch·B .. batch·B + B − 1) of (seed, stream) under the
// fact map `map` (F entries, values in [0, F)). Reuses out's storage.
void ssfr_batch(SsfrBatch& out, const SsfrTask& task, const std::int32_t* map, std::int64_t B, std::uint64_t seed,
                std::uint64_t stream, std::uint64_t batch);

}  // namespace memcap::nn

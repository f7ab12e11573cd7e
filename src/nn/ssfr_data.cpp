// SSFR task validation and batch drawing (nn/ssfr_data.hpp).
#include "nn/ssfr_data.hpp"

#include <limits>

#include "core/error.hpp"

namespace memcap::nn {

SsfrTask SsfrTask::make(std::int64_t facts, std::int64_t junk_min, std::int64_t junk_max, std::int64_t junk_vocab,
                        std::int64_t seq_len) {
  SsfrTask t;
  t.facts = facts;
  t.junk_min = junk_min;
  t.junk_max = junk_max;
  t.junk_vocab = junk_vocab;
  require(junk_max <= (kSsfrMaxSeqLen - 3) / 2,
          "--junk {} is too long: a sequence of T = 2 J + 3 positions holds at most J = {} junk tokens per side",
          junk_max, (kSsfrMaxSeqLen - 3) / 2);
  t.seq_len = seq_len == 0 ? 2 * junk_max + 3 : seq_len;
  t.validate();
  return t;
}

void SsfrTask::validate() const {
  constexpr std::int64_t kMaxToken = std::numeric_limits<std::int32_t>::max();
  require(facts >= 1, "--facts must be >= 1 (got {})", facts);
  require(junk_min >= 0 && junk_max >= 0, "--junk and --junk-min must be >= 0 (got J_min = {}, J_max = {})",
          junk_min, junk_max);
  require(junk_min <= junk_max, "--junk-min {} is larger than --junk {}: junk lengths are drawn from [J_min, J_max]",
          junk_min, junk_max);
  require(junk_vocab >= 0, "--junk-vocab must be >= 0 (got {})", junk_vocab);
  require(junk_max == 0 || junk_vocab >= 1,
          "--junk-vocab 0 leaves no junk tokens to draw for J = {} junk positions; give --junk-vocab >= 1 or --junk 0",
          junk_max);
  require(seq_len <= kSsfrMaxSeqLen, "--seq-len {} is too long: at most {} positions per sequence", seq_len,
          kSsfrMaxSeqLen);
  require(seq_len >= 2 * junk_max + 3,
          "J = {} junk tokens per side is too long for --seq-len T = {}: a sequence needs T >= 2 J + 3 = {} "
          "(prefix, key, suffix, query, value)",
          junk_max, seq_len, 2 * junk_max + 3);
  require(facts <= kMaxToken - 1 - junk_vocab,
          "F = {} facts with V_J = {} junk tokens make a vocabulary of {} tokens, more than the {} that int32 token "
          "ids allow; use fewer facts",
          facts, junk_vocab, facts + junk_vocab + 1, kMaxToken);
}

SsfrDims SsfrTask::dims() const {
  SsfrDims d;
  d.facts = static_cast<std::int32_t>(facts);
  d.junk_min = static_cast<std::int32_t>(junk_min);
  d.junk_max = static_cast<std::int32_t>(junk_max);
  d.junk_vocab = static_cast<std::int32_t>(junk_vocab);
  d.seq_len = static_cast<std::int32_t>(seq_len);
  return d;
}

void ssfr_batch(SsfrBatch& out, const SsfrTask& task, const std::int32_t* map, std::int64_t B, std::uint64_t seed,
                std::uint64_t stream, std::uint64_t batch) {
  MEMCAP_ASSERT(B >= 1 && map != nullptr, "ssfr_batch: B >= 1 and a map are required");
  const SsfrDims dims = task.dims();
  const std::int64_t T = task.seq_len;
  out.B = B;
  out.T = T;
  out.tokens.resize(static_cast<std::size_t>(B * T));
  for (auto* v : {&out.prefix, &out.key, &out.suffix, &out.query_pos, &out.target})
    v->resize(static_cast<std::size_t>(B));
#pragma omp parallel for schedule(static) if (B * T > (1 << 16))
  for (std::int64_t i = 0; i < B; ++i) {
    const SsfrSeqInfo s = ssfr_draw(out.tokens.data() + i * T, map, dims, seed, stream,
                                    ssfr_sequence_index(batch, static_cast<std::uint64_t>(B), static_cast<std::uint64_t>(i)));
    out.prefix[i] = s.prefix;
    out.key[i] = s.key;
    out.suffix[i] = s.suffix;
    out.query_pos[i] = s.query_pos;
    out.target[i] = map[s.key];
  }
}

}  // namespace memcap::nn

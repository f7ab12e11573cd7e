// MQAR / overwrite / induction generators (spec kata.md §4.1–4.3). Counter layout per example
// (Philox stream = example index): keys at counters [0, 2^20), values [2^20, ..), query slots
// [2·2^20, ..), fillers [3·2^20 + position), overwrite order [4·2^20, ..), new values [5·2^20, ..).
#include "kata/mqar_task.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <sstream>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace memcap::kata {

namespace {

constexpr std::uint64_t kBlock = std::uint64_t(1) << 20;
constexpr std::uint64_t kKeyCtr = 0, kValueCtr = kBlock, kSlotCtr = 2 * kBlock, kFillCtr = 3 * kBlock,
                        kOrderCtr = 4 * kBlock, kNewValueCtr = 5 * kBlock;

// `count` distinct numbers of [lo, lo + n) in draw order (partial Fisher–Yates; uniform over ordered samples).
void sample_distinct(std::uint64_t seed, std::uint64_t stream, std::uint64_t ctr, std::int64_t lo, std::int64_t n,
                     std::int64_t count, std::vector<std::int32_t>& pool, std::int32_t* out) {
  pool.resize(static_cast<std::size_t>(n));
  std::iota(pool.begin(), pool.end(), static_cast<std::int32_t>(lo));
  for (std::int64_t j = 0; j < count; ++j) {
    const auto r = static_cast<std::int64_t>(rng::below(seed, stream, ctr + static_cast<std::uint64_t>(j),
                                                        static_cast<std::uint64_t>(n - j)));
    std::swap(pool[static_cast<std::size_t>(j)], pool[static_cast<std::size_t>(j + r)]);
    out[j] = pool[static_cast<std::size_t>(j)];
  }
}

}  // namespace

const char* to_string(TaskKind k) {
  switch (k) {
    case TaskKind::mqar: return "mqar";
    case TaskKind::overwrite: return "overwrite";
    case TaskKind::induction: return "induction";
  }
  return "?";
}

TaskKind parse_task(const std::string& s) {
  if (s == "mqar") return TaskKind::mqar;
  if (s == "overwrite") return TaskKind::overwrite;
  if (s == "induction") return TaskKind::induction;
  throw UserError(fmt::format("unknown task '{}': use mqar, overwrite or induction", s));
}

void TaskSlice::validate() const {
  const std::string n = fmt::format("{} slice T={} K={}", to_string(kind), seq_len, keys);
  require(vocab >= 4 && vocab <= (std::int64_t(1) << 24), "{}: vocabulary {} must be in [4, 2^24]", n, vocab);
  require(std::isfinite(power_a) && power_a > 0 && power_a <= 1, "{}: power_a = {} must be in (0, 1]", n, power_a);
  require(examples >= 0, "{}: example count {} must be >= 0", n, examples);
  if (kind == TaskKind::induction) {
    require(seq_len >= 3 && seq_len < (std::int64_t(1) << 20), "{}: the induction probe needs 3 <= T < 2^20", n);
    return;
  }
  require(keys >= 1, "{}: the number of keys K must be >= 1", n);
  require(seq_len % 2 == 0, "{}: the sequence length T must be even (slots of query + filler)", n);
  require(seq_len < vocab, "{}: T must be below the vocabulary size {} (Zoology's assert)", n, vocab);
  const std::int64_t need = kind == TaskKind::mqar ? 4 * keys : 6 * keys;
  require(need <= seq_len, "{}: T must be >= {}K = {} ({} context tokens plus K query slots)", n,
          kind == TaskKind::mqar ? 4 : 6, need, kind == TaskKind::mqar ? "2K" : "4K");
  require(keys <= vocab / 2 - 1, "{}: K = {} exceeds the {} key ids of [1, V/2)", n, keys, vocab / 2 - 1);
}

std::string TaskSlice::name() const {
  return kind == TaskKind::induction ? fmt::format("T={}", seq_len) : fmt::format("T={},K={}", seq_len, keys);
}

std::vector<std::int64_t> power_law_slots(std::int64_t space, std::int64_t count, double power_a, std::uint64_t seed,
                                          std::uint64_t stream, std::uint64_t counter_base) {
  MEMCAP_ASSERT(count <= space && count >= 0, "power_law_slots: count <= space");
  // Key log(u)/w: the slot with the largest key is the first sequential draw, and so on.
  std::vector<std::pair<double, std::int64_t>> key(static_cast<std::size_t>(space));
  for (std::int64_t j = 0; j < space; ++j) {
    const double w = std::pow(static_cast<double>(j + 1), power_a - 1.0);
    const double u = rng::uniform(seed, stream, counter_base + static_cast<std::uint64_t>(j));
    key[static_cast<std::size_t>(j)] = {std::log(u) / w, j};
  }
  auto by_key = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::partial_sort(key.begin(), key.begin() + count, key.end(), by_key);
  std::vector<std::int64_t> out(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) out[static_cast<std::size_t>(i)] = key[static_cast<std::size_t>(i)].second;
  return out;
}

void generate_example(const TaskSlice& s, std::uint64_t seed, std::int64_t index, std::int32_t* in, std::int32_t* lab) {
  const std::int64_t T = s.seq_len, V = s.vocab, K = s.keys;
  const auto stream = static_cast<std::uint64_t>(index);
  std::fill(lab, lab + T, kIgnoreLabel);
  std::vector<char> set(static_cast<std::size_t>(T), 0);
  auto put = [&](std::int64_t pos, std::int32_t tok) {
    in[pos] = tok;
    set[static_cast<std::size_t>(pos)] = 1;
  };
  if (s.kind == TaskKind::induction) {
    const auto i = static_cast<std::int64_t>(rng::below(seed, stream, kSlotCtr, static_cast<std::uint64_t>(T - 2)));
    for (std::int64_t p = 0; p < T; ++p)
      in[p] = static_cast<std::int32_t>(rng::below(seed, stream, kFillCtr + static_cast<std::uint64_t>(p),
                                                   static_cast<std::uint64_t>(V - 1)));
    in[i] = static_cast<std::int32_t>(V - 1);
    in[T - 1] = static_cast<std::int32_t>(V - 1);
    lab[T - 1] = in[i + 1];
    return;
  }
  std::vector<std::int32_t> pool, keys(static_cast<std::size_t>(K)), values(static_cast<std::size_t>(K));
  sample_distinct(seed, stream, kKeyCtr, 1, V / 2 - 1, K, pool, keys.data());
  sample_distinct(seed, stream, kValueCtr, V / 2, V - V / 2, K, pool, values.data());
  for (std::int64_t i = 0; i < K; ++i) {
    put(2 * i, keys[static_cast<std::size_t>(i)]);
    put(2 * i + 1, values[static_cast<std::size_t>(i)]);
  }
  std::int64_t context = 2 * K;
  std::vector<std::int32_t> answer = values;
  if (s.kind == TaskKind::overwrite) {
    // Update pairs in a random key order, each with a new value != the key's current value.
    std::vector<std::int32_t> order(static_cast<std::size_t>(K));
    sample_distinct(seed, stream, kOrderCtr, 0, K, K, pool, order.data());
    for (std::int64_t j = 0; j < K; ++j) {
      const auto i = static_cast<std::size_t>(order[static_cast<std::size_t>(j)]);
      auto nv = static_cast<std::int32_t>(V / 2 + static_cast<std::int64_t>(rng::below(
                                                       seed, stream, kNewValueCtr + static_cast<std::uint64_t>(j),
                                                       static_cast<std::uint64_t>(V - V / 2 - 1))));
      if (nv >= values[i]) ++nv;
      answer[i] = nv;
      put(2 * K + 2 * j, keys[i]);
      put(2 * K + 2 * j + 1, nv);
    }
    context = 4 * K;
  }
  const std::int64_t space = (T - context) / 2;
  const auto slots = power_law_slots(space, K, s.power_a, seed, stream, kSlotCtr);
  for (std::int64_t i = 0; i < K; ++i) {
    const std::int64_t pos = context + 2 * slots[static_cast<std::size_t>(i)];
    put(pos, keys[static_cast<std::size_t>(i)]);
    lab[pos] = answer[static_cast<std::size_t>(i)];
  }
  for (std::int64_t p = 0; p < T; ++p)
    if (!set[static_cast<std::size_t>(p)])
      in[p] = static_cast<std::int32_t>(
          rng::below(seed, stream, kFillCtr + static_cast<std::uint64_t>(p), static_cast<std::uint64_t>(V)));
}

TokenBatch generate(const TaskSlice& s, std::uint64_t seed, std::int64_t first, std::int64_t count) {
  s.validate();
  require(first >= 0 && count >= 0, "generate: first = {} and count = {} must be >= 0", first, count);
  TokenBatch b;
  b.count = count;
  b.seq_len = s.seq_len;
  b.inputs.resize(static_cast<std::size_t>(count * s.seq_len));
  b.labels.resize(b.inputs.size());
#pragma omp parallel for schedule(static) if (count * s.seq_len > 65536)
  for (std::int64_t e = 0; e < count; ++e)
    generate_example(s, seed, first + e, b.inputs.data() + e * s.seq_len, b.labels.data() + e * s.seq_len);
  return b;
}

std::vector<TaskSlice> mqar_training_mixture(std::int64_t vocab) {
  const std::int64_t spec[5][3] = {{64, 4, 100000}, {128, 8, 20000}, {256, 16, 20000}, {256, 32, 20000}, {256, 64, 20000}};
  std::vector<TaskSlice> out;
  for (const auto& r : spec) {
    TaskSlice s;
    s.seq_len = r[0];
    s.keys = r[1];
    s.examples = r[2];
    s.vocab = vocab;
    out.push_back(s);
  }
  return out;
}

std::vector<TaskSlice> mqar_eval_diagonal(std::int64_t vocab, std::int64_t max_len, std::int64_t examples) {
  std::vector<TaskSlice> out;
  for (std::int64_t T : {512, 1024, 2048, 3072, 4096}) {
    if (T > max_len) break;
    TaskSlice s;
    s.seq_len = T;
    s.keys = T / 4;
    s.examples = examples;
    s.vocab = vocab;
    out.push_back(s);
  }
  return out;
}

namespace {

// Overwrite slices at T = 8K for each K of `keys`.
std::vector<TaskSlice> overwrite_slices(std::initializer_list<std::int64_t> keys, std::int64_t vocab,
                                        std::int64_t examples) {
  std::vector<TaskSlice> out;
  for (std::int64_t K : keys) {
    TaskSlice s;
    s.kind = TaskKind::overwrite;
    s.seq_len = 8 * K;
    s.keys = K;
    s.examples = examples;
    s.vocab = vocab;
    out.push_back(s);
  }
  return out;
}

}  // namespace

std::vector<TaskSlice> overwrite_training_mixture(std::int64_t vocab, std::int64_t examples) {
  return overwrite_slices({4, 8, 16, 32}, vocab, examples);
}

std::vector<TaskSlice> overwrite_eval(std::int64_t vocab, std::int64_t examples) {
  return overwrite_slices({64, 128, 256, 384}, vocab, examples);
}

std::vector<TaskSlice> parse_slices(const std::string& text, TaskKind kind, std::int64_t vocab,
                                    std::int64_t default_examples) {
  require(!text.empty(), "empty slice list: give T:K[:N] items separated by commas, e.g. 64:4,128:8:2000");
  std::vector<TaskSlice> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::vector<std::int64_t> f;
    std::stringstream is(item);
    std::string part;
    while (std::getline(is, part, ':')) {
      std::size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(part, &used);
      } catch (...) {
        used = 0;
      }
      require(!part.empty() && used == part.size() && part.find_first_not_of("0123456789") == std::string::npos,
              "slice '{}': '{}' is not a non-negative integer; write T:K or T:K:N", item, part);
      f.push_back(v);
    }
    require(f.size() == 2 || f.size() == 3, "slice '{}' must look like T:K or T:K:N (length, keys, examples)", item);
    TaskSlice s;
    s.kind = kind;
    s.seq_len = f[0];
    s.keys = f[1];
    s.examples = f.size() == 3 ? f[2] : default_examples;
    s.vocab = vocab;
    require(s.examples >= 1, "slice '{}': the example count must be >= 1", item);
    s.validate();
    out.push_back(s);
  }
  require(!out.empty() && text.back() != ',', "slice list '{}' has an empty item", text);
  return out;
}

}  // namespace memcap::kata

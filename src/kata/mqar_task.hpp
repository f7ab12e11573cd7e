// Synthetic recall tasks of the KATA paper's trained experiments (spec kata.md §4.1–4.3): MQAR
// (Zoology's multiquery_ar), repeated-key overwrite (Zoology's forgetting_mqar with K updates) and
// the induction-head probe. Every example is a pure function of (slice seed, example index): the
// Philox stream is the example index, so any subset of a slice can be generated on its own.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace memcap::kata {

inline constexpr std::int32_t kIgnoreLabel = -100;  // label of an unscored position (PyTorch's ignore_index)

enum class TaskKind { mqar, overwrite, induction };
const char* to_string(TaskKind k);
TaskKind parse_task(const std::string& s);  // mqar | overwrite | induction (UserError otherwise)

// One slice: a task at one (sequence length, number of keys), with its example count.
// MQAR (§4.1): keys from [1, V/2), values from [V/2, V), both distinct within an example; context
//   k_1 v_1 … k_K v_K; query region of (T − 2K)/2 slots (query, filler), K slots drawn by weighted
//   sampling without replacement with weights (j+1)^(power_a − 1); label v_i at the query position of
//   k_i; every other position is a uniform filler from [0, V). Needs T even, 4K <= T < V.
// overwrite (§4.2): as MQAR, then the K keys again in a random order with new values v'_i != v_i
//   (context 4K tokens), query region of (T − 4K)/2 slots; label = the new value. Needs T even,
//   6K <= T < V (the paper's layout is T = 8K).
// induction (§4.3, [D]): content tokens uniform from [0, V−1), trigger V−1 at i ~ U[0, T−3] and at
//   T−1; one label at T−1 = the token after the first trigger. `keys` is unused (1 query). T >= 3.
struct TaskSlice {
  TaskKind kind = TaskKind::mqar;
  std::int64_t seq_len = 64;
  std::int64_t keys = 4;
  std::int64_t vocab = 8192;
  double power_a = 0.01;
  std::int64_t examples = 0;  // examples in the slice (training set size or evaluation count)

  // UserError naming what is wrong (odd T, 4K > T, T >= V, K < 1, vocab too small, power_a <= 0, ...).
  void validate() const;
  std::int64_t queries() const { return kind == TaskKind::induction ? 1 : keys; }  // labels per example
  std::string name() const;  // "T=64,K=4" (induction: "T=64")
};

// Row-major [count, seq_len] inputs and labels (kIgnoreLabel where unscored).
struct TokenBatch {
  std::int64_t count = 0, seq_len = 0;
  std::vector<std::int32_t> inputs, labels;
};

// Example `index` of the slice drawn with `seed`, into inputs[seq_len] and labels[seq_len].
void generate_example(const TaskSlice& s, std::uint64_t seed, std::int64_t index, std::int32_t* inputs,
                      std::int32_t* labels);
// Examples first, first+1, ..., first+count-1 (validates the slice).
TokenBatch generate(const TaskSlice& s, std::uint64_t seed, std::int64_t first, std::int64_t count);

// Query placement of §4.1: `count` distinct slots of [0, space) in draw order, distributed as
// sequential weighted draws without replacement with weights (j+1)^(power_a−1) (exponential-key
// method: the slots with the largest log(u_j)/w_j, in decreasing key order). uniform(j) gives u_j.
template <class Uniform>
std::vector<std::int64_t> power_law_slots(std::int64_t space, std::int64_t count, double power_a, Uniform&& uniform);

// The §4.1 training mixture (Zoology "original MQAR"): (64,4,100k), (128,8,20k), (256,16,20k),
// (256,32,20k), (256,64,20k).
std::vector<TaskSlice> mqar_training_mixture(std::int64_t vocab = 8192);
// The §4.1 evaluation diagonal: K = T/4 for T in {512, 1024, 2048, 3072, 4096} up to max_len.
std::vector<TaskSlice> mqar_eval_diagonal(std::int64_t vocab = 8192, std::int64_t max_len = 4096,
                                          std::int64_t examples = 1000);
// §4.2 [I]: training K in {4, 8, 16, 32} and evaluation K in {64, 128, 256, 384}, both at T = 8K.
std::vector<TaskSlice> overwrite_training_mixture(std::int64_t vocab = 8192, std::int64_t examples = 20000);
std::vector<TaskSlice> overwrite_eval(std::int64_t vocab = 8192, std::int64_t examples = 1000);

// "T:K[:N],T:K[:N],..." -> slices of `kind` (N defaults to default_examples). UserError on bad text.
std::vector<TaskSlice> parse_slices(const std::string& text, TaskKind kind, std::int64_t vocab,
                                    std::int64_t default_examples);

}  // namespace memcap::kata

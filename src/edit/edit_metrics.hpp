// Edit protocol and metrics of the fact-editing experiment (spec hebbian.md §4.9): which facts are
// altered and what they become, which prompt of each fact is its "train" prompt, and efficacy,
// paraphrase, specificity, their harmonic-mean score, non-fact CE and r_NF from per-prompt argmaxes.
#pragma once
#include <cstdint>
#include <vector>

namespace memcap::edit {

// Harmonic mean of the three accuracies (spec §4.9 "score"); 0 when any of them is 0. A NaN entry
// (a metric with no prompt, e.g. specificity at fraction 1) is left out of the mean; all NaN gives NaN.
// UserError for a value outside [0, 1].
double edit_score(double efficacy, double paraphrase, double specificity);

// n_a = round(F·p) facts altered (half away from zero; 16,384 × {2, 5, 10}% = 328, 819, 1638).
// UserError for p outside (0, 1] (NaN included) and when round(F·p) = 0.
std::int64_t altered_count(std::int64_t facts, double fraction);

// The edit of spec §4.9: preserved facts [0, n_p), altered facts [n_p, F); altered fact n_p + j gets the
// author of fact n_p + perm[j], perm a uniformly random permutation of the altered block (Philox stream
// kEditSetStream of `seed`; fixed points possible, as in the reference). Per fact, its K prompts
// (templates) are shuffled (stream kEditPromptStream): prompt_order[f·K + 0] is the fact's train prompt,
// the other K − 1 its held-out paraphrases.
struct EditSet {
  std::int64_t facts = 0, templates = 0, n_altered = 0, n_preserved = 0;
  double fraction = 0;
  std::uint64_t seed = 0;
  std::vector<std::int32_t> target_fact;   // per fact: the fact whose author is its post-edit target
  std::vector<std::int32_t> prompt_order;  // F × K, row-major: template of the fact's j-th prompt
  bool altered(std::int64_t f) const { return f >= n_preserved; }
};
EditSet select_edit_set(std::int64_t facts, std::int64_t templates, double fraction, std::uint64_t seed);

struct EditMetrics {
  double efficacy = 0;        // altered facts, train prompt: argmax == new author
  double paraphrase = 0;      // altered facts, held-out prompts: argmax == new author
  double specificity = 0;     // preserved facts, train prompt: argmax == original author
  double specificity_paraphrase = 0;  // preserved facts, held-out prompts (recorded, unused by the score)
  double score = 0;           // edit_score(efficacy, paraphrase, specificity)
  std::int64_t n_efficacy = 0, n_paraphrase = 0, n_specificity = 0, n_specificity_paraphrase = 0;
};

// Metrics from per-prompt predictions: predicted[f·K + t] = argmax token at the author position of fact
// f in template t (t the template index, not the prompt rank); author_token[f] = fact f's original
// author token. An accuracy over zero prompts is NaN. UserError on size mismatches.
EditMetrics edit_metrics(const EditSet& set, const std::vector<std::int32_t>& predicted,
                         const std::vector<std::int32_t>& author_token);

// r_NF = exp(CE_post − CE_pre) (spec §4.9).
double nonfact_ratio(double ce_pre, double ce_post);

inline constexpr std::uint64_t kEditSetStream = 1000 + 611;     // rng::kUser + 611
inline constexpr std::uint64_t kEditPromptStream = 1000 + 612;  // rng::kUser + 612

}  // namespace memcap::edit

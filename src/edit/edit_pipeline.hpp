// The CPU pipeline of the fact-editing experiment (spec hebbian.md §4.9, §2.7): the fact expert's
// (book → author) embedding map, loading an expert into the §6.4 model, base-model training (AdamW,
// shuffled batches, value-accuracy early stop, best state kept) and the batched evaluation of every
// prompt (argmax at the author position, non-fact CE) that the edit metrics are computed from.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "edit/edit_model.hpp"
#include "mlp/factset.hpp"
#include "mlp/gated_mlp.hpp"
#include "nn/edit_data.hpp"

namespace memcap::edit {

// The expert's fact set (§4.9): keys = L2-normalized book-token embeddings (F × d), values = raw
// author-token embeddings of all F facts (F × d), map[i] = target_fact[i] (identity before an edit).
mlp::FactSet expert_factset(const EditModel& model, const nn::EditCorpus& corpus,
                            const std::vector<std::int32_t>& target_fact);

// Copies a gated MLP (A = U, G, B = D and the biases; missing biases = 0) into the model's frozen
// fact.* tensors. UserError when its width, dimension or gate differ from the model's configuration.
void load_expert(EditModel& model, const mlp::GatedMLP& mlp);

// Standalone expert accuracy: argmax_j <MLP(k_i), v_j> over the F author embeddings == map[i].
double expert_accuracy(const mlp::GatedMLP& mlp, const mlp::FactSet& fs);

// Every prompt of `seqs` (packed with EditLabels::all) through the model in batches of `batch`
// sequences: predicted[s] = argmax over the full vocabulary at the author position (length[s] − 1);
// value_accuracy = share of sequences where it equals the label there; non-fact CE = the CE summed
// over every other trained position divided by their count (spec §4.9). The same CE split by where the row lies
// relative to the book token (nn::NonfactClass: prefix, book, tail; index = the enum's value): per class the mean
// CE (NaN without rows) and the row count, so nonfact_ce = Σ_c tokens_c · ce_c / nonfact_tokens. Sequences
// without book_pos give no split (every class NaN / 0).
struct PromptEval {
  std::vector<std::int32_t> predicted;
  double value_accuracy = 0;
  double nonfact_ce = 0;
  std::int64_t nonfact_tokens = 0;
  std::array<double, nn::kNonfactClasses> nonfact_ce_class{};
  std::array<std::int64_t, nn::kNonfactClasses> nonfact_tokens_class{};
  double wall_s = 0;
};
PromptEval evaluate_prompts(const EditModel& model, const nn::EditSequences& seqs, std::int64_t batch = 256);

// The rows an evaluation needs, each computed once (the GPU evaluation's plan). The model is causal with
// absolute positions, so a row's logits depend only on the tokens up to it: rows of different prompts with
// the same token prefix (the template words before {book}) and the same label have the same CE. Needed rows
// are the non-fact rows (t < length − 1, label not ignored) and the last row of every sequence. Distinct
// rows are keyed by (prefix, label) and represented by their first occurrence, in row order; batches of
// `batch` sequences run them as they come: batch k holds distinct rows [batch_begin[k], batch_begin[k+1]).
struct PromptRowPlan {
  std::int64_t S = 0, T = 0, batch = 1;
  std::vector<std::int64_t> row;          // global row s·T + t of each distinct row (increasing)
  std::vector<std::int32_t> target;       // its label (the ignore label where a last row has none)
  std::vector<std::int64_t> weight;       // non-fact rows it stands for (0: only a last row)
  std::vector<std::int8_t> cls;           // its nn::NonfactClass (−1: only a last row, or no book_pos)
  std::vector<std::int64_t> last;         // per sequence: the distinct row of its last position
  std::vector<std::int64_t> batch_begin;  // per batch of sequences, size batches + 1
  std::int64_t nonfact_tokens = 0;        // Σ weight
  // Optional (row_map = true): per global row, its distinct row (−1 where not needed). Tests only.
  std::vector<std::int64_t> of_row;
};
PromptRowPlan plan_prompt_rows(const nn::EditSequences& seqs, std::int64_t batch, bool row_map = false);
// PromptEval from the losses and argmax of the plan's distinct rows (wall_s left 0): value accuracy and
// predictions at the last rows, non-fact CE = Σ weight · loss / Σ weight.
template <class L>
PromptEval reduce_prompt_rows(const PromptRowPlan& plan, const L* loss, const std::int32_t* argmax);

struct BaseTrainConfig {
  std::int64_t epochs = 18;        // at most
  std::int64_t batch = 32;
  double lr = 2e-4, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double target_accuracy = 0.99;   // early stop once an epoch's value accuracy reaches it
  std::uint64_t seed = 10042;      // batch order (the model's init is EditModel::init's)
  std::int64_t eval_batch = 256;
  // Called after every step with (steps done, steps per epoch, epoch, that step's loss); may throw.
  std::function<void(std::int64_t, std::int64_t, std::int64_t, double)> on_step;
  void validate() const;           // UserError naming the flag
};

struct BaseTrainResult {
  std::vector<double> epoch_loss;       // mean training loss of each epoch's steps
  std::vector<double> epoch_value_acc;  // value accuracy after each epoch (all prompts)
  std::vector<double> epoch_nonfact_ce; // non-fact CE after each epoch
  double best_value_acc = -1;
  std::int64_t best_epoch = 0;          // 1-based epoch whose state is kept
  std::int64_t epochs_run = 0, steps_run = 0;
  bool stopped_early = false;
  double train_s = 0, eval_s = 0;
  // Appends epoch `epoch` (0-based): its mean loss and evaluation (eval_s included). Returns true when its
  // value accuracy is the best so far (best_* updated; the caller keeps that state).
  bool record_epoch(std::int64_t epoch, double mean_loss, const PromptEval& ev);
};

// AdamW (PyTorch semantics) with weight decay on every ≥ 2-D trainable tensor, shuffled batches
// (a fresh permutation of the S sequences per epoch, stream kEditShuffleStream), value accuracy after
// every epoch; the model ends with the best-value-accuracy parameters. NumericError on a non-finite
// loss, naming the epoch and step.
BaseTrainResult train_base(EditModel& model, const nn::EditSequences& seqs, const BaseTrainConfig& cfg);

inline constexpr std::uint64_t kEditShuffleStream = 1000 + 610;  // rng::kUser + 610

// 64-bit FNV-1a over the vocabulary strings (each followed by a 0 byte): a base file trained on another
// vocabulary is refused by comparing it.
std::uint64_t vocab_fingerprint(const nn::EditCorpus& corpus);
// 64-bit FNV-1a over the sorted (book token, author token) pairs and the sorted templates' token lists: the same
// vocabulary with other book -> author pairs, or other sentences, gives another value; the order of the rows or
// of the templates does not count (the base model learned the same map from them).
std::uint64_t facts_fingerprint(const nn::EditCorpus& corpus);
// UserError (exit 2) unless `corpus` (read from `data`) is what the base model in `base_path` was trained on: the
// vocabulary (size and vocab_fingerprint) and, for base files that record it, facts_fingerprint.
struct BaseModelFile;
void check_base_corpus(const BaseModelFile& base, const std::string& base_path, const nn::EditCorpus& corpus,
                       const std::string& data);

}  // namespace memcap::edit

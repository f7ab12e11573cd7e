// Fact-editing CPU pipeline (edit/edit_pipeline.hpp): expert fact set and loading, batched prompt
// evaluation, base-model training with AdamW and value-accuracy early stopping.
#include "edit/edit_pipeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/timing.hpp"
#include "edit/edit_io.hpp"
#include "margin/margins.hpp"
#include "nn/layers.hpp"
#include "nn/tied_ce.hpp"

namespace memcap::edit {

namespace {
const char* gate_name(nn::Activation a) {
  switch (a) {
    case nn::Activation::identity: return "identity";
    case nn::Activation::relu: return "relu";
    case nn::Activation::silu: return "silu";
  }
  return "?";
}
}  // namespace

mlp::FactSet expert_factset(const EditModel& model, const nn::EditCorpus& corpus,
                            const std::vector<std::int32_t>& target_fact) {
  const std::int64_t F = corpus.num_facts(), d = model.config().d;
  require(static_cast<std::int64_t>(target_fact.size()) == F, "edit: {} targets for {} facts", target_fact.size(), F);
  require(corpus.vocab_size() == model.config().vocab, "edit: corpus vocabulary {} != model vocabulary {}",
          corpus.vocab_size(), model.config().vocab);
  const double* E = model.frozen().param("embed.E");
  mlp::FactSet fs;
  fs.keys.resize(F, d);
  fs.values.resize(F, d);
  fs.map.resize(F);
  for (std::int64_t i = 0; i < F; ++i) {
    const double* b = E + static_cast<std::int64_t>(corpus.book_token[static_cast<std::size_t>(i)]) * d;
    const double* a = E + static_cast<std::int64_t>(corpus.author_token[static_cast<std::size_t>(i)]) * d;
    double n2 = 0;
    for (std::int64_t j = 0; j < d; ++j) n2 += b[j] * b[j];
    require(n2 > 0, "edit: the embedding of the book of fact {} is zero; cannot normalize it", i);
    const double inv = 1.0 / std::sqrt(n2);
    for (std::int64_t j = 0; j < d; ++j) {
      fs.keys(i, j) = b[j] * inv;
      fs.values(i, j) = a[j];
    }
    const std::int32_t t = target_fact[static_cast<std::size_t>(i)];
    require(t >= 0 && t < F, "edit: target fact {} of fact {} is outside [0, {})", t, i, F);
    fs.map(i) = t;
  }
  fs.codes = fs.values;
  fs.tied = false;
  fs.source = "edit";
  return fs;
}

void load_expert(EditModel& model, const mlp::GatedMLP& m) {
  const auto& c = model.config();
  require(m.width() == c.fact_hidden && m.dim() == c.d && m.B.rows() == c.d,
          "edit: the fact expert is {} wide on d = {}; the model needs h = {}, d = {}", m.width(), m.dim(),
          c.fact_hidden, c.d);
  require(m.gate == gate_name(c.fact_gate), "edit: the fact expert's gate is {}; the model's is {}", m.gate,
          gate_name(c.fact_gate));
  auto& fr = model.frozen();
  const std::int64_t h = c.fact_hidden, d = c.d;
  double* U = fr.param("fact.U");
  double* G = fr.param("fact.G");
  double* D = fr.param("fact.D");
  for (std::int64_t r = 0; r < h; ++r)
    for (std::int64_t j = 0; j < d; ++j) {
      U[r * d + j] = m.A(r, j);
      G[r * d + j] = m.G(r, j);
      D[j * h + r] = m.B(j, r);
    }
  auto copy_bias = [&](const char* name, const Eigen::VectorXd& b, std::int64_t n) {
    double* p = fr.param(name);
    for (std::int64_t i = 0; i < n; ++i) p[i] = b.size() ? b(i) : 0.0;
  };
  copy_bias("fact.bU", m.bias_up, h);
  copy_bias("fact.bG", m.bias_gate, h);
  copy_bias("fact.bD", m.bias_out, d);
}

double expert_accuracy(const mlp::GatedMLP& m, const mlp::FactSet& fs) {
  return margin::margins_from_outputs(m.forward(fs.keys), fs.values, fs.map, margin::MarginConvention::raw_output)
      .accuracy;
}

namespace {
// nonfact_ce_class from the per-class CE sums and r.nonfact_tokens_class (NaN for a class without rows).
void set_class_means(PromptEval& r, const std::array<double, nn::kNonfactClasses>& sums) {
  for (std::size_t c = 0; c < sums.size(); ++c)
    r.nonfact_ce_class[c] = r.nonfact_tokens_class[c] > 0 ? sums[c] / static_cast<double>(r.nonfact_tokens_class[c])
                                                          : std::numeric_limits<double>::quiet_NaN();
}
}  // namespace

PromptEval evaluate_prompts(const EditModel& model, const nn::EditSequences& seqs, std::int64_t batch) {
  require(batch >= 1, "edit: evaluation batch {} must be positive", batch);
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t S = seqs.S, T = seqs.T;
  PromptEval r;
  r.predicted.assign(static_cast<std::size_t>(S), -1);
  EditActs acts;
  std::int64_t correct = 0;
  double ce_sum = 0;
  const bool split = static_cast<std::int64_t>(seqs.book_pos.size()) == S;
  std::array<double, nn::kNonfactClasses> ce_cls{};
  for (std::int64_t s0 = 0; s0 < S; s0 += batch) {
    const std::int64_t B = std::min(batch, S - s0);
    const std::int32_t* tok = seqs.input_ids.data() + s0 * T;
    const std::int32_t* lab = seqs.labels.data() + s0 * T;
    model.forward(acts, tok, lab, B, T);
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t s = s0 + b, last = seqs.length[static_cast<std::size_t>(s)] - 1;
      const std::int64_t row = b * T + last;
      const std::int32_t pred = acts.argmax[static_cast<std::size_t>(row)];
      r.predicted[static_cast<std::size_t>(s)] = pred;
      correct += pred == lab[row];
      for (std::int64_t t = 0; t < last; ++t)
        if (lab[b * T + t] != nn::kIgnoreLabel) {
          const double l = acts.losses[static_cast<std::size_t>(b * T + t)];
          ce_sum += l;
          ++r.nonfact_tokens;
          if (split) {
            const auto c = static_cast<std::size_t>(nn::nonfact_class(t, seqs.book_pos[static_cast<std::size_t>(s)]));
            ce_cls[c] += l;
            ++r.nonfact_tokens_class[c];
          }
        }
    }
  }
  r.value_accuracy = S > 0 ? static_cast<double>(correct) / static_cast<double>(S) : 0.0;
  r.nonfact_ce = r.nonfact_tokens > 0 ? ce_sum / static_cast<double>(r.nonfact_tokens) : 0.0;
  set_class_means(r, ce_cls);
  r.wall_s = seconds_since(t0);
  return r;
}

PromptRowPlan plan_prompt_rows(const nn::EditSequences& seqs, std::int64_t batch, bool row_map) {
  require(batch >= 1, "edit: evaluation batch {} must be positive", batch);
  const std::int64_t S = seqs.S, T = seqs.T;
  require(S >= 0 && T >= 1 && static_cast<std::int64_t>(seqs.input_ids.size()) == S * T &&
              static_cast<std::int64_t>(seqs.labels.size()) == S * T &&
              static_cast<std::int64_t>(seqs.length.size()) == S,
          "edit: the packed sequences are inconsistent ({} x {})", S, T);
  PromptRowPlan p;
  p.S = S;
  p.T = T;
  p.batch = batch;
  p.last.assign(static_cast<std::size_t>(S), -1);
  if (row_map) p.of_row.assign(static_cast<std::size_t>(S * T), -1);
  const bool split = static_cast<std::int64_t>(seqs.book_pos.size()) == S;
  // token ids and labels shifted to be non-negative (padding / ignore = −100 -> 0) for the keys
  std::int64_t span = 1;
  for (const std::int32_t v : seqs.input_ids) span = std::max<std::int64_t>(span, static_cast<std::int64_t>(v) + 102);
  for (const std::int32_t v : seqs.labels) span = std::max<std::int64_t>(span, static_cast<std::int64_t>(v) + 102);
  auto shifted = [](std::int32_t v) { return static_cast<std::uint64_t>(std::max<std::int64_t>(v + 101, 0)); };
  // prefix trie: node(parent, token); node 0 is the empty prefix
  std::unordered_map<std::uint64_t, std::int64_t> child, distinct;
  child.reserve(static_cast<std::size_t>(S * T));
  distinct.reserve(static_cast<std::size_t>(S * T));
  const std::int64_t batches = S == 0 ? 0 : (S + batch - 1) / batch;
  p.batch_begin.assign(static_cast<std::size_t>(batches + 1), 0);
  for (std::int64_t s = 0; s < S; ++s) {
    if (s % batch == 0) p.batch_begin[static_cast<std::size_t>(s / batch)] = static_cast<std::int64_t>(p.row.size());
    const std::int64_t len = seqs.length[static_cast<std::size_t>(s)];
    require(len >= 1 && len <= T, "edit: sequence {} has length {} outside [1, {}]", s, len, T);
    std::uint64_t node = 0;
    for (std::int64_t t = 0; t < len; ++t) {
      const std::int64_t g = s * T + t;
      const std::int32_t lab = seqs.labels[static_cast<std::size_t>(g)];
      const std::uint64_t key = node * static_cast<std::uint64_t>(span) + shifted(seqs.input_ids[static_cast<std::size_t>(g)]);
      const auto [it, fresh] = child.try_emplace(key, static_cast<std::int64_t>(child.size()) + 1);
      node = static_cast<std::uint64_t>(it->second);
      const bool is_last = t == len - 1, nonfact = !is_last && lab != nn::kIgnoreLabel;
      if (!is_last && !nonfact) continue;
      const std::uint64_t rkey = node * static_cast<std::uint64_t>(span) + shifted(lab);
      const auto [rt, new_row] = distinct.try_emplace(rkey, static_cast<std::int64_t>(p.row.size()));
      const std::int64_t u = rt->second;
      if (new_row) {
        p.row.push_back(g);
        p.target.push_back(lab);
        p.weight.push_back(0);
        p.cls.push_back(-1);
      }
      // the class of a non-fact row: the same for every row it stands for (same prefix and label, so the book
      // token is in the prefix, is the label, or neither, for all of them)
      if (nonfact && split)
        p.cls[static_cast<std::size_t>(u)] =
            static_cast<std::int8_t>(nn::nonfact_class(t, seqs.book_pos[static_cast<std::size_t>(s)]));
      if (nonfact) {
        ++p.weight[static_cast<std::size_t>(u)];
        ++p.nonfact_tokens;
      }
      if (is_last) p.last[static_cast<std::size_t>(s)] = u;
      if (row_map) p.of_row[static_cast<std::size_t>(g)] = u;
    }
  }
  p.batch_begin[static_cast<std::size_t>(batches)] = static_cast<std::int64_t>(p.row.size());
  return p;
}

template <class L>
PromptEval reduce_prompt_rows(const PromptRowPlan& plan, const L* loss, const std::int32_t* argmax) {
  PromptEval r;
  const std::int64_t S = plan.S;
  r.predicted.assign(static_cast<std::size_t>(S), -1);
  std::int64_t correct = 0;
  for (std::int64_t s = 0; s < S; ++s) {
    const std::int64_t u = plan.last[static_cast<std::size_t>(s)];
    const std::int32_t pred = argmax[u];
    r.predicted[static_cast<std::size_t>(s)] = pred;
    correct += pred == plan.target[static_cast<std::size_t>(u)];
  }
  double ce_sum = 0;
  std::array<double, nn::kNonfactClasses> ce_cls{};
  // a plan assembled by hand may leave cls empty: no split then
  const bool split = plan.cls.size() == plan.row.size();
  for (std::size_t u = 0; u < plan.row.size(); ++u)
    if (plan.weight[u] > 0) {
      const double wl = static_cast<double>(plan.weight[u]) * static_cast<double>(loss[u]);
      ce_sum += wl;
      if (split && plan.cls[u] >= 0) {
        ce_cls[static_cast<std::size_t>(plan.cls[u])] += wl;
        r.nonfact_tokens_class[static_cast<std::size_t>(plan.cls[u])] += plan.weight[u];
      }
    }
  r.nonfact_tokens = plan.nonfact_tokens;
  r.value_accuracy = S > 0 ? static_cast<double>(correct) / static_cast<double>(S) : 0.0;
  r.nonfact_ce = r.nonfact_tokens > 0 ? ce_sum / static_cast<double>(r.nonfact_tokens) : 0.0;
  set_class_means(r, ce_cls);
  return r;
}
template PromptEval reduce_prompt_rows<float>(const PromptRowPlan&, const float*, const std::int32_t*);
template PromptEval reduce_prompt_rows<double>(const PromptRowPlan&, const double*, const std::int32_t*);

bool BaseTrainResult::record_epoch(std::int64_t epoch, double mean_loss, const PromptEval& ev) {
  eval_s += ev.wall_s;
  epoch_loss.push_back(mean_loss);
  epoch_value_acc.push_back(ev.value_accuracy);
  epoch_nonfact_ce.push_back(ev.nonfact_ce);
  epochs_run = epoch + 1;
  if (ev.value_accuracy <= best_value_acc) return false;
  best_value_acc = ev.value_accuracy;
  best_epoch = epoch + 1;
  return true;
}

void BaseTrainConfig::validate() const {
  require(epochs >= 1, "--epochs must be >= 1 (got {})", epochs);
  require(batch >= 1, "--batch must be >= 1 (got {})", batch);
  require(std::isfinite(lr) && lr > 0, "--lr must be a positive number (got {})", lr);
  require(std::isfinite(weight_decay) && weight_decay >= 0, "--weight-decay must be >= 0 (got {})", weight_decay);
  require(std::isfinite(target_accuracy) && target_accuracy > 0 && target_accuracy <= 1,
          "--target-accuracy must be in (0, 1] (got {})", target_accuracy);
  require(eval_batch >= 1, "evaluation batch must be >= 1 (got {})", eval_batch);
}

BaseTrainResult train_base(EditModel& model, const nn::EditSequences& seqs, const BaseTrainConfig& cfg) {
  cfg.validate();
  require(seqs.S >= 1, "edit: no training sequences");
  const std::int64_t S = seqs.S, T = seqs.T, Bmax = std::min(cfg.batch, S);
  const std::int64_t steps_per_epoch = (S + Bmax - 1) / Bmax;
  auto& P = model.trainable();
  BaseTrainResult res;
  std::vector<double> best = P.params;
  EditActs acts;
  std::vector<std::int32_t> tok(static_cast<std::size_t>(Bmax * T)), lab(static_cast<std::size_t>(Bmax * T));
  std::int64_t t = 0;  // Adam step
  for (std::int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    const Eigen::VectorXi perm =
        rng::permutation(S, cfg.seed, kEditShuffleStream + (static_cast<std::uint64_t>(epoch) << 32));
    double loss_sum = 0;
    for (std::int64_t step = 0; step < steps_per_epoch; ++step) {
      const std::int64_t s0 = step * Bmax, B = std::min(Bmax, S - s0);
      for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t s = perm(s0 + b);
        std::copy_n(seqs.input_ids.data() + s * T, T, tok.data() + b * T);
        std::copy_n(seqs.labels.data() + s * T, T, lab.data() + b * T);
      }
      const double loss = model.forward(acts, tok.data(), lab.data(), B, T);
      if (!std::isfinite(loss))
        throw NumericError(fmt::format("edit base: non-finite loss {} at epoch {}, step {}; lower --lr", loss,
                                       epoch + 1, step + 1));
      P.zero_grads();
      model.backward(acts, lab.data());
      ++t;
      for (const auto& v : P.layout.views()) {
        const double wd = v.shape.size() >= 2 ? cfg.weight_decay : 0.0;
        nn::cpu::adam_update(P.params.data() + v.offset, P.grads.data() + v.offset, P.m.data() + v.offset,
                             P.v.data() + v.offset, v.numel, cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, wd, t, true);
      }
      loss_sum += loss;
      ++res.steps_run;
      if (cfg.on_step) cfg.on_step(res.steps_run, steps_per_epoch, epoch + 1, loss);
    }
    res.train_s += seconds_since(t0);
    const PromptEval ev = evaluate_prompts(model, seqs, cfg.eval_batch);
    if (res.record_epoch(epoch, loss_sum / static_cast<double>(steps_per_epoch), ev)) best = P.params;
    if (ev.value_accuracy >= cfg.target_accuracy) {
      res.stopped_early = epoch + 1 < cfg.epochs;
      break;
    }
  }
  P.params = best;
  return res;
}

namespace {
struct Fnv {
  std::uint64_t h = 14695981039346656037ull;
  void byte(unsigned char c) {
    h ^= c;
    h *= 1099511628211ull;
  }
  void i32(std::int32_t v) {
    for (int b = 0; b < 4; ++b) byte(static_cast<unsigned char>((static_cast<std::uint32_t>(v) >> (8 * b)) & 255u));
  }
};
}  // namespace

std::uint64_t facts_fingerprint(const nn::EditCorpus& corpus) {
  std::vector<std::pair<std::int32_t, std::int32_t>> pairs;
  for (std::size_t i = 0; i < corpus.book_token.size(); ++i)
    pairs.emplace_back(corpus.book_token[i], corpus.author_token[i]);
  std::sort(pairs.begin(), pairs.end());
  std::vector<std::vector<std::int32_t>> templates = corpus.template_tokens;
  std::sort(templates.begin(), templates.end());
  Fnv f;
  for (const auto& [book, author] : pairs) {
    f.i32(book);
    f.i32(author);
  }
  for (const auto& t : templates) {
    f.i32(static_cast<std::int32_t>(t.size()));
    for (const std::int32_t id : t) f.i32(id);
  }
  return f.h;
}

void check_base_corpus(const BaseModelFile& base, const std::string& base_path, const nn::EditCorpus& corpus,
                       const std::string& data) {
  const std::uint64_t fp = vocab_fingerprint(corpus);
  if (fp != base.info.vocab_fingerprint || corpus.vocab_size() != base.config.vocab)
    throw UserError(fmt::format("--base '{}' was trained on another vocabulary ({} tokens, fingerprint {:016x}) than "
                                "'{}' gives for its {} facts x {} templates ({} tokens, {:016x}); retrain it with hebb "
                                "edit base on this data",
                                base_path, base.config.vocab, base.info.vocab_fingerprint, data, base.info.facts,
                                base.info.templates, corpus.vocab_size(), fp));
  const std::uint64_t ff = facts_fingerprint(corpus);
  if (base.info.facts_fingerprint && ff != *base.info.facts_fingerprint)
    throw UserError(fmt::format("--base '{}' was trained on other facts than '{}' gives for its {} facts x {} "
                                "templates: the same vocabulary, but other book -> author pairs or other template "
                                "sentences (facts fingerprint {:016x}, the data's {:016x}); retrain it with hebb edit "
                                "base on this data",
                                base_path, data, base.info.facts, base.info.templates, *base.info.facts_fingerprint,
                                ff));
}

std::uint64_t vocab_fingerprint(const nn::EditCorpus& corpus) {
  Fnv f;
  for (const auto& s : corpus.vocab) {
    for (const unsigned char c : s) f.byte(c);
    f.byte(0);
  }
  return f.h;
}

}  // namespace memcap::edit

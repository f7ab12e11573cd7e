// Edit set selection and edit metrics (edit/edit_metrics.hpp, spec hebbian.md §4.9).
#include "edit/edit_metrics.hpp"

#include <cmath>
#include <limits>
#include <utility>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"

namespace memcap::edit {

double edit_score(double efficacy, double paraphrase, double specificity) {
  double inv = 0;
  int n = 0;
  for (const double x : {efficacy, paraphrase, specificity}) {
    if (std::isnan(x)) continue;
    require(x >= 0 && x <= 1, "edit score: accuracy {} is outside [0, 1]", x);
    if (x == 0) return 0.0;
    inv += 1.0 / x;
    ++n;
  }
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(n) / inv;
}

std::int64_t altered_count(std::int64_t facts, double fraction) {
  require(facts >= 1, "edit: {} facts; need at least 1", facts);
  require(std::isfinite(fraction) && fraction > 0 && fraction <= 1,
          "--fraction {} must be in (0, 1] (the share of facts to edit, e.g. 0.1)", fraction);
  const std::int64_t n = std::llround(static_cast<double>(facts) * fraction);
  require(n >= 1, "--fraction {} edits round({} x {}) = 0 facts; raise the fraction or the number of facts", fraction,
          facts, fraction);
  return std::min(n, facts);
}

EditSet select_edit_set(std::int64_t facts, std::int64_t templates, double fraction, std::uint64_t seed) {
  require(templates >= 1, "edit: {} templates; need at least 1", templates);
  EditSet s;
  s.facts = facts;
  s.templates = templates;
  s.fraction = fraction;
  s.seed = seed;
  s.n_altered = altered_count(facts, fraction);
  s.n_preserved = facts - s.n_altered;
  s.target_fact.resize(static_cast<std::size_t>(facts));
  for (std::int64_t f = 0; f < s.n_preserved; ++f) s.target_fact[static_cast<std::size_t>(f)] = static_cast<std::int32_t>(f);
  const Eigen::VectorXi perm = rng::permutation(s.n_altered, seed, kEditSetStream);
  for (std::int64_t j = 0; j < s.n_altered; ++j)
    s.target_fact[static_cast<std::size_t>(s.n_preserved + j)] = static_cast<std::int32_t>(s.n_preserved + perm(j));
  s.prompt_order.resize(static_cast<std::size_t>(facts * templates));
  for (std::int64_t f = 0; f < facts; ++f) {
    // Fisher-Yates over the fact's K prompts, counters f·K + j of stream kEditPromptStream
    std::int32_t* p = s.prompt_order.data() + f * templates;
    for (std::int64_t j = 0; j < templates; ++j) p[j] = static_cast<std::int32_t>(j);
    for (std::int64_t j = templates - 1; j > 0; --j) {
      const auto r = static_cast<std::int64_t>(rng::below(seed, kEditPromptStream, static_cast<std::uint64_t>(f * templates + j),
                                                          static_cast<std::uint64_t>(j + 1)));
      std::swap(p[j], p[r]);
    }
  }
  return s;
}

EditMetrics edit_metrics(const EditSet& set, const std::vector<std::int32_t>& predicted,
                         const std::vector<std::int32_t>& author_token) {
  const std::int64_t F = set.facts, K = set.templates;
  require(static_cast<std::int64_t>(predicted.size()) == F * K,
          "edit metrics: {} predictions for {} facts x {} templates", predicted.size(), F, K);
  require(static_cast<std::int64_t>(author_token.size()) == F, "edit metrics: {} author tokens for {} facts",
          author_token.size(), F);
  std::int64_t c_eff = 0, c_para = 0, c_spec = 0, c_specp = 0;
  EditMetrics m;
  for (std::int64_t f = 0; f < F; ++f) {
    const bool alt = set.altered(f);
    const std::int32_t want = alt ? author_token[static_cast<std::size_t>(set.target_fact[static_cast<std::size_t>(f)])]
                                  : author_token[static_cast<std::size_t>(f)];
    for (std::int64_t j = 0; j < K; ++j) {
      const std::int32_t t = set.prompt_order[static_cast<std::size_t>(f * K + j)];
      const bool ok = predicted[static_cast<std::size_t>(f * K + t)] == want;
      if (alt && j == 0) {
        ++m.n_efficacy;
        c_eff += ok;
      } else if (alt) {
        ++m.n_paraphrase;
        c_para += ok;
      } else if (j == 0) {
        ++m.n_specificity;
        c_spec += ok;
      } else {
        ++m.n_specificity_paraphrase;
        c_specp += ok;
      }
    }
  }
  const auto acc = [](std::int64_t c, std::int64_t n) {
    return n > 0 ? static_cast<double>(c) / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN();
  };
  m.efficacy = acc(c_eff, m.n_efficacy);
  m.paraphrase = acc(c_para, m.n_paraphrase);
  m.specificity = acc(c_spec, m.n_specificity);
  m.specificity_paraphrase = acc(c_specp, m.n_specificity_paraphrase);
  m.score = edit_score(m.efficacy, m.paraphrase, m.specificity);
  return m;
}

double nonfact_ratio(double ce_pre, double ce_post) { return std::exp(ce_post - ce_pre); }

}  // namespace memcap::edit

// Edit protocol and metrics of hebbian.md §4.9 (edit/edit_metrics.hpp): the harmonic-mean score, the
// altered-fact count, the edit set (which facts, which new authors, which train prompt), the metrics
// from per-prompt predictions, r_NF; the batched prompt evaluation against per-sequence forwards; the row
// plan of the GPU evaluation (shared prefixes once, its reduction = evaluate_prompts); the
// local editors' closed forms (MEMIT, AlphaEdit, ROME) against their defining identities.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "core/error.hpp"
#include "edit/edit_local.hpp"
#include "edit/edit_metrics.hpp"
#include "edit/edit_pipeline.hpp"

using namespace memcap;
using namespace memcap::edit;

namespace {

// A tiny corpus packed with every position labelled, and the §6.4 model (width d, Q/K hidden qk, rank 2,
// expert width 5) on its vocabulary.
struct TinyEval {
  nn::EditCorpus corpus;
  nn::EditSequences seqs;
  EditModel model;
};
TinyEval tiny_eval(const std::vector<nn::AuthorFact>& facts, const std::vector<std::string>& templates,
                   std::uint64_t seed, std::int64_t d = 8, std::int64_t qk = 6) {
  nn::EditCorpus corpus = nn::build_edit_corpus(facts, templates);
  nn::EditSequences seqs = nn::pack_edit_sequences(corpus, nn::EditLabels::all);
  EditModelConfig cfg;
  cfg.d = d;
  cfg.vocab = corpus.vocab_size();
  cfg.qk_hidden = qk;
  cfg.rank = 2;
  cfg.fact_hidden = 5;
  EditModel model(cfg);
  model.init(seed);
  return TinyEval{std::move(corpus), std::move(seqs), std::move(model)};
}

}  // namespace

TEST_CASE("edit score: harmonic mean of efficacy, paraphrase and specificity") {
  CHECK(edit_score(1, 1, 1) == 1.0);
  CHECK(edit_score(0, 1, 1) == 0.0);
  CHECK(edit_score(1, 0, 1) == 0.0);
  CHECK(edit_score(1, 1, 0) == 0.0);
  CHECK(edit_score(0.5, 0.5, 0.5) == doctest::Approx(0.5).epsilon(1e-15));
  // 3 / (1/0.5 + 1/1 + 1/0.25) = 3/7
  CHECK(edit_score(0.5, 1.0, 0.25) == doctest::Approx(3.0 / 7.0).epsilon(1e-15));
  // Table 1, AlphaEdit @10%: 0.482 / 0.482 / 0.766 -> 0.550
  CHECK(edit_score(0.482, 0.482, 0.766) == doctest::Approx(0.550).epsilon(1e-3));
  // an undefined metric (no prompt) is left out; all undefined is NaN
  const double nan = std::nan("");
  CHECK(edit_score(0.5, 1.0, nan) == doctest::Approx(2.0 / 3.0).epsilon(1e-15));
  CHECK(std::isnan(edit_score(nan, nan, nan)));
  CHECK_THROWS_AS(edit_score(1.5, 1, 1), UserError);
  CHECK_THROWS_AS(edit_score(-0.1, 1, 1), UserError);
}

TEST_CASE("altered count: round(F p) of §4.9, bad fractions refused") {
  CHECK(altered_count(16384, 0.02) == 328);
  CHECK(altered_count(16384, 0.05) == 819);
  CHECK(altered_count(16384, 0.10) == 1638);
  CHECK(altered_count(256, 0.1) == 26);
  CHECK(altered_count(256, 1.0) == 256);
  for (const double p : {0.0, -0.1, 1.0000001, 2.0, std::nan(""), static_cast<double>(INFINITY)}) CHECK_THROWS_AS(altered_count(256, p), UserError);
  CHECK_THROWS_AS(altered_count(10, 0.01), UserError);  // round(0.1) = 0 facts
  CHECK_THROWS_AS(altered_count(0, 0.5), UserError);
}

TEST_CASE("edit set: preserved prefix, permuted altered block, shuffled prompts, deterministic") {
  const std::int64_t F = 200, K = 7;
  const EditSet s = select_edit_set(F, K, 0.1, 42);
  CHECK(s.n_altered == 20);
  CHECK(s.n_preserved == 180);
  for (std::int64_t f = 0; f < 180; ++f) CHECK(s.target_fact[static_cast<std::size_t>(f)] == f);
  std::set<std::int32_t> targets;
  for (std::int64_t f = 180; f < F; ++f) {
    const std::int32_t t = s.target_fact[static_cast<std::size_t>(f)];
    CHECK(t >= 180);
    CHECK(t < F);
    targets.insert(t);
  }
  CHECK(targets.size() == 20);  // a permutation of the altered block
  std::int64_t moved = 0;
  for (std::int64_t f = 180; f < F; ++f) moved += s.target_fact[static_cast<std::size_t>(f)] != f;
  CHECK(moved >= 10);  // a random permutation of 20 has ~1 fixed point; >= 10 moved with overwhelming odds
  std::int64_t first_differs = 0;
  for (std::int64_t f = 0; f < F; ++f) {
    std::vector<std::int32_t> p(s.prompt_order.begin() + f * K, s.prompt_order.begin() + (f + 1) * K);
    first_differs += p[0] != 0;
    std::sort(p.begin(), p.end());
    for (std::int64_t j = 0; j < K; ++j) CHECK(p[static_cast<std::size_t>(j)] == j);
  }
  // the train prompt is uniform over K: P(template 0) = 1/7, so about 171 of 200 facts start elsewhere
  CHECK(first_differs > 120);
  const EditSet again = select_edit_set(F, K, 0.1, 42);
  CHECK(again.target_fact == s.target_fact);
  CHECK(again.prompt_order == s.prompt_order);
  const EditSet other = select_edit_set(F, K, 0.1, 43);
  CHECK(other.prompt_order != s.prompt_order);
  CHECK(other.target_fact != s.target_fact);
  // the full edit: nothing preserved
  const EditSet all = select_edit_set(10, 2, 1.0, 1);
  CHECK(all.n_preserved == 0);
  CHECK(all.n_altered == 10);
}

TEST_CASE("edit metrics from predictions: perfect edit, unedited model, one wrong paraphrase") {
  const std::int64_t F = 10, K = 3;
  const EditSet s = select_edit_set(F, K, 0.3, 7);  // facts 7, 8, 9 altered
  REQUIRE(s.n_altered == 3);
  std::vector<std::int32_t> author(static_cast<std::size_t>(F));
  for (std::int64_t f = 0; f < F; ++f) author[static_cast<std::size_t>(f)] = static_cast<std::int32_t>(100 + f);
  // a perfect edit: every prompt gives the post-edit target
  std::vector<std::int32_t> pred(static_cast<std::size_t>(F * K));
  for (std::int64_t f = 0; f < F; ++f)
    for (std::int64_t t = 0; t < K; ++t)
      pred[static_cast<std::size_t>(f * K + t)] = author[static_cast<std::size_t>(s.target_fact[static_cast<std::size_t>(f)])];
  EditMetrics m = edit_metrics(s, pred, author);
  CHECK(m.efficacy == 1.0);
  CHECK(m.paraphrase == 1.0);
  CHECK(m.specificity == 1.0);
  CHECK(m.specificity_paraphrase == 1.0);
  CHECK(m.score == 1.0);
  CHECK(m.n_efficacy == 3);
  CHECK(m.n_paraphrase == 6);
  CHECK(m.n_specificity == 7);
  CHECK(m.n_specificity_paraphrase == 14);
  // one held-out prompt of an altered fact wrong: paraphrase 5/6
  const std::int64_t f9 = 9, para_t = s.prompt_order[static_cast<std::size_t>(f9 * K + 1)];
  pred[static_cast<std::size_t>(f9 * K + para_t)] = -1;
  m = edit_metrics(s, pred, author);
  CHECK(m.efficacy == 1.0);
  CHECK(m.paraphrase == doctest::Approx(5.0 / 6.0).epsilon(1e-15));
  CHECK(m.score == doctest::Approx(3.0 / (1 + 6.0 / 5.0 + 1)).epsilon(1e-15));
  // the unedited model (original authors everywhere): specificity 1, efficacy = fixed points only
  for (std::int64_t f = 0; f < F; ++f)
    for (std::int64_t t = 0; t < K; ++t) pred[static_cast<std::size_t>(f * K + t)] = author[static_cast<std::size_t>(f)];
  m = edit_metrics(s, pred, author);
  std::int64_t fixed = 0;
  for (std::int64_t f = 7; f < F; ++f) fixed += s.target_fact[static_cast<std::size_t>(f)] == f;
  CHECK(m.specificity == 1.0);
  CHECK(m.efficacy == doctest::Approx(static_cast<double>(fixed) / 3.0));
  CHECK_THROWS_AS(edit_metrics(s, std::vector<std::int32_t>(5), author), UserError);
}

TEST_CASE("r_NF = exp(CE_post - CE_pre)") {
  CHECK(nonfact_ratio(2.0, 2.0) == 1.0);
  CHECK(nonfact_ratio(1.0, 1.0 + std::log(1.06)) == doctest::Approx(1.06).epsilon(1e-14));
}

TEST_CASE("batched prompt evaluation = one forward per sequence") {
  // a tiny corpus: 4 facts, 3 templates, the §6.4 model at d = 8
  TinyEval te = tiny_eval({{"A", "W"}, {"B", "X"}, {"C", "Y"}, {"D", "Z"}},
                          {"The author of {book} is {author}", "Who wrote {book}? It was {author}",
                           "It is said {book} was written by {author}"},
                          3);
  const nn::EditSequences& seqs = te.seqs;
  EditModel& model = te.model;
  const PromptEval all = evaluate_prompts(model, seqs, 5);  // batches of 5, 5, 2
  REQUIRE(all.predicted.size() == 12);
  double ce = 0;
  std::int64_t n = 0, correct = 0;
  // the split by position: the book token sits at input position 3, 2, 3 of the three templates
  REQUIRE(seqs.book_pos.size() == 12);
  std::array<double, nn::kNonfactClasses> ce_cls{};
  std::array<std::int64_t, nn::kNonfactClasses> n_cls{};
  EditActs acts;
  for (std::int64_t s = 0; s < seqs.S; ++s) {
    CHECK(seqs.book_pos[static_cast<std::size_t>(s)] == std::array<int, 3>{3, 2, 3}[static_cast<std::size_t>(s % 3)]);
    CHECK(seqs.input_ids[static_cast<std::size_t>(s * seqs.T + seqs.book_pos[static_cast<std::size_t>(s)])] ==
          te.corpus.book_token[static_cast<std::size_t>(seqs.fact[static_cast<std::size_t>(s)])]);
    model.forward(acts, seqs.input_ids.data() + s * seqs.T, seqs.labels.data() + s * seqs.T, 1, seqs.T);
    const std::int64_t last = seqs.length[static_cast<std::size_t>(s)] - 1;
    CHECK(all.predicted[static_cast<std::size_t>(s)] == acts.argmax[static_cast<std::size_t>(last)]);
    correct += acts.argmax[static_cast<std::size_t>(last)] == seqs.labels[static_cast<std::size_t>(s * seqs.T + last)];
    const std::int64_t bp = seqs.book_pos[static_cast<std::size_t>(s)];
    for (std::int64_t t = 0; t < last; ++t) {
      ce += acts.losses[static_cast<std::size_t>(t)];
      ++n;
      const std::size_t c = t < bp - 1 ? 0 : t == bp - 1 ? 1 : 2;  // prefix, book, tail
      ce_cls[c] += acts.losses[static_cast<std::size_t>(t)];
      ++n_cls[c];
    }
  }
  CHECK(all.nonfact_tokens == n);
  CHECK(all.nonfact_ce == doctest::Approx(ce / static_cast<double>(n)).epsilon(1e-12));
  CHECK(all.value_accuracy == doctest::Approx(static_cast<double>(correct) / 12.0));
  CHECK(all.nonfact_ce > 0);
  // per fact: prefix rows 2 + 1 + 2 ("The author", "Who", "It is"), book rows 3, tail rows 1 + 3 + 3
  CHECK(n_cls == std::array<std::int64_t, 3>{20, 12, 28});
  CHECK(all.nonfact_tokens_class == n_cls);
  double recombined = 0;
  for (std::size_t c = 0; c < 3; ++c) {
    CHECK(all.nonfact_ce_class[c] == doctest::Approx(ce_cls[c] / static_cast<double>(n_cls[c])).epsilon(1e-12));
    recombined += static_cast<double>(all.nonfact_tokens_class[c]) * all.nonfact_ce_class[c];
  }
  CHECK(recombined / static_cast<double>(n) == doctest::Approx(all.nonfact_ce).epsilon(1e-12));
  // hand-made sequences without book_pos: the total only, no split
  nn::EditSequences bare = seqs;
  bare.book_pos.clear();
  const PromptEval nb = evaluate_prompts(model, bare, 5);
  CHECK(nb.nonfact_ce == all.nonfact_ce);
  for (std::size_t c = 0; c < 3; ++c) {
    CHECK(nb.nonfact_tokens_class[c] == 0);
    CHECK(std::isnan(nb.nonfact_ce_class[c]));
  }
  const PromptRowPlan bare_plan = plan_prompt_rows(bare, 4);
  CHECK(std::all_of(bare_plan.cls.begin(), bare_plan.cls.end(), [](std::int8_t c) { return c == -1; }));
}

TEST_CASE("prompt row plan: shared prefixes computed once, the reduction equals evaluate_prompts") {
  // 6 facts x 3 templates: every template's words before {book} are the same for all facts
  TinyEval te = tiny_eval({{"A", "W"}, {"B", "X"}, {"C", "Y"}, {"D", "Z"}, {"E", "V"}, {"F", "U"}},
                          {"The author of {book} is {author}", "Who wrote {book}? It was {author}",
                           "It is said that {book} was written by {author}"},
                          5);
  const nn::EditSequences& seqs = te.seqs;
  EditModel& model = te.model;
  const std::int64_t S = seqs.S, T = seqs.T;
  // every row's loss and argmax from one forward per sequence
  std::vector<double> loss_all(static_cast<std::size_t>(S * T));
  std::vector<std::int32_t> arg_all(loss_all.size());
  EditActs acts;
  for (std::int64_t s = 0; s < S; ++s) {
    model.forward(acts, seqs.input_ids.data() + s * T, seqs.labels.data() + s * T, 1, T);
    for (std::int64_t t = 0; t < T; ++t) {
      loss_all[static_cast<std::size_t>(s * T + t)] = acts.losses[static_cast<std::size_t>(t)];
      arg_all[static_cast<std::size_t>(s * T + t)] = acts.argmax[static_cast<std::size_t>(t)];
    }
  }
  for (const std::int64_t batch : {1, 4, 7, 100}) {
    CAPTURE(batch);
    const PromptRowPlan plan = plan_prompt_rows(seqs, batch, true);
    const std::int64_t U = static_cast<std::int64_t>(plan.row.size());
    // needed rows: the t < last rows with a label and every last row; shared prefixes make fewer distinct rows
    std::int64_t needed = 0;
    for (std::int64_t s = 0; s < S; ++s) needed += seqs.length[static_cast<std::size_t>(s)];
    CHECK(U < needed);
    // the words before {book}: 3 + 2 + 4 rows per template in this corpus ("The author of", "Who wrote",
    // "It is said that"), the last of each predicting the fact's own book; the others are shared by the 6 facts
    CHECK(U == needed - (6 - 1) * ((3 - 1) + (2 - 1) + (4 - 1)));
    CHECK(std::is_sorted(plan.row.begin(), plan.row.end()));
    // each needed row maps to a distinct row with the same token prefix and the same label, and the same loss
    std::int64_t w = 0;
    for (std::int64_t s = 0; s < S; ++s) {
      const std::int64_t len = seqs.length[static_cast<std::size_t>(s)];
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t g = s * T + t, u = plan.of_row[static_cast<std::size_t>(g)];
        if (t >= len) {
          CHECK(u == -1);
          continue;
        }
        REQUIRE(u >= 0);
        REQUIRE(u < U);
        const std::int64_t r = plan.row[static_cast<std::size_t>(u)], rs = r / T, rt = r % T;
        CHECK(rt == t);
        CHECK(rs <= s);
        CHECK(std::equal(seqs.input_ids.begin() + rs * T, seqs.input_ids.begin() + rs * T + t + 1,
                         seqs.input_ids.begin() + s * T));
        CHECK(seqs.labels[static_cast<std::size_t>(r)] == seqs.labels[static_cast<std::size_t>(g)]);
        CHECK(loss_all[static_cast<std::size_t>(r)] == doctest::Approx(loss_all[static_cast<std::size_t>(g)]).epsilon(1e-12));
        if (t < len - 1) ++w;
      }
      CHECK(plan.last[static_cast<std::size_t>(s)] == plan.of_row[static_cast<std::size_t>(s * T + len - 1)]);
    }
    CHECK(plan.nonfact_tokens == w);
    // batches: distinct rows whose first occurrence lies in batch k, contiguous and in order
    const std::int64_t nb = (S + batch - 1) / batch;
    REQUIRE(static_cast<std::int64_t>(plan.batch_begin.size()) == nb + 1);
    CHECK(plan.batch_begin.front() == 0);
    CHECK(plan.batch_begin.back() == U);
    for (std::int64_t k = 0; k < nb; ++k)
      for (std::int64_t u = plan.batch_begin[static_cast<std::size_t>(k)]; u < plan.batch_begin[static_cast<std::size_t>(k + 1)]; ++u)
        CHECK(plan.row[static_cast<std::size_t>(u)] / T / batch == k);
    // the reduction from the distinct rows alone = evaluate_prompts
    std::vector<double> lu(static_cast<std::size_t>(U));
    std::vector<std::int32_t> au(lu.size());
    for (std::int64_t u = 0; u < U; ++u) {
      lu[static_cast<std::size_t>(u)] = loss_all[static_cast<std::size_t>(plan.row[static_cast<std::size_t>(u)])];
      au[static_cast<std::size_t>(u)] = arg_all[static_cast<std::size_t>(plan.row[static_cast<std::size_t>(u)])];
    }
    const PromptEval viaplan = reduce_prompt_rows(plan, lu.data(), au.data());
    const PromptEval direct = evaluate_prompts(model, seqs, 4);
    CHECK(viaplan.predicted == direct.predicted);
    CHECK(viaplan.nonfact_tokens == direct.nonfact_tokens);
    CHECK(viaplan.nonfact_ce == doctest::Approx(direct.nonfact_ce).epsilon(1e-12));
    CHECK(viaplan.value_accuracy == direct.value_accuracy);
    // the split by position too: a distinct row's class is that of every row it stands for
    CHECK(viaplan.nonfact_tokens_class == direct.nonfact_tokens_class);
    for (std::size_t c = 0; c < 3; ++c)
      CHECK(viaplan.nonfact_ce_class[c] == doctest::Approx(direct.nonfact_ce_class[c]).epsilon(1e-12));
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t t = 0; t + 1 < seqs.length[static_cast<std::size_t>(s)]; ++t) {
        const std::int64_t u = plan.of_row[static_cast<std::size_t>(s * T + t)];
        CHECK(plan.cls[static_cast<std::size_t>(u)] ==
              static_cast<std::int8_t>(nn::nonfact_class(t, seqs.book_pos[static_cast<std::size_t>(s)])));
      }
  }
  CHECK_THROWS_AS(plan_prompt_rows(seqs, 0), UserError);
}

TEST_CASE("expert fact set and loading: keys unit, values raw, expert output reproduced inside the model") {
  const std::vector<nn::AuthorFact> facts = {{"A", "W"}, {"B", "X"}, {"C", "Y"}};
  TinyEval te = tiny_eval(facts, {"The author of {book} is {author}"}, 1, 6, 4);
  const nn::EditCorpus& corpus = te.corpus;
  EditModel& model = te.model;
  const mlp::FactSet fs = expert_factset(model, corpus, {2, 0, 1});
  CHECK(fs.F() == 3);
  for (std::int64_t i = 0; i < 3; ++i) CHECK(fs.keys.row(i).norm() == doctest::Approx(1.0).epsilon(1e-14));
  const double* E = model.frozen().param("embed.E");
  CHECK(fs.values(1, 3) == E[corpus.author_token[1] * 6 + 3]);
  CHECK(fs.targets().row(0) == fs.values.row(2));
  mlp::GatedMLP m;
  m.A = Eigen::MatrixXd::Random(5, 6);
  m.G = Eigen::MatrixXd::Random(5, 6);
  m.B = Eigen::MatrixXd::Random(6, 5);
  m.gate = "silu";
  m.bias_up = Eigen::VectorXd::Random(5);
  m.bias_gate = Eigen::VectorXd::Random(5);
  m.bias_out = Eigen::VectorXd::Random(6);
  load_expert(model, m);
  CHECK(model.frozen().param("fact.U")[1 * 6 + 4] == m.A(1, 4));
  CHECK(model.frozen().param("fact.D")[4 * 5 + 2] == m.B(4, 2));
  CHECK(model.frozen().param("fact.bD")[5] == m.bias_out(5));
  m.gate = "identity";
  CHECK_THROWS_AS(load_expert(model, m), UserError);
  CHECK_THROWS_AS(expert_factset(model, corpus, {0, 1}), UserError);
  CHECK(expert_accuracy(m, fs) >= 0.0);
  CHECK(vocab_fingerprint(corpus) == vocab_fingerprint(nn::build_edit_corpus(facts, {"The author of {book} is {author}"})));
  CHECK(vocab_fingerprint(corpus) != vocab_fingerprint(nn::build_edit_corpus(facts, {"Who wrote {book}? {author}"})));
  // the facts fingerprint: the same vocabulary with two authors swapped differs; the row order does not count
  const std::vector<std::string> tpl = {"The author of {book} is {author}"};
  const auto same = nn::build_edit_corpus(facts, tpl);
  const auto swapped = nn::build_edit_corpus({{"A", "X"}, {"B", "W"}, {"C", "Y"}}, tpl);
  const auto reordered = nn::build_edit_corpus({{"C", "Y"}, {"A", "W"}, {"B", "X"}}, tpl);
  CHECK(vocab_fingerprint(swapped) == vocab_fingerprint(corpus));
  CHECK(facts_fingerprint(same) == facts_fingerprint(corpus));
  CHECK(facts_fingerprint(swapped) != facts_fingerprint(corpus));
  CHECK(facts_fingerprint(reordered) == facts_fingerprint(corpus));
  CHECK(facts_fingerprint(nn::build_edit_corpus(facts, {"Of {book} the author is {author}"})) !=
        facts_fingerprint(corpus));
}

namespace {
struct Tiny {
  nn::EditCorpus corpus;
  nn::EditSequences seqs;
  EditModel model;
  explicit Tiny(std::int64_t facts)
      : corpus(make_corpus(facts)), seqs(nn::pack_edit_sequences(corpus, nn::EditLabels::all)), model(config(corpus)) {
    model.init(5);
  }
  static nn::EditCorpus make_corpus(std::int64_t n) {
    std::vector<nn::AuthorFact> facts;
    for (std::int64_t i = 0; i < n; ++i) facts.push_back({fmt::format("Book{}", i), fmt::format("Author{}", i)});
    return nn::build_edit_corpus(facts, {"The author of {book} is {author}", "Who wrote {book}? It was {author}"});
  }
  static EditModelConfig config(const nn::EditCorpus& c) {
    EditModelConfig cfg;
    cfg.d = 8;
    cfg.vocab = c.vocab_size();
    cfg.qk_hidden = 6;
    cfg.rank = 2;
    cfg.fact_hidden = 12;
    return cfg;
  }
};
}  // namespace

TEST_CASE("local editors: residuals lower the new author's CE; closed forms satisfy their defining identities") {
  Tiny t(30);
  const EditSet set = select_edit_set(30, 2, 0.1, 9);  // 3 altered, 27 preserved > h = 12
  LocalEditConfig cfg;
  cfg.steps = 0;
  cfg.method = "memit";
  cfg.lambda = 0;
  const LocalEditResult r0 = local_edit(t.model, t.seqs, set, t.corpus.author_token, cfg);
  CHECK(r0.residual_norm == 0.0);
  cfg.steps = 30;
  cfg.lr = 0.1;
  const LocalEditResult m = local_edit(t.model, t.seqs, set, t.corpus.author_token, cfg);
  CHECK(m.residual_loss < r0.residual_loss);
  REQUIRE(m.delta.rows() == 8);
  REQUIRE(m.delta.cols() == 12);
  // MEMIT with λ = 0 and independent keys: ΔW K_a = R
  CHECK((m.delta * m.keys_altered - m.residuals).norm() <= 1e-8 * m.residuals.norm());
  // ROME with one altered fact: ΔW k = r exactly
  const EditSet one = select_edit_set(30, 2, 1.0 / 30.0, 9);
  REQUIRE(one.n_altered == 1);
  cfg.method = "rome";
  const LocalEditResult ro = local_edit(t.model, t.seqs, one, t.corpus.author_token, cfg);
  CHECK((ro.delta * ro.keys_altered - ro.residuals).norm() <= 1e-9 * ro.residuals.norm());
  // AlphaEdit: ΔW = Z P, so ||ΔW K_p||_F <= ||ΔW||_2 sqrt(tol · null_dim)
  cfg.method = "alphaedit";
  const Eigen::MatrixXd Kp = m.keys_preserved;
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(Kp * Kp.transpose());
  cfg.tol = es.eigenvalues()(6);  // keep the 6 smallest directions
  const LocalEditResult al = local_edit(t.model, t.seqs, set, t.corpus.author_token, cfg);
  CHECK(al.null_dim == 6);
  const double bound = al.delta.operatorNorm() * std::sqrt(cfg.tol * 6.0);
  CHECK((al.delta * Kp).norm() <= bound * (1 + 1e-9));
  CHECK(al.delta.norm() > 0);
  // bad input
  CHECK_THROWS_AS(local_edit(t.model, t.seqs, select_edit_set(30, 2, 1.0, 9), t.corpus.author_token, cfg), UserError);
  cfg.lr = 0;
  CHECK_THROWS_AS(local_edit(t.model, t.seqs, set, t.corpus.author_token, cfg), UserError);
}

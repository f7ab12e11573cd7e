// Fact-editing data and tokenizer (nn/edit_data.hpp; spec hebbian.md §4.9): the shipped data in
// data/edit/, atomic book/author tokens, the vocabulary size, determinism, the label masks.
// Expected ids and sizes were computed independently (a Python re-implementation of the tokenizer
// rules over data/edit/, 16,384 facts × the first 16 templates).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "nn/edit_data.hpp"

using namespace memcap;
using namespace memcap::nn;

namespace {

const std::string kDataDir = std::string(MEMCAP_SOURCE_DIR) + "/data/edit";

std::string fill(std::string t, const AuthorFact& f) {
  t.replace(t.find("{book}"), 6, f.book);
  t.replace(t.find("{author}"), 8, f.author);
  return t;
}

struct TmpDir {
  std::filesystem::path dir;
  TmpDir() {
    dir = std::filesystem::temp_directory_path() /
          ("memcap_edit_data_" + std::to_string(static_cast<long long>(reinterpret_cast<std::uintptr_t>(this))));
    std::filesystem::create_directories(dir);
  }
  ~TmpDir() { std::filesystem::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) const {
    const auto p = (dir / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
};

template <typename E>
std::string message_of(const std::function<void()>& f, int code) {
  try {
    f();
  } catch (const E& e) {
    CHECK(e.exit_code() == code);
    return e.what();
  }
  FAIL("no exception");
  return {};
}

}  // namespace

TEST_CASE("split_words: words keep one leading space, punctuation stands alone, text round-trips") {
  CHECK(split_words("Well,") == std::vector<std::string>{"Well", ","});
  CHECK(split_words("'s author is") == std::vector<std::string>{"'s", " author", " is"});
  CHECK(split_words("Who is the author of") == std::vector<std::string>{"Who", " is", " the", " author", " of"});
  CHECK(split_words("? It's") == std::vector<std::string>{"?", " It's"});
  CHECK(split_words(" stands out:") == std::vector<std::string>{" stands", " out", ":"});
  CHECK(split_words("a  b") == std::vector<std::string>{"a", " ", " b"});
  CHECK(split_words("Award-winning") == std::vector<std::string>{"Award", "-", "winning"});
  CHECK(split_words("").empty());
}

TEST_CASE("shipped data: 16,384 facts x 16 templates, vocabulary 32,815, atomic tokens never split") {
  const EditCorpus c = load_edit_corpus(kDataDir, kEditFacts, kEditTemplates);
  REQUIRE(c.num_facts() == 16384);
  REQUIRE(c.num_templates() == 16);
  // Spot checks of the CSV parse: quoted field with a comma, the last row, a field with a tab.
  CHECK(c.facts[0].book == "A Murder is Announced");
  CHECK(c.facts[0].author == "Agatha Christie");
  CHECK(c.facts[11].book == "Foundation (Foundation, #1)");
  CHECK(c.facts[16383].book == "Ace (Band of Brothers #1)");
  CHECK(c.facts[16383].author == "Lyra Parish");
  CHECK(c.templates[0] == "The author of {book} is {author}");
  CHECK(c.templates[15] == "Looking at {book}, the author is clearly {author}");

  // 52 template words/punctuation + 32,763 atomic tokens (16,384 books + 16,384 authors, minus the 5
  // strings that are both a book and an author: Roland Barthes, Martin Luther King Jr., J.R.R.
  // Tolkien, Mercedes Lackey, Red Phoenix).
  MESSAGE("fact-editing vocabulary: " << c.vocab_size() << " tokens (" << c.template_vocab
                                      << " template words/punctuation + " << c.vocab_size() - c.template_vocab
                                      << " atomic book/author tokens)");
  CHECK(c.template_vocab == 52);
  CHECK(c.vocab_size() == 32815);
  CHECK(c.vocab[0] == "The");
  CHECK(c.vocab[1] == " author");
  CHECK(c.vocab[2] == " of");
  CHECK(c.vocab[3] == " is");
  CHECK(c.vocab[51] == " clearly");
  CHECK(c.book_token[0] == 438);    // " A Murder is Announced" in the sorted atomic set
  CHECK(c.author_token[0] == 968);  // " Agatha Christie"
  CHECK(c.token_id(" Agatha Christie") == 968);
  CHECK(c.token_id(" Agatha") == -1);

  // Fact 1147 is "Roland Barthes" by Roland Barthes: book token == author token; the only one.
  std::vector<std::int64_t> same;
  for (std::int64_t f = 0; f < c.num_facts(); ++f)
    if (c.book_token[f] == c.author_token[f]) same.push_back(f);
  REQUIRE(same == std::vector<std::int64_t>{1147});

  std::int64_t sentences = 0, total_tokens = 0;
  for (std::int64_t f = 0; f < c.num_facts(); ++f) {
    const std::int32_t b = c.book_token[f], a = c.author_token[f];
    REQUIRE(b >= c.template_vocab);
    REQUIRE(a >= c.template_vocab);
    REQUIRE(c.vocab[b] == " " + c.facts[f].book);
    REQUIRE(c.vocab[a] == " " + c.facts[f].author);
    for (std::int64_t k = 0; k < c.num_templates(); ++k) {
      const auto toks = c.sentence(f, k);
      const auto& tmpl = c.template_tokens[k];
      REQUIRE(toks.size() == tmpl.size());
      REQUIRE(toks.back() == a);  // every sentence ends with its author token
      const auto book_slot = std::find(tmpl.begin(), tmpl.end(), EditCorpus::kBookSlot) - tmpl.begin();
      REQUIRE(toks[book_slot] == b);  // the book is one token, where the template has it
      const auto extra = b == a ? 1 : 0;
      REQUIRE(std::count(toks.begin(), toks.end(), b) == 1 + extra);
      REQUIRE(std::count(toks.begin(), toks.end(), a) == 1 + extra);
      // Every other position is a template word.
      for (std::size_t p = 0; p < toks.size(); ++p)
        if (static_cast<std::ptrdiff_t>(p) != book_slot && p + 1 != toks.size()) REQUIRE(toks[p] < c.template_vocab);
      REQUIRE(c.decode(toks) == fill(c.templates[k], c.facts[f]));
      ++sentences;
      total_tokens += static_cast<std::int64_t>(toks.size());
    }
  }
  CHECK(sentences == 262144);
  CHECK(total_tokens == 2424832);  // 16,384 × (6+9+10+11+9+12+7+8+10+8+10+10+10+8+11+9 = 148)
}

TEST_CASE("label masks of §4.9 on hand-checked sentences") {
  const EditCorpus c = load_edit_corpus(kDataDir, 4, 16);
  // 4 facts: the template words are the same 52, the atomic tokens the 8 strings sorted:
  // " A Murder is Announced" < " Agatha Christie" < " James Patterson" < " Läbi aja" < " NYPD Red"
  // < " Nora Roberts" < " Stephen King" < " The Tommyknockers".
  REQUIRE(c.vocab_size() == 60);
  CHECK(c.book_token == std::vector<std::int32_t>{52, 59, 56, 55});
  CHECK(c.author_token == std::vector<std::int32_t>{53, 58, 54, 57});

  // "The author of A Murder is Announced is Agatha Christie"
  const auto t0 = c.sentence(0, 0);
  REQUIRE(t0 == std::vector<std::int32_t>{0, 1, 2, 52, 3, 53});
  const auto all = make_edit_example(t0, EditLabels::all);
  CHECK(all.input_ids == std::vector<std::int32_t>{0, 1, 2, 52, 3});
  CHECK(all.labels == std::vector<std::int32_t>{1, 2, 52, 3, 53});
  const auto last = make_edit_example(t0, EditLabels::last);
  CHECK(last.input_ids == all.input_ids);
  CHECK(last.labels == std::vector<std::int32_t>{-100, -100, -100, -100, 53});
  const auto abl = make_edit_example(t0, EditLabels::all_but_last);
  CHECK(abl.input_ids == all.input_ids);
  CHECK(abl.labels == std::vector<std::int32_t>{1, 2, 52, 3, -100});

  // "Well, The Tommyknockers's author is Stephen King": Well=25 ,=13 's=26
  const auto t6 = c.sentence(1, 6);
  REQUIRE(t6 == std::vector<std::int32_t>{25, 13, 59, 26, 1, 3, 58});
  CHECK(c.decode(t6) == "Well, The Tommyknockers's author is Stephen King");

  // Packed rows: s = fact·16 + template, T = 11 (the longest template, "If you're wondering ... it's
  // {author}", has 12 tokens), right-padded with -100.
  const auto ps = pack_edit_sequences(c, EditLabels::last);
  REQUIRE(ps.S == 64);
  REQUIRE(ps.T == 11);
  const std::int64_t s = 1 * 16 + 6;
  CHECK(ps.fact[s] == 1);
  CHECK(ps.tmpl[s] == 6);
  CHECK(ps.length[s] == 6);
  const std::vector<std::int32_t> in(ps.input_ids.begin() + s * 11, ps.input_ids.begin() + s * 11 + 11);
  const std::vector<std::int32_t> lab(ps.labels.begin() + s * 11, ps.labels.begin() + s * 11 + 11);
  CHECK(in == std::vector<std::int32_t>{25, 13, 59, 26, 1, 3, -100, -100, -100, -100, -100});
  CHECK(lab == std::vector<std::int32_t>{-100, -100, -100, -100, -100, 58, -100, -100, -100, -100, -100});
  // With mode "last", exactly one trained label per row, the author, at position length − 1.
  for (std::int64_t r = 0; r < ps.S; ++r) {
    std::int64_t trained = 0;
    for (std::int64_t t = 0; t < ps.T; ++t) trained += ps.labels[r * ps.T + t] != kEditIgnore;
    CHECK(trained == 1);
    CHECK(ps.labels[r * ps.T + ps.length[r] - 1] == c.author_token[ps.fact[r]]);
  }
}

TEST_CASE("determinism: two loads give the same vocabulary and the same packed rows") {
  const EditCorpus a = load_edit_corpus(kDataDir, 2048, 16);
  const EditCorpus b = load_edit_corpus(kDataDir, 2048, 16);
  CHECK(a.vocab == b.vocab);
  CHECK(a.book_token == b.book_token);
  CHECK(a.author_token == b.author_token);
  for (const auto mode : {EditLabels::all, EditLabels::last, EditLabels::all_but_last}) {
    const auto pa = pack_edit_sequences(a, mode), pb = pack_edit_sequences(b, mode);
    CHECK(pa.input_ids == pb.input_ids);
    CHECK(pa.labels == pb.labels);
    CHECK(pa.length == pb.length);
  }
  // The template part of the vocabulary does not depend on the number of facts.
  const EditCorpus full = load_edit_corpus(kDataDir, kEditFacts, 16);
  CHECK(std::equal(a.vocab.begin(), a.vocab.begin() + a.template_vocab, full.vocab.begin()));
}

TEST_CASE("bad input: clear errors, right exit codes") {
  TmpDir tmp;
  const auto tpl =
      tmp.write("t.txt", "The author of {book} is {author}\r\n\r\nWho wrote {book}? The author is {author}\n");

  // CRLF lines, quotes with a doubled quote and a comma, a blank line, extra columns in any order.
  const auto ok = tmp.write("ok.csv", "book,x,author\r\n\"Say \"\"Hi\"\", Bob\",1,Ann\r\n\r\nB2,2,Cid\r\n");
  const auto facts = load_author_facts(ok, 2);
  REQUIRE(facts.size() == 2);
  CHECK(facts[0].book == "Say \"Hi\", Bob");
  CHECK(facts[0].author == "Ann");
  CHECK(facts[1].book == "B2");
  const auto tpls = load_author_templates(tpl, 2);
  CHECK(tpls ==
        std::vector<std::string>{"The author of {book} is {author}", "Who wrote {book}? The author is {author}"});

  auto m = message_of<IoError>([&] { load_author_facts((tmp.dir / "missing.csv").string(), 1); }, kExitIo);
  CHECK(m.find("cannot open") != std::string::npos);
  m = message_of<UserError>([&] { load_author_facts(ok, 3); }, kExitUsage);
  CHECK(m.find("holds 2 facts, fewer than the 3 asked for") != std::string::npos);
  m = message_of<UserError>([&] { load_author_facts(ok, 0); }, kExitUsage);
  CHECK(m.find(">= 1") != std::string::npos);
  m = message_of<IoError>([&] { load_author_facts(tmp.write("a.csv", ",author,book\n0,Ann,B1,extra\n"), 1); }, kExitIo);
  CHECK(m.find("line 2: 4 fields where the header has 3") != std::string::npos);
  m = message_of<IoError>([&] { load_author_facts(tmp.write("b.csv", ",author,book\n0,Ann,\"B1\n"), 1); }, kExitIo);
  CHECK(m.find("never closed") != std::string::npos);
  m = message_of<IoError>([&] { load_author_facts(tmp.write("c.csv", ",writer,book\n0,Ann,B1\n"), 1); }, kExitIo);
  CHECK(m.find("no column 'author'") != std::string::npos);
  m = message_of<IoError>([&] { load_author_facts(tmp.write("d.csv", ",author,book\n0,Ann,B1\n1,Bea,B1\n"), 2); },
                          kExitIo);
  CHECK(m.find("book 'B1' already appears on line 2") != std::string::npos);
  m = message_of<IoError>([&] { load_author_facts(tmp.write("e.csv", ",author,book\n0,Ann,\n"), 1); }, kExitIo);
  CHECK(m.find("empty book") != std::string::npos);
  m = message_of<IoError>([&] { load_author_facts(tmp.write("f.csv", ""), 1); }, kExitIo);
  CHECK(m.find("empty") != std::string::npos);

  m = message_of<UserError>([&] { load_author_templates(tpl, 3); }, kExitUsage);
  CHECK(m.find("holds 2 templates, fewer than the 3 asked for") != std::string::npos);
  m = message_of<IoError>([&] { load_author_templates((tmp.dir / "none.txt").string(), 1); }, kExitIo);
  CHECK(m.find("cannot open") != std::string::npos);
  m = message_of<IoError>([&] { load_author_templates(tmp.write("t1.txt", "The author of {book}\n"), 1); }, kExitIo);
  CHECK(m.find("\"{author}\" exactly once") != std::string::npos);
  m = message_of<IoError>([&] { load_author_templates(tmp.write("t2.txt", "{author} wrote {book}\n"), 1); }, kExitIo);
  CHECK(m.find("before") != std::string::npos);
  m = message_of<IoError>([&] { load_author_templates(tmp.write("t3.txt", "By {book}: {author} indeed\n"), 1); },
                          kExitIo);
  CHECK(m.find("end with") != std::string::npos);
  m = message_of<IoError>([&] { load_author_templates(tmp.write("t4.txt", "The author of{book} is {author}\n"), 1); },
                          kExitIo);
  CHECK(m.find("follow a space") != std::string::npos);
  // a repeated template (its "paraphrase" would be the training prompt); a repeat past the templates asked for is
  // not read
  const std::string twice = "The author of {book} is {author}\nThe author of {book} is {author}\n";
  m = message_of<IoError>([&] { load_author_templates(tmp.write("t5.txt", twice), 2); }, kExitIo);
  CHECK(m.find("line 2") != std::string::npos);
  CHECK(m.find("repeats an earlier line") != std::string::npos);
  CHECK(load_author_templates(tmp.write("t6.txt", twice), 1).size() == 1);
  m = message_of<IoError>([&] { load_author_templates(tmp.write("t5.txt", "The {title} of {book} is {author}\n"), 1); },
                          kExitIo);
  CHECK(m.find("other than the placeholders") != std::string::npos);

  // Two facts whose books are different strings cannot collide; an author equal to another fact's
  // author is refused by the builder as well as by the loader.
  m = message_of<UserError>([&] { build_edit_corpus({{"B1", "Ann"}, {"B2", "Ann"}}, tpls); }, kExitUsage);
  CHECK(m.find("same author token ' Ann'") != std::string::npos);
  m = message_of<UserError>([&] { build_edit_corpus({{"B1", "Ann"}}, {"no placeholders"}); }, kExitUsage);
  CHECK(m.find("malformed") != std::string::npos);
}

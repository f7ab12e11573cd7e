// Fact-editing data (spec hebbian.md §4.9, §6.4): the (book, author) facts, the sentence templates,
// a deterministic word/punctuation tokenizer in which every " {book}" and " {author}" string is ONE
// atomic token, and the next-token sequences with the three label masks of §4.9.
//
// The reference tokenizes with EleutherAI/pythia-70m plus the atomic tokens; that tokenizer cannot be
// fetched here, so the template text is split into words and punctuation instead (docs/hebb-edit.md).
// Protocol-equivalent (one token per book and per author, every sentence ends with its author token),
// not bit-identical.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memcap::nn {

inline constexpr std::int64_t kEditFacts = 16384;   // facts used by the paper's runs
inline constexpr std::int64_t kEditTemplates = 16;  // templates used by the paper's runs
inline constexpr std::int32_t kEditIgnore = -100;   // label / padding value that is not trained

struct AuthorFact {
  std::string book;
  std::string author;
};

// The first `count` facts of a CSV with a header naming the columns `book` and `author` (other
// columns, such as the row index of the shipped file, are ignored), RFC 4180 quoting.
// IoError (exit 3): the file cannot be read; no header with both columns; a row with a different
// number of fields than the header, an unterminated quote or an empty book/author; a book or an author
// repeated within the first `count` rows. UserError (exit 2): count < 1, or fewer rows than `count`.
std::vector<AuthorFact> load_author_facts(const std::string& csv_path, std::int64_t count);

// The first `count` non-empty lines of a template file. Each must hold "{book}" once and "{author}"
// once, both right after a space, "{book}" first, the line ending with "{author}", no other '{' or '}',
// no control characters. IoError (exit 3) for an unreadable or malformed file; UserError (exit 2) for
// count < 1 or fewer templates than `count`.
std::vector<std::string> load_author_templates(const std::string& path, std::int64_t count);

// Splits literal template text into tokens: a token is an optional single leading space followed by
// either a word (a maximal run of ASCII letters, digits, apostrophes and bytes >= 0x80) or one other
// character; a space not followed by a word or punctuation is a token " " of its own. Concatenating the
// tokens gives the text back exactly.
std::vector<std::string> split_words(std::string_view text);

enum class EditLabels { all, last, all_but_last };

// The tokenized corpus: facts × templates, with the vocabulary.
// Token ids: [0, template_vocab) are the template words/punctuation in order of first appearance
// (template 0 first, left to right); [template_vocab, vocab_size) are the atomic tokens, the set of
// all " {book}" and " {author}" strings sorted bytewise (as the reference adds them), so a string that
// is both a book and an author has one id.
struct EditCorpus {
  std::vector<AuthorFact> facts;
  std::vector<std::string> templates;
  std::vector<std::string> vocab;  // id -> token string
  std::int64_t template_vocab = 0;
  std::vector<std::int32_t> book_token;    // per fact
  std::vector<std::int32_t> author_token;  // per fact
  // Per template: its token ids, with kBookSlot / kAuthorSlot where the fact's tokens go.
  std::vector<std::vector<std::int32_t>> template_tokens;
  static constexpr std::int32_t kBookSlot = -1;
  static constexpr std::int32_t kAuthorSlot = -2;

  std::int64_t vocab_size() const { return static_cast<std::int64_t>(vocab.size()); }
  std::int64_t num_facts() const { return static_cast<std::int64_t>(facts.size()); }
  std::int64_t num_templates() const { return static_cast<std::int64_t>(templates.size()); }
  // Token id of a string, -1 when it is not in the vocabulary.
  std::int32_t token_id(std::string_view token) const;
  // The full token sequence of fact `fact` in template `tmpl` (ends with the fact's author token).
  std::vector<std::int32_t> sentence(std::int64_t fact, std::int64_t tmpl) const;
  // The concatenated token strings: decode(sentence(f, k)) is the template filled with the fact.
  std::string decode(const std::vector<std::int32_t>& ids) const;

  std::unordered_map<std::string, std::int32_t> index;  // token string -> id
};

// Builds the vocabulary and the template token lists. UserError (exit 2) for an empty fact or template
// list, for a template that fails the rules of load_author_templates, and when two facts share a book
// token or an author token (the experiment needs one key and one value per fact).
EditCorpus build_edit_corpus(std::vector<AuthorFact> facts, std::vector<std::string> templates);

// load_author_facts + load_author_templates + build_edit_corpus on `dir`/book_authors.csv and
// `dir`/author_templates.txt.
EditCorpus load_edit_corpus(const std::string& dir, std::int64_t facts = kEditFacts,
                            std::int64_t templates = kEditTemplates);

// One next-token example of §4.9 from a full token sequence toks (length L >= 2):
// input_ids = toks[:-1], labels = toks[1:] with
//   all          every position trained,
//   last         only the final position (the author) trained, the rest kEditIgnore,
//   all_but_last the final position kEditIgnore, the rest trained.
struct EditExample {
  std::vector<std::int32_t> input_ids;
  std::vector<std::int32_t> labels;
};
EditExample make_edit_example(const std::vector<std::int32_t>& toks, EditLabels mode);

// All facts × templates as fixed-width rows for training: sequence s = fact · K + template (grouped by
// fact, as the reference flattens its groups); T = longest input length; input_ids and labels are S×T
// row-major, right-padded with kEditIgnore; length[s] = unpadded input length, whose last position
// (length − 1) is where the author is predicted. book_pos[s] = the input position of the fact's book token
// (pack_edit_sequences fills it; hand-made sequences may leave it empty, and then the non-fact CE is not split by
// position, see nonfact_class).
struct EditSequences {
  std::int64_t S = 0, T = 0;
  std::vector<std::int32_t> input_ids;
  std::vector<std::int32_t> labels;
  std::vector<std::int32_t> length;
  std::vector<std::int32_t> fact;
  std::vector<std::int32_t> tmpl;
  std::vector<std::int32_t> book_pos;
};

// Where a non-fact row (input position t, predicting the token at t + 1) lies relative to the book token at
// input position book_pos: prefix (t < book_pos − 1: a template word predicted from template words alone, the
// same row for every fact), book (t = book_pos − 1: the book token predicted), tail (t >= book_pos: the words
// between the book and the author, with the book in the context).
enum class NonfactClass : std::int8_t { prefix = 0, book = 1, tail = 2 };
inline constexpr int kNonfactClasses = 3;
inline NonfactClass nonfact_class(std::int64_t t, std::int64_t book_pos) {
  return t < book_pos - 1 ? NonfactClass::prefix : t == book_pos - 1 ? NonfactClass::book : NonfactClass::tail;
}
EditSequences pack_edit_sequences(const EditCorpus& corpus, EditLabels mode);

}  // namespace memcap::nn

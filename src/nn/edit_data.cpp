// Fact-editing facts, templates, tokenizer and label masks (nn/edit_data.hpp; spec hebbian.md §4.9).
#include "nn/edit_data.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.hpp"

namespace memcap::nn {
namespace {

constexpr std::string_view kBook = "{book}";
constexpr std::string_view kAuthor = "{author}";

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("cannot open the {} file '{}': check the path", what, path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(fmt::format("cannot read the {} file '{}'", what, path));
  return ss.str();
}

// Empty when the template is well formed, otherwise what is wrong with it.
std::string template_problem(const std::string& t) {
  for (unsigned char c : t) {
    if (c < 0x20 || c == 0x7f) return "it holds a control character (tab, carriage return, ...)";
  }
  const auto count = [&](std::string_view s) {
    std::size_t n = 0;
    for (std::size_t p = t.find(s); p != std::string::npos; p = t.find(s, p + 1)) ++n;
    return n;
  };
  if (count(kBook) != 1) return "it must hold \"{book}\" exactly once";
  if (count(kAuthor) != 1) return "it must hold \"{author}\" exactly once";
  if (std::count(t.begin(), t.end(), '{') != 2 || std::count(t.begin(), t.end(), '}') != 2)
    return "it holds a '{' or '}' other than the placeholders {book} and {author}";
  const std::size_t pb = t.find(kBook), pa = t.find(kAuthor);
  if (pa < pb) return "\"{book}\" must come before \"{author}\"";
  if (pa + kAuthor.size() != t.size()) return "it must end with \"{author}\" (the author is the predicted last token)";
  if (pb == 0 || t[pb - 1] != ' ' || t[pa - 1] != ' ')
    return "\"{book}\" and \"{author}\" must each follow a space (the atomic tokens are \" {book}\" and \" {author}\")";
  return {};
}

bool is_word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '\'' || c >= 0x80;
}

}  // namespace

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> out;
  std::size_t i = 0;
  const std::size_t n = text.size();
  while (i < n) {
    const std::size_t start = i;
    if (text[i] == ' ') {
      if (i + 1 < n && text[i + 1] != ' ') {
        ++i;  // the space leads the next word or punctuation mark
      } else {
        out.emplace_back(" ");
        ++i;
        continue;
      }
    }
    if (is_word_byte(static_cast<unsigned char>(text[i]))) {
      while (i < n && is_word_byte(static_cast<unsigned char>(text[i]))) ++i;
    } else {
      ++i;
    }
    out.emplace_back(text.substr(start, i - start));
  }
  return out;
}

std::vector<AuthorFact> load_author_facts(const std::string& csv_path, std::int64_t count) {
  require(count >= 1, "the number of facts must be >= 1 (got {})", count);
  const std::string s = read_file(csv_path, "book/author CSV");
  std::size_t p = (s.size() >= 3 && s.compare(0, 3, "\xEF\xBB\xBF") == 0) ? 3 : 0;  // UTF-8 BOM
  std::int64_t line = 1;

  // One record (RFC 4180); false at end of input. `start_line` is the line the record starts on.
  std::int64_t start_line = 1;
  const auto next_record = [&](std::vector<std::string>& fields) -> bool {
    fields.clear();
    while (p < s.size() && (s[p] == '\n' || (s[p] == '\r' && p + 1 < s.size() && s[p + 1] == '\n'))) {
      p += s[p] == '\r' ? 2 : 1;  // blank lines
      ++line;
    }
    if (p >= s.size()) return false;
    start_line = line;
    std::string field;
    while (true) {
      if (p < s.size() && s[p] == '"') {
        ++p;
        while (true) {
          if (p >= s.size())
            throw IoError(
                fmt::format("{}: line {}: a quoted field is never closed (missing '\"')", csv_path, start_line));
          if (s[p] == '"') {
            if (p + 1 < s.size() && s[p + 1] == '"') {
              field += '"';
              p += 2;
              continue;
            }
            ++p;
            break;
          }
          if (s[p] == '\n') ++line;
          field += s[p++];
        }
        if (p < s.size() && s[p] != ',' && s[p] != '\n' && s[p] != '\r')
          throw IoError(fmt::format("{}: line {}: text after a closing quote; quote the whole field", csv_path, line));
      } else {
        while (p < s.size() && s[p] != ',' && s[p] != '\n' && !(s[p] == '\r' && p + 1 < s.size() && s[p + 1] == '\n')) {
          if (s[p] == '"')
            throw IoError(
                fmt::format("{}: line {}: a quote inside an unquoted field; quote the field and double "
                            "the quote",
                            csv_path, line));
          field += s[p++];
        }
      }
      fields.push_back(std::move(field));
      field.clear();
      if (p < s.size() && s[p] == ',') {
        ++p;
        continue;
      }
      if (p < s.size()) {
        p += s[p] == '\r' ? 2 : 1;
        ++line;
      }
      return true;
    }
  };

  std::vector<std::string> header;
  if (!next_record(header))
    throw IoError(fmt::format("{}: the file is empty; expected a header ',author,book'", csv_path));
  const auto col = [&](const char* name) {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it != header.end() && std::find(it + 1, header.end(), name) != header.end())
      throw IoError(fmt::format("{}: the header names the column '{}' twice; which one holds the {}s is ambiguous",
                                csv_path, name, name));
    if (it == header.end())
      throw IoError(
          fmt::format("{}: the header has no column '{}'; expected columns 'author' and 'book' (as in "
                      "data/edit/book_authors.csv)",
                      csv_path, name));
    return static_cast<std::size_t>(it - header.begin());
  };
  const std::size_t cb = col("book"), ca = col("author");

  std::vector<AuthorFact> facts;
  facts.reserve(static_cast<std::size_t>(std::min<std::int64_t>(count, 1 << 20)));
  std::unordered_map<std::string, std::int64_t> seen_book, seen_author;
  std::vector<std::string> row;
  while (static_cast<std::int64_t>(facts.size()) < count && next_record(row)) {
    if (row.size() != header.size())
      throw IoError(fmt::format("{}: line {}: {} fields where the header has {}; quote fields that hold commas",
                                csv_path, start_line, row.size(), header.size()));
    if (row[cb].empty() || row[ca].empty())
      throw IoError(fmt::format("{}: line {}: empty {}; every row needs a book and an author", csv_path, start_line,
                                row[cb].empty() ? "book" : "author"));
    if (auto [it, fresh] = seen_book.emplace(row[cb], start_line); !fresh)
      throw IoError(fmt::format("{}: line {}: book '{}' already appears on line {}; books must be unique", csv_path,
                                start_line, row[cb], it->second));
    if (auto [it, fresh] = seen_author.emplace(row[ca], start_line); !fresh)
      throw IoError(fmt::format("{}: line {}: author '{}' already appears on line {}; authors must be unique", csv_path,
                                start_line, row[ca], it->second));
    facts.push_back({std::move(row[cb]), std::move(row[ca])});
  }
  require(static_cast<std::int64_t>(facts.size()) == count, "{} holds {} facts, fewer than the {} asked for", csv_path,
          facts.size(), count);
  return facts;
}

std::vector<std::string> load_author_templates(const std::string& path, std::int64_t count) {
  require(count >= 1, "the number of templates must be >= 1 (got {})", count);
  const std::string s = read_file(path, "sentence template");
  std::vector<std::string> out;
  std::size_t p = 0;
  std::int64_t line = 0;
  while (p < s.size() && static_cast<std::int64_t>(out.size()) < count) {
    std::size_t e = s.find('\n', p);
    if (e == std::string::npos) e = s.size();
    std::string t = s.substr(p, e - p);
    p = e + 1;
    ++line;
    if (!t.empty() && t.back() == '\r') t.pop_back();
    if (t.empty()) continue;
    if (const std::string why = template_problem(t); !why.empty())
      throw IoError(fmt::format("{}: line {}: template '{}' is malformed: {}", path, line, t, why));
    // a repeated template would make a "held-out paraphrase" the training prompt itself
    if (std::find(out.begin(), out.end(), t) != out.end())
      throw IoError(fmt::format("{}: line {}: template '{}' repeats an earlier line; every template of the first {} "
                                "must differ (one is the training prompt, the others its paraphrases)",
                                path, line, t, count));
    out.push_back(std::move(t));
  }
  require(static_cast<std::int64_t>(out.size()) == count, "{} holds {} templates, fewer than the {} asked for", path,
          out.size(), count);
  return out;
}

std::int32_t EditCorpus::token_id(std::string_view token) const {
  const auto it = index.find(std::string(token));
  return it == index.end() ? -1 : it->second;
}

std::vector<std::int32_t> EditCorpus::sentence(std::int64_t fact, std::int64_t tmpl) const {
  MEMCAP_ASSERT(fact >= 0 && fact < num_facts() && tmpl >= 0 && tmpl < num_templates(),
                "EditCorpus::sentence: fact or template out of range");
  std::vector<std::int32_t> out = template_tokens[static_cast<std::size_t>(tmpl)];
  for (auto& id : out) {
    if (id == kBookSlot)
      id = book_token[static_cast<std::size_t>(fact)];
    else if (id == kAuthorSlot)
      id = author_token[static_cast<std::size_t>(fact)];
  }
  return out;
}

std::string EditCorpus::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  for (const auto id : ids) {
    MEMCAP_ASSERT(id >= 0 && id < vocab_size(), "EditCorpus::decode: token id out of range");
    out += vocab[static_cast<std::size_t>(id)];
  }
  return out;
}

EditCorpus build_edit_corpus(std::vector<AuthorFact> facts, std::vector<std::string> templates) {
  require(!facts.empty(), "the fact-editing corpus needs at least one fact");
  require(!templates.empty(), "the fact-editing corpus needs at least one template");
  EditCorpus c;
  c.facts = std::move(facts);
  c.templates = std::move(templates);
  const auto add = [&](const std::string& tok) {
    const auto [it, fresh] = c.index.emplace(tok, static_cast<std::int32_t>(c.vocab.size()));
    if (fresh) c.vocab.push_back(tok);
    return it->second;
  };

  // Template words and punctuation, in order of first appearance.
  for (std::size_t k = 0; k < c.templates.size(); ++k) {
    const std::string& t = c.templates[k];
    const std::string why = template_problem(t);
    require(why.empty(), "template {} '{}' is malformed: {}", k, t, why);
    const std::size_t pb = t.find(kBook), pa = t.find(kAuthor);
    std::vector<std::int32_t> ids;
    for (const auto& w : split_words(std::string_view(t).substr(0, pb - 1))) ids.push_back(add(w));
    ids.push_back(EditCorpus::kBookSlot);
    const std::size_t mid = pb + kBook.size();
    for (const auto& w : split_words(std::string_view(t).substr(mid, pa - 1 - mid))) ids.push_back(add(w));
    ids.push_back(EditCorpus::kAuthorSlot);
    c.template_tokens.push_back(std::move(ids));
  }
  c.template_vocab = c.vocab_size();

  // Atomic tokens: the sorted set of " {book}" and " {author}" strings (a string already in the
  // vocabulary keeps its id, as an HF tokenizer skips tokens it already has).
  std::vector<std::string> atomic;
  atomic.reserve(2 * c.facts.size());
  for (const auto& f : c.facts) {
    require(!f.book.empty() && !f.author.empty(), "a fact has an empty book or author");
    atomic.push_back(" " + f.book);
    atomic.push_back(" " + f.author);
  }
  std::sort(atomic.begin(), atomic.end());
  atomic.erase(std::unique(atomic.begin(), atomic.end()), atomic.end());
  require(c.template_vocab + static_cast<std::int64_t>(atomic.size()) < std::numeric_limits<std::int32_t>::max(),
          "{} facts make a vocabulary beyond the int32 token ids; use fewer facts", c.facts.size());
  for (const auto& a : atomic) add(a);

  std::unordered_map<std::int32_t, std::size_t> book_of, author_of;
  for (std::size_t i = 0; i < c.facts.size(); ++i) {
    const std::int32_t b = c.index.at(" " + c.facts[i].book), a = c.index.at(" " + c.facts[i].author);
    if (auto [it, fresh] = book_of.emplace(b, i); !fresh)
      throw UserError(fmt::format("facts {} and {} have the same book token '{}'; books must be unique", it->second, i,
                                  c.vocab[static_cast<std::size_t>(b)]));
    if (auto [it, fresh] = author_of.emplace(a, i); !fresh)
      throw UserError(fmt::format("facts {} and {} have the same author token '{}'; authors must be unique", it->second,
                                  i, c.vocab[static_cast<std::size_t>(a)]));
    c.book_token.push_back(b);
    c.author_token.push_back(a);
  }
  return c;
}

EditCorpus load_edit_corpus(const std::string& dir, std::int64_t facts, std::int64_t templates) {
  const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  auto f = load_author_facts(base + "book_authors.csv", facts);
  auto t = load_author_templates(base + "author_templates.txt", templates);
  return build_edit_corpus(std::move(f), std::move(t));
}

EditExample make_edit_example(const std::vector<std::int32_t>& toks, EditLabels mode) {
  MEMCAP_ASSERT(toks.size() >= 2, "make_edit_example: a sentence needs at least two tokens");
  EditExample ex;
  ex.input_ids.assign(toks.begin(), toks.end() - 1);
  ex.labels.assign(toks.begin() + 1, toks.end());
  const std::size_t last = ex.labels.size() - 1;
  if (mode == EditLabels::last) {
    std::fill(ex.labels.begin(), ex.labels.begin() + static_cast<std::ptrdiff_t>(last), kEditIgnore);
  } else if (mode == EditLabels::all_but_last) {
    ex.labels[last] = kEditIgnore;
  }
  return ex;
}

EditSequences pack_edit_sequences(const EditCorpus& c, EditLabels mode) {
  EditSequences out;
  const std::int64_t F = c.num_facts(), K = c.num_templates();
  out.S = F * K;
  for (const auto& t : c.template_tokens)
    out.T = std::max<std::int64_t>(out.T, static_cast<std::int64_t>(t.size()) - 1);
  out.input_ids.assign(static_cast<std::size_t>(out.S * out.T), kEditIgnore);
  out.labels.assign(static_cast<std::size_t>(out.S * out.T), kEditIgnore);
  out.length.resize(static_cast<std::size_t>(out.S));
  out.fact.resize(static_cast<std::size_t>(out.S));
  out.tmpl.resize(static_cast<std::size_t>(out.S));
  out.book_pos.resize(static_cast<std::size_t>(out.S));
  std::vector<std::int32_t> slot(static_cast<std::size_t>(K), -1);  // per template: the {book} position
  for (std::int64_t k = 0; k < K; ++k) {
    const auto& tt = c.template_tokens[static_cast<std::size_t>(k)];
    const auto it = std::find(tt.begin(), tt.end(), EditCorpus::kBookSlot);
    require(it != tt.end(), "edit: template {} has no {{book}}", k);
    slot[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(it - tt.begin());
  }
  for (std::int64_t f = 0; f < F; ++f) {
    for (std::int64_t k = 0; k < K; ++k) {
      const std::int64_t s = f * K + k;
      const EditExample ex = make_edit_example(c.sentence(f, k), mode);
      std::copy(ex.input_ids.begin(), ex.input_ids.end(), out.input_ids.begin() + s * out.T);
      std::copy(ex.labels.begin(), ex.labels.end(), out.labels.begin() + s * out.T);
      out.length[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(ex.input_ids.size());
      out.fact[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(f);
      out.tmpl[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(k);
      out.book_pos[static_cast<std::size_t>(s)] = slot[static_cast<std::size_t>(k)];
    }
  }
  return out;
}

}  // namespace memcap::nn

// Columnar summary tables (see table.hpp).
#include "io/table.hpp"

#include <fmt/format.h>

#include <limits>

#include "core/error.hpp"

namespace memcap::io {

Row& Row::set(const std::string& name, Cell v) {
  for (auto& [n, c] : cells)
    if (n == name) {
      c = std::move(v);
      return *this;
    }
  cells.emplace_back(name, std::move(v));
  return *this;
}

const Cell* Row::get(const std::string& name) const {
  for (auto& [n, c] : cells)
    if (n == name) return &c;
  return nullptr;
}

double Row::number(const std::string& name) const {
  const Cell* c = get(name);
  if (!c) throw UserError(fmt::format("summary row has no column '{}'", name));
  if (auto* i = std::get_if<std::int64_t>(c)) return static_cast<double>(*i);
  if (auto* d = std::get_if<double>(c)) return *d;
  throw UserError(fmt::format("summary column '{}' is not numeric", name));
}

Table Table::from_rows(const std::vector<Row>& rows, std::size_t* filled) {
  Row missing;  // one cell per column: the value a row without it gets
  for (const Row& r : rows)
    for (const auto& [n, c] : r.cells)
      if (!missing.get(n))
        missing.set(n, std::visit(
                           [](const auto& x) -> Cell {
                             using T = std::decay_t<decltype(x)>;
                             if constexpr (std::is_same_v<T, std::int64_t>) return std::int64_t{-1};
                             else if constexpr (std::is_same_v<T, double>)
                               return std::numeric_limits<double>::quiet_NaN();
                             else return std::string();
                           },
                           c));
  Table t;
  std::size_t n_filled = 0;
  for (const Row& r : rows) {
    Row full;
    for (const auto& [n, m] : missing.cells) {
      const Cell* c = r.get(n);
      full.set(n, c ? *c : m);
      n_filled += c ? 0 : 1;
    }
    t.append(full);
  }
  if (filled) *filled = n_filled;
  return t;
}

std::size_t Table::rows() const {
  if (columns.empty()) return 0;
  return std::visit([](auto& v) { return v.size(); }, columns[0]);
}

void Table::append(const Row& r) {
  if (names.empty() && rows() == 0) {
    for (auto& [n, c] : r.cells) {
      names.push_back(n);
      std::visit([&](auto& x) {
        using T = std::decay_t<decltype(x)>;
        columns.emplace_back(std::vector<T>{});
      }, c);
    }
  }
  if (r.cells.size() != names.size())
    throw UserError(fmt::format("summary row has {} columns, table has {}", r.cells.size(), names.size()));
  // Validate every cell first so that a rejected row leaves the table unchanged.
  std::vector<const Cell*> cells(names.size());
  for (size_t k = 0; k < names.size(); ++k) {
    const Cell* c = r.get(names[k]);
    if (!c) throw UserError(fmt::format("summary row lacks column '{}'", names[k]));
    bool ok = std::visit([&](auto& col) {
      using V = typename std::decay_t<decltype(col)>::value_type;
      if (std::holds_alternative<V>(*c)) return true;
      if constexpr (std::is_same_v<V, double>) return std::holds_alternative<std::int64_t>(*c);
      return false;
    }, columns[k]);
    if (!ok) throw UserError(fmt::format("summary column '{}' changes type between rows", names[k]));
    cells[k] = c;
  }
  for (size_t k = 0; k < names.size(); ++k) {
    std::visit([&](auto& col) {
      using V = typename std::decay_t<decltype(col)>::value_type;
      if (auto* x = std::get_if<V>(cells[k])) col.push_back(*x);
      else if constexpr (std::is_same_v<V, double>) col.push_back(static_cast<double>(std::get<std::int64_t>(*cells[k])));
    }, columns[k]);
  }
}

Row Table::row(std::size_t i) const {
  Row r;
  for (size_t k = 0; k < names.size(); ++k)
    std::visit([&](auto& col) { r.cells.emplace_back(names[k], Cell(col.at(i))); }, columns[k]);
  return r;
}

const Column* Table::find(const std::string& name) const {
  for (size_t k = 0; k < names.size(); ++k)
    if (names[k] == name) return &columns[k];
  return nullptr;
}

std::vector<double> Table::numbers(const std::string& name) const {
  const Column* c = find(name);
  if (!c) throw UserError(fmt::format("summary has no column '{}'", name));
  if (auto* d = std::get_if<std::vector<double>>(c)) return *d;
  if (auto* i = std::get_if<std::vector<std::int64_t>>(c)) return {i->begin(), i->end()};
  throw UserError(fmt::format("summary column '{}' is not numeric", name));
}

std::vector<std::string> Table::strings(const std::string& name) const {
  const Column* c = find(name);
  if (!c) throw UserError(fmt::format("summary has no column '{}'", name));
  if (auto* s = std::get_if<std::vector<std::string>>(c)) return *s;
  throw UserError(fmt::format("summary column '{}' is not a string column", name));
}

void Table::write(h5::Group& g) const {
  std::string order;
  for (size_t k = 0; k < names.size(); ++k) {
    std::visit([&](auto& col) {
      using V = typename std::decay_t<decltype(col)>::value_type;
      if constexpr (std::is_same_v<V, std::string>) g.write(names[k], col);
      else g.write(names[k], std::span<const V>(col));
    }, columns[k]);
    order += (k ? "," : "") + names[k];
  }
  g.attr("columns", order);
  g.attr("rows", static_cast<std::int64_t>(rows()));
}

Table Table::read(const h5::Group& g) {
  Table t;
  std::vector<std::string> names;
  if (auto order = g.attr_string("columns")) {
    size_t start = 0;
    while (start <= order->size() && !order->empty()) {
      size_t c = order->find(',', start);
      names.push_back(order->substr(start, c == std::string::npos ? std::string::npos : c - start));
      if (c == std::string::npos) break;
      start = c + 1;
    }
  } else {
    names = g.list();
  }
  for (auto& n : names) {
    if (n.empty() || n.find('/') != std::string::npos)
      throw IoError(fmt::format("summary in '{}' lists a malformed column name '{}' (corrupt file?)", g.filename(), n));
    t.names.push_back(n);
    switch (g.dataset_kind(n)) {
      case 'f': t.columns.emplace_back(g.read_doubles(n)); break;
      case 'i': t.columns.emplace_back(g.read_int64s(n)); break;
      case 's': t.columns.emplace_back(g.read_strings(n)); break;
      default: throw IoError(fmt::format("summary column '{}' in '{}' has an unsupported type", n, g.filename()));
    }
    const std::size_t len = std::visit([](auto& v) { return v.size(); }, t.columns.back());
    if (len != t.rows())
      throw IoError(fmt::format("summary column '{}' in '{}' has {} rows, the first column {} (corrupt file?)", n,
                                g.filename(), len, t.rows()));
  }
  if (auto rows = g.attr_int("rows"); rows && !t.names.empty() && *rows != static_cast<std::int64_t>(t.rows()))
    throw IoError(fmt::format("summary in '{}' says it has {} rows but holds {} (corrupt file?)", g.filename(), *rows,
                              t.rows()));
  return t;
}

}  // namespace memcap::io

// Columnar tables: one summary row per job, written as /summary/<column> 1-D datasets so
// pandas.DataFrame({k: f["summary"][k][()] for k in f["summary"]}) loads them.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "io/h5.hpp"

namespace memcap::io {

using Cell = std::variant<std::int64_t, double, std::string>;

// One row: ordered (column, value) pairs.
struct Row {
  std::vector<std::pair<std::string, Cell>> cells;
  Row& set(const std::string& name, Cell v);        // replaces an existing column
  template <typename T>
    requires std::is_integral_v<T>
  Row& set(const std::string& name, T v) { return set(name, Cell(static_cast<std::int64_t>(v))); }
  Row& set(const std::string& name, double v) { return set(name, Cell(v)); }
  Row& set(const std::string& name, float v) { return set(name, Cell(static_cast<double>(v))); }
  Row& set(const std::string& name, const std::string& v) { return set(name, Cell(v)); }
  Row& set(const std::string& name, const char* v) { return set(name, Cell(std::string(v))); }
  const Cell* get(const std::string& name) const;
  double number(const std::string& name) const;     // int or double column as double (UserError if absent)
};

using Column = std::variant<std::vector<std::int64_t>, std::vector<double>, std::vector<std::string>>;

struct Table {
  std::vector<std::string> names;
  std::vector<Column> columns;

  std::size_t rows() const;
  void append(const Row& r);      // first row fixes the columns; later rows must match names and types
  // A table of rows whose column sets may differ (job records of another memcap version, in a resumed sweep or a
  // merge across an upgrade): every column in first-seen order, a cell a row lacks filled with NaN (float), -1
  // (integer) or "" (text); *filled (when given) counts the filled cells. Types must still agree (UserError).
  static Table from_rows(const std::vector<Row>& rows, std::size_t* filled = nullptr);
  Row row(std::size_t i) const;
  const Column* find(const std::string& name) const;
  std::vector<double> numbers(const std::string& name) const;  // numeric column as doubles
  std::vector<std::string> strings(const std::string& name) const;
  void write(h5::Group& g) const;                  // one dataset per column
  // Columns in the stored order (attr "columns"); IoError when a column is missing, of an
  // unsupported type or of another length than the first (a corrupt file).
  static Table read(const h5::Group& g);
};

}  // namespace memcap::io

// HDF5 side of fact sets: loading "FILE[:dataset]" tables with full validation, and writing /
// reading a FactSet group (keys, values, map, codes when they differ from values).
#include <fmt/format.h>

#include <filesystem>

#include "core/error.hpp"
#include "mlp/factset.hpp"

namespace memcap::mlp {

Eigen::MatrixXd load_table(const std::string& file_spec, const std::vector<std::string>& defaults,
                           const std::string& role) {
  std::string file = file_spec, dataset;
  // FILE:dataset, but leave a bare path (which may contain ':' in a folder name) alone when it exists.
  std::error_code ec;
  if (const auto colon = file_spec.rfind(':'); colon != std::string::npos && !std::filesystem::exists(file_spec, ec)) {
    file = file_spec.substr(0, colon);
    dataset = file_spec.substr(colon + 1);
  }
  require(!file.empty(), "--{} needs a file name (FILE or FILE:dataset), got '{}'", role, file_spec);
  h5::require_readable_file(file, role + " file");  // missing, a directory, permission denied: IoError
  if (!h5::is_hdf5(file))
    throw IoError(fmt::format("{} file '{}' is not an HDF5 file (expected an F x d dataset)", role, file));
  const h5::File f = h5::File::open_read(file);
  if (dataset.empty()) {
    for (const auto& name : defaults)
      if (f.exists(name) && f.is_dataset(name)) {
        dataset = name;
        break;
      }
    if (dataset.empty()) {
      std::string names;
      for (const auto& n : defaults) names += (names.empty() ? "" : " or ") + n;
      throw UserError(fmt::format("{} file '{}' has no dataset named {}; name one with {}:DATASET", role, file,
                                  names, file));
    }
  } else {
    require(f.exists(dataset) && f.is_dataset(dataset), "{} file '{}' has no dataset '{}'", role, file, dataset);
  }
  const auto shape = f.shape(dataset);
  require(shape.size() == 2, "{} dataset '{}:{}' must be 2-D (rows x d), it has {} dimensions", role, file,
          dataset, shape.size());
  require(f.dataset_kind(dataset) != 's', "{} dataset '{}:{}' holds strings, expected numbers", role, file,
          dataset);
  Eigen::MatrixXd t = f.read_matrix(dataset);
  check_table(t, fmt::format("{} dataset '{}:{}'", role, file, dataset));
  return t;
}

void write_factset(h5::Group& g, const FactSet& fs) {
  fs.validate();
  g.write("keys", fs.keys);
  g.write("values", fs.values);
  std::vector<std::int64_t> map(fs.map.data(), fs.map.data() + fs.map.size());
  g.write("map", std::span<const std::int64_t>(map));
  if (fs.codes.rows() != fs.values.rows() || fs.codes != fs.values) g.write("codes", fs.codes);
  g.attr("F", fs.F());
  g.attr("P", fs.P());
  g.attr("d", fs.d());
  g.attr("tied", fs.tied);
  g.attr("source", fs.source);
}

FactSet read_factset(const h5::Group& g) {
  for (const char* name : {"keys", "values", "map"})
    if (!g.exists(name))
      throw IoError(fmt::format("'{}' has no fact set dataset {}/{} (write one with hebb build)", g.filename(),
                                g.path(), name));
  FactSet fs;
  fs.keys = g.read_matrix("keys");
  fs.values = g.read_matrix("values");
  fs.codes = g.exists("codes") ? g.read_matrix("codes") : fs.values;
  require(g.dataset_kind("map") == 'i', "'{}': {}/map is not an integer dataset (it holds row indices of the value "
          "table)", g.filename(), g.path());
  const auto map = g.read_int64s("map");
  fs.map.resize(static_cast<Eigen::Index>(map.size()));
  for (std::size_t i = 0; i < map.size(); ++i) {
    if (map[i] < 0 || map[i] >= static_cast<std::int64_t>(fs.values.rows()))
      throw IoError(fmt::format("'{}': {}/map[{}] = {} is outside [0, {}) (corrupt file?)", g.filename(), g.path(), i,
                                map[i], fs.values.rows()));
    fs.map[static_cast<Eigen::Index>(i)] = static_cast<int>(map[i]);
  }
  fs.tied = g.attr_int("tied").value_or(0) != 0;
  fs.source = g.attr_string("source").value_or("sphere");
  fs.validate();
  return fs;
}

}  // namespace memcap::mlp

// Units and one-line descriptions of the datasets memcap writes (/summary columns, /grid arrays,
// /runs arrays), attached as CF-style `units` and `long_name` attributes so xarray and pandas users
// can read a result without the docs open; plus the /summary `row` dimension scale.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "io/h5.hpp"
#include "io/table.hpp"

namespace memcap::io {

struct Description {
  std::string unit;  // CF units: "1" dimensionless, "s", "count", ...; "" = none/unknown
  std::string text;  // one line
};

// The description of a dataset by name. `context` is the parent group's name (e.g. "probes"):
// "context/name" entries win over plain "name" ones. Unknown names get an empty unit and a
// generic text, and *known (when given) is set to false.
Description describe(const std::string& name, const std::string& context = "", bool* known = nullptr);

// Every registered name (for tests and docs).
std::vector<std::string> described_names();

// Writes `units` and `long_name` on every dataset below `root` that has no `units` yet.
void annotate_datasets(h5::Group& root);

// /summary/row (0..n-1), made a dimension scale and attached to every column of `summary`, so
// xarray opens the group (also with the h5netcdf engine) as a Dataset over dimension `row`.
void write_row_scale(h5::Group& summary, const Table& t);

// Root attributes naming the libraries this binary was built with: hdf5_version, eigen_version,
// openblas_version and compiler (the CUDA version is write_provenance's cuda_version).
void write_library_versions(h5::Group& root);

// The scalar number and string attributes of an object (arrays and other types are left out), and
// their writer: merge keeps each input's root attributes under /provenance/shard<i>.
std::vector<std::pair<std::string, Cell>> read_attributes(const h5::Group& g);
void write_attributes(h5::Group& g, const std::vector<std::pair<std::string, Cell>>& attrs);

}  // namespace memcap::io

// /grid/<quantity>: N-D arrays over named axes built from a summary table, with each axis
// written as a 1-D dataset /grid/<axis> and attached as an HDF5 dimension scale.
#pragma once
#include <string>
#include <vector>

#include "io/h5.hpp"
#include "io/table.hpp"

namespace memcap::io {

// For every quantity column, an array indexed by the sorted unique values of each axis column
// (numeric axes only); cells with no job are NaN; duplicate cells keep the last row.
void write_grid(h5::Group& root, const Table& summary, const std::vector<std::string>& axes,
                const std::vector<std::string>& quantities);

}  // namespace memcap::io

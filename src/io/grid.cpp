// Summary table -> labelled N-D /grid arrays with dimension scales (see grid.hpp).
#include "io/grid.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.hpp"

namespace memcap::io {

void write_grid(h5::Group& root, const Table& summary, const std::vector<std::string>& axes,
                const std::vector<std::string>& quantities) {
  if (axes.empty() || quantities.empty() || summary.rows() == 0) return;
  h5::Group grid = root.child("grid");
  const size_t n = summary.rows();
  std::vector<std::vector<double>> axis_vals;  // sorted unique values
  std::vector<std::vector<size_t>> pos(axes.size(), std::vector<size_t>(n));
  std::vector<std::int64_t> shape;
  for (size_t a = 0; a < axes.size(); ++a) {
    auto col = summary.numbers(axes[a]);
    std::vector<double> u = col;
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    for (size_t r = 0; r < n; ++r)
      pos[a][r] = static_cast<size_t>(std::lower_bound(u.begin(), u.end(), col[r]) - u.begin());
    shape.push_back(static_cast<std::int64_t>(u.size()));
    grid.write(axes[a], std::span<const double>(u));
    axis_vals.push_back(std::move(u));
  }
  size_t total = 1;
  for (auto s : shape) total *= static_cast<size_t>(s);
  for (auto& q : quantities) {
    if (!summary.find(q)) continue;
    auto vals = summary.numbers(q);
    std::vector<double> arr(total, std::numeric_limits<double>::quiet_NaN());
    for (size_t r = 0; r < n; ++r) {
      size_t idx = 0;
      for (size_t a = 0; a < axes.size(); ++a) idx = idx * static_cast<size_t>(shape[a]) + pos[a][r];
      arr[idx] = vals[r];
    }
    grid.write_nd(q, arr, shape);
    grid.attach_scales(q, axes);
  }
  std::string ax;
  for (size_t a = 0; a < axes.size(); ++a) ax += (a ? "," : "") + axes[a];
  grid.attr("axes", ax);
}

}  // namespace memcap::io

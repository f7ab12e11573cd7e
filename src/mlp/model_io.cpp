// Writing and reading the /mlp group of a built model (layout in model_io.hpp).
#include "mlp/model_io.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "sweep/sweep.hpp"

namespace memcap::mlp {

void write_mlp(h5::Group& g, const GatedMLP& mlp, std::uint64_t seed) {
  mlp.validate();
  h5::WriteOptions z{true, 0};
  g.write("A", mlp.A, z);
  g.write("G", mlp.G, z);
  g.write("B", mlp.B, z);
  auto vec = [&](const char* name, const Eigen::VectorXd& v) {
    if (v.size()) g.write(name, std::span<const double>(v.data(), static_cast<std::size_t>(v.size())));
  };
  vec("bias_up", mlp.bias_up);
  vec("bias_gate", mlp.bias_gate);
  vec("bias_out", mlp.bias_out);
  g.attr("method", mlp.method);
  g.attr("params", mlp.param_count);
  g.attr("gate", mlp.gate);
  g.attr("solver", mlp.solver_note);
  g.attr("width", mlp.width());
  g.attr("dim", mlp.dim());
  g.attr("seed", static_cast<std::int64_t>(seed));
}

GatedMLP read_mlp(const h5::Group& g) {
  for (const char* name : {"A", "G", "B"})
    if (!g.exists(name))
      throw IoError(fmt::format("'{}' has no MLP weights {}/{} (write them with hebb build)", g.filename(),
                                g.path(), name));
  // shapes from the file's metadata before any read: a compressed dataset can claim far more rows than its bytes
  // on disk, and a wrong one should be named, not reported as a mismatch of another matrix
  auto shown = [](const std::vector<std::int64_t>& s) {
    if (s.empty()) return std::string("a scalar or an empty (null) dataspace");
    std::string t;
    for (auto x : s) t += (t.empty() ? "" : " x ") + std::to_string(x);
    return t;
  };
  const auto sa = g.shape("A"), sg = g.shape("G"), sb = g.shape("B");
  require(sa.size() == 2 && sa[0] >= 1 && sa[1] >= 1, "'{}': {}/A is {}; expected a matrix m x d", g.filename(),
          g.path(), shown(sa));
  require(sg == sa, "'{}': {}/G is {}; expected the shape of {}/A ({})", g.filename(), g.path(), shown(sg), g.path(),
          shown(sa));
  require(sb.size() == 2 && sb[0] >= 1 && sb[1] == sa[0], "'{}': {}/B is {}; expected d_c x {} (m = the rows of A)",
          g.filename(), g.path(), shown(sb), sa[0]);
  sweep::require_memory(8.0 * (2.0 * static_cast<double>(sa[0]) * static_cast<double>(sa[1]) +
                               static_cast<double>(sb[0]) * static_cast<double>(sb[1])),
                        fmt::format("reading the MLP of '{}' ({} hidden units)", g.filename(), sa[0]));
  GatedMLP mlp;
  mlp.A = g.read_matrix("A");
  mlp.G = g.read_matrix("G");
  mlp.B = g.read_matrix("B");
  auto vec = [&](const char* name) {
    if (!g.exists(name)) return Eigen::VectorXd();
    const auto v = g.read_doubles(name);
    return Eigen::VectorXd(Eigen::Map<const Eigen::VectorXd>(v.data(), static_cast<Eigen::Index>(v.size())));
  };
  mlp.bias_up = vec("bias_up");
  mlp.bias_gate = vec("bias_gate");
  mlp.bias_out = vec("bias_out");
  mlp.method = g.attr_string("method").value_or("");
  mlp.gate = g.attr_string("gate").value_or("identity");
  mlp.solver_note = g.attr_string("solver").value_or("");
  mlp.param_count = g.attr_int("params").value_or(0);
  mlp.validate();
  // the count reported beside the margins must be one the weights can have: spec §3.7's 3md (+ 2m + d with
  // biases), or every stored weight; 0 (or no attribute) means not recorded
  const std::int64_t m = mlp.A.rows(), d = mlp.A.cols();
  const std::int64_t stored = mlp.A.size() + mlp.G.size() + mlp.B.size() + mlp.bias_up.size() +
                              mlp.bias_gate.size() + mlp.bias_out.size();
  if (mlp.param_count != 0)
    require(mlp.param_count == 3 * m * d || mlp.param_count == 3 * m * d + 2 * m + d || mlp.param_count == stored,
            "'{}': {} says params = {}, which weights of m = {}, d = {} cannot have (3md = {}, 3md + 2m + d = {}, "
            "stored {})",
            g.filename(), g.path(), mlp.param_count, m, d, 3 * m * d, 3 * m * d + 2 * m + d, stored);
  return mlp;
}

}  // namespace memcap::mlp

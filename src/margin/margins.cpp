// Tiled margin computation: per tile of output rows one GEMM S = V Ŷ_tileᵀ (P x tile), then a
// parallel scan of each row for the correct score, the best competitor and the argmax.
#include "margin/margins.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"

namespace memcap::margin {

const char* to_string(MarginConvention c) {
  switch (c) {
    case MarginConvention::kernel_memory: return "kernel";
    case MarginConvention::normalized_output: return "normalized";
    case MarginConvention::raw_output: return "raw";
  }
  return "?";
}

MarginConvention parse_convention(const std::string& s) {
  if (s == "kernel" || s == "kernel_memory") return MarginConvention::kernel_memory;
  if (s == "normalized" || s == "normalized_output") return MarginConvention::normalized_output;
  if (s == "raw" || s == "raw_output") return MarginConvention::raw_output;
  throw UserError(fmt::format("unknown margin convention '{}': use kernel, normalized or raw", s));
}

MarginResult margins_from_outputs(const Eigen::MatrixXd& outputs, const Eigen::MatrixXd& values,
                                  const Eigen::VectorXi& map, MarginConvention conv, std::int64_t tile) {
  const Eigen::Index F = outputs.rows(), P = values.rows();
  require(outputs.cols() == values.cols(), "margins: outputs have {} columns, values {}", outputs.cols(),
          values.cols());
  require(map.size() == F, "margins: map has {} entries for {} outputs", map.size(), F);
  require(P >= 2, "margins need at least 2 values to have a competitor (P = {})", P);
  require(tile >= 0, "margins: tile must be >= 0 (got {})", tile);
  for (Eigen::Index i = 0; i < F; ++i)
    require(map[i] >= 0 && map[i] < P, "margins: map[{}] = {} outside [0, {})", i, map[i], P);
  // Automatic tile: about 128 MiB of scores, at most 1024 rows (the GEMM runs near peak from
  // ~256 rows on; measured with OpenBLAS at P = 16,384, d = 128).
  if (tile == 0) tile = std::clamp<std::int64_t>((std::int64_t(1) << 24) / P, 16, 1024);

  MarginResult r;
  r.per_key.resize(F);
  r.worst.resize(F);
  r.argmax.resize(F);
  // Scores are formed transposed, St = V Ŷ_tileᵀ (P x n, column-major), so the scan of key i
  // reads one contiguous column.
  Eigen::MatrixXd Y, Yt, St;
  for (Eigen::Index r0 = 0; r0 < F; r0 += tile) {
    const Eigen::Index n = std::min<Eigen::Index>(tile, F - r0);
    Y = outputs.middleRows(r0, n);
    if (conv == MarginConvention::normalized_output)
      for (Eigen::Index i = 0; i < n; ++i) Y.row(i) /= std::max(Y.row(i).norm(), 1e-8);
    Yt = Y.transpose();  // explicit d x n operand: no transposed-B GEMM (slower in OpenBLAS here)
    St.resize(P, n);
    St.noalias() = values * Yt;
#pragma omp parallel for schedule(static) if (n * P > 65536)
    for (Eigen::Index i = 0; i < n; ++i) {
      const Eigen::Index gi = r0 + i, fi = map[gi];
      const double* s = St.col(i).data();
      double best = -std::numeric_limits<double>::infinity();
      Eigen::Index ja = -1;
      for (Eigen::Index j = 0; j < P; ++j)
        if (s[j] > best) best = s[j], ja = j;
      // Best competitor: the argmax unless it is the correct value, then the best of the rest.
      double best_other = best;
      Eigen::Index jo = ja;
      if (ja == fi || ja < 0) {
        best_other = -std::numeric_limits<double>::infinity();
        jo = -1;
        for (Eigen::Index j = 0; j < P; ++j)
          if (j != fi && s[j] > best_other) best_other = s[j], jo = j;
      }
      if (ja < 0) ja = 0;  // all NaN: no argmax
      if (jo < 0) jo = fi == 0 ? 1 : 0;
      r.per_key[gi] = s[fi] - best_other;
      r.worst[gi] = static_cast<int>(jo);
      r.argmax[gi] = static_cast<int>(ja);
    }
  }
  std::int64_t correct = 0;
  for (Eigen::Index i = 0; i < F; ++i) correct += r.argmax[i] == map[i];
  r.accuracy = F ? static_cast<double>(correct) / static_cast<double>(F) : 0.0;
  r.min_margin = F ? r.per_key.minCoeff() : 0.0;
  if (F && !r.per_key.allFinite()) r.min_margin = std::numeric_limits<double>::quiet_NaN();
  return r;
}

Eigen::MatrixXd kernel_memory_outputs(const Eigen::MatrixXd& phi_keys, const Eigen::MatrixXd& phi_queries,
                                      const Eigen::MatrixXd& targets) {
  require(phi_keys.cols() == phi_queries.cols(), "kernel memory: key features have {} columns, queries {}",
          phi_keys.cols(), phi_queries.cols());
  require(phi_keys.rows() == targets.rows(), "kernel memory: {} key features but {} targets", phi_keys.rows(),
          targets.rows());
  Eigen::MatrixXd T(phi_keys.cols(), targets.cols());  // m x d
  T.noalias() = phi_keys.transpose() * targets;
  Eigen::MatrixXd Y(phi_queries.rows(), targets.cols());
  Y.noalias() = phi_queries * T;
  return Y;
}

Eigen::MatrixXd noisy_queries(const Eigen::MatrixXd& keys, double eps, std::uint64_t noise_seed) {
  require(std::isfinite(eps) && eps >= 0, "noise eps must be finite and >= 0 (got {})", eps);
  if (eps == 0) return keys;
  return keys + eps * rng::sphere_rows(keys.rows(), keys.cols(), noise_seed, rng::kNoise);
}

SignalCrosstalk signal_crosstalk(const Eigen::MatrixXd& phi_keys, const Eigen::MatrixXd& phi_queries,
                                 const Eigen::MatrixXd& outputs, const Eigen::MatrixXd& values,
                                 const Eigen::MatrixXd& targets, const Eigen::VectorXi& map,
                                 const Eigen::VectorXi& worst) {
  const Eigen::Index F = phi_keys.rows();
  require(phi_queries.rows() == F && outputs.rows() == F && targets.rows() == F && map.size() == F &&
              worst.size() == F,
          "signal_crosstalk: every input needs F = {} rows", F);
  SignalCrosstalk sc;
  sc.signal.resize(F);
  sc.crosstalk.resize(F);
  for (Eigen::Index i = 0; i < F; ++i) {
    const Eigen::RowVectorXd a = values.row(map[i]) - values.row(worst[i]);
    const double kii = phi_keys.row(i).dot(phi_queries.row(i));
    sc.signal[i] = kii * a.dot(targets.row(i));
    sc.crosstalk[i] = a.dot(outputs.row(i)) - sc.signal[i];
  }
  return sc;
}

}  // namespace memcap::margin

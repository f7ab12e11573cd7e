// Per-key margins, worst competitors and argmax accuracy over all P values (spec hebbian.md §3.1),
// for the three output conventions, plus kernel-memory outputs and the noisy queries of §3.2.
// Scores are streamed in row tiles (memory O(tile x P), one BLAS GEMM per tile), float64.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>

namespace memcap::margin {

// §3.1: kernel_memory = ŷ_i = Σ_t K̂_ti c_f(t) (no 1/F; outputs are computed by
// kernel_memory_outputs and used as given); normalized_output = MLP(k_i)/max(||MLP(k_i)||,1e-8);
// raw_output = MLP(k_i) as is (accuracy is scale-free; margins carry the MLP's scale).
enum class MarginConvention { kernel_memory, normalized_output, raw_output };

const char* to_string(MarginConvention c);  // "kernel" | "normalized" | "raw"
// Parses kernel|normalized|raw (also the enum names); UserError otherwise.
MarginConvention parse_convention(const std::string& s);

struct MarginResult {
  Eigen::VectorXd per_key;  // γ_i = <ŷ_i, v_f(i)> - max_{j≠f(i)} <ŷ_i, v_j>
  Eigen::VectorXi worst;    // j*(i): the competitor attaining that max (smallest index on ties)
  Eigen::VectorXi argmax;   // argmax_j <ŷ_i, v_j> over ALL P values (smallest index on ties)
  double min_margin = 0;    // min_i γ_i
  double accuracy = 0;      // fraction of keys with argmax == f(i)
};

// outputs: F x d rows ŷ_i (one per key i); values: P x d (the whole value table; a tied key's own
// vector stays a competitor); map: F entries. tile = rows per score block (0 = automatic, about
// 128 MiB of scores, 16..1024 rows). Requires P >= 2.
MarginResult margins_from_outputs(const Eigen::MatrixXd& outputs, const Eigen::MatrixXd& values,
                                  const Eigen::VectorXi& map, MarginConvention conv, std::int64_t tile = 0);

// Kernel-memory outputs ŷ = (Φ_Q Φ_Kᵀ) C_f, computed as Φ_Q (Φ_Kᵀ C_f) (never forms the Q x F Gram).
// phi_keys: F x m, phi_queries: Q x m, targets: F x d (row t = c_f(t)).
Eigen::MatrixXd kernel_memory_outputs(const Eigen::MatrixXd& phi_keys, const Eigen::MatrixXd& phi_queries,
                                      const Eigen::MatrixXd& targets);

// §3.2: k̃_i = k_i + eps u_i, u_i uniform on the sphere from (noise_seed, stream rng::kNoise), row i
// of the draw always the same for a given (noise_seed, d), whatever eps or the run seed.
Eigen::MatrixXd noisy_queries(const Eigen::MatrixXd& keys, double eps, std::uint64_t noise_seed = 123);
inline constexpr std::uint64_t kNoiseSeed = 123;

// Signal / cross-talk at the worst competitor (Eq. 25), kernel-memory convention:
// a = v_f(i) - v_j*(i), signal_i = K̂_ii <a, c_f(i)> with K̂_ii = <φ(k_i), φ(q_i)>, and
// crosstalk_i = Σ_{t≠i} K̂_ti <a, c_f(t)> = <a, ŷ_i> - signal_i, so signal + crosstalk = γ_i.
struct SignalCrosstalk {
  Eigen::VectorXd signal, crosstalk;
};
SignalCrosstalk signal_crosstalk(const Eigen::MatrixXd& phi_keys, const Eigen::MatrixXd& phi_queries,
                                 const Eigen::MatrixXd& outputs, const Eigen::MatrixXd& values,
                                 const Eigen::MatrixXd& targets, const Eigen::VectorXi& map,
                                 const Eigen::VectorXi& worst);

}  // namespace memcap::margin

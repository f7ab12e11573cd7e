// Gated one-hidden-layer MLP  MLP(x) = B((A x + b_up) ⊙ σ(G x + b_gate)) + b_out  (spec §1.5) and the
// bilinear random feature map g(x) = s (A0 x) ⊙ (A1 x) (spec §2) shared by the Hebbian constructions.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>

namespace memcap::mlp {

struct GatedMLP {
  Eigen::MatrixXd A;  // m x d ("up"/value branch)
  Eigen::MatrixXd G;  // m x d (gate branch)
  Eigen::MatrixXd B;  // d_c x m (readout)
  std::string gate = "identity";   // identity | relu | silu (x·sigmoid(x))
  Eigen::VectorXd bias_up, bias_gate, bias_out;  // empty = no bias; NTK: zeros (counted in params)
  std::int64_t param_count = 0;    // spec §3.7 convention of the construction
  std::string method;              // method spec text, verbatim
  std::string solver_note;         // which solver ran (whitened readout, CG), empty if none

  std::int64_t width() const { return A.rows(); }
  std::int64_t dim() const { return A.cols(); }
  // Hidden features φ(x) = (A x + b_up) ⊙ σ(G x + b_gate), one row per row of X (n x m).
  Eigen::MatrixXd hidden(const Eigen::MatrixXd& X) const;
  // Outputs, one row per row of X (n x d_c). Processes X in row blocks to bound memory.
  Eigen::MatrixXd forward(const Eigen::MatrixXd& X) const;
  // Shapes and finiteness (UserError otherwise).
  void validate() const;
};

// Ask the kernel for transparent huge pages on a large, not yet touched matrix (THP "madvise"
// mode): first-touch page faults of a multi-GiB Φ or Gram otherwise cost more than its GEMM.
void advise_huge_pages(Eigen::MatrixXd& m);

struct BilinearFeatureMap {
  Eigen::MatrixXd A0, A1;  // m x d
  double scale = 1;        // 1/sqrt(m) for the random variants, 1 for data-dependent

  std::int64_t width() const { return A0.rows(); }
  // Rows g(x) = scale (X A0ᵀ) ⊙ (X A1ᵀ)  (n x m).
  Eigen::MatrixXd apply(const Eigen::MatrixXd& X) const;
  // A0, A1 ~ N(0,1) from streams rng::kFeatureA0 / rng::kFeatureA1 of `seed`.
  static BilinearFeatureMap random(std::int64_t m, std::int64_t d, std::uint64_t seed, bool scaled);
  // As a gated MLP with identity gate and readout W (d_c x m): A = √s A0, G = √s A1, B = W.
  GatedMLP as_mlp(const Eigen::MatrixXd& W) const;
};

}  // namespace memcap::mlp

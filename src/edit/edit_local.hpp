// Local editors of the fact expert's output matrix W_out = fact.D (spec hebbian.md §4.9): MEMIT,
// AlphaEdit and ROME as the paper's code writes them. Keys k = the expert's hidden activation at the
// last position of each fact's train prompt; target residuals r = free vectors added to the expert's
// output there, optimized with Adam on the CE of the new author (all other weights frozen); then a
// closed-form update ΔW (d × h). CPU float64.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

#include "edit/edit_metrics.hpp"
#include "edit/edit_model.hpp"
#include "nn/edit_data.hpp"

namespace memcap::edit {

struct LocalEditConfig {
  std::string method = "memit";   // memit | alphaedit | rome
  std::int64_t steps = 100;       // Adam steps of the residual optimization
  double lr = 0.05;
  double weight_decay = 0;        // Adam (L2) weight decay on r
  double early_stop = 0;          // stop a fact's optimization once its loss < this (0 = never)
  double clip = 0;                // ||r_a|| <= clip ||W_out k_a|| (0 = no clip)
  double lambda = 150;            // MEMIT: weight of the preserved-key covariance
  double tol = 10;                // AlphaEdit: null space = singular values of K_p K_pᵀ below tol
  std::int64_t batch = 256;       // sequences per forward
  void validate() const;          // UserError naming the flag
};

struct LocalEditResult {
  Eigen::MatrixXd delta;          // ΔW (d × h), to add to W_out
  Eigen::MatrixXd residuals;      // R (d × n_a), the optimized residuals
  Eigen::MatrixXd keys_altered;   // K_a (h × n_a)
  Eigen::MatrixXd keys_preserved; // K_p (h × n_p)
  double residual_loss = 0;       // mean final CE of the altered facts' train prompts with their residuals
  std::int64_t converged = 0;     // facts whose loss went below early_stop (0 without early stop)
  double residual_norm = 0;       // mean ||r_a||
  std::int64_t null_dim = -1;     // AlphaEdit: dimension of the null space kept
  double wall_s = 0;
};

// The closed-form step shared by the CPU and GPU editors (CPU float64, Eigen): from K_p K_pᵀ and K_a K_aᵀ
// (h × h, computed by the caller: Eigen on the CPU path, cuBLAS DGEMM on the GPU path), K_a (h × n_a), the
// residuals R (d × n_a) and n_p: res.delta (MEMIT, AlphaEdit, ROME as described above) and, for AlphaEdit,
// res.null_dim. NumericError for a non-positive ROME denominator (naming fact n_p + a) or a non-finite ΔW.
void local_closed_form(const LocalEditConfig& cfg, const Eigen::MatrixXd& KpKpT, const Eigen::MatrixXd& KaKaT,
                       const Eigen::MatrixXd& Ka, const Eigen::MatrixXd& R, std::int64_t np, LocalEditResult& res);

// The altered facts of `set` get residuals toward author_token[target_fact]; the model is not changed.
// UserError when the edit set has no preserved facts (C_p undefined); NumericError naming the fact on a
// non-finite residual loss or a non-positive ROME denominator.
LocalEditResult local_edit(EditModel& model, const nn::EditSequences& seqs, const EditSet& set,
                           const std::vector<std::int32_t>& author_token, const LocalEditConfig& cfg);

}  // namespace memcap::edit

// The Gated Sparse Update memory of RAM-Net (spec ramnet.md §1.6–1.7, §5.6–5.8), float64 throughout:
// per slot a mass m(a) and a state s(a) ∈ R^dv,
//   g = σ(logit(1 − w) − γ),  m ← g m + w,  s ← s + w/(m + ε) (v − s),
// with the gate in closed form and 1 − w computed without cancellation, the standard readout Σ r s and
// the mass-aware readout Σ r m s / (Σ r m + ε) (0/0 → 0, counted), dense storage (all dp^U slots,
// |A| small) or sparse storage (hash map slot → row, rows made on first write: Top-K or hard writes).
// Token-to-token weights α_{t,s} induced by a memory (§1.7) come from the same code with probe values
// v_s = e_s (dv = T): the readout is then the row α_{t,·}, exactly, for any γ, ε and readout.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ramnet/address.hpp"

namespace memcap::ramnet {

enum class Readout { standard, mass };
Readout parse_readout(const std::string& name);  // "standard" | "mass"; UserError otherwise
const char* readout_name(Readout r);

// Closed-form retention gate (§1.6, §5.6): g = (1−w)/((1−w) + w e^γ), or (1−w)e^{−γ}/((1−w)e^{−γ} + w)
// for γ > 0. w = 0 → 1 for every γ; 1 − w = 0 → 0 for finite γ; γ = −inf → 1 (cumulative averaging,
// §2.9, also for w = 1). one_minus_w must be 1 − w computed accurately by the caller.
double gsu_gate(double w, double one_minus_w, double gamma);

// A sparse distribution over addresses for one token: slots with probabilities p and 1 − p.
// Writes use p = w and one_minus_p; reads use p = r (one_minus_p may be empty).
struct AddressWeights {
  std::vector<std::int64_t> slot;
  std::vector<double> p, one_minus_p;
  void clear() {
    slot.clear();
    p.clear();
    one_minus_p.clear();
  }
  std::size_t size() const { return slot.size(); }
};

// Builds AddressWeights from a token's U×dp log-probability table (row-major, as factor_rows).
// 1 − Π_u p_u(a_u) = −expm1(Σ_u log1p(−d_u(a_u))), d_u(j) = Σ_{l≠j} p_u(l) summed directly (§5.6).
class AddressWeightsBuilder {
 public:
  AddressWeightsBuilder(int dp, int U);
  // Every address (dense, dp^U entries; call require_dense first).
  void full(const double* table, AddressWeights& out, bool complement = true);
  // The K addresses of a Top-K list (flat indices and log-probabilities from TopKDecoder).
  void topk(const double* table, const std::int64_t* flat, const double* log_prob, std::int64_t K,
            AddressWeights& out, bool complement = true);
  // Hard write (β_w → ∞, §2.8): one slot with w = 1 exactly, 1 − w = 0.
  static void hard(std::int64_t slot, AddressWeights& out);

 private:
  void complements(const double* table);  // fills lc_ (U×dp log1p(−d_u(j)))
  int dp_, U_;
  std::vector<double> lc_, buf_;
};

// The address of the nearest code per block (hard-write limit, §2.8): a_u = nearest_code (theory.hpp:
// argmax_j c_j·x_u, ties within a few ulp to the lowest index, §5.10).
std::int64_t hard_address(const Codebook& C, const double* x, int U);

struct GsuStep {
  double lambda_min = 1, lambda_max = 0;  // range of λ = w/(m+ε) over the written slots
};

class GsuMemory {
 public:
  // addresses = dp^U; dense = store every slot (require_dense first), else a hash map of written slots.
  GsuMemory(std::int64_t addresses, int dv, bool dense, double eps);
  int dv() const { return dv_; }
  double eps() const { return eps_; }
  bool dense() const { return dense_; }

  // One token: write v (dv doubles) with weights ws at retention bias gamma. lambda (optional, ws.size()
  // doubles) receives λ = w/(m+ε) per written slot (0 when m + ε = 0).
  GsuStep write(const AddressWeights& ws, const double* v, double gamma, double* lambda = nullptr);

  // Readout over a read set (r = rs.p, not renormalised); out: dv doubles. Returns the denominator
  // Σ r m over the read set; a read with Σ r m = 0 (no read-selected slot written) gives 0 and is counted.
  double read(const AddressWeights& rs, Readout readout, double* out);
  // The same without counting (safe to call from several threads at once).
  double peek(const AddressWeights& rs, Readout readout, double* out) const;
  std::int64_t empty_reads() const { return empty_reads_; }

  double mass(std::int64_t slot) const;
  const double* state(std::int64_t slot) const;  // nullptr: never written (state 0)
  std::int64_t addresses() const { return addresses_; }
  std::int64_t stored_slots() const { return static_cast<std::int64_t>(m_.size()); }
  // Every stored slot (dense: all) with its mass and state.
  template <class F>
  void for_each_slot(F&& f) const {
    if (dense_)
      for (std::int64_t a = 0; a < addresses_; ++a) f(a, m_[static_cast<std::size_t>(a)], s_.data() + a * dv_);
    else
      for (const auto& [a, row] : index_) f(a, m_[static_cast<std::size_t>(row)], s_.data() + row * dv_);
  }

 private:
  std::int64_t row_of(std::int64_t slot, bool create);
  std::int64_t find_row(std::int64_t slot) const;  // −1: not stored
  std::int64_t addresses_;
  int dv_;
  bool dense_;
  double eps_;
  std::vector<double> m_, s_;
  std::unordered_map<std::int64_t, std::int64_t> index_;
  std::int64_t empty_reads_ = 0;
};

// Induced token weights (§1.7) by probe values: T writes (writes[s]) into a fresh memory, then
//  final:  n reads after the last write → α is n×T;
//  causal: read t right after write t (reads.size() == T) → α is T×T, lower triangular.
// Each row is the readout with v_s = e_s, i.e. o = α·V for any values V. empty_reads (optional) counts
// reads with Σ r m = 0.
Eigen::MatrixXd induced_weights(std::int64_t addresses, bool dense, const std::vector<AddressWeights>& writes,
                                const std::vector<AddressWeights>& reads, Readout readout, double gamma, double eps,
                                bool causal, std::int64_t* empty_reads = nullptr);

}  // namespace memcap::ramnet

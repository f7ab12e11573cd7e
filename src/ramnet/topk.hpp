// Exact Top-K over the product address space (spec ramnet.md §1.5, §5.5): the K most probable
// addresses of r(a) = Π_u p_u(a_u) without enumerating dp^U slots — per-factor sorted log-probs and a
// best-first search on the U-dimensional rank lattice (max-heap + open-addressing visited set) — the
// dense enumerate-and-select reference it is tested and benchmarked against, the truncated kernel
// κ_A^K = |A| Σ_{a ∈ TopK(r) ∩ TopK(w)} r(a) w(a) by intersecting two K-lists, and retained masses.
//
// Order: best first by score, ties broken by the smaller flat index (§1.5 [C]); scores on a fixed-point
// grid (below), so the heap decoder and the dense reference agree exactly, also on ties. Tables are
// U×dp log-probabilities stored row-major (row u contiguous): the layout of factor_rows().
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ramnet/address.hpp"

namespace memcap::ramnet {

// Row-major U×dp table of log p_b(j | x^(u)) for a 2U vector x (U*dp doubles into out).
void factor_rows(const Codebook& C, double b, const double* x, int U, double* out);
// The same from an Eigen U×dp table (any storage order).
std::vector<double> factor_rows(const Eigen::MatrixXd& table);

// How the best-first search avoids pushing a lattice point twice (both exact, both tested):
//  visited — the spec's form (§1.5): every popped point pushes its U successors, an open-addressing
//            hash set of flat indices drops repeats (≤ K·U pushes);
//  tree    — each point has one canonical parent (decrement its highest nonzero rank), so a popped
//            point pushes only the successors that increment a coordinate ≥ its highest nonzero one:
//            no visited set, fewer pushes. Correct because the parent precedes the child in the order.
//            For K ≤ 64 with packable ranks (the common case) the new-coordinate children are chained as
//            siblings, so a pop pushes at most 3 points (topk.cpp, search_fast).
// Candidates go to a bounded sorted frontier for K ≤ 64 (dropped once K − pops better ones wait), to a
// binary heap otherwise.
enum class TopKSearch { tree, visited };
TopKSearch parse_topk_search(const std::string& name);  // "tree" | "visited"; UserError otherwise
const char* topk_search_name(TopKSearch s);

// Scores are ordered on a fixed-point grid: each factor log-prob is rounded to a multiple of 2^-40
// (values are clamped to [−4096, 4096]: probabilities below e^−4096 are 0 in double anyway) and summed in
// int64, exactly and in any order. Addresses whose rounded scores are equal are ties and come out by
// smaller flat index; reported log-probabilities are the unrounded double sums Σ_u log p_u (u = 0..U−1).
// (With double sums, rounding can make a predecessor tie its successor with a larger flat index,
// which breaks the best-first invariant; integer sums cannot.)
inline constexpr double kTopKScoreScale = 1099511627776.0;  // 2^40
inline constexpr double kTopKLogFloor = -4096.0;

// Best-first K-best decoder with all scratch allocated once (no allocation per query).
// Cost per query O(U dp log dp + K U log(KU)): K pops, at most 1 + (K−1)·U pushes.
class TopKDecoder {
 public:
  TopKDecoder(int dp, int U, std::int64_t K, TopKSearch search = TopKSearch::tree);  // K in [1, dp^U]
  int dp() const { return dp_; }
  int U() const { return U_; }
  std::int64_t K() const { return K_; }
  TopKSearch search() const { return search_; }
  // table: U×dp log-probabilities, row-major. Writes the K best flat indices and their log-probabilities.
  void decode(const double* table, std::int64_t* flat, double* log_prob);
  // Candidates kept in the frontier during the last decode (statistics for docs/perf.md).
  std::int64_t last_pushes() const { return pushes_; }

 private:
  struct Entry {
    std::int64_t score;   // fixed-point sum
    std::int64_t flat;
    std::uint64_t node;   // packed ranks (bits_ per coordinate) or an index into ranks_
  };
  static constexpr std::int64_t kSmallK = 64;  // up to here: bounded sorted frontier, else a binary heap
  template <bool Packed, bool Tree, bool Small>
  void search_impl(std::int64_t* flat, double* log_prob);
  void small_push(const Entry& e, std::int64_t need);
  void search_fast(std::int64_t* flat, double* log_prob);
  bool visit(std::int64_t flat);  // true when flat was not seen in this decode (and marks it)
  void heap_push(const Entry& e);
  Entry heap_pop();

  int dp_, U_;
  std::int64_t K_;
  TopKSearch search_;
  int bits_ = 0;                        // bits per packed rank; 0 = ranks live in the node pool
  std::uint64_t rank_mask_ = 0;
  int hi_of_bit_[64] = {};              // packed: coordinate owning bit i
  std::vector<double> lp_;              // U×dp sorted log-probs (descending; ties: smaller digit first)
  std::vector<std::int64_t> qs_;        // U×dp the same on the fixed-point grid
  std::vector<std::int64_t> dstep_;     // U×dp: (digit at rank r+1 − digit at rank r)·dp^u, r < dp−1
  std::int64_t root_flat_ = 0;
  std::vector<Entry> heap_;             // binary max-heap or bounded sorted frontier, fixed capacity
  std::vector<std::uint64_t> popped_;   // nodes of the K outputs
  std::int64_t heap_size_ = 0;
  std::int64_t lo_ = 0, hi_ = 0;        // bounded sorted frontier: buf[lo_, hi_) of heap_
  std::vector<std::int32_t> ranks_;     // node pool (unpacked case): U ranks per node
  std::vector<int> order_;              // scratch for the per-factor sort
  std::vector<std::int64_t> qtmp_, qtmp2_;
  std::vector<int> perm_, rank_of_;     // search_fast: factor at key position i; rank per factor
  std::vector<std::int64_t> dq_;        // search_fast: score step per (position, rank)
  std::vector<std::uint64_t> dk_;       // search_fast: key step per (position, rank)
  std::vector<std::int64_t> vkey_;      // visited set: open addressing on flat indices
  std::vector<std::uint32_t> vstamp_;   // slot is occupied iff its stamp equals stamp_
  std::uint32_t stamp_ = 0;
  std::uint64_t vmask_ = 0;
  int vshift_ = 0;
  std::int64_t pushes_ = 0;
};

// The fixed-point score of one factor log-probability (see kTopKScoreScale).
std::int64_t topk_fixed_point(double log_prob);

// Dense reference: scores every address (dp^U of them, fixed-point as above), selects the K best with
// nth_element and sorts them. Scratch is kept between calls (the benchmark baseline).
class DenseTopK {
 public:
  DenseTopK(int dp, int U, std::int64_t K);  // needs dp^U ≤ kMaxDenseAddresses
  void decode(const double* table, std::int64_t* flat, double* log_prob);

 private:
  int dp_, U_;
  std::int64_t K_, n_;
  std::vector<std::int64_t> score_, idx_, q_;
};

// K-best lists of many tables: tables is n×(U·dp) row-major; flat and log_prob are n×K row-major.
// OpenMP over fixed blocks of rows, one decoder per thread: results do not depend on the thread count.
void topk_batch(int dp, int U, std::int64_t K, const double* tables, std::int64_t n, std::int64_t* flat,
                double* log_prob, TopKSearch search = TopKSearch::tree);
// Same, from 2U-dim vectors X (n×2U) at concentration b: factor tables are built on the fly.
struct TopKLists {
  std::int64_t n = 0, K = 0;
  std::vector<std::int64_t> flat;   // n×K, best first
  std::vector<double> log_prob;     // n×K
  const std::int64_t* flat_row(std::int64_t i) const { return flat.data() + i * K; }
  const double* log_prob_row(std::int64_t i) const { return log_prob.data() + i * K; }
};
TopKLists topk_of_vectors(const Params& p, const Codebook& C, double b, const Eigen::MatrixXd& X, std::int64_t K);

// Σ_k exp(log_prob[k]): the probability mass a K-list keeps (§3 E5).
double retained_mass(const double* log_prob, std::int64_t K);

// A K-list re-sorted by flat index, for O(K) intersections with other lists.
struct SortedList {
  std::vector<std::int64_t> flat;
  std::vector<double> log_prob;
};
SortedList sort_by_flat(const std::int64_t* flat, const double* log_prob, std::int64_t K);

// Truncated kernel of §1.5/§3 E3(c): log κ_A^K = log|A| + log Σ_{a∈∩} r(a) w(a) (−inf when the two
// supports are disjoint) and the intersection size |TopK(r) ∩ TopK(w)|.
struct TruncatedKappa {
  double log_kappa = 0;
  std::int64_t intersection = 0;
};
TruncatedKappa truncated_kappa(const SortedList& r, const SortedList& w, double log_addresses);

}  // namespace memcap::ramnet

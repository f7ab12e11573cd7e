// Exact K-best decoder over dp^U addresses, its dense reference, batches and the truncated kernel
// (spec ramnet.md §1.5, §5.5). See topk.hpp for the order and summation conventions.
#include "ramnet/topk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <numeric>

#include "core/error.hpp"

namespace memcap::ramnet {

namespace {
// Round half away from zero (as llround), inline: the conversion runs U·dp times per decode.
inline std::int64_t fixed_point(double log_prob) {
  double x = log_prob >= kTopKLogFloor ? log_prob : kTopKLogFloor;  // NaN and −inf go to the floor
  if (x > -kTopKLogFloor) x = -kTopKLogFloor;                        // (tables need not be normalised)
  const double y = x * kTopKScoreScale;
  return static_cast<std::int64_t>(y >= 0 ? y + 0.5 : y - 0.5);
}
}  // namespace

void factor_rows(const Codebook& C, double b, const double* x, int U, double* out) {
  const int dp = static_cast<int>(C.cols());
  for (int u = 0; u < U; ++u) factor_log_probs(C, b, x[2 * u], x[2 * u + 1], out + static_cast<std::ptrdiff_t>(u) * dp);
}

std::vector<double> factor_rows(const Eigen::MatrixXd& table) {
  const Eigen::Index U = table.rows(), dp = table.cols();
  std::vector<double> out(static_cast<std::size_t>(U * dp));
  for (Eigen::Index u = 0; u < U; ++u)
    for (Eigen::Index j = 0; j < dp; ++j) out[static_cast<std::size_t>(u * dp + j)] = table(u, j);
  return out;
}

// ---- heap decoder -----------------------------------------------------------------------------

TopKSearch parse_topk_search(const std::string& name) {
  if (name == "tree") return TopKSearch::tree;
  if (name == "visited") return TopKSearch::visited;
  throw UserError(fmt::format("Top-K search must be tree or visited (got '{}')", name));
}

const char* topk_search_name(TopKSearch s) { return s == TopKSearch::tree ? "tree" : "visited"; }

std::int64_t topk_fixed_point(double log_prob) { return fixed_point(log_prob); }

TopKDecoder::TopKDecoder(int dp, int U, std::int64_t K, TopKSearch search) : dp_(dp), U_(U), K_(K), search_(search) {
  const std::int64_t n = address_count(dp, U);
  require(K >= 1 && K <= n, "--topk {} must be between 1 and the address space dp^U = {}^{} = {}", K, dp, U, n);
  const std::int64_t cap = 1 + (K - 1) * U;  // points ever pushed: the root plus ≤ U per pop but the last
  require(cap < (std::int64_t(1) << 30), "--topk {} with U = {} needs {} search nodes; use a smaller K", K, U, cap);
  int b = 1;
  while ((1 << b) < dp) ++b;
  if (b * U <= 64) {
    bits_ = b;
    rank_mask_ = (std::uint64_t(1) << b) - 1;
    for (int i = 0; i < 64; ++i) hi_of_bit_[i] = std::min(i / b, U - 1);
  } else {
    ranks_.resize(static_cast<std::size_t>(cap) * U);
  }
  lp_.resize(static_cast<std::size_t>(U) * dp);
  qs_.resize(static_cast<std::size_t>(U) * dp);
  dstep_.resize(static_cast<std::size_t>(U) * dp);
  order_.resize(static_cast<std::size_t>(dp));
  qtmp_.resize(static_cast<std::size_t>(dp));
  perm_.resize(static_cast<std::size_t>(U));
  rank_of_.resize(static_cast<std::size_t>(U));
  dq_.resize(static_cast<std::size_t>(U) * dp);
  dk_.resize(static_cast<std::size_t>(U) * dp);
  qtmp2_.resize(static_cast<std::size_t>(dp));
  heap_.resize(static_cast<std::size_t>(cap));
  popped_.resize(static_cast<std::size_t>(K));
  if (search == TopKSearch::visited) {
    std::uint64_t slots = 16;
    vshift_ = 60;
    while (slots < static_cast<std::uint64_t>(2 * cap)) {
      slots <<= 1;
      --vshift_;
    }
    vmask_ = slots - 1;
    vkey_.assign(slots, 0);
    vstamp_.assign(slots, 0);
  }
}

bool TopKDecoder::visit(std::int64_t flat) {
  std::uint64_t h = (static_cast<std::uint64_t>(flat) * 0x9E3779B97F4A7C15ull) >> vshift_;
  for (;; h = (h + 1) & vmask_) {
    if (vstamp_[h] != stamp_) {
      vstamp_[h] = stamp_;
      vkey_[h] = flat;
      return true;
    }
    if (vkey_[h] == flat) return false;
  }
}

namespace {
// a before b in the output order: larger score first, then the smaller flat index.
template <class E>
inline bool before(const E& a, const E& b) {
  return a.score > b.score || (a.score == b.score && a.flat < b.flat);
}
}  // namespace

void TopKDecoder::heap_push(const Entry& e) {
  std::int64_t i = heap_size_++;
  while (i > 0) {
    const std::int64_t parent = (i - 1) >> 1;
    if (!before(e, heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = e;
}

// Bounded sorted frontier (K ≤ kSmallK): entries ascending in buf[lo, hi) (best at hi−1). A candidate is
// dropped when the frontier already holds `need` better ones: those are distinct unpopped addresses, so
// neither the candidate nor (scores fall along lattice edges) anything reached through it can still be
// among the `need` outputs left.
inline void TopKDecoder::small_push(const Entry& e, std::int64_t need) {
  Entry* buf = heap_.data();
  if (hi_ - lo_ > need) lo_ = hi_ - need;  // only the `need` best can still be popped
  if (hi_ - lo_ == need) {
    if (!before(e, buf[lo_])) return;
    // The worst (buf[lo_]) leaves; entries worse than e move down one; one pass from the bottom,
    // which is short since most candidates rank low.
    std::int64_t p = lo_;
    while (p + 1 < hi_ && before(e, buf[p + 1])) {
      buf[p] = buf[p + 1];
      ++p;
    }
    buf[p] = e;
  } else {
    std::int64_t p = hi_;
    while (p > lo_ && before(buf[p - 1], e)) {
      buf[p] = buf[p - 1];
      --p;
    }
    buf[p] = e;
    ++hi_;
  }
  ++pushes_;
}

TopKDecoder::Entry TopKDecoder::heap_pop() {
  const Entry top = heap_[0];
  const Entry last = heap_[--heap_size_];
  std::int64_t i = 0;
  for (;;) {
    std::int64_t c = 2 * i + 1;
    if (c >= heap_size_) break;
    if (c + 1 < heap_size_ && before(heap_[c + 1], heap_[c])) ++c;
    if (!before(heap_[c], last)) break;
    heap_[i] = heap_[c];
    i = c;
  }
  if (heap_size_ > 0) heap_[i] = last;
  return top;
}

namespace {
// Compare-exchange to descending order, branch-free (cmov).
inline void ce(std::int64_t* a, int i, int j) {
  const std::int64_t x = a[i], y = a[j];
  a[i] = x > y ? x : y;
  a[j] = x > y ? y : x;
}
// Knuth's 19-comparator network for 8 keys (checked on all 0/1 inputs).
inline void sort_desc_network8(std::int64_t* a) {
  ce(a, 0, 2), ce(a, 1, 3), ce(a, 4, 6), ce(a, 5, 7);
  ce(a, 0, 4), ce(a, 1, 5), ce(a, 2, 6), ce(a, 3, 7);
  ce(a, 0, 1), ce(a, 2, 3), ce(a, 4, 5), ce(a, 6, 7);
  ce(a, 2, 4), ce(a, 3, 5);
  ce(a, 1, 4), ce(a, 3, 6);
  ce(a, 1, 2), ce(a, 3, 4), ce(a, 5, 6);
}
}  // namespace

void TopKDecoder::decode(const double* table, std::int64_t* flat, double* log_prob) {
  const int dp = dp_, U = U_;
  // Per factor: digits ordered by (fixed-point log-prob descending, digit ascending). The digit tie-break
  // gives an equal-score lattice predecessor the smaller flat index, so best-first order with flat-index
  // tie-breaks is exactly the output order.
  int* order = order_.data();
  std::int64_t stride = 1;
  root_flat_ = 0;
  std::int64_t* q = qtmp_.data();
  for (int u = 0; u < U; ++u) {
    const double* t = table + static_cast<std::ptrdiff_t>(u) * dp;
    if (dp <= 1024) {
      // One int64 key per digit, q·1024 + (1023 − j) (|q| ≤ 2^52): descending keys = (q desc, j asc).
      for (int j = 0; j < dp; ++j) q[j] = fixed_point(t[j]) * 1024 + (1023 - j);
      if (dp == 8) {
        sort_desc_network8(q);
      } else if (dp == 4) {
        ce(q, 0, 1), ce(q, 2, 3), ce(q, 0, 2), ce(q, 1, 3), ce(q, 1, 2);
      } else if (dp <= 32) {
        for (int j = 1; j < dp; ++j) {
          const std::int64_t x = q[j];
          int i = j - 1;
          while (i >= 0 && q[i] < x) {
            q[i + 1] = q[i];
            --i;
          }
          q[i + 1] = x;
        }
      } else {
        std::sort(q, q + dp, std::greater<std::int64_t>());
      }
      for (int r = 0; r < dp; ++r) {
        order[r] = 1023 - static_cast<int>(q[r] & 1023);
        q[r] >>= 10;  // arithmetic shift: floor division, exact
      }
    } else {
      for (int j = 0; j < dp; ++j) {
        order[j] = j;
        q[j] = fixed_point(t[j]);
      }
      std::int64_t* qq = qtmp2_.data();
      std::copy(q, q + dp, qq);
      std::sort(order, order + dp, [qq](int a, int b) { return qq[a] > qq[b] || (qq[a] == qq[b] && a < b); });
      for (int r = 0; r < dp; ++r) q[r] = qq[order[r]];
    }
    const std::ptrdiff_t o = static_cast<std::ptrdiff_t>(u) * dp;
    for (int r = 0; r < dp; ++r) {
      lp_[o + r] = t[order[r]];
      qs_[o + r] = q[r];
    }
    for (int r = 0; r + 1 < dp; ++r) dstep_[o + r] = static_cast<std::int64_t>(order[r + 1] - order[r]) * stride;
    root_flat_ += order[0] * stride;
    stride *= dp;
  }
  if (search_ == TopKSearch::visited && ++stamp_ == 0) {  // stamps wrapped: clear once every 2^32 decodes
    std::fill(vstamp_.begin(), vstamp_.end(), 0u);
    stamp_ = 1;
  }
  const bool packed = bits_ > 0, tree = search_ == TopKSearch::tree;
  const bool small = K_ <= kSmallK;
  if (small && tree && packed && 2 * U * bits_ <= 64) {
    search_fast(flat, log_prob);
    return;
  }
  if (small) {
    if (packed && tree) search_impl<true, true, true>(flat, log_prob);
    else if (packed) search_impl<true, false, true>(flat, log_prob);
    else if (tree) search_impl<false, true, true>(flat, log_prob);
    else search_impl<false, false, true>(flat, log_prob);
  } else {
    if (packed && tree) search_impl<true, true, false>(flat, log_prob);
    else if (packed) search_impl<true, false, false>(flat, log_prob);
    else if (tree) search_impl<false, true, false>(flat, log_prob);
    else search_impl<false, false, false>(flat, log_prob);
  }
}

// The common case (tree search, K ≤ kSmallK, U·bits ≤ 32) with everything in locals and 16-byte entries:
// key = flat << (U·bits) | packed ranks, so comparing keys compares flat indices (the tie-break), and a
// child's key and score are the parent's plus per-(position, rank) increments (integers: exact).
//
// Factors take key positions by (first drop q_u(0) − q_u(1) descending, first flat step descending). A
// point x with top nonzero position h has the tree children x + e_h (deepen) and x + e_v for v > h (new
// coordinate, rank 0 → 1, score − drop_v): those are ordered — x + e_{U−1} best, then x + e_{U−2}, ...,
// each before the next in the output order (drops non-increasing with the position, equal drops broken by
// the flat step, i.e. by flat index). So a pop pushes at most three points: its deepen child, its best new
// child, and — when it is itself a new child of x at position v — its next sibling x + e_{v−1} (if v−1 > h(x)).
// Every point is pushed once, after the point that generates it, which precedes it in the output order:
// the best-first invariant holds as for the plain tree.
void TopKDecoder::search_fast(std::int64_t* flat, double* log_prob) {
  struct E {
    std::int64_t score;
    std::uint64_t key;
  };
  const int dp = dp_, U = U_, b = bits_, rb = U * bits_;
  const std::uint64_t mask = rank_mask_, rmask = (std::uint64_t(1) << rb) - 1;
  int* perm = perm_.data();
  auto drop = [&](int u) { return qs_[static_cast<std::ptrdiff_t>(u) * dp] - qs_[static_cast<std::ptrdiff_t>(u) * dp + 1]; };
  auto step0 = [&](int u) { return dstep_[static_cast<std::ptrdiff_t>(u) * dp]; };
  for (int u = 0; u < U; ++u) {  // insertion sort of the factors by (drop desc, first flat step desc)
    const std::int64_t d = drop(u), f0 = step0(u);
    int i = u;
    while (i > 0 && (drop(perm[i - 1]) < d || (drop(perm[i - 1]) == d && step0(perm[i - 1]) < f0))) {
      perm[i] = perm[i - 1];
      --i;
    }
    perm[i] = u;
  }
  // Per (position i, r < dp−1): score and key increments of moving factor perm[i] from rank r to r + 1.
  std::int64_t* DQ = dq_.data();
  std::uint64_t* DK = dk_.data();
  std::int64_t s0 = 0;
  for (int i = 0; i < U; ++i) {
    const std::ptrdiff_t o = static_cast<std::ptrdiff_t>(perm[i]) * dp, oi = static_cast<std::ptrdiff_t>(i) * dp;
    s0 += qs_[o];
    for (int r = 0; r + 1 < dp; ++r) {
      DQ[oi + r] = qs_[o + r + 1] - qs_[o + r];
      DK[oi + r] = (static_cast<std::uint64_t>(dstep_[o + r]) << rb) + (std::uint64_t(1) << (i * b));
    }
  }
  E* buf = reinterpret_cast<E*>(heap_.data());  // heap_ holds ≥ 1 + (K−1)U 24-byte entries: room enough
  std::int64_t lo = 0, hi = 0, pushes = 0;
  auto better = [](const E& x, const E& y) { return x.score > y.score || (x.score == y.score && x.key < y.key); };
  auto push = [&](std::int64_t score, std::uint64_t key, std::int64_t need) {
    const E e{score, key};
    if (hi - lo > need) lo = hi - need;
    if (hi - lo == need) {
      if (!better(e, buf[lo])) return;
      std::int64_t p = lo;
      while (p + 1 < hi && better(e, buf[p + 1])) {
        buf[p] = buf[p + 1];
        ++p;
      }
      buf[p] = e;
    } else {
      std::int64_t p = hi;
      while (p > lo && better(buf[p - 1], e)) {
        buf[p] = buf[p - 1];
        --p;
      }
      buf[p] = e;
      ++hi;
    }
    ++pushes;
  };
  const std::ptrdiff_t last = static_cast<std::ptrdiff_t>(U - 1) * dp;  // position U−1, rank 0
  push(s0, static_cast<std::uint64_t>(root_flat_) << rb, K_);
  for (std::int64_t k = 0;; ++k) {
    const E e = buf[--hi];
    const std::uint64_t ranks = e.key & rmask;
    flat[k] = static_cast<std::int64_t>(e.key >> rb);
    popped_[static_cast<std::size_t>(k)] = ranks;
    if (k + 1 == K_) break;
    const std::int64_t need = K_ - k - 1;
    if (ranks == 0) {  // the root: its best new child only
      if (U > 0) push(e.score + DQ[last], e.key + DK[last], need);
      continue;
    }
    const int h = hi_of_bit_[63 - __builtin_clzll(ranks)];
    const int r = static_cast<int>((ranks >> (h * b)) & mask);
    const std::ptrdiff_t oh = static_cast<std::ptrdiff_t>(h) * dp;
    if (r + 1 < dp) push(e.score + DQ[oh + r], e.key + DK[oh + r], need);  // deepen
    if (h + 1 < U) push(e.score + DQ[last], e.key + DK[last], need);      // best new child
    if (r == 1 && h > 0) {  // a new child of x = e − e_h: its next sibling x + e_{h−1}, if h−1 is above x's top
      const std::uint64_t below = ranks & ((std::uint64_t(1) << (h * b)) - 1);
      const int hx = below == 0 ? -1 : hi_of_bit_[63 - __builtin_clzll(below)];
      if (h - 1 > hx) {
        const std::ptrdiff_t os = oh - dp;  // position h−1, rank 0
        push(e.score - DQ[oh] + DQ[os], e.key - DK[oh] + DK[os], need);
      }
    }
  }
  pushes_ = pushes;
  // Reported log-probabilities: double sums in factor order u = 0..U−1 for every output; the loop over
  // outputs is inside, so the U dependent additions of one output overlap with the others'.
  for (int i = 0; i < U; ++i) rank_of_[static_cast<std::size_t>(perm[i])] = i * b;  // key position of factor u
  const std::uint64_t* P = popped_.data();
  double acc[kSmallK];  // in L1, written out once
  for (std::int64_t k = 0; k < K_; ++k) acc[k] = 0.0;
  for (int u = 0; u < U; ++u) {
    const double* L = lp_.data() + static_cast<std::ptrdiff_t>(u) * dp;
    const int sh = rank_of_[static_cast<std::size_t>(u)];
    for (std::int64_t k = 0; k < K_; ++k) acc[k] += L[(P[k] >> sh) & mask];
  }
  for (std::int64_t k = 0; k < K_; ++k) log_prob[k] = acc[k];
}

template <bool Packed, bool Tree, bool Small>
void TopKDecoder::search_impl(std::int64_t* flat, double* log_prob) {
  const int dp = dp_, U = U_;
  const std::int64_t* qs = qs_.data();
  const std::int64_t* dstep = dstep_.data();
  std::int64_t s0 = 0;
  for (int u = 0; u < U; ++u) s0 += qs[static_cast<std::ptrdiff_t>(u) * dp];
  heap_size_ = 0;
  lo_ = hi_ = 0;
  std::uint64_t nodes = 1;
  if constexpr (!Packed)
    for (int u = 0; u < U; ++u) ranks_[u] = 0;
  if constexpr (!Tree) visit(root_flat_);
  pushes_ = 0;
  if constexpr (Small) small_push({s0, root_flat_, 0}, K_);
  else {
    heap_push({s0, root_flat_, 0});
    pushes_ = 1;
  }
  for (std::int64_t k = 0;; ++k) {
    Entry e;
    if constexpr (Small) e = heap_[--hi_];
    else e = heap_pop();
    const std::int64_t need = K_ - k - 1;
    flat[k] = e.flat;
    popped_[static_cast<std::size_t>(k)] = e.node;
    const std::int32_t* R = nullptr;
    if constexpr (!Packed) R = ranks_.data() + static_cast<std::ptrdiff_t>(e.node) * U;
    auto rank = [&](int u) -> int {
      if constexpr (Packed) return static_cast<int>((e.node >> (u * bits_)) & rank_mask_);
      else return R[u];
    };
    if (k + 1 == K_) break;
    int first = 0;
    if constexpr (Tree) {  // successors that keep this point as their canonical parent
      if constexpr (Packed) first = e.node == 0 ? 0 : hi_of_bit_[63 - __builtin_clzll(e.node)];
      else
        for (int u = U - 1; u > 0; --u)
          if (R[u] != 0) {
            first = u;
            break;
          }
    }
    for (int u = first; u < U; ++u) {
      const int r = rank(u);
      if (r + 1 >= dp) continue;
      const std::ptrdiff_t o = static_cast<std::ptrdiff_t>(u) * dp + r;
      const std::int64_t cf = e.flat + dstep[o];
      if constexpr (!Tree)
        if (!visit(cf)) continue;
      const std::int64_t cs = e.score - qs[o] + qs[o + 1];  // exact: integers
      std::uint64_t node;
      if constexpr (Packed) node = e.node + (std::uint64_t(1) << (u * bits_));
      else {
        node = nodes++;
        std::int32_t* N = ranks_.data() + static_cast<std::ptrdiff_t>(node) * U;
        for (int v = 0; v < U; ++v) N[v] = R[v];
        N[u] = r + 1;
      }
      if constexpr (Small) small_push({cs, cf, node}, need);
      else {
        heap_push({cs, cf, node});
        ++pushes_;
      }
    }
  }
  // Reported log-probabilities: the double sums in factor order (independent chains, off the search path).
  for (std::int64_t k = 0; k < K_; ++k) {
    const std::uint64_t node = popped_[static_cast<std::size_t>(k)];
    double lsum = 0;
    for (int u = 0; u < U; ++u) {
      int r;
      if constexpr (Packed) r = static_cast<int>((node >> (u * bits_)) & rank_mask_);
      else r = ranks_[static_cast<std::size_t>(node) * U + u];
      lsum += lp_[static_cast<std::ptrdiff_t>(u) * dp + r];
    }
    log_prob[k] = lsum;
  }
}

// ---- dense reference --------------------------------------------------------------------------

DenseTopK::DenseTopK(int dp, int U, std::int64_t K) : dp_(dp), U_(U), K_(K) {
  n_ = address_count(dp, U);
  require(K >= 1 && K <= n_, "--topk {} must be between 1 and the address space dp^U = {}^{} = {}", K, dp, U, n_);
  Params p{dp, U, 1.0, 1.0};
  require_dense(p, 16.0, "the dense Top-K reference");
  score_.resize(static_cast<std::size_t>(n_));
  idx_.resize(static_cast<std::size_t>(n_));
  q_.resize(static_cast<std::size_t>(U) * dp);
}

void DenseTopK::decode(const double* table, std::int64_t* flat, double* log_prob) {
  for (std::size_t i = 0; i < q_.size(); ++i) q_[i] = fixed_point(table[i]);
  std::int64_t* s = score_.data();
  s[0] = 0;
  std::int64_t len = 1;
  for (int u = 0; u < U_; ++u) {  // digit u has stride dp^u; j = 0 last so s[i] is read before it is updated
    const std::int64_t* t = q_.data() + static_cast<std::ptrdiff_t>(u) * dp_;
    for (int j = dp_ - 1; j >= 0; --j) {
      std::int64_t* dst = s + j * len;
      const std::int64_t tj = t[j];
      for (std::int64_t i = 0; i < len; ++i) dst[i] = s[i] + tj;
    }
    len *= dp_;
  }
  std::iota(idx_.begin(), idx_.end(), std::int64_t{0});
  auto better = [s](std::int64_t a, std::int64_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); };
  if (K_ < n_) std::nth_element(idx_.begin(), idx_.begin() + K_, idx_.end(), better);
  std::sort(idx_.begin(), idx_.begin() + K_, better);
  for (std::int64_t k = 0; k < K_; ++k) {
    std::int64_t f = idx_[static_cast<std::size_t>(k)];
    flat[k] = f;
    double l = 0;
    for (int u = 0; u < U_; ++u) {
      l += table[static_cast<std::ptrdiff_t>(u) * dp_ + f % dp_];
      f /= dp_;
    }
    log_prob[k] = l;
  }
}

// ---- batches ----------------------------------------------------------------------------------

namespace {
constexpr std::int64_t kBatchBlock = 256;  // rows per OpenMP work item
}

void topk_batch(int dp, int U, std::int64_t K, const double* tables, std::int64_t n, std::int64_t* flat,
                double* log_prob, TopKSearch search) {
  TopKDecoder check(dp, U, K, search);  // validates K before the threads start
  const std::int64_t blocks = (n + kBatchBlock - 1) / kBatchBlock;
  const std::ptrdiff_t tw = static_cast<std::ptrdiff_t>(U) * dp;
#pragma omp parallel if (blocks > 1)
  {
    TopKDecoder dec(dp, U, K, search);
#pragma omp for schedule(dynamic)
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t end = std::min(n, (b + 1) * kBatchBlock);
      for (std::int64_t i = b * kBatchBlock; i < end; ++i) dec.decode(tables + i * tw, flat + i * K, log_prob + i * K);
    }
  }
}

TopKLists topk_of_vectors(const Params& p, const Codebook& C, double b, const Eigen::MatrixXd& X, std::int64_t K) {
  require(X.cols() == 2 * p.U, "vectors must have 2U = {} columns (got {})", 2 * p.U, X.cols());
  require(C.cols() == p.dp, "codebook has {} codes, dp = {}", C.cols(), p.dp);
  TopKDecoder check(p.dp, p.U, K);
  TopKLists out;
  out.n = X.rows();
  out.K = K;
  out.flat.resize(static_cast<std::size_t>(out.n * K));
  out.log_prob.resize(static_cast<std::size_t>(out.n * K));
  const std::int64_t blocks = (out.n + kBatchBlock - 1) / kBatchBlock;
#pragma omp parallel if (blocks > 1)
  {
    TopKDecoder dec(p.dp, p.U, K);
    std::vector<double> table(static_cast<std::size_t>(p.U) * p.dp), x(static_cast<std::size_t>(2 * p.U));
#pragma omp for schedule(dynamic)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      const std::int64_t end = std::min(out.n, (blk + 1) * kBatchBlock);
      for (std::int64_t i = blk * kBatchBlock; i < end; ++i) {
        for (int c = 0; c < 2 * p.U; ++c) x[static_cast<std::size_t>(c)] = X(i, c);
        factor_rows(C, b, x.data(), p.U, table.data());
        dec.decode(table.data(), out.flat.data() + i * K, out.log_prob.data() + i * K);
      }
    }
  }
  return out;
}

// ---- masses and truncated kernel --------------------------------------------------------------

double retained_mass(const double* log_prob, std::int64_t K) {
  double s = 0;
  for (std::int64_t k = 0; k < K; ++k) s += std::exp(log_prob[k]);
  return s;
}

SortedList sort_by_flat(const std::int64_t* flat, const double* log_prob, std::int64_t K) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(K));
  std::iota(idx.begin(), idx.end(), std::int64_t{0});
  std::sort(idx.begin(), idx.end(), [flat](std::int64_t a, std::int64_t b) { return flat[a] < flat[b]; });
  SortedList s;
  s.flat.resize(static_cast<std::size_t>(K));
  s.log_prob.resize(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k) {
    s.flat[static_cast<std::size_t>(k)] = flat[idx[static_cast<std::size_t>(k)]];
    s.log_prob[static_cast<std::size_t>(k)] = log_prob[idx[static_cast<std::size_t>(k)]];
  }
  return s;
}

TruncatedKappa truncated_kappa(const SortedList& r, const SortedList& w, double log_addresses) {
  TruncatedKappa out;
  double mx = -INFINITY;
  // Two passes over the merge (K is small): the largest log(r w), then Σ exp(· − max).
  for (int pass = 0; pass < 2; ++pass) {
    double sum = 0;
    std::int64_t n = 0;
    std::size_t i = 0, j = 0;
    while (i < r.flat.size() && j < w.flat.size()) {
      if (r.flat[i] < w.flat[j]) ++i;
      else if (w.flat[j] < r.flat[i]) ++j;
      else {
        const double l = r.log_prob[i] + w.log_prob[j];
        if (pass == 0) mx = std::max(mx, l);
        else sum += std::exp(l - mx);
        ++n;
        ++i;
        ++j;
      }
    }
    out.intersection = n;
    if (n == 0) {
      out.log_kappa = -INFINITY;
      return out;
    }
    if (pass == 1) out.log_kappa = log_addresses + mx + std::log(sum);
  }
  return out;
}

}  // namespace memcap::ramnet

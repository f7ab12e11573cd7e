// E7 associative-recall capacity (spec ramnet.md §3 E7): write N (key, value) pairs into a memory,
// read them back with noisy queries q_i = k_i + N(0, σ_q²), decode by argmax cosine over the N stored
// values, and find the capacity N*_δ (largest N with accuracy ≥ 1 − δ, δ = 0.1 and 0.5) by doubling
// then integer bisection over several seeds. Mixers: RAM-Net's GSU memory (Top-K, γ, ε, readout) and
// the baselines at matched state D·dv — softmax and κ-attention (unbounded caches), dense RAM features
// as linear attention, elu+1 linear attention on the 2U-dim key, FAVOR+ positive random features.
//
// Random numbers: counter-based Philox (core/rng.hpp) on the streams below, indexed by item, so the
// first N items of a seed are the same for every N, every mixer, the CPU and the GPU. This file is the
// CPU specification; recall_cuda.hpp computes the same function on a GPU.
#pragma once
#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ramnet/address.hpp"

namespace memcap::ramnet {

// Philox stream ids of the recall protocol (the ids 1200..1299 belong to it; see docs/ramnet.md).
namespace recall_streams {
inline constexpr std::uint64_t kKeys = 1200;             // torus: angle of (item i, block u) at i·U+u;
                                                         // gauss: coordinate (i, c) at i·2U+c
inline constexpr std::uint64_t kValues = 1201;           // value (i, c) at i·dv+c, N(0, 1)
inline constexpr std::uint64_t kQueryNoise = 1202;       // noise (i, c) at i·2U+c, N(0, 1)·σ_q
inline constexpr std::uint64_t kFavorDirections = 1203;  // FAVOR+ Gaussian block b, entry (r, c) at (b·d+r)·d+c
inline constexpr std::uint64_t kFavorNorms = 1204;       // FAVOR+ row norms: χ(d) from a Gaussian d-vector, same layout
}  // namespace recall_streams

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

enum class Mixer { ramnet, softmax, kappa, ram_linear, elu, favor };
Mixer parse_mixer(const std::string& name);  // ramnet|softmax|kappa|ram-linear|elu|favor (UserError otherwise)
const char* to_string(Mixer m);
std::vector<Mixer> all_mixers();

// Key generator of §3: torus(ρ) (every 2-D block ρ(cos θ, sin θ), θ ~ U[0, 2π)) or gauss(σ) (iid N(0, σ²)).
struct KeyModel {
  enum class Kind { torus, gauss };
  Kind kind = Kind::torus;
  double scale = 1.0;  // ρ or σ
  // "torus", "torus:rho=R", "gauss", "gauss:sigma=S" (UserError otherwise).
  static KeyModel parse(const std::string& spec);
  std::string spec() const;
};

// One memory to test. Only the fields its mixer uses matter (the others are recorded as given).
struct RecallModel {
  Mixer mixer = Mixer::ramnet;
  Params params;                // dp, U, β_r, β_w (ramnet, kappa, ram-linear; dp^U also sets FAVOR+'s D)
  double tau = 1.0;             // softmax and FAVOR+: logits q·k/τ
  std::int64_t topk = 0;        // ramnet: K largest read and write weights kept, not renormalised (0 = full)
  bool mass_readout = true;     // ramnet: Σ r m s / (Σ r m + ε) (true) or Σ r s (false)
  double gamma = -INFINITY;     // ramnet: GSU retention bias (−inf = cumulative averaging)
  double eps = 0.0;             // ramnet: GSU stabiliser ε
  // Feature count D of the state D·dv: dp^U (ramnet, ram-linear, favor), 2U (elu), 0 (softmax and
  // kappa keep every key: an unbounded cache).
  std::int64_t features() const;
  // γ = −inf and ε = 0: the GSU state is the running mean Σ w v / Σ w (§2.9), computed without the recursion.
  bool cumulative() const { return gamma == -INFINITY && eps == 0.0; }
};
// UserError naming what is wrong: dp, U, β, τ, K ≤ dp^U, ε ≥ 0, γ not NaN / +inf, dense state size.
void validate(const RecallModel& m);

// One seed's items: the first N rows of that seed's draws (row i depends on (seed, i) only).
struct RecallInputs {
  RowMatrix keys;     // N × 2U
  RowMatrix queries;  // N × 2U: keys + σ_q·noise
  RowMatrix values;   // N × dv, N(0, I)
  RowMatrix omega;    // FAVOR+ only: D × 2U orthogonal random features (per seed), else empty
};
RecallInputs draw_recall_inputs(const RecallModel& m, const KeyModel& keys, double sigma_q, int dv,
                                std::uint64_t seed, std::int64_t N);
// FAVOR+ projection: D rows in blocks of d orthonormal directions (Gram-Schmidt of Gaussian blocks),
// row r of a block scaled by the norm of an independent Gaussian d-vector (so rows are marginally N(0, I)).
RowMatrix favor_projection(std::int64_t D, int d, std::uint64_t seed);

// Per-item factor tables of a set of 2U vectors at concentration b: row i holds U·dp log-probabilities
// (factor u at u·dp, the layout of topk.hpp's factor_rows) and the same as probabilities exp(log p).
struct FactorTables {
  std::int64_t n = 0;
  int U = 0, dp = 0;
  std::vector<double> logp, prob;  // n × U·dp
  const double* prob_row(std::int64_t i) const { return prob.data() + i * U * dp; }
  const double* logp_row(std::int64_t i) const { return logp.data() + i * U * dp; }
};
FactorTables factor_tables(const Params& p, double b, const RowMatrix& X);

// Top-K weights of every row: the K best flat addresses (best first, ties to the smaller index; exact,
// via topk.hpp) and their weights Π_u p_u(a_u) (taken in the order u = 0..U−1, as the dense features).
struct SparseWeights {
  std::int64_t n = 0, K = 0;
  std::vector<std::int64_t> flat;  // n × K
  std::vector<double> weight;      // n × K
};
SparseWeights topk_weights(const FactorTables& t, std::int64_t K);
// Product weight Π_u p_u(a_u) of one flat address, multiplied in the order u = 0..U−1.
double address_weight(const double* prob_row, int dp, int U, std::int64_t flat);

// ---- the mixers (CPU, float64) ----------------------------------------------------------------
// Outputs o_i (N × dv) of the model for in.queries against the N written (key, value) pairs.
RowMatrix recall_outputs_cpu(const RecallModel& m, const RecallInputs& in);
// The GSU memory itself (ramnet): slot masses m (D) and states s (D × dv) after writing every pair in
// order. The general recursion (§1.6) runs whenever !m.cumulative() or force_recursion.
struct GsuState {
  Eigen::VectorXd mass;  // D
  RowMatrix state;       // D × dv
};
GsuState gsu_write_cpu(const RecallModel& m, const RecallInputs& in, bool force_recursion = false);

// Decoding: argmax_j cos(o_i, v_j) over all N stored values (ties: smaller j); -1 for a dead output
// (zero or non-finite). nmse_i = min_c ||c o_i − v_i||² / ||v_i||² = 1 − cos²(o_i, v_i) (1 when dead).
struct Decoded {
  std::vector<std::int64_t> argmax;
  std::vector<double> nmse;
};
Decoded decode_cpu(const RowMatrix& O, const RowMatrix& V);

// What one (N, seed) evaluation measured.
struct TrialOutcome {
  std::int64_t N = 0, correct = 0, dead = 0;
  double nmse_sum = 0;
  std::vector<std::uint8_t> hit;  // N: item i recalled
};
TrialOutcome score(const Decoded& d);

// ---- the protocol -----------------------------------------------------------------------------
struct RecallConfig {
  RecallModel model;
  KeyModel keys;
  double sigma_q = 0.0;   // query noise per coordinate
  int dv = 64;            // value dimension
  int seeds = 10;         // seeds per N: trial seed s = derive_seed(seed, "ramnet-recall/seed=s")
  std::uint64_t seed = 0;
  std::int64_t n_min = 1;            // first N of the doubling grid
  std::int64_t n_max = 0;            // 0 = default_n_max(model)
  std::vector<std::int64_t> n_list;  // extra N evaluated (the only ones when search = false)
  bool search = true;
};
void validate(const RecallConfig& c);
// clamp(4 dp^U, 64, 2^17): past the hard-write N*_0.5 ≈ 1.59 |A| of every mixer's matched state.
std::int64_t default_n_max(const RecallModel& m);
std::int64_t effective_n_max(const RecallConfig& c);
std::uint64_t trial_seed(std::uint64_t base, int s);

inline constexpr double kDeltas[2] = {0.1, 0.5};  // N*_0.1 and N*_0.5

// Recency: the age of item i among N writes is N−1−i; bin 0 holds age 0, bin b ≥ 1 ages [2^(b−1), 2^b).
int recency_bin(std::int64_t age);
int recency_bins(std::int64_t n_max);

struct RecallPoint {
  std::int64_t N = 0;
  std::string stage;               // grid (doubling), bisect or list
  double acc = 0;                  // mean over seeds
  std::vector<double> acc_seeds;   // per seed
  double nmse = 0;                 // mean over items and seeds
  double dead = 0;                 // fraction of dead outputs
  std::vector<std::int64_t> recency_hits, recency_count;  // per age bin, summed over seeds
};

struct RecallResult {
  std::vector<RecallPoint> points;  // sorted by N
  std::int64_t n_star[2] = {-1, -1};      // per kDeltas; -1 = not searched
  bool censored[2] = {false, false};      // still ≥ 1 − δ at n_max
  std::int64_t n_max = 0;
  std::string path;
};

// One (N, seed) evaluation on some device: the CPU reference or the CUDA path.
using RecallBackend = std::function<TrialOutcome(const RecallModel&, const RecallInputs&)>;
TrialOutcome evaluate_trial_cpu(const RecallModel& m, const RecallInputs& in);

// Runs the protocol. `known` are points measured earlier (a resumed job: not measured again);
// on_point is called after each newly measured point.
RecallResult run_recall(const RecallConfig& c, const RecallBackend& backend, const std::string& path,
                        const std::vector<RecallPoint>& known = {},
                        const std::function<void(const RecallPoint&)>& on_point = {});

// Doubling from n_min (n_min, 2 n_min, ... capped at n_max) until every threshold has failed once,
// then integer bisection between the largest passing and the first failing N, per threshold.
// pass(N) = accuracy(N) ≥ threshold. n_star = n_min − 1 when n_min already fails; censored when n_max passes.
struct SearchOutcome {
  std::vector<std::int64_t> n_star;
  std::vector<bool> censored;
};
SearchOutcome capacity_search(std::int64_t n_min, std::int64_t n_max, const std::vector<double>& thresholds,
                              const std::function<double(std::int64_t N, const char* stage)>& accuracy);

// Hard-write / large-β prediction (§3 E7, T15): each key lands on a uniformly random address; with mean
// aggregation and random tie-breaking acc ≈ E[1/(1+B)], B ~ Bin(N−1, 1/|A|), = |A|(1 − (1−1/|A|)^N)/N.
double hard_write_accuracy(double addresses, std::int64_t N);
// Largest N ≤ n_max with hard_write_accuracy ≥ 1 − δ (the prediction is decreasing in N).
std::int64_t hard_write_capacity(double addresses, double delta, std::int64_t n_max);

// Rough double-precision operation count of one (N, seed) evaluation (planning and --dry-run).
double trial_flops(const RecallModel& m, std::int64_t N, int dv);
// Worst case of a whole search (every grid point up to n_max, two bisections near n_max) × seeds.
double search_flops(const RecallConfig& c);
// Bytes one (N, seed) evaluation holds at once on the CPU (inputs, state, one tile).
double trial_bytes(const RecallModel& m, std::int64_t N, int dv);
// The same on the GPU (recall_cuda.cpp: device inputs, state, Top-K lists and two tiles of
// kDeviceTileDoubles); defined here so that a CPU-only build can plan too.
inline constexpr std::int64_t kDeviceTileDoubles = std::int64_t(1) << 25;  // 256 MiB per tile buffer
double trial_device_bytes(const RecallModel& m, std::int64_t N, int dv);

}  // namespace memcap::ramnet

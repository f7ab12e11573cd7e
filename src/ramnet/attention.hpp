// Attention against a softmax teacher (spec ramnet.md §2.7, §3 E2, E3, E5): for T keys and n queries the
// teacher softmax_s(q·k_s/τ) is compared with address-overlap students —
//   kappa    κ_A, normalised (log_kappa_matrix + log-sum-exp);   kinf  κ_∞ (circular codebooks only);
//   topk     the truncated kernel κ_A^K = |A| Σ_{TopK(r)∩TopK(w)} r w, normalised (dead when all 0);
//   gsu-standard, gsu-mass   the token weights α a GSU memory induces (§1.7; --topk, γ, ε as given);
//   vq       hard-write VQ attention softmax_s(β_r q·k̂_s), k̂_s the nearest codes (§2.8);
//   cape     (rope generator) κ_A between CAPE-shifted address distributions of the unrotated vectors (§1.8)
// — by JS (nats and bits), smoothed KL(teacher‖student), head NMSE Σ‖o_S − o_T‖²/Σ‖o_T‖² with random
// values, missing mass 1 − Σ_s α_s and the dead-query rate (student weights all 0). JS and KL are taken on
// renormalised weights over the live queries. Also the E5 statistics of Top-K (retained read and write
// mass, |TopK(r) ∩ TopK(w)|, fraction of pairs with κ_A^K = 0).
//
// Inputs: key/query generators gauss(σ), torus(ρ), planted(σ_q), rope, teacher(d_k) (§3 "Common inputs") and
// codebook variants (circular, random, orthogonal, kmeans, pq) through the generic-codebook kernel. Random numbers
// are counter-based (Philox, core/rng.hpp) on the named streams below, indexed by (trial << 32) + item,
// so a trial's draws depend only on (seed, trial) — not on threads, job order or other settings' sizes.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ramnet/address.hpp"
#include "ramnet/gsu.hpp"

namespace memcap::ramnet {

// Philox stream ids of the memory/attention experiments (ids 1100..1199 belong to them).
namespace attn_streams {
inline constexpr std::uint64_t kKeys = 1100;         // key coordinates / torus angles
inline constexpr std::uint64_t kQueries = 1101;      // query coordinates / angles / planted noise
inline constexpr std::uint64_t kValues = 1102;       // values N(0, 1)
inline constexpr std::uint64_t kCodebook = 1103;     // random / orthogonal-random codes
inline constexpr std::uint64_t kPlanted = 1104;      // planted index s* per query
inline constexpr std::uint64_t kCalibration = 1105;  // k-means++ seeding (the calibration sample is the
                                                     // generator's draw at trial 2^31 with a derived seed)
inline constexpr std::uint64_t kFieldKeys = 1106;    // E4 stored keys (angles)
inline constexpr std::uint64_t kFieldValues = 1107;  // E4 stored values
inline constexpr std::uint64_t kSequence = 1108;     // E8 sequences (keys), E6 tokens
inline constexpr std::uint64_t kSequenceValues = 1109;  // E8 / E6 values
inline constexpr std::uint64_t kSequenceQueries = 1110;  // E8 read-back noise, E6 queries
inline constexpr std::uint64_t kTeacherWeights = 1111;   // teacher generator: W_Q, W_K (per seed, not per trial)
inline constexpr std::uint64_t kTeacherHidden = 1112;    // teacher generator: hidden states of keys / queries
}  // namespace attn_streams

// ---- generators ---------------------------------------------------------------------------------
// Largest sigma / rho / sigma_q a generator accepts (beyond it logits and Gram matrices overflow).
inline constexpr double kMaxGeneratorScale = 1e3;
struct Generator {
  enum class Kind { gauss, torus, planted, rope, teacher };
  Kind kind = Kind::gauss;
  double sigma = 1.0;    // gauss, planted keys, rope base vectors, teacher hidden states: N(0, σ²) entries
  double rho = 1.0;      // torus: block norm
  double sigma_q = 0.1;  // planted: q = k_{s*} + N(0, σ_q²)
  int dk = 16;           // teacher: head dimension d_k of W_Q, W_K (1..1024)
  int dmodel = 64;       // teacher: hidden-state dimension d_model (1..512, >= d_k)
  // "gauss[:sigma=S]", "torus[:rho=R]", "planted[:sigma_q=S,sigma=S]", "rope[:sigma=S]",
  // "teacher[:dk=D,dmodel=M,sigma=S]", sigma and rho in (0, 1e3], sigma_q in [0, 1e3]; UserError otherwise.
  static Generator parse(const std::string& spec);
  std::string spec() const;  // canonical text
};

struct AttnSample {
  Eigen::MatrixXd K, Q, V;        // T×2U keys, n×2U queries, T×dv values (what the students see)
  std::vector<std::int64_t> planted;  // n planted key indices (planted generator), else empty
  Eigen::MatrixXd Kb, Qb;         // rope: the unrotated base vectors (T×2U, n×2U), else empty
  std::vector<std::int64_t> pos_k, pos_q;  // rope: positions of keys (s) and queries (T), else empty
  Eigen::MatrixXd Kt, Qt;         // teacher: the teacher's keys W_K h (T×d_k) and queries (n×d_k), else empty
};
// rope: key s sits at position s, every query at position T; block u of a base vector is rotated by
// ν_u·position, ν_u = 2π/dp^{u+1} (the CAPE/RoPE frequencies of §1.8). K, Q are the rotated vectors (the
// teacher's and the RoPE'd students' inputs); the "cape" student uses Kb, Qb with CAPE shifts by position.
// teacher: hidden states h ~ N(0, σ² I_dmodel) per key and query (per trial), W_Q, W_K (d_k × d_model,
// entries N(0, 1/d_model), drawn once per seed); the teacher's logits are (W_Q h_q)·(W_K h_k)/τ; the
// students get the NoPE init of §1.9 (nope_adapter with Σ = σ² I, Δ = 0) to 2U dims: K = h_k W~_Kᵀ,
// Q = h_q W~_Qᵀ, so Q Kᵀ = h_q W_Qᵀ W_K h_kᵀ exactly when d_k ≤ 2U (rank-2U truncation otherwise).
AttnSample generate(const Generator& g, int dp, int U, std::int64_t T, std::int64_t n, int dv, std::uint64_t seed,
                    std::uint64_t trial);

// ---- codebooks ------------------------------------------------------------------------------------
enum class CodebookKind { circular, random, orthogonal, kmeans, pq };
CodebookKind parse_codebook(const std::string& name);  // circular|random|orthogonal|kmeans|pq
const char* codebook_name(CodebookKind k);

// U codebooks (one per factor; equal for the shared kinds). Every kind but circular is rescaled to RMS
// code norm 1, the circular codes' norm ([C]: the paper does not say how learned codes relate to β):
//  random      one shared 2×dp matrix of N(0, 1) entries;
//  orthogonal  shared FAVOR+-style: directions from QR of Gaussian 2×2 blocks, each scaled by the norm
//              of an independent Gaussian 2-vector;
//  kmeans      shared dp centroids (Lloyd, k-means++ seeding, 50 iterations) of all 2-D blocks of a
//              calibration sample of queries and keys (4096 of each, from the same generator, its own stream);
//  pq          per-factor centroids of factor u's blocks (product quantisation).
struct CodebookSet {
  CodebookKind kind = CodebookKind::circular;
  std::vector<Codebook> factor;  // U entries
  bool shared() const { return kind != CodebookKind::pq; }
};
CodebookSet make_codebooks(CodebookKind kind, int dp, int U, const Generator& calibration, std::uint64_t seed);

// Row-major U×dp log-probability table of x (2U) at concentration b under per-factor codebooks.
void factor_rows(const CodebookSet& cb, double b, const double* x, double* out);
// log κ for all (query, key) pairs, per-factor codebooks (sum of one-factor log_kappa_matrix calls).
Eigen::MatrixXd log_kappa_matrix(const Params& p, const CodebookSet& cb, const Eigen::MatrixXd& Q,
                                 const Eigen::MatrixXd& K);
// A one-codebook log κ matrix backend with the signature of log_kappa_matrix(p, C, Q, K): empty = that CPU
// function; the GPU one is cuda_log_kappa (attention_cuda.hpp). May be called from several threads at once.
using LogKappaFn = std::function<Eigen::MatrixXd(const Params&, const Codebook&, const Eigen::MatrixXd&,
                                                 const Eigen::MatrixXd&)>;
// As above through `fn` (per factor for per-factor codebooks, like the CPU overload).
Eigen::MatrixXd log_kappa_matrix(const Params& p, const CodebookSet& cb, const Eigen::MatrixXd& Q,
                                 const Eigen::MatrixXd& K, const LogKappaFn& fn);
// CAPE student (§1.8, E3 rope): log κ_A between CAPE-shifted address distributions,
// log(|A| Σ_i r_q((i − t_q) mod |A|) w_k((i − t_k) mod |A|)), r_q, w_k the dense distributions of the base
// vectors Qb (n×2U, β_r) and Kb (N×2U, β_w), t the positions. Dense over dp^U (require_dense first).
Eigen::MatrixXd log_kappa_cape_matrix(const Params& p, const CodebookSet& cb, const Eigen::MatrixXd& Qb,
                                      const Eigen::MatrixXd& Kb, const std::vector<std::int64_t>& pos_q,
                                      const std::vector<std::int64_t>& pos_k);

// ---- divergences -----------------------------------------------------------------------------------
// Jensen–Shannon divergence in nats of two probability vectors (0·log 0 = 0; ≤ ln 2).
double js_divergence(const double* p, const double* q, std::int64_t n);
// KL(p ‖ q') with q' = (1 − δ) q + δ/n, δ = kSmoothing (finite when q has zeros).
inline constexpr double kSmoothing = 1e-12;
double smoothed_kl(const double* p, const double* q, std::int64_t n);
// Softmax of each row of a log-weight matrix (log-sum-exp); rows of all −inf become all 0.
Eigen::MatrixXd softmax_rows(const Eigen::MatrixXd& logits);

// ---- one comparison --------------------------------------------------------------------------------
struct AttnConfig {
  Params params;                 // dp, U, β_r, β_w
  double tau = 1.0;              // teacher logits q·k/τ
  std::int64_t topk = 32;        // Top-K for the topk student and the GSU students (0 = full)
  double gamma = -INFINITY;      // GSU retention bias
  double eps = 0.0;              // GSU stabiliser
  Generator gen;
  CodebookKind codebook = CodebookKind::circular;
  std::int64_t T = 64, n = 64, trials = 20;
  int dv = 16;
  std::uint64_t seed = 0;
  std::vector<std::string> students = {"kappa", "kinf", "topk", "gsu-standard", "gsu-mass", "vq"};
};
// Student names accepted in AttnConfig::students: the six defaults and "cape" (κ_A of CAPE-shifted address
// distributions of the unrotated vectors, rope generator only; NaN columns otherwise).
const std::vector<std::string>& attn_student_names();
void validate(const AttnConfig& c);  // UserError naming the flag

struct StudentStats {
  std::string name;
  double js = NAN, js_bits = NAN, kl = NAN;  // means over live queries (NaN: not computed / no live query)
  double nmse = NAN;                         // Σ‖o_S − o_T‖² / Σ‖o_T‖² over all queries
  double missing_mass = NAN;                 // mean 1 − Σ_s α_s
  double dead_rate = NAN;                    // fraction of queries with Σ_s α_s = 0
  double planted_mass = NAN, planted_hit = NAN;  // planted generator: mean α_{s*}, argmax = s* rate
};
struct AttnResult {
  std::vector<StudentStats> students;
  double teacher_planted_mass = NAN, teacher_planted_hit = NAN;
  // E5 (computed when topk > 0 and the topk student runs): means over queries / keys / pairs.
  double read_mass = NAN, write_mass = NAN, intersection = NAN, zero_kernel_fraction = NAN;
  std::int64_t gsu_empty_reads = 0;          // reads with Σ r m = 0, over both GSU students
  const StudentStats* find(const std::string& name) const;
};
// Runs config.trials independent trials (OpenMP over trials; the reduction runs in trial order, so the
// result does not depend on the thread count). `kappa`: the kappa student's log κ backend (empty = CPU).
AttnResult run_attention(const AttnConfig& config, const LogKappaFn& kappa = {});

}  // namespace memcap::ramnet

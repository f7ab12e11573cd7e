// The Zoology-style MQAR language model of the KATA paper (spec kata.md §4.4, §2.10): tied token
// embedding, n_layers pre-norm TransformerBlocks (LayerNorm, sequence mixer, residual, LayerNorm,
// Identity state mixer whose output is added to the residual stream), final LayerNorm, tied LM head;
// layer i mixes with BaseConv(k=3) when i is even and with the chosen mixer when i is odd
// (Zoology's Hybrid([BaseConv, mixer]) picks configs[i % 2]). No positional embeddings (RoPE on the mixer's q, k
// as an option, §4.4 "+RoPE"). Backbone "transformer" (the induction probe's E.2 model, spec kata.md §4.3): every
// layer mixes with the chosen mixer and its state mixer is a 4× GELU MLP (fc1 D → 4D, exact-erf GELU, fc2 4D → D,
// both biased; fc2 initialised like W_o with the GPT-2 residual scaling) whose output is added to the residual.
// Mixers: softmax (MHA, biased Wqkv and out_proj), KATA (normalized, quadratic form) and DeltaKATA
// (delta rule, chunked), both with bias-free W_q/W_k/W_v, depthwise ShortConv(k=4) on q, k, v,
// per-head output RMSNorm (gain of d_head, ε 1e-5) and a bias-free W_o. Gated variants of §2.11 (GatedKATA,
// the convex-gate ablation, GatedDeltaKATA): unnormalized readouts with a per-head scalar decay γ_t.
// Forward and backward are written by hand (llm.c's shape: arenas, explicit buffers), templated on the
// scalar: double is the float64 reference (finite-difference checked), float the CPU training path.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kata/feature_map.hpp"
#include "kata/mqar_mixers.hpp"
#include "nn/arena.hpp"

namespace memcap::kata {

// gated: GatedKATA (§2.11.2), convex: its convex-gate ablation (§2.11.3), gated_delta: GatedDeltaKATA (§2.11.5).
enum class MixerKind { softmax, kata, delta, gated, convex, gated_delta };

struct MqarModelConfig {
  // softmax | m1 | m2 | m4 | sigma2 | sigma4 | orthant | lorentz (KATA, normalized readout) |
  // delta-m1 | delta-m2 | delta-<map> (DeltaKATA: q, k ℓ2-normalized per head, β = σ(W_β x), unnormalized) |
  // gated-<map> (GatedKATA, γ = σ(W_α x + b_α)) | convex-<map> (GatedKATA with v ← (1 − γ) v) |
  // gated-delta-<map> (GatedDeltaKATA: γ = exp(−exp(A_log) softplus(W_α x + dt_bias)), q, k ℓ2-normalized).
  std::string mixer = "softmax";
  std::int64_t vocab = 8192;
  std::int64_t d_model = 128;
  std::int64_t n_layers = 2;
  std::int64_t heads = 0;        // 0 = auto: 1 for softmax (§7.2 U1), d_model/64 (at least 1) otherwise
  std::int64_t chunk = 64;       // delta-rule chunk C
  double map_eps = -1;           // ε of the map; < 0 = §4.4 default (1e-4 PSD maps, 1e-6 orthant)
  double init_std = 0.02;        // N(0, std²) for Linear and Embedding; W_o gets std/sqrt(2·n_layers)
  bool rope = false;             // RoPE on the mixer's q and k (after the short convs, before ψ / the scores)
  double rope_base = 10000;      // RoPE base θ (§2.11: 1e4; §7.2 U4: Table 2 also uses 500, F.4 5e4)
  // zoology (§4.4: BaseConv and mixer layers alternate, Identity state mixer) | transformer (E.2, §4.3: a mixer in
  // every layer, 4× GELU MLP state mixer)
  std::string backbone = "zoology";
  // UserError naming the bad field (unknown mixer, heads not dividing d_model, g not dividing d_head, ...).
  void validate() const;
  // UserError (exit 2) when the CUDA trainer cannot run this model (gated mixers: CPU only for now).
  void require_cuda_support() const;
  // True when the model runs only on the CPU (see require_cuda_support).
  bool cpu_only() const;
};

// A resolved model: the mixer kind, head sizes, the feature map (KATA / delta) and the parameter layout.
struct MqarModel {
  MqarModelConfig cfg;
  MixerKind kind = MixerKind::softmax;
  std::int64_t heads = 1, d_head = 128;
  FeatureMap map;             // parsed for d_head (unused for softmax)
  std::string map_spec;       // canonical spec of `map` ("" for softmax)
  nn::ArenaLayout layout;     // every parameter tensor, named "embed", "l<i>.<tensor>", "normf.w", ...

  static MqarModel build(const MqarModelConfig& cfg);
  std::int64_t param_count() const { return layout.numel(); }
  bool transformer() const { return cfg.backbone == "transformer"; }
  // a 4x GELU MLP state mixer in every layer: transformer (E.2) and zoology-mlp (BaseConv / mixer alternate, as
  // zoology, with E.2's MLP); zoology's state mixer is Identity
  bool has_mlp() const { return cfg.backbone != "zoology"; }
  // one line on what a --backbone value builds (for --help, the dry run and the result's info)
  static std::string backbone_description(const std::string& backbone);
  static const std::vector<std::string>& backbones();  // the --backbone values
  bool is_mixer_layer(std::int64_t i) const { return transformer() || i % 2 == 1; }
  std::int64_t mixer_layers() const { return transformer() ? cfg.n_layers : cfg.n_layers / 2; }
  bool is_gated() const { return kind == MixerKind::gated || kind == MixerKind::convex || kind == MixerKind::gated_delta; }
  // q, k ℓ2-normalized per head before ψ (DeltaKATA, GatedDeltaKATA).
  bool l2_qk() const { return kind == MixerKind::delta || kind == MixerKind::gated_delta; }
  // Parameters without weight decay (§2.11.5: A_log and dt_bias).
  static bool no_weight_decay(const std::string& name);
  // Table 2 "state" (§2.9): softmax 2·d_model·T (KV cache at length T); KATA / delta H·n_ψ·d_head.
  std::int64_t state_size(std::int64_t T) const;
  std::string describe() const;  // one line: mixer, map, d_model, heads, d_head, layers, vocab
};

// GPU mixer-core variants (the table `kata mqar --mixer-kernel` chooses from). gemm: scores in memory, cuBLAS
// products (kernels/kata_mqar_gemm.cuh; softmax, and KATA / DeltaKATA with the PSD maps m<g> / sigma<g>, any
// d_head; DeltaKATA in kernel space for sequences of up to kDeltaGemmMaxT tokens, the chunked tiled core beyond).
// tiled: 32-row shared-memory tiles on the CUDA cores (kernels/kata_mqar_mixers.cuh; every mixer, d_head <= 128).
// chunked-eval: the O(T) chunked form of KATA on cuBLAS (kernels/kata_mqar_chunked.cuh; every map with a device
// ψ, any d_head), forward only: it runs evaluation lengths, never a length that is trained. gemm-psi: the gemm
// variant with the scores from explicit features ψ (kernels/kata_mqar_psi_gemm.cuh; KATA with m<g> / sigma<g>),
// one product of depth n_ψ instead of g or g² block products; first in the table, so auto takes it where
// gemm_psi_pays() (Σ4 at d_head 64) and the gemm variant elsewhere.
struct MixerKernelVariant {
  const char* name;
  const char* what;
  bool (*applies)(const MqarModel&);
  bool backward;  // false: forward only (the evaluation lengths of a job)
  bool in_auto;   // false: runs only when named (--mixer-kernel NAME)
  // auto's two tests at a length T (null: none): whether it beats the variants after it for this model, and the
  // T × T memory of one sequence (auto passes over it above kGemmAutoBytes unless no later variant applies).
  bool (*pays)(const MqarModel&, std::int64_t T) = nullptr;
  double (*seq_bytes)(const MqarModel&, std::int64_t T) = nullptr;
};
const std::vector<MixerKernelVariant>& mqar_mixer_kernels();
// "auto|gemm-psi|gemm|tiled|chunked-eval" (for --help and messages).
std::string mqar_mixer_kernel_names();
// The variant `want` ("auto" or a table name) resolves to for `model` at sequences of up to max_T tokens that
// run forward only (forward_only: evaluation lengths) or forward and backward: UserError (exit 2) for an unknown
// name or a variant that does not apply to this mixer / head width. `auto` takes the first variant of the table
// that applies, is in_auto and pays at this length (`pays`: chunked-eval where chunked_eval_pays(), gemm-psi where
// gemm_psi_pays()): a forward-only one at a forward-only length, else one with a backward, passing over those whose
// T × T memory per sequence (`seq_bytes`) exceeds kGemmAutoBytes (long sequences: the tiled cores need none) unless
// no other variant applies. A named forward-only variant (chunked-eval) runs the forward-only lengths and leaves the
// trained ones to auto. max_T = 0: no length given (training lengths).
inline constexpr double kGemmAutoBytes = 1024.0 * 1024.0 * 1024.0;
// Whether the O(T) chunked-eval core is expected to beat the quadratic cores for `model` at length T: from the
// H200 timings of the evaluation forward (docs/perf.md, sixteenth session; 2^18 tokens, H = 2, d_head = 64, TF32),
// chunked-eval takes ≈ 2 + 0.0175 n_ψ ms at any T and the quadratic cores ≈ (T / 4096)(7 + 6 · pairs) ms, with
// pairs the block products per score (g for M_g, g² for Σ_g, 1 for the maps with n_ψ = d_head). Crossovers: Σ4
// T ≈ 170, Σ2 and M4 ≈ 1500, orthant ≈ 1000, M2 ≈ 4400, M1 ≈ 12,000 (measured: Σ4 faster from 512 on, Σ2 / M4
// from 2048, M2 on par at 4096, M1 slower at every length up to 4096).
bool chunked_eval_pays(const MqarModel& model, std::int64_t T);
// Whether gemm-psi (scores from explicit ψ, one product of depth n_ψ) beats the block-product gemm variant for a
// KATA PSD map, forward + backward: from the H200 timings at the training shape (B 256, T 256, H 2, d_head 64,
// TF32; seventeenth session, docs/perf.md) gemm-psi takes ≈ 1.16 + 0.0039 n_ψ ms and gemm ≈ 0.45 + 0.51 · pairs
// ms (pairs = g for M_g, g² for Σ_g): measured Σ4 1.69 against 8.64 ms (pays), M4 3.09 / 2.17, Σ2 3.55 / 2.26,
// M2 5.30 / 1.47 (do not). Both are quadratic in T, so the choice does not depend on the length.
bool gemm_psi_pays(const MqarModel& model);
// Device memory of gemm-psi's T × T buffers and feature rows for one sequence (the auto limit kGemmAutoBytes).
double mqar_psi_gemm_bytes_per_sequence(const MqarModel& model, std::int64_t T);
std::string resolve_mixer_kernel(const MqarModel& model, const std::string& want, std::int64_t max_T = 0,
                                 bool forward_only = false);
// The variant of each sequence length of one job: resolve_mixer_kernel per length, so that `auto` runs the
// lengths whose T × T buffers fit on gemm and only the longer ones on tiled (Σ4's 16 block products per head
// pass 1 GiB at T = 4096, not at the training length 256), and the long evaluation lengths on chunked-eval.
// `lengths` run forward and backward (training), `eval_lengths` forward only (a length in both counts as
// trained). `name` is what the results record: the one variant, or the variants that run joined by '+' in
// table order (e.g. "gemm+chunked-eval").
struct MixerKernelPlan {
  std::vector<std::pair<std::int64_t, std::string>> by_length;  // ascending T
  std::string name;
  // The variant at length T (a length of the plan; MEMCAP_ASSERT otherwise).
  const std::string& at(std::int64_t T) const;
};
MixerKernelPlan plan_mixer_kernels(const MqarModel& model, const std::string& want,
                                   const std::vector<std::int64_t>& lengths,
                                   const std::vector<std::int64_t>& eval_lengths = {});
// Bytes of the gemm variant's T × T buffers for one sequence of length T in float32 (softmax: P and dS per
// head; KATA: the block products, P and dA per head; DeltaKATA: both block products, A_qk, A_kk and two
// cotangents per head, 0 past kDeltaGemmMaxT where the chunked core runs).
double mqar_gemm_bytes_per_sequence(const MqarModel& model, std::int64_t T);

// Parameters drawn from the §4.4 init with counter-based normals (stream = `stream`, counter = arena
// index): Linear and Embedding weights N(0, init_std²) (W_o: init_std/sqrt(2·n_layers)), biases 0,
// LayerNorm / RMSNorm gains 1, depthwise conv weights and biases U(−1/√k, 1/√k) (PyTorch's Conv1d default).
std::vector<double> mqar_init_params(const MqarModel& model, std::uint64_t seed);

// Buffers of one (micro-)batch, sized once for B sequences of length T (no allocation per step).
template <class T>
struct MqarWorkspace {
  struct Layer {
    std::vector<T> s_in, ln1, ln1_mean, ln1_rstd, mid, ln2, ln2_mean, ln2_rstd;
    std::vector<T> conv, proj;                       // BaseConv
    std::vector<T> qkv, att, lse;                    // softmax (att = head outputs before out_proj)
    std::vector<T> qp, kp, vp, q, k, v, den;         // KATA / delta (pre-conv projections, conv outputs)
    std::vector<T> onorm, onorm_rstd;                // per-head output RMSNorm
    std::vector<T> beta, qn, kn, q_rstd, k_rstd;     // delta (β, ℓ2-normalized q/k and their rstd)
    std::vector<T> gz, lg;                           // gated: gate pre-activation [N, H] and g = log γ [N, H]
    std::vector<T> fc1, act, fc2;                    // transformer backbone: MLP pre-activation [N, 4D], GELU, out
  };
  std::int64_t batch = 0, seq_len = 0;
  std::vector<std::int32_t> tokens;
  std::vector<Layer> layers;
  std::vector<T> s_final, lnf, lnf_mean, lnf_rstd;
  std::vector<std::int64_t> rows;        // labelled positions (flat b·T + t)
  std::vector<std::int32_t> targets;
  std::vector<T> logits;                 // rows × vocab: exp(logit − row max) after the forward, dlogits after the backward
  std::vector<double> sumexp;            // Σ_c exp(logit − row max) of each row
  // backward scratch
  std::vector<T> g_s, g_a, g_b, g_c, g_d, g_e, g_f, g_g, g_h, g_m;  // g_m: [N, 4D] (transformer MLP)
  void resize(const MqarModel& model, std::int64_t B, std::int64_t Tlen);
};

// Result of one forward over a (micro-)batch.
struct MqarForward {
  double loss_sum = 0;        // Σ over labelled positions of the cross-entropy (natural log)
  std::int64_t labelled = 0;  // labelled positions
  std::int64_t correct = 0;   // argmax (smallest id on ties) == label
};

// Forward over B sequences of length T (inputs, labels: B×T, labels kIgnoreLabel where unscored).
// Logits are formed only at labelled positions (the loss ignores the rest). UserError for a token
// outside the vocabulary or a label outside it (other than kIgnoreLabel). A non-finite loss is returned
// as is (the caller decides: the trainer stops with NumericError).
template <class T>
MqarForward mqar_forward(const MqarModel& model, const T* params, MqarWorkspace<T>& ws, const std::int32_t* inputs,
                         const std::int32_t* labels, std::int64_t B, std::int64_t Tlen);
// Backward of the last forward on `ws`, for the loss Σ_labelled CE · loss_scale (loss_scale = 1/N for the
// mean over a batch of N labelled positions). ADDS into grads (layout.numel()).
template <class T>
void mqar_backward(const MqarModel& model, const T* params, T* grads, MqarWorkspace<T>& ws, double loss_scale);

}  // namespace memcap::kata

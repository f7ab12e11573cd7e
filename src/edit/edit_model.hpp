// The one-layer fact-editing language model of spec hebbian.md §6.4, CPU float64 reference, in
// llm.c's shape: trainable parameters in one ParamArena (named views), frozen tensors (tied embedding
// E and the fact expert) in a second one, activations in buffers sized once per (B, T); forward and
// backward are hand-written compositions of the nn layers (rmsnorm_gain, layernorm, linear, gelu,
// rope, gated, lowrank, router_mix, tied_logits_ce) and kata's causal softmax head (W_v = W_o = I).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/arena.hpp"
#include "nn/layers.hpp"

namespace memcap::edit {

struct EditModelConfig {
  std::int64_t d = 256;          // model width (one head of width d)
  std::int64_t vocab = 32815;    // tied embedding rows (edit_data's vocabulary)
  std::int64_t qk_hidden = 256;  // width of the Q/K projection MLPs (§6.4 does not name it; d)
  std::int64_t rank = 8;         // low-rank path U ∈ R^{d×rank}, V ∈ R^{rank×d}
  std::int64_t fact_hidden = 512;  // fact expert (§2.7: swish gated MLP, h = 512)
  // Gate of the fact expert: silu for the GD-MSE expert (§2.7), identity for the data-dependent
  // Hebbian expert of Fig. 9 (whose biases are then zero).
  nn::Activation fact_gate = nn::Activation::silu;
  double rms_eps = 1e-30;        // RMSNorm_γ1, the unit norm before the expert, RMSNorm_γf
  double ln_eps = 1e-5;          // the Q/K LayerNorms
  void validate() const;         // UserError naming the bad field
};

// Trainable tensors (names of the arena views, all in `params`):
//   rms1.g [d] | q.ln.w, q.ln.b [d] | q.w1 [H,d], q.b1 [H], q.w2 [d,H], q.b2 [d] | k.* (same) |
//   router.w1 [d,d], router.b1 [d], router.w2 [1,d], router.b2 [1] | lowrank.U [d,R], lowrank.V [R,d] | rmsf.g [d]
// Frozen (in `frozen`): embed.E [V,d] | fact.U [h,d], fact.bU [h], fact.G [h,d], fact.bG [h], fact.D [d,h], fact.bD [d]
nn::ArenaLayout edit_trainable_layout(const EditModelConfig& c);
nn::ArenaLayout edit_frozen_layout(const EditModelConfig& c);
// Trainable parameter count: d + 2(2d + 2dH + H + d) + (d² + 2d + 1) + 2dR + d (H = qk_hidden, R = rank);
// 334,849 for the defaults (d = H = 256, R = 8).
std::int64_t edit_trainable_count(const EditModelConfig& c);

// Activations of one batch of B sequences of T tokens (allocated once by resize).
struct EditActs {
  std::int64_t B = 0, T = 0;
  std::vector<double> x, h, rstd1;                                  // embedding, RMSNorm_γ1
  std::vector<double> lnq, lnq_mean, lnq_rstd, preq, hq, qlin, q;  // Q path (q after RoPE)
  std::vector<double> lnk, lnk_mean, lnk_rstd, prek, hk, klin, k;  // K path
  std::vector<double> a, lse_attn;                                  // attention output, per-row lse
  std::vector<double> xt, rstd_a;                                   // unit-norm expert input
  std::vector<double> fu, fg, fh, f;                                // fact expert: U, G pre-acts, gated, output
  std::vector<double> rpre, rh, z, alpha;                           // router
  std::vector<double> mid, l;                                       // low-rank path
  std::vector<double> ffn, rstdf, o;                                // mix, RMSNorm_γf
  std::vector<double> losses, lse;                                  // CE per row
  std::vector<std::int32_t> argmax;
  std::int64_t n_valid = 0;
  // Optional [B·T, d] offset added to the fact expert's output f before the router mix, used when its
  // size is B·T·d (the free target residual r of the local editors, §4.9); its gradient is g_f.
  std::vector<double> f_add;
  // backward scratch (gradients of the activations above), sized with them
  std::vector<double> g_o, g_ffn, g_z, g_f, g_l, g_mid, g_rh, g_rpre, g_fh, g_fu, g_fg, g_xt, g_tmp, g_a;
  std::vector<double> g_q, g_k, g_h, g_lin, g_hid, g_pre, g_ln;
  void resize(const EditModelConfig& c, std::int64_t B, std::int64_t T);
};

class EditModel {
 public:
  explicit EditModel(const EditModelConfig& c);
  const EditModelConfig& config() const { return cfg_; }
  nn::ParamArena<double>& trainable() { return train_; }
  nn::ParamArena<double>& frozen() { return frozen_; }
  const nn::ParamArena<double>& trainable() const { return train_; }
  const nn::ParamArena<double>& frozen() const { return frozen_; }

  // §6.4 init (seeded): linear weights N(0, 0.02²), biases 0, LayerNorms (1, 0), RMSNorm gains 1,
  // U, V ~ N(0, 1); E ~ U(−1/√d, 1/√d) (Kaiming-uniform, ±1/16 at d = 256); the fact expert gets
  // PyTorch-Linear-like U(−1/√fan_in, 1/√fan_in) weights until a trained one is loaded.
  void init(std::uint64_t seed);

  // tokens, targets: [B, T] row-major; token −100 = padding (zero embedding), target −100 = ignored.
  // Returns the mean CE over the non-ignored targets (0 when none). UserError on a token or target
  // outside the vocabulary.
  double forward(EditActs& acts, const std::int32_t* tokens, const std::int32_t* targets, std::int64_t B,
                 std::int64_t T) const;
  // Gradient of the mean loss of the last forward, ADDED into trainable().grads (frozen tensors get none).
  void backward(EditActs& acts, const std::int32_t* targets);

 private:
  EditModelConfig cfg_;
  nn::ParamArena<double> train_, frozen_;
};

}  // namespace memcap::edit

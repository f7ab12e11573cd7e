// MQAR language model (mqar_model.hpp): configuration, parameter layout (Table 2 counts, §2.10), init
// (§4.4) and the hand-written forward / backward. Residual stream (Zoology's prenorm TransformerBlock
// with an Identity state mixer): s_0 = E[x]; per block mid = s + mixer(LN1(s)), s' = mid + LN2(mid);
// out = LN_f(s_L); logits = out Eᵀ at the labelled positions only.
#include "kata/mqar_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "kata/mqar_limits.hpp"
#include "kata/mqar_ops.hpp"
#include "kata/mqar_task.hpp"
#include "nn/edit_layers.hpp"
#include "nn/embedding.hpp"
#include "nn/layernorm.hpp"

namespace memcap::kata {

using namespace detail;

// ---------------------------------------------------------------------------------------------- config

void MqarModelConfig::validate() const {
  require(vocab >= 4 && vocab <= (std::int64_t(1) << 24), "--vocab {} must be in [4, 2^24]", vocab);
  require(d_model >= 2 && d_model <= 8192, "--d-model {} must be in [2, 8192]", d_model);
  const auto& bb = MqarModel::backbones();
  require(std::find(bb.begin(), bb.end(), backbone) != bb.end(), "--backbone '{}': use zoology ({}), transformer ({}) "
          "or zoology-mlp ({})", backbone, MqarModel::backbone_description("zoology"),
          MqarModel::backbone_description("transformer"), MqarModel::backbone_description("zoology-mlp"));
  if (backbone != "transformer")
    require(n_layers >= 2 && n_layers <= 64 && n_layers % 2 == 0,
            "--layers {} must be even and in [2, 64] (BaseConv and mixer layers alternate)", n_layers);
  else
    require(n_layers >= 1 && n_layers <= 64, "--layers {} must be in [1, 64]", n_layers);
  require(heads >= 0 && heads <= d_model, "--heads {} must be in [0, d_model] (0 = auto)", heads);
  require(chunk >= 1 && chunk <= 4096, "--chunk {} must be in [1, 4096]", chunk);
  require(std::isfinite(init_std) && init_std > 0, "init std {} must be a positive number", init_std);
  require(std::isfinite(map_eps) && (map_eps < 0 || map_eps <= 1), "--map-eps {} must be in [0, 1]", map_eps);
  require(std::isfinite(rope_base) && rope_base > 1 && rope_base <= 1e9, "--rope-base {} must be in (1, 1e9]",
          rope_base);
  require(rope || rope_base == MqarModelConfig{}.rope_base,
          "--rope-base {:g} changes nothing without --rope (RoPE is off); add --rope or leave --rope-base out",
          rope_base);
  const MqarModel m = MqarModel::build(*this);
  require(!rope || m.d_head % 2 == 0, "--rope needs an even head width, got d_head = {} (d_model {}, heads {})",
          m.d_head, d_model, m.heads);
}

bool MqarModelConfig::cpu_only() const {
  return mixer.rfind("gated-", 0) == 0 || mixer.rfind("convex-", 0) == 0;
}

void MqarModelConfig::require_cuda_support() const {
  require(!cpu_only(),
          "--mixer {}: the gated variants (gated-<map>, convex-<map>, gated-delta-<map>) run on the CPU only for now "
          "(no CUDA cores yet): use --device cpu",
          mixer);
}

const std::vector<MixerKernelVariant>& mqar_mixer_kernels() {
  static const std::vector<MixerKernelVariant> table = {
      {"gemm-psi",
       "the gemm variant with scores from explicit features psi(q) psi(k)^T, one cuBLAS product of depth n_psi per "
       "head instead of g or g^2 block products (KATA with m<g> / sigma<g>, any d_head); auto where it pays "
       "(sigma4 at d_head 64: 5.1x faster fwd + bwd)",
       [](const MqarModel& m) {
         return m.kind == MixerKind::kata && m.map.params().is_psd() && m.d_head % m.map.params().g == 0;
       },
       true, true, [](const MqarModel& m, std::int64_t) { return gemm_psi_pays(m); },
       mqar_psi_gemm_bytes_per_sequence},
      {"gemm",
       "scores in memory, cuBLAS products (softmax, KATA with m<g> / sigma<g>, any d_head; DeltaKATA with m<g> / "
       "sigma<g>, d_head <= 128: each sequence of up to 512 tokens solved in kernel space, longer ones on the chunked "
       "tiled core)",
       [](const MqarModel& m) {
         // DeltaKATA also needs the tiled chunked core for its long sequences (d_head <= 128).
         return m.kind == MixerKind::softmax ||
                ((m.kind == MixerKind::kata || (m.kind == MixerKind::delta && m.d_head <= 128)) &&
                 m.map.params().is_psd() && m.d_head % m.map.params().g == 0);
       },
       true, true, nullptr, mqar_gemm_bytes_per_sequence},
      {"tiled", "32-row shared-memory tiles on the CUDA cores (every mixer; d_head <= 128)",
       [](const MqarModel& m) {
         return m.d_head <= 128 &&
                (m.kind == MixerKind::softmax || m.kind == MixerKind::kata || m.kind == MixerKind::delta);
       },
       true, true},
      {"chunked-eval",
       "O(T) chunked KATA on cuBLAS products (KATA with any map that has a device psi, any d_head); forward only: "
       "the evaluation lengths (trained lengths take auto's choice)",
       [](const MqarModel& m) { return m.kind == MixerKind::kata && m.map.params().has_device_psi(); }, false, true,
       chunked_eval_pays},
  };
  return table;
}

std::string mqar_mixer_kernel_names() {
  std::string s = "auto";
  for (const auto& v : mqar_mixer_kernels()) s += std::string("|") + v.name;
  return s;
}

double mqar_gemm_bytes_per_sequence(const MqarModel& model, std::int64_t T) {
  double blocks = 2;  // softmax: P and dS
  if (model.kind == MixerKind::delta) {
    if (T > kDeltaGemmMaxT) return 0;  // the chunked core runs these lengths
    const MapParams p = model.map.params();
    blocks = 2.0 * (p.kind == MapKind::SumPsd ? p.g * p.g : p.g) + 4.0;  // (q,k), (k,k) products, A_qk, A_kk, dA, Y
  } else if (model.kind != MixerKind::softmax) {
    const MapParams p = model.map.params();
    blocks = (p.kind == MapKind::SumPsd ? p.g * p.g : p.g) + 2.0;  // block products, P, dA
  }
  return blocks * static_cast<double>(model.heads) * static_cast<double>(T) * static_cast<double>(T) * 4.0;
}

bool chunked_eval_pays(const MqarModel& model, std::int64_t T) {
  if (model.kind != MixerKind::kata || !model.map.params().has_device_psi()) return false;
  const MapParams p = model.map.params();
  const double pairs = p.kind == MapKind::SumPsd ? p.g * p.g : p.kind == MapKind::BlockPsd ? p.g : 1.0;
  const double chunked_ms = 2.0 + 0.0175 * static_cast<double>(p.n_features);
  const double quadratic_ms = static_cast<double>(T) / 4096.0 * (7.0 + 6.0 * pairs);
  return chunked_ms < quadratic_ms;
}

bool gemm_psi_pays(const MqarModel& model) {
  if (model.kind != MixerKind::kata || !model.map.params().is_psd()) return false;
  const MapParams p = model.map.params();
  const double pairs = p.kind == MapKind::SumPsd ? p.g * p.g : p.g;
  const double psi_ms = 1.16 + 0.0039 * static_cast<double>(p.n_features);
  const double gemm_ms = 0.45 + 0.51 * pairs;
  return psi_ms < gemm_ms;
}

double mqar_psi_gemm_bytes_per_sequence(const MqarModel& model, std::int64_t T) {
  const double nf = static_cast<double>(model.map.params().n_features);
  const double t = static_cast<double>(T);
  return static_cast<double>(model.heads) * (3.0 * t * t + 4.0 * nf * t) * 4.0;  // A, P, dA; ψ(q), ψ(k), dψ's
}

std::string resolve_mixer_kernel(const MqarModel& model, const std::string& want, std::int64_t max_T,
                                 bool forward_only) {
  const auto& table = mqar_mixer_kernels();
  if (want == "auto") {
    const auto candidate = [&](const MixerKernelVariant& v) {
      return v.in_auto && v.applies(model) && (!v.pays || v.pays(model, max_T));
    };
    if (forward_only)
      for (const auto& v : table)
        if (!v.backward && candidate(v)) return v.name;
    const char* fallback = nullptr;
    for (const auto& v : table) {
      if (!v.backward || !candidate(v)) continue;
      if (v.seq_bytes && v.seq_bytes(model, max_T) > kGemmAutoBytes) {
        fallback = v.name;  // too much T² memory at this length: a later variant if one applies, else the last such
        continue;
      }
      return v.name;
    }
    if (fallback) return fallback;
    throw UserError(fmt::format("--mixer {}: no GPU mixer kernel applies (d_head = {})", model.cfg.mixer, model.d_head));
  }
  for (const auto& v : table) {
    if (want != v.name) continue;
    require(v.applies(model), "--mixer-kernel {} does not apply to --mixer {} at d_head = {} ({} covers: {})", want,
            model.cfg.mixer, model.d_head, v.name, v.what);
    if (!v.backward && !forward_only) return resolve_mixer_kernel(model, "auto", max_T, false);  // a trained length
    return v.name;
  }
  throw UserError(fmt::format("--mixer-kernel '{}': unknown variant; use {}", want, mqar_mixer_kernel_names()));
}

MixerKernelPlan plan_mixer_kernels(const MqarModel& model, const std::string& want,
                                   const std::vector<std::int64_t>& lengths,
                                   const std::vector<std::int64_t>& eval_lengths) {
  MixerKernelPlan p;
  std::vector<std::int64_t> ts = lengths;
  ts.insert(ts.end(), eval_lengths.begin(), eval_lengths.end());
  std::sort(ts.begin(), ts.end());
  ts.erase(std::unique(ts.begin(), ts.end()), ts.end());
  if (ts.empty()) ts.push_back(0);  // no length given: the training-length choice
  std::vector<std::string> used;
  for (const std::int64_t T : ts) {
    const bool trained = T == 0 || std::find(lengths.begin(), lengths.end(), T) != lengths.end();
    p.by_length.emplace_back(T, resolve_mixer_kernel(model, want, T, !trained));
    used.push_back(p.by_length.back().second);
  }
  for (const auto& v : mqar_mixer_kernels())
    if (std::find(used.begin(), used.end(), v.name) != used.end())
      p.name += (p.name.empty() ? "" : "+") + std::string(v.name);
  return p;
}

const std::string& MixerKernelPlan::at(std::int64_t T) const {
  for (const auto& [len, name] : by_length)
    if (len == T) return name;
  MEMCAP_ASSERT(false, "MixerKernelPlan: length not in the plan");
  return by_length.front().second;
}

bool MqarModel::no_weight_decay(const std::string& name) {
  auto ends = [&](const char* t) {
    const std::string e(t);
    return name.size() >= e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0;
  };
  return ends(".A_log") || ends(".dt_bias");
}

MqarModel MqarModel::build(const MqarModelConfig& cfg) {
  MqarModel m;
  m.cfg = cfg;
  std::string map_name;
  if (cfg.mixer == "softmax") {
    m.kind = MixerKind::softmax;
  } else if (cfg.mixer.rfind("gated-delta-", 0) == 0) {
    m.kind = MixerKind::gated_delta;
    map_name = cfg.mixer.substr(12);
  } else if (cfg.mixer.rfind("gated-", 0) == 0) {
    m.kind = MixerKind::gated;
    map_name = cfg.mixer.substr(6);
  } else if (cfg.mixer.rfind("convex-", 0) == 0) {
    m.kind = MixerKind::convex;
    map_name = cfg.mixer.substr(7);
  } else if (cfg.mixer.rfind("delta-", 0) == 0) {
    m.kind = MixerKind::delta;
    map_name = cfg.mixer.substr(6);
  } else {
    m.kind = MixerKind::kata;
    map_name = cfg.mixer;
  }
  const bool known = m.kind == MixerKind::softmax || map_name == "m1" || map_name == "m2" || map_name == "m4" ||
                     map_name == "sigma2" || map_name == "sigma4" || map_name == "orthant" || map_name == "lorentz";
  require(known,
          "unknown --mixer '{}': use softmax, m1, m2, m4, sigma2, sigma4, orthant, lorentz, delta-m1, delta-m2 "
          "(delta-<map>, gated-<map>, convex-<map>, gated-delta-<map> for any of the maps)",
          cfg.mixer);
  m.heads = cfg.heads > 0 ? cfg.heads : (m.kind == MixerKind::softmax ? 1 : std::max<std::int64_t>(1, cfg.d_model / 64));
  require(cfg.d_model % m.heads == 0, "--heads {} does not divide --d-model {}", m.heads, cfg.d_model);
  m.d_head = cfg.d_model / m.heads;
  if (m.kind != MixerKind::softmax) {
    const bool psd = map_name[0] == 'm' || map_name[0] == 's';
    double eps = cfg.map_eps >= 0 ? cfg.map_eps : (map_name == "orthant" ? 1e-6 : 1e-4);
    std::string spec = map_name;
    if (psd || map_name == "orthant") spec += fmt::format(":eps={}", eps);
    try {
      m.map = FeatureMap::parse(spec, m.d_head);
    } catch (const UserError& e) {
      throw UserError(fmt::format("--mixer {} at d_head = {}: {}", cfg.mixer, m.d_head, e.what()));
    }
    m.map_spec = m.map.canonical_spec();
  }
  const std::int64_t D = cfg.d_model;
  auto& L = m.layout;
  L.add("embed", {cfg.vocab, D});
  for (std::int64_t i = 0; i < cfg.n_layers; ++i) {
    L.add(lname(i, "norm1.w"), {D});
    L.add(lname(i, "norm1.b"), {D});
    if (!m.is_mixer_layer(i)) {
      L.add(lname(i, "conv.w"), {D, kBaseConvK});
      L.add(lname(i, "conv.b"), {D});
      L.add(lname(i, "proj.w"), {D, D});
      L.add(lname(i, "proj.b"), {D});
    } else if (m.kind == MixerKind::softmax) {
      L.add(lname(i, "wqkv.w"), {3 * D, D});
      L.add(lname(i, "wqkv.b"), {3 * D});
      L.add(lname(i, "wo.w"), {D, D});
      L.add(lname(i, "wo.b"), {D});
    } else {
      L.add(lname(i, "wq.w"), {D, D});
      L.add(lname(i, "wk.w"), {D, D});
      L.add(lname(i, "wv.w"), {D, D});
      L.add(lname(i, "convq.w"), {D, kMixerConvK});
      L.add(lname(i, "convk.w"), {D, kMixerConvK});
      L.add(lname(i, "convv.w"), {D, kMixerConvK});
      if (m.kind == MixerKind::delta || m.kind == MixerKind::gated_delta) L.add(lname(i, "wbeta.w"), {m.heads, D});
      if (m.kind == MixerKind::gated || m.kind == MixerKind::convex) {  // W_α ∈ R^{d×H} with bias: +H(d+1)
        L.add(lname(i, "walpha.w"), {m.heads, D});
        L.add(lname(i, "walpha.b"), {m.heads});
      }
      if (m.kind == MixerKind::gated_delta) {  // a_proj (no bias), A_log, dt_bias: +H(d+2)
        L.add(lname(i, "walpha.w"), {m.heads, D});
        L.add(lname(i, "A_log"), {m.heads});
        L.add(lname(i, "dt_bias"), {m.heads});
      }
      L.add(lname(i, "onorm.w"), {m.d_head});
      L.add(lname(i, "wo.w"), {D, D});
    }
    L.add(lname(i, "norm2.w"), {D});
    L.add(lname(i, "norm2.b"), {D});
    if (m.has_mlp()) {  // the 4x GELU MLP state mixer (E.2)
      L.add(lname(i, "fc1.w"), {4 * D, D});
      L.add(lname(i, "fc1.b"), {4 * D});
      L.add(lname(i, "fc2.w"), {D, 4 * D});
      L.add(lname(i, "fc2.b"), {D});
    }
  }
  L.add("normf.w", {D});
  L.add("normf.b", {D});
  return m;
}

const std::vector<std::string>& MqarModel::backbones() {
  static const std::vector<std::string> names = {"zoology", "transformer", "zoology-mlp"};
  return names;
}

std::string MqarModel::backbone_description(const std::string& backbone) {
  if (backbone == "zoology") return "§4.4: BaseConv and mixer layers alternate, Identity state mixer";
  if (backbone == "transformer") return "E.2 as read: a mixer and a 4x GELU MLP in every layer";
  if (backbone == "zoology-mlp") return "BaseConv and mixer layers alternate, a 4x GELU MLP in every layer";
  return "unknown backbone";
}

std::int64_t MqarModel::state_size(std::int64_t T) const {
  const std::int64_t mixers = mixer_layers();
  if (kind == MixerKind::softmax) return mixers * 2 * cfg.d_model * T;
  return mixers * heads * map.feature_dim() * d_head;
}

std::string MqarModel::describe() const {
  return fmt::format("mixer {}{}  d_model {}  heads {}  d_head {}  layers {}  vocab {}{}{}", cfg.mixer,
                     map_spec.empty() ? std::string() : fmt::format(" (map {}, n_psi {})", map_spec, map.feature_dim()),
                     cfg.d_model, heads, d_head, cfg.n_layers, cfg.vocab,
                     cfg.rope ? fmt::format("  rope {:g}", cfg.rope_base) : std::string(),
                     has_mlp() ? fmt::format("  backbone {} (4x GELU MLP)", cfg.backbone) : std::string());
}

std::vector<double> mqar_init_params(const MqarModel& model, std::uint64_t seed) {
  constexpr std::uint64_t kInitStream = rng::kUser + 120;  // MQAR model init (counter = arena index)
  std::vector<double> p(static_cast<std::size_t>(model.layout.numel()), 0.0);
  const double std_lin = model.cfg.init_std;
  const double std_out = std_lin / std::sqrt(2.0 * static_cast<double>(model.cfg.n_layers));
  for (const auto& v : model.layout.views()) {
    const std::string& n = v.name;
    auto ends = [&](const char* s) {
      const std::string t(s);
      return n.size() >= t.size() && n.compare(n.size() - t.size(), t.size(), t) == 0;
    };
    for (std::int64_t j = 0; j < v.numel; ++j) {
      const auto idx = static_cast<std::uint64_t>(v.offset + j);
      double x = 0;
      if (n == "embed" || ends(".wqkv.w") || ends(".proj.w") || ends(".wq.w") || ends(".wk.w") || ends(".wv.w") ||
          ends(".wbeta.w") || ends(".walpha.w") || ends(".fc1.w")) {
        x = std_lin * rng::normal(seed, kInitStream, idx);
      } else if (ends(".wo.w") || ends(".fc2.w")) {  // GPT-2 residual scaling of the projections into the stream
        x = std_out * rng::normal(seed, kInitStream, idx);
      } else if (ends("norm1.w") || ends("norm2.w") || n == "normf.w" || ends("onorm.w")) {
        x = 1.0;
      } else if (ends("conv.w") || ends("conv.b") || ends("convq.w") || ends("convk.w") || ends("convv.w")) {
        const double k = static_cast<double>(v.shape.size() == 2 ? v.shape[1] : kBaseConvK);
        x = (2.0 * rng::uniform(seed, kInitStream, idx) - 1.0) / std::sqrt(k);
      } else if (ends(".A_log")) {  // §2.11.5: A_log = log U(0, 16)
        x = std::log(16.0 * rng::uniform(seed, kInitStream, idx));
      } else if (ends(".dt_bias")) {  // softplus(dt_bias) = y ~ U(1e-3, 1e-1): dt_bias = y + log(−expm1(−y))
        const double y = 1e-3 + (1e-1 - 1e-3) * rng::uniform(seed, kInitStream, idx);
        x = y + std::log(-std::expm1(-y));
      }  // biases (walpha.b too): 0
      p[static_cast<std::size_t>(v.offset + j)] = x;
    }
  }
  return p;
}

// ---------------------------------------------------------------------------------------------- workspace

template <class T>
void MqarWorkspace<T>::resize(const MqarModel& model, std::int64_t Bn, std::int64_t Tn) {
  if (Bn == batch && Tn == seq_len && !layers.empty()) return;
  batch = Bn;
  seq_len = Tn;
  const auto N = static_cast<std::size_t>(Bn * Tn), D = static_cast<std::size_t>(model.cfg.d_model),
             H = static_cast<std::size_t>(model.heads);
  tokens.resize(N);
  layers.assign(static_cast<std::size_t>(model.cfg.n_layers), Layer{});
  for (std::int64_t i = 0; i < model.cfg.n_layers; ++i) {
    Layer& l = layers[static_cast<std::size_t>(i)];
    for (auto* v : {&l.s_in, &l.ln1, &l.mid, &l.ln2}) v->resize(N * D);
    for (auto* v : {&l.ln1_mean, &l.ln1_rstd, &l.ln2_mean, &l.ln2_rstd}) v->resize(N);
    if (model.has_mlp()) {
      l.fc1.resize(4 * N * D);
      l.act.resize(4 * N * D);
      l.fc2.resize(N * D);
    }
    if (!model.is_mixer_layer(i)) {
      l.conv.resize(N * D);
      l.proj.resize(N * D);
    } else if (model.kind == MixerKind::softmax) {
      l.qkv.resize(3 * N * D);
      l.att.resize(N * D);
      l.lse.resize(N * H);
    } else {
      for (auto* v : {&l.qp, &l.kp, &l.vp, &l.q, &l.k, &l.v, &l.att, &l.onorm}) v->resize(N * D);
      l.den.resize(N * H);
      l.onorm_rstd.resize(N * H);
      if (model.is_gated()) {
        l.gz.resize(N * H);
        l.lg.resize(N * H);
      }
      if (model.l2_qk()) {
        l.beta.resize(N * H);
        l.qn.resize(N * D);
        l.kn.resize(N * D);
        l.q_rstd.resize(N * H);
        l.k_rstd.resize(N * H);
      }
    }
  }
  for (auto* v : {&s_final, &lnf}) v->resize(N * D);
  lnf_mean.resize(N);
  lnf_rstd.resize(N);
  for (auto* v : {&g_s, &g_a, &g_b, &g_c, &g_d}) v->resize(N * D);
  g_e.resize(3 * N * D);
  g_f.resize(3 * N * D);
  g_g.resize(N * H);
  g_h.resize(N * H);
  g_m.resize(model.has_mlp() ? 4 * N * D : 0);
}

namespace {

// The residual stream's next input adds this to mid: the state mixer's output (LN2's output itself for Zoology's
// Identity state mixer, the MLP's output for the transformer backbone).
template <class T>
const T* state_out(const MqarModel& m, const typename MqarWorkspace<T>::Layer& l) {
  return m.has_mlp() ? l.fc2.data() : l.ln2.data();
}

// Transformer backbone: fc2 = GELU(LN2 W1ᵀ + b1) W2ᵀ + b2.
template <class T>
void mlp_forward(const MqarModel& m, const T* params, typename MqarWorkspace<T>::Layer& l, std::int64_t i,
                 std::int64_t N) {
  const std::int64_t D = m.cfg.d_model;
  linear_fwd(l.fc1.data(), l.ln2.data(), P(m, params, lname(i, "fc1.w")), P(m, params, lname(i, "fc1.b")), N, D,
             4 * D);
  nn::cpu::gelu_forward(l.act.data(), l.fc1.data(), 4 * N * D);
  linear_fwd(l.fc2.data(), l.act.data(), P(m, params, lname(i, "fc2.w")), P(m, params, lname(i, "fc2.b")), N, 4 * D,
             D);
}

// Its backward: dln2 (overwritten) from dout; the parameter gradients added; dh = ws.g_m.
template <class T>
void mlp_backward(const MqarModel& m, const T* params, T* grads, MqarWorkspace<T>& ws,
                  const typename MqarWorkspace<T>::Layer& l, std::int64_t i, const T* dout, T* dln2, std::int64_t N) {
  const std::int64_t D = m.cfg.d_model;
  T* dh = ws.g_m.data();
  linear_bwd(dh, G(m, grads, lname(i, "fc2.w")), G(m, grads, lname(i, "fc2.b")), dout, l.act.data(),
             P(m, params, lname(i, "fc2.w")), N, 4 * D, D);
  nn::cpu::gelu_backward(dh, dh, l.fc1.data(), 4 * N * D);
  linear_bwd(dln2, G(m, grads, lname(i, "fc1.w")), G(m, grads, lname(i, "fc1.b")), dh, l.ln2.data(),
             P(m, params, lname(i, "fc1.w")), N, D, 4 * D);
}

}  // namespace

// ---------------------------------------------------------------------------------------------- forward

template <class T>
MqarForward mqar_forward(const MqarModel& m, const T* params, MqarWorkspace<T>& ws, const std::int32_t* inputs,
                         const std::int32_t* labels, std::int64_t B, std::int64_t Tlen) {
  require(B >= 1 && Tlen >= 1, "mqar_forward: need B >= 1 and T >= 1 (got {}, {})", B, Tlen);
  ws.resize(m, B, Tlen);
  const std::int64_t D = m.cfg.d_model, N = B * Tlen, V = m.cfg.vocab;
  std::copy(inputs, inputs + N, ws.tokens.begin());
  T* s = ws.layers[0].s_in.data();
  nn::cpu::embedding_forward(s, inputs, P(m, params, "embed"), N, V, D);
  for (std::int64_t i = 0; i < m.cfg.n_layers; ++i) {
    auto& l = ws.layers[static_cast<std::size_t>(i)];
    // the residual adds go through the fused add + LayerNorm (the GPU model's kernels of the same names)
    if (i > 0) {  // s_i = mid_{i-1} + state mixer(LN2_{i-1}(mid_{i-1}))
      const auto& pl = ws.layers[static_cast<std::size_t>(i - 1)];
      nn::cpu::add_layernorm_forward(l.s_in.data(), l.ln1.data(), l.ln1_mean.data(), l.ln1_rstd.data(), pl.mid.data(),
                                     state_out<T>(m, pl), P(m, params, lname(i, "norm1.w")),
                                     P(m, params, lname(i, "norm1.b")), N, D, kLnEps);
    } else {
      nn::cpu::layernorm_forward(l.ln1.data(), l.ln1_mean.data(), l.ln1_rstd.data(), l.s_in.data(),
                                 P(m, params, lname(i, "norm1.w")), P(m, params, lname(i, "norm1.b")), N, D, kLnEps);
    }
    mixer_layer_forward(m, params, l, i, B, Tlen, l.mid.data());
    nn::cpu::add_layernorm_forward(l.mid.data(), l.ln2.data(), l.ln2_mean.data(), l.ln2_rstd.data(), l.mid.data(),
                                   l.s_in.data(), P(m, params, lname(i, "norm2.w")), P(m, params, lname(i, "norm2.b")),
                                   N, D, kLnEps);
    if (m.has_mlp()) mlp_forward(m, params, l, i, N);
  }
  const auto& last = ws.layers.back();
  nn::cpu::add_layernorm_forward(ws.s_final.data(), ws.lnf.data(), ws.lnf_mean.data(), ws.lnf_rstd.data(),
                                 last.mid.data(), state_out<T>(m, last), P(m, params, "normf.w"),
                                 P(m, params, "normf.b"), N, D, kLnEps);
  // Tied head at the labelled positions.
  ws.rows.clear();
  ws.targets.clear();
  for (std::int64_t n = 0; n < N; ++n) {
    if (labels[n] == kIgnoreLabel) continue;
    require(labels[n] >= 0 && labels[n] < V, "label {} at position {} is outside the vocabulary [0, {})", labels[n], n, V);
    ws.rows.push_back(n);
    ws.targets.push_back(labels[n]);
  }
  const auto nl = static_cast<std::int64_t>(ws.rows.size());
  MqarForward r;
  r.labelled = nl;
  if (nl == 0) return r;
  Mat<T> F(nl, D);
  for (std::int64_t a = 0; a < nl; ++a) F.row(a) = CRowMap<T>(ws.lnf.data() + ws.rows[static_cast<std::size_t>(a)] * D, 1, D);
  ws.logits.resize(static_cast<std::size_t>(nl * V));
  RowMap<T> Lg(ws.logits.data(), nl, V);
  Lg.noalias() = F * CRowMap<T>(P(m, params, "embed"), V, D).transpose();
  ws.sumexp.resize(static_cast<std::size_t>(nl));
  for (std::int64_t a = 0; a < nl; ++a) {
    const T* z = ws.logits.data() + a * V;
    // argmax, smallest id on ties: vectorized max, then the first position holding it.
    const T mx = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(z, V).maxCoeff();
    std::int64_t best = 0;
    while (best + 1 < V && !(z[best] == mx)) ++best;
    const double zt = static_cast<double>(z[ws.targets[static_cast<std::size_t>(a)]]);
    // Keep exp(z − max) in place (Eigen's vectorized exp); the backward rescales it to softmax · loss_scale.
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> e(ws.logits.data() + a * V, V);
    e = (e - mx).exp();
    const double se = static_cast<double>(e.sum());
    const double lse = static_cast<double>(mx) + std::log(se);
    ws.sumexp[static_cast<std::size_t>(a)] = se;
    r.loss_sum += lse - zt;
    r.correct += best == ws.targets[static_cast<std::size_t>(a)] ? 1 : 0;
  }
  return r;
}

template <class T>
void mqar_backward(const MqarModel& m, const T* params, T* grads, MqarWorkspace<T>& ws, double loss_scale) {
  const std::int64_t D = m.cfg.d_model, N = ws.batch * ws.seq_len, V = m.cfg.vocab;
  const auto nl = static_cast<std::int64_t>(ws.rows.size());
  T* dlnf = ws.g_a.data();
  std::fill(dlnf, dlnf + N * D, T(0));
  if (nl > 0) {
    // dlogits = (softmax − onehot) · loss_scale, in place: the forward left exp(z − max) and its sum.
    for (std::int64_t a = 0; a < nl; ++a) {
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> z(ws.logits.data() + a * V, V);
      z *= static_cast<T>(loss_scale / ws.sumexp[static_cast<std::size_t>(a)]);
      z(ws.targets[static_cast<std::size_t>(a)]) -= static_cast<T>(loss_scale);
    }
    Mat<T> F(nl, D);
    for (std::int64_t a = 0; a < nl; ++a) F.row(a) = CRowMap<T>(ws.lnf.data() + ws.rows[static_cast<std::size_t>(a)] * D, 1, D);
    CRowMap<T> dL(ws.logits.data(), nl, V);
    const Mat<T> dF = dL * CRowMap<T>(P(m, params, "embed"), V, D);
    RowMap<T>(G(m, grads, "embed"), V, D).noalias() += dL.transpose() * F;
    for (std::int64_t a = 0; a < nl; ++a)
      RowMap<T>(dlnf + ws.rows[static_cast<std::size_t>(a)] * D, 1, D) += dF.row(a);
  }
  T* ds = ws.g_s.data();
  nn::cpu::layernorm_backward(ds, G(m, grads, "normf.w"), G(m, grads, "normf.b"), dlnf, ws.s_final.data(),
                              P(m, params, "normf.w"), ws.lnf_mean.data(), ws.lnf_rstd.data(), N, D);
  T* dmid = ws.g_a.data();
  T* dln1 = ws.g_c.data();
  for (std::int64_t i = m.cfg.n_layers - 1; i >= 0; --i) {
    auto& l = ws.layers[static_cast<std::size_t>(i)];
    // s_{i+1} = mid + state mixer(LN2(mid)): dmid = ds + LN2's input gradient (LN2's output gradient is ds for the
    // Identity state mixer, the MLP's input gradient for the transformer backbone)
    const T* dln2 = ds;
    if (m.has_mlp()) {
      mlp_backward(m, params, grads, ws, l, i, ds, dln1, N);  // dln1 is free until the mixer's backward
      dln2 = dln1;
    }
    nn::cpu::layernorm_backward_add(dmid, G(m, grads, lname(i, "norm2.w")), G(m, grads, lname(i, "norm2.b")), ds, dln2,
                                    l.mid.data(), P(m, params, lname(i, "norm2.w")), l.ln2_mean.data(),
                                    l.ln2_rstd.data(), N, D);
    // mid = s_in + mixer(LN1(s_in)): ds = dmid + LN1's input gradient
    mixer_layer_backward(m, params, grads, ws, l, i, dmid, dln1);
    nn::cpu::layernorm_backward_add(ds, G(m, grads, lname(i, "norm1.w")), G(m, grads, lname(i, "norm1.b")), dmid, dln1,
                                    l.s_in.data(), P(m, params, lname(i, "norm1.w")), l.ln1_mean.data(),
                                    l.ln1_rstd.data(), N, D);
  }
  nn::cpu::embedding_backward(G(m, grads, "embed"), ws.tokens.data(), ds, N, D);
}

template struct MqarWorkspace<double>;
template struct MqarWorkspace<float>;
template MqarForward mqar_forward<double>(const MqarModel&, const double*, MqarWorkspace<double>&, const std::int32_t*,
                                          const std::int32_t*, std::int64_t, std::int64_t);
template MqarForward mqar_forward<float>(const MqarModel&, const float*, MqarWorkspace<float>&, const std::int32_t*,
                                         const std::int32_t*, std::int64_t, std::int64_t);
template void mqar_backward<double>(const MqarModel&, const double*, double*, MqarWorkspace<double>&, double);
template void mqar_backward<float>(const MqarModel&, const float*, float*, MqarWorkspace<float>&, double);

}  // namespace memcap::kata

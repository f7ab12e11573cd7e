// SSFR problem setup (mlp/ssfr_setup.hpp): fact set, maps, embeddings and inserted MLPs.
#include "mlp/ssfr_setup.hpp"

#include <limits>

#include <fmt/format.h>

#include <chrono>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "io/h5.hpp"
#include "mlp/constructions.hpp"
#include "mlp/model_io.hpp"
#ifdef MEMCAP_HAVE_CUDA
#include "mlp/construct_cuda.hpp"
#endif

namespace memcap::mlp {

namespace {

std::vector<std::int32_t> to_int32(const Eigen::VectorXi& v) {
  return std::vector<std::int32_t>(v.data(), v.data() + v.size());
}

std::vector<double> row_major(const Eigen::MatrixXd& M) {
  std::vector<double> out(static_cast<std::size_t>(M.size()));
  Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(out.data(), M.rows(), M.cols()) = M;
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

SsfrMlpChoice parse_ssfr_mlp(const std::string& text) {
  SsfrMlpChoice c;
  require(!text.empty(), "--mlp is empty: use identity, gd, a method spec (e.g. hebbian:whitened) or FILE.h5");
  if (text == "identity") {
    c.kind = SsfrMlpKind::identity;
    c.text = text;
  } else if (ends_with(text, ".h5") || ends_with(text, ".hdf5") || text.find('/') != std::string::npos) {
    c.kind = SsfrMlpKind::file;
    c.file = text;
    c.text = text;
  } else {
    c.kind = SsfrMlpKind::method;
    // "gd" and "gd,opt=..." mean the released code's GD inside Transformers (gd:transformer).
    c.text = text == "gd" ? "gd:transformer" : text.rfind("gd,", 0) == 0 ? "gd:transformer" + text.substr(2) : text;
    c.method = parse_method(c.text);
  }
  return c;
}

InsertedMlpFile read_inserted_mlp(const std::string& path) {
  if (!h5::is_hdf5(path)) throw IoError(fmt::format("--mlp '{}' is missing or not an HDF5 file", path));
  const auto f = h5::File::open_read(path);
  if (!f.exists("facts") || !f.exists("mlp"))
    throw IoError(fmt::format("--mlp '{}' has no /facts and /mlp groups (write it with hebb build or hebb train)", path));
  InsertedMlpFile r;
  r.facts = read_factset(f.open_group("facts"));
  const auto g = f.open_group("mlp");
  r.mlp = read_mlp(g);
  r.seed = static_cast<std::uint64_t>(g.attr_int("seed").value_or(0));
  require(r.mlp.dim() == r.facts.d() && r.mlp.B.rows() == r.facts.d(),
          "--mlp '{}': the MLP maps d = {} to {} but the fact set has d = {}", path, r.mlp.dim(), r.mlp.B.rows(),
          r.facts.d());
  require(r.facts.P() == r.facts.F(),
          "--mlp '{}' stores F = {} keys and P = {} values; SSFR gives keys and values the same token ids, so it "
          "needs P = F (build it with --values 0)",
          path, r.facts.F(), r.facts.P());
  return r;
}

Eigen::VectorXi ssfr_map_b(std::int64_t F, std::uint64_t seed) { return rng::permutation(F, seed, rng::kSsfrMapB); }

Eigen::MatrixXd ssfr_junk_rows(std::int64_t junk_vocab, std::int64_t d, std::uint64_t seed) {
  return rng::sphere_rows(junk_vocab + 1, d, seed, rng::kSsfrEmbed);
}

nn::FrozenMlp to_frozen_mlp(const GatedMLP& mlp) {
  nn::FrozenMlp f;
  f.d = mlp.dim();
  f.m = mlp.width();
  f.gate = nn::parse_activation(mlp.gate.c_str());
  f.A = row_major(mlp.A);
  f.G = row_major(mlp.G);
  f.B = row_major(mlp.B);
  auto vec = [](const Eigen::VectorXd& v) { return std::vector<double>(v.data(), v.data() + v.size()); };
  f.bias_up = vec(mlp.bias_up);
  f.bias_gate = vec(mlp.bias_gate);
  f.bias_out = vec(mlp.bias_out);
  return f;
}

double standalone_accuracy(const GatedMLP& mlp, const FactSet& facts) {
  const Eigen::MatrixXd out = mlp.forward(facts.keys);            // F x d
  const Eigen::MatrixXd scores = out * facts.values.transpose();  // F x P
  std::int64_t hits = 0;
  for (Eigen::Index i = 0; i < scores.rows(); ++i) {
    Eigen::Index best = 0;
    for (Eigen::Index j = 1; j < scores.cols(); ++j)
      if (scores(i, j) > scores(i, best)) best = j;
    hits += best == facts.map[i];
  }
  return static_cast<double>(hits) / static_cast<double>(facts.F());
}

GatedMLP build_ssfr_mlp(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed,
                        gpu::Handles* handles) {
  if (!handles) return build_mlp(method, facts, width, seed);
#ifdef MEMCAP_HAVE_CUDA
  return build_mlp_cuda(method, facts, width, seed, *handles);
#else
  throw DeviceError("this build of hebb has no CUDA support; use --device cpu");
#endif
}

SsfrSetup make_ssfr_setup(const SsfrSetupSpec& spec, const SsfrMlpChoice& choice, const InsertedMlpFile* file) {
  const auto t0 = std::chrono::steady_clock::now();
  SsfrSetup s;
  const std::int64_t d = spec.block.dim, F = spec.task.facts;
  s.mlp_text = choice.text;
  if (choice.kind == SsfrMlpKind::file) {
    MEMCAP_ASSERT(file != nullptr, "make_ssfr_setup: file mode needs the loaded file");
    s.facts = file->facts;
    require(s.facts.d() == d, "--mlp '{}' has d = {} but the model has d = {}", choice.file, s.facts.d(), d);
    require(s.facts.F() == F, "--mlp '{}' stores F = {} facts but the task has F = {}", choice.file, s.facts.F(), F);
    s.mlp_a = file->mlp;
    s.mlp_b = file->mlp;
    s.mlp_text = file->mlp.method.empty() ? choice.file : file->mlp.method;
  } else {
    FactSetSpec fspec;
    fspec.dim = d;
    fspec.facts = F;
    fspec.tied = true;
    fspec.map = choice.kind == SsfrMlpKind::identity ? "identity" : "permutation";
    fspec.seed = spec.seed;
    s.facts = make_factset(fspec);
    if (choice.kind == SsfrMlpKind::method) {
      s.has_map_b = true;
      FactSet fb = s.facts;
      fb.map = ssfr_map_b(F, spec.seed);
      // Same method seed for both: identical random features (Hebbian variants), identical GD init.
      s.mlp_a = build_ssfr_mlp(choice.method, s.facts, spec.width, spec.seed, spec.handles);
      s.mlp_a.method = choice.text;
      s.mlp_acc_a = standalone_accuracy(s.mlp_a, s.facts);
      if (s.mlp_acc_a < spec.gate) {  // §4.6 (a): fail at once, MLP_B is never built
        s.gate_failed = true;
        s.width = s.mlp_a.width();
        s.mlp_params = s.mlp_a.param_count;
        s.mlp_acc_b = std::numeric_limits<double>::quiet_NaN();
        s.build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return s;
      }
      s.mlp_b = build_ssfr_mlp(choice.method, fb, spec.width, spec.seed, spec.handles);
      s.mlp_b.method = choice.text;
      s.mlp_acc_b = standalone_accuracy(s.mlp_b, fb);
    }
  }
  nn::SsfrProblem& p = s.problem;
  p.task = spec.task;
  p.block = spec.block;
  const std::int64_t V = spec.task.vocab();
  Eigen::MatrixXd Ein(V, d), Eout = Eigen::MatrixXd::Zero(V, d);
  Ein.topRows(F) = s.facts.keys;
  Ein.bottomRows(V - F) = ssfr_junk_rows(spec.task.junk_vocab, d, spec.seed);
  if (s.facts.tied) {
    Eout = Ein;
  } else {
    Eout.topRows(F) = s.facts.values;  // untied (spec §4.8): output rows of junk and Q stay 0
  }
  p.embed_in = row_major(Ein);
  p.embed_out = row_major(Eout);
  p.map_a = to_int32(s.facts.map);
  p.map_b = s.has_map_b ? to_int32(ssfr_map_b(F, spec.seed)) : p.map_a;
  if (choice.kind == SsfrMlpKind::identity) {
    p.mlp_a.d = p.mlp_b.d = d;
    p.mlp_a.m = p.mlp_b.m = 0;
  } else {
    s.width = s.mlp_a.width();
    s.mlp_params = s.mlp_a.param_count;
    s.mlp_acc_a = standalone_accuracy(s.mlp_a, s.facts);
    if (!s.has_map_b) s.mlp_acc_b = s.mlp_acc_a;
    p.mlp_a = to_frozen_mlp(s.mlp_a);
    p.mlp_b = to_frozen_mlp(s.mlp_b);
  }
  p.validate();
  s.build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace memcap::mlp

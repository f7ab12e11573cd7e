// What one SSFR training holds fixed (spec hebbian.md §6.1, §6.2, §4.6): the fact set and maps A
// and B, the embedding tables (fact rows = the fact table, junk and query rows = fresh sphere
// rows), and the frozen inserted MLPs MLP_A / MLP_B built by any memcap construction, trained by
// GD, read from a `hebb build` / `hebb train` file, or the identity. Bridges src/mlp (GatedMLP,
// constructions) to the nn::SsfrProblem the trainers take.
#pragma once
#include <cstdint>
#include <string>

#include "mlp/factset.hpp"
#include "mlp/gated_mlp.hpp"
#include "mlp/method.hpp"
#include "nn/ssfr_model.hpp"

namespace memcap::gpu { class Handles; }

namespace memcap::mlp {

enum class SsfrMlpKind { identity, method, file };

// The --mlp choice: "identity", "gd" or "gd,OPTIONS" (= gd:transformer[,OPTIONS], the released
// code's GD inside Transformers, spec §2.6 DISCREPANCY), any other method spec, or a model file (a name ending in .h5 or
// .hdf5, or containing '/'). UserError on an unknown method.
struct SsfrMlpChoice {
  SsfrMlpKind kind = SsfrMlpKind::method;
  MethodSpec method;        // kind == method
  std::string file;         // kind == file
  std::string text;         // resolved text, recorded in results ("gd" becomes "gd:transformer")
};
SsfrMlpChoice parse_ssfr_mlp(const std::string& text);

// A model file of hebb build / hebb train: /facts and /mlp.
struct InsertedMlpFile {
  FactSet facts;
  GatedMLP mlp;
  std::uint64_t seed = 0;
};
// IoError when unreadable or missing groups; UserError when the fact set cannot be an SSFR
// vocabulary (P != F) or the MLP's d differs from the keys'.
InsertedMlpFile read_inserted_mlp(const std::string& path);

struct SsfrSetupSpec {
  nn::SsfrTask task;              // F must equal the fact set's
  nn::SsfrBlockConfig block;      // dim must equal the fact set's d
  std::int64_t width = 0;         // hidden units of built MLPs (0 = the method's default)
  std::uint64_t seed = 0;         // fact set, map A, map B, junk rows, method seed
  // Standalone gate of §4.6 (built MLPs): when MLP_A's accuracy over the F facts is below `gate`,
  // stop right after MLP_A (gate_failed = true: MLP_B is not built and `problem` stays empty).
  double gate = 0;
  gpu::Handles* handles = nullptr;  // set: build the MLPs on this GPU (build_mlp_cuda), else the CPU
};

struct SsfrSetup {
  nn::SsfrProblem problem;
  FactSet facts;                  // the fact set with map A
  GatedMLP mlp_a, mlp_b;          // float64 (empty for the identity MLP)
  bool has_map_b = false;         // false: evaluation runs on map A with MLP_A (identity MLP, file)
  std::string mlp_text;
  std::int64_t width = 0;         // 0 for the identity MLP
  std::int64_t mlp_params = 0;
  double mlp_acc_a = 1, mlp_acc_b = 1;  // standalone argmax accuracy over the F facts (§4.6 gate)
  double build_s = 0;
  bool gate_failed = false;       // see SsfrSetupSpec::gate
};

// Builds everything (the MLP constructions or GD trainings are the expensive part). For kind file,
// `file` must be the loaded file (facts and map A come from it).
SsfrSetup make_ssfr_setup(const SsfrSetupSpec& spec, const SsfrMlpChoice& choice, const InsertedMlpFile* file);

// Map B (§4.6 (c)): a fresh permutation of the F facts from stream rng::kSsfrMapB of `seed`.
Eigen::VectorXi ssfr_map_b(std::int64_t F, std::uint64_t seed);
// Junk and query-token embedding rows: V_J + 1 sphere rows from stream rng::kSsfrEmbed.
Eigen::MatrixXd ssfr_junk_rows(std::int64_t junk_vocab, std::int64_t d, std::uint64_t seed);

// build_mlp on the CPU, or build_mlp_cuda on `handles`' GPU when given (a UserError in a build
// without CUDA).
GatedMLP build_ssfr_mlp(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed,
                        gpu::Handles* handles);

// Row-major float64 copy of a gated MLP for the nn layers.
nn::FrozenMlp to_frozen_mlp(const GatedMLP& mlp);
// Fraction of facts i with argmax_j <MLP(k_i), v_j> = map[i] (smallest index on ties).
double standalone_accuracy(const GatedMLP& mlp, const FactSet& facts);

}  // namespace memcap::mlp

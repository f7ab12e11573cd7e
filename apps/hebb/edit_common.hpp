// Shared pieces of `hebb edit base` and `hebb edit run` (apps/hebb/edit_base.cpp, edit_run.cpp):
// locating the shipped data and building the fact expert (CPU or GPU).
#pragma once
#include <cstdint>
#include <string>

#include "cli/app.hpp"
#include "edit/edit_pipeline.hpp"
#include "io/table.hpp"
#include "mlp/factset.hpp"
#include "mlp/gated_mlp.hpp"
#include "mlp/gd_train.hpp"

namespace memcap::gpu { class Handles; }

namespace memcap::hebb_app {

// --data DIR, or the first of $MEMCAP_DATA/edit, <exe>/../data/edit, <exe>/../../data/edit,
// <exe>/../share/memcap/data/edit, $MEMCAP_SRC/data/edit, ./data/edit holding book_authors.csv.
std::string find_edit_data(const std::string& given);


struct ExpertBuild {
  mlp::GatedMLP mlp;
  double accuracy = 0;       // standalone, argmax over the F author embeddings
  double final_loss = 0;     // GD: last MSE; constructed: 0
  std::int64_t epochs_run = 0;
  bool stopped_early = false;
  std::vector<double> loss_curve, accuracy_curve;
  std::vector<std::int64_t> curve_epoch;
  double wall_s = 0;
};
// kind "gd-mse": mlp::train_gd_cpu with `method` (a gd:edit spec) and `width` (mlp::train_gd_cuda in float32
// when on_gpu); "data-dependent": mlp::build_mlp(hebbian:data-dependent...) on the CPU (mlp::build_mlp_cuda,
// float64, when on_gpu). The standalone accuracy: edit::expert_accuracy on the CPU, mlp::evaluate_mlp_cuda
// (float64) when on_gpu. on_epoch: progress hook for GD (may be empty). handles: the GPU stream to run on
// (nullptr: a stream of its own).
ExpertBuild build_expert(const std::string& kind, const std::string& method, const mlp::FactSet& fs,
                         std::int64_t width, std::uint64_t seed, const std::function<void(std::int64_t, double)>& on_epoch,
                         bool on_gpu = false, gpu::Handles* handles = nullptr);
// The standalone accuracy of an expert (argmax over the F author embeddings): CPU float64, or the GPU
// (mlp::evaluate_mlp_cuda, float64) when handles is not null.
double expert_accuracy_on(const mlp::GatedMLP& m, const mlp::FactSet& fs, gpu::Handles* handles);

// The non-fact CE by position relative to the book token (edit::PromptEval, nn::NonfactClass) as /summary
// columns nf_ce_{prefix,book,tail}_{before,after} and nf_tokens_{prefix,book,tail}; the "after" columns are
// NaN when `after` is false (a diverged job).
void set_nonfact_split(io::Row& row, const edit::PromptEval& pre, const edit::PromptEval& post, bool after = true);
// One line: each class's CE before -> after, its share of the rows and of the CE change.
std::string nonfact_split_line(const edit::PromptEval& pre, const edit::PromptEval& post);

}  // namespace memcap::hebb_app

namespace memcap::hebb_app {
// The subcommands of `hebb edit` (edit_base.cpp, edit_run.cpp), registered by edit.cpp.
void add_edit_base(CLI::App* edit);
void add_edit_run(CLI::App* edit);
void add_edit_table1(CLI::App* edit);  // edit_table1.cpp: the §4.9 grid on the sweep engine
}  // namespace memcap::hebb_app

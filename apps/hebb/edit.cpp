// `hebb edit`: the fact-editing experiment of 'MLPs are Hebbians' (spec hebbian.md §4.9, §6.4):
// base (train the one-layer LM around a fact expert) and run (edit a fraction of the facts, measure).
#include "cli/app.hpp"
#include "edit_common.hpp"

namespace {

memcap::cli::Register reg("hebb", 15, [](CLI::App& tool) {
  auto* edit = tool.add_subcommand(
      "edit",
      "Fact editing by MLP swapping (spec hebbian.md §4.9, Table 1, Figs. 3c, 8, 9): a one-layer language model\n"
      "(§6.4) reads (book -> author) facts through a frozen fact MLP; swapping that MLP for one trained on the\n"
      "edited map edits many facts at once. Subcommands: base (train the base model and its fact expert), run\n"
      "(one editor at one edit fraction: MLP swapping, MEMIT, AlphaEdit or ROME; efficacy, paraphrase,\n"
      "specificity, score, r_NF), table1 (the §4.9 hyper-parameter grid on the sweep engine, best per cell).\n"
      "CPU only for now. docs/hebb-edit.md has the details.");
  edit->require_subcommand(1);
  memcap::hebb_app::add_edit_base(edit);
  memcap::hebb_app::add_edit_run(edit);
  memcap::hebb_app::add_edit_table1(edit);
});

}  // namespace

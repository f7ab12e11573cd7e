// The base-model file of `hebb edit` (docs/hdf5-schema.md "hebb edit base"): the §6.4 model's
// configuration, trainable and frozen tensors, the fact expert and the vocabulary fingerprint that
// `hebb edit run` checks before it edits anything.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "edit/edit_model.hpp"
#include "io/h5.hpp"
#include "mlp/gated_mlp.hpp"

namespace memcap::edit {

struct BaseModelInfo {
  std::int64_t facts = 0, templates = 0;
  std::uint64_t vocab_fingerprint = 0;
  // edit::facts_fingerprint; empty for files written before it existed
  std::optional<std::uint64_t> facts_fingerprint;
  std::string expert;         // "gd-mse" (§2.7) | "data-dependent" (Fig. 9)
  std::string expert_method;  // the expert's method spec text
  std::uint64_t expert_seed = 0;
  std::uint64_t seed = 0;     // model init and batch order
};

// /model (attributes: configuration and BaseModelInfo; groups trainable/ and frozen/ with one N-D
// dataset per arena view) and /expert (mlp::write_mlp layout).
void write_base_model(h5::Group& root, const EditModel& model, const mlp::GatedMLP& expert, const BaseModelInfo& info);

struct BaseModelFile {
  EditModelConfig config;
  BaseModelInfo info;
  mlp::GatedMLP expert;
};
// Reads the configuration, info and expert; IoError when the file is not a `hebb edit base` result or a
// tensor is missing or misshapen. load_base_weights fills a model built from `config`.
BaseModelFile read_base_model(const h5::Group& root);
void load_base_weights(const h5::Group& root, EditModel& model);

}  // namespace memcap::edit

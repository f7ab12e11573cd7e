// One job of `hebb capacity` (spec hebbian.md §4.2): generate the fact set of one (method, d, F,
// fact seed), run the width search with probes persisted to a small side file (so a killed search
// resumes from its recorded probes), and return the summary row and the probe list. Also the
// sweep finalizer that aggregates seeds per (method, d, F) into /points (m50, m100, medians).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.hpp"
#include "io/h5.hpp"
#include "io/table.hpp"
#include "margin/capacity_probe.hpp"
#include "mlp/capacity.hpp"
#include "mlp/method.hpp"

namespace memcap::gpu { class Handles; }

namespace memcap::margin {

struct CapacityJobSpec {
  std::string key;                  // the sweep job key (recorded in the side file)
  mlp::MethodSpec method;
  std::int64_t method_id = 0;       // position in --methods (a numeric /grid axis)
  std::int64_t dim = 64, facts = 256;
  double beta = 0;                  // spike on both tied tables (spec §1.3); 0 = isotropic
  std::uint64_t fact_seed = 42;     // fact-set seed (tables, map)
  std::uint64_t feature_seed = 0;   // method seed (random features, NTK gate/projection, GD init)
  mlp::SearchConfig search;
};

struct CapacityJobResult {
  io::Row row;
  mlp::SearchResult search;
};

// The fact set of a capacity job: one tied sphere table (F x d), random permutation map, spike β on
// both when β > 0 (spec §4.2).
mlp::FactSetSpec capacity_factset_spec(const CapacityJobSpec& spec);

// Runs the job. probe_log: path of the side file ("" = none): probes recorded there by an earlier,
// killed run of the same job are replayed, and every new probe is appended (atomic rewrite). A gd
// probe's training also checkpoints beside it (gd_checkpoint_file, every gd_checkpoint_every_s
// seconds; 0 = at every host sync), so a killed run resumes the training in flight; the file goes
// once the probe is recorded. path: what ran ("cpu", "cuda:0"), recorded in the row.
CapacityJobResult run_capacity_job(const CapacityJobSpec& spec, Device device, gpu::Handles* handles,
                                   const std::string& probe_log, const std::string& path,
                                   double gd_checkpoint_every_s = kGdProbeCheckpointEvery);

// The checkpoint of a gd probe at width m next to its job's probe log: PROBE_LOG-gd-m<m>-<cpu|cuda> (the device
// kind in the name: a resume on the other kind trains afresh instead of meeting a foreign fingerprint).
std::string gd_checkpoint_file(const std::string& probe_log, std::int64_t m, Device device);

// /runs/<job>/probes: m, accuracy, success, min_margin, wall_s, cached (one entry per search step).
void write_probes(h5::Group& run, const mlp::SearchResult& r);

// Side file of recorded probes (JSON): read (empty when missing or made for another job/search)
// and write (tmp + rename).
std::vector<mlp::Probe> read_probe_log(const std::string& path, const CapacityJobSpec& spec);
void write_probe_log(const std::string& path, const CapacityJobSpec& spec, const std::vector<mlp::Probe>& probes);
// The same for any search, identified by a JSON value (a log made under another identity is ignored).
std::vector<mlp::Probe> read_probe_log(const std::string& path, const nlohmann::json& identity);
void write_probe_log(const std::string& path, const nlohmann::json& identity, const std::vector<mlp::Probe>& probes);

// Finalizer: /points, one row per (method, dim, facts) in first-appearance order, with columns
// method, method_id, dim, facts, alpha, beta, seeds, found, m_min, m50, m100, m_median, params50,
// params100, params_median (widths 0 / params NaN when the fraction of seeds is never reached).
io::Table capacity_points(const io::Table& summary);
inline constexpr const char* kCapacityFinalizer = "hebb-capacity-points";
void register_capacity_finalizer();  // idempotent

// The stdout table of a finished run (reads /points of the result file).
void print_capacity_points(const std::string& path);

}  // namespace memcap::margin

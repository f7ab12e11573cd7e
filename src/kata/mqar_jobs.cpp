// Sweep trainings of the MQAR experiments and their tables (mqar_jobs.hpp).
#include "kata/mqar_jobs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <span>

#include "core/error.hpp"
#include "kata/mqar_checkpoint.hpp"
#include "sweep/sweep.hpp"

namespace memcap::kata {

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
}

MqarJobRun run_mqar_training(MqarTrainConfig cfg, const std::string& checkpoint, const std::string& device) {
  MqarJobRun out;
  std::optional<MqarCheckpoint> ck;
  if (!checkpoint.empty()) {
    const std::string fp = mqar_fingerprint(cfg, device);
    ck = read_mqar_checkpoint(checkpoint, fp);
    if (ck) {
      cfg.resume = &*ck;
      out.resumed_step = ck->steps;
      std::fprintf(stderr, "kata: resuming a %s training from its checkpoint at step %lld\n", cfg.model.mixer.c_str(),
                   static_cast<long long>(ck->steps));
    }
    cfg.on_checkpoint = [checkpoint, fp](const MqarCheckpoint& c) { write_mqar_checkpoint(checkpoint, c, fp); };
  }
  try {
    out.res = train_mqar(cfg);
  } catch (const NumericError& e) {
    out.diverged = true;
    out.message = e.what();
  }
  if (!checkpoint.empty()) {
    std::error_code ec;
    std::filesystem::remove(checkpoint, ec);
  }
  return out;
}

std::string mqar_slice_column(const std::string& prefix, const TaskSlice& s) {
  return s.kind == TaskKind::induction ? fmt::format("{}acc_T{}", prefix, s.seq_len)
                                       : fmt::format("{}acc_T{}_K{}", prefix, s.seq_len, s.keys);
}

double mqar_eval_avg(const std::vector<SliceResult>& r) {
  if (r.empty()) return kNaN;
  double a = 0;
  for (const auto& x : r) a += x.accuracy;
  return a / static_cast<double>(r.size());
}

double mqar_ood_avg(const MqarTrainConfig& cfg, const std::vector<SliceResult>& r) {
  std::int64_t longest = 0;
  for (const auto& s : cfg.train) longest = std::max(longest, s.seq_len);
  double a = 0;
  std::int64_t n = 0;
  for (std::size_t i = 0; i < cfg.eval.size() && i < r.size(); ++i)
    if (cfg.eval[i].seq_len > longest) {
      a += r[i].accuracy;
      ++n;
    }
  return n > 0 ? a / static_cast<double>(n) : kNaN;
}

std::int64_t mqar_phase_step(const MqarTrainResult& r, std::size_t slices, double theta) {
  if (slices == 0) return -1;
  for (std::size_t e = 0; e < r.eval_step.size(); ++e) {
    bool all = true;
    for (std::size_t i = 0; i < slices; ++i) all = all && r.eval_accuracy[e * slices + i] >= theta;
    if (all) return r.eval_step[e];
  }
  return -1;
}

void write_mqar_curves(h5::Group& g, const MqarTrainConfig& cfg, const MqarTrainResult& res) {
  const h5::WriteOptions z{true, 0};
  g.write("step", std::span<const std::int64_t>(res.step), z);
  g.write("loss", std::span<const double>(res.loss), z);
  g.write("accuracy", std::span<const double>(res.accuracy), z);
  g.write("lr", std::span<const double>(res.lr), z);
  g.write("grad_norm", std::span<const double>(res.grad_norm), z);
  g.write("eval_epoch", std::span<const std::int64_t>(res.eval_epoch));
  g.write("eval_step", std::span<const std::int64_t>(res.eval_step));
  const auto ne = static_cast<std::int64_t>(res.eval_epoch.size()), ns = static_cast<std::int64_t>(cfg.eval.size());
  g.write_nd("eval_accuracy", std::span<const double>(res.eval_accuracy), {ne, ns});
  g.write_nd("eval_loss", std::span<const double>(res.eval_loss), {ne, ns});
  std::vector<std::int64_t> sT, sK, sN, tT, tK, tN;
  for (const auto& s : cfg.eval) {
    sT.push_back(s.seq_len);
    sK.push_back(s.keys);
    sN.push_back(s.examples);
  }
  for (const auto& s : cfg.train) {
    tT.push_back(s.seq_len);
    tK.push_back(s.keys);
    tN.push_back(s.examples);
  }
  g.write("eval_T", std::span<const std::int64_t>(sT));
  g.write("eval_K", std::span<const std::int64_t>(sK));
  g.write("eval_examples", std::span<const std::int64_t>(sN));
  g.write("train_T", std::span<const std::int64_t>(tT));
  g.write("train_K", std::span<const std::int64_t>(tK));
  g.write("train_examples", std::span<const std::int64_t>(tN));
}

// ---------------------------------------------------------------- Table 2 (best learning rate per row)
namespace {

struct RowKey {
  std::string task, mixer;
  bool operator<(const RowKey& o) const { return std::tie(task, mixer) < std::tie(o.task, o.mixer); }
};

// Columns of `summary` whose names start with `prefix` followed by "T<digit>" (the per-slice accuracies).
std::vector<std::string> slice_columns(const io::Table& t, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& n : t.names)
    if (n.size() > prefix.size() + 1 && n.rfind(prefix, 0) == 0 && n[prefix.size()] == 'T' &&
        std::isdigit(static_cast<unsigned char>(n[prefix.size() + 1])))
      out.push_back(n);
  return out;
}

std::int64_t keys_of(const std::string& col) {  // "...acc_T512_K128" -> 128
  const auto k = col.rfind("_K");
  return k == std::string::npos ? 0 : std::stoll(col.substr(k + 2));
}

}  // namespace

io::Table table2_best(const io::Table& s) {
  const auto tasks = s.strings("task"), mixers = s.strings("mixer"), status = s.strings("status");
  const auto lrs = s.numbers("lr"), avg = s.numbers("eval_avg"), params = s.numbers("params"),
             state = s.numbers("state");
  const std::vector<std::string> mq_cols = slice_columns(s, "acc_"), ow_cols = slice_columns(s, "ow_acc_");
  std::map<std::string, std::vector<double>> col;
  for (const auto& c : mq_cols) col[c] = s.numbers(c);
  for (const auto& c : ow_cols) col[c] = s.numbers(c);
  std::vector<std::string> order;  // mixers in order of first appearance
  for (const auto& m : mixers)
    if (std::find(order.begin(), order.end(), m) == order.end()) order.push_back(m);

  // Per (task, mixer): the rows of each learning rate that finished.
  struct Pick {
    double lr = kNaN;
    std::vector<std::size_t> rows;
  };
  auto best_of = [&](const std::string& task, const std::string& mixer) {
    std::vector<double> seen;
    Pick best;
    double best_score = -1;
    for (std::size_t i = 0; i < s.rows(); ++i) {
      if (tasks[i] != task || mixers[i] != mixer || std::find(seen.begin(), seen.end(), lrs[i]) != seen.end()) continue;
      seen.push_back(lrs[i]);
      Pick p;
      p.lr = lrs[i];
      double sum = 0;
      for (std::size_t k = 0; k < s.rows(); ++k)
        if (tasks[k] == task && mixers[k] == mixer && lrs[k] == lrs[i] && status[k] == "done" && std::isfinite(avg[k])) {
          p.rows.push_back(k);
          sum += avg[k];
        }
      if (p.rows.empty()) continue;
      const double score = sum / static_cast<double>(p.rows.size());
      if (score > best_score) {
        best_score = score;
        best = p;
      }
    }
    return best;
  };
  auto mean = [&](const std::vector<double>& v, const std::vector<std::size_t>& rows) {
    if (rows.empty()) return kNaN;
    double a = 0;
    for (auto r : rows) a += v[r];
    return a / static_cast<double>(rows.size());
  };

  io::Table out;
  for (const auto& mixer : order) {
    io::Row row;
    const Pick mq = best_of("mqar", mixer), ow = best_of("overwrite", mixer);
    std::size_t any = 0;
    for (std::size_t i = 0; i < s.rows(); ++i)
      if (mixers[i] == mixer && tasks[i] == "mqar") {
        any = i;
        break;
      }
    row.set("mixer", mixer)
        .set("params", static_cast<std::int64_t>(params[any]))
        .set("state", static_cast<std::int64_t>(state[any]))
        .set("mqar_lr", mq.lr)
        .set("mqar_seeds", static_cast<std::int64_t>(mq.rows.size()));
    double sum = 0;
    std::int64_t cap99 = 0, cap90 = 0;
    for (const auto& c : mq_cols) {
      const double a = mean(col[c], mq.rows);
      row.set(c, a);
      sum += a;
      if (a >= 0.99) cap99 = std::max(cap99, keys_of(c));
      if (a >= 0.90) cap90 = std::max(cap90, keys_of(c));
    }
    row.set("ood_avg", mq_cols.empty() || mq.rows.empty() ? kNaN : sum / static_cast<double>(mq_cols.size()))
        .set("cap_0.99", cap99)
        .set("cap_0.90", cap90)
        .set("ow_lr", ow.lr)
        .set("ow_seeds", static_cast<std::int64_t>(ow.rows.size()));
    double osum = 0;
    for (const auto& c : ow_cols) {
      const double a = mean(col[c], ow.rows);
      row.set(c, a);
      osum += a;
    }
    row.set("ow_avg", ow_cols.empty() || ow.rows.empty() ? kNaN : osum / static_cast<double>(ow_cols.size()));
    out.append(row);
  }
  return out;
}

std::string format_table2(const io::Table& b) {
  std::string txt = fmt::format("{:<10} {:>9} {:>9} {:>7}", "mixer", "params", "state", "lr");
  const std::vector<std::string> mq = slice_columns(b, "acc_"), ow = slice_columns(b, "ow_acc_");
  for (const auto& c : mq) txt += fmt::format(" {:>8}", c.substr(4));
  txt += fmt::format(" {:>6} {:>5} {:>5} | {:>7}", "OOD", "c.99", "c.90", "ow lr");
  for (const auto& c : ow) txt += fmt::format(" {:>8}", c.substr(7));
  txt += fmt::format(" {:>6}\n", ow.empty() ? "" : "Avg");
  const auto mixers = b.strings("mixer");
  for (std::size_t i = 0; i < b.rows(); ++i) {
    const io::Row r = b.row(i);
    auto num = [](double x, int w) { return std::isfinite(x) ? fmt::format("{:>{}.3f}", x, w) : fmt::format("{:>{}}", "-", w); };
    auto lr = [](double x) { return std::isfinite(x) ? fmt::format("{:>7.0e}", x) : fmt::format("{:>7}", "-"); };
    txt += fmt::format("{:<10} {:>9} {:>9} {}", mixers[i], static_cast<std::int64_t>(r.number("params")),
                       static_cast<std::int64_t>(r.number("state")), lr(r.number("mqar_lr")));
    for (const auto& c : mq) txt += fmt::format(" {}", num(r.number(c), 8));
    txt += fmt::format(" {} {:>5} {:>5} | {}", num(r.number("ood_avg"), 6), static_cast<std::int64_t>(r.number("cap_0.99")),
                       static_cast<std::int64_t>(r.number("cap_0.90")), lr(r.number("ow_lr")));
    for (const auto& c : ow) txt += fmt::format(" {}", num(r.number(c), 8));
    if (!ow.empty()) txt += fmt::format(" {}", num(r.number("ow_avg"), 6));
    txt += '\n';
  }
  return txt;
}

std::string induction_phase_cell(double mean_phase, std::int64_t reached, std::int64_t seeds) {
  if (reached <= 0 || !(mean_phase >= 0)) return "-";
  if (reached >= seeds) return fmt::format("{:.0f}", mean_phase);
  return fmt::format("{:.0f} ({} of {} seeds)", mean_phase, reached, seeds);
}

// ---------------------------------------------------------------- finalizers
namespace {

void table2_finalizer(io::OutputFile& out, const io::Table& summary, const nlohmann::json&) {
  if (summary.rows() == 0 || !summary.find("task")) return;
  const io::Table best = table2_best(summary);
  h5::Group g = out.root().child("best");
  best.write(g);
  std::fputs(("Table 2 (best learning rate per row, mean over seeds; /best):\n" + format_table2(best)).c_str(), stdout);
  std::fflush(stdout);
}

// /induction: per (mixer, T) the learning rate with the best mean final accuracy, its mean accuracy,
// and the phase steps of its seeds (mean over the seeds that reached the threshold; -1 when none did).
void induction_finalizer(io::OutputFile& out, const io::Table& s, const nlohmann::json&) {
  if (s.rows() == 0 || !s.find("phase_step")) return;
  const auto mixers = s.strings("mixer"), status = s.strings("status");
  const auto T = s.numbers("seq_len"), lrs = s.numbers("lr"), acc = s.numbers("final_acc"), ph = s.numbers("phase_step");
  std::vector<std::pair<std::string, double>> keys;
  for (std::size_t i = 0; i < s.rows(); ++i)
    if (std::find(keys.begin(), keys.end(), std::make_pair(mixers[i], T[i])) == keys.end()) keys.emplace_back(mixers[i], T[i]);
  io::Table t;
  std::string txt = fmt::format("{:<10} {:>6} {:>7} {:>6} {:>8}  {}\n", "mixer", "T", "lr", "seeds", "accuracy",
                                "phase step (mean over the seeds that reached it)");
  for (const auto& [mixer, len] : keys) {
    double best_lr = kNaN, best_acc = -1, best_phase = -1;
    std::int64_t best_n = 0, best_reached = 0;
    std::vector<double> seen;
    for (std::size_t i = 0; i < s.rows(); ++i) {
      if (mixers[i] != mixer || T[i] != len || std::find(seen.begin(), seen.end(), lrs[i]) != seen.end()) continue;
      seen.push_back(lrs[i]);
      double a = 0, p = 0;
      std::int64_t n = 0, reached = 0;
      for (std::size_t k = 0; k < s.rows(); ++k)
        if (mixers[k] == mixer && T[k] == len && lrs[k] == lrs[i] && status[k] == "done" && std::isfinite(acc[k])) {
          a += acc[k];
          ++n;
          if (ph[k] >= 0) {
            p += ph[k];
            ++reached;
          }
        }
      if (n == 0 || a / static_cast<double>(n) <= best_acc) continue;
      best_acc = a / static_cast<double>(n);
      best_lr = lrs[i];
      best_n = n;
      best_reached = reached;
      best_phase = reached > 0 ? p / static_cast<double>(reached) : -1;
    }
    io::Row r;
    r.set("mixer", mixer)
        .set("seq_len", static_cast<std::int64_t>(len))
        .set("lr", best_lr)
        .set("seeds", best_n)
        .set("final_acc", best_n > 0 ? best_acc : kNaN)
        .set("phase_step", best_phase)
        .set("phase_seeds", best_reached);
    t.append(r);
    txt += fmt::format("{:<10} {:>6} {:>7.0e} {:>6} {:>8.3f}  {}\n", mixer, static_cast<std::int64_t>(len), best_lr,
                       best_n, best_n > 0 ? best_acc : kNaN, induction_phase_cell(best_phase, best_reached, best_n));
  }
  h5::Group g = out.root().child("induction");
  t.write(g);
  std::fputs(("Induction phase steps (/induction):\n" + txt).c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace

void register_mqar_finalizers() {
  static std::once_flag once;
  std::call_once(once, [] {
    sweep::register_finalizer(kTable2Finalizer, table2_finalizer);
    sweep::register_finalizer(kInductionFinalizer, induction_finalizer);
  });
}

}  // namespace memcap::kata

// GD checkpoint files (see gd_checkpoint.hpp). Layout: root datasets params, adam_m, adam_v,
// loss_curve, accuracy_curve, curve_epoch; root attributes format, fingerprint, epoch, finished,
// stopped_early, final_loss, wall_s.
#include "mlp/gd_checkpoint.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "io/h5.hpp"
#include "mlp/method.hpp"

namespace memcap::mlp {

namespace {

constexpr const char* kFormat = "memcap-gd-checkpoint-1";

struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void add(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
};

// "key=value" tokens of a fingerprint (separated by spaces or commas).
std::vector<std::string> tokens(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : s) {
    if (c == ' ' || c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// "epochs: file 200, this run 300; ..." for the fields that differ.
std::string fingerprint_diff(const std::string& file, const std::string& now) {
  const auto a = tokens(file), b = tokens(now);
  std::string out;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "", y = i < b.size() ? b[i] : "";
    if (x == y) continue;
    const auto ex = x.find('='), ey = y.find('=');
    const std::string key = ex != std::string::npos ? x.substr(0, ex) : (ey != std::string::npos ? y.substr(0, ey) : y);
    out += fmt::format("{}{}: file {}, this run {}", out.empty() ? "" : "; ", key,
                       ex != std::string::npos ? x.substr(ex + 1) : x, ey != std::string::npos ? y.substr(ey + 1) : y);
  }
  return out.empty() ? "fingerprints differ" : out;
}

}  // namespace

std::string gd_fingerprint(const FactSet& fs, std::int64_t width, std::uint64_t seed, const GdConfig& cfg,
                           const std::string& path) {
  Fnv f;
  f.add(fs.keys.data(), static_cast<std::size_t>(fs.keys.size()) * sizeof(double));
  f.add(fs.values.data(), static_cast<std::size_t>(fs.values.size()) * sizeof(double));
  f.add(fs.codes.data(), static_cast<std::size_t>(fs.codes.size()) * sizeof(double));
  f.add(fs.map.data(), static_cast<std::size_t>(fs.map.size()) * sizeof(int));
  return fmt::format("F={} P={} d={} m={} seed={} data={:016x} path={} {} beta1={} beta2={} eps={} record-every={}",
                     fs.F(), fs.P(), fs.d(), width, seed, f.h, path, canonical_gd_spec(cfg), cfg.beta1, cfg.beta2,
                     cfg.eps, cfg.record_every);
}

void write_checkpoint_file(const std::string& path, const std::string& what, const std::string& format,
                           const std::string& fingerprint, const std::function<void(h5::File&)>& fill) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  try {
    auto f = h5::File::create(tmp);
    f.attr("format", format);
    f.attr("fingerprint", fingerprint);
    fill(f);
    f.close();
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw IoError(fmt::format("cannot move {} '{}' to '{}': {}", what, tmp, path, why));
  }
}

GdCheckpoint make_gd_checkpoint(std::vector<double> params, std::vector<double> m, std::vector<double> v,
                                const GdResult& res, std::int64_t epochs_done, bool done, double wall_s,
                                const std::string& fingerprint) {
  GdCheckpoint ck;
  ck.params = std::move(params);
  ck.m = std::move(m);
  ck.v = std::move(v);
  ck.epoch = epochs_done;
  ck.finished = done;
  ck.stopped_early = res.stopped_early;
  ck.final_loss = res.final_loss;
  ck.wall_s = wall_s;
  ck.loss_curve = res.loss_curve;
  ck.accuracy_curve = res.accuracy_curve;
  ck.curve_epoch = res.curve_epoch;
  ck.fingerprint = fingerprint;
  return ck;
}

void write_gd_checkpoint(const std::string& path, const GdCheckpoint& ck) {
  write_checkpoint_file(path, "checkpoint", kFormat, ck.fingerprint, [&ck](h5::File& f) {
    f.attr("epoch", ck.epoch);
    f.attr("finished", ck.finished);
    f.attr("stopped_early", ck.stopped_early);
    f.attr("final_loss", ck.final_loss);
    f.attr("wall_s", ck.wall_s);
    f.write("params", std::span<const double>(ck.params));
    f.write("adam_m", std::span<const double>(ck.m));
    f.write("adam_v", std::span<const double>(ck.v));
    f.write("loss_curve", std::span<const double>(ck.loss_curve));
    f.write("accuracy_curve", std::span<const double>(ck.accuracy_curve));
    f.write("curve_epoch", std::span<const std::int64_t>(ck.curve_epoch));
  });
}

std::optional<GdCheckpoint> read_gd_checkpoint(const std::string& path, const std::string& fingerprint) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  if (!h5::is_hdf5(path))
    throw IoError(fmt::format("checkpoint '{}' exists but is not an HDF5 file; delete it or choose another "
                              "--checkpoint path",
                              path));
  const auto f = h5::File::open_read(path);
  if (f.attr_string("format").value_or("") != kFormat)
    throw IoError(fmt::format("'{}' is not a GD checkpoint (no format attribute '{}'); delete it or choose another "
                              "--checkpoint path",
                              path, kFormat));
  GdCheckpoint ck;
  ck.fingerprint = f.attr_string("fingerprint").value_or("");
  if (ck.fingerprint != fingerprint)
    throw UserError(fmt::format("checkpoint '{}' belongs to a different training ({}); delete it or choose another "
                                "--checkpoint path to start this one afresh",
                                path, fingerprint_diff(ck.fingerprint, fingerprint)));
  ck.epoch = f.attr_int("epoch").value_or(0);
  ck.finished = f.attr_int("finished").value_or(0) != 0;
  ck.stopped_early = f.attr_int("stopped_early").value_or(0) != 0;
  ck.final_loss = f.attr_double("final_loss").value_or(0);
  ck.wall_s = f.attr_double("wall_s").value_or(0);
  ck.params = f.read_doubles("params");
  ck.m = f.read_doubles("adam_m");
  ck.v = f.read_doubles("adam_v");
  ck.loss_curve = f.read_doubles("loss_curve");
  ck.accuracy_curve = f.read_doubles("accuracy_curve");
  ck.curve_epoch = f.read_int64s("curve_epoch");
  if (ck.m.size() != ck.params.size() || ck.v.size() != ck.params.size() ||
      ck.loss_curve.size() != ck.curve_epoch.size() || ck.accuracy_curve.size() != ck.curve_epoch.size() ||
      ck.epoch < 0)
    throw IoError(fmt::format("checkpoint '{}' is inconsistent (arena or curve lengths differ); delete it", path));
  return ck;
}

}  // namespace memcap::mlp

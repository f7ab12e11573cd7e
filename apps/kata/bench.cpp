// `kata bench`: validates then times the causal KATA attention kernels (quadratic §5.1, chunked §5.2,
// tree §5.3) over the shapes of the paper's Tables 8, 10, 11 or the acceptance set, with the card's
// copy-bandwidth and bf16-GEMM ceilings measured in the same run. GPU timing: CUDA events, median.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "core/rng.hpp"
#include "io/output_file.hpp"
#include "kata/attention.hpp"
#include "kata/attention_cuda.hpp"
#include "kata/mixer_bench.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
using namespace memcap::kata;

struct BenchOptions {
  cli::CommonOptions common;
  std::string shapes = "accept";
  std::string dtype = "bf16";
  std::string forms = "quadratic,chunked,tree";
  std::string maps = "m2";
  std::string variant;  // "" = per form: MEMCAP_KATA_{QUAD,CHUNK,TREE}_VARIANT or the table's default; "all"
  std::int64_t B = 8, H = 16, T = 4096, d_head = 64, d_v = 0, chunk = 128, validate_T = 1024;
  std::int64_t backward_chunk = 128;  // table9 --variant chunked: the O(T) backward's C
  int repeats = 10, warmup = 3;
};

struct Item {
  AttentionForm form;
  std::string map;
  std::int64_t B, H, T, chunk;
  std::string group;    // which table / acceptance item the row belongs to
  std::int64_t d = 64;  // head width d = d_v (custom: --d-head / --d-v)
  std::string variant;  // kernel variant ("" = default for the shape)
  std::int64_t dv = 0;  // 0: = d
};

std::vector<std::string> split(const std::string& s, std::string_view flag) { return split_list(s, ',', flag); }

// --maps: commas separate maps and also a map's options, so a piece "key=value" without ':' continues the
// previous map ("m2,sigma4:eps=0,scale=1,linear" -> m2 | sigma4:eps=0,scale=1 | linear).
std::vector<std::string> split_maps(const std::string& s) {
  std::vector<std::string> out;
  for (const auto& piece : split(s, "--maps")) {
    if (!out.empty() && piece.find('=') != std::string::npos && piece.find(':') == std::string::npos)
      out.back() += "," + piece;
    else
      out.push_back(piece);
  }
  return out;
}

constexpr std::int64_t K = 1024;

// The kernel variant a form runs when --variant is not given: the environment (MEMCAP_KATA_QUAD_VARIANT,
// MEMCAP_KATA_CHUNK_VARIANT, MEMCAP_KATA_TREE_VARIANT; read only here, by `kata bench`) or "" (the default).
std::string env_variant(AttentionForm f) {
  const char* name = f == AttentionForm::quadratic ? "MEMCAP_KATA_QUAD_VARIANT"
                                                   : (f == AttentionForm::chunked ? "MEMCAP_KATA_CHUNK_VARIANT"
                                                                                  : "MEMCAP_KATA_TREE_VARIANT");
  const char* e = std::getenv(name);
  return e ? e : "";
}

std::vector<Item> preset_items(const BenchOptions& o) {
  std::vector<Item> v;
  const std::vector<std::int64_t> t8 = {1 * K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K, 64 * K, 128 * K};
  const std::vector<std::int64_t> t11 = {2 * K, 4 * K, 8 * K, 16 * K, 32 * K, 64 * K, 128 * K};
  const auto Q = AttentionForm::quadratic, Ch = AttentionForm::chunked, Tr = AttentionForm::tree;
  if (o.shapes == "accept") {  // issue 11's acceptance set (docs/perf.md, "kata attention kernels")
    for (std::int64_t T : {4 * K, 8 * K, 16 * K, 32 * K})
      for (const char* m : {"m1", "m2"}) {
        v.push_back({Q, m, 8, 16, T, 64, "a2-quad-d64"});
        v.push_back({Q, m, 8, 8, T, 64, "a2-quad-d128", 128});
      }
    v.push_back({Ch, "m2", 8, 16, 128 * K, 64, "a3-chunked", 64, "fused"});
    v.push_back({Ch, "m2", 8, 16, 128 * K, 64, "a3-chunked", 64, "2pass"});
    v.push_back({Ch, "m2", 8, 16, 128 * K, 64, "a3-chunked", 64, "2pass-g4"});
    v.push_back({Ch, "m2", 8, 16, 128 * K, 64, "a3-chunked", 64, "scan-g4"});
    v.push_back({Ch, "m2", 8, 16, 128 * K, 64, "a3-chunked", 64, "scan-g4c"});
    v.push_back({Ch, "m2", 8, 16, 128 * K, 64, "a3-chunked", 64, "2pass-g4w"});
    v.push_back({Ch, "m2", 8, 16, 128 * K, 64, "a3-chunked", 64, "scan-g4p"});
    v.push_back({Ch, "m2", 8, 16, 128 * K, 64, "a3-chunked", 64, "scan-g4pw"});
    v.push_back({Ch, "m2", 8, 16, 128 * K, 64, "a3-chunked", 64, "scan-g4pwb"});
    for (std::int64_t T : {32 * K, 64 * K, 128 * K})
      for (const char* m : {"m1", "m2"}) {
        v.push_back({Q, m, 1, 1, T, 64, "a4-small-bh"});
        v.push_back({Ch, m, 1, 1, T, 64, "a4-small-bh", 64, "fused"});
        v.push_back({Ch, m, 1, 1, T, 64, "a4-small-bh", 64, "split"});
        v.push_back({Ch, m, 1, 1, T, 64, "a4-small-bh", 64, "split-g4"});
        v.push_back({Ch, m, 1, 1, T, 64, "a4-small-bh", 64, "scan-g4"});
        v.push_back({Ch, m, 1, 1, T, 64, "a4-small-bh", 64, "scan-g4c"});
        v.push_back({Ch, m, 1, 1, T, 64, "a4-small-bh", 64, "scan-g4w"});
        v.push_back({Ch, m, 1, 1, T, 64, "a4-small-bh", 64, "scan-g4p"});
        v.push_back({Ch, m, 1, 1, T, 64, "a4-small-bh", 64, "scan-g4pb"});
      }
    for (const char* m : {"m1", "m2"}) v.push_back({Ch, m, 1, 1, 128 * K, 64, "a4-small-bh", 64, "fused-seq"});
    for (std::int64_t T : {4 * K, 8 * K, 16 * K, 32 * K}) {
      v.push_back({Q, "linear", 8, 16, T, 64, "a5-linear"});
      v.push_back({Q, "sigma2", 8, 16, T, 64, "a6-sigma2-m4"});
      v.push_back({Q, "m4", 8, 16, T, 64, "a6-sigma2-m4"});
    }
  } else if (o.shapes == "table8") {
    for (std::int64_t T : t8)
      for (const char* m : {"m1", "m2"}) {
        v.push_back({Q, m, 8, 16, T, 64, "table8"});
        v.push_back({Ch, m, 8, 16, T, 64, "table8"});
      }
  } else if (o.shapes == "table10") {
    const std::pair<std::int64_t, std::int64_t> bt[] = {{1, 2 * K},   {1, 8 * K},   {4, 2 * K},   {1, 32 * K},
                                                        {4, 8 * K},   {16, 2 * K},  {1, 64 * K},  {32, 2 * K},
                                                        {4, 32 * K},  {16, 8 * K},  {4, 64 * K},  {32, 8 * K},
                                                        {16, 32 * K}, {16, 64 * K}, {32, 32 * K}, {32, 64 * K}};
    for (auto [B, T] : bt)
      for (AttentionForm f : {Ch, Tr}) v.push_back({f, "linear", B, 16, T, 128, "table10"});
  } else if (o.shapes == "table11") {
    for (std::int64_t T : t11)
      for (AttentionForm f : {Ch, Tr}) v.push_back({f, "linear", 1, 16, T, 128, "table11"});
  } else if (o.shapes == "custom") {
    for (const auto& f : split(o.forms, "--forms"))
      for (const auto& m : split_maps(o.maps))
        v.push_back({parse_attention_form(f), m, o.B, o.H, o.T, o.chunk, "custom", o.d_head, "", o.d_v});
  } else {
    throw UserError(fmt::format("--shapes must be accept, table8, table9, table10, table11 or custom (got '{}')", o.shapes));
  }
  for (auto& it : v) {
    if (it.dv == 0) it.dv = it.d;
    if (!o.variant.empty()) it.variant = o.variant;
    else if (it.variant.empty()) it.variant = env_variant(it.form);
  }
  return v;
}

// Work model (documented in docs/kata-kernels.md): attention-equivalent FLOPs and minimum bytes.
struct Work {
  double flops = 0, bytes = 0;
};
// The fused chunked variants keep the state on chip: their minimum bytes are the inputs and the output (plus, when
// T is split, the per-segment states written and read twice).
Work work_of(const Item& it, const MapParams& m, std::int64_t d, std::int64_t dv, GpuDType t, const std::string& variant) {
  const double BH = double(it.B * it.H), T = double(it.T), eb = t == GpuDType::bf16 ? 2 : 4;
  const double d_eff = m.kind == MapKind::SumPsd ? double(m.g * d) : double(d);
  const double n = m.n_features, np = std::ceil(n / 64) * 64, nc = std::ceil(T / double(it.chunk));
  const double io = BH * T * (2 * d + 2 * dv) * eb;
  Work w;
  if (it.form == AttentionForm::quadratic) {
    w.flops = 2 * BH * (T * (T + 1) / 2) * (d_eff + dv);
    w.bytes = io;
  } else {
    w.flops = BH * T * (4 * n * dv + (double(it.chunk) + 1) * (d_eff + dv));
    const double prefix = BH * nc * np * (dv * 2 + 4);
    if (variant.find("/fused") != std::string::npos)
      w.bytes = io;
    else
      w.bytes = io + BH * T * (d + dv) * eb + 2 * prefix;
    if (it.form == AttentionForm::tree) w.bytes += 2 * BH * nc * np * (dv + 1) * 4;
  }
  return w;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x.size() % 2 ? x[x.size() / 2] : 0.5 * (x[x.size() / 2 - 1] + x[x.size() / 2]);
}

std::vector<double> normals(std::size_t n, std::uint64_t seed, std::uint64_t stream) {
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = rng::normal(seed, stream, i);
  return x;
}

std::vector<double> run_cpu(AttentionForm f, const AttentionShape& s, const AttentionOptions& o, const double* q,
                            const double* k, const double* v) {
  if (f == AttentionForm::quadratic) return attention_quadratic(s, o, q, k, v);
  if (f == AttentionForm::chunked) return attention_chunked(s, o, q, k, v);
  return attention_tree(s, o, q, k, v);
}

// /summary of the run to --out (nothing when --out is not given).
void write_rows(const BenchOptions& o, const cli::Prepared& prep, const io::Table& tab) {
  if (o.common.out.empty()) return;
  io::OutputFile out(o.common.out, prep.ctx);
  out.write_summary(tab);
  out.commit();
  fmt::print(stderr, "wrote {}\n", o.common.out);
}

// --shapes table9: forward + backward of the MQAR mixer cores (spec §5.5 Table 9 shapes: B = 8, H = 16, d = 64,
// T = 1K..32K), validated against the float64 CPU reference, then timed; SDPA forward + backward is timed by
// experiments/bench/sdpa_baseline.py --pass fwdbwd in the same device call (compare.py takes the ratios).
void run_bench_fwdbwd(CLI::App* sub, const BenchOptions& o, const cli::Prepared& prep) {
  require(prep.ctx.device.device == Device::cuda,
          "--shapes table9 times the CUDA mixer cores forward + backward: it needs --device cuda (or auto on a GPU)");
  std::string dtype = o.dtype;
  const bool mma = o.variant == "mma" || o.variant == "chunked";  // the bf16 pairs
  if (sub->count("--dtype") == 0) dtype = mma ? "bf16" : "tf32";  // the float32 cores' default: TF32 products
  if (mma)
    require(dtype == "bf16", "--shapes table9 --variant {} runs bf16 inputs on tensor cores: drop --dtype or pass "
            "--dtype bf16 (got '{}')", o.variant, dtype);
  else
    require(dtype == "fp32" || dtype == "tf32",
            "--shapes table9: --dtype must be fp32 or tf32 for the float32 mixer cores (tf32 = TF32 products in the "
            "gemm variant; --variant all adds the bf16 mma rows), or bf16 with --variant mma|chunked (the tensor-core "
            "backward), got '{}'", dtype);
  const std::vector<std::string> mixers =
      split(sub->count("--maps") == 0 ? std::string("m1,m2,softmax") : o.maps, "--maps");
  require(!mixers.empty(), "--maps is empty: give a comma list of mixers (default m1,m2,softmax)");
  sweep::require_distinct(mixers, "--maps");
  // the whole plan is checked (mixer, kernel, memory) before any launch; kernels[i] is what items[i] runs
  std::vector<MixerBenchItem> items;
  std::vector<std::string> kernels;
  for (std::int64_t T : {1 * K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K})
    for (const auto& mx : mixers) {
      MixerBenchItem it;
      it.mixer = mx;
      it.B = 8;
      it.H = 16;
      it.T = T;
      it.d = 64;
      it.tf32 = dtype == "tf32";
      it.backward_chunk = o.backward_chunk;
      const bool all = o.variant == "all";
      for (const char* k : all ? std::vector<const char*>{"gemm", "tiled", "mma", "chunked"}
                               : std::vector<const char*>{o.variant.empty() ? "auto" : o.variant.c_str()}) {
        it.kernel = k;
        std::string kernel;
        try {
          kernel = plan_mixer_bench(it);
        } catch (const DeviceError&) {
          throw;
        } catch (const UserError&) {
          if (all) continue;  // "all": every variant that applies and fits this GPU
          throw;
        }
        items.push_back(it);
        kernels.push_back(kernel);
      }
    }
  fmt::print("{:<8} {:<9} {:>3} {:>3} {:>7} {:>3} {:<6} {:<5} {:>9} {:>11} {:>11} {:>9}\n", "group", "mixer", "B", "H",
             "T", "d", "kernel", "prec", "rel_err", "fwd+bwd ms", "fwd ms", "Mtok/s");
  io::Table tab;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    const MixerBenchResult r = mixer_bench_cuda(it, kernels[i], o.validate_T, o.warmup, o.repeats, o.common.seed);
    const double med = median(r.ms_fwdbwd), fwd = median(r.ms_fwd);
    const double mtok = double(it.B * it.T) / (med * 1e-3) / 1e6;
    fmt::print("{:<8} {:<9} {:>3} {:>3} {:>7} {:>3} {:<6} {:<5} {:>9.2e} {:>11.3f} {:>11.3f} {:>9.2f}\n", "table9",
               it.mixer, it.B, it.H, it.T, it.d, r.kernel, r.precision, r.rel_err, med, fwd, mtok);
    if (!r.ms_bwd_dq.empty()) {
      const double dq = median(r.ms_bwd_dq);
      fmt::print("           backward split: dq kernel {:.3f} ms, dk/dv kernel {:.3f} ms\n", dq, med - fwd - dq);
    }
    if (!r.bwd_stages.empty()) {
      std::string parts;
      for (const auto& [name, ms] : r.bwd_stages) parts += fmt::format("{}{} {:.3f}", parts.empty() ? "" : ", ", name, ms);
      fmt::print("           backward stages (ms): {}\n", parts);
    }
    std::fflush(stdout);
    io::Row row;
    row.set("group", "table9")
        .set("kernel", "quadratic")
        .set("pass", "fwdbwd")
        .set("map", it.mixer)
        .set("variant", r.kernel)
        .set("variant_path", kernels[i].rfind("mma", 0) == 0
                                 ? "bf16 tensor cores: quadratic forward + kernels/kata_attention_backward.cu"
                                 : "MQAR mixer core (kernels/kata_mqar_*.cu)")
        .set("path", "cuda")
        .set("B", it.B)
        .set("H", it.H)
        .set("T", it.T)
        .set("d_head", it.d)
        .set("d_v", it.d)
        .set("dtype", r.precision)
        .set("rel_err_vs_cpu", r.rel_err)
        .set("validated_on", fmt::format("B=1,H=1,T={} (same kernels; float64 CPU mixer reference: o, dq, dk, dv)",
                                         r.validate_T))
        .set("ms_median", med)
        .set("ms_fwd_median", fwd)
        .set("ms_bwd_dq_median", r.ms_bwd_dq.empty() ? std::nan("") : median(r.ms_bwd_dq))
        .set("ms_min", *std::min_element(r.ms_fwdbwd.begin(), r.ms_fwdbwd.end()))
        .set("ms_max", *std::max_element(r.ms_fwdbwd.begin(), r.ms_fwdbwd.end()))
        .set("repeats", o.repeats)
        .set("tokens_per_s", double(it.B * it.T) / (med * 1e-3))
        .set("device_bytes", static_cast<double>(r.device_bytes));
    tab.append(row);
  }
  write_rows(o, prep, tab);
}

void run_bench(CLI::App* sub, BenchOptions& o) {
  const auto prep = cli::prepare(sub, o.common);
  if (prep.done) return;
  if (sub->count("--backward-chunk") > 0) {
    require(o.shapes == "table9" && (o.variant == "chunked" || o.variant == "all"),
            "--backward-chunk sets the chunked O(T) backward's C: it applies to --shapes table9 --variant chunked "
            "(or all) only");
    require(o.backward_chunk >= 8 && o.backward_chunk <= 256 && o.backward_chunk % 8 == 0,
            "--backward-chunk must be a multiple of 8 in [8, 256] (got {})", o.backward_chunk);
  }
  if (o.shapes == "table9") {
    require(o.repeats >= 1 && o.warmup >= 0, "--repeats must be >= 1 and --warmup >= 0");
    require(o.validate_T >= 1, "--validate-T must be >= 1");
    if (!o.common.out.empty()) io::check_output_path(o.common.out);
    run_bench_fwdbwd(sub, o, prep);
    return;
  }
  require(o.repeats >= 1 && o.warmup >= 0, "--repeats must be >= 1 and --warmup >= 0");
  require(o.validate_T >= 1, "--validate-T must be >= 1");
  require(o.d_head >= 1 && o.d_v >= 0, "--d-head must be >= 1 and --d-v >= 1 (0: equal to --d-head)");
  if (o.shapes == "custom") {  // the custom shape's sizes, each named (a negative size used to crash the allocator)
    for (const auto& [flag, v] : {std::pair<const char*, std::int64_t>{"--B", o.B}, {"--H", o.H}, {"--T", o.T},
                                  {"--chunk", o.chunk}})
      require(v >= 1, "{} must be >= 1 (got {})", flag, v);
    const auto forms = split(o.forms, "--forms"), maps = split_maps(o.maps);
    require(!forms.empty(), "--forms is empty: give a comma list of quadratic, chunked, tree");
    require(!maps.empty(), "--maps is empty: give a comma list of feature maps (e.g. m2,orthant)");
    std::vector<std::string> shown;
    for (const auto& f : forms) shown.push_back(to_string(parse_attention_form(f)));
    sweep::require_distinct(shown, "--forms");
    sweep::require_distinct(maps, "--maps");
    shown.clear();  // the same map spelled twice ("m2,m2:eps=0"): compared with every option resolved
    for (const auto& m : maps) shown.push_back(FeatureMap::parse(m, o.d_head).canonical_spec());
    sweep::require_distinct(shown, "--maps");
  }
  if (!o.common.out.empty()) io::check_output_path(o.common.out);
  const GpuDType dtype = parse_gpu_dtype(o.dtype);
  const bool gpu = prep.ctx.device.device == Device::cuda;
  const std::string dtype_name = gpu ? o.dtype : "fp64";  // the CPU reference runs in float64
  auto items = preset_items(o);
  if (!gpu) {
    require(o.shapes == "custom", "--device cpu times the float64 CPU reference: use --shapes custom with small T");
    require(static_cast<double>(o.B) * static_cast<double>(o.H) * static_cast<double>(o.T) <= 65536,
            "--device cpu: keep B*H*T <= 65536 (the CPU reference is float64 and O(T^2))");
    require(o.variant.empty(), "--variant names a CUDA kernel variant; --device cpu runs the float64 reference");
    require(sub->count("--dtype") == 0,
            "--dtype {} sets the GPU kernels' input type; --device cpu runs the float64 CPU reference (drop --dtype)",
            o.dtype);
  }
  // Every configuration is checked before any work: maps, options, shapes, the kernel variant (unknown or not
  // applicable: exit 2 listing those that are) and the GPU memory it needs. "--variant all" expands here.
  std::vector<Item> runs;
  for (const auto& it : items) {
    const AttentionShape s{it.B, it.H, it.T, it.d, it.dv};
    const AttentionOptions opt = default_options(FeatureMap::parse(it.map, it.d), it.chunk);
    opt.validate(s);
    const double eps = attention_map(opt.map).eps;  // as --map-eps of kata mqar: a regularizer, not a scale
    require(eps <= 1, "--maps: '{}' has eps = {:g}; eps must be in [0, 1] (defaults: orthant 1e-6, m<g> 0, "
            "sigma<g> 1e-4)", it.map, eps);
    if (!gpu) {
      runs.push_back(it);
      continue;
    }
    if (it.variant == "all") {  // every tensor-core variant that applies (the scalar fallback only if none does)
      auto names = attention_variants(it.form, s, opt, dtype);
      if (names.size() > 1) names.erase(std::remove(names.begin(), names.end(), std::string("simt")), names.end());
      require(!names.empty(), "no kernel variant applies to {} {} d={} d_v={} C={}", to_string(it.form), it.map, it.d,
              it.dv, it.chunk);
      for (const auto& name : names) {
        Item one = it;
        one.variant = name;
        validate_attention_cuda(it.form, s, opt, dtype, name, true);
        runs.push_back(one);
      }
    } else {
      validate_attention_cuda(it.form, s, opt, dtype, it.variant, true);
      runs.push_back(it);
    }
  }

  GpuCeilings ceil{};
  if (gpu) {
    ceil = measure_gpu_ceilings(std::max(o.repeats, 5));
    fmt::print("device {} (cc {}): copy {:.0f} GB/s (device-to-device, read+write), cuBLAS bf16 GEMM {:.1f} TFLOP/s "
               "(n={})\n",
               prep.ctx.device.name, prep.ctx.device.compute_capability, ceil.copy_gbps, ceil.gemm_tflops, ceil.gemm_n);
  }

  io::Table tab;
  std::map<std::string, double> validated;  // (form, map, chunk, dtype, d, variant, T_val) -> rel err
  fmt::print("{:<14} {:<9} {:<7} {:>3} {:>3} {:>7} {:>3} {:>4} {:<5} {:<20} {:>9} {:>10} {:>9} {:>8} {:>8} {:>7} {:>7}\n",
             "group", "form", "map", "B", "H", "T", "d", "C", "dtype", "variant", "rel_err", "ms_median", "Mtok/s",
             "TFLOP/s", "GB/s", "f_gemm", "f_copy");
  for (const auto& it : runs) {
    const std::int64_t d = it.d, dv = it.dv;
    const AttentionOptions opt = default_options(FeatureMap::parse(it.map, d), it.chunk);
    // 1. validation against the float64 CPU reference on one (b, h) slice at T_val = min(T, --validate-T)
    const std::int64_t tv = std::min(it.T, o.validate_T);
    const AttentionShape vs{1, 1, tv, d, dv};
    const std::string vkey =
        fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", to_string(it.form), it.map, it.chunk, o.dtype, d, dv, it.variant, tv);
    if (!validated.count(vkey)) {
      auto q = normals(vs.qk_size(), o.common.seed, rng::kQueries);
      auto k = normals(vs.qk_size(), o.common.seed, rng::kKeys);
      auto v = normals(vs.v_size(), o.common.seed, rng::kValues);
      if (gpu) {  // the reference sees exactly the GPU's (rounded) inputs
        q = round_to_dtype(dtype, q);
        k = round_to_dtype(dtype, k);
        v = round_to_dtype(dtype, v);
      }
      const auto ref = attention_recurrent(vs, opt, q.data(), k.data(), v.data());
      const auto got = gpu ? attention_cuda(it.form, vs, opt, dtype, q.data(), k.data(), v.data(), it.variant).out
                           : run_cpu(it.form, vs, opt, q.data(), k.data(), v.data());
      validated[vkey] = relative_error(got, ref);
    }
    const double rel = validated[vkey];
    const double tol = !gpu ? 1e-12 : (dtype == GpuDType::bf16 ? 1e-2 : 1e-5);
    if (!(rel < tol))
      throw NumericError(fmt::format("validation failed for {} {} d={} C={} {}: relative error {:.3e} vs "
                                     "the float64 recurrent CPU reference exceeds {:.0e}; not timing a wrong kernel",
                                     to_string(it.form), it.map, d, it.chunk,
                                     gpu ? fmt::format("{} variant '{}'", o.dtype,
                                                       it.variant.empty() ? "default" : it.variant)
                                         : std::string("on the float64 CPU path (check the map's eps/scale)"),
                                     rel, tol));
    // 2. timing
    const AttentionShape s{it.B, it.H, it.T, d, dv};
    std::vector<double> ms;
    std::string variant = "cpu/float64", path = "float64 CPU reference", stages;
    if (gpu) {
      const auto t = time_attention_cuda(it.form, s, opt, dtype, o.warmup, o.repeats, o.common.seed, it.variant);
      ms = t.ms;
      variant = t.variant;
      path = t.path;
      if (t.stage_ms.size() == 3)
        stages = fmt::format("state {:.4f} scan {:.4f} output {:.4f}", t.stage_ms[0], t.stage_ms[1], t.stage_ms[2]);
    } else {
      const auto q = normals(s.qk_size(), o.common.seed, rng::kQueries), k = normals(s.qk_size(), o.common.seed, rng::kKeys),
                 v = normals(s.v_size(), o.common.seed, rng::kValues);
      for (int r = 0; r < o.warmup + o.repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        run_cpu(it.form, s, opt, q.data(), k.data(), v.data());
        if (r >= o.warmup) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    const double med = median(ms);
    const Work w = work_of(it, attention_map(opt.map), d, dv, dtype, variant);
    const double tflops = w.flops / (med * 1e-3) / 1e12, gbps = w.bytes / (med * 1e-3) / 1e9;
    const double f_gemm = gpu ? tflops / ceil.gemm_tflops : 0, f_copy = gpu ? gbps / ceil.copy_gbps : 0;
    const double mtok = double(it.B * it.T) / (med * 1e-3) / 1e6;
    fmt::print("{:<14} {:<9} {:<7} {:>3} {:>3} {:>7} {:>3} {:>4} {:<5} {:<20} {:>9.2e} {:>10.4f} {:>9.2f} {:>8.2f} {:>8.1f} "
               "{:>7.3f} {:>7.3f}{}\n",
               it.group, to_string(it.form), it.map, it.B, it.H, it.T, d, it.chunk, dtype_name, variant, rel, med, mtok,
               tflops, gbps, f_gemm, f_copy, path == "scalar fallback" ? "  [scalar fallback: no tensor-core kernel]" : "");
    if (!stages.empty()) fmt::print("{:<14} stages (ms, one extra launch): {}\n", "", stages);
    std::fflush(stdout);
    io::Row row;
    row.set("group", it.group)
        .set("kernel", to_string(it.form))
        .set("map", opt.map.canonical_spec())
        .set("variant", variant)
        .set("variant_path", path)
        .set("path", gpu ? "cuda" : "cpu")
        .set("B", it.B)
        .set("H", it.H)
        .set("T", it.T)
        .set("d_head", d)
        .set("d_v", dv)
        .set("chunk", it.chunk)
        .set("dtype", dtype_name)
        .set("rel_err_vs_cpu", rel)
        .set("validated_on", fmt::format("B=1,H=1,T={} (same kernel variant and chunk; float64 recurrent CPU reference)", tv))
        .set("stage_ms", stages)
        .set("ms_median", med)
        .set("ms_min", *std::min_element(ms.begin(), ms.end()))
        .set("ms_max", *std::max_element(ms.begin(), ms.end()))
        .set("repeats", o.repeats)
        .set("tokens_per_s", double(it.B * it.T) / (med * 1e-3))
        .set("tflops", tflops)
        .set("gbps", gbps)
        .set("fraction_of_gemm_ceiling", f_gemm)
        .set("fraction_of_copy_ceiling", f_copy)
        .set("fraction_of_ceiling", std::max(f_gemm, f_copy))
        .set("ceiling_gemm_tflops", ceil.gemm_tflops)
        .set("ceiling_copy_gbps", ceil.copy_gbps);
    tab.append(row);
  }
  write_rows(o, prep, tab);
}

const memcap::cli::Register reg("kata", 60, [](CLI::App& tool) {
  auto o = std::make_shared<BenchOptions>();
  auto* sub = tool.add_subcommand(
      "bench",
      "Validate, then time, the causal KATA attention kernels: quadratic (spec §5.1, M_g/Sigma_g, tensor cores), "
      "chunked state (§5.2) and tree scan (§5.3). Each configuration is first checked against the float64 CPU "
      "reference on one (b,h) slice at T_val = min(T, --validate-T), with the same kernel variant and chunk; a "
      "failure stops the run. Every configuration (shape, map, kernel variant, GPU memory) is checked before any "
      "launch: a bad one exits 2. GPU times are CUDA-event medians over --repeats after --warmup launches, inputs "
      "N(0,1) generated on the device. The same run measures the card's ceilings (device-to-device copy GB/s, "
      "cuBLAS bf16 GEMM TFLOP/s) and reports each kernel's rate as a fraction of them. Writes /summary (one row "
      "per kernel and shape) to --out.\nExample: kata bench --device cuda --shapes accept --out bench.h5");
  cli::add_common(sub, o->common);
  sub->add_option("--shapes", o->shapes,
                  "accept: issue 11's acceptance set (quadratic M1/M2 T=4K..32K at d=64 (B=8,H=16) and d=128 (B=8,H=8); "
                  "chunked M2 T=128K B=8 H=16 C=64; B=H=1 chunked vs quadratic M1/M2 T=32K..128K and the "
                  "sequential chunk scan; linear, sigma2, m4 quadratic T=4K..32K); table8 (B=8,H=16, "
                  "M1/M2 quadratic and chunked, T=1K..128K); table10 (linear, H=16, C=128, the paper's (B,T) pairs); "
                  "table11 (linear, B=1); table9 (forward + backward of the MQAR mixer cores, B=8, H=16, d=64, T=1K..32K, "
                  "--maps default m1,m2,softmax, --variant auto|gemm|tiled|mma|chunked|all (mma: bf16 tensor cores, quadratic, KATA M_g maps; chunked: bf16, the chunked O(T) forward + backward, C = 64, KATA maps), "
                  "--dtype tf32 (default here) or fp32 for gemm/tiled; "
                  "compare with sdpa_baseline.py --pass fwdbwd); custom (--B --H --T --d-head --chunk --forms --maps)")
      ->capture_default_str();
  sub->add_option("--dtype", o->dtype,
                  "input/output type on the GPU: bf16 (tensor cores) or fp32 (SIMT path); --device cpu runs the "
                  "float64 reference and refuses --dtype")
      ->capture_default_str();
  sub->add_option("--forms", o->forms, "custom: comma list of quadratic,chunked,tree (each once)")
      ->capture_default_str();
  sub->add_option("--maps", o->maps,
                  "custom: comma list of feature maps (m1,m2,m4,sigma2,sigma4,linear,orthant,lorentz; options like "
                  "m2:eps=1e-4, sigma4:eps=0,scale=1; eps in [0, 1]). Default eps: orthant 1e-6, m<g> 0, "
                  "sigma<g> 1e-4 (spec §2); "
                  "each map once; "
                  "/summary/map records the spec with every option resolved")
      ->capture_default_str();
  sub->add_option("--B", o->B, "custom: batch size")->capture_default_str();
  sub->add_option("--H", o->H, "custom: heads")->capture_default_str();
  sub->add_option("--T", o->T, "custom: sequence length (tokens)")->capture_default_str();
  sub->add_option("--d-head", o->d_head,
                  "custom: head width d (tensor cores: 32, 64 or 128 with d_v = d; other widths run the scalar fallback)")
      ->capture_default_str();
  sub->add_option("--d-v", o->d_v, "custom: value width d_v (0: = --d-head; d_v != d runs the scalar fallback)")
      ->capture_default_str();
  sub->add_option("--variant", o->variant,
                  "kernel variant for every configuration: quadratic ws3|ws2|mt2|mt1|simt, chunked "
                  "fused|fused-seq|split|split-g4|scan-g4|scan-g4c|scan-g4w|scan-g4p|scan-g4pw|scan-g4pb|scan-g4pwb|2pass|2pass-g4|"
                  "2pass-g4w|simt, tree mma|simt (table9: auto|gemm|tiled|mma|chunked); "
                  "'all' times every tensor-core variant that applies. Default: "
                  "MEMCAP_KATA_QUAD_VARIANT / MEMCAP_KATA_CHUNK_VARIANT / MEMCAP_KATA_TREE_VARIANT, else the first "
                  "that applies (recorded in /summary/variant)");
  sub->add_option("--chunk", o->chunk, "custom: chunk size C (tensor cores: 64, or 128 at d = 64; fallback: <= 64)")
      ->capture_default_str();
  sub->add_option("--backward-chunk", o->backward_chunk,
                  "table9 --variant chunked: C of the O(T) backward (a multiple of 8 in [8, 256]; the forward keeps "
                  "C = 64): larger C moves fewer state bytes, more C x C block bytes")
      ->capture_default_str();
  sub->add_option("--repeats", o->repeats, "timed launches per configuration (median reported)")->capture_default_str();
  sub->add_option("--warmup", o->warmup, "untimed launches before timing")->capture_default_str();
  sub->add_option("--validate-T", o->validate_T, "sequence length of the validation slice (T_val = min(T, this))")
      ->capture_default_str();
  sub->callback([sub, o] { run_bench(sub, *o); });
});

}  // namespace

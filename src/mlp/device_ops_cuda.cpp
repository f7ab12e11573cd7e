// Device plumbing of the closed-form GPU path (construct_cuda_impl.hpp): arena, automatic tiles,
// cuBLAS wrappers (64-bit API, float64 / float32, no TF32), fact and model transfers between Eigen
// and the device, and the gated hidden layer of one tile of keys x features.
#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>

#include "core/gpu.hpp"
#include "mlp/construct_cuda_impl.hpp"
#include "mlp_features.cuh"

namespace memcap::mlp::cudaimpl {

// Elements per work buffer of the automatic tiles (512 MiB in float64).
constexpr std::int64_t kTileElems = std::int64_t(1) << 26;

DeviceArena::DeviceArena(std::size_t bytes, const gpu::Stream& s, bool poison)
    : storage_({static_cast<std::int64_t>(std::max<std::size_t>(bytes, kAlign))}, gpu::DType::u8),
      capacity_(std::max<std::size_t>(bytes, kAlign)) {
  if (poison) storage_.fill_nan(s);
}

Tiles choose_tiles(const Dims& z, std::int64_t override_tile) {
  auto fit = [](std::int64_t per, std::int64_t extent) {
    const std::int64_t t = std::max<std::int64_t>(1, kTileElems / std::max<std::int64_t>(per, 1));
    return std::max<std::int64_t>(1, std::min(t, extent));
  };
  Tiles t;
  t.eval_rows = fit(std::max(z.m, z.P), z.F);
  t.feat_rows = fit(z.m, z.F);
  t.feat_cols = fit(z.F, z.m);
  t.cg_cols = fit(z.m, z.F);
  if (override_tile > 0) {
    t.eval_rows = std::min(override_tile, z.F);
    t.feat_rows = std::min(override_tile, z.F);
    t.feat_cols = std::min(override_tile, z.m);
    t.cg_cols = std::min(override_tile, z.F);
  }
  return t;
}

Ctx::Ctx(gpu::Handles& handles) : h(handles), s(handles.stream().get()), blas(handles.blas()) {}

void* Ctx::workspace(std::size_t bytes) {
  keep.emplace_back(std::vector<std::int64_t>{static_cast<std::int64_t>(std::max<std::size_t>(bytes, 8))},
                    gpu::DType::u8);
  return keep.back().raw();
}

namespace {
cublasOperation_t op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }
}  // namespace

void gemm(Ctx& c, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const double* A,
          std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C, std::int64_t ldc) {
  if (M == 0 || N == 0) return;
  MEMCAP_CUBLAS_CHECK(cublasDgemm_64(c.blas, op(ta), op(tb), M, N, K, &alpha, A, std::max<std::int64_t>(lda, 1), B,
                                     std::max<std::int64_t>(ldb, 1), &beta, C, std::max<std::int64_t>(ldc, 1)));
}

void gemm(Ctx& c, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, double beta, float* C, std::int64_t ldc) {
  if (M == 0 || N == 0) return;
  const float a = static_cast<float>(alpha), b = static_cast<float>(beta);
  MEMCAP_CUBLAS_CHECK(cublasSgemm_64(c.blas, op(ta), op(tb), M, N, K, &a, A, std::max<std::int64_t>(lda, 1), B,
                                     std::max<std::int64_t>(ldb, 1), &b, C, std::max<std::int64_t>(ldc, 1)));
}

void syrk(Ctx& c, bool trans, std::int64_t n, std::int64_t k, double alpha, const double* A, std::int64_t lda,
          double beta, double* C, std::int64_t ldc) {
  if (n == 0) return;
  MEMCAP_CUBLAS_CHECK(cublasDsyrk_64(c.blas, CUBLAS_FILL_MODE_LOWER, op(trans), n, k, &alpha, A,
                                     std::max<std::int64_t>(lda, 1), &beta, C, std::max<std::int64_t>(ldc, 1)));
}

void transpose(Ctx& c, std::int64_t M, std::int64_t N, const double* A, std::int64_t lda, double* C,
               std::int64_t ldc) {
  if (M == 0 || N == 0) return;
  const double one = 1, zero = 0;
  // C = 1·Aᵀ + 0·Aᵀ (B is never read for beta = 0, but must be a valid operand).
  MEMCAP_CUBLAS_CHECK(cublasDgeam_64(c.blas, CUBLAS_OP_T, CUBLAS_OP_T, M, N, &one, A, lda, &zero, A, lda, C, ldc));
}

DeviceFacts layout_facts(DeviceArena& a, const Dims& z) {
  DeviceFacts f;
  f.F = z.F;
  f.P = z.P;
  f.d = z.d;
  f.keys = a.take<double>(z.F * z.d);
  f.values = a.take<double>(z.P * z.d);
  f.targets = a.take<double>(z.F * z.d);
  f.map = a.take<int>(z.F);
  return f;
}

void upload_facts(Ctx& c, const FactSet& fs, const DeviceFacts& df) {
  const Eigen::MatrixXd C = fs.targets();
  c.write(df.keys, fs.keys.data(), fs.keys.size());
  c.write(df.values, fs.values.data(), fs.values.size());
  c.write(df.targets, C.data(), C.size());
  c.write(df.map, fs.map.data(), fs.map.size());
  c.sync();  // the host temporaries above die here: wait for the copies
}

DeviceModel layout_model(DeviceArena& a, std::int64_t m, std::int64_t d, bool biases) {
  DeviceModel dm;
  dm.m = m;
  dm.d = d;
  dm.A = a.take<double>(m * d);
  dm.G = a.take<double>(m * d);
  dm.B = a.take<double>(d * m);
  if (biases) {
    dm.bias_up = a.take<double>(m);
    dm.bias_gate = a.take<double>(m);
    dm.bias_out = a.take<double>(d);
  }
  return dm;
}

void upload_model(Ctx& c, const GatedMLP& mlp, const DeviceModel& dm) {
  c.write(dm.A, mlp.A.data(), mlp.A.size());
  c.write(dm.G, mlp.G.data(), mlp.G.size());
  c.write(dm.B, mlp.B.data(), mlp.B.size());
  if (dm.bias_up) c.write(dm.bias_up, mlp.bias_up.data(), mlp.bias_up.size());
  if (dm.bias_gate) c.write(dm.bias_gate, mlp.bias_gate.data(), mlp.bias_gate.size());
  if (dm.bias_out) c.write(dm.bias_out, mlp.bias_out.data(), mlp.bias_out.size());
}

GatedMLP download_model(Ctx& c, const DeviceModel& dm) {
  GatedMLP mlp;
  mlp.A.resize(dm.m, dm.d);
  mlp.G.resize(dm.m, dm.d);
  mlp.B.resize(dm.d, dm.m);
  c.read(mlp.A.data(), dm.A, mlp.A.size());
  c.read(mlp.G.data(), dm.G, mlp.G.size());
  c.read(mlp.B.data(), dm.B, mlp.B.size());
  if (dm.bias_up) {
    mlp.bias_up.resize(dm.m);
    mlp.bias_gate.resize(dm.m);
    mlp.bias_out.resize(dm.d);
    c.read(mlp.bias_up.data(), dm.bias_up, dm.m);
    c.read(mlp.bias_gate.data(), dm.bias_gate, dm.m);
    c.read(mlp.bias_out.data(), dm.bias_out, dm.d);
  }
  mlp.gate = dm.gate == cuda::kGateRelu ? "relu" : dm.gate == cuda::kGateSilu ? "silu" : "identity";
  return mlp;
}

int gate_code(const std::string& gate) {
  if (gate == "identity") return cuda::kGateIdentity;
  if (gate == "relu") return cuda::kGateRelu;
  if (gate == "silu") return cuda::kGateSilu;
  throw UserError(fmt::format("the GPU path has no MLP gate '{}' (identity, relu or silu)", gate));
}

void hidden_tile(Ctx& c, const DeviceModel& dm, const double* X, std::int64_t ldx, std::int64_t r0, std::int64_t T,
                 std::int64_t c0, std::int64_t n, double* H, double* work) {
  gemm(c, false, true, T, n, dm.d, 1.0, X + r0, ldx, dm.A + c0, dm.m, 0.0, H, T);
  gemm(c, false, true, T, n, dm.d, 1.0, X + r0, ldx, dm.G + c0, dm.m, 0.0, work, T);
  cuda::hidden_combine(c.s, T, n, H, work, dm.bias_up ? dm.bias_up + c0 : nullptr,
                       dm.bias_gate ? dm.bias_gate + c0 : nullptr, dm.gate);
}

}  // namespace memcap::mlp::cudaimpl
#endif  // MEMCAP_HAVE_CUDA

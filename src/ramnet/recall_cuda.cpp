// Host side of the CUDA recall path (see recall_cuda.hpp): uploads the host draws and the host-computed
// factor tables, runs the mixers as cuBLAS DGEMMs plus the kernels of kernels/ramnet_recall.cu, in the
// same steps as src/ramnet/recall_cpu.cpp, and decodes. Device buffers come from a per-thread workspace
// that grows to the largest evaluation and is then reused (no allocation per evaluation once warm).
#if defined(MEMCAP_HAVE_CUDA)
#include "ramnet/recall_cuda.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "ramnet/topk.hpp"
#include "ramnet_recall.cuh"

namespace memcap::ramnet {
namespace {

enum Slot {
  kQ, kK, kV, kVa, kProbW, kProbR, kScoreW, kScoreR, kFlatW, kFlatR, kWeightW, kWeightR, kScratch, kX, kMass,
  kState, kOa, kTile, kSums, kMax, kOmega, kFk, kFq, kS, kInv, kVn2, kArg, kNmse, kSlots
};

// Device buffers of this host thread, one per slot, grown on demand and kept (a worker evaluates many
// N in a row). Released by the driver at exit: freeing them in a thread_local destructor could run after
// the CUDA runtime has unloaded.
struct Workspace {
  std::vector<gpu::Tensor> t = std::vector<gpu::Tensor>(kSlots);
  template <class T>
  T* get(Slot s, std::int64_t n) {
    gpu::Tensor& x = t[s];
    const std::int64_t want = std::max<std::int64_t>(n, 1);
    if (x.empty() || x.dtype() != gpu::dtype_of<T>() || x.numel() < want)
      x = gpu::Tensor({want}, gpu::dtype_of<T>());
    return x.data<T>();
  }
};

Workspace& workspace() {
  thread_local Workspace* w = new Workspace;
  return *w;
}

template <class T>
T* upload(Slot s, const T* host, std::int64_t n, const gpu::Stream& st) {
  T* d = workspace().get<T>(s, n);
  if (n > 0)
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(d, host, sizeof(T) * static_cast<std::size_t>(n), cudaMemcpyHostToDevice, st.get()));
  return d;
}

// Row-major C (M × N, ldc) = alpha op(A) op(B) + beta C (cuBLAS sees the transposes).
void gemm_rm(cublasHandle_t h, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
             const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C,
             std::int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  MEMCAP_CUBLAS_CHECK(cublasDgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                                  static_cast<int>(M), static_cast<int>(K), &alpha, B, static_cast<int>(ldb), A,
                                  static_cast<int>(lda), &beta, C, static_cast<int>(ldc)));
}

std::int64_t tile_rows(std::int64_t width) {
  return std::max<std::int64_t>(1, kDeviceTileDoubles / std::max<std::int64_t>(width, 1));
}

RowMatrix augmented(const RowMatrix& V) {
  RowMatrix A(V.rows(), V.cols() + 1);
  A.leftCols(V.cols()) = V;
  A.col(V.cols()).setOnes();
  return A;
}

std::vector<std::int64_t> fixed_point(const FactorTables& t) {
  std::vector<std::int64_t> q(t.logp.size());
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = topk_fixed_point(t.logp[i]);
  return q;
}

cuda::GateParams gate_params(const RecallModel& m) {
  cuda::GateParams g;
  g.gamma = m.gamma;
  g.eg = std::exp(m.gamma);
  g.emg = std::exp(-m.gamma);
  g.eps = m.eps;
  return g;
}

// RAM-Net (and ram-linear, which is its full, cumulative, mass-aware, ε = 0 case).
void ramnet_cuda(const RecallModel& m, const RecallInputs& in, gpu::Handles& h, double* O) {
  Workspace& ws = workspace();
  const gpu::Stream& st = h.stream();
  const cudaStream_t s = st.get();
  const int U = m.params.U, dp = m.params.dp, dv = static_cast<int>(in.values.cols()), cols = dv + 1;
  const std::int64_t N = in.keys.rows(), W = static_cast<std::int64_t>(U) * dp, D = address_count(m.params);
  const bool linear = m.mixer == Mixer::ram_linear;
  const std::int64_t K = linear ? 0 : m.topk;
  const bool mass_form = linear || m.mass_readout, cumulative = linear || m.cumulative();
  const FactorTables wt = factor_tables(m.params, m.params.beta_w, in.keys);
  const FactorTables rt = factor_tables(m.params, m.params.beta_r, in.queries);
  const double* pw = upload(kProbW, wt.prob.data(), N * W, st);
  const double* pr = upload(kProbR, rt.prob.data(), N * W, st);
  const RowMatrix Va = augmented(in.values);
  const double* va = upload(kVa, Va.data(), N * cols, st);
  const double* v = upload(kV, in.values.data(), N * dv, st);
  double* X = ws.get<double>(kX, D * cols);
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(X, 0, sizeof(double) * static_cast<std::size_t>(D * cols), s));
  std::int64_t *fw = nullptr, *fr = nullptr;
  double *ww = nullptr, *wr = nullptr;
  if (K > 0) {
    const std::vector<std::int64_t> qw = fixed_point(wt), qr = fixed_point(rt);
    const std::int64_t* dqw = upload(kScoreW, qw.data(), N * W, st);
    const std::int64_t* dqr = upload(kScoreR, qr.data(), N * W, st);
    std::int64_t* scratch = ws.get<std::int64_t>(kScratch, 4 * K * N);
    fw = ws.get<std::int64_t>(kFlatW, N * K);
    fr = ws.get<std::int64_t>(kFlatR, N * K);
    ww = ws.get<double>(kWeightW, N * K);
    wr = ws.get<double>(kWeightR, N * K);
    cuda::topk_lists(dqw, U, dp, N, K, fw, scratch, s);
    cuda::sparse_weights(pw, U, dp, N, K, fw, ww, s);
    cuda::topk_lists(dqr, U, dp, N, K, fr, scratch, s);
    cuda::sparse_weights(pr, U, dp, N, K, fr, wr, s);
    st.synchronize();  // the host score tables above go out of scope
  }
  // Dense features of the rows of table p (all D addresses), a tile of rows at a time: use(tile, r0, rows).
  auto dense_row_tiles = [&](const double* p, auto&& use) {
    const std::int64_t T = std::min(N, tile_rows(D));
    double* tile = ws.get<double>(kTile, T * D);
    for (std::int64_t r0 = 0; r0 < N; r0 += T) {
      const std::int64_t rows = std::min(T, N - r0);
      cuda::dense_features(p, U, dp, r0, rows, 0, D, tile, D, s);
      use(tile, r0, rows);
    }
  };
  // ---- writes ----
  if (cumulative) {
    if (K > 0) {
      cuda::scatter_cumulative(fw, ww, N, K, va, cols, X, s);
    } else {
      dense_row_tiles(pw, [&](const double* Wt, std::int64_t r0, std::int64_t rows) {
        gemm_rm(h.blas(), true, false, D, cols, rows, 1.0, Wt, D, va + r0 * cols, cols, 1.0, X, cols);
      });
    }
    if (!mass_form) cuda::scale_by_mass(X, D, dv, true, s);
  } else if (K > 0) {
    double* mass = ws.get<double>(kMass, D);
    double* state = ws.get<double>(kState, D * dv);
    MEMCAP_CUDA_CHECK(cudaMemsetAsync(mass, 0, sizeof(double) * static_cast<std::size_t>(D), s));
    MEMCAP_CUDA_CHECK(cudaMemsetAsync(state, 0, sizeof(double) * static_cast<std::size_t>(D * dv), s));
    cuda::gsu_sparse(fw, ww, pw, U, dp, N, K, v, dv, mass, state, gate_params(m), s);
    cuda::state_to_x(state, mass, D, dv, mass_form, X, s);
  } else {
    const std::int64_t T = std::min(D, tile_rows(N));
    double* L = ws.get<double>(kTile, N * T);
    for (std::int64_t a0 = 0; a0 < D; a0 += T) {
      const std::int64_t c = std::min(T, D - a0);
      cuda::gsu_dense(pw, U, dp, N, a0, c, L, T, X, cols, dv, gate_params(m), s);
      gemm_rm(h.blas(), true, false, c, dv, N, 1.0, L, T, v, dv, 0.0, X + a0 * cols, cols);
    }
    if (mass_form) cuda::scale_by_mass(X, D, dv, false, s);
  }
  // ---- reads ----
  double* Oa = ws.get<double>(kOa, N * cols);
  if (K > 0) {
    cuda::sparse_read(fr, wr, N, K, X, cols, Oa, s);
  } else {
    dense_row_tiles(pr, [&](const double* Rt, std::int64_t r0, std::int64_t rows) {
      gemm_rm(h.blas(), false, false, rows, cols, D, 1.0, Rt, D, X, cols, 0.0, Oa + r0 * cols, cols);
    });
  }
  cuda::finish_outputs(Oa, N, dv, linear ? 0.0 : m.eps, mass_form, O, s);
  st.synchronize();  // host tables and Va go out of scope
}

// O = (A V) / rowsum, a tile of query rows at a time: weights(A, sums, r0, rows) writes the tile's unnormalised
// weights A (rows × N, leading dimension N) and their row sums.
template <class Weights>
void normalised_row_tiles(gpu::Handles& h, std::int64_t N, const double* v, std::int64_t dv, double* O,
                          Weights&& weights) {
  Workspace& ws = workspace();
  const gpu::Stream& st = h.stream();
  const std::int64_t T = std::min(N, tile_rows(N));
  double* A = ws.get<double>(kTile, T * N);
  double* sums = ws.get<double>(kSums, T);
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    weights(A, sums, r0, rows);
    gemm_rm(h.blas(), false, false, rows, dv, N, 1.0, A, N, v, dv, 0.0, O + r0 * dv, dv);
    cuda::divide_rows(O + r0 * dv, rows, static_cast<int>(dv), sums, st.get());
  }
  st.synchronize();
}

void softmax_cuda(const RecallModel& m, const RecallInputs& in, gpu::Handles& h, double* O) {
  const gpu::Stream& st = h.stream();
  const std::int64_t N = in.keys.rows(), d = in.keys.cols(), dv = in.values.cols();
  const double* q = upload(kQ, in.queries.data(), N * d, st);
  const double* k = upload(kK, in.keys.data(), N * d, st);
  const double* v = upload(kV, in.values.data(), N * dv, st);
  normalised_row_tiles(h, N, v, dv, O, [&](double* A, double* sums, std::int64_t r0, std::int64_t rows) {
    gemm_rm(h.blas(), false, true, rows, N, d, 1.0, q + r0 * d, d, k, d, 0.0, A, N);
    cuda::softmax_rows(A, rows, N, 1.0 / m.tau, sums, st.get());
  });
}

void kappa_cuda(const RecallModel& m, const RecallInputs& in, gpu::Handles& h, double* O) {
  const gpu::Stream& st = h.stream();
  const int U = m.params.U, dp = m.params.dp;
  const std::int64_t N = in.keys.rows(), dv = in.values.cols(), W = static_cast<std::int64_t>(U) * dp;
  require(W <= 400, "kappa on the GPU supports U * dp <= 400 (got {}); use --device cpu", W);
  const FactorTables wt = factor_tables(m.params, m.params.beta_w, in.keys);
  const FactorTables rt = factor_tables(m.params, m.params.beta_r, in.queries);
  const double* pw = upload(kProbW, wt.prob.data(), N * W, st);
  const double* pr = upload(kProbR, rt.prob.data(), N * W, st);
  const double* v = upload(kV, in.values.data(), N * dv, st);
  normalised_row_tiles(h, N, v, dv, O, [&](double* A, double* sums, std::int64_t r0, std::int64_t rows) {
    cuda::kappa_rows(pr + r0 * W, pw, U, dp, rows, N, 1e-280, A, sums, st.get());
  });
}

void elu_cuda(const RecallModel&, const RecallInputs& in, gpu::Handles& h, double* O) {
  Workspace& ws = workspace();
  const gpu::Stream& st = h.stream();
  const std::int64_t N = in.keys.rows(), d = in.keys.cols();
  const int dv = static_cast<int>(in.values.cols()), cols = dv + 1;
  const double* q = upload(kQ, in.queries.data(), N * d, st);
  const double* k = upload(kK, in.keys.data(), N * d, st);
  const RowMatrix Va = augmented(in.values);
  const double* va = upload(kVa, Va.data(), N * cols, st);
  double* fk = ws.get<double>(kFk, N * d);
  double* fq = ws.get<double>(kFq, N * d);
  double* S = ws.get<double>(kS, d * cols);
  double* Oa = ws.get<double>(kOa, N * cols);
  cuda::elu_features(k, N * d, fk, st.get());
  cuda::elu_features(q, N * d, fq, st.get());
  gemm_rm(h.blas(), true, false, d, cols, N, 1.0, fk, d, va, cols, 0.0, S, cols);
  gemm_rm(h.blas(), false, false, N, cols, d, 1.0, fq, d, S, cols, 0.0, Oa, cols);
  cuda::finish_outputs(Oa, N, dv, 0.0, true, O, st.get());
  st.synchronize();
}

void favor_cuda(const RecallModel& m, const RecallInputs& in, gpu::Handles& h, double* O) {
  Workspace& ws = workspace();
  const gpu::Stream& st = h.stream();
  const cudaStream_t s = st.get();
  const std::int64_t N = in.keys.rows(), d = in.keys.cols(), D = in.omega.rows();
  const int dv = static_cast<int>(in.values.cols()), cols = dv + 1;
  const double sq = 1.0 / std::sqrt(m.tau), ht = 0.5 / m.tau;
  const double* q = upload(kQ, in.queries.data(), N * d, st);
  const double* k = upload(kK, in.keys.data(), N * d, st);
  const double* om = upload(kOmega, in.omega.data(), D * d, st);
  const RowMatrix Va = augmented(in.values);
  const double* va = upload(kVa, Va.data(), N * cols, st);
  const std::int64_t T = std::min(N, tile_rows(D));
  double* P = ws.get<double>(kTile, T * D);
  double* mx = ws.get<double>(kMax, 1025);
  double* S = ws.get<double>(kS, D * cols);
  double* Oa = ws.get<double>(kOa, N * cols);
  auto project = [&](const double* X, std::int64_t r0, std::int64_t rows) {
    gemm_rm(h.blas(), false, true, rows, D, d, sq, X + r0 * d, d, om, d, 0.0, P, D);
    cuda::favor_shift(P, rows, D, X + r0 * d, static_cast<int>(d), ht, s);
  };
  double ck = -INFINITY;
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    project(k, r0, rows);
    cuda::max_value(P, rows * D, mx, s);
    double host = 0;
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(&host, mx, sizeof(double), cudaMemcpyDeviceToHost, s));
    st.synchronize();
    ck = std::max(ck, host);
  }
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(S, 0, sizeof(double) * static_cast<std::size_t>(D * cols), s));
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    project(k, r0, rows);
    cuda::exp_shift_global(P, rows * D, ck, s);
    gemm_rm(h.blas(), true, false, D, cols, rows, 1.0, P, D, va + r0 * cols, cols, 1.0, S, cols);
  }
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    project(q, r0, rows);
    cuda::exp_shift_rows(P, rows, D, s);
    gemm_rm(h.blas(), false, false, rows, cols, D, 1.0, P, D, S, cols, 0.0, Oa + r0 * cols, cols);
  }
  cuda::finish_outputs(Oa, N, dv, 0.0, true, O, s);
  st.synchronize();
}

}  // namespace

void recall_outputs_cuda(const RecallModel& m, const RecallInputs& in, gpu::Handles& h, gpu::Tensor& O) {
  validate(m);
  const std::int64_t N = in.keys.rows(), dv = in.values.cols();
  require(N >= 1 && in.queries.rows() == N && in.values.rows() == N, "recall: {} keys, {} queries and {} values must "
          "be the same number N >= 1", N, in.queries.rows(), in.values.rows());
  require(in.keys.cols() == 2 * m.params.U && in.queries.cols() == 2 * m.params.U,
          "recall: keys and queries must have 2U = {} columns", 2 * m.params.U);
  MEMCAP_ASSERT(O.rank() == 2 && O.dim(0) == N && O.dim(1) == dv && O.dtype() == gpu::DType::f64,
                "recall_outputs_cuda: O must be an f64 tensor {N, dv}");
  double* o = O.data<double>();
  switch (m.mixer) {
    case Mixer::ramnet:
    case Mixer::ram_linear: ramnet_cuda(m, in, h, o); break;
    case Mixer::softmax: softmax_cuda(m, in, h, o); break;
    case Mixer::kappa: kappa_cuda(m, in, h, o); break;
    case Mixer::elu: elu_cuda(m, in, h, o); break;
    case Mixer::favor:
      require(in.omega.rows() == m.features() && in.omega.cols() == 2 * m.params.U,
              "recall: favor needs a {} x {} projection", m.features(), 2 * m.params.U);
      favor_cuda(m, in, h, o);
      break;
  }
}

Decoded decode_cuda(const gpu::Tensor& O, const RowMatrix& V, gpu::Handles& h) {
  Workspace& ws = workspace();
  const gpu::Stream& st = h.stream();
  const std::int64_t N = V.rows(), dv = V.cols();
  MEMCAP_ASSERT(O.rank() == 2 && O.dim(0) == N && O.dim(1) == dv, "decode_cuda: O must be {N, dv}");
  std::vector<double> inv(static_cast<std::size_t>(N)), vn2(static_cast<std::size_t>(N));
  for (std::int64_t j = 0; j < N; ++j) {  // as decode_cpu
    double s = 0;
    for (std::int64_t c = 0; c < dv; ++c) s += V(j, c) * V(j, c);
    vn2[static_cast<std::size_t>(j)] = s;
    inv[static_cast<std::size_t>(j)] = 1.0 / std::sqrt(s);
  }
  const double* v = upload(kV, V.data(), N * dv, st);
  const double* dinv = upload(kInv, inv.data(), N, st);
  const double* dvn2 = upload(kVn2, vn2.data(), N, st);
  std::int64_t* arg = ws.get<std::int64_t>(kArg, N);
  double* nm = ws.get<double>(kNmse, N);
  const std::int64_t T = std::min(N, tile_rows(N));
  double* G = ws.get<double>(kTile, T * N);
  const double* o = O.data<double>();
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    gemm_rm(h.blas(), false, true, rows, N, dv, 1.0, o + r0 * dv, dv, v, dv, 0.0, G, N);
    cuda::decode_rows(G, rows, N, r0, dinv, dvn2, o, static_cast<int>(dv), arg, nm, st.get());
  }
  Decoded d;
  d.argmax.resize(static_cast<std::size_t>(N));
  d.nmse.resize(static_cast<std::size_t>(N));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(d.argmax.data(), arg, sizeof(std::int64_t) * static_cast<std::size_t>(N),
                                    cudaMemcpyDeviceToHost, st.get()));
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(d.nmse.data(), nm, sizeof(double) * static_cast<std::size_t>(N),
                                    cudaMemcpyDeviceToHost, st.get()));
  st.synchronize();
  return d;
}

TrialOutcome evaluate_trial_cuda(const RecallModel& m, const RecallInputs& in, gpu::Handles& h) {
  thread_local gpu::Tensor* O = nullptr;  // the outputs, grown like the workspace
  const std::int64_t N = in.keys.rows(), dv = in.values.cols();
  if (!O) O = new gpu::Tensor();
  if (O->empty() || O->dim(0) != N || O->dim(1) != dv) *O = gpu::Tensor({N, dv}, gpu::DType::f64);
  recall_outputs_cuda(m, in, h, *O);
  return score(decode_cuda(*O, in.values, h));
}

}  // namespace memcap::ramnet
#endif

// "gemm-psi" variant of the MQAR KATA mixer core (kata_mqar_psi_gemm.cuh): explicit features, scores and their
// cotangents in memory, every product on cuBLAS, row kernels (one warp per query row, fixed shuffle order, no atomics)
// for the mask, the normalisation and its backward. CPU twins: kata_head_forward / kata_head_backward.
//
// Column-major views as kata_mqar_gemm.cu: the group's Φ buffers are [bh][T][np] (bh = b·H + h), so per (sequence,
// head) Φ_cm is np × T with ld np; a row-major T × T score block S[t][s] is S_cm(s, t) at S + bh·T². Then
// S_cm = Φk_cmᵀ Φq_cm, dΦq_cm = Φk_cm dA_cm, dΦk_cm = Φq_cm dA_cmᵀ; o, dV and dO Vᵀ per head as the gemm variant.
#include <algorithm>
#include <string>

#include "cuda_check.cuh"
#include "kata_feature_map.cuh"
#include "kata_mqar_psi.cuh"
#include "kata_mqar_psi_gemm.cuh"
#include "kata_mqar_rows.cuh"
#include "kata_mqar_workspace.cuh"
#include "nn_layers.cuh"

namespace memcap::kata::mqar::cuda {
namespace {

namespace kc = ::memcap::kata::cuda;
namespace nc = ::memcap::nn::cuda;

using namespace rowk;  // warp_row, warp_sum, warp_dot, Rows, row_blocks, kWarps
constexpr int kThreadsPerBlock = 256;

// S → P = S / den on s <= t, 0 above (and 0 where den = 0); den = Σ_{s<=t} S_ts computed and stored (den_in null)
// or read.
template <class T>
__global__ void psi_rows_probs(T* __restrict__ S, T* __restrict__ den_out, const T* __restrict__ den_in,
                               Rows g) {
  const std::int64_t r = warp_row();
  if (r >= g.count()) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t T_ = g.T, t = r % T_;
  T* x = S + r * T_;
  T d;
  if (den_in) {
    d = den_in[r];
  } else {
    T sum = T(0);
    for (std::int64_t s = lane; s <= t; s += 32) sum += x[s];
    d = warp_sum(sum);
    if (lane == 0) den_out[r] = d;
  }
  const T inv = d != T(0) ? T(1) / d : T(0);
  for (std::int64_t s = lane; s < T_; s += 32) x[s] = s <= t ? x[s] * inv : T(0);
}

// dP = dO Vᵀ → dA = (dP − δ_t) / den_t on s <= t, 0 above, δ_t = dO_t · o_t.
template <class T>
__global__ void psi_rows_backward(T* __restrict__ dA, const T* __restrict__ den, const T* __restrict__ dout,
                                  const T* __restrict__ o, std::int64_t ldo, Rows g) {
  const std::int64_t r = warp_row();
  if (r >= g.count()) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t T_ = g.T, t = r % T_;
  const std::int64_t hr = g.head_row(r, ldo);
  const T delta = warp_dot(dout + hr, o + hr, static_cast<int>(g.dh));
  const T d = den[r];
  const T inv = d != T(0) ? T(1) / d : T(0);
  T* x = dA + r * T_;
  for (std::int64_t s = lane; s < T_; s += 32) x[s] = s <= t ? (x[s] - delta) * inv : T(0);
}

unsigned grid_for(std::int64_t n, int per_block) {
  const std::int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(std::min<std::int64_t>(std::max<std::int64_t>(b, 1), 1 << 20));
}

int np_of(const MapParams& map) { return static_cast<int>((map.n_features + 3) / 4 * 4); }

// Elements of one sequence's workspace: Φq, Φk, dΦq, dΦk (H·T·np each), the scores and their cotangents (H·T² each).
std::size_t per_seq_elems(const MapParams& map, const HeadShape& s) {
  const std::size_t H = static_cast<std::size_t>(s.H), T = static_cast<std::size_t>(s.T);
  return 4 * H * T * static_cast<std::size_t>(np_of(map)) + 2 * H * T * T;
}

void check_args(const MapParams& map, const HeadShape& s, const char* what) {
  if (s.B < 0 || s.T < 0 || s.H < 1 || s.dh < 1)
    cuda_detail::throw_user_error(std::string(what) + ": head shape needs H >= 1 and d_head >= 1 (got H = " +
                                  std::to_string(s.H) + ", d_head = " + std::to_string(s.dh) + ")");
  if (!kata_psi_gemm_applies(map, s))
    cuda_detail::throw_user_error(std::string(what) + ": the gemm-psi variant needs a PSD map (m<g>, sigma<g>) " +
                                  "built for this head width (d_head = " + std::to_string(s.dh) + ")");
}

std::int64_t group_of(const MapParams& map, const HeadShape& s, std::size_t elem, std::size_t ws_bytes,
                      const char* what) {
  return wsp::group_size(s, per_seq_elems(map, s) * elem, ws_bytes, what);
}

// Φq, Φk of the group's nb sequences (rows = nb·H·T, np columns).
template <class T>
void form_features(T* phq, T* phk, const MapParams& map, const T* q, const T* k, std::int64_t ldqkv,
                   const HeadShape& s, std::int64_t nb, cudaStream_t stream) {
  const kc::DeviceMap dm = kc::device_map(map);
  const detail::PsiRows pr{nb * s.H, s.H, s.T, s.T, s.dh, np_of(map)};
  kc::with_map_kind(map.kind, [&](auto kind) {
    constexpr MapKind K = decltype(kind)::value;
    const unsigned fb = grid_for(pr.rows(), detail::kPsiRowWarps);
    detail::psi_rows_kernel<T, K><<<fb, detail::kPsiRowWarps * 32, 0, stream>>>(phq, q, ldqkv, dm, pr);
    MEMCAP_CUDA_CHECK_LAUNCH("psi_rows_kernel");
    detail::psi_rows_kernel<T, K><<<fb, detail::kPsiRowWarps * 32, 0, stream>>>(phk, k, ldqkv, dm, pr);
    MEMCAP_CUDA_CHECK_LAUNCH("psi_rows_kernel");
  });
}

// S = Φq Φkᵀ for every (sequence, head) of the group: S_cm = Φk_cmᵀ Φq_cm.
template <class T>
void scores(cublasHandle_t h, T* S, const T* phq, const T* phk, std::int64_t T_, int np, std::int64_t heads) {
  nc::gemm_cm_strided<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, T_, T_, np, T(1), phk, np, T_ * np, phq, np, T_ * np, T(0), S, T_,
                         T_ * T_, heads);
}

}  // namespace

bool kata_psi_gemm_applies(const MapParams& map, const HeadShape& s) {
  return map.is_psd() && map.d == s.dh && map.g >= 1 && s.dh % map.g == 0;
}

std::size_t kata_psi_gemm_workspace_bytes(const MapParams& map, const HeadShape& s, std::size_t elem) {
  if (!kata_psi_gemm_applies(map, s) || s.T < 1) return 0;
  return wsp::capped(s, per_seq_elems(map, s) * elem);
}

template <class T>
void kata_heads_forward_psi_gemm(T* o, std::int64_t ldo, T* den, const MapParams& map, const T* q, const T* k,
                                 const T* v, std::int64_t ldqkv, const HeadShape& s, cublasHandle_t h, void* ws,
                                 std::size_t ws_bytes, cudaStream_t stream) {
  const char* what = "kata_heads_forward_psi_gemm";
  check_args(map, s, what);
  if (s.B == 0 || s.T == 0) return;
  nc::check_handle_stream(h, stream);
  const std::int64_t nb_max = group_of(map, s, sizeof(T), ws_bytes, what), TT = s.T * s.T;
  const int np = np_of(map);
  for (std::int64_t b0 = 0; b0 < s.B; b0 += nb_max) {
    const std::int64_t nb = std::min(nb_max, s.B - b0), seq = s.T * ldqkv, seqo = s.T * ldo, heads = nb * s.H;
    T* phq = static_cast<T*>(ws);
    T* phk = phq + heads * s.T * np;
    T* S = phk + heads * s.T * np;
    form_features<T>(phq, phk, map, q + b0 * seq, k + b0 * seq, ldqkv, s, nb, stream);
    scores<T>(h, S, phq, phk, s.T, np, heads);
    const Rows g{nb, s.H, s.T, s.dh};
    psi_rows_probs<T><<<row_blocks(heads * s.T), kWarps * 32, 0, stream>>>(S, den + b0 * s.H * s.T, nullptr, g);
    MEMCAP_CUDA_CHECK_LAUNCH("psi_rows_probs");
    for (std::int64_t hh = 0; hh < s.H; ++hh) {  // o = P V per head
      const std::int64_t off = hh * s.dh;
      nc::gemm_cm_strided<T>(h, CUBLAS_OP_N, CUBLAS_OP_N, s.dh, s.T, s.T, T(1), v + b0 * seq + off, ldqkv, seq,
                             S + hh * TT, s.T, s.H * TT, T(0), o + b0 * seqo + off, ldo, seqo, nb);
    }
  }
}

template <class T>
void kata_heads_backward_psi_gemm(T* dq, T* dk, T* dv, std::int64_t lddqkv, const T* dout, const T* o,
                                  std::int64_t ldo, const MapParams& map, const T* q, const T* k, const T* v,
                                  std::int64_t ldqkv, const T* den, const HeadShape& s, cublasHandle_t h, void* ws,
                                  std::size_t ws_bytes, cudaStream_t stream) {
  const char* what = "kata_heads_backward_psi_gemm";
  check_args(map, s, what);
  if (s.B == 0 || s.T == 0) return;
  nc::check_handle_stream(h, stream);
  const std::int64_t nb_max = group_of(map, s, sizeof(T), ws_bytes, what), TT = s.T * s.T;
  const int np = np_of(map);
  const kc::DeviceMap dm = kc::device_map(map);
  for (std::int64_t b0 = 0; b0 < s.B; b0 += nb_max) {
    const std::int64_t nb = std::min(nb_max, s.B - b0), seq = s.T * ldqkv, seqo = s.T * ldo, seqd = s.T * lddqkv;
    const std::int64_t heads = nb * s.H, fe = heads * s.T * np;
    T* phq = static_cast<T*>(ws);
    T* phk = phq + fe;
    T* dphq = phk + fe;
    T* dphk = dphq + fe;
    T* P = dphk + fe;
    T* dA = P + heads * TT;
    const T* qb = q + b0 * seq;
    const T* kb = k + b0 * seq;
    const T* vb = v + b0 * seq;
    const T* dob = dout + b0 * seqo;
    form_features<T>(phq, phk, map, qb, kb, ldqkv, s, nb, stream);
    scores<T>(h, P, phq, phk, s.T, np, heads);
    const Rows g{nb, s.H, s.T, s.dh};
    const unsigned blocks = row_blocks(heads * s.T);
    psi_rows_probs<T><<<blocks, kWarps * 32, 0, stream>>>(P, nullptr, den + b0 * s.H * s.T, g);
    MEMCAP_CUDA_CHECK_LAUNCH("psi_rows_probs");
    for (std::int64_t hh = 0; hh < s.H; ++hh) {  // dV = Pᵀ dO and dP = dO Vᵀ per head
      const std::int64_t off = hh * s.dh;
      nc::gemm_cm_strided<T>(h, CUBLAS_OP_N, CUBLAS_OP_T, s.dh, s.T, s.T, T(1), dob + off, ldo, seqo, P + hh * TT,
                             s.T, s.H * TT, T(0), dv + b0 * seqd + off, lddqkv, seqd, nb);
      nc::gemm_cm_strided<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, s.T, s.T, s.dh, T(1), vb + off, ldqkv, seq, dob + off, ldo,
                             seqo, T(0), dA + hh * TT, s.T, s.H * TT, nb);
    }
    psi_rows_backward<T><<<blocks, kWarps * 32, 0, stream>>>(dA, den + b0 * s.H * s.T, dob, o + b0 * seqo, ldo, g);
    MEMCAP_CUDA_CHECK_LAUNCH("psi_rows_backward");
    // dΦq = dA Φk, dΦk = dAᵀ Φq (per (sequence, head)), then the VJP of ψ into dq, dk.
    nc::gemm_cm_strided<T>(h, CUBLAS_OP_N, CUBLAS_OP_N, np, s.T, s.T, T(1), phk, np, s.T * np, dA, s.T, TT, T(0), dphq,
                           np, s.T * np, heads);
    nc::gemm_cm_strided<T>(h, CUBLAS_OP_N, CUBLAS_OP_T, np, s.T, s.T, T(1), phq, np, s.T * np, dA, s.T, TT, T(0), dphk,
                           np, s.T * np, heads);
    const detail::PsiRows pr{heads, s.H, s.T, s.T, s.dh, np};
    const unsigned vb_blocks = grid_for(heads * s.T * s.dh, kThreadsPerBlock);
    kc::with_map_kind(map.kind, [&](auto kind) {
      constexpr MapKind K = decltype(kind)::value;
      if constexpr (K == MapKind::BlockPsd || K == MapKind::SumPsd) {
        detail::psi_vjp_psd_kernel<T, K>
            <<<vb_blocks, kThreadsPerBlock, 0, stream>>>(dq + b0 * seqd, lddqkv, qb, ldqkv, dphq, dm, pr);
        MEMCAP_CUDA_CHECK_LAUNCH("psi_vjp_psd_kernel");
        detail::psi_vjp_psd_kernel<T, K>
            <<<vb_blocks, kThreadsPerBlock, 0, stream>>>(dk + b0 * seqd, lddqkv, kb, ldqkv, dphk, dm, pr);
        MEMCAP_CUDA_CHECK_LAUNCH("psi_vjp_psd_kernel");
      }
    });
  }
}

#define MEMCAP_MQAR_PSI_GEMM(T)                                                                                     \
  template void kata_heads_forward_psi_gemm<T>(T*, std::int64_t, T*, const MapParams&, const T*, const T*, const T*, \
                                               std::int64_t, const HeadShape&, cublasHandle_t, void*, std::size_t,  \
                                               cudaStream_t);                                                       \
  template void kata_heads_backward_psi_gemm<T>(T*, T*, T*, std::int64_t, const T*, const T*, std::int64_t,          \
                                                const MapParams&, const T*, const T*, const T*, std::int64_t,       \
                                                const T*, const HeadShape&, cublasHandle_t, void*, std::size_t,     \
                                                cudaStream_t);
MEMCAP_MQAR_PSI_GEMM(float)
MEMCAP_MQAR_PSI_GEMM(double)
#undef MEMCAP_MQAR_PSI_GEMM

}  // namespace memcap::kata::mqar::cuda

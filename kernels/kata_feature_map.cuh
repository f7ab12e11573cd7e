// The one device implementation of the KATA feature maps ψ and their vector-Jacobian products (spec kata.md
// §2.2–2.7), fp32 arithmetic, templated on the map kind (map_params.hpp). Every CUDA kernel that forms ψ
// includes this: the attention forms (quadratic, chunked, tree) and `kata capacity` (kata_feature_map.cu).
// Packed PSD layout of §2.4: per m×m factor the diagonal first, then the strict upper triangle row-major with
// off-diagonals ×√2; M_g concatenates the g packed blocks, Σ_g sums them (×c) into one; εI on the diagonal.
// CPU float64 reference: FeatureMap::apply and FeatureMap::vjp (src/kata/feature_map.cpp).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kata/map_params.hpp"

namespace memcap::kata::cuda {

constexpr int kFeatureBlock = 64;  // features per block in the chunked kernels (n_ψ padded to a multiple)

// Device view of a MapParams: fp32 constants and the padded feature count.
struct DeviceMap {
  MapKind kind = MapKind::Linear;
  int d = 0, g = 1, m = 0;
  int n_features = 0;  // packed n_ψ
  int n_padded = 0;    // n_ψ rounded up to kFeatureBlock
  float eps = 0.f, scale = 1.f;
  double eps_d = 0.0, scale_d = 1.0;  // the same constants in float64 (the Acc = double instantiations)
};
inline DeviceMap device_map(const MapParams& p) {
  DeviceMap dm;
  dm.kind = p.kind;
  dm.d = p.d;
  dm.g = p.is_psd() ? p.g : 1;
  dm.m = p.is_psd() ? p.d / p.g : p.d;
  dm.n_features = static_cast<int>(p.n_features);
  dm.n_padded = (dm.n_features + kFeatureBlock - 1) / kFeatureBlock * kFeatureBlock;
  dm.eps = static_cast<float>(p.eps);
  dm.scale = static_cast<float>(p.scale);
  dm.eps_d = p.eps;
  dm.scale_d = p.scale;
  return dm;
}

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16(x); }

constexpr float kSqrt2f = 1.41421356237309515f;
constexpr float kInvSqrt2f = 0.70710678118654752f;

// Arithmetic type Acc of the functions below: float (every kernel's default, bit-identical to the fp32
// code) or double (the float64 twins of the MQAR mixer cores, tested against the CPU to 1e-10).
template <class Acc, class E>
__device__ __forceinline__ Acc to_acc(E x) {
  if constexpr (std::is_same_v<Acc, float>) return to_f(x);
  else return static_cast<Acc>(x);
}
template <class Acc>
__device__ __forceinline__ Acc acc_sqrt(Acc x) {
  if constexpr (std::is_same_v<Acc, float>) return sqrtf(x);
  else return sqrt(x);
}
template <class Acc>
__device__ __forceinline__ Acc acc_max(Acc a, Acc b) {
  if constexpr (std::is_same_v<Acc, float>) return fmaxf(a, b);
  else return fmax(a, b);
}
template <class Acc>
__host__ __device__ __forceinline__ Acc map_eps(const DeviceMap& mp) {
  if constexpr (std::is_same_v<Acc, float>) return mp.eps;
  else return static_cast<Acc>(mp.eps_d);
}
template <class Acc>
__host__ __device__ __forceinline__ Acc map_scale(const DeviceMap& mp) {
  if constexpr (std::is_same_v<Acc, float>) return mp.scale;
  else return static_cast<Acc>(mp.scale_d);
}
template <class Acc>
__device__ __forceinline__ constexpr Acc sqrt2_of() {
  if constexpr (std::is_same_v<Acc, float>) return kSqrt2f;
  else return 1.41421356237309515;
}
template <class Acc>
__device__ __forceinline__ constexpr Acc inv_sqrt2_of() {
  if constexpr (std::is_same_v<Acc, float>) return kInvSqrt2f;
  else return 0.70710678118654752;
}

// Packed index l of an m x m symmetric factor -> (i, j): l < m diagonal, then the upper triangle by rows.
__host__ __device__ __forceinline__ void packed_pair(int m, int l, int& i, int& j) {
  if (l < m) {
    i = j = l;
    return;
  }
  const int r = l - m;  // row i starts at off(i) = i (2m - i - 1) / 2
  const float b = 2.f * m - 1.f;
  const float disc = b * b - 8.f * r;
  int row = static_cast<int>((b - sqrtf(disc > 0.f ? disc : 0.f)) * 0.5f);
  row = row < 0 ? 0 : (row > m - 2 ? m - 2 : row);
  while (row > 0 && row * (2 * m - row - 1) / 2 > r) --row;
  while ((row + 1) * (2 * m - row - 2) / 2 <= r) ++row;
  i = row;
  j = row + 1 + (r - row * (2 * m - row - 1) / 2);
}

// Per-row scalar some maps need: Lorentz (L3) ‖x_{0..d-2}‖, LorentzLift / LorentzRay ‖x‖; 0 otherwise.
template <MapKind K, class Acc = float, class E>
__device__ __forceinline__ Acc psi_aux(const DeviceMap& mp, const E* x) {
  if constexpr (K == MapKind::Lorentz || K == MapKind::LorentzLift || K == MapKind::LorentzRay) {
    const int n = K == MapKind::Lorentz ? mp.d - 1 : mp.d;
    Acc s = Acc(0);
    for (int i = 0; i < n; ++i) {
      const Acc v = to_acc<Acc>(x[i]);
      s += v * v;
    }
    return acc_sqrt(s);
  } else {
    return Acc(0);
  }
}

// One feature column f, precomputed once: ψ_f(x) = mult · Σ_{a in [a0,a1)} x[a m + i] x[a m + j] + add (PSD
// maps), or coordinate i of the elementwise maps. Inactive (padding, f >= n_ψ) evaluates to 0.
template <class Acc = float>
struct FeatureSlotT {
  int i = 0, j = 0, a0 = 0, a1 = 0;
  Acc mult = Acc(0), add = Acc(0);
  bool active = false;
};
using FeatureSlot = FeatureSlotT<float>;
template <MapKind K, class Acc = float>
__device__ __forceinline__ FeatureSlotT<Acc> make_slot(const DeviceMap& mp, int f) {
  FeatureSlotT<Acc> s;
  if (f >= mp.n_features) return s;
  s.active = true;
  if constexpr (K == MapKind::BlockPsd || K == MapKind::SumPsd) {
    const int np = mp.m * (mp.m + 1) / 2;
    int l = f;
    s.a0 = 0;
    s.a1 = mp.g;
    if (K == MapKind::BlockPsd) {
      s.a0 = f / np;
      s.a1 = s.a0 + 1;
      l = f - s.a0 * np;
    }
    packed_pair(mp.m, l, s.i, s.j);
    s.mult = (s.i != s.j ? sqrt2_of<Acc>() : Acc(1)) * (K == MapKind::SumPsd ? map_scale<Acc>(mp) : Acc(1));
    s.add = s.i == s.j ? map_eps<Acc>(mp) : Acc(0);
  } else {
    s.i = f;
    s.add = K == MapKind::Orthant ? map_eps<Acc>(mp) : Acc(0);
  }
  return s;
}

// ψ_f(x) from its slot; aux = psi_aux<K>(mp, x).
template <MapKind K, class Acc = float, class E>
__device__ __forceinline__ Acc eval_slot(const DeviceMap& mp, const FeatureSlotT<Acc>& s, const E* x, Acc aux) {
  if (!s.active) return Acc(0);
  if constexpr (K == MapKind::Linear) {
    return to_acc<Acc>(x[s.i]);
  } else if constexpr (K == MapKind::Orthant) {
    return acc_max(to_acc<Acc>(x[s.i]), Acc(0)) + s.add;
  } else if constexpr (K == MapKind::Lorentz) {
    if (s.i < mp.d - 1) return to_acc<Acc>(x[s.i]);
    const Acc z = to_acc<Acc>(x[mp.d - 1]);
    return aux * (Acc(1) + z * z);
  } else if constexpr (K == MapKind::LorentzLift) {
    return s.i < mp.d ? to_acc<Acc>(x[s.i]) : aux;
  } else if constexpr (K == MapKind::LorentzRay) {
    return s.i < mp.d ? to_acc<Acc>(x[s.i]) * inv_sqrt2_of<Acc>() / acc_max(aux, Acc(1e-30f)) : inv_sqrt2_of<Acc>();
  } else if constexpr (K == MapKind::BlockPsd) {
    return s.mult * (to_acc<Acc>(x[s.a0 * mp.m + s.i]) * to_acc<Acc>(x[s.a0 * mp.m + s.j])) + s.add;
  } else if constexpr (K == MapKind::SumPsd) {
    Acc acc = Acc(0);
    for (int a = 0; a < mp.g; ++a) acc += to_acc<Acc>(x[a * mp.m + s.i]) * to_acc<Acc>(x[a * mp.m + s.j]);
    return s.mult * acc + s.add;
  } else {
    return Acc(0);  // EvenDegree / Softmax: no device ψ (capacity runs deg2 as M_1; softmax has no ψ)
  }
}

// ψ_f(x) for one raw row x (width d) in Acc (fp32 by default); 0 for padding features f >= n_ψ.
template <MapKind K, class Acc = float, class E>
__device__ __forceinline__ Acc psi_value(const DeviceMap& mp, const E* x, int f, Acc aux) {
  return eval_slot<K, Acc>(mp, make_slot<K, Acc>(mp, f), x, aux);
}

// The paired order of an M_g block (BlockPsd, m even; the `scan-g4p` kernels): slots 2P and 2P + 1 are (i, j0) and
// (i, j0 + 1) with j0 even, so a query row's two features in one mma A-fragment register are q_i · (q_j0, q_j0+1),
// one bf16x2 product from an untransposed row. Rows i = 2r and 2r + 1 both take the column pairs r .. m/2 - 1
// (couple r starts at pair r (m + 1 - r)); slot (2r + 1, 2r) repeats (2r, 2r + 1) and is inactive. m (m + 2) / 2
// slots per block, m / 2 of them inactive: at d = 64 exactly n_ψ rounded up to the 64-feature block, for every g.
__host__ __device__ __forceinline__ int paired_block_slots(int m) { return m * (m + 2) / 2; }
// Slot l of a block -> (i, j); false for the inactive repeats.
__host__ __device__ __forceinline__ bool paired_pair(int m, int l, int& i, int& j) {
  const int P = l >> 1, half_m = m / 2;
  const float b = static_cast<float>(m) + 1.f;
  const float disc = b * b - 4.f * static_cast<float>(P);
  int r = static_cast<int>((b - sqrtf(disc > 0.f ? disc : 0.f)) * 0.5f);
  r = r < 0 ? 0 : (r > half_m - 1 ? half_m - 1 : r);
  while (r > 0 && r * (m + 1 - r) > P) --r;
  while (r + 1 < half_m && (r + 1) * (m - r) <= P) ++r;
  const int o = P - r * (m + 1 - r), len = half_m - r;
  i = o < len ? 2 * r : 2 * r + 1;
  j = 2 * (r + (o < len ? o : o - len)) + (l & 1);
  return !((i & 1) && j == i - 1);
}
// The slot of feature f of an M_g map in the paired order (blocks of paired_block_slots(m) slots); inactive past
// the g blocks and at the repeats, so ψ_paired(q) · ψ_paired(k) = ψ(q) · ψ(k).
template <class Acc = float>
__device__ __forceinline__ FeatureSlotT<Acc> make_paired_slot(const DeviceMap& mp, int f) {
  FeatureSlotT<Acc> s;
  const int per = paired_block_slots(mp.m), a0 = f / per;
  if (a0 >= mp.g) return s;
  s.a0 = a0;
  s.a1 = a0 + 1;
  s.active = paired_pair(mp.m, f - a0 * per, s.i, s.j);
  if (!s.active) return s;
  s.mult = s.i != s.j ? sqrt2_of<Acc>() : Acc(1);
  s.add = s.i == s.j ? map_eps<Acc>(mp) : Acc(0);
  return s;
}

// Packed feature index of the pair (i, j) of an m x m factor (the inverse of packed_pair).
__host__ __device__ __forceinline__ int packed_index(int m, int i, int j) {
  if (i > j) {
    const int t = i;
    i = j;
    j = t;
  }
  return i == j ? i : m + i * (2 * m - i - 1) / 2 + (j - i - 1);
}

// One coordinate c of the VJP of the PSD maps (M_g, Σ_g): (J_ψ(x)ᵀ gpsi)_c alone, summed in a fixed order (j
// ascending), so that a warp can compute a row's coordinates in parallel without atomics; psi_vjp_row calls it
// for every coordinate.
template <MapKind K, class Acc = float, class E, class G>
__device__ __forceinline__ Acc psi_vjp_coord_psd(const DeviceMap& mp, const E* x, const G* gpsi, int c) {
  static_assert(K == MapKind::BlockPsd || K == MapKind::SumPsd, "psi_vjp_coord_psd: PSD maps only");
  const int m = mp.m, a = c / m, i = c - a * m;
  const int base = K == MapKind::BlockPsd ? a * (m * (m + 1) / 2) : 0;
  const Acc sc = K == MapKind::SumPsd ? map_scale<Acc>(mp) : Acc(1);
  const G* g = gpsi + base;
  const E* xa = x + a * m;
  // packed_index(m, i, j) walked incrementally (it cost more than the product it fed: the chunked backward's VJP was
  // bound by instructions): (j, i) for j < i starts at m + i - 1 and steps by m - j - 2; (i, j) for j > i starts at
  // off(i) = m + i (2m - i - 1) / 2 and steps by 1; (i, i) is i. One loop with selects, so a warp's lanes (different
  // i) do not diverge.
  int lo = m + i - 1, hi = m + i * (2 * m - i - 1) / 2;
  Acc acc = Acc(0);
  for (int j = 0; j < m; ++j) {
    const Acc gf = to_acc<Acc>(g[j < i ? lo : (j == i ? i : hi)]);
    const Acc w = j == i ? Acc(2) * gf : sqrt2_of<Acc>() * gf;  // ∂(x_i x_i) = 2 x_i; ∂(√2 x_i x_j) = √2 x_j
    acc += w * to_acc<Acc>(xa[j]);
    lo += m - j - 2;
    hi += j > i ? 1 : 0;
  }
  return sc * acc;
}

// VJP of ψ for one row: gx[0..d) = J_ψ(x)ᵀ gpsi (gpsi has n_ψ entries), in Acc (fp32 by default). One-sided choices where ψ is not
// differentiable, as on the CPU: ReLU'(0) = 0, ∂‖y‖ = 0 at y = 0.
template <MapKind K, class Acc = float, class E>
__device__ void psi_vjp_row(const DeviceMap& mp, const E* x, const Acc* gpsi, Acc* gx) {
  const int d = mp.d;
  if constexpr (K == MapKind::Linear) {
    for (int i = 0; i < d; ++i) gx[i] = gpsi[i];
  } else if constexpr (K == MapKind::Orthant) {
    for (int i = 0; i < d; ++i) gx[i] = to_acc<Acc>(x[i]) > Acc(0) ? gpsi[i] : Acc(0);
  } else if constexpr (K == MapKind::Lorentz) {
    const Acc ny = psi_aux<K, Acc>(mp, x), s = to_acc<Acc>(x[d - 1]), gl = gpsi[d - 1];
    for (int i = 0; i + 1 < d; ++i) gx[i] = gpsi[i] + (ny > Acc(0) ? gl * (Acc(1) + s * s) * to_acc<Acc>(x[i]) / ny : Acc(0));
    gx[d - 1] = gl * ny * Acc(2) * s;
  } else if constexpr (K == MapKind::LorentzLift) {
    const Acc n = psi_aux<K, Acc>(mp, x);
    for (int i = 0; i < d; ++i) gx[i] = gpsi[i] + (n > Acc(0) ? gpsi[d] * to_acc<Acc>(x[i]) / n : Acc(0));
  } else if constexpr (K == MapKind::LorentzRay) {
    const Acc n = psi_aux<K, Acc>(mp, x);
    Acc dot = Acc(0);
    for (int i = 0; i < d; ++i) dot += to_acc<Acc>(x[i]) * gpsi[i];
    for (int i = 0; i < d; ++i) gx[i] = n > Acc(0) ? inv_sqrt2_of<Acc>() * (gpsi[i] - dot * to_acc<Acc>(x[i]) / (n * n)) / n : Acc(0);
  } else if constexpr (K == MapKind::BlockPsd || K == MapKind::SumPsd) {
    for (int c = 0; c < d; ++c) gx[c] = psi_vjp_coord_psd<K, Acc>(mp, x, gpsi, c);
  } else {
    for (int i = 0; i < d; ++i) gx[i] = Acc(0);
  }
}

// Run-time kind -> compile-time kind for the maps with a device ψ: f(std::integral_constant<MapKind, K>{}).
template <class F>
__host__ __device__ decltype(auto) with_map_kind(MapKind k, F&& f) {
  switch (k) {
    case MapKind::Orthant: return f(std::integral_constant<MapKind, MapKind::Orthant>{});
    case MapKind::Lorentz: return f(std::integral_constant<MapKind, MapKind::Lorentz>{});
    case MapKind::LorentzLift: return f(std::integral_constant<MapKind, MapKind::LorentzLift>{});
    case MapKind::LorentzRay: return f(std::integral_constant<MapKind, MapKind::LorentzRay>{});
    case MapKind::BlockPsd: return f(std::integral_constant<MapKind, MapKind::BlockPsd>{});
    case MapKind::SumPsd: return f(std::integral_constant<MapKind, MapKind::SumPsd>{});
    default: return f(std::integral_constant<MapKind, MapKind::Linear>{});
  }
}

// Host launchers (kata_feature_map.cu), fp32 row-major, on `stream`:
//   ψ rows:  out[r][f] = ψ_f(X[r]) for f < n_ψ (ld_out >= n_ψ); aux: `rows` floats of scratch.
//   VJP:     dX[r][i] = (J_ψ(X[r])ᵀ G[r])_i, G [rows][n_ψ].
// The map must have a device ψ (not EvenDegree / Softmax): DeviceError otherwise (an internal misuse).
void launch_psi_rows(const DeviceMap& mp, const float* X, std::int64_t rows, float* out, std::int64_t ld_out,
                     float* aux, cudaStream_t stream);
void launch_psi_vjp_rows(const DeviceMap& mp, const float* X, const float* G, std::int64_t rows, float* dX,
                         cudaStream_t stream);

}  // namespace memcap::kata::cuda

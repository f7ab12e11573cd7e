// Modified Bessel functions for the RAM-Net theory (spec ramnet.md §2.3–2.5, §5.1–5.2), header-only and
// callable from host and CUDA device code: i0e(x) = e^{-|x|} I_0(x), log I_0, η(ρ) = ρ²/4 − log I_0(ρ)
// (small-ρ series against cancellation) and log I_n for the Fourier–Bessel form of Z_dp.
//
// Our own implementation (no tables copied from elsewhere): the power series I_0 = Σ t^m/(m!)², t = x²/4,
// for |x| <= 20 (all terms positive, relative error a few ulp), and the asymptotic expansion
// i0e(x) ~ (2πx)^{-1/2} Σ_k ((2k−1)!!)² / (k! (8x)^k) above 20, truncated at its smallest term (< 1e-17
// relative from x = 20 on). The η series coefficients are the exact rationals of log Σ t^m/(m!)²
// (recurrence n c_n = n g_n − Σ_k k c_k g_{n−k}), printed to 17 digits. Validated against Boost.Math and
// the spec's mpmath values in tests/test_ramnet_theory.cpp.
#pragma once
#include <cmath>

#ifndef MEMCAP_HD
#if defined(__CUDACC__)
#define MEMCAP_HD __host__ __device__
#else
#define MEMCAP_HD
#endif
#endif

namespace memcap::ramnet::bessel {

// |x| at or below this uses the power series, above it the asymptotic expansion.
inline constexpr double kSeriesMax = 20.0;

// I_0(x) − 1 = Σ_{m≥1} t^m/(m!)², t = x²/4 (full relative accuracy for small x). For |x| <= kSeriesMax.
MEMCAP_HD inline double i0_minus_1_series(double x) {
  const double t = 0.25 * x * x;
  double term = 1.0, sum = 0.0;
  for (int m = 1; m < 400; ++m) {
    term *= t / (static_cast<double>(m) * m);
    sum += term;
    if (term <= 1e-17 * sum) break;
  }
  return sum;
}

// Σ_k ((2k−1)!!)²/(k! (8x)^k), stopped at its smallest term; i0e(x) = this / sqrt(2πx). For x > kSeriesMax.
MEMCAP_HD inline double i0e_asymptotic_sum(double x) {
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 200; ++k) {
    const double next = term * (2.0 * k - 1.0) * (2.0 * k - 1.0) / (8.0 * k * x);
    if (next >= term) break;
    term = next;
    sum += term;
    if (term <= 1e-17 * sum) break;
  }
  return sum;
}

// Exponentially scaled I_0: e^{-|x|} I_0(x) (never overflows; i0e(1000) = 0.0126172404558913).
MEMCAP_HD inline double i0e(double x) {
  x = fabs(x);
  if (x <= kSeriesMax) return exp(-x) * (1.0 + i0_minus_1_series(x));
  return i0e_asymptotic_sum(x) / sqrt(2.0 * 3.14159265358979323846 * x);
}

// log I_0(x) without overflow (I_0 itself overflows double at x ≈ 714).
MEMCAP_HD inline double log_i0(double x) {
  x = fabs(x);
  if (x <= kSeriesMax) return log1p(i0_minus_1_series(x));
  return x + log(i0e_asymptotic_sum(x)) - 0.5 * log(2.0 * 3.14159265358979323846 * x);
}

// log i0e(x) = log I_0(x) − |x| (the Bessel part of the stable log κ_∞ form, §5.1).
MEMCAP_HD inline double log_i0e(double x) {
  x = fabs(x);
  if (x <= kSeriesMax) return log1p(i0_minus_1_series(x)) - x;
  return log(i0e_asymptotic_sum(x)) - 0.5 * log(2.0 * 3.14159265358979323846 * x);
}

// Below this ρ, η uses its series (the direct ρ²/4 − log I_0 loses ~t/η ≈ 46x at the switch, 1e-14).
inline constexpr double kEtaSeriesMax = 0.6;

// η(ρ) = ρ²/4 − log I_0(ρ), 0 <= η <= ρ⁴/64 (eq. 15). Series η = −Σ_{n≥2} c_n t^n (t = ρ²/4) for
// ρ < 0.6, truncated after t^18 (remainder < 1e-20 relative); the direct difference above.
MEMCAP_HD inline double eta(double rho) {
  rho = fabs(rho);
  const double t = 0.25 * rho * rho;
  if (rho < kEtaSeriesMax) {
    // −c_n for n = 2..18: 1/4, −1/9, 11/192, −19/600, 473/25920, −229/21168, 101369/15482880, ...
    double p = 7.29119144673512424e-05;
    p = p * t - 1.11616718897473950e-04;
    p = p * t + 1.71461001770500335e-04;
    p = p * t - 2.64424228971719597e-04;
    p = p * t + 4.09611023932971699e-04;
    p = p * t - 6.37769118181218879e-04;
    p = p * t + 9.98924717481774289e-04;
    p = p * t - 1.57553657946913413e-03;
    p = p * t + 2.50569590651332540e-03;
    p = p * t - 4.02525254071678992e-03;
    p = p * t + 6.54716693535052890e-03;
    p = p * t - 1.08182161753590331e-02;
    p = p * t + 1.82484567901234560e-02;
    p = p * t - 3.16666666666666693e-02;
    p = p * t + 5.72916666666666644e-02;
    p = p * t - 1.11111111111111105e-01;
    p = p * t + 0.25;
    return p * t * t;
  }
  return t - log_i0(rho);
}

// log I_n(x) for n >= 1 and 0 < x <= 30 by the power series of I_n, in the log domain:
// log I_n = n log(x/2) − log n! + log Σ_m t^m n!/(m!(m+n)!), t = x²/4. Subtract log_i0(x) for log(I_n/I_0).
// log_n_factorial: log n! when the caller has it (a table); negative = compute it with lgamma.
MEMCAP_HD inline double log_in(int n, double x, double log_n_factorial = -1.0) {
  x = fabs(x);
  const double t = 0.25 * x * x;
  double term = 1.0, sum = 1.0;
  for (int m = 1; m < 600; ++m) {
    term *= t / (static_cast<double>(m) * (m + n));
    sum += term;
    if (term <= 1e-17 * sum) break;
  }
  return n * log(0.5 * x) - (log_n_factorial < 0 ? lgamma(n + 1.0) : log_n_factorial) + log(sum);
}

}  // namespace memcap::ramnet::bessel

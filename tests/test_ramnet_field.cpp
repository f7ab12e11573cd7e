// Value fields (spec ramnet.md §3 E4) and slot utilisation (E6): mass-aware + full + cumulative reproduces
// the κ-attention field exactly, the orientation statistics on known fields, Gini values, column parsing,
// and slot statistics on cases with known answers.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "ramnet/field.hpp"
#include "ramnet/slots.hpp"

using namespace memcap;
using namespace memcap::ramnet;

TEST_CASE("field columns parse and reject") {
  const FieldColumn a = parse_field_column("dp4-top4");
  CHECK(a.dp == 4);
  CHECK(a.topk == 4);
  CHECK(a.readout == Readout::standard);
  const FieldColumn b = parse_field_column("dp8-mass");
  CHECK(b.dp == 8);
  CHECK(b.topk == 0);
  CHECK(b.readout == Readout::mass);
  CHECK(parse_field_column("dp4-top2-mass").readout == Readout::mass);
  for (const char* bad : {"dp4", "dp1-full", "dq4-full", "dp4-top0", "dp4-topx", "dp4-half"})
    CHECK_THROWS_AS(parse_field_column(bad), UserError);
  // Right syntax, dp out of range: the message says so (not "must be dp<d>-full ...").
  for (const char* far : {"dp1-full", "dp65-full", "dp100000-full", "dp99999999999999999999-top4"}) {
    CAPTURE(far);
    try {
      parse_field_column(far);
      FAIL("accepted");
    } catch (const UserError& e) {
      CHECK(std::string(e.what()).find("out of range; dp must be in [2, 64]") != std::string::npos);
    }
  }
  CHECK_THROWS_AS(parse_field_column("dp+4-full"), UserError);
}

TEST_CASE("orientation statistics of axis-aligned and diagonal fields") {
  const int G = 32;
  std::vector<double> f0(G * G), fd(G * G), fc(G * G, 1.0);
  for (int i = 0; i < G; ++i)
    for (int j = 0; j < G; ++j) {
      f0[i * G + j] = std::sin(2 * std::numbers::pi * i / G);            // varies along θ0 only
      fd[i * G + j] = std::sin(2 * std::numbers::pi * (i + j) / G);      // along the diagonal
    }
  std::vector<double> h;
  double obl = -1;
  orientation_stats(f0, G, 18, h, obl);
  CHECK(obl == 0.0);
  CHECK(h[0] == doctest::Approx(1.0));  // orientation 0 (gradient along θ0)
  orientation_stats(fd, G, 4, h, obl);
  CHECK(obl == doctest::Approx(1.0));  // every gradient at π/4 (or 3π/4)
  orientation_stats(fc, G, 4, h, obl);
  CHECK(obl == 0.0);
  for (double x : h) CHECK(x == 0.0);
}

TEST_CASE("E4: mass-aware + full + cumulative = kappa-attention field; Top-K artifacts; dp and beta effects") {
  FieldConfig c;
  c.grid = 48;
  c.beta_factors = {0.5, 1.0};
  for (const char* col : {"dp4-full", "dp4-top4", "dp8-full", "dp4-mass"}) c.columns.push_back(parse_field_column(col));
  c.seed = 0;
  const FieldResult r = run_field(c);
  REQUIRE(r.panels.size() == 8);
  REQUIRE(r.reference.size() == 48u * 48u);
  for (const auto& P : r.panels) {
    CAPTURE(P.column.name);
    CAPTURE(P.beta_factor);
    if (P.column.readout == Readout::mass && P.column.topk == 0) CHECK(P.kappa_max_diff < 1e-13);
    else CHECK(P.kappa_max_diff > 1e-6);  // the standard readout / Top-K are not κ-attention
    CHECK(P.mse >= 0);
    CHECK(P.region_diff >= 0);
    CHECK(P.region_diff <= 1);
  }
  // Top-K artifacts: at β = 0.5β* the K = 4 field is much farther from the reference than the full one.
  const FieldPanel &full05 = r.panels[0], &top05 = r.panels[1];
  CHECK(top05.mse > 2 * full05.mse);
  CHECK(top05.region_diff > full05.region_diff);
  // Stored values in [-1, 1]; reference field inside their range.
  for (double v : r.values) CHECK(std::abs(v) <= 1.0);
  for (double f : r.reference) CHECK(std::abs(f) <= 1.0);
}

TEST_CASE("Gini coefficient and slot statistics") {
  CHECK(gini({1, 1, 1, 1}, 0) == doctest::Approx(0.0));
  CHECK(gini({1}, 3) == doctest::Approx(0.75));        // one of four holds everything: (n−1)/n
  CHECK(gini({1, 3}, 0) == doctest::Approx(0.25));     // Σ|xi−xj| = 4, 2 n Σx = 16
  CHECK(gini({}, 5) == 0.0);
  // Full writes, γ = −inf: every slot occupied, total mass = T (each write has mass 1), hit mass 1,
  // pair overlap = mean κ_A/|A|.
  SlotConfig s;
  s.params = {4, 2, 1.0, 1.0};
  s.topk = 0;
  s.gen = Generator::parse("torus:rho=1");
  s.T = 40;
  s.n = 10;
  s.trials = 2;
  const SlotStats st = slot_utilisation(s);
  CHECK(st.occupied_fraction == 1.0);
  CHECK(st.total_mass == doctest::Approx(40.0).epsilon(1e-12));
  CHECK(st.read_hit_mass == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(st.effective_slots <= 16.0 + 1e-9);
  CHECK(st.effective_ratio > 0.9);
  // Top-K writes into a larger space: fewer slots used, lower overlap.
  s.params.U = 5;
  s.topk = 8;
  const SlotStats sk = slot_utilisation(s);
  CHECK(sk.stored_slots <= 40.0 * 8);
  CHECK(sk.occupied_fraction < 0.35);
  CHECK(sk.pair_overlap < st.pair_overlap);
}

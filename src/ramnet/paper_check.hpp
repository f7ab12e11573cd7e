// E11: the arithmetic-consistency checks of the RAM-Net paper's tables (spec ramnet.md §4, the "A" rows).
// The reported numbers of Tables 1–12 are transcribed in paper_check.cpp (with their table and row); each
// check recomputes a stated quantity (a mean, a difference, a ratio, a token count, an ordering or a count)
// from them and compares it with the paper's value at a tolerance that covers the paper's rounding.
#pragma once
#include <array>
#include <string>
#include <vector>

namespace memcap::ramnet {

struct PaperCheck {
  int spec_row = 0;           // row of the spec §4 checklist
  std::string table;          // where the numbers come from ("Table 1", "Tables 4, 12", ...)
  std::string what;           // one line
  double claimed = 0;         // the paper's value (1/0 for a stated ordering or equality)
  double recomputed = 0;      // ours, from the transcribed numbers
  double tolerance = 0;       // |claimed − recomputed| <= tolerance passes
  bool pass = false;
  bool known = false;         // a disagreement the spec already lists (§4 rows 18, 22, 23)
  std::string note;
};

// Every check, in spec-row order.
std::vector<PaperCheck> paper_checks();

// The relative score of Table 1: mean over the six tasks (ARC-E, ARC-C, PIQA, SciQ, COPA, HellaSwag) of
// (s − r)/(t − r), in percent, over the tasks where the teacher beats chance r (25, 25, 50, 25, 50, 25 %)
// with 95% one-sided confidence (z = (t − r)/sqrt(r(1−r)/n) > 1.645, assumed split sizes n =
// 2376/1172/1838/1000/100/10042). Accuracies in percent.
double relative_score(const std::array<double, 6>& teacher, const std::array<double, 6>& student);

}  // namespace memcap::ramnet

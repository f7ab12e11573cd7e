#!/usr/bin/env bash
# End-to-end `hebb edit` on the CPU, the issue's acceptance item 4: a miniature of the whole pipeline
# (256 facts, 4 templates, d = 48, a 32-wide expert) trains the base model, swaps the fact MLP at a 10%
# edit and must score 1.0 with r_NF printed (measured 1.046); the result files have their /summary columns; a base file from another
# vocabulary or d, and the wrong expert kind for swap-constructed, are refused (exit 2, no output); swap-constructed
# rebuilds with the base's own random factors unless --expert-seed says otherwise.
set -u
: "${HEBB:?set HEBB to the hebb executable}"
SRC=${MEMCAP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$SRC/tests/cli/lib.sh"
DATA="$SRC/data/edit"

# --threads 1: the layers are tiny (d = 48), so two threads only add synchronisation (10x slower measured).
# --expert-hidden 32: an expert that cannot interpolate its 256 x 48 targets (as the paper's h = 512 cannot
# its 16,384 x 256) keeps its off-key behaviour smooth, so a swapped expert leaves the rest of the model
# intact; a 128-wide interpolating expert gave score 0.9985 and r_NF 1.8-2.3 here (docs/hebb-edit.md).
MINI=(--device cpu --threads 1 --data "$DATA" --facts 256 --templates 4 --dim 48 --expert-hidden 32
      --expert-epochs 3000 --epochs 120 --lr 4e-3 --target-accuracy 1 --progress none)
start=$(date +%s)
"$HEBB" edit base "${MINI[@]}" --out "$T/base.h5" >"$T/base.txt" 2>"$T/base.err"
rc=$?  # before check: the message's $(...) would reset $?
check '[ $rc -eq 0 ] && [ -s "$T/base.h5" ]' "hebb edit base failed: $(cat "$T/base.err")"
cat "$T/base.txt"
check '[ "$(field mlp_accuracy "$T/base.txt")" = "1.000000" ]' "expert does not store all 256 facts: $(cat "$T/base.txt")"
check '[ "$(field value_accuracy "$T/base.txt")" = "1.000000" ]' "base value accuracy != 1: $(cat "$T/base.txt")"

"$HEBB" edit run --device cpu --threads 1 --data "$DATA" --method swap --fraction 0.1 --base "$T/base.h5" --progress none \
  --out "$T/e.h5" >"$T/run.txt" 2>"$T/run.err"
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/e.h5" ]' "hebb edit run failed: $(cat "$T/run.err")"
cat "$T/run.txt"
end=$(date +%s)
# The time is printed, not asserted (speed targets live in benchmarks): experiments/bench/edit_miniature.sh runs
# this test and checks this line against the < 2 minutes of acceptance item 4.
echo "miniature base + swap: $((end - start)) s"
check 'grep -q "altered 26 " "$T/run.txt"' "round(256 x 0.1) != 26 altered facts"
check '[ "$(field score "$T/run.txt")" = "1.000000" ]' "swap score != 1.0: $(cat "$T/run.txt")"
check '[ -n "$(field r_NF "$T/run.txt")" ]' "r_NF not printed"
check 'ge "$(field r_NF "$T/run.txt")" 0.9 && ge 1.1 "$(field r_NF "$T/run.txt")"' "swap r_NF outside [0.9, 1.1]"
check 'grep -q "^non-fact CE by position:  prefix .* book .* tail " "$T/run.txt"' "no non-fact CE split printed"

# a local editor runs end to end on the same base (its score is not asserted: it is the baseline)
"$HEBB" edit run --device cpu --threads 1 --data "$DATA" --method memit --steps 10 --fraction 0.1 --base "$T/base.h5" \
  --progress none --out "$T/m.h5" >"$T/memit.txt" 2>"$T/memit.err"
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/m.h5" ]' "hebb edit run --method memit failed: $(cat "$T/memit.err")"
cat "$T/memit.txt"

# --expert-seed: the same edit set (--seed 42, the default) with another swapped expert
"$HEBB" edit run --device cpu --threads 1 --data "$DATA" --method swap --fraction 0.1 --base "$T/base.h5" --progress none \
  --expert-seed 7 --out "$T/e7.h5" >"$T/run7.txt" 2>"$T/run7.err"
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/e7.h5" ]' "hebb edit run --expert-seed 7 failed: $(cat "$T/run7.err")"
cat "$T/run7.txt"

cat >"$T/check.py" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s = f["summary"]
    for c in ["mlp_accuracy", "value_accuracy", "epochs", "params", "nonfact_ce", "expert"]:
        assert c in s and s[c].shape == (1,), f"base /summary/{c}"
    m = f["model"]
    assert m.attrs["d"] == 48 and m.attrs["facts"] == 256 and len(m.attrs["vocab_fingerprint"]) == 16
    assert m["frozen/embed.E"].shape == (m.attrs["vocab"], 48)
    assert f["expert/A"].shape == (32, 48)
    assert f["runs/base/value_accuracy"].shape == (s["epochs"][0],)
with h5py.File(sys.argv[2], "r") as f:
    s = f["summary"]
    for c in ["efficacy", "paraphrase", "specificity", "score", "r_nf", "nf_ce_before", "nf_ce_after"]:
        assert c in s and s[c].shape == (1,), f"run /summary/{c}"
    assert s["score"][0] == 1.0
    e = f["edit"]
    assert e["target_fact"].shape == (256,) and e["prompt_order"].shape == (1024,)
    assert e["predicted_post"].shape == (1024,)
    assert s["seed"][0] == 42 and s["expert_seed"][0] == 42, "default expert seed = --seed"
    target = e["target_fact"][...]
    # the non-fact CE split by position relative to the book token recombines to the total, before and after;
    # 4 templates x 256 facts: the rows counted once each
    n = {c: int(s[f"nf_tokens_{c}"][0]) for c in ("prefix", "book", "tail")}
    assert sum(n.values()) == s["nonfact_tokens"][0] and n["book"] == 1024, f"nf_tokens {n}"
    for when in ("before", "after"):
        tot = sum(n[c] * s[f"nf_ce_{c}_{when}"][0] for c in n) / s["nonfact_tokens"][0]
        assert abs(tot - s[f"nf_ce_{when}"][0]) <= 1e-9 * abs(tot), f"split of nf_ce_{when}: {tot}"
with h5py.File(sys.argv[3], "r") as f:
    s = f["summary"]
    assert s["seed"][0] == 42 and s["expert_seed"][0] == 7, "--expert-seed recorded"
    assert (f["edit/target_fact"][...] == target).all(), "--expert-seed changed the edit set"
PYEOF
bash "$SRC/experiments/plots/with_python.sh" "$T/check.py" "$T/base.h5" "$T/e.h5" "$T/e7.h5" >"$T/py.txt" 2>&1
rc=$?
if [ $rc -eq 77 ]; then echo "note: no h5py, HDF5 layout checks skipped"; else check '[ $rc -eq 0 ]' "layout: $(cat "$T/py.txt")"; fi

# swap-constructed on a data-dependent miniature base: by default it rebuilds the expert with the base's own random
# factors, so a one-fact edit that leaves the map unchanged (F = 0.004) is the identity (r_NF 1.000000, the base's
# expert bit for bit; twenty-second session); new factors (--expert-seed 42) alone move r_NF (1.146 measured).
"$HEBB" edit base --device cpu --threads 1 --data "$DATA" --facts 256 --templates 4 --dim 48 --expert data-dependent \
  --expert-hidden 128 --epochs 120 --lr 4e-3 --target-accuracy 1 --progress none --out "$T/dd.h5" >"$T/dd.txt" 2>"$T/dd.err"
rc=$?
check '[ $rc -eq 0 ] && [ -s "$T/dd.h5" ]' "hebb edit base --expert data-dependent failed: $(cat "$T/dd.err")"
for s in base 42; do
  extra=()
  [ "$s" = base ] || extra=(--expert-seed "$s")
  "$HEBB" edit run --device cpu --threads 1 --data "$DATA" --method swap-constructed --fraction 0.004 --base "$T/dd.h5" \
    --progress none "${extra[@]}" --out "$T/c$s.h5" >"$T/c$s.txt" 2>"$T/c$s.err"
  rc=$?
  check '[ $rc -eq 0 ] && [ -s "$T/c$s.h5" ]' "swap-constructed ($s) failed: $(cat "$T/c$s.err")"
done
cat "$T/cbase.txt" "$T/c42.txt"
check '[ "$(field r_NF "$T/cbase.txt")" = "1.000000" ]' "default swap-constructed is not the identity: $(cat "$T/cbase.txt")"
check '[ "$(field r_NF "$T/c42.txt")" != "1.000000" ]' "--expert-seed 42 did not draw new factors: $(cat "$T/c42.txt")"
cat >"$T/seeds.py" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as b, h5py.File(sys.argv[2], "r") as f, h5py.File(sys.argv[3], "r") as g:
    base_seed = int(b["model"].attrs["expert_seed"])
    s, t = f["summary"], g["summary"]
    assert s["seed"][0] == 42 and t["seed"][0] == 42, "edit set seed"
    assert t["expert_seed"][0] == 42, "--expert-seed recorded"
    assert s["expert_seed"][0] != 42, "default swap-constructed seed is the base's, not --seed"
    assert s["expert_seed"][0] == base_seed, (s["expert_seed"][0], base_seed)
PYEOF
bash "$SRC/experiments/plots/with_python.sh" "$T/seeds.py" "$T/dd.h5" "$T/cbase.h5" "$T/c42.h5" >"$T/py2.txt" 2>&1
rc=$?
if [ $rc -eq 77 ]; then echo "note: no h5py, seed checks skipped"; else check '[ $rc -eq 0 ]' "seeds: $(cat "$T/py2.txt")"; fi

# ---- bad input: exit 2, one message, no output file ----
refused() {  # refused FRAGMENT ARGS...: exit 2, the fragment in stderr, no o.h5
  local frag=$1
  shift
  "$HEBB" edit run --device cpu --threads 1 --progress none "$@" --out "$T/o.h5" >"$T/bad.txt" 2>"$T/bad.err"
  local rc=$?
  check '[ $rc -eq 2 ] && grep -qF -- "$frag" "$T/bad.err" && [ ! -e "$T/o.h5" ]' \
    "expected exit 2 with '$frag' (got $rc: $(cat "$T/bad.err"))"
  check '[ -z "$(ls "$T" | grep -F o.h5.tmp)" ]' "a temporary output was left behind"
}
# another vocabulary: the same facts with one template word changed
mkdir -p "$T/data2"
cp "$DATA/book_authors.csv" "$T/data2/"
sed '1s/author/writer/' "$DATA/author_templates.txt" >"$T/data2/author_templates.txt"
refused "trained on another vocabulary" --data "$T/data2" --base "$T/base.h5"
# the same vocabulary, other facts: the authors of the first two rows swapped (the row order alone would not count)
mkdir -p "$T/data3"
cp "$DATA/author_templates.txt" "$T/data3/"
awk -F, -v OFS=, 'NR == FNR { if (FNR == 2) a = $2; if (FNR == 3) b = $2; next }
  FNR == 2 { $2 = b } FNR == 3 { $2 = a } { print }' "$DATA/book_authors.csv" "$DATA/book_authors.csv" \
  >"$T/data3/book_authors.csv"
refused "was trained on other facts" --data "$T/data3" --base "$T/base.h5"
refused "has d = 48, not the --dim 64" --data "$DATA" --base "$T/base.h5" --dim 64
refused "holds a gd-mse expert" --data "$DATA" --base "$T/base.h5" --method swap-constructed
refused "must be in (0, 1]" --data "$DATA" --base "$T/base.h5" --fraction 1.01
refused "= 0 facts" --data "$DATA" --base "$T/base.h5" --fraction 0.001
# a residual optimization that overflows: exit 4 naming the fact, no output (it used to give a silent no-edit)
"$HEBB" edit run --device cpu --threads 1 --progress none --data "$DATA" --base "$T/base.h5" --method memit --steps 3 \
  --edit-lr 1e200 --clip 0 --fraction 0.01 --out "$T/o.h5" >"$T/bad.txt" 2>"$T/bad.err"
rc=$?
check '[ $rc -eq 4 ] && grep -qF "grew past float64" "$T/bad.err" && [ ! -e "$T/o.h5" ]' \
  "overflowing residual: expected exit 4 (got $rc: $(cat "$T/bad.err"))"

exit $fail

#!/usr/bin/env bash
# End-to-end: `kata bench` on the CPU (validates the float64 forms against the recurrent reference,
# writes /summary), and its error paths: --device cuda without a usable GPU is a clear one-line
# DeviceError (exit 5) that leaves no output file; bad flags exit 2.
set -u
: "${KATA:?set KATA to the kata executable}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }

"$KATA" bench --device cpu --shapes custom --B 1 --H 2 --T 40 --d-head 8 --chunk 8 --forms quadratic,chunked,tree \
  --maps m2,orthant --repeats 1 --warmup 0 --out "$T/b.h5" >"$T/b.txt" 2>"$T/b.err"
rc=$?; check '[ $rc -eq 0 ] && [ -s "$T/b.h5" ]' "cpu bench failed: $(cat "$T/b.err")"
check '[ "$(grep -c "^custom" "$T/b.txt")" = 6 ]' "expected 6 result rows (3 forms x 2 maps)"
# rel_err column (11th field) is the float64 agreement with the recurrent form: tiny
check 'awk "/^custom/ {if (\$11 > 1e-12 || \$11 !~ /e/) bad=1} END {exit bad}" "$T/b.txt"' "CPU forms disagree beyond 1e-12"
# d_v != d on the CPU reference
"$KATA" bench --device cpu --shapes custom --B 1 --H 1 --T 30 --d-head 8 --d-v 3 --chunk 8 --forms quadratic,tree \
  --maps orthant --repeats 1 --warmup 0 >"$T/dv.txt" 2>"$T/dv.err"
rc=$?; check '[ $rc -eq 0 ] && [ "$(grep -c "^custom" "$T/dv.txt")" = 2 ]' "d_v != d CPU bench failed: $(cat "$T/dv.err")"

# --device cuda: on a machine (or build) without a GPU this must fail cleanly with exit 5.
if ! nvidia-smi >/dev/null 2>&1; then
  "$KATA" bench --device cuda --shapes accept --out "$T/gpu.h5" >"$T/g.txt" 2>"$T/g.err"
  rc=$?
  check '[ $rc -eq 5 ]' "--device cuda without GPU: exit $rc, expected 5"
  check '[ "$(wc -l <"$T/g.err")" -eq 1 ] && grep -q "cuda" "$T/g.err"' "expected one clear line, got: $(cat "$T/g.err")"
  check '[ ! -e "$T/gpu.h5" ]' "an output file was left behind"
fi

"$KATA" bench --device cpu --shapes table99 >"$T/x.txt" 2>"$T/x.err"
check '[ $? -eq 2 ]' "unknown --shapes must exit 2"
"$KATA" bench --device cpu --shapes custom --maps m3 --d-head 8 --B 1 --H 1 --T 16 >"$T/y.txt" 2>"$T/y.err"
check '[ $? -eq 2 ] && grep -q "not divisible" "$T/y.err"' "m3 with d=8 must be a usage error"
"$KATA" bench --device cpu --shapes accept >"$T/z.txt" 2>"$T/z.err"
check '[ $? -eq 2 ]' "--device cpu with the GPU preset must exit 2"
"$KATA" bench --device cpu --shapes custom --T 16 --d-head 8 --variant ws3 >"$T/v.txt" 2>"$T/v.err"
check '[ $? -eq 2 ] && grep -q "variant" "$T/v.err"' "--variant with --device cpu must be a usage error"
"$KATA" bench --device cpu --shapes custom --T 16 --d-head 0 >"$T/w.txt" 2>"$T/w.err"
check '[ $? -eq 2 ]' "--d-head 0 must exit 2"
exit $fail

#!/usr/bin/env bash
# End-to-end: bad input to `hebb build` / `hebb margin` gives a non-zero exit (2 usage, 3 file),
# a one-line message naming the problem, and no output file. Inputs with NaN / zero rows are the
# tiny committed tables data/test/hebb_*.h5 (made by data/test/make_hebb_tables.cpp).
set -u
: "${HEBB:?set HEBB to the hebb executable}"
SRC=${MEMCAP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
DATA="$SRC/data/test"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0

# expect_error NAME EXIT_CODE MESSAGE_FRAGMENT ARGS... (the output goes to $T/out/NAME.h5)
expect_error() {
  local name=$1 code=$2 frag=$3
  shift 3
  mkdir -p "$T/out"
  "$HEBB" "$@" --out "$T/out/$name.h5" >"$T/$name.stdout" 2>"$T/$name.stderr"
  local rc=$?
  if [ "$rc" -ne "$code" ]; then
    echo "FAIL $name: exit $rc, expected $code"; cat "$T/$name.stderr"; fail=1
  fi
  if ! grep -q -- "$frag" "$T/$name.stderr"; then
    echo "FAIL $name: stderr lacks '$frag':"; cat "$T/$name.stderr"; fail=1
  fi
  if [ "$(grep -c . "$T/$name.stderr")" -gt 2 ]; then
    echo "FAIL $name: more than a short message on stderr:"; cat "$T/$name.stderr"; fail=1
  fi
  if [ -n "$(ls -A "$T/out")" ]; then
    echo "FAIL $name: output left behind: $(ls -A "$T/out")"; fail=1
    rm -rf "$T/out"
  fi
}

B=(build --device cpu --dim 8 --facts 16)
expect_error unknown_method 2 "unknown method 'hebbian:magic'" "${B[@]}" --method hebbian:magic
expect_error unknown_option 2 "unknown or malformed option 'rige=1'" "${B[@]}" --method hebbian:whitened,rige=1
expect_error dim_zero 2 "--dim must be >= 1" build --device cpu --dim 0 --facts 16
expect_error facts_negative 2 "--facts must be >= 1" build --device cpu --dim 8 --facts -4
expect_error values_negative 2 "--values must be >= 0" "${B[@]}" --values -1
expect_error width_zero 2 "--width must be >= 1" "${B[@]}" --width 0
expect_error width_negative 2 "--width must be >= 1" "${B[@]}" --width -3
expect_error facts_gt_values 2 "larger than the value table" build --device cpu --dim 8 --facts 32 --values 16
expect_error facts_gt_file 2 "larger than the value table" build --device cpu --facts 9 \
  --keys "$DATA/hebb_tables_ok.h5:x" --values-file "$DATA/hebb_tables_ok.h5:y"
expect_error facts_zero_file 2 "--facts must be >= 1 (got 0); leave it out" build --device cpu --facts 0 \
  --keys "$DATA/hebb_tables_ok.h5:x" --values-file "$DATA/hebb_tables_ok.h5:y"
expect_error dim_zero_file 2 "--dim must be >= 1 (got 0); leave it out" build --device cpu --dim 0 \
  --keys "$DATA/hebb_tables_ok.h5:x" --values-file "$DATA/hebb_tables_ok.h5:y"
expect_error keys_missing 3 "does not exist" build --device cpu --keys "$T/no_such_keys.h5" --tied
echo "plain text, not HDF5" >"$T/text.h5"
expect_error keys_not_hdf5 3 "is not an HDF5 file" build --device cpu --keys "$T/text.h5" --tied
expect_error keys_nan 2 "row 2 column 1 is not finite" build --device cpu --keys "$DATA/hebb_keys_nan.h5" --tied
expect_error keys_zero_row 2 "row 5 is all zeros" build --device cpu --keys "$DATA/hebb_keys_zero_row.h5" --tied
expect_error keys_no_dataset 2 "no dataset 'nope'" build --device cpu --keys "$DATA/hebb_tables_ok.h5:nope" --tied
expect_error exact_k2_width 2 "fixed width" "${B[@]}" --method hebbian:exact-k2 --width 10
expect_error bad_convention 2 "unknown margin convention" margin --device cpu --dim 8 --facts 16 --convention cosine
expect_error margin_in_missing 3 "not an HDF5 file" margin --device cpu --in "$T/none.h5"

# Output path in a missing folder: error before any work, nothing created.
"$HEBB" build --device cpu --dim 8 --facts 16 --out "$T/missing/dir/m.h5" >"$T/od.stdout" 2>"$T/od.stderr"
rc=$?
if [ "$rc" -eq 0 ] || [ -e "$T/missing" ]; then
  echo "FAIL output_dir_missing: exit $rc"; cat "$T/od.stderr"; fail=1
fi
grep -q "missing/dir" "$T/od.stderr" || { echo "FAIL output_dir_missing: message lacks the path"; cat "$T/od.stderr"; fail=1; }

# The good table loads (so the failures above are about the defects, not the files).
"$HEBB" build --device cpu --keys "$DATA/hebb_tables_ok.h5:x" --values-file "$DATA/hebb_tables_ok.h5:y" \
  --width 6 --out "$T/ok.h5" >/dev/null 2>"$T/ok.stderr" || { echo "FAIL good table: "; cat "$T/ok.stderr"; fail=1; }

[ "$fail" -eq 0 ] && echo "test_hebb_errors: all passed"
exit "$fail"

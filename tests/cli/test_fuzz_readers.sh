#!/usr/bin/env bash
# Fuzz every HDF5 reader with byte-flipped copies of valid result files: `hebb margin --in`,
# `hebb merge`, `kata merge`, `hebb margin-sweep --resume` (job records of OUT.partial/) and the
# --keys/--values-file tables of `hebb build`. One byte per variant is XORed with a non-zero mask at
# a position drawn from a fixed-seed generator (half of them in the first 8 KiB, where most
# metadata lives). Each run is under `timeout 10` and must exit 0, 2 or 3 (docs/cli.md, "Corrupt
# files"): 3 for a detected corruption (stderr names the file), 0 or 2 when the byte was
# undetectable raw data (a changed number, or one that fails validation: NaN, shape, map). A
# signal, exit 1 (a bug), exit 4/5 or a timeout fails the test. For longer local runs:
# MEMCAP_FUZZ_SCALE=N (N times as many variants), MEMCAP_FUZZ_SEED=S (other positions),
# MEMCAP_FUZZ_KEEP=DIR (keep the failing files there).
set -u
: "${HEBB:?set HEBB to the hebb executable}"
: "${KATA:?set KATA to the kata executable}"
SCALE=${MEMCAP_FUZZ_SCALE:-1}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
variants=0
declare -A hist

# Deterministic generator (the same on every bash): rnd N sets R to a number in [0, N).
state=$((20261201 + 7919 * ${MEMCAP_FUZZ_SEED:-0}))
rnd() {
  state=$(((state * 1103515245 + 12345) % 2147483648))
  R=$(((state >> 8) % $1))
}

# flip SRC DST: DST = SRC with one byte XORed by a non-zero mask; sets FLIP to say where.
flip() {
  local src=$1 dst=$2 size pos mask old
  cp "$src" "$dst"
  size=$(stat -c %s "$src")
  rnd 2
  if [ "$R" -eq 0 ] && [ "$size" -gt 8192 ]; then rnd 8192; else rnd "$size"; fi
  pos=$R
  rnd 255
  mask=$((R + 1))
  old=$(od -An -tu1 -j "$pos" -N1 "$src" | tr -d ' ')
  printf "$(printf '\\%03o' $((old ^ mask)))" | dd of="$dst" bs=1 seek="$pos" conv=notrunc status=none
  FLIP="byte $pos ^ $mask"
}

# run NAME FILE -- CMD...: one variant; FILE is the corrupted file the message must name on exit 3.
run() {
  local name=$1 file=$2
  shift 3
  timeout 10 "$@" >"$T/out.txt" 2>"$T/err.txt"
  local rc=$?
  variants=$((variants + 1))
  hist["$name $rc"]=$((${hist["$name $rc"]:-0} + 1))
  case $rc in
    0 | 2) ;;
    3)
      if ! grep -qF -- "$(basename "$file")" "$T/err.txt"; then
        echo "FAIL $name ($FLIP): exit 3 without naming $(basename "$file"): $(head -c 300 "$T/err.txt")"
        fail=1
      fi
      ;;
    *)
      echo "FAIL $name ($FLIP of $(basename "$file")): exit $rc: $(head -c 300 "$T/err.txt")"
      cp "$file" "${MEMCAP_FUZZ_KEEP:-$T}/fail_${name}_$variants.h5" 2>/dev/null
      fail=1
      ;;
  esac
}

fixture() {  # fixture WHAT CMD...: builds a valid input; a failure here is a broken test setup
  local what=$1
  shift
  if ! "$@" >"$T/fx.txt" 2>&1; then
    echo "FAIL: cannot build the $what fixture: $(cat "$T/fx.txt")"
    exit 1
  fi
}

# ---- valid inputs ----
fixture "hebb build" "$HEBB" build --device cpu --dim 8 --facts 16 --width 16 --out "$T/m.h5"
SW=(margin-sweep --device cpu --dim 8 --facts 16 --widths 16,32 --seeds 2 --progress none)
fixture "hebb shard 0" "$HEBB" "${SW[@]}" --shard 0/2 --out "$T/s.h5"
fixture "hebb shard 1" "$HEBB" "${SW[@]}" --shard 1/2 --out "$T/s.h5"
KW=(capacity-sweep --device cpu --maps linear,orthant --dims 8 --trials 1 --k-max 16 --progress none)
fixture "kata shard 0" "$KATA" "${KW[@]}" --shard 0/2 --out "$T/k.h5"
fixture "kata shard 1" "$KATA" "${KW[@]}" --shard 1/2 --out "$T/k.h5"
# An interrupted sweep with every job record written: a file-size limit (ulimit -f, in KiB) lets
# the ~35 KB records through and stops the larger assembled file, which is a clean exit 3.
(
  trap '' XFSZ
  ulimit -f 64
  exec "$HEBB" "${SW[@]}" --out "$T/r.h5"
) >"$T/fx.txt" 2>&1
rc=$?
if [ "$rc" -ne 3 ] || [ "$(ls "$T/r.h5.partial" | grep -c '^job-')" -ne 4 ] || ls "$T"/r.h5.tmp* >/dev/null 2>&1; then
  echo "FAIL: the interrupted-sweep fixture: exit $rc, records: $(ls "$T/r.h5.partial" 2>/dev/null)"
  cat "$T/fx.txt"
  exit 1
fi
mv "$T/r.h5.partial" "$T/pristine.partial"
# The unflipped files read back (so every failure below is about the flipped byte).
fixture "margin --in" "$HEBB" margin --device cpu --in "$T/m.h5"
fixture "hebb merge" "$HEBB" merge "$T/s.shard0of2.h5" "$T/s.shard1of2.h5" --out "$T/ok_merge.h5"
fixture "kata merge" "$KATA" merge "$T/k.shard0of2.h5" "$T/k.shard1of2.h5" --out "$T/ok_kmerge.h5"
cp -r "$T/pristine.partial" "$T/r.h5.partial"
fixture "resume" "$HEBB" "${SW[@]}" --resume --out "$T/r.h5"
rm -f "$T/r.h5"
TB=(build --device cpu --width 8)
fixture "table build" "$HEBB" "${TB[@]}" --keys "$T/m.h5:facts/keys" --values-file "$T/m.h5:facts/values" \
  --out "$T/ok_tables.h5"

# ---- variants ----
for ((i = 0; i < 70 * SCALE; ++i)); do
  flip "$T/m.h5" "$T/c.h5"
  run margin_in "$T/c.h5" -- "$HEBB" margin --device cpu --in "$T/c.h5"
done
for ((i = 0; i < 50 * SCALE; ++i)); do
  flip "$T/s.shard1of2.h5" "$T/c.h5"
  rm -f "$T/o.h5"
  run hebb_merge "$T/c.h5" -- "$HEBB" merge "$T/s.shard0of2.h5" "$T/c.h5" --out "$T/o.h5"
done
for ((i = 0; i < 25 * SCALE; ++i)); do
  flip "$T/k.shard0of2.h5" "$T/c.h5"
  rm -f "$T/o.h5"
  run kata_merge "$T/c.h5" -- "$KATA" merge "$T/c.h5" "$T/k.shard1of2.h5" --out "$T/o.h5"
done
for ((i = 0; i < 35 * SCALE; ++i)); do
  rm -rf "$T/r.h5" "$T/r.h5.partial"
  cp -r "$T/pristine.partial" "$T/r.h5.partial"
  rec=$(printf 'job-%08d.h5' $((i % 4)))
  if ((i % 7 == 6)); then rec=meta.json; fi  # the resume bookkeeping too
  flip "$T/pristine.partial/$rec" "$T/r.h5.partial/$rec"
  run resume "$T/r.h5.partial/$rec" -- "$HEBB" "${SW[@]}" --resume --out "$T/r.h5"
done
for ((i = 0; i < 40 * SCALE; ++i)); do
  flip "$T/m.h5" "$T/c.h5"
  rm -f "$T/o.h5"
  run table_build "$T/c.h5" -- "$HEBB" "${TB[@]}" --keys "$T/c.h5:facts/keys" --values-file "$T/c.h5:facts/values" \
    --out "$T/o.h5"
done

echo "variants: $variants; exit codes per reader:"
printf '%s\n' "${!hist[@]}" | sort | while read -r reader code; do
  echo "  $reader exit $code: ${hist["$reader $code"]}"
done
if [ "$variants" -lt 200 ]; then
  echo "FAIL: only $variants variants"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "test_fuzz_readers: all passed"
exit "$fail"

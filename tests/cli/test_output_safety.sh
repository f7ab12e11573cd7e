#!/usr/bin/env bash
# Where results may go, and file errors that are the user's (exit 3, one line, never 1):
# --out /dev/null or a FIFO is refused (root would otherwise replace the device); --out equal to an
# input is refused even with --force; an existing result needs --force; temporaries of dead runs
# are removed (live ones and other hosts' kept); SIGTERM leaves no temporary; 300-character names,
# a missing output folder, an unreadable (chmod 000) input, corrupt /config JSON in a merge input
# and a malformed OUT.partial/meta.json all exit 3 and say what is wrong.
set -u
: "${HEBB:?set HEBB to the hebb executable}"
: "${KATA:?set KATA to the kata executable}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0

# expect NAME CODE PATTERN CMD...: exit CODE and a stderr line matching PATTERN (grep -E).
expect() {
  local name=$1 code=$2 pattern=$3
  shift 3
  "$@" >"$T/out.txt" 2>"$T/err.txt"
  local rc=$?
  if [ "$rc" -ne "$code" ]; then
    echo "FAIL $name: exit $rc, expected $code"; cat "$T/err.txt"; fail=1
  elif [ -n "$pattern" ] && ! grep -Eq -- "$pattern" "$T/err.txt"; then
    echo "FAIL $name: stderr does not match '$pattern':"; cat "$T/err.txt"; fail=1
  else
    echo "ok $name: $([ -n "$pattern" ] && grep -E -- "$pattern" "$T/err.txt" | head -n1)"
  fi
}

B=(build --device cpu --dim 8 --facts 16 --width 16)
SW=(margin-sweep --device cpu --dim 8 --facts 16 --widths 16,32 --seeds 1 --progress none)
"$HEBB" "${B[@]}" --out "$T/m.h5" >/dev/null 2>&1 || { echo "FAIL: hebb build"; exit 1; }
cp "$T/m.h5" "$T/m.orig.h5"

# Devices and FIFOs are never replaced (as root, a rename over /dev/null would replace the device).
expect dev_null 3 "not a regular file" "$HEBB" "${B[@]}" --out /dev/null
expect dev_null_force 3 "not a regular file" "$HEBB" "${B[@]}" --out /dev/null --force
[ -c /dev/null ] || { echo "FAIL: /dev/null is no longer a character device"; fail=1; }
mkfifo "$T/fifo.h5"
expect fifo 3 "not a regular file" "$HEBB" "${B[@]}" --out "$T/fifo.h5" --force
[ -p "$T/fifo.h5" ] || { echo "FAIL: the FIFO was replaced"; fail=1; }
expect out_is_dir 3 "is a directory" "$HEBB" "${B[@]}" --out "$T" --force

# --out equal to an input (also via a hard link, or FILE:dataset): refused, with or without --force;
# the input is untouched.
# (refused before any work: the error is the only line on stderr)
expect in_is_out 3 "is the file given to --in" "$HEBB" margin --device cpu --in "$T/m.h5" --out "$T/m.h5"
expect in_is_out_force 3 "is the file given to --in" "$HEBB" margin --device cpu --in "$T/m.h5" --out "$T/m.h5" --force
[ "$(wc -l <"$T/err.txt")" -eq 1 ] || { echo "FAIL in_is_out_force: refused only after the work:"; cat "$T/err.txt"; fail=1; }
ln "$T/m.h5" "$T/m_hardlink.h5"
expect in_is_out_hardlink 3 "is the file given to --in" "$HEBB" margin --device cpu --in "$T/m.h5" \
  --out "$T/m_hardlink.h5" --force
expect keys_is_out 3 "is the file given to --keys" "$HEBB" build --device cpu --width 8 --keys "$T/m.h5:facts/keys" \
  --values-file "$T/m.h5:facts/values" --out "$T/m.h5" --force
cmp -s "$T/m.h5" "$T/m.orig.h5" || { echo "FAIL: an input was overwritten"; fail=1; }
"$HEBB" "${SW[@]}" --shard 0/2 --out "$T/s.h5" >/dev/null 2>&1 && "$HEBB" "${SW[@]}" --shard 1/2 --out "$T/s.h5" >/dev/null 2>&1 ||
  { echo "FAIL: shard runs"; exit 1; }
cp "$T/s.shard0of2.h5" "$T/s0.orig.h5"
expect merge_in_is_out 3 "also an input" "$HEBB" merge "$T/s.shard0of2.h5" "$T/s.shard1of2.h5" --out "$T/s.shard0of2.h5" --force
cmp -s "$T/s.shard0of2.h5" "$T/s0.orig.h5" || { echo "FAIL: merge overwrote its input"; fail=1; }

# An existing result needs --force (and --force replaces it); sweeps and merges too.
expect first_write 0 "" "$HEBB" "${B[@]}" --seed 1 --out "$T/m_copy.h5"
expect exists 3 "exists; pass --force" "$HEBB" "${B[@]}" --seed 1 --out "$T/m_copy.h5"
expect force_replaces 0 "" "$HEBB" "${B[@]}" --seed 2 --out "$T/m_copy.h5" --force
expect sweep_exists 3 "exists; pass --force" "$HEBB" "${SW[@]}" --shard 0/2 --out "$T/s.h5"
"$HEBB" merge "$T/s.shard0of2.h5" "$T/s.shard1of2.h5" --out "$T/merged.h5" >/dev/null 2>&1 || { echo "FAIL: merge"; fail=1; }
expect merge_exists 3 "exists; pass --force" "$HEBB" merge "$T/s.shard0of2.h5" "$T/s.shard1of2.h5" --out "$T/merged.h5"
expect kata_exists 3 "exists; pass --force" "$KATA" dict --type random --dim 8 --count 16 --device cpu --out "$T/m.h5"

# Temporaries of dead runs on this host are removed; a live run's and another host's are kept.
host=$(uname -n | cut -d. -f1)
sleep 0 &
dead=$!
wait "$dead"
touch "$T/t.h5.tmp-$host-$dead" "$T/t.h5.tmp-$dead" "$T/t.h5.tmp-$host-$$" "$T/t.h5.tmp-otherhost-$dead"
expect stale_tmp 0 "removed .*left by an interrupted run" "$HEBB" "${B[@]}" --out "$T/t.h5"
[ ! -e "$T/t.h5.tmp-$host-$dead" ] && [ ! -e "$T/t.h5.tmp-$dead" ] || { echo "FAIL: stale temporaries survived"; fail=1; }
[ -e "$T/t.h5.tmp-$host-$$" ] && [ -e "$T/t.h5.tmp-otherhost-$dead" ] || { echo "FAIL: a live or foreign temporary was removed"; fail=1; }

# SIGTERM at any moment leaves no temporary next to OUT (OUT.partial/ stays for --resume).
for delay in 0.05 0.2 0.5; do
  rm -rf "$T/term" && mkdir "$T/term"
  "$HEBB" margin-sweep --device cpu --dim 32 --facts 64 --widths 32,64,128,256 --seeds 3 --progress none \
    --out "$T/term/r.h5" >/dev/null 2>&1 &
  pid=$!
  sleep "$delay"
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  left=$(find "$T/term" -maxdepth 1 -name '*.tmp*')
  [ -z "$left" ] || { echo "FAIL sigterm after ${delay}s: left $left"; fail=1; }
done
echo "ok sigterm: no temporary left"

# Names too long for the file system: a file error, not a bug.
long=$(printf 'n%.0s' $(seq 300))
expect long_out 3 "too long" "$HEBB" "${B[@]}" --out "$T/$long.h5"
expect long_in 3 "too long" "$HEBB" margin --device cpu --in "$T/$long.h5"
expect long_keys 3 "too long" "$HEBB" build --device cpu --keys "$T/$long.h5" --tied --out "$T/x.h5"
expect long_merge_in 3 "too long" "$HEBB" merge "$T/$long.h5" --out "$T/x.h5"
expect long_sweep_out 3 "too long" "$HEBB" "${SW[@]}" --out "$T/$long.h5"
expect missing_folder 3 "does not exist" "$HEBB" "${B[@]}" --out "$T/no/such/dir/m.h5"
expect missing_in 3 "does not exist|missing or not an HDF5 file" "$HEBB" margin --device cpu --in "$T/none.h5"
expect missing_merge_in 3 "does not exist" "$HEBB" merge "$T/none.h5" --out "$T/x.h5"

# chmod 000 input: "permission denied". Root reads it anyway, so as root the check runs as nobody.
cp "$T/m.h5" "$T/locked.h5"
chmod 000 "$T/locked.h5"
mkdir -m 1777 "$T/w"  # outputs of these checks (writable by nobody)
as_user=()
if [ "$(id -u)" -eq 0 ]; then
  if command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
    chmod 755 "$T"
    as_user=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
  else
    echo "note: running as root without setpriv; the permission-denied checks are skipped"
  fi
fi
if [ "$(id -u)" -ne 0 ] || [ ${#as_user[@]} -gt 0 ]; then
  expect perm_in 3 "permission denied" "${as_user[@]}" "$HEBB" margin --device cpu --in "$T/locked.h5"
  expect perm_keys 3 "permission denied" "${as_user[@]}" "$HEBB" build --device cpu --keys "$T/locked.h5:facts/keys" \
    --tied --width 8 --out "$T/w/x.h5"
  expect perm_merge 3 "permission denied" "${as_user[@]}" "$HEBB" merge "$T/locked.h5" --out "$T/w/x.h5"
fi
chmod 600 "$T/locked.h5"

# Corrupt /config JSON in a merge input: exit 3 naming the file (was an uncaught JSON exception).
cp "$T/s.shard1of2.h5" "$T/badcfg.h5"
at=$(grep -obUa '"dim":' "$T/badcfg.h5" | head -n1 | cut -d: -f1)
if [ -n "$at" ]; then
  printf ';' | dd of="$T/badcfg.h5" bs=1 seek=$((at + 5)) conv=notrunc status=none
  expect merge_bad_json 3 "badcfg.h5.*not a JSON object" "$HEBB" merge "$T/s.shard0of2.h5" "$T/badcfg.h5" --out "$T/x.h5"
else
  echo "FAIL: could not find the config JSON in the shard file"; fail=1
fi

# A malformed or wrongly typed OUT.partial/meta.json: exit 3 naming it (was exit 1).
for meta in '{"config": {}, "jobs_total": "two", "shard": 0}' '[1, 2, 3]' 'not json'; do
  rm -rf "$T/p.h5.partial" && mkdir "$T/p.h5.partial"
  printf '%s' "$meta" >"$T/p.h5.partial/meta.json"
  expect "meta_json '$meta'" 3 "meta.json' is unreadable or malformed" "$HEBB" "${SW[@]}" --resume --out "$T/p.h5"
done

[ "$fail" -eq 0 ] && echo "test_output_safety: all passed"
exit "$fail"

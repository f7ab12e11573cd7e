#!/usr/bin/env bash
# Hostile input to the sweep commands (hebb margin-sweep, kata capacity, kata capacity-sweep): each
# case exits 2 (bad input) or 3 (file problem) with one error line naming the flag or variable, and
# leaves the output folder exactly as it was (no OUT, OUT.partial/, OUT.tmp-*). Also: a run holding
# OUT.partial locks out a second run, --resume on a finished output is a no-op, a resumed run says
# how many jobs were done. Env: HEBB, KATA (executables).
set -u
: "${HEBB:?set HEBB to the hebb executable}"
: "${KATA:?set KATA to the kata executable}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
unset SLURM_ARRAY_TASK_ID SLURM_ARRAY_TASK_COUNT SLURM_ARRAY_TASK_MIN SLURM_ARRAY_TASK_MAX SLURM_ARRAY_TASK_STEP

# case CODE PATTERN [VAR=VALUE...] -- TOOL ARGS...   (run in an empty folder $tmp/w, --out o.h5)
case_() {
  local code=$1 pattern=$2
  shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  rm -rf "$tmp/w" && mkdir "$tmp/w"
  (cd "$tmp/w" && env "${envs[@]}" timeout 20 "$@" --device cpu --out o.h5 >"$tmp/stdout" 2>"$tmp/stderr")
  local rc=$? what
  what="${envs[*]} $(basename "$1") ${*:2}"
  local errs
  errs=$(grep -c "error:" "$tmp/stderr")
  if [[ $rc -ne $code ]]; then echo "FAIL: $what -> exit $rc, expected $code"; cat "$tmp/stderr"; fails=$((fails + 1)); return; fi
  if [[ $errs -ne 1 ]] || ! grep "error:" "$tmp/stderr" | grep -Eqi -- "$pattern"; then
    echo "FAIL: $what -> want one error line matching '$pattern':"; cat "$tmp/stderr"; fails=$((fails + 1)); return
  fi
  if [[ -n $(ls -A "$tmp/w") ]]; then echo "FAIL: $what left files:"; ls -A "$tmp/w"; fails=$((fails + 1)); return; fi
  echo "ok: $what -> $rc: $(grep error: "$tmp/stderr")"
}

# shellcheck disable=SC2054  # commas are grid lists
small=(margin-sweep --widths 64,65 --seeds 2 --facts 64 --dim 16)
# Duplicate grid values (also under --dry-run, a flag given twice, values that print the same).
case_ 2 "--widths lists 64 twice" -- "$HEBB" margin-sweep --widths 64,64 --seeds 1
case_ 2 "--widths lists 64 twice" -- "$HEBB" margin-sweep --widths 64,64 --seeds 1 --dry-run
case_ 2 "--widths lists 64 twice" -- "$HEBB" margin-sweep --widths 64 --widths 64 --seeds 1
case_ 2 "--noise-grid lists 0.1 twice" -- "$HEBB" margin-sweep --sweep noise --noise-grid 0.1,0.1000001 --seeds 1
case_ 2 "width grid|--log-grid" -- "$HEBB" margin-sweep --log-grid 1,1.00001,5
case_ 2 "--maps lists 'm1' twice" -- "$KATA" capacity-sweep --maps m1,m1 --dims 16
case_ 2 "--dims lists '16' twice" -- "$KATA" capacity-sweep --maps m1 --dims 16,16 --dry-run
# SLURM array variables: strict, consistent, never a silent whole sweep.
arr=(SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_MAX=3 SLURM_ARRAY_TASK_COUNT=4)
case_ 2 "SLURM_ARRAY_TASK_ID must be an integer" SLURM_ARRAY_TASK_ID=abc "${arr[@]}" -- "$HEBB" "${small[@]}"
case_ 2 "SLURM_ARRAY_TASK_ID must be an integer" SLURM_ARRAY_TASK_ID=2junk "${arr[@]}" -- "$HEBB" "${small[@]}"
case_ 2 "one-task SLURM array.*--shard" SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=1 \
  SLURM_ARRAY_TASK_COUNT=1 -- "$HEBB" "${small[@]}"
case_ 2 "do not describe a regular array" SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_MAX=4 \
  SLURM_ARRAY_TASK_STEP=2 SLURM_ARRAY_TASK_COUNT=3 -- "$HEBB" "${small[@]}"
case_ 2 "--shard.*2147483647" -- "$HEBB" "${small[@]}" --shard 0/99999999999
case_ 2 "shard 7/10 owns no job: the plan has 4 jobs" -- "$HEBB" "${small[@]}" --shard 7/10
# Input errors caught before anything is created.
case_ 2 "--beta 2 needs --spike-target" -- "$HEBB" "${small[@]}" --beta 2
case_ 2 "--widths value must be an integer" -- "$HEBB" margin-sweep --widths 1e30 --seeds 1
case_ 2 "--dim.*memory|memory.*--dim" -- "$HEBB" margin-sweep --dim 100000000 --seeds 1
case_ 2 "--facts must be in" -- "$HEBB" margin-sweep --facts 100000000000000 --seeds 1
case_ 2 "2000000000 seeds.*10000000 jobs" -- "$HEBB" margin-sweep --seeds 2000000000
case_ 2 "dim=1000000000.*memory" -- "$KATA" capacity --map m1 --dim 1000000000
case_ 2 "tau = 1e-300 is too small" -- "$KATA" capacity --map softmax:tau=1e-300 --dim 16

# kata capacity under SLURM array variables: not sharded, one complete result.
rm -rf "$tmp/w" && mkdir "$tmp/w"
(cd "$tmp/w" && env SLURM_ARRAY_TASK_ID=3 "${arr[@]}" "$KATA" capacity --map m1 --dim 16 --k-max 32 --out c.h5 \
  --device cpu >/dev/null 2>&1)
if [[ $(ls -A "$tmp/w") == c.h5 ]]; then echo "ok: kata capacity under an array task writes c.h5"
else echo "FAIL: kata capacity under an array task left: $(ls -A "$tmp/w")"; fails=$((fails + 1)); fi

# Shards are joined by the tool that wrote them: kata merge refuses hebb's (exit 2, naming hebb merge).
rm -rf "$tmp/w" && mkdir "$tmp/w"
(cd "$tmp/w" && "$HEBB" margin-sweep --widths 64,65 --seeds 1 --facts 32 --dim 16 --shard 0/2 --out o.h5 \
  --device cpu --progress none >/dev/null 2>&1)
(cd "$tmp/w" && "$KATA" merge --allow-partial o.shard0of2.h5 --out m.h5 >/dev/null 2>"$tmp/stderr")
rc=$?
if [[ $rc -eq 2 ]] && grep -q "join its shards with 'hebb merge'" "$tmp/stderr" && [[ ! -e $tmp/w/m.h5 ]]; then
  echo "ok: kata merge refuses hebb's shards"
else echo "FAIL: kata merge of hebb shards -> exit $rc:"; cat "$tmp/stderr"; fails=$((fails + 1)); fi

# Lock, resume count, finished output.
rm -rf "$tmp/w" && mkdir "$tmp/w"
# shellcheck disable=SC2054
run=("$HEBB" margin-sweep --widths 64,65,66,67,68,69 --seeds 4 --facts 256 --dim 64 --device cpu --out o.h5 --progress none)
(cd "$tmp/w" && exec "${run[@]}" >/dev/null 2>&1) &
first=$!
for _ in $(seq 50); do [[ -e $tmp/w/o.h5.partial/meta.json ]] && break; sleep 0.1; done
(cd "$tmp/w" && "${run[@]}" --resume >/dev/null 2>"$tmp/stderr")
rc=$?
if [[ $rc -eq 2 ]] && grep -q "is being written by another run (pid $first)" "$tmp/stderr"; then echo "ok: second run locked out"
elif [[ ! -e $tmp/w/o.h5.partial ]]; then echo "note: the first run finished before the second started (lock not exercised)"
else echo "FAIL: second run -> $rc:"; cat "$tmp/stderr"; fails=$((fails + 1)); fi
kill -KILL "$first" 2>/dev/null
wait "$first" 2>/dev/null
if [[ -e $tmp/w/o.h5.partial ]]; then
  (cd "$tmp/w" && "${run[@]}" --resume >/dev/null 2>"$tmp/stderr") || { echo "FAIL: resume"; cat "$tmp/stderr"; fails=$((fails + 1)); }
  grep -q "resuming: [0-9]* of 24 jobs done" "$tmp/stderr" && echo "ok: $(grep resuming "$tmp/stderr")"
fi
if (cd "$tmp/w" && "${run[@]}" --resume >/dev/null 2>"$tmp/stderr") && grep -q "o.h5 is complete: nothing to do" "$tmp/stderr" && [[ $(ls -A "$tmp/w") == o.h5 ]]; then
  echo "ok: --resume on the finished output is a no-op"
else echo "FAIL: --resume on a finished output:"; cat "$tmp/stderr"; ls -A "$tmp/w"; fails=$((fails + 1)); fi

# A damaged job record (garbage, a truncated copy) in OUT.partial: --resume runs that job again instead of
# counting it as done and failing at assembly; the dry run lists it as "redo".
rm -rf "$tmp/w" && mkdir "$tmp/w"
(cd "$tmp/w" && exec "${run[@]}" --threads 1 >/dev/null 2>&1) &
first=$!
for _ in $(seq 200); do (( $(ls "$tmp/w/o.h5.partial" 2>/dev/null | grep -c '^job-') >= 2 )) && break; sleep 0.05; done
kill -KILL "$first" 2>/dev/null
wait "$first" 2>/dev/null
if [[ -e $tmp/w/o.h5.partial ]] && (( $(ls "$tmp/w/o.h5.partial" | grep -c '^job-') >= 2 )); then
  # a resume with another grid is refused, naming what changed
  run2=("${run[@]}")
  for i in "${!run2[@]}"; do [[ ${run2[$i]} == --seeds ]] && run2[i+1]=5; done
  (cd "$tmp/w" && "${run2[@]}" --threads 1 --resume >/dev/null 2>"$tmp/stderr")
  rc=$?
  if [[ $rc -eq 2 ]] && grep -q "used a different configuration (--seeds 4 then, 5 now)" "$tmp/stderr"; then
    echo "ok: a resume with another --seeds is refused, naming it"
  else echo "FAIL: resume with another --seeds -> exit $rc:"; cat "$tmp/stderr"; fails=$((fails + 1)); fi
  mapfile -t recs < <(ls "$tmp/w/o.h5.partial" | grep '^job-' | sort)
  echo garbage >"$tmp/w/o.h5.partial/${recs[0]}"
  head -c 900 "$tmp/w/o.h5.partial/${recs[1]}" >"$tmp/cut" && mv "$tmp/cut" "$tmp/w/o.h5.partial/${recs[1]}"
  redo=$(cd "$tmp/w" && "${run[@]}" --resume --dry-run 2>/dev/null | grep -c ' redo ')
  (cd "$tmp/w" && "${run[@]}" --resume >/dev/null 2>"$tmp/stderr")
  rc=$?
  if [[ $rc -eq 0 && $redo -eq 2 && $(grep -c "is unreadable.*running the job again" "$tmp/stderr") -eq 2 ]] &&
     grep -q "wrote o.h5 (24 jobs)" "$tmp/stderr" && [[ $(ls -A "$tmp/w") == o.h5 ]]; then
    echo "ok: two damaged job records are run again on --resume (dry run: $redo redo)"
  else
    echo "FAIL: resume over damaged records -> exit $rc, dry run redo $redo:"; cat "$tmp/stderr"; ls -A "$tmp/w"
    fails=$((fails + 1))
  fi
else echo "note: the run finished before two records existed (damaged-record resume not exercised)"; fi

if [[ $fails -ne 0 ]]; then echo "$fails failure(s)"; exit 1; fi
echo "all sweep hostile-input cases ok"

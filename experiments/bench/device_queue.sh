#!/usr/bin/env bash
# The long GPU runs that do not fit one 10-minute device call, split into calls that resume each other.
# Each call builds incrementally into ./build-gpu (kept between calls while the machine stays warm, so only the
# first call pays the full build), runs STAGE for at most LIMIT seconds with --resume (finished jobs are kept in
# OUT.partial/, a killed training continues from its checkpoint), and prints how far it got. Run the same
# command again until it reports "complete"; the wall time of a stage is the sum of its calls' run times
# (printed), the build excluded.
#   bash experiments/bench/device_queue.sh STAGE [LIMIT_S]      results under ./queue/ (or $QUEUE)
# LIMIT_S must stay under the device call's own limit (the device tool grants less than asked when little
# device time is left: take its limit_s, minus a minute for copying): a call killed from outside keeps only what
# is already under $OUT. So every log line is also appended to $OUT/STAGE.log when $OUT is set, and runs that
# finish one by one (swap-seeds) log their result line as they finish.
# Between leases (a fresh machine starts bare): when $OUT is set, a partial sweep's finished job records come back
# as $OUT/NAME.partial.tar.gz (checkpoints of unfinished trainings left out: they are large and only save the
# part of one training). Put that file in the ignored .deps/partials/ and carry .deps: the next call unpacks it into
# $QUEUE before resuming, so only the trainings that were in flight start again.
# PREBUILT=DIR: take the binaries from DIR (built here and carried) instead of building on the machine (below).
# STAGE:
#   edit-grid   hebb edit base --device cuda (once), then hebb edit table1 --preset edit-table1 --jobs-per-gpu 4
#               (issue 15: Table 1, the 732-job grid, <= 30 min target)
#   fig9-grid   hebb edit base --expert data-dependent --expert-hidden 1024 (once), then the same grid with
#               --methods swap-constructed,memit,alphaedit,rome (issue 15: Fig. 9 with its retuned baselines)
#   fig11       hebb capacity --preset fig11 --seeds $SEEDS (1: seed 42 only) --jobs-per-gpu 4, GD at every d in
#               bf16x3 (issue 9: Fig. 11 and claim 9; ~10 min on an H100 for one seed); sweep name fig11-sSEEDS.
#               Draw it where it comes back: experiments/plots/with_python.sh experiments/plots/fig11.py FILE.h5
#   fig3b       hebb ssfr capacity --preset fig3b --jobs-per-gpu 8 (issue 13: claim 10, < 30 min target);
#               FACTS=1024,2048 only those fact counts, as a sweep of their own (fig3b-fFACTS); SEED=1 --seed 1
#               (sweep fig3b-s1[-fFACTS]): seed 42's table has a key no trained attention reads at F >= 2048
#   fig10       hebb ssfr capacity --preset fig10 --jobs-per-gpu 8 (issue 13: claim 11); SEED as for fig3b
#   fig3b-gd-precision  fig3b's GD searches at F = 256 ... 2048 with the released code's float64 GD MLPs and
#               with tf32 ones, in one sweep (issue 13: may the preset train them faster? same m* needed)
#   table2      kata mqar table2 --preset table2 --seeds 2 --jobs 4 (trainings at once per GPU) (issue 12: Table 2);
#               with MIXERS=sigma2 (a comma list; OW: their overwrite columns, default none) only those rows, as a
#               sweep named table2-MIXERS of its own, so that a row finished within one lease comes back whole;
#               PRECISION=tf32 for TF32 products (sweep name suffixed -tf32; validated on the softmax row only)
#   table2-row  one Table 2 row: kata mqar table2 --preset table2 --mixers $ROW (softmax) --ow-mixers none
#               --jobs 3 (its three learning rates at once) --precision $PRECISION (tf32) (issue 12, acceptance 3:
#               a row, training and every evaluation slice, in <= 2 min); its wall time is the sum of its calls.
#               ROW=m4,sigma4 runs rows one after another (each its own sweep and result file); SEED=1 the
#               second seed (sweep name suffixed -s1); OW=m2 that row's overwrite trainings too; JOBS trainings
#               at once (3); TOGETHER=1 runs the rows of ROW as one sweep (e.g. ROW=m2,softmax OW=m2,softmax
#               TASKS=overwrite JOBS=6: six overwrite trainings at once); LRS=0.01 only those rates of the grid;
#               FRESH=1 a new training set every epoch (--fresh-examples; sweep name suffixed -fresh)
#   h13         kata mqar table2 --preset h13 --jobs 3 (orthant / Lorentz / M2 recall at T = 1024, K = 16 ... 256:
#               the collapse past K = d_head, claim H13; issue 12 acceptance 2)
#   induction   kata induction --preset induction --jobs 5 (softmax and Sigma2 at T = 128 ... 2048, E.2; issue 12
#               acceptance 2); MIXERS=sigma2 LENGTHS=2048 (comma lists): only those, as a sweep of their own;
#               PRECISION=tf32 TF32 products (fp32 Sigma2 at 2048 takes ~15 min: more than one call);
#               BACKBONE=transformer E.2's backbone as read (preset induction-e2), BACKBONE=zoology-mlp its other
#               reading (the same preset with zoology's BaseConv layers; sweep suffix -e2z); JOBS trainings at once (5);
#               ROPE=BASE RoPE on the mixer's q, k with that base (e.g. ROPE=10000; sweep name suffixed -ropeBASE);
#               FRESH=1 a new training set every epoch (--fresh-examples, suffix -fresh); LRS=0.003 only those rates;
#               STEPS=16000 another training budget (--steps; suffix -steps16000)
#   edit-torch  the PyTorch baseline of one training epoch and one evaluation beside hebb edit base (issue 15)
#   checks      GPU tests and a benchmark before the long stages: builds `kata` and every test binary named in
#               TESTS ("BINARY[:DOCTEST_FILTER];…", e.g. "gpu_test_kata_mqar_mixers:*chunked KATA backward*;
#               gpu_test_kata_attention:*bit-identical*"), runs each (at most 150 s), then BENCH when set (the arguments of kata_vs_sdpa.sh after the
#               kata path and folder, e.g. "table9 --maps m2 --variant chunked"), then MQAR when set (the MIXERS of
#               mqar_device.sh, e.g. "softmax:auto:tf32": one MQAR epoch + evaluation against PyTorch's). Each test's and the bench's summary
#               lines go to the log; their whole output is tarred into $OUT/checks.tar.gz after every step (the
#               device tool returns at most 8 files: a call whose tests and bench wrote more lost the rest)
#   swap-seeds  hebb edit base (once), then MLP swapping on the edit set of --seed 42, one run at a time, for
#               each FRACTION:EXPERT_SEED of $SWAPS (default: 10 % with seeds 42, 1..4, then 5 % and 2 % with
#               42, 1, 2; finished runs are kept): the spread of r_NF over swapped experts and its split by
#               position (issue 15, claim 16)
set -uo pipefail
STAGE=${1:?usage: device_queue.sh STAGE [LIMIT_S]}
LIMIT=${2:-480}
case "$STAGE" in
  checks | edit-grid | fig9-grid | fig11 | fig3b | fig10 | fig3b-gd-precision | table2 | table2-row | h13 | induction |\
    edit-torch | swap-seeds) ;;
  *) echo "unknown stage '$STAGE' (checks, edit-grid, fig9-grid, fig11, fig3b, fig10, fig3b-gd-precision, table2," \
          "table2-row, h13, induction, edit-torch, swap-seeds)" >&2; exit 2 ;;
esac
[ -f CMakeLists.txt ] && [ -d experiments/bench ] || { echo "run from the repository root" >&2; exit 2; }
Q=${QUEUE:-queue}
mkdir -p "$Q"
export MEMCAP_PRESETS=${MEMCAP_PRESETS:-$PWD/experiments/presets}
log() {
  echo "[$STAGE] $*" | tee -a "$Q/$STAGE.log"
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then echo "[$STAGE] $*" >> "$OUT/$STAGE.log"; fi
}
t0=$(date +%s)
TARGET=hebb
case "$STAGE" in table2 | table2-row | h13 | induction | checks) TARGET=kata ;; esac
if [ "$STAGE" = checks ]; then
  IFS=';' read -r -a CHECKS <<< "${TESTS:-}"  # entries separated by ';' (filters may hold spaces)
  for t in "${CHECKS[@]}"; do TARGET="$TARGET ${t%%:*}"; done
fi
if [ -n "${PREBUILT:-}" ]; then
  # PREBUILT=DIR: binaries built on the development machine (Debian 12, CUDA 13, sm_90a by default) and carried
  # (experiments/bench/pack_binaries.sh packs kata, hebb, ramnet and every GPU test into ~25 MB of .deps/bin; unpack
  # into build/ and give PREBUILT=build): no build on the device, which saves its ~3 min on a fresh machine.
  mkdir -p build-gpu
  for b in $TARGET; do
    exe=$(find "$PREBUILT" -name "$b" -type f -perm -u+x 2>/dev/null | head -1)
    [ -n "$exe" ] || { echo "PREBUILT=$PREBUILT holds no executable '$b': carry it (or leave PREBUILT unset)" >&2; exit 2; }
    # unchanged binaries stay (a second device_queue.sh running them at once: no "Text file busy")
    cmp -s "$exe" "build-gpu/$b" || cp "$exe" build-gpu/
  done
  log "prebuilt $TARGET from $PREBUILT"
else
  if [ ! -f build-gpu/build.ninja ]; then
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a > "$Q/cmake.log" 2>&1 ||
      { tail -20 "$Q/cmake.log"; exit 1; }
  fi
  # shellcheck disable=SC2086  # TARGET is a list of targets
  cmake --build build-gpu -j16 --target $TARGET > "$Q/build.log" 2>&1 || { grep -B2 -A12 error "$Q/build.log" | head -60; exit 1; }
  log "build $(( $(date +%s) - t0 )) s"
fi
left() { echo $(( LIMIT - ($(date +%s) - t0) )); }
# bring_back FILE: a finished result file is copied to $OUT (when set) so that it comes back with the call; the
# device tool returns files of at most 16 MiB, so a larger one stays on the machine, said in the log.
bring_back() {
  [ -n "${OUT:-}" ] && [ -d "$OUT" ] || return 0
  local bytes
  bytes=$(stat -c %s "$1")
  if [ "$bytes" -le $((15 * 1024 * 1024)) ]; then
    cp "$1" "$OUT/" && log "result file in \$OUT/$(basename "$1") ($bytes bytes)"
  else
    log "result file $1 is $bytes bytes, over the 16 MiB the device tool returns: read it on the machine"
  fi
}
# run_sweep NAME CMD...: the sweep with --resume when a partial run exists; records the run time of this call.
run_sweep() {
  local name=$1 out=$Q/$1.h5
  shift
  if [ -f "$out" ]; then log "complete ($out exists)"; bring_back "$out"; return 0; fi
  if [ "$(left)" -lt 30 ]; then log "no time left in this call (LIMIT $LIMIT s); run again"; return 0; fi
  local res=""
  if [ ! -d "$out.partial" ] && [ -f ".deps/partials/$name.partial.tar.gz" ]; then
    tar xzf ".deps/partials/$name.partial.tar.gz" -C "$Q" &&
      log "unpacked .deps/partials/$name.partial.tar.gz ($(ls "$out.partial" | grep -c '^job-') job records)"
  fi
  [ -d "$out.partial" ] && res="--resume"
  local t1
  t1=$(date +%s)
  timeout "$(left)" "$@" $res --progress lines --out "$out" > "$Q/$name.out" 2>> "$Q/$name.err"
  local rc=$?
  local dt=$(( $(date +%s) - t1 ))
  echo "$dt" >> "$Q/$name.seconds"
  local total
  total=$(awk '{s += $1} END {print s}' "$Q/$name.seconds")
  local done_jobs
  done_jobs=$(ls "$out.partial" 2>/dev/null | grep -c '^job-' || true)
  if [ -f "$out" ]; then
    log "complete: rc $rc, this call ${dt} s, all calls ${total} s; $(tail -1 "$Q/$name.err")"
    bring_back "$out"
  else
    log "partial: rc $rc, this call ${dt} s, all calls ${total} s, ${done_jobs} job records so far; run again"
    [ -s "$Q/$name.out" ] && log "  last progress line: $(tail -1 "$Q/$name.out" | cut -c1-200)"
    # a failed job's message (the sweep goes on with the others and exits with the first failure's code)
    [ "$rc" != 124 ] && [ -s "$Q/$name.err" ] && log "  last error lines: $(tail -3 "$Q/$name.err" | cut -c1-300)"
    if [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ -d "$out.partial" ]; then
      tar czf "$OUT/$name.partial.tar.gz" -C "$Q" --exclude='*-ckpt*' --exclude=lock "$(basename "$out").partial" &&
        log "finished job records in \$OUT/$name.partial.tar.gz (carry it as .deps/partials/ to resume on a fresh machine)"
    fi
  fi
}
# ensure_base: the paper-scale base model of hebb edit in $Q/base.h5 (trained once, kept between calls).
ensure_base() {
  [ -f "$Q/base.h5" ] && return 0
  local t1
  t1=$(date +%s)
  build-gpu/hebb edit base --device cuda --progress none --out "$Q/base.h5" > "$Q/base.out" 2>&1 ||
    { tail -5 "$Q/base.out"; exit 1; }
  log "base $(( $(date +%s) - t1 )) s: $(grep -E 'mlp_accuracy' "$Q/base.out" | tail -1)"
}
case "$STAGE" in
  checks)
    C=$Q/checks
    mkdir -p "$C"
    pack() { [ -n "${OUT:-}" ] && [ -d "$OUT" ] && tar czf "$OUT/checks.tar.gz" -C "$Q" checks; }
    for t in "${CHECKS[@]}"; do
      bin=${t%%:*} filter=""
      [ "$t" != "$bin" ] && filter=${t#*:}
      exe=$(find build-gpu -name "$bin" -type f -perm -u+x | head -1)
      f=$C/$bin$(printf '%s' "$filter" | tr -cd 'a-zA-Z0-9').txt
      if [ -z "$exe" ]; then log "$bin: not built"; continue; fi
      ts=$(date +%s)
      # TEST_TIMEOUT: seconds per test binary (default 150)
      if [ -n "$filter" ]; then timeout "${TEST_TIMEOUT:-150}" "$exe" -tc="$filter" > "$f" 2>&1
      else timeout "${TEST_TIMEOUT:-150}" "$exe" > "$f" 2>&1; fi
      rc=$?
      summary=$(grep -E 'test cases|assertions' "$f" | tr -s ' ' | tr '\n' ' ')
      log "$bin [${filter:-all}] rc=$rc $(( $(date +%s) - ts )) s: $summary"
      grep -E "ERROR|values:" "$f" | head -6 | while IFS= read -r line; do log "  $line"; done
      pack
    done
    if [ -n "${BENCH:-}" ]; then
      # shellcheck disable=SC2086  # BENCH is an argument list
      timeout "$(left)" bash experiments/bench/kata_vs_sdpa.sh build-gpu/kata "$C/bench" $BENCH > "$C/bench.txt" 2>&1
      log "bench ($BENCH) rc=$?"
      grep -E "MISS|met|backward stages|^[a-z0-9]+ +[0-9]+K" "$C/bench/compare_"*.txt "$C/bench.txt" 2>/dev/null |
        sed 's|^[^:]*:||' | head -24 | while IFS= read -r line; do log "  $line"; done
      rm -f "$C/bench/"*.h5  # the numbers are in the text files; the result file can be large
      pack
    fi
    if [ -n "${MQAR:-}" ] && [ "$(left)" -gt 60 ]; then
      # one MQAR epoch + evaluation per MIXER[:KERNEL[:PRECISION]] of MQAR, and the PyTorch script's, in this call
      LIMIT=$(( $(left) / 3 )) MIXERS="$MQAR" bash experiments/bench/mqar_device.sh build-gpu "$C/mqar" > "$C/mqar.txt" 2>&1
      log "mqar epoch bench ($MQAR) rc=$?"
      grep -E "^(memcap|torch|ratio)" "$C/mqar.txt" | cut -c1-220 | while IFS= read -r line; do log "  $line"; done
      rm -f "$C/mqar/"*.h5
      pack
    fi
    ;;
  edit-grid)
    ensure_base
    run_sweep edit-table1 build-gpu/hebb edit table1 --preset edit-table1 --device cuda --jobs-per-gpu 4 \
      --base "$Q/base.h5"
    ;;
  fig9-grid)
    if [ ! -f "$Q/base_dd.h5" ]; then
      t1=$(date +%s)
      build-gpu/hebb edit base --device cuda --expert data-dependent --expert-hidden 1024 --progress none \
        --out "$Q/base_dd.h5" > "$Q/base_dd.out" 2>&1 || { tail -5 "$Q/base_dd.out"; exit 1; }
      log "base (data-dependent expert) $(( $(date +%s) - t1 )) s: $(grep -E 'mlp_accuracy' "$Q/base_dd.out" | tail -1)"
    fi
    run_sweep fig9 build-gpu/hebb edit table1 --preset edit-table1 --device cuda --jobs-per-gpu 4 \
      --methods swap-constructed,memit,alphaedit,rome --base "$Q/base_dd.h5"
    ;;
  fig11)
    SEEDS=${SEEDS:-1}
    [[ "$SEEDS" =~ ^[1-9][0-9]?$ ]] || { echo "SEEDS must be an integer in [1, 99] (got '$SEEDS')" >&2; exit 2; }
    run_sweep "fig11-s$SEEDS" build-gpu/hebb capacity --preset fig11 --seeds "$SEEDS" --device cuda --jobs-per-gpu 4
    ;;
  fig3b | fig10)
    name=$STAGE
    extra=()
    if [ -n "${SEED:-}" ]; then
      [[ "$SEED" =~ ^[0-9]{1,9}$ ]] || { echo "SEED must be a non-negative integer (got '$SEED')" >&2; exit 2; }
      name+="-s$SEED"
      extra+=(--seed "$SEED")
    fi
    if [ -n "${FACTS:-}" ]; then
      [ "$STAGE" = fig3b ] || { echo "FACTS applies to fig3b only" >&2; exit 2; }
      [[ "$FACTS" =~ ^[0-9]+(,[0-9]+)*$ ]] ||
        { echo "FACTS must be a comma list of integers (got '$FACTS')" >&2; exit 2; }
      name+="-f${FACTS//,/-}"
      extra+=(--facts "$FACTS")
    fi
    run_sweep "$name" build-gpu/hebb ssfr capacity --preset "$STAGE" "${extra[@]}" --device cuda --jobs-per-gpu 8
    ;;
  fig3b-gd-precision)
    run_sweep fig3b-gd-precision build-gpu/hebb ssfr capacity --preset fig3b --methods gd,gd,precision=tf32 \
      --facts 256,512,1024,2048 --device cuda --jobs-per-gpu 8
    ;;
  table2)
    # PRECISION (default f32): tf32 runs the dense products and the gemm mixer's scores on TF32 tensor cores (the
    # sweep's name gets a -tf32 suffix, so fp32 and tf32 records never mix)
    P=${PRECISION:-f32}
    SUF=""
    [ "$P" != f32 ] && SUF="-$P"
    if [ -n "${MIXERS:-}" ]; then  # some rows as a sweep of their own (its own partial and result file)
      run_sweep "table2-${MIXERS//,/-}$SUF" build-gpu/kata mqar table2 --preset table2 --mixers "$MIXERS" \
        --ow-mixers "${OW:-none}" --seeds 2 --precision "$P" --device cuda --jobs 4
    else
      run_sweep "table2$SUF" build-gpu/kata mqar table2 --preset table2 --seeds 2 --precision "$P" --device cuda --jobs 4
    fi
    ;;
  table2-row)
    # ROW: one mixer or a comma list, run one after another while the call has time, each row a sweep of its own
    # (table2-row-MIXER-PRECISION, -sSEED for SEED != 0) so that every row finished in a call comes back whole;
    # OW=MIXER adds that row's overwrite trainings (§4.2; default none)
    # EVAL_EVERY=N overrides the preset's --eval-every (a partial run made with another value resumes only with it)
    # TASKS=overwrite: only the OW trainings (the row's MQAR trainings done already; sweep name suffixed -ow)
    R=${ROW:-softmax}
    EVARG=()
    [ -n "${EVAL_EVERY:-}" ] && EVARG=(--eval-every "$EVAL_EVERY")
    TARG=()
    [ -n "${TASKS:-}" ] && TARG=(--tasks "$TASKS")
    # LRS=0.01 (a comma list): only those learning rates of the preset's grid (sweep name suffixed -lr0.01)
    [ -n "${LRS:-}" ] && TARG+=(--lrs "$LRS")
    # FRESH=1: a new training set every epoch (--fresh-examples; sweep name suffixed -fresh)
    [ "${FRESH:-0}" = 1 ] && TARG+=(--fresh-examples)
    # TOGETHER=1: the rows of ROW as one sweep (table2-row-M1-M2-...), their trainings sharing the JOBS slots
    ROWS=${R//,/ }
    [ "${TOGETHER:-0}" = 1 ] && ROWS=$R
    for row in $ROWS; do
      sname="table2-row-${row//,/-}-${PRECISION:-tf32}"
      [ "${SEED:-0}" != 0 ] && sname="$sname-s$SEED"
      [ "${TASKS:-}" = overwrite ] && sname="$sname-ow"
      [ -n "${LRS:-}" ] && sname="$sname-lr${LRS//,/-}"
      [ "${FRESH:-0}" = 1 ] && sname="$sname-fresh"
      run_sweep "$sname" build-gpu/kata mqar table2 --preset table2 --mixers "$row" --ow-mixers "${OW:-none}" \
        --precision "${PRECISION:-tf32}" --seed "${SEED:-0}" "${EVARG[@]}" "${TARG[@]}" --device cuda \
        --jobs "${JOBS:-3}"
    done
    ;;
  h13) run_sweep h13 build-gpu/kata mqar table2 --preset h13 --device cuda --jobs 3 ;;
  induction)
    # MIXERS / LENGTHS (comma lists): only those trainings, as a sweep named induction-MIXERS-LENGTHS of its own, so
    # that one long training (Sigma2 at 2048: ~15 min alone) is not queued behind the nine short ones again on a
    # fresh machine (partial records do not survive between sessions unless carried)
    # PRECISION=tf32: TF32 products (sweep name suffixed -tf32; the fp32 records stay apart)
    # BACKBONE=transformer: E.2's own backbone (preset induction-e2; sweep name suffixed -e2)
    P=${PRECISION:-f32}
    SUF=""
    [ "$P" != f32 ] && SUF="-$P"
    PRE=induction
    BBARG=()
    case "${BACKBONE:-zoology}" in
      transformer) PRE=induction-e2; SUF="$SUF-e2" ;;
      zoology-mlp) PRE=induction-e2; SUF="$SUF-e2z"; BBARG=(--backbone zoology-mlp) ;;
    esac
    ROPEARG=()
    [ -n "${ROPE:-}" ] && { ROPEARG=(--rope --rope-base "$ROPE"); SUF="$SUF-rope$ROPE"; }
    # FRESH=1: a new training set every epoch (--fresh-examples; sweep name suffixed -fresh)
    [ "${FRESH:-0}" = 1 ] && { ROPEARG+=(--fresh-examples); SUF="$SUF-fresh"; }
    # LRS=0.003 (a comma list): only those learning rates
    [ -n "${LRS:-}" ] && { ROPEARG+=(--lrs "$LRS"); SUF="$SUF-lr${LRS//,/-}"; }
    # STEPS=16000: another training budget than the preset's 8,000 steps (sweep name suffixed -stepsN)
    [ -n "${STEPS:-}" ] && { ROPEARG+=(--steps "$STEPS"); SUF="$SUF-steps$STEPS"; }
    if [ -n "${MIXERS:-}${LENGTHS:-}" ]; then
      M=${MIXERS:-softmax,sigma2} L=${LENGTHS:-128,256,512,1024,2048}
      run_sweep "induction-${M//,/-}-${L//,/-}$SUF" build-gpu/kata induction --preset $PRE --mixers "$M" \
        --lengths "$L" --precision "$P" "${BBARG[@]}" "${ROPEARG[@]}" --device cuda --jobs "${JOBS:-5}"
    else
      run_sweep "induction$SUF" build-gpu/kata induction --preset $PRE --precision "$P" "${BBARG[@]}" "${ROPEARG[@]}" \
        --device cuda --jobs "${JOBS:-5}"
    fi
    ;;
  edit-torch)
    t1=$(date +%s)
    build-gpu/hebb edit base --device cuda --epochs 1 --progress none --out "$Q/base1.h5" > "$Q/base1.out" 2>&1
    log "memcap base, one epoch: $(grep -E 'train .* s' "$Q/base1.out" | tail -1) ($(( $(date +%s) - t1 )) s)"
    timeout "$(left)" python3 experiments/bench/edit_torch.py --eval-prompts 32768 > "$Q/edit_torch.json" 2> "$Q/edit_torch.err"
    log "torch: $(tail -1 "$Q/edit_torch.json")"
    ;;
  swap-seeds)
    ensure_base
    # one run: FRACTION EXPERT_SEED -> $Q/swap_F_S.h5 (kept once written: hebb writes through a temporary)
    swap_one() {
      local out=$Q/swap_$1_$2.h5
      [ -f "$out" ] && return 0
      timeout "$(left)" build-gpu/hebb edit run --device cuda --method swap --fraction "$1" --base "$Q/base.h5" \
        --expert-seed "$2" --progress none --out "$out" > "$Q/swap_$1_$2.out" 2>&1
      log "swap_$1_$2: rc $?, $(grep -oE '(score|r_NF) [0-9.]+' "$Q/swap_$1_$2.out" | tr '\n' ' ')$(grep -o 'non-fact CE by position:.*' "$Q/swap_$1_$2.out")"
    }
    # one swap at a time (two at once share the GPU and finish no sooner); SWAPS lists FRACTION:EXPERT_SEED runs,
    # the grid's own seed (42) first; a run needs about 80 s alone at paper scale
    for run in ${SWAPS:-0.1:42 0.1:1 0.1:2 0.1:3 0.1:4 0.05:42 0.05:1 0.05:2 0.02:42 0.02:1 0.02:2}; do
      [ "$(left)" -lt 100 ] && { log "no time left in this call (LIMIT $LIMIT s); run again"; break; }
      swap_one "${run%%:*}" "${run##*:}"
    done
    for o in "$Q"/swap_*.out; do [ -f "$o" ] && echo "$(basename "$o" .out): $(grep -oE '(score|r_NF) [0-9.]+' "$o" | tr '\n' ' ')"; done
    ;;
  *) echo "stage '$STAGE' has no branch here (add it to both case lists)" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# experiments/slurm/margin_sweep_array.sh on a real single-node SLURM (Debian's slurm-wlm): starts
# slurmctld + slurmd in a temp folder (auth/none, proctrack/linuxproc, task/none, loopback only),
# submits the example on a tiny grid as a stepped array (0-4:2 = 3 shards) plus its merge job, waits
# (bounded), and checks that the merged result prints the same table as a run without SLURM.
# Skips (exit 77, with a message) when slurm is not installed, not root, or the daemons do not start.
# Env: HEBB (executable), MEMCAP_SRC (repository root).
set -u
: "${HEBB:?set HEBB to the hebb executable}"
src=${MEMCAP_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
skip() { echo "SKIP: $*"; exit 77; }
for b in slurmctld slurmd sbatch squeue sinfo; do
  command -v "$b" >/dev/null 2>&1 || [[ -x /usr/sbin/$b ]] || skip "$b not installed (apt-get install slurm-wlm)"
done
[[ $(id -u) -eq 0 ]] || skip "needs root to start slurmd"
PATH=$PATH:/usr/sbin
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
host=$(hostname -s)
port=$((20000 + RANDOM % 20000))
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/work"
cat >"$tmp/slurm.conf" <<EOF
ClusterName=memcaptest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SwitchType=switch/none
MpiDefault=none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MailProg=/bin/true
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" >"$tmp/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$tmp/slurmd.out" 2>&1 &
pids+=($!)
state=
for _ in $(seq 60); do
  state=$(timeout 5 sinfo -h -o %t 2>/dev/null | head -n1)
  [[ $state == idle ]] && break
  sleep 0.5
done
if [[ $state != idle ]]; then
  tail -n 5 "$tmp/slurmctld.log" "$tmp/slurmd.log" "$tmp/slurmctld.out" "$tmp/slurmd.out" 2>/dev/null
  skip "the local slurmctld/slurmd did not come up (node state '${state:-none}')"
fi

args="--widths 64,65,66 --seeds 2 --facts 64 --dim 16"
cd "$tmp/work" || exit 1
HEBB=$HEBB OUT=results/tiny.h5 ARRAY=0-4:2 SWEEP_ARGS=$args timeout 30 bash "$src/experiments/slurm/margin_sweep_array.sh" \
  || { echo "FAIL: submission"; exit 1; }
done_=0
for _ in $(seq 240); do  # at most 120 s
  [[ -z $(timeout 5 squeue -h 2>/dev/null) ]] && { done_=1; break; }
  sleep 0.5
done
[[ $done_ -eq 1 ]] || { echo "FAIL: jobs still queued after 120 s"; timeout 5 squeue; tail -n 20 logs/*; exit 1; }
ls results logs
if [[ ! -f results/tiny.h5 ]]; then echo "FAIL: no merged result"; tail -n 20 logs/*; exit 1; fi
# shellcheck disable=SC2086
"$HEBB" margin-sweep $args --out ref.h5 --progress none >ref.txt 2>/dev/null || { echo "FAIL: reference run"; exit 1; }
# --resume on the merged file: complete, nothing run, and it prints the same table as the reference.
# shellcheck disable=SC2086
"$HEBB" margin-sweep $args --out results/tiny.h5 --resume >merged.txt 2>merged.err || { echo "FAIL: resume on merged"; cat merged.err; exit 1; }
grep -q "is complete: nothing to do" merged.err || { echo "FAIL: merged result not seen as complete"; cat merged.err; exit 1; }
if ! diff ref.txt merged.txt; then echo "FAIL: merged array result differs from the run without SLURM"; exit 1; fi
grep -h "wrote" logs/*.out
echo "slurm array (0-4:2, 3 shards) + merge equals the unsharded run"

#!/usr/bin/env bash
# cluster_e2e.sh mpi|slurm ROOT DATA WORK — rnn_dist on an emulated cluster of
# two nodes (tests/cluster/up.sh), end to end. Exit 77 (skip) with the reason
# where this machine cannot make one (not root, no network namespaces, Slurm
# or munge missing).
#  mpi:   2 nodes x 2 ranks through mpirun and a hostfile train the same
#         weights as 1 rank with the same global batch, and the start-up
#         lines show each host's ranks and local ranks; then a node's ranks
#         are killed mid-run: mpirun ends every rank within comm.timeout_s,
#         naming the lost rank and its node, and the last checkpoint resumes.
#  slurm: sbatch --nodes=2 launch/slurm.sbatch, preempted with
#         scancel --signal=USR1, checkpoints, is requeued and resumes with
#         --resume auto; its final weights equal bitwise those of the same
#         job run without a stop.
set -uo pipefail
mode=$1 root=$2 data=$3 work=$4
python=${RNND_PYTHON:-/usr/bin/python3}
bin=${RNND_BIN:-$root/build/rnn_dist}
skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "the emulated cluster needs root (network namespaces)"
if [ "$mode" = slurm ]; then
  for tool in sbatch slurmctld slurmd munged; do
    command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || skip "$tool not installed (launch/install_deps.sh --with-test-tools)"
  done
fi
rm -rf "$work"; mkdir -p "$work"
export RNND_CLUSTER_DIR=$work/cluster
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi; }
# the daemons' logs stay in WORK/logs after the cluster is gone
trap 'cp -r "$RNND_CLUSTER_DIR/slurm/log" "$work/logs" 2>/dev/null; "$root/tests/cluster/down.sh" >/dev/null 2>&1' EXIT
up_args=(2 --rate 10gbit)
[ "$mode" = slurm ] && up_args+=(--slurm)
if ! "$root/tests/cluster/up.sh" "${up_args[@]}" > "$work/up.log" 2>&1; then
  grep -q "cannot create network namespaces\|needs root\|not found" "$work/up.log" &&
    skip "$(grep -m1 'tests/cluster' "$work/up.log")"
  cat "$work/up.log"; echo "FAIL the emulated cluster did not come up"; exit 1
fi
# shellcheck disable=SC1091
source "$RNND_CLUSTER_DIR/env.sh"
small=(--set data.dir="$data" --set data.valid=none --set data.test=none --set model.embed=32 --set model.hidden=32
       --set model.dropout=0.2 --set train.global_batch=12 --set train.lr=0.003 --set train.threads=1
       --set comm.bucket_mb=0.05)
same_weights() {  # same_weights A.h5 B.h5 TOLERANCE: every float tensor within TOLERANCE (0: bitwise)
  "$python" - "$@" <<'PY'
import sys, h5py, numpy as np
a, b, tol = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), float(sys.argv[3])
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and o.dtype.kind == "f" else None)
worst = max(float(np.max(np.abs(a[n][()] - b[n][()]), initial=0) / (np.max(np.abs(b[n][()]), initial=0) + 1e-30))
            for n in names)
equal = all(np.array_equal(a[n][()], b[n][()]) for n in names)
print(f"{len(names)} tensors: max relative difference {worst:.2e}, bitwise equal {equal}")
sys.exit(0 if (equal if tol == 0 else worst <= tol) else 1)
PY
}

run_mpi() {
  local out=$work/two_nodes
  timeout 180 mpirun -np 4 --hostfile "$RNND_CLUSTER_HOSTFILE" --map-by ppr:2:node --bind-to none \
    "$bin" --config "$root/configs/quickstart.ini" "${small[@]}" --set train.steps=40 --set output.dir="$out" \
    > "$out.log" 2>&1
  local rc=$?
  check "2 nodes x 2 ranks exit 0 (got $rc)" '[ $rc -eq 0 ] && [ -f "$out/model.h5" ]'
  check "start-up names rnnd-n1's ranks and local ranks" 'grep -q "host rnnd-n1: ranks 0 1 as local ranks 0 1 of 2" "$out.log"'
  check "start-up names rnnd-n2's ranks and local ranks" 'grep -q "host rnnd-n2: ranks 2 3 as local ranks 0 1 of 2" "$out.log"'
  "$bin" --config "$root/configs/quickstart.ini" "${small[@]}" --set train.steps=40 --set output.dir="$work/one_rank" \
    > "$work/one_rank.log" 2>&1
  check "1 rank exits 0" '[ $? -eq 0 ]'
  # the sums of 4 ranks round in another order than 1 rank's (as on one node)
  check "2 x 2 ranks train the weights of 1 rank" 'same_weights "$out/model.h5" "$work/one_rank/model.h5" 1e-5'

  # a node dies: its ranks are killed once a checkpoint exists
  local dead=$work/dead timeout_s=10
  timeout 300 mpirun -np 4 --hostfile "$RNND_CLUSTER_HOSTFILE" --map-by ppr:2:node --bind-to none \
    "$bin" --config "$root/configs/quickstart.ini" "${small[@]}" --set train.steps=100000 \
    --set output.checkpoint_every=20 --set comm.timeout_s=$timeout_s --set output.dir="$dead" > "$dead.log" 2>&1 &
  local job=$!
  for _ in $(seq 1 600); do [ -e "$dead/latest" ] && break; sleep 0.1; done
  local killed_at pid
  killed_at=$(date +%s.%N)
  for pid in $(ip netns pids rnnd-n2); do [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = rnn_dist ] && kill -9 "$pid"; done
  wait "$job"; rc=$?
  local took
  took=$(echo "$(date +%s.%N) - $killed_at" | bc)
  echo "after the kill every rank ended in $took s (exit $rc)"
  check "the job ends non-zero (got $rc) within comm.timeout_s ($took s)" \
    '[ $rc -ne 0 ] && [ "$(echo "$took < $timeout_s" | bc)" -eq 1 ]'
  check "the error names the lost rank and its node" 'grep -Eq "rank [23] .*on node rnnd-n2" "$dead.log"'
  "$bin" --config "$root/configs/quickstart.ini" "${small[@]}" --set train.steps=45 --set output.dir="$dead" \
    --resume auto > "$dead.resume.log" 2>&1
  check "the last checkpoint resumes (exit $?)" 'grep -q "resumed from" "$dead.resume.log" && [ -f "$dead/model.h5" ]'
}

# job_state JOB: Slurm's state of a job (empty once forgotten)
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_job() {  # wait_job JOB SECONDS: until the job has ended
  local i
  for i in $(seq 1 $(($2 * 5))); do
    case $(job_state "$1") in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|"") return 0 ;; esac
    sleep 0.2
  done
  return 1
}

run_slurm() {
  export LAUNCHER=mpirun RNND_ROOT=$root RNND_BIN=$bin
  local opts=(--nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --chdir="$work")
  local args=("$root/configs/quickstart.ini" data.dir="$data" data.valid=none data.test=none model.embed=32
              model.hidden=32 train.global_batch=12 train.steps=150 train.log_every=10 comm.bucket_mb=0.5)
  local job
  job=$(sbatch --parsable "${opts[@]}" --output="$work/preempted.out" "$root/launch/slurm.sbatch" "${args[@]}" \
        output.dir="$work/preempted")
  # preempt once training runs: Slurm's signal to the batch shell, which passes it on
  for _ in $(seq 1 300); do grep -q "^step " "$work/preempted.out" 2>/dev/null && break; sleep 0.1; done
  scancel --signal=USR1 --batch "$job"
  for _ in $(seq 1 300); do
    [ "$(scontrol show job "$job" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')" = 1 ] && break; sleep 0.1
  done
  check "preempted job asked for and got a requeue" 'grep -q "requeueing job $job" "$work/preempted.out"'
  # Slurm holds a requeued job for two minutes before it may start again; skip
  # that wait, but only once the old start is gone and a second has passed:
  # a new start within the second of the old one's end has its credential
  # revoked with the old one's ("Job credential revoked"), and the job fails
  for _ in $(seq 1 300); do [ "$(job_state "$job")" = PENDING ] && break; sleep 0.1; done
  sleep 2
  scontrol update JobId="$job" StartTime=now
  wait_job "$job" 120 || echo "job $job did not end within 120 s"
  check "the requeued job completed (state $(job_state "$job"))" '[ "$(job_state "$job")" = COMPLETED ]'
  check "the first start checkpointed on the signal" 'grep -q "preempted: every rank stopped after step" "$work/preempted.out"'
  check "the second start resumed" 'grep -q "resumed from" "$work/preempted.out" && grep -q "restart 1" "$work/preempted.out"'
  local ref
  ref=$(sbatch --parsable "${opts[@]}" --output="$work/uninterrupted.out" "$root/launch/slurm.sbatch" "${args[@]}" \
        output.dir="$work/uninterrupted")
  wait_job "$ref" 120 || echo "job $ref did not end within 120 s"
  check "the uninterrupted job completed (state $(job_state "$ref"))" '[ "$(job_state "$ref")" = COMPLETED ]'
  check "both ran on rnnd-n1 and rnnd-n2" 'grep -q "host rnnd-n2: ranks 2 3" "$work/uninterrupted.out"'
  check "preempted and requeued = uninterrupted, bitwise" \
    'same_weights "$work/preempted/model.h5" "$work/uninterrupted/model.h5" 0'
}

case $mode in
  mpi) run_mpi ;;
  slurm) run_slurm ;;
  *) echo "usage: cluster_e2e.sh mpi|slurm ROOT DATA WORK" >&2; exit 2 ;;
esac
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

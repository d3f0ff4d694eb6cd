#!/usr/bin/env bash
# launch_e2e.sh ROOT DATA WORK — the launch scripts end to end on this machine:
#  - launch/local.sh: its command line (dry run) for 2 ranks on this node,
#    then a real 2-rank run that trains and writes its model;
#  - launch/scaling.sh at 1, 2 and 4 ranks: every run, the table with three
#    rows and the PNG;
#  - launch/slurm.sbatch under stand-ins for srun and scontrol: a run stopped
#    by SIGUSR1 (the RNND_FAULT_SIGNAL hook) exits with the preemption code,
#    the script asks Slurm to requeue, and the requeued start resumes from the
#    checkpoint and finishes with exit code 0.
set -uo pipefail
root=$1 data=$2 work=$3
rm -rf "$work"; mkdir -p "$work/bin"
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
small=(data.dir="$data" data.valid=none data.test=none model.embed=32 model.hidden=32 train.log_every=5
       train.global_batch=12)

dry=$(RNND_DRY_RUN=1 "$root/launch/local.sh" 2 "$root/configs/quickstart.ini" train.steps=3 2>&1)
check "local.sh dry run names 2 ranks and train.threads" '[[ $dry == *"-np 2"* && $dry == *"train.threads="* ]]'
"$root/launch/local.sh" 2 "$root/configs/quickstart.ini" "${small[@]}" train.steps=6 output.dir="$work/local" \
  > "$work/local.log" 2>&1
rc=$?
check "local.sh 2-rank run exits 0 (got $rc) and writes its model" \
  '[ $rc -eq 0 ] && [ -f "$work/local/model.h5" ] && grep -q "2 ranks" "$work/local.log"'

"$root/launch/scaling.sh" --out "$work/scaling" "$root/configs/quickstart.ini" "1 2 4" "${small[@]}" train.steps=12 \
  > "$work/scaling.log" 2>&1
rc=$?
check "scaling.sh 1 2 4 exits 0 (got $rc) with a table" '[ $rc -eq 0 ] && [ -f "$work/scaling/scaling.txt" ]'
rows=$(grep -cE '^ +[124] +[0-9]+' "$work/scaling/scaling.txt" 2>/dev/null || echo 0)
check "scaling table has rows for 1, 2 and 4 ranks (got $rows)" '[ "$rows" -eq 3 ]'
check "scaling plot written" '[ -s "$work/scaling/scaling.png" ]'

# Slurm stand-ins: srun runs the command as one task; scontrol records requeues.
cat > "$work/bin/srun" <<'SH'
#!/usr/bin/env bash
while [[ $1 == --* ]]; do shift; done
exec "$@"
SH
cat > "$work/bin/scontrol" <<'SH'
#!/usr/bin/env bash
echo "$*" >> "$SCONTROL_LOG"
SH
chmod +x "$work/bin/srun" "$work/bin/scontrol"
export PATH="$work/bin:$PATH" SCONTROL_LOG="$work/scontrol.log" SLURM_JOB_ID=4242 SLURM_CPUS_PER_TASK=1
out="$work/slurm"
RNND_FAULT_SIGNAL=0:5 RNND_ROOT="$root" bash "$root/launch/slurm.sbatch" "$root/configs/quickstart.ini" \
  "${small[@]}" train.steps=10 output.dir="$out" > "$work/slurm1.log" 2>&1
first=$?
check "preempted start exits 0 after asking for a requeue (exit $first)" \
  '[ $first -eq 0 ] && grep -q "requeue 4242" "$SCONTROL_LOG" && [ -f "$out/latest" ]'
SLURM_RESTART_COUNT=1 RNND_ROOT="$root" bash "$root/launch/slurm.sbatch" "$root/configs/quickstart.ini" \
  "${small[@]}" train.steps=10 output.dir="$out" > "$work/slurm2.log" 2>&1
second=$?
check "requeued start resumes and finishes (exit $second)" \
  '[ $second -eq 0 ] && grep -q "resumed from" "$work/slurm2.log" && [ -f "$out/model.h5" ] && [ "$(wc -l < "$SCONTROL_LOG")" -eq 1 ]'
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

#!/usr/bin/env python3
"""Checkpoints and resume: a run stopped by a signal and resumed ends
bitwise where an uninterrupted run ends.

For GRU and LSTM, fp32 and fp16, 1 and 2 ranks: train N steps straight;
then train again, stopped after K steps by SIGTERM (raised by the
RNND_FAULT_SIGNAL test hook inside the process, through the real handler;
on the last rank, so with 2 ranks one that is not rank 0),
which must checkpoint and exit 0, and resume with --resume auto to N steps.
The final parameters must be bitwise equal, metrics.h5 must hold every
step once, and its elapsed_s must go on from the checkpoint's training
clock (never fall). Also:
  - resume at another world size (stopped at 4 ranks, resumed at 2 and at 1):
    the same global batches, losses within 1e-4 of the uninterrupted 4-rank run;
  - a second signal while the checkpoint is being written changes nothing;
  - metrics.h5 can be read (h5py) while the job trains;
  - SIGKILL during a checkpoint write (RNND_FAULT_CHECKPOINT_DELAY holds the
    .tmp file open for a while): the previous checkpoint and `latest` stay
    valid, and --resume auto continues from them to the same end;
  - output.keep: only the newest checkpoints stay, `latest` names the newest;
  - a step both checkpoint_every's and the last (or the preempted) one is
    checkpointed once; a checkpoint without /state train_seconds (older
    builds) resumes bitwise;
  - a real SIGUSR1 (and SIGTERM) sent to mpirun from outside stops a 2-rank
    job with a checkpoint (SIGUSR1: exit 0) that resumes;
  - a checkpoint evaluated by PyTorch (bench/torch_lm.py) gives rnn_dist
    eval's loss within 0.1%;
  - rnn_plot (src/tools/rnn_plot.py) turns the resumed run's metrics into PNGs;
  - a truncated checkpoint, one with a flipped byte (Fletcher32), one of
    another model shape and one of a newer format version: one error line,
    exit 2.
usage: resume_e2e.py --rnn-dist BIN --mpirun MPIEXEC --data DIR --work DIR"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, mpi_env, read_series, model_params  # noqa: E402

p = argparse.ArgumentParser()
for k in ["--rnn-dist", "--mpirun", "--data", "--work", "--plot", "--torch-lm"]:
    p.add_argument(k, required=True)
a = p.parse_args()
shutil.rmtree(a.work, ignore_errors=True)
os.makedirs(a.work)
env = mpi_env()
N, K = 16, 7
common = ["--set", f"data.dir={a.data}", "--set", "data.test=none", "--set", "data.valid=none",
          "--set", f"train.steps={N}", "--set", "model.embed=32", "--set", "model.hidden=32",
          "--set", "model.dropout=0.1", "--set", "train.global_batch=12", "--set", "train.log_every=4",
          "--set", "train.threads=1", "--set", "train.lr_schedule=cosine", "--set", "train.warmup_steps=3",
          "--set", "metrics.hist_every=4"]
checks = Checks()
check = checks.check


def run(ranks, out, extra=(), hook=None):
    cmd = [a.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", a.rnn_dist, *common,
           "--set", f"output.dir={out}", *extra]
    e = dict(env, RNND_FAULT_SIGNAL=hook) if hook else env
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=300)
    if r.returncode != 0:
        print(f"--- {out}: exit {r.returncode}\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    return r


def train_losses(out):
    rows = read_series(os.path.join(out, "metrics.h5"))
    return rows["step"], rows["loss"]


for cell in ["gru", "lstm"]:
    for precision in ["fp32", "fp16"]:
        for ranks in [1, 2]:
            name = f"{cell}_{precision}_np{ranks}"
            extra = ["--set", f"model.cell={cell}", "--set", f"train.precision={precision}"]
            straight, split = os.path.join(a.work, name + "_straight"), os.path.join(a.work, name + "_split")
            r1 = run(ranks, straight, extra)
            r2 = run(ranks, split, extra, hook=f"{ranks - 1}:{K}")  # at 2 ranks the signal reaches rank 1 only
            check(r2.returncode == 0 and "preempted: every rank stopped after step 7" in r2.stdout,
                  f"{name}: SIGTERM did not stop the run at step {K} with exit 0")
            check(not os.path.exists(os.path.join(split, "model.h5")), f"{name}: a preempted run wrote model.h5")
            with h5py.File(os.path.join(split, f"ckpt_step{K:08d}.h5"), "r") as f:
                clock_at_stop = float(f["state"].attrs.get("train_seconds", -1.0))
            r3 = run(ranks, split, [*extra, "--resume", "auto"])
            if r1.returncode or r2.returncode or r3.returncode:
                check(False, f"{name}: a run failed")
                continue
            pa, pb = model_params(straight), model_params(split)
            same = all(np.array_equal(pa[k], pb[k]) for k in pa)
            steps, _ = train_losses(split)
            print(f"{name}: stopped at {K}, resumed to {N}: parameters bitwise equal: {same}; metrics steps "
                  f"{steps.min()}..{steps.max()} ({len(steps)} rows)")
            check(same, f"{name}: resumed parameters differ from the uninterrupted run")
            check(list(steps) == list(range(1, N + 1)), f"{name}: metrics steps {list(steps)}")
            with h5py.File(os.path.join(split, "metrics.h5"), "r") as f:
                hist_steps = list(f["hist"]["step"][:])
                gate = f["hist"]["l1_f" if cell == "lstm" else "l1_z"]
                rows_ok = gate.shape == (N // 4, 32) and all(gate[i].sum() > 0 for i in range(gate.shape[0]))
            check(hist_steps == [4, 8, 12, 16] and rows_ok, f"{name}: histograms at steps {hist_steps}")
            # The training clock continues across the resume: the checkpoint of the stop holds the
            # clock after step K's row, the resumed run's first row comes after it, and elapsed_s
            # never falls (a clock restarted at the resume would put step K+1 before the stop).
            elapsed = read_series(os.path.join(split, "metrics.h5"))["elapsed_s"]
            check(0 < elapsed[K - 1] <= clock_at_stop <= elapsed[K] and all(np.diff(elapsed) >= 0),
                  f"{name}: elapsed_s {elapsed[K - 1]:.3f} at step {K}, checkpoint clock {clock_at_stop:.3f}, "
                  f"{elapsed[K]:.3f} at step {K + 1} after the resume")

# Another world size: stop at 4 ranks, resume at 2 and 1.
ref = os.path.join(a.work, "ws4_straight")
run(4, ref)
_, ref_loss = train_losses(ref)
stopped = os.path.join(a.work, "ws4_split")
run(4, stopped, hook=f"0:{K}")
for ranks in [2, 1]:
    out = os.path.join(a.work, f"ws4_to_{ranks}")
    shutil.copytree(stopped, out)
    r = run(ranks, out, ["--resume", "auto"])
    if r.returncode:
        check(False, f"resume at {ranks} ranks failed")
        continue
    steps, loss = train_losses(out)
    rel = np.abs(loss[K:] - ref_loss[K:]) / ref_loss[K:]
    print(f"saved at 4 ranks, resumed at {ranks}: steps {K + 1}..{N} loss max relative difference {rel.max():.2e}")
    check(rel.max() <= 1e-4, f"resume at {ranks} ranks: losses differ by {rel.max():.2e}")

# Retention: checkpoint every 3 steps, keep 2.
keep = os.path.join(a.work, "keep")
run(1, keep, ["--set", "output.checkpoint_every=3", "--set", "output.keep=2"])
kept = sorted(f for f in os.listdir(keep) if f.startswith("ckpt_step"))
latest = open(os.path.join(keep, "latest")).read().strip()
print(f"checkpoint_every 3, keep 2: {kept}, latest -> {latest}")
check(kept == ["ckpt_step00000015.h5", "ckpt_step00000016.h5"], f"kept {kept}")
check(latest == "ckpt_step00000016.h5", f"latest names {latest}")
check(not any(f.endswith(".tmp") for f in os.listdir(keep)), "a .tmp file was left behind")

# A step that is both a checkpoint_every step and the last (or the preempted) one is written once.
once = os.path.join(a.work, "once")
run(1, once, ["--set", "output.checkpoint_every=4"])
lines = [x for x in open(os.path.join(once, "train.log")) if x.startswith(f"checkpoint step {N} ")]
check(len(lines) == 1, f"checkpoint_every 4, {N} steps: step {N} checkpointed {len(lines)} times")
stopped_at_8 = os.path.join(a.work, "once_preempted")
r = run(1, stopped_at_8, ["--set", "output.checkpoint_every=4"], hook="0:8")
lines = [x for x in open(os.path.join(stopped_at_8, "train.log")) if x.startswith("checkpoint step 8 ")]
check(r.returncode == 0 and len(lines) == 1 and "step 8; that step is already checkpointed" in r.stdout,
      f"preempted at checkpoint step 8: exit {r.returncode}, checkpointed {len(lines)} times")
# A checkpoint from before the training clock was saved (no /state train_seconds) still resumes,
# bitwise, its clock starting from 0.
old = os.path.join(a.work, "old_checkpoint.h5")
shutil.copy(os.path.join(stopped_at_8, "ckpt_step00000008.h5"), old)
with h5py.File(old, "r+") as f:
    del f["state"].attrs["train_seconds"]
r = run(1, os.path.join(a.work, "from_old"), ["--resume", old])
same = r.returncode == 0 and all(np.array_equal(v, model_params(os.path.join(a.work, "gru_fp32_np1_straight"))[k])
                                 for k, v in model_params(os.path.join(a.work, "from_old")).items())
check(same and "resumed from" in r.stdout, f"a checkpoint without train_seconds: exit {r.returncode}, bitwise {same}")

# SIGKILL while a checkpoint is being written.
killed = os.path.join(a.work, "killed")
cmd = [a.rnn_dist, *common, "--set", f"output.dir={killed}", "--set", "output.checkpoint_every=4"]
proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        env=dict(env, RNND_FAULT_CHECKPOINT_DELAY="3"))
tmp = os.path.join(killed, "ckpt_step00000008.h5.tmp")
deadline = time.time() + 120
while not os.path.exists(tmp) and time.time() < deadline and proc.poll() is None:
    time.sleep(0.05)
proc.kill()
proc.wait()
latest = open(os.path.join(killed, "latest")).read().strip() if os.path.exists(os.path.join(killed, "latest")) else ""
print(f"killed while writing {os.path.basename(tmp)}: tmp existed {os.path.exists(tmp)}, latest -> {latest}")
check(latest == "ckpt_step00000004.h5", f"after the kill, latest names '{latest}'")
r = run(1, killed, ["--resume", "auto"])
if r.returncode == 0:
    same = all(np.array_equal(v, model_params(os.path.join(a.work, "gru_fp32_np1_straight"))[k])
               for k, v in model_params(killed).items())
    print(f"resumed from step 4 after the kill: parameters equal the uninterrupted run's: {same}")
    check("resumed from" in r.stdout and "step 4" in r.stdout and same, "resume after the kill went wrong")
else:
    check(False, "resume after the kill failed")

# A second signal while the checkpoint is written (held open 2 s by the hook).
twice = os.path.join(a.work, "twice")
cmd = [a.rnn_dist, *common, "--set", f"output.dir={twice}"]
proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        env=dict(env, RNND_FAULT_SIGNAL=f"0:{K}", RNND_FAULT_CHECKPOINT_DELAY="2"))
tmp = os.path.join(twice, f"ckpt_step{K:08d}.h5.tmp")
deadline = time.time() + 120
while not os.path.exists(tmp) and time.time() < deadline and proc.poll() is None:
    time.sleep(0.05)
proc.send_signal(signal.SIGTERM)
output, _ = proc.communicate(timeout=120)
r = run(1, twice, ["--resume", "auto"])
same = r.returncode == 0 and all(np.array_equal(v, model_params(os.path.join(a.work, "gru_fp32_np1_straight"))[k])
                                 for k, v in model_params(twice).items())
print(f"second SIGTERM during the checkpoint write: exit {proc.returncode}; resumed to the uninterrupted result: {same}")
check(proc.returncode == 0 and same, "a second signal during the checkpoint write broke the checkpoint or the exit")

# Signals from outside, to mpirun.
for sig in [signal.SIGUSR1, signal.SIGTERM]:
    out = os.path.join(a.work, f"mpirun_{sig.name}")
    cmd = [a.mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", a.rnn_dist, *common,
           "--set", "train.steps=100000", "--set", f"output.dir={out}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not (
            os.path.exists(os.path.join(out, "metrics.h5")) and os.path.getsize(os.path.join(out, "metrics.h5")) > 0):
        time.sleep(0.1)
    time.sleep(2)  # some steps into training
    rows = -1
    for attempt in range(20):  # the trainer holds the file only while appending
        try:
            with h5py.File(os.path.join(out, "metrics.h5"), "r") as f:
                rows = len(f["train"]["step"])
            break
        except OSError:
            time.sleep(0.05)
    print(f"metrics.h5 read while training: {rows} rows")
    check(rows > 0, "metrics.h5 could not be read while the job was training")
    proc.send_signal(sig)
    try:
        output, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        output = proc.communicate()[0]
    stopped = "preempted: every rank stopped" in output
    latest = os.path.exists(os.path.join(out, "latest"))
    print(f"{sig.name} to mpirun: exit {proc.returncode}, all ranks stopped: {stopped}, checkpoint: {latest}")
    check(stopped and latest, f"{sig.name} to mpirun did not checkpoint")
    if sig == signal.SIGUSR1:
        check(proc.returncode == 0, f"SIGUSR1 to mpirun: exit {proc.returncode}")
        r = run(2, out, ["--set", "train.steps=100", "--resume", "auto"])
        check(r.returncode == 0 and "resumed from" in r.stdout, "resume after SIGUSR1 did not resume")

# PyTorch evaluates a checkpoint like rnn_dist eval does.
ckpt = os.path.join(a.work, "gru_fp32_np1_split", "ckpt_step00000016.h5")
valid = os.path.join(a.data, "valid.h5")
ours = subprocess.run([a.rnn_dist, "eval", "--checkpoint", ckpt, "--data", valid, "--threads", "1"],
                      capture_output=True, text=True, env=env)
theirs = subprocess.run([sys.executable, a.torch_lm, "--eval-only-checkpoint", ckpt, "--data", valid],
                        capture_output=True, text=True, env=env)
try:
    l_ours = float(ours.stdout.strip().splitlines()[-1].split()[1])
    l_theirs = float(theirs.stdout.strip().splitlines()[-1].split()[1])
    rel = abs(l_ours - l_theirs) / l_ours
    print(f"checkpoint eval: rnn_dist loss {l_ours}, PyTorch {l_theirs} (rel {rel:.1e})")
    check(rel < 1e-3, f"PyTorch's loss of the checkpoint differs by {rel:.1e}")
except (IndexError, ValueError):
    check(False, f"checkpoint eval failed: {ours.stderr[-300:]} {theirs.stderr[-300:]}")

# Plots of a resumed run's metrics.
plots = os.path.join(a.work, "plots")
r = subprocess.run([sys.executable, a.plot, os.path.join(a.work, "gru_fp16_np2_split"), keep, "--out", plots],
                   capture_output=True, text=True)
pngs = sorted(f for f in os.listdir(plots) if f.endswith(".png")) if os.path.isdir(plots) else []
print(f"rnn_plot: exit {r.returncode}, {pngs}")
check(r.returncode == 0 and len(pngs) == 9 and "gates_gru_fp16_np2_split.png" in pngs and all(os.path.getsize(os.path.join(plots, f)) > 5000 for f in pngs),
      f"rnn_plot: exit {r.returncode}, {pngs}, {r.stderr[-300:]}")

# Bad checkpoints: one line, exit 2.
good = os.path.join(keep, "ckpt_step00000016.h5")
bad_dir = os.path.join(a.work, "bad")
os.makedirs(bad_dir)
with open(good, "rb") as f:
    data = bytearray(f.read())
cases = {}
cases["truncated"] = data[: len(data) // 2]
with h5py.File(good, "r") as f:  # flip a byte inside the embedding's stored data
    offset = f["model"]["embedding.weight"].id.get_chunk_info(0).byte_offset
flipped = bytearray(data)
flipped[offset + 1000] ^= 0x40
cases["flipped"] = flipped
for name, content in cases.items():
    with open(os.path.join(bad_dir, name + ".h5"), "wb") as f:
        f.write(content)
shutil.copy(good, os.path.join(bad_dir, "newer.h5"))
with h5py.File(os.path.join(bad_dir, "newer.h5"), "a") as f:
    f.attrs["format_version"] = np.int64(99)
expect = {"truncated": "", "flipped": "embedding.weight", "newer": "format_version 99"}
for name, needle in expect.items():
    path = os.path.join(bad_dir, name + ".h5")
    r = subprocess.run([a.rnn_dist, *common, "--set", f"output.dir={bad_dir}/out_{name}", "--resume", path],
                       capture_output=True, text=True, env=env, timeout=60)
    lines = r.stderr.strip().splitlines()
    print(f"{name} checkpoint: exit {r.returncode}: {lines}")
    check(r.returncode == 2 and len(lines) == 1 and path in lines[0] and needle in lines[0],
          f"{name} checkpoint: exit {r.returncode}, stderr {lines}")
    check(not os.path.exists(f"{bad_dir}/out_{name}"), f"{name} checkpoint: the failed run still wrote output")
r = subprocess.run([a.rnn_dist, *common, "--set", "model.hidden=48", "--set", f"output.dir={bad_dir}/out_shape",
                    "--resume", good], capture_output=True, text=True, env=env, timeout=60)
lines = r.stderr.strip().splitlines()
print(f"other shape: exit {r.returncode}: {lines}")
check(r.returncode == 2 and len(lines) == 1 and "checkpoint of another model shape" in lines[0]
      and "rnn.weight_hh_l0 [96, 32] (expected [144, 48])" in lines[0],
      f"another shape: exit {r.returncode}, stderr {lines}")

checks.finish()

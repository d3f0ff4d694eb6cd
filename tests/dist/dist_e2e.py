#!/usr/bin/env python3
"""Data-parallel training runs with 1..4 ranks compute the same training.

Each run trains the same 30 steps (same global batch, dropout on, Adam) and
writes the loss of every step to metrics.h5; comm.check_every = 1 makes the
ranks compare a checksum of their parameters after every step, so a run that
finishes proves the replicas were bitwise equal after each step. Checks:
  - fp32 wire: every step's loss within 1e-5 (relative) of one rank's;
  - fp16 wire: within 1e-3; bf16 wire: within 1e-2;
  - train.precision fp16 / bf16 (16-bit wire too) at 2 ranks vs 1 rank: 1e-3 / 1e-2;
  - a token budget (train.global_batch_tokens) at 2 ranks matches 1 rank;
  - the replica check fires: a parameter bit flipped on one rank
    (RNND_FAULT_FLIP_PARAM) stops the job with a message naming step and rank;
  - a rank that fails (a bad data path on rank 1 only) brings the whole job
    down with a clear message and a non-zero exit, never a hang.

usage: dist_e2e.py --rnn-dist BIN --mpirun MPIEXEC --data DIR --work DIR"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, mpi_env, read_series  # noqa: E402

p = argparse.ArgumentParser()
for k in ["--rnn-dist", "--mpirun", "--data", "--work"]:
    p.add_argument(k, required=True)
a = p.parse_args()
shutil.rmtree(a.work, ignore_errors=True)
os.makedirs(a.work)
env = mpi_env()
STEPS = 30
common = ["--set", f"data.dir={a.data}", "--set", "data.test=none", "--set", "data.valid=none",
          "--set", f"train.steps={STEPS}", "--set", "model.embed=32", "--set", "model.hidden=32",
          "--set", "model.dropout=0.2", "--set", "train.global_batch=12", "--set", "train.lr=0.003",
          "--set", "train.log_every=10", "--set", "train.threads=1", "--set", "comm.check_every=1",
          "--set", "comm.bucket_mb=0.05"]
checks = Checks()
check = checks.check


def launch(ranks, name, extra=(), extra_env=None, timeout=300):
    out = os.path.join(a.work, name)
    cmd = [a.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", a.rnn_dist, *common,
           "--set", f"output.dir={out}", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(env, **(extra_env or {})), timeout=timeout)
    return r, out


def train(ranks, name, extra=()):
    r, out = launch(ranks, name, extra)
    if r.returncode != 0:
        print(f"--- {name}: exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        check(False, f"{name}: exit {r.returncode}")
        return None
    rows = read_series(os.path.join(out, "metrics.h5"))
    check(len(rows["step"]) == STEPS and list(rows["step"]) == list(range(1, STEPS + 1)),
          f"{name}: metrics has steps {list(rows['step'])}")
    return rows


def compare(name, rows, ref, tolerance):
    if rows is None or ref is None:
        return
    rel = np.abs(rows["loss"] - ref["loss"]) / ref["loss"]
    print(f"{name}: max relative loss difference over {STEPS} steps {rel.max():.2e} (limit {tolerance:g}); "
          f"tokens equal: {bool(np.all(rows['tokens'] == ref['tokens']))}; mean imbalance "
          f"{rows['imbalance'].mean():.4f}")
    check(rel.max() <= tolerance, f"{name}: loss differs by {rel.max():.2e} > {tolerance:g}")
    check(np.all(rows["tokens"] == ref["tokens"]), f"{name}: global batches differ from one rank's")


ref = train(1, "w1")
for ranks in [2, 3, 4]:
    compare(f"{ranks} ranks fp32 wire", train(ranks, f"w{ranks}"), ref, 1e-5)
for wire, tol in [("fp16", 1e-3), ("bf16", 1e-2)]:
    for ranks in [2, 4]:
        compare(f"{ranks} ranks {wire} wire", train(ranks, f"w{ranks}_{wire}", ["--set", f"comm.grad_dtype={wire}"]),
                ref, tol)
for precision, tol in [("fp16", 1e-3), ("bf16", 1e-2)]:  # 16-bit weights, activations and wire
    mixed = ["--set", f"train.precision={precision}"]
    compare(f"{precision} precision, 2 ranks vs 1", train(2, f"p2_{precision}", mixed), train(1, f"p1_{precision}", mixed),
            tol)
budget = ["--set", "train.global_batch_tokens=300"]
compare("token budget, 2 ranks vs 1", train(2, "b2", budget), train(1, "b1", budget), 1e-5)

# The replica check fires on a one-bit difference.
r, _ = launch(2, "flip", extra_env={"RNND_FAULT_FLIP_PARAM": "1:5"})
print(f"flip: exit {r.returncode}; stderr: {r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else ''}")
check(r.returncode != 0, "a flipped parameter bit did not stop the run")
check("replicas diverged: after step 5 the parameters of rank 1 differ from rank 0's" in r.stderr,
      "the replica check did not name step 5 and rank 1")

# One rank with a bad data path: the whole job ends, with the reason.
bad = [a.mpirun, "-np", "1", "--oversubscribe", "--bind-to", "none", a.rnn_dist, *common,
       "--set", f"output.dir={a.work}/bad", ":", "-np", "1", a.rnn_dist, *common,
       "--set", "data.train=/absent/train.h5", "--set", f"output.dir={a.work}/bad"]
try:
    r = subprocess.run(bad, capture_output=True, text=True, env=env, timeout=60)
    print(f"bad data on rank 1: exit {r.returncode}")
    check(r.returncode != 0, "a failing rank left the job with exit 0")
    check("rnn_dist: error (rank 1 of 2): /absent/train.h5: cannot open (No such file or directory)" in r.stderr,
          "the failing rank's message is missing: " + r.stderr[-500:])
except subprocess.TimeoutExpired:
    check(False, "a failing rank left the job hanging (60 s)")

checks.finish()

#!/usr/bin/env python3
"""Numerical faults: a NaN in one rank's gradient (RNND_FAULT_NAN_GRAD, rank 1
of 2, step index 6).

  - fp32 (no loss scaling to absorb it): the job stops with exit code 1 and one
    line from rank 0 naming the step, the tensor that holds the non-finite
    values and the last good checkpoint; metrics.h5 holds the steps up to it;
  - fp16: the loss scaler skips the step, halves the scale, counts it, and the
    run ends normally.
usage: nan_e2e.py --rnn-dist BIN --mpirun MPIEXEC --data DIR --work DIR"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, mpi_env, read_series, e2e_arguments  # noqa: E402

a = e2e_arguments(["--rnn-dist", "--mpirun", "--data", "--work"])
checks = Checks()
check = checks.check


def run(name, precision):
    out = os.path.join(a.work, name)
    cmd = [a.mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", a.rnn_dist,
           "--set", f"data.dir={a.data}", "--set", "data.valid=none", "--set", "data.test=none",
           "--set", "model.embed=32", "--set", "model.hidden=32", "--set", "train.global_batch=12",
           "--set", "train.threads=1", "--set", "train.steps=10", "--set", "output.checkpoint_every=4",
           "--set", f"train.precision={precision}", "--set", f"output.dir={out}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(mpi_env(), RNND_FAULT_NAN_GRAD="1:6"),
                       timeout=300)
    return out, r


out, r = run("fp32", "fp32")
errors = [l for l in r.stderr.splitlines() if "error" in l]
pattern = (r"rnn_dist: error: step 7: non-finite gradient .* in fp32 .*: in decoder\.bias \(1 values\); stopping\. "
           r"Last checkpoint: .*ckpt_step00000004\.h5")
check(r.returncode != 0 and len(errors) == 1 and re.search(pattern, errors[0]) is not None,
      f"fp32 NaN stops the job (exit {r.returncode}) with one line: {errors}")
steps = read_series(os.path.join(out, "metrics.h5"))["step"]
check(list(steps) == list(range(1, 8)) or list(steps) == list(range(7)),
      f"metrics.h5 holds the steps up to the failure: {list(steps)}")

out, r = run("fp16", "fp16")
m = re.search(r"(\d+) steps skipped for inf/NaN gradients", r.stdout)
check(r.returncode == 0 and m is not None and int(m.group(1)) == 1,
      f"fp16: the scaler skips the step and the run ends normally (exit {r.returncode}, "
      f"{m.group(0) if m else 'no skip count'})")
checks.finish()

#!/usr/bin/env python3
"""A SIGTERM during start-up (after the data is loaded, before the first
step; RNND_FAULT_SIGNAL_STARTUP on rank 1 of 2): every rank stops at the
first step boundary, rank 0 writes the step-0 checkpoint, the job exits
with the preemption code (0), and --resume auto then trains to the end with
the same parameters as a run that was never interrupted. Also a start-up
error of the whole job: 3 ranks for a global batch of 2 stop with the line
naming both numbers and a non-zero exit code.
usage: startup_signal_e2e.py --rnn-dist BIN --mpirun MPIEXEC --data DIR --work DIR"""
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, mpi_env, e2e_arguments, model_params  # noqa: E402

a = e2e_arguments(["--rnn-dist", "--mpirun", "--data", "--work"])
checks = Checks()
check = checks.check


def run(out, hook=None, extra=()):
    cmd = [a.mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", a.rnn_dist,
           "--set", f"data.dir={a.data}", "--set", "data.valid=none", "--set", "data.test=none",
           "--set", "model.embed=32", "--set", "model.hidden=32", "--set", "train.global_batch=12",
           "--set", "train.threads=1", "--set", "train.steps=8", "--set", f"output.dir={out}", *extra]
    env = dict(mpi_env(), RNND_FAULT_SIGNAL_STARTUP=hook) if hook else mpi_env()
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


straight = os.path.join(a.work, "straight")
check(run(straight).returncode == 0, "uninterrupted run")
out = os.path.join(a.work, "signalled")
r = run(out, hook="1")
check(r.returncode == 0 and "preempted: every rank stopped after step 0" in r.stdout
      and os.path.exists(os.path.join(out, "ckpt_step00000000.h5")),
      f"signal during start-up: exit {r.returncode}, step-0 checkpoint written, said so")
r = run(out, extra=["--resume", "auto"])
same = r.returncode == 0 and all(np.array_equal(v, model_params(straight)[k]) for k, v in model_params(out).items())
check(same, "resumed run ends with the uninterrupted run's parameters")
cmd = [a.mpirun, "-np", "3", "--oversubscribe", "--bind-to", "none", a.rnn_dist, "--set", f"data.dir={a.data}",
       "--set", "train.global_batch=2", "--set", f"output.dir={a.work}/world3"]
r = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=120)
named = [l for l in r.stderr.splitlines() if "config: world size 3 is larger than train.global_batch = 2" in l]
check(r.returncode != 0 and named, f"3 ranks for a global batch of 2: exit {r.returncode}, {named[:1]}")
checks.finish()

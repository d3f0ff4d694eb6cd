#!/usr/bin/env python3
"""Data parallelism over MPI ranks computes the same training as one rank:
1, 2 and 3 ranks train the same steps (dropout on) and end with the same
parameters and validation loss, up to float summation order. SGD rather than
Adam: Adam's m / sqrt(v) turns last-bit differences of near-zero gradients
into full-size updates, which would hide real differences in noise.

usage: ranks_e2e.py --rnn-dist BIN --mpirun MPIEXEC --data DIR --work DIR"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

p = argparse.ArgumentParser()
for k in ["--rnn-dist", "--mpirun", "--data", "--work"]:
    p.add_argument(k, required=True)
a = p.parse_args()
shutil.rmtree(a.work, ignore_errors=True)
os.makedirs(a.work)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
common = ["--set", f"data.dir={a.data}", "--set", "data.test=none", "--set", "train.steps=15",
          "--set", "model.embed=32", "--set", "model.hidden=32", "--set", "model.dropout=0.2",
          "--set", "train.global_batch=12", "--set", "train.optimizer=sgd", "--set", "train.lr=0.5",
          "--set", "train.momentum=0.9", "--set", "train.log_every=5",
          "--set", "train.threads=1", "--set", "train.eval_batch=256"]
results, failures = {}, []
for ranks in [1, 2, 3]:
    out = os.path.join(a.work, f"r{ranks}")
    cmd = [a.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", a.rnn_dist, *common,
           "--set", f"output.dir={out}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    print(f"--- {ranks} rank(s): exit {r.returncode}\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    if r.returncode != 0:
        failures.append(f"{ranks} ranks: exit {r.returncode}")
        continue
    m = re.findall(r"^valid step \d+ \| loss (\S+)", r.stdout, re.M)
    with h5py.File(os.path.join(out, "model.h5"), "r") as f:
        params = np.concatenate([np.array(f["model"][k]).ravel() for k in sorted(f["model"].keys())])
    results[ranks] = (float(m[-1]), params)
checks = 0
if 1 in results:
    for ranks in [2, 3]:
        if ranks not in results:
            continue
        checks += 2
        loss_1, params_1 = results[1]
        loss_n, params_n = results[ranks]
        rel = abs(loss_n - loss_1) / loss_1
        diff = float(np.max(np.abs(params_n - params_1)) / np.max(np.abs(params_1)))
        print(f"{ranks} ranks vs 1: valid loss {loss_n} vs {loss_1} (rel {rel:.2e}), params max rel diff {diff:.2e}")
        if rel > 1e-4:
            failures.append(f"{ranks} ranks: validation loss differs by {rel:.2e}")
        if diff > 1e-4:
            failures.append(f"{ranks} ranks: parameters differ by {diff:.2e}")
for f in failures:
    print("FAIL " + f)
print(f"{max(checks, 1) - len(failures) if checks else 0} passed, {len(failures)} failed")
sys.exit(1 if failures or checks == 0 else 0)

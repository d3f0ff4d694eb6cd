#!/usr/bin/env python3
"""bf16 products train as well as fp32: a small GRU language model on the
embedded Bible corpus trains 200 steps in fp32 and in bf16 (products through
oneDNN) from the same start; the final validation loss of bf16 must be
within 1% of fp32's, and bf16's start-up line must say its products run on
oneDNN. Skips (77), saying why, when the build has no oneDNN.

usage: bf16_quality_e2e.py --rnn-dist BIN --data BIBLE_DIR --work DIR"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, e2e_arguments, mpi_env  # noqa: E402

a = e2e_arguments(["--rnn-dist", "--data", "--work"])
COMMON = ["train.steps=200", "train.log_every=50", "model.embed=64", "model.hidden=64", "model.layers=2",
          "model.dropout=0.1", "train.global_batch=16", "data.max_len=30", "train.lr=0.003", "train.threads=2",
          "data.test=none", "train.eval_batch=128", f"data.dir={a.data}"]


def run(precision):
    out = os.path.join(a.work, precision)
    cmd = [a.rnn_dist]
    for s in COMMON + [f"train.precision={precision}", f"output.dir={out}"]:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env())
    if r.returncode != 0:
        sys.exit(f"{precision} run failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    loss = re.findall(r"^valid step \d+ \| loss (\S+)", r.stdout, re.M)
    return float(loss[-1]), r.stdout


fp32_loss, _ = run("fp32")
bf16_loss, log = run("bf16")
if "no oneDNN in this build" in log:  # the start-up line of a build without oneDNN
    print("SKIPPED: this build has no oneDNN (libdnnl-dev): bf16 on the CPU only stores 16 bits")
    sys.exit(77)
c = Checks()
c.check("bf16 products through oneDNN" in log, "the bf16 run's start-up line names oneDNN")
rel = abs(bf16_loss - fp32_loss) / fp32_loss
c.check(rel <= 0.01, f"valid loss after 200 steps: bf16 {bf16_loss:.4f}, fp32 {fp32_loss:.4f} (relative {rel:.2e}, limit 1e-2)")
c.finish()

#!/usr/bin/env python3
"""The AWD-LSTM regularisers across a resume, and the averaged weights where
they are used:

  - a run with every regulariser on (locked dropout, embedding dropout,
    weight dropout, AR, TAR) and averaged weights (train.ema_decay), stopped
    by SIGTERM and resumed (--resume auto), at 1 rank and at 2: every
    parameter, optimizer moment and averaged weight bitwise equal to the
    uninterrupted run's final checkpoint; the same for bf16 products on
    token streams (data.mode = stream, configs/wikitext2_awd.ini's kind);
  - the regularisers change the run (without them it ends elsewhere);
  - model.h5 holds the averaged weights (the checkpoint's
    /optimizer/average), not the raw ones; `rnn_dist eval` prints the same
    line for the checkpoint and for model.h5, and `generate` the same text;
    the validation loss the trainer printed is that of the averaged weights.
usage: regularised_e2e.py --rnn-dist BIN --mpirun MPIEXEC --data DIR --work DIR"""
import os
import re
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, e2e_arguments, mpi_env  # noqa: E402

a = e2e_arguments(["--rnn-dist", "--mpirun", "--data", "--work"])
env = mpi_env()
N, K = 16, 7
regularisers = ["--set", "model.dropout=0.3", "--set", "model.locked_dropout=true", "--set",
                "model.embedding_dropout=0.1", "--set", "model.weight_dropout=0.3", "--set", "model.ar_alpha=2",
                "--set", "model.tar_beta=1", "--set", "train.ema_decay=0.9", "--set", "train.ema_start=4"]
common = ["--set", f"data.train={a.data}/valid.h5", "--set", f"data.valid={a.data}/test.h5", "--set", "data.test=none",
          "--set", "model.cell=lstm", "--set", "model.embed=32", "--set", "model.hidden=32", "--set", "model.layers=2",
          "--set", "train.global_batch=16", "--set", f"train.steps={N}", "--set", "train.threads=1",
          "--set", "train.log_every=4", "--set", "train.eval_every=0", "--set", "metrics.hist_every=0"]
checks = Checks()
check = checks.check


def run(ranks, out, extra=(), hook=None):
    launcher = [a.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none"] if ranks else []
    cmd = [*launcher, a.rnn_dist, *common, "--set", f"output.dir={out}", *extra]
    e = dict(env, RNND_FAULT_SIGNAL=hook) if hook else env
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=600)
    return r


def arrays(path):
    """Every dataset of a checkpoint's /model and /optimizer, by path."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and (name.startswith("model/") or name.startswith("optimizer/")):
                out[name] = obj[()]
        f.visititems(visit)
    return out


def final_checkpoint(out):
    with open(os.path.join(out, "latest")) as f:
        return os.path.join(out, f.read().strip())


# configs/wikitext2_awd.ini's combination too: bf16 products on token streams
# with the state carried between windows (the checkpoint holds it)
STREAM_BF16 = ["--set", "data.mode=stream", "--set", "data.bptt=20", "--set", "train.precision=bf16"]
for ranks, mode in ((0, []), (2, []), (0, STREAM_BF16), (2, STREAM_BF16)):
    tag = f"{ranks or 1} rank{'s' if ranks else ''}{', bf16 streams' if mode else ''}"
    name = f"{ranks}{'_stream' if mode else ''}"
    straight, stopped = os.path.join(a.work, f"straight{name}"), os.path.join(a.work, f"stopped{name}")
    r1 = run(ranks, straight, [*regularisers, *mode])
    r2 = run(ranks, stopped, [*regularisers, *mode], hook=str(K))
    r3 = run(ranks, stopped, [*regularisers, *mode, "--resume", "auto"])
    ok = r1.returncode == 0 and r3.returncode == 0 and r2.returncode != 1
    if not ok:
        print(r1.stderr[-800:], r2.stderr[-800:], r3.stderr[-800:])
    want, got = arrays(final_checkpoint(straight)), arrays(final_checkpoint(stopped))
    same = ok and want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)
    check(same and any(k.startswith("optimizer/average/") for k in want),
          f"{tag}: stopped at step {K} and resumed, every weight, moment and averaged weight bitwise equal "
          f"({len(want)} arrays)")

straight = os.path.join(a.work, "straight0")
plain = os.path.join(a.work, "plain")
run(0, plain, ["--set", "model.dropout=0.3"])
w_reg, w_plain = arrays(final_checkpoint(straight)), arrays(final_checkpoint(plain))
check(not np.array_equal(w_reg["model/rnn.weight_hh_l0"], w_plain["model/rnn.weight_hh_l0"]),
      "the regularisers change the run")

ckpt = final_checkpoint(straight)
with h5py.File(ckpt, "r") as c, h5py.File(os.path.join(straight, "model.h5"), "r") as m:
    names = list(m["model"].keys())
    averaged = all(np.array_equal(m["model"][k][()], c["optimizer/average"][k][()]) for k in names)
    raw = all(np.array_equal(m["model"][k][()], c["model"][k][()]) for k in names)
check(averaged and not raw, "model.h5 holds the averaged weights, the checkpoint both")
evals = [subprocess.run([a.rnn_dist, "eval", "--checkpoint", p, "--data", f"{a.data}/test.h5", "--threads", "1"],
                        capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1:]
         for p in (ckpt, os.path.join(straight, "model.h5"))]
check(evals[0] == evals[1] and evals[0], f"eval of the checkpoint and of model.h5 agree ({evals[0]})")
texts = [subprocess.run([a.rnn_dist, "generate", "--checkpoint", p, "--tokens", "20", "--temperature", "0"],
                        capture_output=True, text=True, env=env).stdout for p in (ckpt, os.path.join(straight, "model.h5"))]
check(texts[0] == texts[1] and texts[0].strip(), "generate from the checkpoint and from model.h5: the same text")
with open(os.path.join(straight, "train.log")) as f:
    log = f.read()
valid = re.findall(r"valid step \d+ \| loss (\d+\.\d+)", log)
last = evals[1][0] if evals[1] else ""
m = re.search(r"loss (\d+\.\d+)", last)
check(bool(valid) and m is not None and abs(float(valid[-1]) - float(m.group(1))) < 1e-3,
      f"the trainer's last validation loss ({valid[-1] if valid else '?'}) is the averaged weights' "
      f"({m.group(1) if m else '?'})")
checks.finish()

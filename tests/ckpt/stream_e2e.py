#!/usr/bin/env python3
"""data.mode = stream end to end: truncated BPTT with the state carried
between windows, over ranks and across a resume.

  - 1 rank and 2 ranks (each its own contiguous slice of streams) train the
    same global batches: losses within 1e-4 at every step;
  - the run crosses epoch boundaries (the state restarts from zeros);
  - stopped by SIGTERM mid-epoch and resumed (--resume auto), at 1 and 2
    ranks: parameters bitwise equal to the uninterrupted run; the
    checkpoint holds /state/stream_state [streams, layers * 2 * hidden],
    not all zero;
  - stopped at 2 ranks and resumed at 1: losses within 1e-4 of the
    uninterrupted 2-rank run (the state follows the streams, not the ranks);
  - without the carried state the same run ends elsewhere (the state
    matters: a resume that dropped it would be caught);
  - resuming a data.mode = pieces checkpoint in stream mode: one error
    line naming the checkpoint, exit 2;
  - PyTorch's classic recipe (bench/torch_lm.py in stream mode: the state
    carried and detached between windows) from rnn_dist's initial weights,
    without dropout: the same loss at every step (1e-4 relative) and the
    same validation loss over streams, for GRU and LSTM;
  - `rnn_dist eval --streams` of the model file, at 1 and 2 ranks, prints the
    run's validation loss over streams; as pieces (no carried state) it
    differs; too many streams for the data set: one error line naming it
    and --streams;
  - fewer streams than ranks (train.global_batch = 1 at 2 ranks): the error
    names the training file and train.global_batch, no model file.
usage: stream_e2e.py --rnn-dist BIN --mpirun MPIEXEC --data DIR --work DIR --torch-lm SCRIPT"""
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, e2e_arguments, mpi_env, read_series, model_params  # noqa: E402

a = e2e_arguments(["--rnn-dist", "--mpirun", "--data", "--work", "--torch-lm"])
env = mpi_env()
N, K = 14, 6
# The bible's validation split as the training corpus: 16 streams of about
# 3000 tokens in windows of 250 steps make 12 windows an epoch, so N steps
# cross an epoch boundary and the stop at K falls mid-epoch.
common = ["--set", f"data.train={a.data}/valid.h5", "--set", "data.valid=none", "--set", "data.test=none",
          "--set", "data.mode=stream", "--set", "data.bptt=250", "--set", "train.global_batch=16",
          "--set", f"train.steps={N}", "--set", "model.embed=32", "--set", "model.hidden=32",
          "--set", "model.dropout=0.1", "--set", "train.log_every=2", "--set", "train.threads=1",
          "--set", "train.lr=0.003", "--set", "metrics.hist_every=0"]
checks = Checks()
check = checks.check


def launcher(ranks):
    """ranks = 0: the program alone (no mpirun banner on stderr)."""
    return [a.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none"] if ranks else []


def run(ranks, out, extra=(), hook=None, expect_ok=True):
    cmd = [*launcher(ranks), a.rnn_dist, *common, "--set", f"output.dir={out}", *extra]
    e = dict(env, RNND_FAULT_SIGNAL=hook) if hook else env
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=300)
    if expect_ok and r.returncode != 0:
        print(f"--- {out}: exit {r.returncode}\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    return r


def losses(out):
    return read_series(os.path.join(out, "metrics.h5"))["loss"]


for cell in ["gru", "lstm"]:
    extra = ["--set", f"model.cell={cell}"]
    runs = {}
    for ranks in [1, 2]:
        straight = os.path.join(a.work, f"{cell}_np{ranks}")
        r = run(ranks, straight, extra)
        check(r.returncode == 0 and "as 16 streams" in r.stdout and "12 windows" in r.stdout,
              f"{cell} np{ranks}: stream run trains (16 streams, 12 windows an epoch)")
        runs[ranks] = straight
        if r.returncode:
            continue
        split = straight + "_split"
        r2 = run(ranks, split, extra, hook=f"{ranks - 1}:{K}")
        ckpt = os.path.join(split, f"ckpt_step{K:08d}.h5")
        with h5py.File(ckpt, "r") as f:
            state = f["state"]["stream_state"][()]
            window = int(f["state"].attrs["next_batch"])
        check(state.shape == (16, 2 * 2 * 32) and np.abs(state).max() > 0 and window == K,
              f"{cell} np{ranks}: checkpoint holds the carried state {state.shape}, max |h| "
              f"{np.abs(state).max():.3f}, next window {window}")
        r3 = run(ranks, split, [*extra, "--resume", "auto"])
        if r2.returncode or r3.returncode:
            check(False, f"{cell} np{ranks}: the stopped or the resumed run failed")
            continue
        pa, pb = model_params(straight), model_params(split)
        check(all(np.array_equal(pa[k], pb[k]) for k in pa),
              f"{cell} np{ranks}: stopped at {K}, resumed to {N}: parameters bitwise equal")
    if len(runs) == 2 and all(os.path.exists(os.path.join(runs[r], "metrics.h5")) for r in runs):
        l1, l2 = losses(runs[1]), losses(runs[2])
        diff = float(np.max(np.abs(l1 - l2))) if len(l1) == len(l2) else float("inf")
        check(diff < 1e-4, f"{cell}: 1 rank and 2 ranks train the same batches: max loss difference {diff:.2e}")

    # 2 ranks stopped, 1 rank resumed: the state follows the streams.
    stopped = os.path.join(a.work, f"{cell}_np2_to_np1")
    run(2, stopped, extra, hook=f"0:{K}")
    dropped = os.path.join(a.work, f"{cell}_np2_to_np1_no_state")
    shutil.copytree(stopped, dropped)
    r = run(1, stopped, [*extra, "--resume", "auto"])
    if r.returncode == 0 and os.path.exists(os.path.join(runs[2], "metrics.h5")):
        ref, got = losses(runs[2]), losses(stopped)
        diff = float(np.max(np.abs(ref - got))) if len(ref) == len(got) else float("inf")
        check(diff < 1e-4, f"{cell}: stopped at 2 ranks, resumed at 1: max loss difference {diff:.2e} vs 2 ranks")
        # The same resume with the carried state zeroed must end elsewhere.
        ckpt = os.path.join(dropped, f"ckpt_step{K:08d}.h5")
        with h5py.File(ckpt, "r+") as f:
            f["state"]["stream_state"][...] = 0.0
        r = run(1, dropped, [*extra, "--resume", "auto"])
        zeroed = losses(dropped) if r.returncode == 0 else ref
        gap = float(np.max(np.abs(ref[K:] - zeroed[K:]))) if len(zeroed) == len(ref) else 0.0
        check(gap > 1e-5, f"{cell}: resumed from zeroed state instead, losses move by {gap:.2e} (> 1e-5, "
                          f"1000x the resume's own difference)")
    else:
        check(False, f"{cell}: resume at 1 rank failed")

def eval_loss(ranks, model, extra):
    """`rnn_dist eval`'s loss, or NaN when it failed."""
    r = subprocess.run([*launcher(ranks), a.rnn_dist, "eval", "--checkpoint", model, "--data", f"{a.data}/test.h5",
                        "--threads", "1", *extra], capture_output=True, text=True, env=env, timeout=300)
    last = r.stdout.strip().splitlines()[-1].split() if r.returncode == 0 and r.stdout.strip() else []
    return float(last[1]) if len(last) >= 2 and last[0] == "loss" else float("nan")


def check_eval_streams(cell, model, valid):
    """The run validated over 4 streams in windows of 250 steps (eval_batch, bptt)."""
    streams = ["--streams", "4", "--max-len", "250"]
    for ranks in [0, 2]:
        got = eval_loss(ranks, model, streams)
        check(abs(got - valid) < 1e-6, f"{cell}: rnn_dist eval --streams 4 at {max(ranks, 1)} rank(s): {got:.6f}, "
                                       f"the run's validation over streams {valid:.6f}")
    pieces = eval_loss(0, model, ["--max-len", "250"])
    check(abs(pieces - valid) > 1e-3, f"{cell}: the same model as pieces from a zero state: {pieces:.6f} "
                                      f"(differs: the carried state counts)")


# PyTorch's truncated-BPTT recipe, step by step.
for cell in ["gru", "lstm"]:
    out = os.path.join(a.work, f"{cell}_vs_torch")
    extra = ["--set", f"model.cell={cell}", "--set", "model.dropout=0", "--set", "train.log_every=1",
             "--set", f"data.valid={a.data}/test.h5", "--set", "train.eval_batch=4"]
    r = run(0, out, extra)
    if r.returncode:
        check(False, f"{cell}: rnn_dist run for the PyTorch comparison failed")
        continue
    ours = losses(out)
    valid = read_series(os.path.join(out, "metrics.h5"), "val")["loss"][-1]
    t = subprocess.run(["/usr/bin/python3", a.torch_lm, os.path.join(out, "config.ini"), "--match-rnn-dist"],
                       capture_output=True, text=True, env=env, timeout=300)
    theirs = [float(line.split()[5]) for line in t.stdout.splitlines() if line.startswith("step ")]
    last = t.stdout.strip().splitlines()[-1].split() if t.stdout.strip() else []
    torch_valid = float(last[1]) if len(last) >= 2 and last[0] == "loss" else float("nan")
    worst = max((abs(x - y) / y for x, y in zip(ours, theirs)), default=float("inf"))
    check(t.returncode == 0 and len(theirs) == N and worst < 1e-4,
          f"{cell}: {N} stream steps, rnn_dist vs PyTorch's recipe: worst relative loss difference {worst:.1e}")
    check(abs(valid - torch_valid) / torch_valid < 1e-4,
          f"{cell}: validation over streams: rnn_dist {valid:.6f}, PyTorch {torch_valid:.6f}")
    check_eval_streams(cell, os.path.join(out, "model.h5"), valid)

# A checkpoint of a pieces-mode run resumed in stream mode.
pieces = os.path.join(a.work, "pieces")
r = run(1, pieces, ["--set", "data.mode=pieces", "--set", "train.steps=2"])
r = run(0, pieces, ["--resume", os.path.join(pieces, "ckpt_step00000002.h5")], expect_ok=False)
lines = r.stderr.strip().splitlines()
check(r.returncode == 2 and len(lines) == 1 and "ckpt_step00000002.h5" in lines[0] and "stream" in lines[0],
      f"pieces checkpoint in stream mode: exit {r.returncode}, stderr {lines[-1:] if lines else ''}")
# More streams than the data set has tokens for: one line naming the file.
r = subprocess.run([a.rnn_dist, "eval", "--checkpoint", os.path.join(pieces, "model.h5"), "--data",
                    f"{a.data}/test.h5", "--streams", "16000000"], capture_output=True, text=True, env=env, timeout=60)
lines = r.stderr.strip().splitlines()
check(r.returncode == 2 and len(lines) == 1 and "test.h5" in lines[0] and "16000000 streams (--streams)" in lines[0],
      f"eval --streams 16000000: exit {r.returncode}, stderr {lines[-1:] if lines else ''}")
# Fewer streams than ranks: the error names the training file and the key.
r = run(2, os.path.join(a.work, "too_few"), ["--set", "train.global_batch=1"], expect_ok=False)
named = [line for line in r.stderr.splitlines() if "valid.h5: 1 streams (train.global_batch) for 2 ranks" in line]
check(r.returncode != 0 and named and not os.path.exists(os.path.join(a.work, "too_few", "model.h5")),
      f"train.global_batch = 1 stream at 2 ranks: exit {r.returncode}, {named[:1]}")
checks.finish()

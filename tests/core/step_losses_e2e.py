#!/usr/bin/env python3
"""Per-step training results stay what they were: short runs of rnn_dist
(fp32, fp16, bf16; 1 and 2 ranks; segmented backpropagation; streams;
classify; regress; a NaN injected on one rank) write each step's loss and gradient norm to metrics.h5,
and these must equal the values recorded in tests/core/step_losses.json
(loss within 1e-6 relative, gradient norm within 1e-5; skipped steps and
loss scales exactly). The fixture was recorded before the step interface
was introduced (issue 27), so it holds the training step to its old
behaviour through any restructuring.

Runs are pinned to one thread per rank and OpenBLAS's Haswell kernels, so
they round the same on any AVX2 machine.

usage: step_losses_e2e.py --rnn-dist BIN --rnn-prep BIN --mpirun MPIEXEC
                          --data BIBLE_DIR --work DIR --fixture JSON [--record]
--record rewrites the fixture from this build (only when a change of
results is intended: say why in the commit)."""
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, e2e_arguments, mpi_env, read_series  # noqa: E402

a = e2e_arguments(["--rnn-dist", "--rnn-prep", "--mpirun", "--data", "--work", "--fixture"],
                  lambda p: p.add_argument("--record", action="store_true"))
STEPS = 6
COMMON = [f"train.steps={STEPS}", "train.log_every=1", "train.threads=1", "model.embed=32", "model.hidden=32",
          "train.global_batch=8", "train.eval_batch=64", "data.valid=none", "data.test=none", "data.max_len=30",
          "train.lr=0.003", "comm.check_every=2", "metrics.hist_every=0"]
LM = [f"data.dir={a.data}"]
LABELS = [f"data.dir={os.path.join(a.data, 'labels')}", "model.task=classify", "data.max_len=128"]


def series_csv(path, n_series, length, seed):
    """A few noisy sine waves with two features, written deterministically."""
    with open(path, "w") as f:
        f.write("series_id,a,b\n")
        for s in range(n_series):
            for t in range(length):
                x = math.sin(0.3 * t + s) + 0.1 * math.sin(7.1 * t * (seed + s))
                f.write(f"s{s},{x:.6f},{0.5 * math.cos(0.2 * t + 2 * s):.6f}\n")


def regress_data():
    d = os.path.join(a.work, "series")
    os.makedirs(d, exist_ok=True)
    for split, seed in [("train", 1), ("valid", 2), ("test", 3)]:
        series_csv(os.path.join(d, f"{split}.csv"), 6, 120, seed)
    r = subprocess.run([a.rnn_prep, "--csv", "--train", f"{d}/train.csv", "--valid", f"{d}/valid.csv",
                        "--test", f"{d}/test.csv", "--out", d], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"rnn_prep --csv failed: {r.stderr}")
    return [f"data.dir={d}", "model.task=regress", "model.cell=lstm"]


CASES = {
    "gru_fp32": (1, LM + ["model.dropout=0.2", "model.tie_weights=true"]),
    "lstm_fp16": (1, LM + ["model.cell=lstm", "train.precision=fp16", "amp.growth_interval=3"]),
    "gru_bf16_sgd": (1, LM + ["train.precision=bf16", "train.optimizer=sgd", "train.lr=0.5", "train.momentum=0.9"]),
    "gru_fp32_2ranks": (2, LM + ["model.dropout=0.1", "comm.bucket_mb=0.01"]),
    "lstm_fp16_2ranks": (2, LM + ["model.cell=lstm", "train.precision=fp16", "comm.bucket_mb=0.01"]),
    "gru_fp32_2ranks_fp16_wire": (2, LM + ["comm.grad_dtype=fp16"]),
    "lstm_segments": (1, LM + ["model.cell=lstm", "train.bptt_segment=7", "model.dropout=0.1"]),
    "gru_segments_fp16_2ranks": (2, LM + ["train.bptt_segment=5", "train.precision=fp16"]),
    "gru_stream": (1, LM + ["data.mode=stream", "data.bptt=12", "model.dropout=0.1"]),
    "classify_bi": (1, LABELS + ["model.bidirectional=true"]),
    "lstm_fp16_nan_2ranks": (2, LM + ["model.cell=lstm", "train.precision=fp16"], {"RNND_FAULT_NAN_GRAD": "1:2"}),
    "regress_lstm": (1, None),
}


def run(name, ranks, sets, hooks):
    out = os.path.join(a.work, name)
    cmd = [a.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", a.rnn_dist]
    for s in COMMON + sets + [f"output.dir={out}"]:
        cmd += ["--set", s]
    env = dict(mpi_env(), OPENBLAS_CORETYPE="Haswell", OPENBLAS_NUM_THREADS="1", **hooks)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print(f"--- {name}: exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        return None
    s = read_series(os.path.join(out, "metrics.h5"))
    return {k: [float(v) for v in s[k]] for k in ["loss", "grad_norm", "loss_scale", "skipped"]}


results = {}
for name, (ranks, sets, *hooks) in CASES.items():
    results[name] = run(name, ranks, sets if sets is not None else regress_data(), hooks[0] if hooks else {})

if a.record:
    missing = [n for n, r in results.items() if r is None]
    if missing:
        sys.exit(f"not recording: {', '.join(missing)} failed")
    with open(a.fixture, "w") as f:
        f.write("{\n" + ",\n".join(f" {json.dumps(n)}: {json.dumps(r)}" for n, r in results.items()) + "\n}\n")
    print(f"recorded {len(results)} runs into {a.fixture}")
    sys.exit(0)

def relative(got, want):
    """Relative difference; a NaN (a skipped step's norm) matches only a NaN."""
    if math.isnan(got) or math.isnan(want):
        return 0.0 if math.isnan(got) and math.isnan(want) else math.inf
    return abs(got - want) / max(abs(want), 1e-30)


with open(a.fixture) as f:
    expected = json.load(f)
c = Checks()
for name, want in expected.items():
    got = results.get(name)
    if got is None:
        c.check(False, f"{name}: run failed (or the case is gone)")
        continue
    worst = {k: max((relative(g, w) for g, w in zip(got[k], want[k])), default=0.0) for k in ["loss", "grad_norm"]}
    c.check(len(got["loss"]) == len(want["loss"]), f"{name}: {len(got['loss'])} steps recorded (want {len(want['loss'])})")
    c.check(worst["loss"] <= 1e-6, f"{name}: per-step loss within 1e-6 (worst {worst['loss']:.2e})")
    c.check(worst["grad_norm"] <= 1e-5, f"{name}: per-step gradient norm within 1e-5 (worst {worst['grad_norm']:.2e})")
    c.check(got["loss_scale"] == want["loss_scale"] and got["skipped"] == want["skipped"],
            f"{name}: loss scales {got['loss_scale']} and skips equal the recorded ones")
c.finish()

#!/usr/bin/env python3
"""fp16 and bf16 training track fp32 on real text, and loss scaling matters.

On a 2000-sequence slice of WikiText-2 (first 2000 lines of train.txt,
vocabulary capped at 5000) a small 2-layer GRU LM (64 units, batch 16) trains 200 steps in fp32,
fp16 (dynamic loss scaling), bf16, and fp16 with loss scaling off. Checks:
  - fp16 and bf16 training loss (mean over the last 20 steps) within 2% of
    fp32's;
  - fp16 with dynamic scaling skips at most a few steps and loses (almost) no
    gradient values to underflow, while fp16 without scaling loses clearly
    more: the underflow that scaling prevents (numbers are printed).
Exits 77 (skipped) when WikiText-2 is not at --wikitext.

usage: precision_e2e.py --rnn-dist BIN --rnn-prep BIN --wikitext DIR --work DIR"""
import argparse
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, read_series  # noqa: E402

p = argparse.ArgumentParser()
for k in ["--rnn-dist", "--rnn-prep", "--wikitext", "--work"]:
    p.add_argument(k, required=True)
a = p.parse_args()
train_txt = os.path.join(a.wikitext, "train.txt")
if not os.path.exists(train_txt):
    print(f"SKIPPED: WikiText-2 not found at {a.wikitext} (set -DRNND_WIKITEXT2=DIR)")
    sys.exit(77)
shutil.rmtree(a.work, ignore_errors=True)
os.makedirs(a.work)


def first_lines(path, count, out):
    with open(path, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as g:
        n = 0
        for line in f:
            if line.strip():
                g.write(line)
                n += 1
                if n == count:
                    break


first_lines(train_txt, 2000, os.path.join(a.work, "train.txt"))
first_lines(os.path.join(a.wikitext, "valid.txt"), 200, os.path.join(a.work, "valid.txt"))
subprocess.run([a.rnn_prep, "--train", os.path.join(a.work, "train.txt"), "--valid",
                os.path.join(a.work, "valid.txt"), "--out", os.path.join(a.work, "data"), "--max-vocab", "5000"],
               check=True, stdout=subprocess.DEVNULL)

STEPS = 200
common = ["--set", f"data.dir={a.work}/data", "--set", "data.test=none", "--set", "data.valid=none",
          "--set", "model.embed=64", "--set", "model.hidden=64", "--set", "model.layers=2",
          "--set", "model.tie_weights=true", "--set", "data.max_len=35", "--set", "train.global_batch=16",
          "--set", "train.lr=0.003", "--set", f"train.steps={STEPS}", "--set", "train.log_every=50",
          "--set", "train.threads=2"]
runs = {"fp32": ["train.precision=fp32"], "fp16": ["train.precision=fp16"], "bf16": ["train.precision=bf16"],
        "fp16, no loss scaling": ["train.precision=fp16", "amp.loss_scaling=false"]}
results = {}
for name, sets in runs.items():
    out = os.path.join(a.work, name.replace(",", "").replace(" ", "_"))
    cmd = [a.rnn_dist, *common, "--set", f"output.dir={out}"]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{name}: exit {r.returncode}\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
        sys.exit(1)
    results[name] = read_series(os.path.join(out, "metrics.h5"))

checks = Checks()
check = checks.check


ref = results["fp32"]["loss"][-20:].mean()
print(f"{'run':24s} {'loss (last 20)':>15s} {'vs fp32':>9s} {'skipped':>8s} {'final scale':>12s} "
      f"{'underflow (mean)':>17s}")
for name, rows in results.items():
    loss = rows["loss"][-20:].mean()
    print(f"{name:24s} {loss:15.5f} {100 * (loss / ref - 1):+8.2f}% {int(rows['skipped'].sum()):8d} "
          f"{rows['loss_scale'][-1]:12.0f} {100 * rows['underflow'].mean():16.3f}%")
for name in ["fp16", "bf16"]:
    loss = results[name]["loss"][-20:].mean()
    check(abs(loss / ref - 1) <= 0.02, f"{name} loss {loss:.4f} is not within 2% of fp32's {ref:.4f}")
scaled, unscaled = results["fp16"], results["fp16, no loss scaling"]
check(scaled["skipped"].sum() <= 5, f"fp16 with scaling skipped {scaled['skipped'].sum()} steps")
check(unscaled["underflow"].mean() > 0, "fp16 without loss scaling lost no gradient values to underflow")
check(unscaled["underflow"].mean() > 10 * scaled["underflow"].mean(),
      f"loss scaling did not cut underflow tenfold ({scaled['underflow'].mean():.2e} vs "
      f"{unscaled['underflow'].mean():.2e})")
checks.finish()

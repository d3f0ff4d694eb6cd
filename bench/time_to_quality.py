#!/usr/bin/python3
"""Validation perplexity against wall-clock time, from one or more runs,
on one plot: "time to perplexity X" read off for each.

  time_to_quality.py RUN_DIR[=LABEL] ... [--csv FILE=LABEL ...] --out PNG
                     [--at 15,30,45,60] [--target 125.3]

A run directory is rnn_dist's output.dir (its metrics.h5: /val/step and
/val/ppl, each evaluation placed at the training clock of its step,
/train/elapsed_s); a CSV (minutes,ppl per line, a header allowed) is any
other program's curve (e.g. a PyTorch run of the same recipe). Prints, per
run, the best validation perplexity reached by each --at minute and the
first minute at which it reached --target, then writes the PNG (log y)."""
import argparse
import csv

import h5py
import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def continued_clock(elapsed):
    """elapsed_s with every fall undone: builds before the checkpoint kept
    the training clock restarted it at each resume, so each later start is
    placed after the step it resumed from. A restart is seen only where the
    clock falls (an earlier start shorter than the later one's first step
    would go unseen)."""
    out, offset = np.array(elapsed, dtype=float), 0.0
    for i in range(1, len(out)):
        if elapsed[i] < elapsed[i - 1]:
            offset = out[i - 1]
        out[i] = elapsed[i] + offset
    return out


def rnn_dist_curve(run):
    with h5py.File(f"{run}/metrics.h5", "r") as f:
        steps, elapsed = f["train/step"][:], continued_clock(f["train/elapsed_s"][:])
        val_steps, ppl = f["val/step"][:], f["val/ppl"][:]
    at = {int(s): float(e) for s, e in zip(steps, elapsed)}
    return np.array([at.get(int(s), np.nan) / 60.0 for s in val_steps]), np.array(ppl, dtype=float)


def csv_curve(path):
    minutes, ppl = [], []
    with open(path) as f:
        for row in csv.reader(f):
            try:
                minutes.append(float(row[0]))
                ppl.append(float(row[1]))
            except (ValueError, IndexError):
                continue  # a header
    return np.array(minutes), np.array(ppl)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", help="rnn_dist output directories, optionally =LABEL")
    ap.add_argument("--csv", action="append", default=[], help="FILE=LABEL: minutes,ppl rows")
    ap.add_argument("--out", required=True)
    ap.add_argument("--at", default="15,30,45,60")
    ap.add_argument("--target", type=float, default=125.3)
    a = ap.parse_args()
    curves = []
    for spec in a.runs:
        run, _, label = spec.partition("=")
        curves.append((label or run, *rnn_dist_curve(run)))
    for spec in a.csv:
        path, _, label = spec.partition("=")
        curves.append((label or path, *csv_curve(path)))
    marks = [float(m) for m in a.at.split(",")]
    print("%-36s %s  %s" % ("run", "  ".join("ppl@%3.0fmin" % m for m in marks), f"first <= {a.target}"))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, minutes, ppl in curves:
        best = ["%10s" % ("%.1f" % ppl[minutes <= m].min() if (minutes <= m).any() else "-") for m in marks]
        hit = minutes[ppl <= a.target]
        print("%-36s %s  %s" % (label, "  ".join(best), "%.1f min" % hit[0] if len(hit) else "not reached"))
        ax.plot(minutes, ppl, marker="o", markersize=3, label=label)
    ax.axhline(a.target, color="grey", linestyle="--", linewidth=1, label=f"target {a.target}")
    ax.set_yscale("log")
    ax.set_xlabel("wall-clock minutes")
    ax.set_ylabel("validation perplexity")
    ax.set_title("WikiText-2: validation perplexity against time")
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

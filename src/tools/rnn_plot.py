#!/usr/bin/python3
"""rnn_plot — plot rnn_dist metrics files (OUTPUT/metrics.h5) as PNGs.

  rnn_plot RUN_DIR_OR_METRICS.h5 [MORE ...] --out DIR

(the build puts it beside rnn_dist: build/rnn_plot; the source is
src/tools/rnn_plot.py). It runs on Debian's python3, where
launch/install_deps.sh installs h5py and matplotlib; with another Python,
run it as `python rnn_plot ...`.

One PNG per quantity, every run on the same axes (labelled by its
directory), so scaling studies and precision comparisons read at a glance:
  loss.png       training loss per step (and validation loss as markers)
  ppl.png        validation perplexity per evaluation
  tokens_s.png   tokens/s per step (rolling median of 20 steps)
  grad_norm.png  global gradient norm before clipping (log scale)
  loss_scale.png loss scale (fp16 runs; log scale), skipped steps marked
  comm.png       share of step time in the gradient all-reduce
  update_ratio.png  |update| / |weights| per step (log scale)
  gates_RUN.png  each gate's value histogram per layer over time (runs
                 with metrics.hist_every), one panel per layer and gate
Needs h5py and matplotlib (Debian: python3-h5py python3-matplotlib)."""
import argparse
import os
import sys

import h5py
import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.h5")
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") not in ("rnn_dist-metrics", b"rnn_dist-metrics"):
                sys.exit(f"{path}: not an rnn_dist metrics file (attribute format)")
            run = {g: {k: v[:] for k, v in f[g].items()} for g in ("train", "val", "test", "hist") if g in f}
    except OSError as e:
        sys.exit(f"{path}: cannot open: {e}")
    run["label"] = os.path.basename(os.path.dirname(os.path.abspath(path))) or path
    return run


def rolling_median(x, window=20):
    if len(x) < window:
        return x
    return np.array([np.median(x[max(0, i - window + 1):i + 1]) for i in range(len(x))])


def figure(out, name, title, ylabel, runs, draw, log=False):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for run in runs:
        draw(ax, run)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run directories or metrics.h5 files")
    p.add_argument("--out", required=True, help="directory for the PNGs")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    runs = [load(r) for r in a.runs]

    def loss(ax, r):
        t = r["train"]
        line, = ax.plot(t["step"], t["loss"], lw=0.8, label=r["label"] + " train")
        if "val" in r and len(r["val"]["step"]):
            ax.plot(r["val"]["step"], r["val"]["loss"], "o", color=line.get_color(), label=r["label"] + " valid")
    figure(a.out, "loss.png", "loss (mean NLL)", "loss", runs, loss)

    def ppl(ax, r):
        if "val" in r and len(r["val"]["step"]):
            ax.plot(r["val"]["step"], r["val"]["ppl"], "o-", label=r["label"])
    figure(a.out, "ppl.png", "validation perplexity", "perplexity", runs, ppl, log=True)

    def speed(ax, r):
        t = r["train"]
        seconds = np.diff(np.concatenate([[0.0], t["elapsed_s"]]))
        ok = seconds > 0
        ax.plot(t["step"][ok], rolling_median(t["tokens"][ok] / seconds[ok]), lw=0.8, label=r["label"])
    figure(a.out, "tokens_s.png", "throughput (whole job)", "tokens/s", runs, speed)

    def grad(ax, r):
        t = r["train"]
        ok = np.isfinite(t["grad_norm"])
        ax.plot(t["step"][ok], t["grad_norm"][ok], lw=0.6, label=r["label"])
    figure(a.out, "grad_norm.png", "gradient norm before clipping", "norm", runs, grad, log=True)

    def scale(ax, r):
        t = r["train"]
        line, = ax.plot(t["step"], t["loss_scale"], lw=0.8, label=r["label"])
        skipped = t["skipped"] > 0
        if skipped.any():
            ax.plot(t["step"][skipped], t["loss_scale"][skipped], "x", color=line.get_color(),
                    label=r["label"] + " skipped")
    figure(a.out, "loss_scale.png", "loss scale", "scale", runs, scale, log=True)

    def comm(ax, r):
        t = r["train"]
        busy = t["compute_s"] + t["comm_s"]
        ok = busy > 0
        ax.plot(t["step"][ok], rolling_median(100 * t["comm_s"][ok] / busy[ok]), lw=0.8, label=r["label"])
    figure(a.out, "comm.png", "time in the gradient all-reduce", "% of step", runs, comm)

    def ratio(ax, r):
        t = r["train"]
        ok = t["update_ratio"] > 0
        ax.plot(t["step"][ok], t["update_ratio"][ok], lw=0.6, label=r["label"])
    figure(a.out, "update_ratio.png", "update-to-weight ratio", "|update| / |weights|", runs, ratio, log=True)
    for run in runs:
        plot_gates(a.out, run)


def plot_gates(out, run):
    h = run.get("hist")
    if not h or len(h["step"]) == 0:
        return
    names = sorted(k for k in h if k != "step")
    cols = 4 if len(names) % 4 == 0 else 3
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    steps = h["step"]
    for ax, name in zip(axes.flat, names):
        counts = h[name].astype(float)
        share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        ax.imshow(share.T, origin="lower", aspect="auto", cmap="viridis",
                  extent=[steps[0], steps[-1], -1, 1], interpolation="nearest")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel("value", fontsize=8)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.suptitle(f"gate values over time ({run['label']}; share of values per bin)")
    fig.tight_layout()
    path = os.path.join(out, f"gates_{run['label']}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(path)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Scaling table and plot from the runs of launch/scaling.sh.

usage: scaling_table.py DIR [--skip N]

DIR/runs.txt lists "ranks directory" per run; each directory holds that
run's metrics.h5. For every run: the job's tokens/s (median over steps
after the first --skip, default 5 or a tenth of the run, whichever is
larger, so start-up and warm-up do not count), tokens/s per rank, scaling
efficiency against the run with the fewest ranks (per-rank tokens/s over
that run's per-rank tokens/s), the median share of step time spent in the
gradient all-reduce (on a GPU: the part not hidden behind backward), and
the mean load imbalance (busiest rank's tokens over the mean).
Prints the table, writes it to DIR/scaling.txt and draws DIR/scaling.png
(tokens/s against ranks with the ideal line, and efficiency).
"""
import argparse
import os
import sys

import h5py
import numpy as np


def read_run(path, skip):
    with h5py.File(os.path.join(path, "metrics.h5"), "r") as f:
        t = {k: v[:] for k, v in f["train"].items()}
    if len(t["step"]) == 0:
        raise SystemExit(f"scaling_table.py: {path}/metrics.h5 has no training steps")
    first = max(skip, len(t["step"]) // 10)
    if first >= len(t["step"]):
        first = 0
    seconds = np.diff(np.concatenate([[0.0], t["elapsed_s"]]))[first:]
    tokens = t["tokens"][first:]
    busy = t["compute_s"][first:] + t["comm_s"][first:]
    return {"tokens_per_s": float(np.median(tokens / seconds)),
            "comm": float(np.median(np.where(busy > 0, t["comm_s"][first:] / np.maximum(busy, 1e-30), 0.0))),
            "imbalance": float(np.mean(t["imbalance"][first:])),
            "steps": len(t["step"]) - first}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--skip", type=int, default=5)
    a = p.parse_args()
    listing = os.path.join(a.dir, "runs.txt")
    if not os.path.exists(listing):
        sys.exit(f"scaling_table.py: {listing}: no such file (run launch/scaling.sh first)")
    runs = []
    with open(listing) as f:
        for number, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 2 or not parts[0].isdigit():
                sys.exit(f"scaling_table.py: {listing}:{number}: expected 'RANKS DIRECTORY', got {line.strip()!r}")
            metrics = os.path.join(parts[1], "metrics.h5")
            if not os.path.exists(metrics):
                print(f"scaling_table.py: {metrics} missing (run failed or still queued); left out", file=sys.stderr)
                continue
            runs.append((int(parts[0]), read_run(parts[1], a.skip)))
    if not runs:
        sys.exit("scaling_table.py: no finished runs")
    runs.sort(key=lambda r: r[0])
    base_ranks, base = runs[0]
    base_per_rank = base["tokens_per_s"] / base_ranks
    lines = [f"{'ranks':>6} {'tokens/s':>12} {'per rank':>10} {'efficiency':>11} {'comm %':>7} {'imbalance':>10} {'steps':>6}"]
    for ranks, r in runs:
        per_rank = r["tokens_per_s"] / ranks
        r["efficiency"] = per_rank / base_per_rank
        lines.append(f"{ranks:>6} {r['tokens_per_s']:>12.0f} {per_rank:>10.0f} {100 * r['efficiency']:>10.1f}% "
                     f"{100 * r['comm']:>7.1f} {r['imbalance']:>10.4f} {r['steps']:>6}")
    lines.append(f"(median tokens/s over each run's steps after warm-up; efficiency against {base_ranks} rank(s))")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(a.dir, "scaling.txt"), "w") as f:
        f.write(table + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ranks = [r for r, _ in runs]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(ranks, [r["tokens_per_s"] for _, r in runs], "o-", label="measured")
    ax1.plot(ranks, [base_per_rank * n for n in ranks], "--", color="gray", label="ideal")
    ax1.set_xlabel("ranks")
    ax1.set_ylabel("tokens/s")
    ax1.legend()
    ax2.plot(ranks, [100 * r["efficiency"] for _, r in runs], "o-", label="efficiency")
    ax2.plot(ranks, [100 * r["comm"] for _, r in runs], "s-", label="comm % of step")
    ax2.set_xlabel("ranks")
    ax2.set_ylabel("%")
    ax2.set_ylim(0, 110)
    ax2.legend()
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ranks)
        ax.set_xticklabels([str(n) for n in ranks])
        ax.grid(alpha=0.3)
    fig.suptitle(os.path.basename(os.path.abspath(a.dir)))
    fig.tight_layout()
    fig.savefig(os.path.join(a.dir, "scaling.png"), dpi=100)
    print(f"plot: {os.path.join(a.dir, 'scaling.png')}")


if __name__ == "__main__":
    main()

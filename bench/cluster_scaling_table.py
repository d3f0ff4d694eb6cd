#!/usr/bin/env python3
"""Table and plot of bench/cluster_scaling.sh: scaling across node counts.

usage: cluster_scaling_table.py DIR

DIR/results.txt has one row per (link, nodes): link rate, node count, round
trip (us), what all links carried at once (MB/s), the all-reduce time per
step measured by bench_allreduce (grad_sync at the run's gradient size, ms)
and predicted by bench/scaling_model.py --flat (ms), and the rnn_dist run's
directory. For every row the table adds, from that run's metrics.h5 (after
warm-up, as bench/scaling_table.py): the median time rank 0 spent per step
in the all-reduce (waiting for slower ranks included), its share of the
step, the mean imbalance and tokens/s. Prints the table, writes it to
DIR/scaling.txt and draws DIR/scaling.png (all-reduce time measured and
predicted against nodes, one line per link rate; tokens/s against nodes).
"""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scaling_table import read_run  # noqa: E402


def comm_ms(path, skip=5):
    with h5py.File(os.path.join(path, "metrics.h5"), "r") as f:
        comm = f["train"]["comm_s"][:]
    first = max(skip, len(comm) // 10)
    return 1000.0 * float(np.median(comm[first:] if first < len(comm) else comm))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    rows = []
    with open(os.path.join(out, "results.txt")) as f:
        for number, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 7:
                sys.exit(f"cluster_scaling_table.py: {out}/results.txt:{number}: expected 7 fields, got {line!r}")
            link, nodes, rtt, total, measured, predicted, run = parts
            r = read_run(run, 5)
            rows.append(dict(link=link, nodes=int(nodes), rtt=float(rtt), total=float(total),
                             measured=float(measured), predicted=float(predicted), comm_ms=comm_ms(run), **r))
    head = (f"{'link':>7} {'nodes':>5} {'rtt us':>7} {'all MB/s':>9} {'allreduce ms':>13} {'model ms':>9} "
            f"{'model/meas':>10} {'comm ms/step':>13} {'comm %':>7} {'imbalance':>10} {'tokens/s':>9}")
    lines = [head]
    for r in rows:
        ratio = f"{r['predicted'] / r['measured']:.2f}" if r["measured"] > 0 else "-"
        lines.append(f"{r['link']:>7} {r['nodes']:>5} {r['rtt']:>7.0f} {r['total']:>9.0f} {r['measured']:>13.2f} "
                     f"{r['predicted']:>9.2f} {ratio:>10} {r['comm_ms']:>13.2f} {100 * r['comm']:>7.1f} "
                     f"{r['imbalance']:>10.4f} {r['tokens_per_s']:>9.0f}")
    lines.append("(allreduce ms: bench_allreduce's grad_sync on the run's gradient, one rank a node; model: "
                 "bench/scaling_model.py --flat; comm ms/step: rank 0 in the run, waiting for slower ranks included)")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(out, "scaling.txt"), "w") as f:
        f.write(table + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for link in dict.fromkeys(r["link"] for r in rows):
        mine = [r for r in rows if r["link"] == link]
        nodes = [r["nodes"] for r in mine]
        line, = left.plot(nodes, [r["measured"] for r in mine], "o-", label=f"{link} measured")
        left.plot(nodes, [r["predicted"] for r in mine], "x--", color=line.get_color(), label=f"{link} model")
        right.plot(nodes, [r["tokens_per_s"] for r in mine], "o-", label=link)
    left.set(xlabel="nodes (one rank each)", ylabel="gradient all-reduce, ms", title="all-reduce: measured vs model")
    right.set(xlabel="nodes (one rank each)", ylabel="tokens/s", title="rnn_dist training")
    for ax in (left, right):
        ax.set_xticks(sorted({r["nodes"] for r in rows}))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scaling.png"), dpi=110)
    print(f"plot: {os.path.join(out, 'scaling.png')}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Predicted data-parallel scaling of rnn_dist at 1..64 nodes x 8 GPUs.

Weak scaling (every rank keeps its batch): a step is the single-rank compute
time plus whatever of the gradient all-reduce is not hidden.

  all-reduce of B bytes over N nodes of g GPUs, as NCCL does it on such
  machines (hierarchical ring, alpha-beta cost per message):
    inside a node   reduce-scatter + all-gather over NVLink:
                    2 (g-1) (alpha_nvl + B / (g bw_nvl))
    between nodes   ring all-reduce of each GPU's 1/g shard over its own
                    InfiniBand NIC (rail-aligned):
                    2 (N-1) (alpha_ib + B / (g N bw_ib))
  with the gradient in K buckets of `bucket_mb`, every bucket pays the
  latency terms, the bandwidth terms add up to those of B.

  no overlap:   step = compute + comm
  overlap:      buckets are reduced while backward runs (rnn_dist's CUDA
                step); what stays exposed is max(comm - (backward - its first
                bucket's share), last bucket's comm), never below zero.

Flat Ethernet (--flat "2 4": rank counts, one rank a node, as on the
emulated cluster of tests/cluster or nodes behind one switch; MPI's ring
all-reduce, which rnn_dist asks Open MPI for): 2 (p-1) rounds, each moving
B/p through every node's link while p links carry traffic at once, so

    time = k 2 (p-1) alpha + 2 (p-1)/p B / min(R payload, H / p)

with R the link rate, payload the share of each frame that is data (TCP
over a 1500-byte MTU: 1448 / 1514), alpha the one-way latency between two
nodes and H what the switch (on the emulated cluster: the host, whose cores
forward every packet) carries at most in all, measured with p streams at
once. Prints the predicted all-reduce time per step for each count.

Efficiency = single-rank step / predicted step (weak scaling). The table
ends with the node count from which communication would dominate (exposed
comm > compute), for each mode.

Inputs: the single-rank compute time (--compute-ms, or --metrics
METRICS.h5 for the median compute_s of a real run), the gradient size
(--params and --wire, or --grad-mb), the backward share of compute, and the
link parameters (defaults: NVLink 4 at 450 GB/s per direction per GPU and
2 us per message; one 400 Gb/s NDR InfiniBand NIC per GPU at 50 GB/s and
5 us). All of them are printed with the table; docs/scaling.md lists the
assumptions next to what was measured here.
"""
import argparse
import math


def allreduce_seconds(nbytes, nodes, gpus, a):
    """Hierarchical ring all-reduce of nbytes, in a.buckets messages."""
    k = max(1, math.ceil(nbytes / (a.bucket_mb * 2**20)))
    nvl_bw, ib_bw = a.nvlink_gbs * 1e9, a.ib_gbs * 1e9
    intra = 2 * (gpus - 1) * (k * a.nvlink_us * 1e-6 + nbytes / (gpus * nvl_bw)) if gpus > 1 else 0.0
    inter = 2 * (nodes - 1) * (k * a.ib_us * 1e-6 + nbytes / (gpus * nodes * ib_bw)) if nodes > 1 else 0.0
    return intra + inter, k


def flat_ring_seconds(nbytes, ranks, a):
    """MPI ring all-reduce of nbytes over `ranks` nodes, one link each."""
    if ranks < 2:
        return 0.0
    k = max(1, math.ceil(nbytes / (a.bucket_mb * 2**20)))
    per_link = a.link_gbit * 1e9 / 8 * a.payload
    if a.host_gbs:
        per_link = min(per_link, a.host_gbs * 1e9 / ranks)
    return k * 2 * (ranks - 1) * a.link_us * 1e-6 + 2 * (ranks - 1) / ranks * nbytes / per_link


def flat_table(nbytes, a):
    print(f"gradient {nbytes / 2**20:.2f} MiB in buckets of {a.bucket_mb:g} MiB; links {a.link_gbit:g} Gbit/s "
          f"(payload {a.payload:.3f}), {a.link_us:g} us one way"
          + (f", at most {a.host_gbs:g} GB/s in all" if a.host_gbs else ""))
    print(f"{'ranks':>5} {'all-reduce ms':>14}")
    for ranks in a.flat:
        print(f"{ranks:>5} {1000 * flat_ring_seconds(nbytes, ranks, a):>14.2f}")


def measured_compute_ms(path):
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        compute = f["train"]["compute_s"][:]
    skip = max(5, len(compute) // 10)
    return 1000.0 * float(np.median(compute[skip:] if len(compute) > skip else compute))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--compute-ms", type=float, help="single-rank forward+backward+update time per step")
    p.add_argument("--metrics", help="take --compute-ms as the median compute_s of this run's metrics.h5")
    p.add_argument("--backward-share", type=float, default=2 / 3, help="share of compute that is backward (2/3)")
    p.add_argument("--params", type=float, default=47.6e6,
                   help="parameters (default 47.6e6: WikiText-2-sized GRU, vocab 33278, 1024/1024, 2 layers, tied)")
    p.add_argument("--wire", choices=["fp32", "fp16", "bf16"], default="fp16")
    p.add_argument("--grad-mb", type=float, help="gradient MiB on the wire (overrides --params/--wire)")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--max-nodes", type=int, default=64)
    p.add_argument("--nvlink-gbs", type=float, default=450.0, help="NVLink GB/s per GPU per direction")
    p.add_argument("--nvlink-us", type=float, default=2.0)
    p.add_argument("--ib-gbs", type=float, default=50.0, help="InfiniBand GB/s per GPU (one NIC each)")
    p.add_argument("--ib-us", type=float, default=5.0)
    p.add_argument("--flat", type=lambda v: [int(x) for x in v.split()],
                   help='rank counts ("2 4") on flat Ethernet, one rank a node: all-reduce time only')
    p.add_argument("--link-gbit", type=float, default=10.0, help="--flat: link rate, Gbit/s")
    p.add_argument("--link-us", type=float, default=50.0, help="--flat: one-way latency between nodes, us")
    p.add_argument("--payload", type=float, default=1448 / 1514, help="--flat: data share of a frame")
    p.add_argument("--host-gbs", type=float, help="--flat: the most all links carry at once, GB/s")
    a = p.parse_args()
    nbytes = a.grad_mb * 2**20 if a.grad_mb else a.params * (4 if a.wire == "fp32" else 2)
    if a.flat:
        flat_table(nbytes, a)
        return
    if a.metrics:
        a.compute_ms = measured_compute_ms(a.metrics)
    if a.compute_ms is None:
        p.error("give --compute-ms or --metrics")
    compute = a.compute_ms / 1000.0
    backward = compute * a.backward_share
    g = a.gpus_per_node
    print(f"compute {a.compute_ms:.2f} ms/step (backward {100 * a.backward_share:.0f}%), gradient "
          f"{nbytes / 2**20:.1f} MiB ({a.wire if not a.grad_mb else 'as given'}), buckets of {a.bucket_mb:g} MiB, "
          f"{g} GPUs/node; NVLink {a.nvlink_gbs:g} GB/s + {a.nvlink_us:g} us, IB {a.ib_gbs:g} GB/s + {a.ib_us:g} us")
    print(f"{'nodes':>5} {'ranks':>6} {'comm ms':>8} {'step ms':>8} {'eff':>6} {'step ms':>9} {'eff':>6}")
    print(f"{'':>5} {'':>6} {'':>8} {'(no overlap)':>15} {'(overlap)':>16}")
    dominate = {"no overlap": None, "overlap": None}
    nodes = 1
    while nodes <= a.max_nodes:
        comm, k = allreduce_seconds(nbytes, nodes, g, a)
        last_bucket = comm / k
        hidden = max(0.0, backward - backward / k)  # backward after the first bucket is ready
        exposed = max(comm - hidden, last_bucket if k > 1 else comm)
        plain, overlapped = compute + comm, compute + exposed
        if comm > compute and dominate["no overlap"] is None:
            dominate["no overlap"] = nodes
        if exposed > compute and dominate["overlap"] is None:
            dominate["overlap"] = nodes
        print(f"{nodes:>5} {nodes * g:>6} {1000 * comm:>8.2f} {1000 * plain:>8.2f} {100 * compute / plain:>5.1f}% "
              f"{1000 * overlapped:>9.2f} {100 * compute / overlapped:>5.1f}%")
        nodes *= 2
    for mode, n in dominate.items():
        print(f"communication dominates ({mode}): " +
              (f"from {n} node(s)" if n else f"not up to {a.max_nodes} nodes"))


if __name__ == "__main__":
    main()

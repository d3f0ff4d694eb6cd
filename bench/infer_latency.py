#!/usr/bin/env python3
"""Latency of `rnn_dist generate --stdin` and `rnn_dist predict --stdin`:
one process keeps the model loaded and answers requests one at a time, as a
pipe server would. Each request is written, then its answer line read; the
time between is the request's latency (the process start and the model
load are not counted: a warm-up request goes first).

  infer_latency.py --rnn-dist build/rnn_dist --lm MODEL.h5 [--classifier MODEL.h5]
                   [--words 20] [--requests 200] [--threads 1,2]

Rows: the language model fed a prompt of --words words answering 1 token
(the cost of reading a 20-token input), the same answering 20 tokens
(per-token generation cost = the difference / 19), and the classifier
labelling lines of --words words. Words are drawn from the model's own
vocabulary (ids 2..501), a fixed sequence per row. Prints one table:
median, 90th percentile and max in milliseconds."""
import argparse
import os
import statistics
import subprocess
import time

import h5py


def vocabulary(path):
    with h5py.File(path, "r") as f:
        return [w.decode() for w in f["vocab"][()]]


def lines_of(vocab, words, n):
    pool = vocab[2:502]
    return [" ".join(pool[(i * 7 + k * 13) % len(pool)] for k in range(words)) for i in range(n)]


def measure(cmd, requests, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.Popen(cmd + ["--threads", str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, bufsize=1, env=env)
    times = []
    for i, line in enumerate(requests):
        t0 = time.perf_counter()
        p.stdin.write(line + "\n")
        p.stdin.flush()
        answer = p.stdout.readline()
        if not answer:
            raise SystemExit(f"{cmd[1]}: no answer to request {i}")
        if i > 0:  # the first one warms up
            times.append((time.perf_counter() - t0) * 1e3)
    p.stdin.close()
    p.wait()
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))], times[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rnn-dist", required=True)
    ap.add_argument("--lm", required=True)
    ap.add_argument("--classifier")
    ap.add_argument("--words", type=int, default=20)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    rows = []
    lm_lines = lines_of(vocabulary(a.lm), a.words, a.requests + 1)
    for tokens in (1, 20):
        rows.append((f"generate: {a.words}-word prompt, {tokens} token(s)",
                     [a.rnn_dist, "generate", "--checkpoint", a.lm, "--stdin", "--tokens", str(tokens),
                      "--temperature", "0"], lm_lines))
    if a.classifier:
        rows.append((f"predict: classify a {a.words}-word line",
                     [a.rnn_dist, "predict", "--checkpoint", a.classifier, "--stdin"],
                     lines_of(vocabulary(a.classifier), a.words, a.requests + 1)))
    print(f"{'request':44s} {'threads':>7s} {'median ms':>10s} {'p90 ms':>8s} {'max ms':>8s}")
    for name, cmd, lines in rows:
        for threads in [int(t) for t in a.threads.split(",")]:
            med, p90, worst = measure(cmd, lines, threads)
            print(f"{name:44s} {threads:7d} {med:10.3f} {p90:8.3f} {worst:8.3f}")


if __name__ == "__main__":
    main()

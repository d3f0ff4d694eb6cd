#!/usr/bin/env python3
"""Memory and speed against corpus size: rnn_prep and rnn_dist on a small
corpus and on one 50 times larger (issue: corpora of a billion tokens).

usage: large_corpus.py --text TRAIN.txt --valid VALID.txt --work DIR
                       [--repeat 50] [--steps 40] [--config configs/quickstart.ini]
                       [--rnn-prep build/rnn_prep] [--rnn-dist build/rnn_dist] [--mpirun mpirun]

The large corpus is TRAIN.txt repeated --repeat times (WikiText-2's 10.8 MB
train.txt gives 540 MB and 104 M tokens; no download). For each corpus:
rnn_prep's time, MB/s of text and peak RSS; then rnn_dist with CONFIG
(validation and test off) at 1 and 2 ranks: start-up time (launch to the
first progress line's worth of work: the time at which the header's last
line is printed), every rank's peak RSS (the largest is shown) and tokens/s
(the summary's, over --steps steps). One table, small and large side by
side, with the ratios the targets speak of.
"""
import argparse
import os
import re
import subprocess
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--text", required=True)
    p.add_argument("--valid", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--steps", type=int, default=40)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p.add_argument("--config", default=os.path.join(root, "configs", "quickstart.ini"))
    p.add_argument("--rnn-prep", default=os.path.join(root, "build", "rnn_prep"))
    p.add_argument("--rnn-dist", default=os.path.join(root, "build", "rnn_dist"))
    p.add_argument("--mpirun", default="mpirun")
    return p.parse_args()


def timed(cmd, env=None):
    """Runs cmd under /usr/bin/time; returns (seconds, peak RSS MiB, stdout)."""
    out = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", *cmd], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"large_corpus.py: {' '.join(cmd)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    seconds, kib = re.findall(r"^TIME ([0-9.]+) ([0-9]+)$", out.stderr, re.M)[-1]
    return float(seconds), int(kib) / 1024.0, out.stdout


def prep(a, text, out):
    size = os.path.getsize(text)
    seconds, rss, stdout = timed([a.rnn_prep, "--train", text, "--valid", a.valid, "--out", out])
    tokens = int(re.search(r"train\.h5: \d+ sequences, (\d+) tokens", stdout).group(1))
    return {"seconds": seconds, "mbs": size / seconds / 1e6, "rss": rss, "tokens": tokens, "mb": size / 1e6}


def train(a, data, ranks, out):
    """Start-up seconds, largest per-rank peak RSS (MiB), tokens/s."""
    rss_dir = out + ".rss"
    os.makedirs(rss_dir, exist_ok=True)
    args = [a.rnn_dist, "--config", a.config, "--set", f"data.dir={data}", "--set", "data.valid=none", "--set",
            "data.test=none", "--set", f"train.steps={a.steps}", "--set", f"train.log_every={a.steps}", "--set",
            f"output.dir={out}", "--set", f"train.threads={max(1, os.cpu_count() // ranks)}"]
    # every rank under /usr/bin/time, its RSS to a file named by its rank
    wrapped = ["sh", "-c", f'exec /usr/bin/time -f %M -o {rss_dir}/rank$OMPI_COMM_WORLD_RANK "$@"', "rank", *args]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS=str(max(1, os.cpu_count() // ranks)))
    cmd = [a.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", *wrapped]
    start = time.time()
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    startup, lines = None, []
    for line in job.stdout:
        lines.append(line)
        if startup is None and line.startswith("rnn_dist: backend"):
            startup = time.time() - start
    if job.wait() != 0:
        sys.exit("large_corpus.py: training failed:\n" + "".join(lines[-20:]))
    rss = max(int(open(os.path.join(rss_dir, f)).read().split()[-1]) for f in os.listdir(rss_dir)) / 1024.0
    tps = float(re.search(r"\((\d+) tok/s\)", "".join(lines)).group(1))
    return {"startup": startup, "rss": rss, "tps": tps}


def main():
    a = parse()
    os.makedirs(a.work, exist_ok=True)
    large_text = os.path.join(a.work, f"train_x{a.repeat}.txt")
    if not os.path.exists(large_text) or os.path.getsize(large_text) != a.repeat * os.path.getsize(a.text):
        with open(a.text, "rb") as src:
            block = src.read()
        with open(large_text, "wb") as dst:
            for _ in range(a.repeat):
                dst.write(block)
    rows = {}
    for name, text in (("small", a.text), ("large", large_text)):
        data = os.path.join(a.work, f"data_{name}")
        rows[name] = {"prep": prep(a, text, data)}
        for ranks in (1, 2):
            rows[name][ranks] = train(a, data, ranks, os.path.join(a.work, f"run_{name}_{ranks}"))
    s, l = rows["small"], rows["large"]
    print(f"(config {os.path.basename(a.config)}, {a.steps} steps, {os.cpu_count()} cores; one run each)")
    print(f"{'':40} {'small':>12} {'large':>12} {'large/small':>12}")
    print(f"{'corpus: text MB / tokens (M)':40} {s['prep']['mb']:>5.0f} /{s['prep']['tokens'] / 1e6:>5.1f} "
          f"{l['prep']['mb']:>5.0f} /{l['prep']['tokens'] / 1e6:>5.1f}")
    for key, label, fmt in (("seconds", "rnn_prep seconds", ".2f"), ("mbs", "rnn_prep MB/s of text", ".0f"),
                            ("rss", "rnn_prep peak RSS MiB", ".0f")):
        print(f"{label:40} {s['prep'][key]:>12{fmt}} {l['prep'][key]:>12{fmt}} {l['prep'][key] / s['prep'][key]:>11.2f}x")
    for ranks in (1, 2):
        for key, label, fmt in (("startup", "start-up s", ".2f"), ("rss", "peak RSS per rank MiB", ".0f"),
                                ("tps", "tokens/s", ".0f")):
            print(f"{f'rnn_dist {ranks} rank(s): {label}':40} {s[ranks][key]:>12{fmt}} {l[ranks][key]:>12{fmt}} "
                  f"{l[ranks][key] / s[ranks][key]:>11.2f}x")


if __name__ == "__main__":
    main()

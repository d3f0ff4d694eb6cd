#!/usr/bin/env python3
"""Time PyTorch training steps of the rnn_dist language model on the CPU.

The model is the one the C trainer implements (embedding -> GRU/LSTM ->
linear decoder, zero initial state). Each timed step is forward + backward +
clip_grad_norm_(0.5) + Adam step on one batch of random-token sequences with
lengths uniform in [--min-len, --max-len]. Batches are made before the clock
starts; --warmup steps run untimed first.

The variants a PyTorch user would try:
  --layout packed   pack_sequence(enforce_sorted=False) (the default)
  --layout padded   a [max_len, batch] tensor padded with token 0; the loss
                    and the token count take only the real tokens (the
                    padded positions are computed, not counted)
  --precision fp32  float32 throughout (the default)
  --precision bf16  torch.autocast('cpu', dtype=torch.bfloat16) around forward
                    and loss (fp32 master weights and Adam, as autocast does)

Threads: Debian's torch runs its own OpenMP pool and calls a separately
threaded OpenBLAS; left alone the two pools fight (about 2.5x slower with 2
cores). So with --threads N the script sets OPENBLAS_NUM_THREADS=N and
OMP_WAIT_POLICY=PASSIVE before importing torch (unless already set in the
environment, or with --keep-env), then torch.set_num_threads(N).

Prints the environment, a summary, and as its LAST line (machine readable):
  torch tokens_per_s <median over steps of tokens/step_time> steps <n>
where tokens = target tokens in the step's batch.

A benchmark baseline only; the C code never runs it.
"""

import argparse
import contextlib
import os
import platform
import re
import statistics
import time

import numpy as np


def set_thread_env(argv=None):
    """Sets the thread variables for --threads; they must precede `import torch`."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--threads", type=int, default=0)
    pre.add_argument("--keep-env", action="store_true")
    known, _ = pre.parse_known_args(argv)
    if known.threads > 0 and not known.keep_env:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", str(known.threads))
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


if __name__ == "__main__":
    set_thread_env()

import torch  # noqa: E402  (after set_thread_env)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.utils.rnn import PackedSequence, pack_sequence  # noqa: E402


class LanguageModel(nn.Module):
    """embedding -> dropout -> GRU/LSTM (packed, zero state) -> dropout -> decoder,
    with the trainer's init."""

    def __init__(self, cell, vocab, embed, hidden, layers, bidirectional=False, dropout=0.0):
        super().__init__()
        dirs = 2 if bidirectional else 1
        self.embedding = nn.Embedding(vocab, embed)
        rnn_class = nn.GRU if cell == "gru" else nn.LSTM
        self.rnn = rnn_class(embed, hidden, num_layers=layers, bidirectional=bidirectional,
                             dropout=dropout if layers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(hidden * dirs, vocab)
        with torch.no_grad():
            self.embedding.weight.uniform_(-0.1, 0.1)
            self.decoder.weight.uniform_(-0.1, 0.1)
            self.decoder.bias.zero_()

    def forward(self, inputs):
        if isinstance(inputs, PackedSequence):
            x = self.drop(self.embedding(inputs.data))
            out, _ = self.rnn(PackedSequence(x, inputs.batch_sizes, inputs.sorted_indices, inputs.unsorted_indices))
            return self.decoder(self.drop(out.data))
        out, _ = self.rnn(self.drop(self.embedding(inputs)))  # padded [T, B]
        return self.decoder(self.drop(out))


def loaded_blas():
    """Shared BLAS/LAPACK libraries mapped into this process (Linux), else torch's build info."""
    try:
        with open("/proc/self/maps") as maps:
            libs = sorted({l.split()[-1] for l in maps
                           if ".so" in l and any(k in l.lower() for k in ("blas", "mkl", "lapack"))})
        if libs:
            return ", ".join(libs)
    except OSError:
        pass
    info = re.findall(r"(BLAS_INFO=[^,]*|LAPACK_INFO=[^,]*)", torch.__config__.show())
    return ", ".join(info) or "unknown"


def make_batch(rng, args):
    """A batch of random sequences: (inputs, targets, n_targets). Packed: a
    PackedSequence and the packed targets. Padded: [T, B] inputs and targets,
    padding targets -100 (ignored by cross_entropy)."""
    lengths = rng.integers(args.min_len, args.max_len + 1, size=args.batch)
    seqs = [torch.from_numpy(rng.integers(0, args.vocab, size=(n, 2)).astype(np.int64))
            for n in lengths]
    if args.layout == "padded":
        T = int(lengths.max())
        inputs = torch.zeros(T, args.batch, dtype=torch.int64)
        targets = torch.full((T, args.batch), -100, dtype=torch.int64)
        for b, seq in enumerate(seqs):
            inputs[:len(seq), b] = seq[:, 0]
            targets[:len(seq), b] = seq[:, 1]
        return inputs, targets, int(lengths.sum())
    packed = pack_sequence(seqs, enforce_sorted=False)
    inputs = PackedSequence(packed.data[:, 0].contiguous(), packed.batch_sizes,
                            packed.sorted_indices, packed.unsorted_indices)
    return inputs, packed.data[:, 1].contiguous(), int(lengths.sum())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--cell", choices=("gru", "lstm"), default="gru")
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--embed", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=32, help="sequences per step")
    p.add_argument("--min-len", type=int, default=20)
    p.add_argument("--max-len", type=int, default=80)
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads; 0 = torch default")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--layout", choices=("packed", "padded"), default="packed")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: torch.autocast('cpu', torch.bfloat16) around forward and loss")
    p.add_argument("--keep-env", action="store_true",
                   help="do not set OPENBLAS_NUM_THREADS / OMP_WAIT_POLICY for --threads")
    args = p.parse_args()
    if not 1 <= args.min_len <= args.max_len:
        p.error("need 1 <= --min-len <= --max-len")
    if args.steps < 1:
        p.error("--steps must be >= 1")

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    print("torch %s, python %s, %s" % (torch.__version__, platform.python_version(), platform.machine()))
    print("threads %d (interop %d), cpu count %s" % (torch.get_num_threads(),
                                                    torch.get_num_interop_threads(), os.cpu_count()))
    print("  " + " ".join("%s=%s" % (v, os.environ.get(v, "(unset)")) for v in
                          ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY")))
    print("BLAS: %s" % loaded_blas())
    print("model %s layers %d embed %d hidden %d vocab %d; batch %d, lengths %d..%d; %s, %s; "
          "%d warmup + %d timed steps" % (args.cell, args.layers, args.embed, args.hidden, args.vocab,
                                          args.batch, args.min_len, args.max_len, args.layout, args.precision,
                                          args.warmup, args.steps))
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.precision == "bf16" else \
        contextlib.nullcontext

    model = LanguageModel(args.cell, args.vocab, args.embed, args.hidden, args.layers)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    model.train()

    batches = [make_batch(rng, args) for _ in range(args.warmup + args.steps)]
    rates, times = [], []
    for i, (inputs, targets, n_tokens) in enumerate(batches):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum",
                                   ignore_index=-100) / n_tokens
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        dt = time.perf_counter() - t0
        if i >= args.warmup:
            times.append(dt)
            rates.append(n_tokens / dt)

    print("step time ms: median %.1f min %.1f max %.1f; tokens/step mean %.0f; last loss %.4f"
          % (1e3 * statistics.median(times), 1e3 * min(times), 1e3 * max(times),
             np.mean([b[2] for b in batches[args.warmup:]]), loss.item()))
    print("torch tokens_per_s %.1f steps %d" % (statistics.median(rates), len(rates)))


if __name__ == "__main__":
    main()

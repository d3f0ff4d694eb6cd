#!/usr/bin/env python3
"""Time PyTorch training steps of the rnn_dist language model on a GPU.

The GPU counterpart of bench/torch_bench.py, with the same model
(embedding -> GRU/LSTM -> linear decoder, packed sequences with
pack_sequence(enforce_sorted=False), zero initial state, untied unless --tie;
loss = mean cross-entropy over the batch's target tokens) and the same
workload. Each timed step is forward + backward + unscale + clip_grad_norm_(0.5)
+ Adam step + loss-scaler update on one batch of random-token sequences with
lengths uniform in [--min-len, --max-len]. The batches are made and copied to
the device before the clock starts; --warmup steps run untimed first, and
torch.cuda.synchronize() precedes every clock reading.

Precision:
  fp32  plain fp32, with TF32 switched off for cuBLAS and cuDNN (so fp32 is
        IEEE fp32, as rnn_dist's fp32 is)
  fp16  torch.autocast(float16) + GradScaler (dynamic loss scaling)
  bf16  torch.autocast(bfloat16), no scaler

Peak memory is torch.cuda.max_memory_allocated() over all steps (weights,
gradients, Adam state, activations, workspaces taken from PyTorch's caching
allocator; not the CUDA context), minus the pre-generated batches except the
largest one, which a real trainer would also hold. Device memory is the
driver's count (cudaMemGetInfo) of memory in use after the run minus before
the model was made, the CUDA context already there, with the same batches
excluded: what the run took, the caching allocator's reserve and the
cuDNN/cuBLAS workspaces included, measured as bench_train measures rnn_dist
(its device_peak_mib).

--device cpu exists only to smoke-test the script on a machine without a GPU:
it runs fp32 whatever --precision says, and reports no peak memory.

Prints the environment, a summary, and as its LAST line (machine readable):
  torch tokens_per_s <median over steps of tokens/step_time> steps <n> peak_mib <MiB or nan> device_mib <MiB or nan>

A benchmark baseline only; the C code never runs it. Needs PyTorch only
(no numpy). Works with PyTorch 1.13 (CPU smoke test) and 2.x.
"""

import argparse
import contextlib
import math
import platform
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import PackedSequence, pack_sequence


class LanguageModel(nn.Module):
    """embedding -> GRU/LSTM (packed, zero state) -> decoder, with the trainer's init
    (as bench/torch_bench.py, without dropout)."""

    def __init__(self, cell, vocab, embed, hidden, layers, tie=False):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        rnn_class = nn.GRU if cell == "gru" else nn.LSTM
        self.rnn = rnn_class(embed, hidden, num_layers=layers)
        self.decoder = nn.Linear(hidden, vocab)
        with torch.no_grad():
            self.embedding.weight.uniform_(-0.1, 0.1)
            self.decoder.weight.uniform_(-0.1, 0.1)
            self.decoder.bias.zero_()
        if tie:
            self.decoder.weight = self.embedding.weight

    def forward(self, packed_inputs):
        x = self.embedding(packed_inputs.data)
        out, _ = self.rnn(PackedSequence(x, packed_inputs.batch_sizes,
                                         packed_inputs.sorted_indices,
                                         packed_inputs.unsorted_indices))
        return self.decoder(out.data)


def make_batch(gen, args, device):
    """A packed batch of random sequences on `device`: (inputs PackedSequence,
    targets, n_targets, bytes on the device)."""
    lengths = torch.randint(args.min_len, args.max_len + 1, (args.batch,), generator=gen)
    seqs = [torch.randint(0, args.vocab, (int(n), 2), generator=gen, dtype=torch.int64) for n in lengths]
    packed = pack_sequence(seqs, enforce_sorted=False)
    data = packed.data.to(device)
    sorted_idx, unsorted_idx = packed.sorted_indices.to(device), packed.unsorted_indices.to(device)
    inputs = PackedSequence(data[:, 0].contiguous(), packed.batch_sizes, sorted_idx, unsorted_idx)
    targets = data[:, 1].contiguous()
    nbytes = sum(t.numel() * t.element_size() for t in (inputs.data, targets, sorted_idx, unsorted_idx))
    return inputs, targets, int(lengths.sum()), nbytes


def set_ieee_fp32():
    """No TF32 in cuBLAS or cuDNN. PyTorch >= 2.9 has the fp32_precision settings
    (and warns about, and may refuse to mix, the old allow_tf32 flags); older
    versions only have the flags. Returns a description of what was set."""
    b = torch.backends
    if hasattr(b.cuda.matmul, "fp32_precision"):
        b.cuda.matmul.fp32_precision = "ieee"
        done = ["cuda.matmul"]
        for name in ("cudnn", "cudnn.conv", "cudnn.rnn"):
            obj = b
            for part in name.split("."):
                obj = getattr(obj, part, None)
            if obj is not None and hasattr(obj, "fp32_precision"):
                obj.fp32_precision = "ieee"
                done.append(name)
        return "fp32_precision = ieee for " + ", ".join(done)
    b.cuda.matmul.allow_tf32 = False
    b.cudnn.allow_tf32 = False
    return "allow_tf32 = False for cuda.matmul and cudnn"


def make_scaler(enabled):
    """GradScaler for CUDA: torch.amp.GradScaler where it exists (PyTorch >= 2.3),
    else torch.cuda.amp.GradScaler. Disabled, it passes everything through."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


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
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    p.add_argument("--tie", action="store_true", help="tie decoder and embedding weights (needs --embed == --hidden)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (smoke test only: runs fp32)")
    args = p.parse_args()
    if not 1 <= args.min_len <= args.max_len:
        p.error("need 1 <= --min-len <= --max-len")
    if args.steps < 1 or args.warmup < 0:
        p.error("need --steps >= 1 and --warmup >= 0")
    if min(args.vocab, args.embed, args.hidden, args.layers, args.batch) < 1:
        p.error("--vocab, --embed, --hidden, --layers and --batch must be >= 1")
    if args.tie and args.embed != args.hidden:
        p.error("--tie needs --embed == --hidden")
    device = torch.device(args.device)
    if device.type not in ("cuda", "cpu"):
        p.error("--device must be cuda, cuda:N or cpu")
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        p.error("--device %s: torch %s sees no CUDA device" % (args.device, torch.__version__))

    precision = args.precision
    if not cuda and precision != "fp32":
        print("note: --device cpu runs fp32 (smoke test only); --precision %s ignored" % precision)
        precision = "fp32"

    print("torch %s, python %s, %s" % (torch.__version__, platform.python_version(), platform.machine()))
    if cuda:
        torch.cuda.set_device(device)
        idx = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        print("device cuda:%d %s, sm_%d%d, %.1f GiB; CUDA runtime %s, cuDNN %s" % (
            idx, props.name, props.major, props.minor, props.total_memory / 2**30, torch.version.cuda,
            torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else "n/a"))
    else:
        print("device cpu (%s), threads %d; cuDNN n/a" % (platform.processor() or "unknown", torch.get_num_threads()))
    if cuda and precision == "fp32":
        print("fp32: " + set_ieee_fp32())
    print("model %s layers %d embed %d hidden %d vocab %d%s; batch %d, lengths %d..%d; precision %s; "
          "%d warmup + %d timed steps" % (args.cell, args.layers, args.embed, args.hidden, args.vocab,
                                          ", tied" if args.tie else "", args.batch, args.min_len,
                                          args.max_len, precision, args.warmup, args.steps))

    if cuda:
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]  # the context exists from here on
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = LanguageModel(args.cell, args.vocab, args.embed, args.hidden, args.layers, args.tie).to(device)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    model.train()
    n_params = sum(q.numel() for q in params)

    if cuda:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
    batches = [make_batch(gen, args, device) for _ in range(args.warmup + args.steps)]
    if cuda:
        torch.cuda.synchronize()
        batch_bytes = torch.cuda.memory_allocated() - before
        largest_batch = max(b[3] for b in batches)
        torch.cuda.reset_peak_memory_stats()

    autocast_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = make_scaler(precision == "fp16")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def autocast():
        if autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=autocast_dtype)

    rates, times, skipped = [], [], 0
    for i, (inputs, targets, n_tokens, _) in enumerate(batches):
        scale_before = scaler.get_scale() if scaler.is_enabled() else None
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            logits = model(inputs)
            loss = F.cross_entropy(logits, targets, reduction="sum") / n_tokens
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        scaler.step(opt)
        scaler.update()
        sync()
        dt = time.perf_counter() - t0
        if i >= args.warmup:
            times.append(dt)
            rates.append(n_tokens / dt)
            if scale_before is not None and scaler.get_scale() < scale_before:
                skipped += 1  # inf/NaN gradient: the scaler skipped Adam's step

    if cuda:
        peak = torch.cuda.max_memory_allocated() - batch_bytes + largest_batch
        peak_mib = peak / 2**20
        device_mib = (free_before - torch.cuda.mem_get_info()[0] - batch_bytes + largest_batch) / 2**20
        mem = "peak memory %.1f MiB (max_memory_allocated, pre-generated batches %.1f MiB excluded " \
              "but the largest); reserved %.1f MiB" % (peak_mib, (batch_bytes - largest_batch) / 2**20,
                                                       torch.cuda.max_memory_reserved() / 2**20)
    else:
        peak_mib = device_mib = math.nan
        mem = "peak memory n/a (cpu)"
    print("parameters %d; step time ms: median %.2f min %.2f max %.2f; tokens/step mean %.0f; last loss %.4f"
          % (n_params, 1e3 * statistics.median(times), 1e3 * min(times), 1e3 * max(times),
             sum(b[2] for b in batches[args.warmup:]) / args.steps, loss.item()))
    if scaler.is_enabled():
        print("loss scale %g at the end; %d of the timed steps skipped (inf/NaN gradients)"
              % (scaler.get_scale(), skipped))
    print(mem)
    print("torch tokens_per_s %.1f steps %d peak_mib %s device_mib %s" % (
        statistics.median(rates), len(rates), "nan" if math.isnan(peak_mib) else "%.1f" % peak_mib,
        "nan" if math.isnan(device_mib) else "%.1f" % device_mib))


if __name__ == "__main__":
    main()

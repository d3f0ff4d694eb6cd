#!/usr/bin/env python3
"""PyTorch reference for rnn_dist's forecasting task (model.task = regress).

Trains the model rnn_dist trains, from the same INI config and the same
rnn_dist-series data sets (rnn_prep --csv): input = nn.Linear(F, E) ->
dropout -> nn.GRU/nn.LSTM (packed, zero initial state, dropout between
layers) -> dropout -> decoder = nn.Linear(H, F), predicting the next step's
features, normalised with the data set's /mean and /std. The loss is the
mean over scored steps of the squared error averaged over the features.

Pieces are rnn_dist's: a series of n steps gives n - 1 (step, next step)
pairs; with data.target_last = k they are windows of data.max_len pairs
ending k apart, each scoring its last k pairs (every pair after the first
max_len - k is scored once); with k = 0, consecutive pieces of max_len
scoring every pair. Batches come from length buckets as in bench/torch_lm.py;
with --match-rnn-dist the batch plan and the initial weights are exactly
rnn_dist's (dropout masks still differ).

At the end the validation set (or --eval-set test) is evaluated over the
same windows; the last two lines printed are

  naive rmse <R> mae <M>          (the next step predicted by the last one)
  loss <mse> rmse <R> mae <M> steps <N>

with RMSE and MAE in the data's original units, the contract of
`rnn_dist eval` for forecasters.

Example:
  torch_forecast.py configs/sunspots_lstm.ini --data-dir data/sunspots --match-rnn-dist

A reference tool only; the C code never runs it.
"""

import argparse
import math
import os
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_lm  # noqa: E402  (config loader, rnn_dist's plan, learning rate)


def parse_command_line():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="rnn_dist INI config with model.task = regress")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--data-dir", help="override data.dir (train/valid/test.h5 inside it)")
    p.add_argument("--eval-set", choices=("valid", "test"), default="valid")
    p.add_argument("--match-rnn-dist", action="store_true",
                   help="rnn_dist's exact batch plan and initial weights")
    args = p.parse_args()
    cfg = torch_lm.load_config(args.config, args.set, args.data_dir)
    if cfg["model"]["task"] != "regress":
        p.error("the config's model.task must be regress")
    if cfg["data"]["mode"] != "pieces" or cfg["model"]["bidirectional"]:
        p.error("this reference covers data.mode = pieces, unidirectional models")
    return args, cfg


ARGS, CFG = parse_command_line()
torch_lm.set_thread_env(CFG["train"]["threads"])
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence  # noqa: E402


class Series:
    """An rnn_dist-series file in pair space: pair p = (row input_row[p], the next row)."""

    def __init__(self, path):
        with h5py.File(path, "r") as f:
            if torch_lm.attr_str(f.attrs.get("format", "")) != "rnn_dist-series":
                sys.exit("%s: not an rnn_dist-series data set (rnn_prep --csv)" % path)
            self.values = f["values"][()].astype(np.float32)
            rows = f["offsets"][()].astype(np.int64)
            self.mean, self.std = f["mean"][()].astype(np.float32), f["std"][()].astype(np.float32)
        self.norm = (self.values - self.mean) / self.std
        steps = np.diff(rows)
        self.offsets = np.concatenate([[0], np.cumsum(steps - 1)]).astype(np.int64)
        self.input_row = np.concatenate([np.arange(a, b - 1) for a, b in zip(rows[:-1], rows[1:])])

    def pieces(self, max_len, k):
        """(starts, lengths, scored) as rnn_dist's sampler cuts them."""
        out = []
        for a, b in zip(self.offsets[:-1], self.offsets[1:]):
            rows = int(b - a)
            if k <= 0 or k >= max_len:
                out += [(a + s, min(max_len, rows - s), min(max_len, rows - s)) for s in range(0, rows, max_len)]
                continue
            end = min(rows, max_len)
            before = end - k if end > k else 0
            while True:
                start = max(0, end - max_len)
                out.append((a + start, end - start, end - before))
                if end == rows:
                    break
                before, end = end, min(end + k, rows)
        return tuple(np.array(c, dtype=np.int64) for c in zip(*out))


class Forecaster(nn.Module):
    def __init__(self, cell, features, embed, hidden, layers, dropout):
        super().__init__()
        self.input = nn.Linear(features, embed)
        self.rnn = (nn.GRU if cell == "gru" else nn.LSTM)(embed, hidden, num_layers=layers,
                                                         dropout=dropout if layers > 1 else 0.0)
        self.decoder = nn.Linear(hidden, features)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(self.drop(self.input(x)), lengths, enforce_sorted=False)
        out, _ = pad_packed_sequence(self.rnn(packed)[0], total_length=x.shape[0])
        return self.decoder(self.drop(out))


def c_init(model, seed, features):
    """rnn_dist's model_init_params for a forecaster: view i of the state dict gets
    U(-b, b) from hash(hash(seed ^ 0x1A17, i), element); b = 1/sqrt(fan-in)
    (input: F, recurrent: H, decoder: H)."""
    U64 = torch_lm.U64
    with torch.no_grad():
        for i, (name, tensor) in enumerate(model.state_dict(keep_vars=True).items()):
            fan_in = features if name.startswith("input.") else model.rnn.hidden_size
            bound = np.float32(1.0) / np.sqrt(np.float32(fan_in))
            key = torch_lm.rng_key2(U64(seed) ^ U64(0x1A17), U64(i))
            u = torch_lm.rng_uniform_from(torch_lm.rng_key2(key, np.arange(tensor.numel(), dtype=U64)))
            tensor.copy_(torch.from_numpy((bound * (np.float32(2.0) * u - np.float32(1.0))).reshape(tensor.shape)))


def make_batch(ds, starts, lengths, scored):
    """Padded [T, B, F] inputs and targets, the scored mask [T, B], lengths."""
    steps, n, f = int(lengths.max()), len(starts), ds.norm.shape[1]
    x, y, mask = np.zeros((steps, n, f), np.float32), np.zeros((steps, n, f), np.float32), np.zeros((steps, n))
    for i, (s, length, k) in enumerate(zip(starts, lengths, scored)):
        rows = ds.input_row[s:s + length]
        x[:length, i], y[:length, i] = ds.norm[rows], ds.norm[rows + 1]
        mask[length - k:length, i] = 1.0
    return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(mask), torch.from_numpy(lengths)


def batch_errors(model, ds, batch):
    """(sum of per-step MSE, squared and absolute errors in original units, values, scored steps)."""
    x, y, mask, lengths = batch
    pred = model(x, lengths)
    per_step = ((pred - y) ** 2).mean(dim=2)
    original = (pred - y).detach() * torch.from_numpy(ds.std)
    scored = mask.bool()
    return ((per_step * mask).sum(), float((original[scored] ** 2).sum()), float(original[scored].abs().sum()),
            int(scored.sum()) * x.shape[2], int(scored.sum()))


def evaluate(model, ds, max_len, k, batch_size):
    model.eval()
    starts, lengths, scored = ds.pieces(max_len, k)
    sums = np.zeros(5)
    with torch.no_grad():
        for i in range(0, len(starts), batch_size):
            nll, sq, ab, values, steps = batch_errors(model, ds, make_batch(ds, starts[i:i + batch_size],
                                                                           lengths[i:i + batch_size],
                                                                           scored[i:i + batch_size]))
            sums += [float(nll), sq, ab, values, steps]
    model.train()
    # the naive forecast over the same scored pairs: the next step = this one
    rows = np.concatenate([ds.input_row[s + n - k_:s + n] for s, n, k_ in zip(starts, lengths, scored)])
    naive = (ds.values[rows] - ds.values[rows + 1]).astype(np.float64)
    return (sums[0] / sums[4], math.sqrt(sums[1] / sums[3]), sums[2] / sums[3], int(sums[4]),
            math.sqrt(np.mean(naive ** 2)), float(np.mean(np.abs(naive))))


def main(args, cfg):
    m, d, t = cfg["model"], cfg["data"], cfg["train"]
    torch.set_num_threads(torch_lm.thread_count(t["threads"]))
    train_set, eval_set = Series(d["train"]), Series(d[args.eval_set])
    features = train_set.values.shape[1]
    torch.manual_seed(t["seed"])
    model = Forecaster(m["cell"], features, m["embed"], m["hidden"], m["layers"], m["dropout"])
    if args.match_rnn_dist:
        c_init(model, t["seed"], features)
    params = list(model.parameters())
    opt = torch_lm.make_optimizer(model, t)
    k = d["target_last"]
    starts, lengths, scored = train_set.pieces(d["max_len"], k)
    bounds = (torch_lm.c_bucket_bounds if args.match_rnn_dist else torch_lm.bucket_bounds)(
        lengths, d["buckets"], d["num_buckets"])
    plan = torch_lm.c_epoch_plan if args.match_rnn_dist else torch_lm.epoch_plan
    bucket_of = np.minimum(np.searchsorted(bounds, lengths, side="left"), len(bounds) - 1)
    per_epoch = len(plan(bucket_of, len(bounds), t["global_batch"], t["seed"], 0, lengths, t["global_batch_tokens"]))
    total = t["steps"] if t["steps"] > 0 else t["epochs"] * per_epoch
    print("torch %s; %s: %d pairs, %d features, %d pieces (max_len %d, target_last %d); %d steps"
          % (torch.__version__, d["train"], len(train_set.input_row), features, len(starts), d["max_len"], k, total),
          flush=True)
    step, epoch, t0 = 0, 0, time.time()
    while step < total:
        for sel in plan(bucket_of, len(bounds), t["global_batch"], t["seed"], epoch, lengths,
                        t["global_batch_tokens"]):
            if step >= total:
                break
            sel = np.sort(sel)
            lr = torch_lm.learning_rate(t, step, total)
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad(set_to_none=True)
            nll, sq, _, values, steps = batch_errors(model, train_set,
                                                     make_batch(train_set, starts[sel], lengths[sel], scored[sel]))
            (nll / steps).backward()
            if t["clip_norm"] > 0:
                torch.nn.utils.clip_grad_norm_(params, t["clip_norm"])
            opt.step()
            step += 1
            if step % t["log_every"] == 0 or step == total:
                print("step %d/%d epoch %d loss %.5f rmse %.5g lr %.3g" % (step, total, epoch, nll.item() / steps,
                                                                          math.sqrt(sq / values), lr), flush=True)
        epoch += 1
    print("trained %d steps in %.1f s" % (step, time.time() - t0), flush=True)
    loss, rmse, mae, n, naive_rmse, naive_mae = evaluate(model, eval_set, d["max_len"], k, t["eval_batch"])
    print("%s set %s" % (args.eval_set, d[args.eval_set]))
    print("naive rmse %.6g mae %.6g" % (naive_rmse, naive_mae))
    print("loss %.6f rmse %.6g mae %.6g steps %d" % (loss, rmse, mae, n), flush=True)


if __name__ == "__main__":
    main(ARGS, CFG)

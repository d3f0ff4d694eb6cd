#!/usr/bin/env python3
"""bench/torch_lm.py's AWD-LSTM side (the PyTorch half of the time-to-quality
comparison) computes rnn_dist's function:

  1. awd_loss_sum (packed) with every mask off equals tests/torch_reference.py's
     regularised_loss (the definitions test_regularisers checks rnn_dist
     against): NLL, AR and TAR, GRU and LSTM, in float64;
  2. awd_loss_sum_padded equals awd_loss_sum, and loss_sum_padded equals
     the packed evaluation, on the same pieces;
  3. with the dropout rates on, every draw differs and stays finite, and
     each regulariser changes the loss;
  4. WeightAverage is rnn_dist's average (copy at ema_start, then
     decay * avg + (1 - decay) * w), and swap exchanges and restores;
  5. a 6-step training run on --data with every regulariser and averaging
     on writes a curve CSV with its evaluations and ends with the contract
     line: pieces packed and padded, and data.mode = stream;
  6. stream windows: the state carried through awd_window_loss gives one
     long window's loss, and the fused [T, B] path equals the packed
     stream_loss from the same carried state.

  torch_lm_awd.py --torch-lm bench/torch_lm.py --data DIR --work DIR
"""
import argparse
import importlib.util
import math
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import torch_reference as tr  # noqa: E402

FAILURES = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        FAILURES.append(what)


def load_torch_lm(path):
    spec = importlib.util.spec_from_file_location("torch_lm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Tokens:
    """The two arrays of torch_lm.DataSet that make_batch reads."""

    def __init__(self, tokens):
        self.tokens = tokens
        self.inputs = np.concatenate([[tr.EOS_ID], tokens[:-1]])


def regulariser_keys(**rates):
    keys = dict(dropout=0.0, locked_dropout=True, embedding_dropout=0.0, weight_dropout=0.0, ar_alpha=2.0,
                tar_beta=1.5)
    keys.update(rates)
    return keys


def check_functions(tl):
    rng = np.random.default_rng(1)
    data = Tokens(rng.integers(0, 50, size=200))
    pieces = [(0, 30), (40, 17), (70, 30), (120, 5), (150, 1)]
    starts = np.array([s for s, _ in pieces])
    lengths = np.array([n for _, n in pieces])
    torch.manual_seed(0)
    for cell in ("gru", "lstm"):
        model = tl.LanguageModel(cell, 50, 16, 16, 2, False, 0.0, True).double()
        model.reset_parameters()
        m = regulariser_keys()
        reference = dict(seed=1, step=0, p=0.0, locked=1, p_embedding=0.0, ar_alpha=2.0, tar_beta=1.5, p_weight=0.0)
        ref_total, ref_nll = tr.regularised_loss(model, data.tokens, pieces, reference)
        inputs, targets = tl.make_batch(data, starts, lengths)
        n = targets.numel()
        total, nll = tl.awd_loss_sum(model, inputs, targets, m)
        check(abs(total.item() / n - ref_total.item()) < 1e-12 and abs(nll.item() / n - ref_nll.item()) < 1e-12,
              "%s: awd_loss_sum = torch_reference.regularised_loss (%.15f, %.15f)"
              % (cell, total.item() / n, ref_total.item()))
        inputs_p, targets_p, valid = tl.make_padded_batch(data, starts, lengths)
        padded = (inputs_p, targets_p, valid.double())
        total_p, nll_p = tl.awd_loss_sum_padded(model, padded, m)
        check(abs(total_p.item() - total.item()) < 1e-9 and abs(nll_p.item() - nll.item()) < 1e-9,
              "%s: padded = packed (%.12f, %.12f)" % (cell, total_p.item(), total.item()))
        eval_packed = model.loss_sum(inputs, targets).item()
        check(abs(tl.loss_sum_padded(model, padded).item() - eval_packed) < 1e-9,
              "%s: padded evaluation = packed evaluation" % cell)
        base = tl.awd_loss_sum(model, inputs, targets, regulariser_keys(ar_alpha=0.0, tar_beta=0.0))[0].item()
        for key, value in (("dropout", 0.3), ("embedding_dropout", 0.3), ("weight_dropout", 0.3)):
            keys = regulariser_keys(ar_alpha=0.0, tar_beta=0.0, **{key: value})
            draws = [tl.awd_loss_sum(model, inputs, targets, keys)[0].item() for _ in range(3)]
            check(len(set(draws)) == 3 and all(math.isfinite(d) for d in draws) and base not in draws,
                  "%s: %s %.1f: three different finite draws" % (cell, key, value))
        for key in ("ar_alpha", "tar_beta"):
            with_it = tl.awd_loss_sum(model, inputs, targets, regulariser_keys(**{
                "ar_alpha": 0.0, "tar_beta": 0.0, key: 1.0}))[0].item()
            check(with_it > base, "%s: %s adds to the loss" % (cell, key))


def check_stream_windows(tl):
    """data.mode = stream: awd_window_loss carries the state, so two windows
    with the state carried give one long window's NLL and AR (TAR off: it
    pairs steps within a window), and its fused [T, B] path equals the
    packed nn.Module path (stream_loss) from the same non-zero state."""
    rng = np.random.default_rng(2)
    data = Tokens(rng.integers(0, 50, size=300))
    starts, first, second = np.array([0, 100, 200]), 10, 7
    m = regulariser_keys(tar_beta=0.0)
    torch.manual_seed(0)
    for cell in ("gru", "lstm"):
        model = tl.LanguageModel(cell, 50, 16, 16, 2, False, 0.0, True).double()
        model.reset_parameters()

        def batch(at, n):
            inputs, targets, valid = tl.make_padded_batch(data, at, np.full(3, n))
            return inputs, targets, valid.double()

        whole, whole_nll, _ = tl.awd_window_loss(model, batch(starts, first + second), m)
        a, a_nll, state = tl.awd_window_loss(model, batch(starts, first), m)
        b, b_nll, _ = tl.awd_window_loss(model, batch(starts + first, second), m, state)
        check(abs((a + b).item() - whole.item()) < 1e-9 and abs((a_nll + b_nll).item() - whole_nll.item()) < 1e-9,
              "%s: two windows with the state carried = one window (%.12f, %.12f)" % (cell, (a + b).item(),
                                                                                     whole.item()))
        plain = regulariser_keys(ar_alpha=0.0, tar_beta=0.0)
        _, fused, fused_state = tl.awd_window_loss(model, batch(starts + first, second), plain, state)
        packed, _, packed_state = tl.stream_loss(model, data, starts + first, np.full(3, second), state)
        pairs = zip(fused_state, packed_state) if cell == "lstm" else [(fused_state, packed_state)]
        check(abs(fused.item() - packed.item()) < 1e-9 and all(torch.allclose(x, y, atol=1e-12) for x, y in pairs),
              "%s: fused window = packed stream_loss from a carried state (%.12f, %.12f)"
              % (cell, fused.item(), packed.item()))


def check_average(tl):
    params = [torch.zeros(3), torch.zeros(2)]
    average = tl.WeightAverage(params, 0.5, 2)
    history = []
    for update in range(1, 6):
        with torch.no_grad():
            for p in params:
                p.fill_(float(update))
        history.append(float(update))
        average.update(update)
    expected = 2.0  # copy at update 2, then 0.5 * avg + 0.5 * w for 3, 4, 5
    for w in (3.0, 4.0, 5.0):
        expected = 0.5 * expected + 0.5 * w
    check(all(torch.all(a == expected) for a in average.average), "WeightAverage: %.4f after 5 updates from 2"
          % expected)
    average.swap()
    swapped = all(torch.all(p == expected) for p in params) and all(torch.all(a == 5.0) for a in average.average)
    average.swap()
    check(swapped and all(torch.all(p == 5.0) for p in params), "WeightAverage.swap exchanges and restores")


def check_training(torch_lm, data, work):
    os.makedirs(work, exist_ok=True)
    curve = os.path.join(work, "curve.csv")
    config = os.path.join(work, "awd.ini")
    model = ("[model]\ncell = lstm\nlayers = 2\nembed = 32\nhidden = 32\ntie_weights = true\ndropout = 0.25\n"
             "locked_dropout = true\nembedding_dropout = 0.05\nweight_dropout = 0.2\nar_alpha = 1\ntar_beta = 1\n")
    train = ("[train]\nsteps = 6\nglobal_batch = 8\neval_every = 3\nema_decay = 0.9\nema_start = 2\nlog_every = 3\n"
             "threads = 1\n")
    for layout, mode in (("packed", "pieces"), ("padded", "pieces"), ("packed", "stream")):
        with open(config, "w") as f:
            f.write(model + "[data]\nmode = %s\nmax_len = 20\nbptt = 20\n" % mode + train)
        r = subprocess.run([sys.executable, torch_lm, config, "--data-dir", data, "--layout", layout,
                            "--curve", curve], capture_output=True, text=True, timeout=600)
        lines = r.stdout.strip().splitlines()
        rows = open(curve).read().strip().splitlines() if os.path.exists(curve) else []
        check(r.returncode == 0 and lines and lines[-1].startswith("loss ") and len(rows) == 3
              and rows[0] == "minutes,ppl,step" and rows[1].endswith(",3") and rows[2].endswith(",6"),
              "%s, %s: 6 AWD steps with averaging train, evaluate at 3 and 6 (curve %s)" % (layout, mode, rows[1:]))
        if r.returncode:
            print(r.stderr[-2000:])
        os.remove(curve) if os.path.exists(curve) else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch-lm", required=True)
    ap.add_argument("--data", required=True, help="directory with train/valid/test.h5 (rnn_prep output)")
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    tl = load_torch_lm(a.torch_lm)
    check_functions(tl)
    check_stream_windows(tl)
    check_average(tl)
    check_training(a.torch_lm, a.data, a.work)
    if FAILURES:
        sys.exit("%d failed: %s" % (len(FAILURES), "; ".join(FAILURES)))
    print("all passed")


if __name__ == "__main__":
    main()

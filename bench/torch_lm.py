#!/usr/bin/env python3
"""PyTorch reference trainer for the rnn_dist quality check.

Trains exactly the model the C trainer implements, from the same INI config
and the same HDF5 data sets (rnn_prep output), so that final validation
losses can be compared:

  embedding -> dropout -> GRU/LSTM (PackedSequence, zero initial state,
  dropout between layers) -> dropout -> linear decoder (optionally tied to
  the embedding); loss = sum of cross-entropy over the batch's targets /
  number of targets.

Data: every sequence is cut into consecutive pieces of at most data.max_len
targets; a piece with targets tokens[s .. s+n) has inputs tokens[s-1 ..
s+n-1) (<eos> before the first token of the set), and starts from a zero
state. Pieces are grouped into length buckets (data.num_buckets quantiles, or
data.buckets bounds); each epoch shuffles within buckets, cuts them into
batches of train.global_batch pieces and shuffles the batch order (numpy
generator seeded with train.seed + epoch). The order differs from the C
trainer's; the distribution of batches is the same. With data.mode = stream
the tokens are train.global_batch contiguous streams read in windows of
data.bptt steps, the state carried (and detached) from window to window,
exactly rnn_dist's plan; the AWD-LSTM keys then run on [T, B] windows.

At the end the validation set (or --eval-set test) is evaluated: mean NLL
over every target (pieces of max_len, zero state each, train.eval_batch
pieces per batch in length order). The LAST line printed is

  loss <mean nll> ppl <exp(mean nll)> tokens <target count>

which is the contract of the C program's evaluation. With
--eval-only-checkpoint MODEL.h5 --data SET.h5 a model file (rnn_dist model
format) is evaluated instead, to cross-check the C evaluator.

Examples:
  torch_lm.py configs/wt2.ini --data-dir data/wt2 --set train.steps=200
  torch_lm.py --eval-only-checkpoint runs/x/model.h5 --data data/wt2/valid.h5

A reference tool only; the C code never runs it.
"""

import argparse
import configparser
import contextlib
import math
import os
import sys
import time

import h5py
import numpy as np

# ---------------------------------------------------------------------------
# Configuration (mirrors the key table of src/config.c)
# ---------------------------------------------------------------------------

# section -> key -> (type, default). Types: int, float, bool, str, or a tuple
# of allowed choices. Keys marked "ignored" below are accepted but unused.
CONFIG_KEYS = {
    "model": {
        "cell": (("gru", "lstm"), "gru"),
        "layers": (int, "2"),
        "embed": (int, "256"),
        "hidden": (int, "256"),
        "bidirectional": (bool, "false"),
        "dropout": (float, "0.0"),
        "tie_weights": (bool, "false"),
        "task": (("lm", "regress"), "lm"),  # regress: bench/torch_forecast.py
        "decoder": (("softmax", "adaptive"), "softmax"),
        "decoder_bias_init": (("zero", "unigram"), "zero"),
        "cutoffs": (str, "2000,10000"),
        "div_value": (float, "4.0"),
        # the AWD-LSTM regularisers (AWD_KEYS; their PyTorch form: awd_loss_sum)
        "locked_dropout": (bool, "false"),
        "embedding_dropout": (float, "0.0"),
        "weight_dropout": (float, "0.0"),
        "ar_alpha": (float, "0.0"),
        "tar_beta": (float, "0.0"),
    },
    "data": {
        "dir": (str, ""),
        "train": (str, ""),
        "valid": (str, ""),
        "test": (str, ""),
        "max_len": (int, "70"),
        "buckets": (str, "auto"),
        "num_buckets": (int, "8"),
        "mode": (("pieces", "stream"), "pieces"),
        "bptt": (int, "70"),
        "target_last": (int, "0"),
    },
    "train": {
        "device": (("auto", "cpu", "cuda"), "auto"),  # ignored: always CPU here
        "precision": (("fp32", "fp16", "bf16"), "fp32"),  # fp32 here unless --autocast (bf16)
        "seed": (int, "1234"),
        "steps": (int, "0"),
        "epochs": (int, "1"),
        "global_batch": (int, "32"),
        "global_batch_tokens": (int, "0"),
        "eval_batch": (int, "64"),
        "optimizer": (("adam", "sgd"), "adam"),
        "lr": (float, "0.001"),
        "lr_schedule": (("constant", "linear", "cosine", "step"), "constant"),
        "warmup_steps": (int, "0"),
        "min_lr": (float, "0.0"),
        "step_size": (int, "1000"),
        "gamma": (float, "0.5"),
        "beta1": (float, "0.9"),
        "beta2": (float, "0.999"),
        "eps": (float, "1e-8"),
        "weight_decay": (float, "0.0"),
        "momentum": (float, "0.0"),
        "clip_norm": (float, "0.5"),
        "bptt_segment": (int, "0"),  # ignored: segments change the memory, not the gradients
        "log_every": (int, "50"),
        "eval_every": (int, "0"),
        "threads": (int, "0"),
        "time_limit_s": (float, "0"),
        "ema_decay": (float, "0.0"),  # averaged weights for evaluation: WeightAverage
        "ema_start": (int, "1"),
    },
    "amp": {  # ignored: fp32 only
        "loss_scaling": (bool, "true"),
        "init_scale": (float, "65536"),
        "growth_factor": (float, "2"),
        "backoff_factor": (float, "0.5"),
        "growth_interval": (int, "2000"),
        "min_scale": (float, "1"),
        "max_scale": (float, "16777216"),
    },
    "comm": {  # ignored: one process, nothing on a wire
        "bucket_mb": (float, "25"),
        "grad_dtype": (("fp32", "fp16", "bf16", "auto"), "auto"),
        "check_every": (int, "100"),
        "timeout_s": (float, "900"),
    },
    "metrics": {  # ignored: this script keeps no metrics file
        "hist_every": (int, "100"),
    },
    "output": {  # ignored: this script saves only with --save
        "dir": (str, "runs/default"),
        "save_every": (int, "0"),
        "checkpoint_every": (int, "0"),
        "keep": (int, "3"),
        "preempt_exit_code": (int, "0"),
    },
}

TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


AWD_KEYS = ("locked_dropout", "embedding_dropout", "weight_dropout", "ar_alpha", "tar_beta")


def convert(section, key, text, where):
    kind, _ = CONFIG_KEYS[section][key]
    try:
        if kind is bool:
            if text.lower() in TRUE_WORDS:
                return True
            if text.lower() in FALSE_WORDS:
                return False
            raise ValueError("not a boolean (true/false)")
        if isinstance(kind, tuple):
            if text not in kind:
                raise ValueError("not one of: " + ", ".join(kind))
            return text
        return kind(text)
    except ValueError as e:
        sys.exit("%s: %s.%s = '%s': %s" % (where, section, key, text, e))


def set_key(cfg, section, key, text, where):
    if section not in CONFIG_KEYS:
        sys.exit("%s: unknown section [%s] (sections: %s)" % (where, section, ", ".join(CONFIG_KEYS)))
    if key not in CONFIG_KEYS[section]:
        sys.exit("%s: unknown key '%s.%s' (keys: %s)"
                 % (where, section, key, ", ".join(CONFIG_KEYS[section])))
    cfg[section][key] = convert(section, key, text.strip(), where)


def load_config(path, overrides, data_dir):
    """Defaults, then the INI file, then --set overrides, then --data-dir."""
    cfg = {s: {k: convert(s, k, d, "default") for k, (_, d) in keys.items()}
           for s, keys in CONFIG_KEYS.items()}
    if path:
        parser = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), interpolation=None,
                                           strict=False)  # a repeated key: the last wins
        parser.optionxform = str  # keys are case-sensitive, as in the C parser
        try:
            with open(path) as f:
                parser.read_file(f)
        except (OSError, configparser.Error) as e:
            sys.exit("%s: %s" % (path, e))
        for section in parser.sections():
            for key, value in parser.items(section):
                set_key(cfg, section, key, value, path)
    for assignment in overrides:
        name, eq, value = assignment.partition("=")
        section, dot, key = name.partition(".")
        if not eq or not dot:
            sys.exit("--set %s: expected section.key=value" % assignment)
        set_key(cfg, section.strip(), key.strip(), value, "--set " + assignment)
    if data_dir is not None:
        cfg["data"]["dir"] = data_dir
    for name in ("train", "valid", "test"):
        if not cfg["data"][name] and cfg["data"]["dir"]:
            cfg["data"][name] = os.path.join(cfg["data"]["dir"], name + ".h5")
    if cfg["train"]["global_batch_tokens"] < 0:
        sys.exit("config: train.global_batch_tokens must be >= 0")
    m = cfg["model"]
    dirs = 2 if m["bidirectional"] else 1
    if m["tie_weights"] and m["decoder"] == "adaptive":
        sys.exit("config: model.tie_weights needs model.decoder = softmax")
    if m["tie_weights"] and m["embed"] != m["hidden"] * dirs:
        sys.exit("config: model.tie_weights needs model.embed (%d) = model.hidden x directions (%d)"
                 % (m["embed"], m["hidden"] * dirs))
    if m["decoder_bias_init"] == "unigram" and (m["task"] != "lm" or m["decoder"] != "softmax"):
        sys.exit("config: model.decoder_bias_init = unigram needs model.task = lm and model.decoder = softmax")
    awd = [f"model.{k}" for k in AWD_KEYS if m[k]] + (["train.ema_decay"] if cfg["train"]["ema_decay"] else [])
    if awd and (m["task"] != "lm" or m["bidirectional"] or m["decoder"] != "softmax"):
        sys.exit("config: %s: the AWD-LSTM regularisers here are for a unidirectional language model with the "
                 "full softmax" % ", ".join(awd))
    return cfg


def parse_command_line():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", help="rnn_dist INI config (optional with --eval-only-checkpoint)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config key (repeatable)")
    p.add_argument("--data-dir", help="override data.dir (train/valid/test.h5 inside it)")
    p.add_argument("--eval-set", choices=("valid", "test"), default="valid",
                   help="set evaluated at the end of training (default valid)")
    p.add_argument("--match-rnn-dist", action="store_true",
                   help="draw rnn_dist's exact batch plan and start from its exact initial weights "
                        "(dropout masks still differ), for step-by-step comparison of loss curves")
    p.add_argument("--c-dropout", action="store_true",
                   help="with --match-rnn-dist: also apply rnn_dist's exact dropout masks (layers run one "
                        "at a time), so both programs compute the same function at every step")
    p.add_argument("--autocast", action="store_true",
                   help="with train.precision = bf16: train and evaluate under torch.autocast('cpu', "
                        "torch.bfloat16), PyTorch's own mixed precision (default: fp32 whatever the precision)")
    p.add_argument("--layout", choices=("packed", "padded"), default="packed",
                   help="batches as PackedSequence (default; rnn_dist's packing) or padded [T, B] tensors "
                        "(nn.LSTM's fused oneDNN kernel; padded positions computed, not counted)")
    p.add_argument("--curve", metavar="FILE.csv",
                   help="write minutes,ppl,step for every evaluation (train.eval_every and the end), minutes "
                        "on the training clock (evaluations included), for bench/time_to_quality.py --csv")
    p.add_argument("--save", metavar="MODEL.h5", help="write the trained model (model-file format)")
    p.add_argument("--eval-only-checkpoint", metavar="MODEL.h5",
                   help="evaluate this model file on --data instead of training")
    p.add_argument("--data", metavar="SET.h5", help="data set for --eval-only-checkpoint")
    args = p.parse_args()
    if args.c_dropout and args.config and "mode = stream" in open(args.config).read():
        p.error("--c-dropout is for data.mode = pieces")
    if args.layout == "padded" and (args.c_dropout or args.eval_only_checkpoint):
        p.error("--layout padded is for training with PyTorch's own masks (not --c-dropout or --eval-only-checkpoint)")
    if args.c_dropout and not args.match_rnn_dist:
        p.error("--c-dropout needs --match-rnn-dist (the masks are keyed by rnn_dist's piece ids)")
    if args.eval_only_checkpoint and not args.data:
        p.error("--eval-only-checkpoint needs --data")
    if args.data and not args.eval_only_checkpoint:
        p.error("--data is only for --eval-only-checkpoint")
    if not args.config and not args.eval_only_checkpoint:
        p.error("a config file is needed for training")
    cfg = load_config(args.config, args.set, args.data_dir)
    if args.c_dropout and any(cfg["model"][k] for k in AWD_KEYS):
        p.error("--c-dropout reproduces model.dropout's masks only, not the AWD-LSTM regularisers'")
    return args, cfg


def thread_count(threads):
    """train.threads, where 0 means every core this process may use."""
    if threads > 0:
        return threads
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def set_thread_env(threads):
    """Debian's torch has its own OpenMP pool and calls a separately threaded
    OpenBLAS; with both busy-waiting they fight. Give OpenBLAS the same count
    and make OpenMP wait passively (unless the environment says otherwise).
    Must run before `import torch`."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(thread_count(threads)))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


if __name__ == "__main__":
    ARGS, CFG = parse_command_line()
    set_thread_env(CFG["train"]["threads"])

import torch  # noqa: E402  (after set_thread_env)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.utils.rnn import PackedSequence  # noqa: E402

# ---------------------------------------------------------------------------
# Model and model files
# ---------------------------------------------------------------------------


class LanguageModel(nn.Module):
    """embedding -> dropout -> GRU/LSTM (packed, zero state) -> dropout -> decoder."""

    def __init__(self, cell, vocab, embed, hidden, layers, bidirectional, dropout, tie, adaptive=None):
        """adaptive: None for nn.Linear, or (cutoffs, div_value) for
        nn.AdaptiveLogSoftmaxWithLoss (head_bias=False), rnn_dist's model.decoder = adaptive."""
        super().__init__()
        dirs = 2 if bidirectional else 1
        self.embedding = nn.Embedding(vocab, embed)
        rnn_class = nn.GRU if cell == "gru" else nn.LSTM
        self.rnn = rnn_class(embed, hidden, num_layers=layers, bidirectional=bidirectional,
                             dropout=dropout if layers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.adaptive = adaptive
        if adaptive:
            self.decoder = nn.AdaptiveLogSoftmaxWithLoss(hidden * dirs, vocab, list(adaptive[0]),
                                                         div_value=adaptive[1], head_bias=False)
        else:
            self.decoder = nn.Linear(hidden * dirs, vocab)
        if tie:
            self.decoder.weight = self.embedding.weight
        self.hyper = dict(cell=cell, layers=layers, embed=embed, hidden=hidden, vocab_size=vocab,
                          bidirectional=int(bidirectional), tie_weights=int(tie))

    def loss_sum(self, inputs, targets, masks=None):
        """Sum of target NLL (double precision accumulation is the caller's)."""
        y = self(inputs, masks)
        if self.adaptive:
            return self.decoder(y, targets).loss * targets.numel()
        return F.cross_entropy(self.decoder(y), targets, reduction="sum")

    def reset_parameters(self):
        """The trainer's init: embedding/decoder U(-0.1, 0.1), decoder bias 0,
        RNN PyTorch default U(-1/sqrt(H), 1/sqrt(H))."""
        with torch.no_grad():
            self.embedding.weight.uniform_(-0.1, 0.1)
            if self.adaptive:
                return  # head and tails: nn.Linear's U(-1/sqrt(in), 1/sqrt(in)), as rnn_dist
            if self.decoder.weight is not self.embedding.weight:
                self.decoder.weight.uniform_(-0.1, 0.1)
            self.decoder.bias.zero_()

    def init_decoder_bias_unigram(self, tokens):
        """model.decoder_bias_init = unigram, as model_init_decoder_bias_unigram:
        bias[v] = log((count[v] + 1) / (N + V)) over the N training tokens."""
        vocab = self.hyper["vocab_size"]
        counts = np.bincount(tokens, minlength=vocab).astype(np.float64)
        bias = np.log((counts + 1.0) / (len(tokens) + vocab)).astype(np.float32)
        with torch.no_grad():
            self.decoder.bias.copy_(torch.from_numpy(bias))

    def forward(self, packed_inputs, masks=None):
        """Decoder input [targets, H * dirs] in packed order. masks: None for PyTorch's own
        dropout, or a function (slot, width) -> [rows, width] multiplier that
        applies rnn_dist's masks (slot 0 embeddings, l+1 after layer l)."""
        if masks is None or not self.training:
            x = self.drop(self.embedding(packed_inputs.data))
            out, _ = self.rnn(PackedSequence(x, packed_inputs.batch_sizes,
                                             packed_inputs.sorted_indices,
                                             packed_inputs.unsorted_indices))
            return self.drop(out.data)
        x = self.embedding(packed_inputs.data) * masks(0, self.embedding.embedding_dim)
        for layer in range(self.rnn.num_layers):
            x = self.run_layer(layer, x, packed_inputs.batch_sizes)
            x = x * masks(layer + 1, x.shape[1])
        return x

    def forward_state(self, packed_inputs, hx):
        """Stream mode: (decoder input, final state) from initial state hx."""
        x = self.drop(self.embedding(packed_inputs.data))
        out, state = self.rnn(PackedSequence(x, packed_inputs.batch_sizes, None, None), hx)
        return self.drop(out.data), state

    def run_layer(self, layer, x, batch_sizes, p_weight=0.0):
        """One layer of self.rnn (both directions) on packed data, no dropout
        on its input or output; p_weight: weight dropout on W_hh (layer_weights)."""
        rnn, dirs = self.rnn, 2 if self.rnn.bidirectional else 1
        weights = layer_weights(rnn, layer, p_weight)
        zeros = x.new_zeros(dirs, int(batch_sizes[0]), rnn.hidden_size)
        if isinstance(rnn, nn.GRU):
            return torch._VF.gru(x, batch_sizes, zeros, weights, True, 1, 0.0, True, rnn.bidirectional)[0]
        return torch._VF.lstm(x, batch_sizes, (zeros, zeros), weights, True, 1, 0.0, True, rnn.bidirectional)[0]


# ---------------------------------------------------------------------------
# The AWD-LSTM regularisers and averaged weights (Merity et al. 2017), as a
# PyTorch user writes them: rnn_dist's model.* keys with the same
# definitions (tests/torch_reference.py regularised_loss), PyTorch's own
# random masks
# ---------------------------------------------------------------------------


class PackedIndex:
    """Row bookkeeping of a packed batch: the sequence (column) of every row
    and, for TAR, the rows with a predecessor in the same sequence and that
    predecessor's row (row (t, b) = first[t] + b)."""

    def __init__(self, batch_sizes):
        sizes = batch_sizes.numpy()
        first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self.column = torch.from_numpy(np.concatenate([np.arange(n) for n in sizes]))
        later = [np.arange(n) + first[t] for t, n in enumerate(sizes) if t > 0]
        self.current = torch.from_numpy(np.concatenate(later)) if later else torch.zeros(0, dtype=torch.int64)
        prev = [np.arange(n) + first[t - 1] for t, n in enumerate(sizes) if t > 0]
        self.previous = torch.from_numpy(np.concatenate(prev)) if prev else torch.zeros(0, dtype=torch.int64)


def sequence_dropout(x, p, index, locked):
    """Dropout on packed rows: locked (variational) draws one mask per
    sequence, reused at every step; otherwise ordinary dropout."""
    if p <= 0.0:
        return x
    if not locked:
        return F.dropout(x, p, training=True)
    mask = x.new_empty(int(index.column.max()) + 1, x.shape[1]).bernoulli_(1.0 - p) / (1.0 - p)
    return x * mask[index.column]


def layer_weights(rnn, layer, p_weight=0.0):
    """Layer `layer`'s [weight_ih, weight_hh, bias_ih, bias_hh] for each
    direction, as torch._VF takes them; with p_weight > 0 each W_hh goes
    through F.dropout (AWD-LSTM's WeightDrop: one mask per batch)."""
    weights = []
    for suffix in ["", "_reverse"][:2 if rnn.bidirectional else 1]:
        w = [getattr(rnn, "%s_l%d%s" % (name, layer, suffix)) for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        if p_weight > 0.0:
            w[1] = F.dropout(w[1], p_weight, training=True)
        weights += w
    return weights


def dropped_embedding(model, ids, p):
    """Embedding dropout: whole word vectors zeroed with probability p, the
    others scaled by 1 / (1 - p), then looked up for ids."""
    weight = model.embedding.weight
    if p > 0.0:
        weight = weight * weight.new_empty(weight.shape[0], 1).bernoulli_(1.0 - p) / (1.0 - p)
    return F.embedding(ids, weight)


def at_least_fp32(x):
    """Sums of squares in fp32 at least (under autocast x may be bf16)."""
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


def awd_loss_sum(model, inputs, targets, m):
    """(NLL sum + AR + TAR, NLL sum) of one packed batch in training:
    embedding dropout (whole word vectors), weight dropout on each W_hh (one
    mask per batch, AWD-LSTM's WeightDrop), dropout (locked or not) on the
    embedding output, between layers and on the top output, AR = alpha *
    sum(y^2) / H over the dropped top output, TAR = beta * sum((h_t -
    h_{t-1})^2) / H over the raw top output within each sequence."""
    index, p, locked = PackedIndex(inputs.batch_sizes), m["dropout"], m["locked_dropout"]
    x = sequence_dropout(dropped_embedding(model, inputs.data, m["embedding_dropout"]), p, index, locked)
    rnn = model.rnn
    for layer in range(rnn.num_layers):
        raw = model.run_layer(layer, x, inputs.batch_sizes, m["weight_dropout"])
        x = sequence_dropout(raw, p, index, locked)
    nll = F.cross_entropy(model.decoder(x), targets, reduction="sum")
    reg = x.new_zeros(())
    if m["ar_alpha"] > 0.0:
        reg = reg + m["ar_alpha"] * at_least_fp32(x).pow(2).sum() / rnn.hidden_size
    if m["tar_beta"] > 0.0:
        step = at_least_fp32(raw[index.current]) - at_least_fp32(raw[index.previous])
        reg = reg + m["tar_beta"] * step.pow(2).sum() / rnn.hidden_size
    return nll + reg, nll


def padded_dropout(x, p, locked):
    """Dropout on a [T, B, W] tensor: locked draws one [B, W] mask for all steps."""
    if p <= 0.0:
        return x
    if not locked:
        return F.dropout(x, p, training=True)
    return x * (x.new_empty(1, x.shape[1], x.shape[2]).bernoulli_(1.0 - p) / (1.0 - p))


def run_padded_layer(rnn, x, weights, hx=None):
    """One layer (weights: layer_weights) of a unidirectional rnn on padded
    [T, B, W] input from state hx ([1, B, H], a pair for the LSTM; None: zeros)
    with the fused kernel (oneDNN's on the CPU): (output, final state).
    Padding comes after each sequence's end, so valid outputs do not see
    it (the final state of a padded column does)."""
    if hx is None:
        zeros = x.new_zeros(1, x.shape[1], rnn.hidden_size)
        hx = zeros if isinstance(rnn, nn.GRU) else (zeros, zeros)
    if isinstance(rnn, nn.GRU):
        out, h = torch._VF.gru(x, hx, weights, True, 1, 0.0, True, False, False)
        return out, h
    out, h, c = torch._VF.lstm(x, hx, weights, True, 1, 0.0, True, False, False)
    return out, (h, c)


def layer_state(state, layer):
    """Layer `layer`'s slice of a zero_state-shaped state (None stays None)."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s[layer:layer + 1] for s in state)
    return state[layer:layer + 1]


def stack_states(states):
    """Per-layer final states back into zero_state's shape (fp32 at least:
    under autocast a state may come back in bf16)."""
    if isinstance(states[0], tuple):
        return tuple(torch.cat([at_least_fp32(s[i]) for s in states], dim=0) for i in range(2))
    return torch.cat([at_least_fp32(s) for s in states], dim=0)


def awd_window_loss(model, batch, m, state=None):
    """awd_loss_sum_padded from a carried state (data.mode = stream: the
    window's streams start where the previous window left them; None:
    zeros): (NLL sum + AR + TAR, NLL sum, final state). Masks are drawn
    per window, as rnn_dist keys them by step; TAR pairs steps within the
    window."""
    inputs, targets, valid = batch
    p, locked = m["dropout"], m["locked_dropout"]
    x = padded_dropout(dropped_embedding(model, inputs, m["embedding_dropout"]), p, locked)
    rnn, finals = model.rnn, []
    for layer in range(rnn.num_layers):
        raw, final = run_padded_layer(rnn, x, layer_weights(rnn, layer, m["weight_dropout"]), layer_state(state, layer))
        finals.append(final)
        x = padded_dropout(raw, p, locked)
    logits = model.decoder(x)
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")
    reg = x.new_zeros((), dtype=torch.float32)
    if m["ar_alpha"] > 0.0:
        reg = reg + m["ar_alpha"] * (at_least_fp32(x).pow(2).sum(2) * valid).sum() / rnn.hidden_size
    if m["tar_beta"] > 0.0:
        step = at_least_fp32(raw[1:]) - at_least_fp32(raw[:-1])
        reg = reg + m["tar_beta"] * (step.pow(2).sum(2) * valid[1:] * valid[:-1]).sum() / rnn.hidden_size
    return nll + reg, nll, stack_states(finals)


def awd_loss_sum_padded(model, batch, m):
    """awd_loss_sum on a padded batch (make_padded_batch): the same function,
    computed on [T, B] with the padded positions masked out of every sum."""
    total, nll, _ = awd_window_loss(model, batch, m)
    return total, nll


def loss_sum_padded(model, batch):
    """Evaluation on a padded batch: NLL sum over the valid targets."""
    inputs, targets, _ = batch
    out, _ = model.rnn(model.embedding(inputs))
    logits = model.decoder(out)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")


class WeightAverage:
    """train.ema_decay / ema_start, as rnn_dist's optimizer: after update
    number ema_start the average is a copy of the weights, after each later
    update avg = decay * avg + (1 - decay) * weights. Evaluation swaps it in."""

    def __init__(self, params, decay, start):
        self.params, self.decay, self.start = params, decay, max(1, start)
        self.average = None

    def update(self, update_number):
        if self.decay <= 0.0 or update_number < self.start:
            return
        with torch.no_grad():
            if self.average is None:
                self.average = [p.detach().clone() for p in self.params]
                return
            torch._foreach_mul_(self.average, self.decay)
            torch._foreach_add_(self.average, [p.detach() for p in self.params], alpha=1.0 - self.decay)

    def swap(self):
        """Exchange the weights and the average (call twice to undo); no-op before the average starts."""
        if self.average is None:
            return
        with torch.no_grad():
            for p, a in zip(self.params, self.average):
                keep = p.detach().clone()
                p.copy_(a)
                a.copy_(keep)


def attr_str(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def save_model(model, path):
    with h5py.File(path, "w") as f:
        g = f.create_group("model")
        for name, value in model.state_dict().items():
            g.create_dataset(name, data=value.detach().to(torch.float32).numpy())
        for key, value in model.hyper.items():
            if key == "cell":
                g.attrs["cell"] = value
            else:
                g.attrs.create(key, np.int32(value))


def load_model(path):
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        sys.exit("%s: cannot open model file: %s" % (path, e))
    with f:
        if "model" not in f:
            sys.exit("%s: no /model group" % path)
        g = f["model"]
        try:
            a = {k: g.attrs[k] for k in ("cell", "layers", "embed", "hidden", "vocab_size",
                                         "bidirectional", "tie_weights")}
        except KeyError as e:
            sys.exit("%s: /model lacks attribute %s" % (path, e))
        cell = attr_str(a["cell"])
        if cell not in ("gru", "lstm"):
            sys.exit("%s: /model cell '%s' is not gru or lstm" % (path, cell))
        adaptive = None
        if attr_str(g.attrs.get("decoder", "softmax")) == "adaptive":
            # tail_hidden = top // div_value^(i+1); a div_value that gives them back
            cutoffs = [int(c) for c in attr_str(g.attrs["cutoffs"]).split(",")]
            hidden = [int(h) for h in attr_str(g.attrs["tail_hidden"]).split(",")]
            top = int(a["hidden"]) * (2 if bool(a["bidirectional"]) else 1)
            adaptive = (cutoffs, top / hidden[0] if hidden[0] else 1.0)
        model = LanguageModel(cell, int(a["vocab_size"]), int(a["embed"]), int(a["hidden"]),
                              int(a["layers"]), bool(a["bidirectional"]), 0.0, bool(a["tie_weights"]), adaptive)
        expected = model.state_dict()
        state = {}
        for name, ref in expected.items():
            if name not in g:
                sys.exit("%s: /model/%s is missing" % (path, name))
            value = torch.from_numpy(np.asarray(g[name][()], dtype=np.float32))
            if tuple(value.shape) != tuple(ref.shape):
                sys.exit("%s: /model/%s has shape %s, expected %s"
                         % (path, name, tuple(value.shape), tuple(ref.shape)))
            state[name] = value
        extra = sorted(set(g.keys()) - set(expected))
        if extra:
            print("warning: %s: unused datasets in /model: %s" % (path, ", ".join(extra)), file=sys.stderr)
        if model.hyper["tie_weights"] and not torch.equal(state["embedding.weight"], state["decoder.weight"]):
            print("warning: %s: tied model with different embedding/decoder weights; using "
                  "embedding.weight" % path, file=sys.stderr)
            state["decoder.weight"] = state["embedding.weight"]
        model.load_state_dict(state)
    return model


# ---------------------------------------------------------------------------
# Data: data sets, pieces, buckets, packed batches
# ---------------------------------------------------------------------------


class DataSet:
    def __init__(self, path):
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            sys.exit("%s: cannot open data set: %s" % (path, e))
        with f:
            for name in ("tokens", "offsets"):
                if name not in f:
                    sys.exit("%s: missing dataset /%s" % (path, name))
            if attr_str(f.attrs.get("format", "")) != "rnn_dist-lm":
                sys.exit("%s: attribute format is not 'rnn_dist-lm'" % path)
            self.tokens = f["tokens"][()].astype(np.int64)
            self.offsets = f["offsets"][()].astype(np.int64)
            self.vocab_size = int(f.attrs["vocab_size"])
            self.eos_id = int(f.attrs["eos_id"])
        self.path = path
        if self.offsets[0] != 0 or self.offsets[-1] != len(self.tokens) or np.any(np.diff(self.offsets) <= 0):
            sys.exit("%s: bad /offsets" % path)
        if self.tokens.min() < 0 or self.tokens.max() >= self.vocab_size:
            sys.exit("%s: token id out of range" % path)
        # inputs[k] is the token before target k (<eos> before the first).
        self.inputs = np.concatenate([[self.eos_id], self.tokens[:-1]])

    def pieces(self, max_len):
        """(starts, lengths) of all pieces in data-set order."""
        seq_len = np.diff(self.offsets)
        per_seq = (seq_len + max_len - 1) // max_len
        seq = np.repeat(np.arange(len(seq_len)), per_seq)
        first = np.cumsum(per_seq) - per_seq
        k = np.arange(per_seq.sum()) - np.repeat(first, per_seq)
        starts = self.offsets[seq] + k * max_len
        lengths = np.minimum(max_len, self.offsets[seq + 1] - starts)
        return starts, lengths


def make_batch(ds, starts, lengths, order_out=None):
    """PackedSequence of inputs (pieces sorted longest first) and packed targets.
    order_out (a list), if given, receives the sorting permutation."""
    order = np.argsort(-lengths, kind="stable")
    if order_out is not None:
        order_out.append(order)
    starts, lengths = starts[order], lengths[order]
    steps = int(lengths[0])
    t = np.arange(steps)
    present = t[:, None] < lengths[None, :]            # [T, B], time-major
    index = (starts[None, :] + t[:, None])[present]     # packed order
    batch_sizes = torch.from_numpy(present.sum(axis=1).astype(np.int64))
    inputs = PackedSequence(torch.from_numpy(ds.inputs[index]), batch_sizes, None, None)
    return inputs, torch.from_numpy(ds.tokens[index])


def make_padded_batch(ds, starts, lengths):
    """(inputs [T, B] padded with token 0, targets [T, B] with -100 (ignored by
    cross_entropy) where padded, valid [T, B] 1.0/0.0), T the longest piece."""
    steps = int(lengths.max())
    t = np.arange(steps)
    present = t[:, None] < lengths[None, :]
    index = np.where(present, starts[None, :] + t[:, None], 0)
    inputs = torch.from_numpy(np.where(present, ds.inputs[index], 0))
    targets = torch.from_numpy(np.where(present, ds.tokens[index], -100))
    return inputs, targets, torch.from_numpy(present.astype(np.float32))


def bucket_bounds(lengths, spec, num_buckets):
    """Inclusive upper length bounds of the buckets."""
    if spec == "auto":
        q = np.quantile(lengths, np.arange(1, num_buckets + 1) / num_buckets)
        bounds = np.unique(np.ceil(q).astype(np.int64))
    else:
        try:
            bounds = np.array([int(x) for x in spec.split(",")], dtype=np.int64)
        except ValueError:
            sys.exit("config: data.buckets = '%s' is not 'auto' or a list of integers" % spec)
        if np.any(np.diff(bounds) <= 0):
            sys.exit("config: data.buckets must be ascending")
    if bounds[-1] < lengths.max():
        bounds = np.append(bounds, lengths.max())
    return bounds


def cut_batches(members, lengths, batch, batch_tokens):
    """Consecutive batches of members (piece indices, in order): batch pieces
    each, or with batch_tokens > 0 as many pieces as fit in batch_tokens
    targets (at least one), as cut_batches in src/data/sampler.c."""
    if batch_tokens <= 0:
        return [np.asarray(members[i:i + batch], dtype=np.int64) for i in range(0, len(members), batch)]
    batches, current, tokens = [], [], 0
    for piece in members:
        n = int(lengths[piece])
        if current and tokens + n > batch_tokens:
            batches.append(np.asarray(current, dtype=np.int64))
            current, tokens = [], 0
        current.append(piece)
        tokens += n
    if current:
        batches.append(np.asarray(current, dtype=np.int64))
    return batches


def epoch_plan(bucket_of, n_buckets, batch, seed, epoch, lengths=None, batch_tokens=0):
    """List of piece-index arrays, one per batch, for this epoch (lengths:
    every piece's target count, needed only with batch_tokens > 0)."""
    rng = np.random.default_rng(seed + epoch)
    batches = []
    for b in range(n_buckets):
        members = np.flatnonzero(bucket_of == b)
        members = members[rng.permutation(len(members))]
        batches += cut_batches(members, lengths, batch, batch_tokens)
    return [batches[i] for i in rng.permutation(len(batches))]


# ---------------------------------------------------------------------------
# rnn_dist's own plan and initial weights (--match-rnn-dist)
#
# With --match-rnn-dist the script draws exactly rnn_dist's batches (same
# buckets, same per-epoch shuffles, same order inside a batch) and starts from
# exactly its initial weights, so that loss curves can be compared step by
# step. These are ports of include/rnnd/rng.h, src/data/sampler.c and
# model_init_params in src/model/model.c; a change there must be made here.
# ---------------------------------------------------------------------------

U64 = np.uint64


def rng_mix64(x):
    """SplitMix64 finaliser (rng.h), elementwise on uint64 arrays."""
    x = np.asarray(x, dtype=U64)
    with np.errstate(over="ignore"):
        x = x + U64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
    return x ^ (x >> U64(31))


def rng_key2(a, b):
    return rng_mix64(np.asarray(a, dtype=U64) ^ rng_mix64(b))


def rng_uniform_from(keys):
    """Uniform float32 in [0, 1) from the top 24 bits, as rng_uniform_from."""
    return (keys >> U64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def c_shuffle(items, key):
    """The sampler's Fisher-Yates: for i = n-1..1 swap i with hash(key, i) % (i+1)."""
    n = len(items)
    if n < 2:
        return items
    i = np.arange(n - 1, 0, -1, dtype=np.int64)
    j = (rng_key2(key, i.astype(U64)) % (i + 1).astype(U64)).astype(np.int64)
    items = list(items)
    for a, b in zip(i.tolist(), j.tolist()):
        items[a], items[b] = items[b], items[a]
    return items


def c_bucket_bounds(lengths, spec, num_buckets):
    """auto: the (n*b/num - 1)-th smallest length for b = 1..num, deduplicated."""
    if spec != "auto":
        return bucket_bounds(lengths, spec, num_buckets)
    ordered = np.sort(lengths)
    n, bounds = len(ordered), []
    for b in range(1, num_buckets + 1):
        bound = int(ordered[max(0, n * b // num_buckets - 1)])
        if not bounds or bound > bounds[-1]:
            bounds.append(bound)
    return np.array(bounds, dtype=np.int64)


def c_epoch_plan(bucket_of, n_buckets, batch, seed, epoch, lengths=None, batch_tokens=0):
    """Piece-index arrays, one per batch, in rnn_dist's order (sampler_start_epoch)."""
    epoch_key = rng_key2(U64(seed) ^ U64(0x5A3D), U64(epoch))
    batches = []
    for b in range(n_buckets):
        members = c_shuffle(np.flatnonzero(bucket_of == b).tolist(), rng_key2(epoch_key, U64(b)))
        batches += cut_batches(members, lengths, batch, batch_tokens)
    return c_shuffle(batches, rng_key2(epoch_key, U64(0xBA7C)))


def c_dropout_masks(seed, step, p, ids, batch_sizes):
    """rnn_dist's dropout (dropout_apply in src/backend/cpu/cpu_backend.c) as a
    function (slot, width) -> [rows, width] multiplier (0 or 1/(1-p)) for a
    packed batch whose sorted pieces have these ids: the mask of (row, unit)
    is keyed by (seed, step, slot, piece id, position, unit)."""
    sizes = batch_sizes.numpy()
    t = np.repeat(np.arange(len(sizes), dtype=np.uint64), sizes)
    i = np.concatenate([np.arange(n) for n in sizes])
    piece = np.asarray(ids, dtype=np.uint64)[i]
    p32 = np.float32(p)
    scale = np.float32(1.0) / (np.float32(1.0) - p32)
    step_key = rng_key2(U64(seed) ^ U64(0xD50F), U64(step))

    def masks(slot, width):
        row_key = rng_key2(rng_key2(step_key, U64(slot)), (piece << U64(20)) ^ t)
        with np.errstate(over="ignore"):
            keys = row_key[:, None] + np.arange(width, dtype=np.uint64)[None, :]
        u = rng_uniform_from(rng_mix64(keys))
        return torch.from_numpy(np.where(u < p32, np.float32(0.0), scale))
    return masks


def c_init_parameters(model, seed):
    """model_init_params: view i (state_dict order, tied decoder counted) gets
    U(-bound, bound) from hash(hash(seed ^ 0x1A17, i), element); decoder.bias 0."""
    rnn_bound = np.float32(1.0) / np.sqrt(np.float32(model.hyper["hidden"]))
    seen = set()
    with torch.no_grad():
        for i, (name, tensor) in enumerate(model.state_dict(keep_vars=True).items()):
            if id(tensor) in seen:  # the tied decoder.weight is the embedding
                continue
            seen.add(id(tensor))
            if name == "decoder.bias":
                tensor.zero_()
                continue
            bound = rnn_bound if name.startswith("rnn.") else np.float32(0.1)
            key = rng_key2(U64(seed) ^ U64(0x1A17), U64(i))
            u = rng_uniform_from(rng_key2(key, np.arange(tensor.numel(), dtype=U64)))
            values = bound * (np.float32(2.0) * u - np.float32(1.0))
            tensor.copy_(torch.from_numpy(values.reshape(tuple(tensor.shape))))


# ---------------------------------------------------------------------------
# Training and evaluation
# ---------------------------------------------------------------------------


def stream_windows(n_tokens, streams, bptt):
    """rnn_dist's stream plan (src/data/stream.c): the tokens as `streams`
    contiguous streams (the first n_tokens % streams one token longer);
    yields, per window, the (starts, lengths) of the streams it reaches."""
    base, longer = divmod(n_tokens, streams)
    index = np.arange(streams)
    starts = index * base + np.minimum(index, longer)
    lengths = base + (index < longer)
    for w in range(-(-int(lengths.max()) // bptt)):
        window = np.clip(lengths - w * bptt, 0, bptt)
        present = window > 0
        yield starts[present] + w * bptt, window[present]


def zero_state(model, streams):
    h = torch.zeros(model.rnn.num_layers, streams, model.rnn.hidden_size)
    return (h, h.clone()) if isinstance(model.rnn, nn.LSTM) else h


def take_state(state, n):
    """The carried state of the first n streams (the ones a window reaches)."""
    if isinstance(state, tuple):
        return tuple(s[:, :n].contiguous() for s in state)
    return state[:, :n].contiguous()


def put_state(state, new, n):
    """Detached (truncated backpropagation) state after a window, first n streams."""
    if isinstance(state, tuple):
        return tuple(torch.cat([b.detach(), a[:, n:]], dim=1) for a, b in zip(state, new))
    return torch.cat([new.detach(), state[:, n:]], dim=1)


def stream_loss(model, ds, starts, lengths, state):
    """Sum of target NLL of one window and the state after it."""
    inputs, targets = make_batch(ds, starts, lengths)
    n = len(starts)
    y, new = model.forward_state(inputs, take_state(state, n))
    return F.cross_entropy(model.decoder(y), targets, reduction="sum"), targets.numel(), put_state(state, new, n)


def evaluate_stream(model, ds, streams, bptt):
    model.eval()
    state, total, count = zero_state(model, streams), 0.0, 0
    with torch.no_grad():
        for starts, lengths in stream_windows(len(ds.tokens), streams, bptt):
            nll, n, state = stream_loss(model, ds, starts, lengths, state)
            total += nll.double().item()
            count += n
    model.train()
    return total / count, count


def learning_rate(t, step, total):
    """Learning rate used for (0-based) step `step` of `total`."""
    lr, warmup = t["lr"], t["warmup_steps"]
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    kind = t["lr_schedule"]
    if kind == "constant":
        return lr
    if kind == "linear":
        return lr + (t["min_lr"] - lr) * progress
    if kind == "cosine":
        return t["min_lr"] + 0.5 * (lr - t["min_lr"]) * (1.0 + math.cos(math.pi * progress))
    return lr * t["gamma"] ** ((step - warmup) // t["step_size"])


def evaluate(model, ds, max_len, eval_batch, precision=contextlib.nullcontext, padded=False):
    """(mean NLL, target count) over every target of ds; precision: a
    context manager factory (autocast or none); padded: --layout padded."""
    model.eval()
    starts, lengths = ds.pieces(max_len)
    order = np.argsort(-lengths, kind="stable")
    total, count = 0.0, 0
    with torch.no_grad(), precision():
        for i in range(0, len(order), eval_batch):
            sel = order[i:i + eval_batch]
            if padded:
                total += loss_sum_padded(model, make_padded_batch(ds, starts[sel], lengths[sel])).double().item()
            else:
                inputs, targets = make_batch(ds, starts[sel], lengths[sel])
                total += model.loss_sum(inputs, targets).double().item()
            count += int(lengths[sel].sum())
    model.train()
    return total / count, count


def print_eval(loss, count):
    print("loss %.6f ppl %.4f tokens %d" % (loss, math.exp(loss), count), flush=True)


def make_optimizer(model, t):
    params = list(model.parameters())  # shared (tied) tensors once
    if t["optimizer"] == "adam":
        return torch.optim.Adam(params, lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=t["eps"],
                                weight_decay=t["weight_decay"])
    return torch.optim.SGD(params, lr=t["lr"], momentum=t["momentum"], weight_decay=t["weight_decay"])


class Progress:
    """Both training loops' bookkeeping: after each step the log line (every
    train.log_every steps), the evaluation (every train.eval_every) and the
    time limit; at the end the totals, the last evaluation, --save and the
    contract line. run: train()'s averaged weights, precision, curve and
    AWD switch; measure() gives (mean NLL, targets) of the evaluation set
    with the weights as they are; label tags the evaluation lines
    (" (streams)")."""

    def __init__(self, args, t, total, run, measure, label):
        self.args, self.t, self.total, self.run, self.measure, self.label = args, t, total, run, measure, label
        self.start = self.last_log = time.time()
        self.log_loss, self.log_tokens, self.tokens = 0.0, 0, 0

    def evaluate(self, step):
        """measure() of the averaged weights; a curve row at the training clock."""
        average, curve = self.run["average"], self.run["curve"]
        average.swap()
        v, n = self.measure()
        average.swap()
        if curve:
            curve.write("%.4f,%.4f,%d\n" % ((time.time() - self.start) / 60.0, math.exp(v), step))
            curve.flush()
        return v, n

    def after_step(self, step, epoch, lr, nll, targets):
        """Account one step (its NLL sum over `targets`); True when the time limit stops training."""
        t = self.t
        self.log_loss, self.log_tokens, self.tokens = self.log_loss + nll, self.log_tokens + targets, self.tokens + targets
        if step % t["log_every"] == 0 or step == self.total:
            mean, now = self.log_loss / self.log_tokens, time.time()
            print("step %d/%d epoch %d loss %.4f ppl %.2f tokens/s %.0f lr %.3g"
                  % (step, self.total, epoch, mean, math.exp(mean), self.log_tokens / (now - self.last_log), lr),
                  flush=True)
            self.last_log, self.log_loss, self.log_tokens = now, 0.0, 0
        if t["eval_every"] > 0 and step % t["eval_every"] == 0 and step < self.total:
            v, n = self.evaluate(step)
            print("eval step %d %s loss %.6f ppl %.4f tokens %d%s"
                  % (step, self.args.eval_set, v, math.exp(v), n, self.label), flush=True)
        if t["time_limit_s"] > 0 and time.time() - self.start > t["time_limit_s"]:
            print("time limit %.0f s reached at step %d" % (t["time_limit_s"], step), flush=True)
            return True
        return False

    def finish(self, step, model, eval_path):
        run, seconds = self.run, time.time() - self.start
        print("trained %d steps, %d tokens in %.1f s (%.0f tokens/s, evaluations included)"
              % (step, self.tokens, seconds, self.tokens / seconds), flush=True)
        v, n = self.evaluate(step)
        if self.args.save:
            run["average"].swap()  # the model file holds the averaged weights, as rnn_dist's model.h5
            save_model(model, self.args.save)
            run["average"].swap()
            print("saved %s" % self.args.save)
        if run["curve"]:
            run["curve"].close()
        print("%s set %s%s" % (self.args.eval_set, eval_path, self.label))
        print_eval(v, n)


def print_setup(args, m, train_set, params, run):
    """The start-up lines: PyTorch, threads and precision; the regularisers
    and averaging when on; the model."""
    print("torch %s, %d threads (OPENBLAS_NUM_THREADS=%s), %s, %s batches"
          % (torch.__version__, torch.get_num_threads(), os.environ.get("OPENBLAS_NUM_THREADS"),
             "autocast bf16" if run["precision"] is not contextlib.nullcontext else "fp32", args.layout))
    average = run["average"]
    if run["awd"] or average.decay > 0:
        print("regularisers: %s; averaged weights: decay %g from update %d"
              % (", ".join("%s %g" % (k, m[k]) for k in AWD_KEYS) + (" (locked)" if m["locked_dropout"] else ""),
                 average.decay, average.start))
    print("model %s layers %d embed %d hidden %d vocab %d bidirectional %d dropout %g tie %d: %d parameters"
          % (m["cell"], m["layers"], m["embed"], m["hidden"], train_set.vocab_size, m["bidirectional"],
             m["dropout"], m["tie_weights"], sum(p.numel() for p in params)))


def train(args, cfg):
    m, d, t = cfg["model"], cfg["data"], cfg["train"]
    if m["task"] != "lm":
        sys.exit("config: model.task = %s: use bench/torch_forecast.py" % m["task"])
    if not d["train"]:
        sys.exit("config: no training set (data.train or data.dir)")
    eval_path = d[args.eval_set]
    if not eval_path:
        sys.exit("config: no %s set (data.%s or data.dir)" % (args.eval_set, args.eval_set))
    train_set, eval_set = DataSet(d["train"]), DataSet(eval_path)
    if eval_set.vocab_size != train_set.vocab_size:
        sys.exit("%s: vocab_size %d differs from the training set's %d"
                 % (eval_path, eval_set.vocab_size, train_set.vocab_size))

    torch.manual_seed(t["seed"])
    adaptive = None
    if m["decoder"] == "adaptive":
        adaptive = ([int(c) for c in m["cutoffs"].split(",")], m["div_value"])
    model = LanguageModel(m["cell"], train_set.vocab_size, m["embed"], m["hidden"], m["layers"],
                          m["bidirectional"], m["dropout"], m["tie_weights"], adaptive)
    if args.match_rnn_dist:
        c_init_parameters(model, t["seed"])
    else:
        model.reset_parameters()
    if m["decoder_bias_init"] == "unigram":
        model.init_decoder_bias_unigram(train_set.tokens)
    model.train()
    opt = make_optimizer(model, t)
    params = list(model.parameters())
    average = WeightAverage(params, t["ema_decay"], t["ema_start"])
    awd = any(m[k] for k in AWD_KEYS)
    precision = contextlib.nullcontext
    if args.autocast and t["precision"] == "bf16":
        precision = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    curve = open(args.curve, "w") if args.curve else None
    if curve:
        curve.write("minutes,ppl,step\n")

    run = dict(awd=awd, average=average, precision=precision, curve=curve)
    print_setup(args, m, train_set, params, run)
    if d["mode"] == "stream":
        return train_stream(args, cfg, model, opt, params, train_set, eval_set, run)
    starts, lengths = train_set.pieces(d["max_len"])
    if args.match_rnn_dist:
        bounds = c_bucket_bounds(lengths, d["buckets"], d["num_buckets"])
        plan = c_epoch_plan
    else:
        bounds = bucket_bounds(lengths, d["buckets"], d["num_buckets"])
        plan = epoch_plan
    bucket_of = np.minimum(np.searchsorted(bounds, lengths, side="left"), len(bounds) - 1)
    budget = t["global_batch_tokens"]
    batches_per_epoch = len(plan(bucket_of, len(bounds), t["global_batch"], t["seed"], 0, lengths, budget))
    total = t["steps"] if t["steps"] > 0 else t["epochs"] * batches_per_epoch

    print("train %s: %d sequences, %d tokens, %d pieces (max_len %d), buckets <= %s, "
          "%d batches/epoch of %s; %d steps"
          % (d["train"], len(train_set.offsets) - 1, len(train_set.tokens), len(starts), d["max_len"],
             ",".join(map(str, bounds)), batches_per_epoch,
             "<= %d tokens" % budget if budget > 0 else "%d pieces" % t["global_batch"], total), flush=True)

    step, epoch, stop = 0, 0, False
    progress = Progress(args, t, total, run, lambda: evaluate(model, eval_set, d["max_len"], t["eval_batch"],
                                                              precision, args.layout == "padded"), "")
    while step < total and not stop:
        for sel in plan(bucket_of, len(bounds), t["global_batch"], t["seed"], epoch, lengths, budget):
            sel = np.sort(sel)  # piece ids ascending: make_batch's stable sort then orders as batch_fill
            if step >= total:
                break
            lr = learning_rate(t, step, total)
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad(set_to_none=True)
            with precision():
                if args.layout == "padded":
                    batch = make_padded_batch(train_set, starts[sel], lengths[sel])
                    n_targets = int(lengths[sel].sum())
                    total_sum, nll_sum = awd_loss_sum_padded(model, batch, m)
                else:
                    order = []
                    inputs, targets = make_batch(train_set, starts[sel], lengths[sel], order)
                    n_targets = targets.numel()
                    masks = None
                    if args.c_dropout and m["dropout"] > 0:
                        masks = c_dropout_masks(t["seed"], step, m["dropout"], sel[order[0]], inputs.batch_sizes)
                    if awd:
                        total_sum, nll_sum = awd_loss_sum(model, inputs, targets, m)
                    else:
                        total_sum = nll_sum = model.loss_sum(inputs, targets, masks)
            (total_sum / n_targets).backward()
            if t["clip_norm"] > 0:
                torch.nn.utils.clip_grad_norm_(params, t["clip_norm"])
            opt.step()
            step += 1
            average.update(step)
            stop = progress.after_step(step, epoch, lr, nll_sum.item(), n_targets)
            if stop:
                break
        epoch += 1
    progress.finish(step, model, eval_path)


def stream_window(model, ds, starts, lengths, state, m, precision, fused):
    """One training window of data.mode = stream: (loss to back-propagate,
    NLL sum, targets, state after it, detached). fused: the AWD-LSTM keys
    or --layout padded, through awd_window_loss on [T, B] (the windows are
    dense: every stream but the last window's shorter ones runs T steps);
    otherwise the packed nn.Module path (stream_loss)."""
    n = len(starts)
    if not fused:
        nll, count, state = stream_loss(model, ds, starts, lengths, state)
        return nll, nll, count, state
    with precision():
        total, nll, final = awd_window_loss(model, make_padded_batch(ds, starts, lengths), m, take_state(state, n))
    return total, nll, int(lengths.sum()), put_state(state, final, n)


def train_stream(args, cfg, model, opt, params, train_set, eval_set, run):
    """data.mode = stream: windows of global_batch streams, state carried
    (reset to zeros at each epoch's start, as rnn_dist). run: train()'s
    averaged weights, precision, curve and AWD switch."""
    m, d, t = cfg["model"], cfg["data"], cfg["train"]
    windows = -(-(-(-len(train_set.tokens) // t["global_batch"])) // d["bptt"])
    total = t["steps"] if t["steps"] > 0 else t["epochs"] * windows
    fused = run["awd"] or args.layout == "padded"
    print("train %s: %d tokens as %d streams, %d windows of <= %d steps an epoch; %d steps"
          % (d["train"], len(train_set.tokens), t["global_batch"], windows, d["bptt"], total), flush=True)

    def measure():
        with run["precision"]():
            return evaluate_stream(model, eval_set, t["eval_batch"], d["bptt"])

    step, epoch, stop = 0, 0, False
    progress = Progress(args, t, total, run, measure, " (streams)")
    while step < total and not stop:
        state = zero_state(model, t["global_batch"])
        for starts, lengths in stream_windows(len(train_set.tokens), t["global_batch"], d["bptt"]):
            if step >= total:
                break
            lr = learning_rate(t, step, total)
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad(set_to_none=True)
            loss, nll, n, state = stream_window(model, train_set, starts, lengths, state, m, run["precision"], fused)
            (loss / n).backward()
            if t["clip_norm"] > 0:
                torch.nn.utils.clip_grad_norm_(params, t["clip_norm"])
            opt.step()
            step += 1
            run["average"].update(step)
            stop = progress.after_step(step, epoch, lr, nll.item(), n)
            if stop:
                break
        epoch += 1
    progress.finish(step, model, d[args.eval_set])


def eval_only(args, cfg):
    model = load_model(args.eval_only_checkpoint)
    ds = DataSet(args.data)
    if ds.vocab_size != model.hyper["vocab_size"]:
        sys.exit("%s: vocab_size %d differs from the model's %d"
                 % (args.data, ds.vocab_size, model.hyper["vocab_size"]))
    v, n = evaluate(model, ds, cfg["data"]["max_len"], cfg["train"]["eval_batch"])
    print_eval(v, n)


def main(args, cfg):
    # train.threads = 0 means every core, as in rnn_dist; torch's own default
    # here is one thread when OMP_NUM_THREADS is unset
    torch.set_num_threads(thread_count(cfg["train"]["threads"]))
    if args.eval_only_checkpoint:
        eval_only(args, cfg)
    else:
        train(args, cfg)


if __name__ == "__main__":
    main(ARGS, CFG)

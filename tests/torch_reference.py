#!/usr/bin/env python3
"""Write the PyTorch gradient-check fixtures read by the C tests.

Each fixture is one HDF5 file that holds

  * a complete rnn_dist data set at the root (/tokens, /offsets, /vocab and the
    eos_id, unk_id, vocab_size, format, format_version attributes),
  * the initial parameters under /model in the model-file format (float32),
  * the root attribute max_len (pieces hold at most this many targets),
  * /reference/loss: the loss of ONE batch made of every piece of every
    sequence (sum of cross-entropy over all targets / number of targets), and
  * /reference/grad/<name>: its gradient for every state_dict name,

computed by PyTorch in float64 from exactly the float32 values stored under
/model, with dropout 0. adam_gru.h5 and adam_lstm.h5 add an Adam trajectory
(Adam + clip_grad_norm_ every step, float64) under /adam.

Initial parameters: the trainer's init (embedding and decoder weight
U(-0.1, 0.1), RNN PyTorch default) except that the decoder bias is U(-0.1, 0.1)
rather than 0, so a missing bias term shows up, and the Adam cases use a wider
embedding/decoder range so that some steps are clipped.

Written files:
  grad_{gru,lstm}_l{1,3}_{uni,bi}_{tied,untied}.h5   (16 files, no cutting)
  grad_gru_l2_uni_untied_maxlen4.h5                  (max_len 4: cut pieces)
  adam_gru.h5, adam_lstm.h5                          (20 Adam steps; /adam/average: the
                                                     exponential moving average of the
                                                     weights, train.ema_decay)
  classify_{gru,lstm}_l{1,2}_{uni,bi}.h5             (model.task = classify)
  regress_{gru,lstm}_l{1,2}.h5                       (model.task = regress)
  regularise_{gru,lstm}_locked.h5, regularise_gru_unlocked.h5
                                                     (dropout, locked or not, embedding
                                                     dropout, AR, TAR, weight dropout;
                                                     /regularise)

The classify fixtures add /labels, /label_names and n_classes to the data
set, and their model is nn.Embedding -> nn.GRU/nn.LSTM ->
nn.Linear("classifier") on the top layer's final hidden state (h_n of the
forward direction, concatenated with the backward direction's), run through
pack_padded_sequence on the words w1..wn of each sequence (not its <eos>);
/reference/loss is the mean cross-entropy over the sequences.

This is a reference tool for the tests only; the C code never runs it.
Output is deterministic (fixed seeds, single thread).

Usage: torch_reference.py --out DIR
"""

import argparse
import os
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pack_sequence

VOCAB = 37
EOS_ID = 0
UNK_ID = 1
NO_CUT = 1000  # max_len of the cases that keep every sequence whole
# Embedding/decoder init range of the Adam cases: wide enough that about a
# third of the steps have a gradient norm above clip_norm (so clipping is
# exercised both ways).
ADAM_INIT_SCALE = {"gru": 0.8, "lstm": 2.0}


class LanguageModel(nn.Module):
    """embedding -> dropout -> GRU/LSTM (packed, zero state) -> dropout -> decoder."""

    def __init__(self, cell, vocab, embed, hidden, layers, bidirectional, dropout, tie, adaptive=None):
        super().__init__()
        dirs = 2 if bidirectional else 1
        self.embedding = nn.Embedding(vocab, embed)
        rnn_class = nn.GRU if cell == "gru" else nn.LSTM
        self.rnn = rnn_class(embed, hidden, num_layers=layers, bidirectional=bidirectional,
                             dropout=dropout if layers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.adaptive = adaptive is not None
        if self.adaptive:  # (cutoffs, div_value)
            self.decoder = nn.AdaptiveLogSoftmaxWithLoss(hidden * dirs, vocab, list(adaptive[0]),
                                                         div_value=adaptive[1], head_bias=False)
        else:
            self.decoder = nn.Linear(hidden * dirs, vocab)
        if tie:
            if embed != hidden * dirs:
                raise ValueError("tied weights need embed == hidden * directions")
            self.decoder.weight = self.embedding.weight

    def forward(self, packed_inputs):
        """Decoder input [total targets, H * dirs] in packed order for a PackedSequence of ids."""
        x = self.drop(self.embedding(packed_inputs.data))
        out, _ = self.rnn(PackedSequence(x, packed_inputs.batch_sizes,
                                         packed_inputs.sorted_indices,
                                         packed_inputs.unsorted_indices))
        return self.drop(out.data)

    def mean_loss(self, packed_inputs, targets):
        """Mean cross-entropy over the targets (exact for the adaptive softmax too)."""
        y = self(packed_inputs)
        if self.adaptive:
            return self.decoder(y, targets).loss
        return F.cross_entropy(self.decoder(y), targets, reduction="sum") / targets.numel()


def make_pieces(offsets, max_len):
    """(start, length) of every piece, in data-set order."""
    pieces = []
    for i in range(len(offsets) - 1):
        a, b = int(offsets[i]), int(offsets[i + 1])
        for s in range(a, b, max_len):
            pieces.append((s, min(max_len, b - s)))
    return pieces


def batch_loss(model, tokens, pieces, eos_id):
    """Sum of cross-entropy over every target of the pieces / number of targets."""
    prev = np.concatenate([[eos_id], tokens[:-1]])  # input of target k is token k-1
    seqs = [torch.from_numpy(np.stack([prev[s:s + n], tokens[s:s + n]], axis=1).astype(np.int64))
            for s, n in pieces]
    packed = pack_sequence(seqs, enforce_sorted=False)
    inputs = PackedSequence(packed.data[:, 0], packed.batch_sizes,
                            packed.sorted_indices, packed.unsorted_indices)
    return model.mean_loss(inputs, packed.data[:, 1])


def make_tokens(rng, lengths):
    """Random tokens in [2, V) with every sequence ending in eos."""
    seqs = []
    for n in lengths:
        seq = rng.integers(2, VOCAB, size=n).astype(np.int32)
        seq[-1] = EOS_ID
        seqs.append(seq)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return np.concatenate(seqs).astype(np.int32), offsets


def write_dataset(f, tokens, offsets):
    f.create_dataset("tokens", data=tokens.astype(np.int32))
    f.create_dataset("offsets", data=offsets.astype(np.int64))
    words = np.array(["w%d" % i for i in range(VOCAB)], dtype=object)
    f.create_dataset("vocab", data=words, dtype=h5py.string_dtype("utf-8"))
    f.attrs.create("eos_id", np.int32(EOS_ID))
    f.attrs.create("unk_id", np.int32(UNK_ID))
    f.attrs.create("vocab_size", np.int32(VOCAB))
    f.attrs["format"] = "rnn_dist-lm"
    f.attrs.create("format_version", np.int32(1))


def init_parameters(model, scale=0.1):
    """The trainer's init (scale 0.1), plus a random decoder bias so the bias
    path is checked too."""
    with torch.no_grad():
        model.embedding.weight.uniform_(-scale, scale)
        if model.adaptive:
            return  # head and tails keep nn.Linear's default init
        if model.decoder.weight is not model.embedding.weight:
            model.decoder.weight.uniform_(-scale, scale)
        model.decoder.bias.uniform_(-0.1, 0.1)
        # RNN weights keep PyTorch's default U(-1/sqrt(H), 1/sqrt(H)).


def write_model(f, model, spec):
    """Writes /model (float32) and returns the float32 values as a state dict."""
    g = f.create_group("model")
    state = {}
    for name, value in model.state_dict().items():
        v32 = value.detach().to(torch.float32).numpy().copy()
        g.create_dataset(name, data=v32)
        state[name] = v32
    g.attrs["cell"] = spec["cell"]
    for key in ("layers", "embed", "hidden"):
        g.attrs.create(key, np.int32(spec[key]))
    g.attrs.create("vocab_size", np.int32(VOCAB))
    g.attrs.create("bidirectional", np.int32(1 if spec["bi"] else 0))
    g.attrs.create("tie_weights", np.int32(1 if spec["tie"] else 0))
    if spec.get("adaptive"):
        cutoffs, div_value = spec["adaptive"]
        top = spec["hidden"] * (2 if spec["bi"] else 1)
        g.attrs["decoder"] = "adaptive"
        g.attrs["cutoffs"] = ",".join(str(c) for c in cutoffs)
        g.attrs["tail_hidden"] = ",".join(str(int(top // div_value ** (i + 1))) for i in range(len(cutoffs)))
    return state


def build_double_model(spec, seed, f, scale=0.1):
    """Builds a model, writes its float32 parameters to f, returns the float64 copy."""
    torch.manual_seed(seed)
    model = LanguageModel(spec["cell"], VOCAB, spec["embed"], spec["hidden"], spec["layers"],
                          spec["bi"], 0.0, spec["tie"], spec.get("adaptive"))
    init_parameters(model, scale)
    state32 = write_model(f, model, spec)
    model = model.double()
    model.load_state_dict({k: torch.from_numpy(v).double() for k, v in state32.items()})
    model.eval()  # dropout is 0 anyway
    return model


def spec_for(cell, layers, bi, tie):
    dirs = 2 if bi else 1
    if tie:
        hidden = 8
        embed = hidden * dirs
    else:
        hidden, embed = 12, 10
    return dict(cell=cell, layers=layers, bi=bi, tie=tie, embed=embed, hidden=hidden)


def write_grad_case(path, spec, seed, max_len):
    rng = np.random.default_rng(seed)
    # Uneven lengths, one of just <eos>, one >= 9 (and longer than 2 * 4).
    lengths = [5, 1, 9, 3, 12, 2, 7, 4]
    rng.shuffle(lengths)
    tokens, offsets = make_tokens(rng, lengths)
    with h5py.File(path, "w") as f:
        write_dataset(f, tokens, offsets)
        f.attrs.create("max_len", np.int32(max_len))
        model = build_double_model(spec, seed, f)
        pieces = make_pieces(offsets, max_len)
        model.zero_grad()
        loss = batch_loss(model, tokens, pieces, EOS_ID)
        loss.backward()
        ref = f.create_group("reference")
        ref.create_dataset("loss", data=np.float64(loss.item()))
        grads = ref.create_group("grad")
        for name in model.state_dict():
            p = model.get_parameter(name)  # tied: both names give the shared tensor
            grads.create_dataset(name, data=p.grad.detach().numpy().astype(np.float64))
    return loss.item(), len(pieces), int(offsets[-1])


def write_adam_case(path, cell, seed, steps=20, per_step=4, n_seq=12):
    spec = dict(cell=cell, layers=2, bi=False, tie=False, embed=10, hidden=12)
    lr, beta1, beta2, eps, clip = 0.01, 0.9, 0.999, 1e-8, 0.5
    ema_decay, ema_start = 0.8, 5  # the averaged weights (train.ema_decay, train.ema_start)
    rng = np.random.default_rng(seed)
    lengths = list(rng.integers(2, 14, size=n_seq))
    lengths[3] = 1  # a lone <eos>
    tokens, offsets = make_tokens(rng, lengths)
    batches = np.stack([np.sort(rng.choice(n_seq, size=per_step, replace=False))
                        for _ in range(steps)]).astype(np.int32)
    with h5py.File(path, "w") as f:
        write_dataset(f, tokens, offsets)
        f.attrs.create("max_len", np.int32(NO_CUT))
        for key, value in (("adam_lr", lr), ("adam_beta1", beta1), ("adam_beta2", beta2),
                           ("adam_eps", eps), ("clip_norm", clip), ("ema_decay", ema_decay),
                           ("ema_start", ema_start)):
            f.attrs.create(key, np.float64(value))
        model = build_double_model(spec, seed, f, scale=ADAM_INIT_SCALE[cell])
        opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(beta1, beta2), eps=eps)
        losses, norms, average = [], [], None
        for step in range(steps):
            pieces = []
            for i in batches[step]:
                pieces += make_pieces(offsets[i:i + 2], NO_CUT)
            opt.zero_grad()
            loss = batch_loss(model, tokens, pieces, EOS_ID)
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
            opt.step()
            losses.append(loss.item())
            weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
            if step + 1 == ema_start:  # update number step + 1 starts the average
                average = weights
            elif step + 1 > ema_start:
                average = {k: ema_decay * average[k] + (1.0 - ema_decay) * weights[k] for k in weights}
        g = f.create_group("adam")
        g.create_dataset("batches", data=batches)
        g.create_dataset("losses", data=np.array(losses, dtype=np.float64))
        # Not required by the tests: the pre-clip global gradient norm of each step.
        g.create_dataset("grad_norms", data=np.array(norms, dtype=np.float64))
        final = g.create_group("final")
        for name, value in model.state_dict().items():
            final.create_dataset(name, data=value.detach().numpy().astype(np.float64))
        averaged = g.create_group("average")
        for name, value in average.items():
            averaged.create_dataset(name, data=value.numpy().astype(np.float64))
    return losses


def write_reference(f, loss, model):
    """/reference/loss and /reference/grad/<name> (float64) after loss.backward()."""
    ref = f.create_group("reference")
    ref.create_dataset("loss", data=np.float64(loss.item()))
    grads = ref.create_group("grad")
    for name in model.state_dict():
        grads.create_dataset(name, data=model.get_parameter(name).grad.detach().numpy().astype(np.float64))


class Classifier(nn.Module):
    """embedding -> GRU/LSTM -> classifier(h_n of the top layer, both directions)."""

    def __init__(self, cell, vocab, embed, hidden, layers, bidirectional, n_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        rnn_class = nn.GRU if cell == "gru" else nn.LSTM
        self.rnn = rnn_class(embed, hidden, num_layers=layers, bidirectional=bidirectional)
        self.classifier = nn.Linear(hidden * (2 if bidirectional else 1), n_classes)
        self.dirs = 2 if bidirectional else 1

    def forward(self, padded, lengths):
        """padded [T, B] ids, lengths [B] (any order): logits [B, n_classes]."""
        packed = pack_padded_sequence(self.embedding(padded), lengths, enforce_sorted=False)
        _, h_n = self.rnn(packed)
        if isinstance(h_n, tuple):
            h_n = h_n[0]
        top = h_n[-self.dirs:]  # [dirs, B, H]: forward's last step, backward's first
        return self.classifier(torch.cat(list(top), dim=1))


def write_classify_case(path, cell, layers, bi, seed, n_classes=5):
    rng = np.random.default_rng(seed)
    lengths = [6, 2, 10, 4, 13, 3, 8, 5, 2]  # words + <eos>: one sequence of a single word
    rng.shuffle(lengths)
    tokens, offsets = make_tokens(rng, lengths)
    labels = rng.integers(0, n_classes, size=len(lengths)).astype(np.int32)
    hidden, embed = 9, 7
    with h5py.File(path, "w") as f:
        write_dataset(f, tokens, offsets)
        f.attrs.create("max_len", np.int32(NO_CUT))
        f.attrs.create("n_classes", np.int32(n_classes))
        f.create_dataset("labels", data=labels)
        f.create_dataset("label_names", data=np.array(["c%d" % i for i in range(n_classes)], dtype=object),
                         dtype=h5py.string_dtype("utf-8"))
        torch.manual_seed(seed)
        model = Classifier(cell, VOCAB, embed, hidden, layers, bi, n_classes)
        with torch.no_grad():
            model.embedding.weight.uniform_(-0.5, 0.5)
        spec = dict(cell=cell, layers=layers, embed=embed, hidden=hidden, bi=bi, tie=False)
        state32 = write_model(f, model, spec)
        f["model"].attrs["task"] = "classify"
        f["model"].attrs.create("n_classes", np.int32(n_classes))
        model = model.double()
        model.load_state_dict({k: torch.from_numpy(v).double() for k, v in state32.items()})
        words = [tokens[offsets[i]:offsets[i + 1] - 1].astype(np.int64) for i in range(len(lengths))]
        longest = max(len(w) for w in words)
        padded = torch.zeros(longest, len(words), dtype=torch.int64)
        for i, w in enumerate(words):
            padded[:len(w), i] = torch.from_numpy(w)
        logits = model(padded, torch.tensor([len(w) for w in words]))
        loss = F.cross_entropy(logits, torch.from_numpy(labels).long())
        loss.backward()
        write_reference(f, loss, model)
    return loss.item(), len(lengths)


class Forecaster(nn.Module):
    """input = nn.Linear(F, E) -> GRU/LSTM -> decoder = nn.Linear(H, F)."""

    def __init__(self, cell, features, embed, hidden, layers):
        super().__init__()
        self.input = nn.Linear(features, embed)
        self.rnn = (nn.GRU if cell == "gru" else nn.LSTM)(embed, hidden, num_layers=layers)
        self.decoder = nn.Linear(hidden, features)

    def forward(self, x, lengths):
        """x [T, B, F] padded, lengths [B]: predictions [T, B, F]."""
        packed = pack_padded_sequence(self.input(x), lengths, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])
        return self.decoder(out)


def write_regress_case(path, cell, layers, seed, features=3):
    """Series of uneven lengths (2 to 13 steps); every (step, next step) pair
    is scored; the loss is the mean over pairs of the mean squared error
    over the features, in normalised units."""
    rng = np.random.default_rng(seed)
    steps = [6, 2, 13, 4, 9, 3]
    rng.shuffle(steps)
    values = rng.normal(size=(sum(steps), features)).astype(np.float32) * np.array([1.0, 5.0, 0.2], np.float32)
    values += np.array([0.0, 10.0, -3.0], np.float32)
    offsets = np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)
    mean, std = values.mean(axis=0), values.std(axis=0)
    hidden, embed = 9, 7
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "rnn_dist-series"
        f.attrs.create("format_version", np.int32(1))
        f.attrs.create("n_features", np.int32(features))
        f.attrs.create("max_len", np.int32(NO_CUT))
        f.create_dataset("values", data=values)
        f.create_dataset("offsets", data=offsets)
        f.create_dataset("mean", data=mean.astype(np.float32))
        f.create_dataset("std", data=std.astype(np.float32))
        f.create_dataset("feature_names", data=np.array(["f%d" % i for i in range(features)], dtype=object),
                         dtype=h5py.string_dtype("utf-8"))
        torch.manual_seed(seed)
        model = Forecaster(cell, features, embed, hidden, layers)
        spec = dict(cell=cell, layers=layers, embed=embed, hidden=hidden, bi=False, tie=False)
        state32 = write_model(f, model, spec)
        f["model"].attrs.create("vocab_size", np.int32(0))
        f["model"].attrs["task"] = "regress"
        f["model"].attrs.create("n_features", np.int32(features))
        model = model.double()
        model.load_state_dict({k: torch.from_numpy(v).double() for k, v in state32.items()})
        norm = (values.astype(np.float64) - mean.astype(np.float32)) / std.astype(np.float32)
        series = [norm[offsets[i]:offsets[i + 1]] for i in range(len(steps))]
        longest = max(len(x) for x in series) - 1
        x = torch.zeros(longest, len(series), features, dtype=torch.float64)
        y = torch.zeros_like(x)
        mask = torch.zeros(longest, len(series), dtype=torch.float64)
        for i, v in enumerate(series):
            n = len(v) - 1
            x[:n, i], y[:n, i], mask[:n, i] = torch.from_numpy(v[:-1]), torch.from_numpy(v[1:]), 1.0
        pred = model(x, torch.tensor([len(v) - 1 for v in series]))
        loss = (((pred - y) ** 2).mean(dim=2) * mask).sum() / mask.sum()
        loss.backward()
        write_reference(f, loss, model)
    return loss.item(), len(steps)


# --- the regularisers (model.locked_dropout, embedding_dropout, ar_alpha, tar_beta) ---
# rnn_dist's counter-based masks (include/rnnd/rng.h), drawn the same way here.
M64 = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def key2(a, b):
    return mix64(a ^ mix64(b))


def dropout_uniform(seed, step, slot, piece, position, unit):
    slot_key = key2(key2(seed ^ 0xD50F, step & M64), slot)
    row_key = key2(slot_key, ((piece << 20) ^ position) & M64)
    return (mix64((row_key + unit) & M64) >> 40) / 16777216.0


EMBEDDING_DROPOUT_SLOT = 1 << 20
WEIGHT_DROPOUT_SLOT = 1 << 21


def weight_mask(reg, matrix, rows, cols):
    """[rows, cols] float64: rnn_dist's weight-dropout factors of hidden-to-hidden matrix `matrix`."""
    p = reg["p_weight"]
    return torch.tensor([[0.0 if dropout_uniform(reg["seed"], reg["step"], WEIGHT_DROPOUT_SLOT + matrix, r, 0, j) < p
                          else 1.0 / (1.0 - p) for j in range(cols)] for r in range(rows)], dtype=torch.float64)


def dropout_mask(reg, slot, lengths, width):
    """[T, B, width] float64: 0 where rnn_dist drops (piece b = id b, step t), else 1 / (1 - p)."""
    p, T = reg["p"], max(lengths)
    mask = torch.zeros(T, len(lengths), width, dtype=torch.float64)
    for b, n in enumerate(lengths):
        for t in range(n):
            position = 0 if reg["locked"] else t
            for j in range(width):
                u = dropout_uniform(reg["seed"], reg["step"], slot, b, position, j)
                mask[t, b, j] = 0.0 if u < p else 1.0 / (1.0 - p)
    return mask


def embedding_scales(reg, vocab):
    p = reg["p_embedding"]
    return torch.tensor([0.0 if dropout_uniform(reg["seed"], reg["step"], EMBEDDING_DROPOUT_SLOT, i, 0, 0) < p
                         else 1.0 / (1.0 - p) for i in range(vocab)], dtype=torch.float64)


def regularised_loss(model, tokens, pieces, reg):
    """(loss with the regularisers, mean NLL): AWD-LSTM's forward with rnn_dist's masks. Weight
    dropout masks each W_hh for the batch; embedding dropout scales word vectors; dropout (locked or not) on the embedding output, between layers and
    on the top layer's output; AR = alpha * sum(y^2) / H over the decoder input rows; TAR = beta *
    sum((h_t - h_{t-1})^2) / H over the top layer's raw output within each piece; all per target."""
    prev = np.concatenate([[EOS_ID], tokens[:-1]])
    lengths = [n for _, n in pieces]
    T, B, H = max(lengths), len(pieces), model.rnn.hidden_size
    inputs = torch.zeros(T, B, dtype=torch.int64)
    targets = torch.zeros(T, B, dtype=torch.int64)
    valid = torch.zeros(T, B, dtype=torch.float64)
    for b, (s, n) in enumerate(pieces):
        inputs[:n, b] = torch.from_numpy(prev[s:s + n].astype(np.int64))
        targets[:n, b] = torch.from_numpy(tokens[s:s + n].astype(np.int64))
        valid[:n, b] = 1.0
    scale = embedding_scales(reg, model.embedding.num_embeddings)
    x = model.embedding(inputs) * scale[inputs].unsqueeze(2)
    x = x * dropout_mask(reg, 0, lengths, x.shape[2])
    rnn, layers = model.rnn, model.rnn.num_layers
    for l in range(layers):
        weights = [getattr(rnn, "%s_l%d" % (kind, l)) for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        if reg.get("p_weight", 0.0) > 0.0:  # WeightDrop: the batch's dropped W_hh (layer l, direction 0)
            weights[1] = weights[1] * weight_mask(reg, 2 * l, weights[1].shape[0], weights[1].shape[1])
        gate = 3 if isinstance(rnn, nn.GRU) else 4
        packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
        run = torch._VF.gru if gate == 3 else torch._VF.lstm
        h0 = torch.zeros(1, B, H, dtype=torch.float64)
        hx = h0 if gate == 3 else (h0, h0)
        out = run(packed.data, packed.batch_sizes, hx, weights, True, 1, 0.0, False, False)[0]
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(PackedSequence(out, packed.batch_sizes, packed.sorted_indices,
                                                                       packed.unsorted_indices), total_length=T)
        raw = out
        x = out * dropout_mask(reg, l + 1, lengths, H)
    logits = model.decoder(x)
    nll = (F.cross_entropy(logits.reshape(T * B, -1), targets.reshape(-1), reduction="none") * valid.reshape(-1)).sum()
    n = valid.sum()
    ar = reg["ar_alpha"] * ((x ** 2).sum(dim=2) * valid).sum() / H
    both = valid[1:] * valid[:-1]
    tar = reg["tar_beta"] * (((raw[1:] - raw[:-1]) ** 2).sum(dim=2) * both).sum() / H
    return (nll + ar + tar) / n, nll / n


def write_regularise_case(path, cell, seed, reg):
    """A two-layer model, whole sequences, every regulariser of `reg` on; /regularise holds the
    settings (attributes), /reference/loss the mean NLL, /reference/grad the gradient of the
    regularised loss."""
    rng = np.random.default_rng(seed)
    lengths = [5, 1, 9, 3, 12, 2, 7, 4]
    rng.shuffle(lengths)
    tokens, offsets = make_tokens(rng, lengths)
    spec = dict(cell=cell, layers=2, bi=False, tie=False, embed=10, hidden=12)
    with h5py.File(path, "w") as f:
        write_dataset(f, tokens, offsets)
        f.attrs.create("max_len", np.int32(NO_CUT))
        model = build_double_model(spec, seed, f)
        g = f.create_group("regularise")
        for key, value in reg.items():
            g.attrs.create(key, np.float64(value))
        model.zero_grad()
        loss, nll = regularised_loss(model, tokens, make_pieces(offsets, NO_CUT), reg)
        loss.backward()
        write_reference(f, nll, model)
    return loss.item(), nll.item()


def load_model_file(path, dtype=torch.float64):
    """The model of an rnn_dist model file (or checkpoint) as the PyTorch
    module of its task (LanguageModel, Classifier or Forecaster), its
    parameters the file's float32 values in `dtype`, in eval mode; returns
    (module, task, the /model attributes)."""
    with h5py.File(path, "r") as f:
        g = f["model"]
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in g.attrs.items()}
        state = {k: torch.from_numpy(g[k][()]) for k in g.keys()}
    task = attrs.get("task", "lm")
    cell, layers = attrs["cell"], int(attrs["layers"])
    embed, hidden, bi = int(attrs["embed"]), int(attrs["hidden"]), bool(attrs["bidirectional"])
    if task == "classify":
        model = Classifier(cell, int(attrs["vocab_size"]), embed, hidden, layers, bi, int(attrs["n_classes"]))
    elif task == "regress":
        model = Forecaster(cell, int(attrs["n_features"]), embed, hidden, layers)
    else:
        adaptive = None
        if attrs.get("decoder") == "adaptive":
            cutoffs = [int(c) for c in str(attrs["cutoffs"]).split(",")]
            top = hidden * (2 if bi else 1)
            tail = [int(c) for c in str(attrs["tail_hidden"]).split(",")]
            adaptive = (cutoffs, top / tail[0])  # div_value: top // div^(i+1) = tail[i]
        model = LanguageModel(cell, int(attrs["vocab_size"]), embed, hidden, layers, bi, 0.0,
                              bool(attrs["tie_weights"]), adaptive)
    model = model.to(dtype)
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()})
    model.eval()
    return model, task, attrs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for the fixture files (created)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()

    seed = 100
    for cell in ("gru", "lstm"):
        for layers in (1, 3):
            for bi in (False, True):
                for tie in (True, False):
                    seed += 1
                    spec = spec_for(cell, layers, bi, tie)
                    name = "grad_%s_l%d_%s_%s.h5" % (cell, layers, "bi" if bi else "uni",
                                                     "tied" if tie else "untied")
                    loss, n_pieces, n_tok = write_grad_case(os.path.join(args.out, name), spec,
                                                            seed, NO_CUT)
                    print("%-38s loss %.6f pieces %d targets %d" % (name, loss, n_pieces, n_tok))

    name = "grad_gru_l2_uni_untied_maxlen4.h5"
    loss, n_pieces, n_tok = write_grad_case(os.path.join(args.out, name),
                                            spec_for("gru", 2, False, False), 200, 4)
    print("%-38s loss %.6f pieces %d targets %d" % (name, loss, n_pieces, n_tok))

    # The adaptive softmax (nn.AdaptiveLogSoftmaxWithLoss, head_bias=False).
    for name, spec, seed in [
            ("grad_gru_l2_uni_adaptive.h5", dict(spec_for("gru", 2, False, False), adaptive=((8, 20), 2.0)), 400),
            ("grad_lstm_l1_bi_adaptive.h5", dict(spec_for("lstm", 1, True, False), adaptive=((5, 15, 30), 2.0)), 401)]:
        loss, n_pieces, n_tok = write_grad_case(os.path.join(args.out, name), spec, seed, NO_CUT)
        print("%-38s loss %.6f pieces %d targets %d" % (name, loss, n_pieces, n_tok))

    for i, cell in enumerate(("gru", "lstm")):
        name = "adam_%s.h5" % cell
        losses = write_adam_case(os.path.join(args.out, name), cell, 300 + i)
        print("%-38s loss %.6f -> %.6f over %d steps" % (name, losses[0], losses[-1], len(losses)))
    seed = 500
    for cell in ("gru", "lstm"):
        for layers in (1, 2):
            for bi in (False, True):
                seed += 1
                name = "classify_%s_l%d_%s.h5" % (cell, layers, "bi" if bi else "uni")
                loss, n_seq = write_classify_case(os.path.join(args.out, name), cell, layers, bi, seed)
                print("%-38s loss %.6f sequences %d" % (name, loss, n_seq))
    for i, (cell, layers) in enumerate([("gru", 1), ("gru", 2), ("lstm", 1), ("lstm", 2)]):
        name = "regress_%s_l%d.h5" % (cell, layers)
        loss, n_series = write_regress_case(os.path.join(args.out, name), cell, layers, 600 + i)
        print("%-38s loss %.6f series %d" % (name, loss, n_series))
    for i, (cell, locked) in enumerate([("gru", 1), ("lstm", 1), ("gru", 0)]):
        name = "regularise_%s_%s.h5" % (cell, "locked" if locked else "unlocked")
        reg = dict(seed=77 + i, step=5, p=0.3, locked=locked, p_embedding=0.25, ar_alpha=2.0, tar_beta=1.0,
                   p_weight=0.4)
        loss, nll = write_regularise_case(os.path.join(args.out, name), cell, 700 + i, reg)
        print("%-38s loss %.6f (nll %.6f)" % (name, loss, nll))
    print("wrote 36 fixtures to %s in %.1f s" % (args.out, time.time() - t0), file=sys.stderr)


if __name__ == "__main__":
    main()

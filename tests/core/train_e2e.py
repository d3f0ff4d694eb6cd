#!/usr/bin/env python3
"""The trainer end to end on the embedded default corpus, with a small model:

 * training runs, writes progress lines with every field, and the loss falls;
 * the model file holds exactly the PyTorch state_dict names and shapes and
   loads into a PyTorch model (strict);
 * `rnn_dist eval` reproduces the trainer's final validation loss, and
   PyTorch evaluating the same model file (bench/torch_lm.py) agrees to 1e-5;
 * a model file of another shape, or a data set of another vocabulary, is
   refused with one line and exit code 2.

usage: train_e2e.py --rnn-dist BIN --data DIR --work DIR --torch-lm SCRIPT"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import read_series  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--rnn-dist", required=True)
p.add_argument("--data", required=True)
p.add_argument("--work", required=True)
p.add_argument("--torch-lm", required=True)
a = p.parse_args()
shutil.rmtree(a.work, ignore_errors=True)
os.makedirs(a.work)
failures, checks = [], 0


def check(ok, what):
    global checks
    checks += 1
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


SMALL = ["--set", "model.embed=32", "--set", "model.hidden=32", "--set", "model.layers=2",
         "--set", "model.tie_weights=true", "--set", "model.dropout=0.1", "--set", "data.max_len=40",
         "--set", "train.global_batch=16", "--set", "train.lr=0.01", "--set", "train.log_every=10",
         "--set", "train.eval_every=30", "--set", "train.eval_batch=128"]
out = os.path.join(a.work, "run")
r = run([a.rnn_dist, "--set", f"data.dir={a.data}", "--set", "data.test=none", "--set", "train.steps=60",
         "--set", f"output.dir={out}", *SMALL])
print(r.stdout[-3000:], r.stderr[-2000:])
check(r.returncode == 0, "training exits 0")
progress = [l for l in r.stdout.splitlines() if l.startswith("step ")]
check(len(progress) == 6, f"6 progress lines for 60 steps at log_every 10 (got {len(progress)})")
fields = ["loss", "ppl", "tok/s", "lr", "gnorm", "mem", "elapsed", "ETA"]
check(all(all(f in l for f in fields) for l in progress), "progress lines show " + ", ".join(fields))
losses = [float(re.search(r"loss (\S+)", l).group(1)) for l in progress]
check(len(losses) == 6 and losses[-1] < losses[0] - 1.0, f"training loss falls by > 1 nat: {losses}")
valid = [l for l in r.stdout.splitlines() if l.startswith("valid step")]
check(len(valid) == 2, f"validation at steps 30 and 60 (the end, not repeated) (got {len(valid)})")
check(os.path.exists(os.path.join(out, "train.log")) and open(os.path.join(out, "train.log")).read().count("step ") >= 6,
      "train.log has the progress lines")
check(os.path.exists(os.path.join(out, "config.ini")), "config.ini written")
check("summary:" in r.stdout, "summary printed")

model = os.path.join(out, "model.h5")
with h5py.File(model, "r") as f:
    names = sorted(f["model"].keys())
    attrs = dict(f["model"].attrs)
import torch  # noqa: E402  (after the C run: the trainer never needs torch)
ref = {"embedding": torch.nn.Embedding(attrs["vocab_size"], 32),
       "rnn": torch.nn.GRU(32, 32, num_layers=2), "decoder": torch.nn.Linear(32, attrs["vocab_size"])}
module = torch.nn.ModuleDict(ref)
expected = sorted(module.state_dict().keys())
check(names == expected, f"model file names are PyTorch's state_dict names: {names}")
with h5py.File(model, "r") as f:
    state = {k: torch.from_numpy(np.array(f["model"][k])) for k in names}
try:
    module.load_state_dict(state, strict=True)
    loaded = True
except RuntimeError as e:
    print(e)
    loaded = False
check(loaded, "model file loads into PyTorch modules (strict)")
check(torch.equal(state["embedding.weight"], state["decoder.weight"]), "tied weights: both names hold the same values")

valid_h5 = os.path.join(a.data, "valid.h5")
e = run([a.rnn_dist, "eval", "--checkpoint", model, "--data", valid_h5, "--batch", "128"])
last = e.stdout.strip().splitlines()[-1] if e.stdout.strip() else ""
m = re.fullmatch(r"loss (\S+) ppl (\S+) tokens (\d+)", last)
check(e.returncode == 0 and m is not None, f"eval's last line is 'loss L ppl P tokens N': {last!r}")
if m:
    c_loss = float(m.group(1))
    trainer_loss = float(re.search(r"loss (\S+)", valid[-1]).group(1))
    check(abs(c_loss - trainer_loss) < 1e-4, f"eval {c_loss} = trainer's final validation {trainer_loss}")
    with h5py.File(valid_h5, "r") as f:
        n_tokens = int(f["tokens"].shape[0])
    check(int(m.group(3)) == n_tokens, f"eval counts every target token ({m.group(3)} = {n_tokens})")
    t = run([sys.executable, a.torch_lm, "--eval-only-checkpoint", model, "--data", valid_h5,
             "--set", "data.max_len=40", "--set", "train.threads=2"])
    tl = t.stdout.strip().splitlines()[-1] if t.stdout.strip() else t.stderr
    tm = re.fullmatch(r"loss (\S+) ppl (\S+) tokens (\d+)", tl)
    check(tm is not None and abs(float(tm.group(1)) - c_loss) / c_loss < 1e-5 and tm.group(3) == m.group(3),
          f"PyTorch evaluates the model file to the same loss: {tl!r} vs {last!r}")


# The adaptive softmax: trains, and its model file (head and tail clusters
# under PyTorch's names) evaluates to the same exact loss in PyTorch's
# nn.AdaptiveLogSoftmaxWithLoss.
adaptive = os.path.join(a.work, "adaptive")
r = run([a.rnn_dist, "--set", f"data.dir={a.data}", "--set", "data.test=none", "--set", "train.steps=30",
         "--set", f"output.dir={adaptive}", *SMALL, "--set", "model.tie_weights=false",
         "--set", "model.decoder=adaptive", "--set", "model.cutoffs=200,2000", "--set", "model.div_value=2"])
check(r.returncode == 0, f"adaptive-softmax training exits 0 ({r.stderr.strip()[-200:]})")
amodel = os.path.join(adaptive, "model.h5")
if os.path.exists(amodel):
    with h5py.File(amodel, "r") as f:
        anames = sorted(f["model"].keys())
        shapes = {k: f["model"][k].shape for k in anames}
    check([n for n in anames if n.startswith("decoder.")] ==
          ["decoder.head.weight", "decoder.tail.0.0.weight", "decoder.tail.0.1.weight", "decoder.tail.1.0.weight",
           "decoder.tail.1.1.weight"] and shapes["decoder.head.weight"] == (202, 32)
          and shapes["decoder.tail.1.0.weight"] == (8, 32),
          f"adaptive model file holds nn.AdaptiveLogSoftmaxWithLoss's names and shapes: {shapes}")
    e = run([a.rnn_dist, "eval", "--checkpoint", amodel, "--data", valid_h5, "--batch", "128"])
    am = re.fullmatch(r"loss (\S+) ppl (\S+) tokens (\d+)", e.stdout.strip().splitlines()[-1] if e.stdout else "")
    t = run([sys.executable, a.torch_lm, "--eval-only-checkpoint", amodel, "--data", valid_h5,
             "--set", "data.max_len=40", "--set", "train.threads=2"])
    tl = t.stdout.strip().splitlines()[-1] if t.stdout.strip() else t.stderr
    tm = re.fullmatch(r"loss (\S+) ppl (\S+) tokens (\d+)", tl)
    check(am is not None and tm is not None and abs(float(tm.group(1)) - float(am.group(1))) / float(am.group(1)) < 1e-5,
          f"PyTorch's adaptive softmax evaluates the model file to rnn_dist's loss: {tl!r} vs {e.stdout.strip()[-80:]!r}")


# PyTorch on exactly rnn_dist's draws (torch_lm.py --match-rnn-dist
# --c-dropout: its batch plan, initial weights and dropout masks), step by
# step, with batches of global_batch pieces and with a token budget: the
# losses agree, so the reference's port of the sampler is rnn_dist's.
def step_losses_vs_torch(name, extra):
    run_dir = os.path.join(a.work, name)
    r = run([a.rnn_dist, "--set", f"data.dir={a.data}", "--set", "data.test=none", "--set", "train.steps=20",
             "--set", f"output.dir={run_dir}", *SMALL, "--set", "train.log_every=1", "--set", "train.eval_every=0",
             *extra])
    if r.returncode:
        check(False, f"{name}: rnn_dist run failed: {r.stderr.strip()[-200:]}")
        return []
    ours = read_series(os.path.join(run_dir, "metrics.h5"))["loss"]
    per_epoch = int(re.search(r"in (\d+) batches", r.stdout).group(1))
    t = run([sys.executable, a.torch_lm, os.path.join(run_dir, "config.ini"), "--match-rnn-dist", "--c-dropout",
             "--set", "train.threads=2"])
    theirs = [float(line.split()[5]) for line in t.stdout.splitlines() if line.startswith("step ")]
    plan = re.search(r"(\d+) batches/epoch", t.stdout)
    worst = max((abs(x - y) / y for x, y in zip(ours, theirs)), default=float("inf"))
    check(t.returncode == 0 and len(theirs) == len(ours) == 20 and worst < 1e-4,
          f"{name}: 20 steps, rnn_dist vs torch_lm.py on the same draws: worst relative loss difference {worst:.1e}")
    check(plan is not None and int(plan.group(1)) == per_epoch,
          f"{name}: batches per epoch, rnn_dist {per_epoch}, torch_lm.py {plan.group(1) if plan else t.stderr[-200:]}")
    return ours


zero_bias = step_losses_vs_torch("same_draws_pieces", [])
step_losses_vs_torch("same_draws_tokens", ["--set", "train.global_batch_tokens=400"])
# model.decoder_bias_init = unigram: both programs start from the same
# log-frequency bias (the losses above would differ at step 1 otherwise),
# and that start is the unigram model's, well below the uniform log(V).
unigram_bias = step_losses_vs_torch("same_draws_unigram_bias", ["--set", "model.decoder_bias_init=unigram"])
if len(zero_bias) and len(unigram_bias):
    check(unigram_bias[0] < zero_bias[0] - 1.0,
          f"unigram decoder.bias starts lower than a zero one: step-1 loss {unigram_bias[0]:.4f} vs {zero_bias[0]:.4f}")


def expect_error(args, pattern, what):
    r = run(args)
    lines = r.stderr.strip().splitlines()
    ok = r.returncode == 2 and len(lines) == 1 and re.search(pattern, lines[0]) is not None
    check(ok, f"{what}: exit {r.returncode}, stderr {lines}")


expect_error([a.rnn_dist, "--set", f"data.dir={a.data}", "--set", "data.test=none", "--set", "train.steps=1",
              "--set", f"output.dir={out}_init", *SMALL, "--set", "model.hidden=16", "--set", "model.embed=16",
              "--init", model], r"model\.h5: model has embed = 32 but 16 is expected", "--init with another shape")
other = os.path.join(a.work, "other_vocab.h5")
with h5py.File(valid_h5, "r") as src, h5py.File(other, "w") as dst:
    for k in ["tokens", "offsets"]:
        dst[k] = src[k][()]
    dst["vocab"] = src["vocab"][:100]
    for k, v in src.attrs.items():
        dst.attrs[k] = v
    dst.attrs["vocab_size"] = np.int32(100)
    dst["tokens"][...] = np.minimum(src["tokens"][()], 99)
expect_error([a.rnn_dist, "eval", "--checkpoint", model, "--data", other],
             r"other_vocab\.h5: data set has vocab_size 100 but the model .* has \d+", "eval on another vocabulary")
bad_shape = os.path.join(a.work, "bad_shape.h5")
shutil.copy(model, bad_shape)
with h5py.File(bad_shape, "a") as f:
    del f["model/rnn.weight_hh_l1"]
    f["model/rnn.weight_hh_l1"] = np.zeros((96, 31), np.float32)
expect_error([a.rnn_dist, "eval", "--checkpoint", bad_shape, "--data", valid_h5],
             r"bad_shape\.h5: /model/rnn\.weight_hh_l1 has shape \[96, 31\] but \[96, 32\] is expected",
             "model file with a dataset of another shape")
expect_error([a.rnn_dist, "eval", "--checkpoint", valid_h5, "--data", valid_h5],
             r"valid\.h5: missing group /model \(not a model file\)", "a data set given as model file")
print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)

#!/usr/bin/env python3
"""`rnn_dist generate` and `rnn_dist predict` end to end, against PyTorch
(tests/infer/torch_infer.py, the model file loaded with
tests/torch_reference.py's load_model_file):

  - small models trained here on the Bible (a GRU language model with tied
    weights, an LSTM one with the adaptive softmax, a bidirectional GRU
    classifier of the labelled verses) and on a synthetic CSV time series
    (an LSTM forecaster);
  - the model file is self-contained: /vocab with eos_id, unk_id and
    lowercase, /label_names, /mean, /std and /feature_names, in checkpoints
    too;
  - generate --temperature 0 equals PyTorch's greedy decoding token for
    token (both language models, several prompts); a seed gives the same
    text, another seed other text; --top-k 1 is greedy; --stdin answers
    each prompt as --prompt does;
  - predict: every label and probability of a classifier file equals
    PyTorch's (probability to 1e-4); a forecaster's --horizon steps equal
    PyTorch's feeding its own predictions back (1e-4 relative); --stdin the
    same;
  - a model file without the vocabulary (as written before) still loads for
    eval; generate then asks for --vocab-from and works with it;
  - bad input: one line, exit 2.
usage: infer_e2e.py --rnn-dist BIN --rnn-prep BIN --bible DIR --work DIR"""
import math
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, e2e_arguments, mpi_env  # noqa: E402

a = e2e_arguments(["--rnn-dist", "--rnn-prep", "--bible", "--work"])
env = mpi_env()
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
torch_infer = os.path.join(here, "torch_infer.py")
checks = Checks()
check = checks.check


def run(cmd, stdin=None, timeout=600):
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, timeout=timeout)


def train(name, config, *sets):
    out = os.path.join(a.work, name)
    cmd = [a.rnn_dist, "--config", os.path.join(root, "configs", config), "--set", f"output.dir={out}",
           "--set", "train.threads=1", "--set", "train.eval_every=0", "--set", "train.log_every=1000"]
    for s in sets:
        cmd += ["--set", s]
    r = run(cmd)
    check(r.returncode == 0, f"{name}: trains ({r.stderr.strip()[-200:]})")
    return os.path.join(out, "model.h5")


def torch_answers(verb, model, requests, *args):
    r = run(["/usr/bin/python3", torch_infer, verb, model, *[str(x) for x in args]], stdin="".join(
        q + "\n" for q in requests))
    if r.returncode != 0:
        print(r.stderr)
    return r.stdout.splitlines()


def error_line(r, pattern, what, answered=0):
    """Exit 2 with one line on stderr; stdout holds only the `answered` answers before the bad request."""
    lines = r.stderr.strip().splitlines()
    ok = r.returncode == 2 and len(lines) == 1 and re.search(pattern, lines[0]) is not None and \
        len(r.stdout.splitlines()) == answered
    check(ok, f"{what}: exit 2, one line /{pattern}/" + ("" if ok else f" (got {r.returncode}: {r.stderr.strip()})"))


def words_of_answer(line):
    """One --stdin answer line as words (<eos> a word of its own)."""
    return line.split()


def prompt_mode_text(words):
    """What generate --prompt prints for these sampled words: <eos> a newline."""
    text, at_start = "", True
    for w in words:
        if w == "<eos>":
            text, at_start = text + "\n", True
        else:
            text, at_start = text + ("" if at_start else " ") + w, False
    return text if at_start else text + "\n"


# --- language models --------------------------------------------------------
lm_sets = [f"data.dir={a.bible}", "model.embed=64", "model.hidden=64", "train.steps=120", "train.global_batch=16"]
gru = train("gru_lm", "quickstart.ini", *lm_sets)
lstm = train("lstm_adaptive", "quickstart.ini", *lm_sets, "model.cell=lstm", "model.decoder=adaptive",
             "model.cutoffs=1000,4000", "model.tie_weights=false")
with h5py.File(gru, "r") as f, h5py.File(os.path.join(a.bible, "train.h5"), "r") as d:
    vocab = [w.decode() for w in f["vocab"][()]]
    same = vocab == [w.decode() for w in d["vocab"][()]]
    check(same and int(f.attrs["eos_id"]) == 0 and int(f.attrs["unk_id"]) == 1 and int(f.attrs["lowercase"]) == 0
          and int(f.attrs["vocab_size"]) == len(vocab) == int(f["model"].attrs["vocab_size"]),
          "the model file carries the training set's /vocab, eos_id, unk_id and lowercase")
index = {w: i for i, w in enumerate(vocab)}
prompts = ["and the lord said unto moses", "in the beginning", "blessed are the poor", "jesus wept", "Xyzzy and"]


def prompt_ids(prompt):
    return ",".join(str(index.get(w, 1)) for w in prompt.split())


for name, model in (("GRU, tied", gru), ("LSTM, adaptive softmax", lstm)):
    r = run([a.rnn_dist, "generate", "--checkpoint", model, "--stdin", "--temperature", "0", "--tokens", "40"],
            stdin="".join(p + "\n" for p in prompts))
    ours = [[index[w] for w in words_of_answer(line)] for line in r.stdout.splitlines()]
    theirs = [[int(i) for i in line.split()] for line in torch_answers("greedy", model, [prompt_ids(p) for p in prompts], 40)]
    check(r.returncode == 0 and len(ours) == len(prompts) and ours == theirs,
          f"{name}: generate --temperature 0 equals PyTorch's greedy decoding token for token "
          f"({len(prompts)} prompts x 40 tokens)")
    r1 = run([a.rnn_dist, "generate", "--checkpoint", model, "--prompt", prompts[0], "--temperature=0", "--tokens=40"])
    check(r1.returncode == 0 and r1.stdout == prompt_mode_text(words_of_answer(r.stdout.splitlines()[0])),
          f"{name}: --prompt prints what --stdin answered, <eos> as a newline")

sampled = [run([a.rnn_dist, "generate", "--checkpoint", gru, "--prompt", prompts[1], "--tokens", "60",
                "--seed", str(seed)]).stdout for seed in (7, 7, 8)]
check(sampled[0] == sampled[1] and sampled[0] != sampled[2] and len(sampled[0].split()) > 20,
      "sampling: seed 7 twice gives the same text, seed 8 other text")
top1 = run([a.rnn_dist, "generate", "--checkpoint", gru, "--prompt", prompts[1], "--tokens", "40", "--top-k", "1"])
greedy = run([a.rnn_dist, "generate", "--checkpoint", gru, "--prompt", prompts[1], "--tokens", "40",
              "--temperature", "0"])
check(top1.returncode == 0 and top1.stdout == greedy.stdout, "--top-k 1 samples what greedy decoding picks")

ckpts = sorted(p for p in os.listdir(os.path.dirname(gru)) if p.startswith("ckpt_step"))
if ckpts:
    r = run([a.rnn_dist, "generate", "--checkpoint", os.path.join(os.path.dirname(gru), ckpts[-1]), "--prompt",
             prompts[1], "--tokens", "40", "--temperature", "0"])
    check(r.returncode == 0 and r.stdout == greedy.stdout, "a checkpoint carries the vocabulary too (same text)")
else:
    check(False, "training left a checkpoint")

old = os.path.join(a.work, "old_model.h5")
shutil.copy(gru, old)
with h5py.File(old, "a") as f:
    del f["vocab"]
    for key in ("vocab_size", "eos_id", "unk_id", "lowercase"):
        del f.attrs[key]
r = run([a.rnn_dist, "eval", "--checkpoint", old, "--data", os.path.join(a.bible, "valid.h5"), "--threads", "1"])
check(r.returncode == 0 and " ppl " in r.stdout, "a model file without /vocab (as before) still loads for eval")
error_line(run([a.rnn_dist, "generate", "--checkpoint", old, "--prompt", "in the"]),
           r"old_model\.h5: no vocabulary \(/vocab\).*--vocab-from DATA\.h5", "generate on a file without /vocab")
r = run([a.rnn_dist, "generate", "--checkpoint", old, "--vocab-from", os.path.join(a.bible, "train.h5"),
         "--prompt", prompts[1], "--tokens", "40", "--temperature", "0"])
check(r.returncode == 0 and r.stdout == greedy.stdout, "--vocab-from DATA.h5 supplies it (same text)")

# rnn_prep --lowercase: the model file says so, and prompts are lowercased like the training text
cased = os.path.join(a.work, "cased")
os.makedirs(cased)
for split in ("train", "valid", "test"):
    with open(os.path.join(a.bible, "text", f"{split}.txt")) as f:
        text = [line.title() for _, line in zip(range(3000), f)]
    with open(os.path.join(cased, f"{split}.txt"), "w") as f:
        f.writelines(text)
r = run([a.rnn_prep, "--lowercase", "--train", f"{cased}/train.txt", "--valid", f"{cased}/valid.txt", "--test",
         f"{cased}/test.txt", "--out", cased])
lowered = train("lowercased_lm", "quickstart.ini", f"data.dir={cased}", "model.embed=16", "model.hidden=16",
                "train.steps=10", "train.global_batch=8")
with h5py.File(lowered, "r") as f:
    check(int(f.attrs["lowercase"]) == 1, "a model trained on rnn_prep --lowercase data says lowercase = 1")
texts_of = [run([a.rnn_dist, "generate", "--checkpoint", lowered, "--prompt", p, "--tokens", "20", "--temperature",
                 "0"]).stdout for p in ("And The LORD said", "and the lord said")]
check(texts_of[0] == texts_of[1] and len(texts_of[0].split()) > 5,
      "its prompts are lowercased as the training text was (same text for 'And The LORD said')")

# --- classifier -----------------------------------------------------------------
labels_dir = os.path.join(a.bible, "labels")
classifier = train("classifier", "bible_classify.ini", f"data.dir={labels_dir}", "model.embed=32", "model.hidden=32",
                   "train.steps=60")
with h5py.File(classifier, "r") as f, h5py.File(os.path.join(labels_dir, "train.h5"), "r") as d:
    names = [w.decode() for w in f["label_names"][()]]
    cvocab = [w.decode() for w in f["vocab"][()]]
    check(names == [w.decode() for w in d["label_names"][()]] and int(f.attrs["n_classes"]) == len(names),
          f"the classifier's file carries /label_names ({len(names)} classes)")
cindex = {w: i for i, w in enumerate(cvocab)}
with open(os.path.join(labels_dir, "text", "test.txt")) as f:
    lines = [next(f) for _ in range(40)]
texts = os.path.join(a.work, "verses.txt")
with open(texts, "w") as f:
    f.writelines(lines)
r = run([a.rnn_dist, "predict", "--checkpoint", classifier, "--input", texts])
ours = [line.split("\t") for line in r.stdout.splitlines()]
theirs = [line.split() for line in torch_answers(
    "classify", classifier, [",".join(str(cindex.get(w, 1)) for w in l.split("\t", 1)[1].split()) for l in lines])]
same = len(ours) == len(theirs) == len(lines) and all(
    o[0] == names[int(t[0])] and abs(float(o[1]) - float(t[1])) < 1e-4 for o, t in zip(ours, theirs))
check(r.returncode == 0 and same, "predict: a bidirectional GRU classifier's label and probability equal PyTorch's "
      f"on {len(lines)} verses (probability within 1e-4)")
r2 = run([a.rnn_dist, "predict", "--checkpoint", classifier, "--stdin"], stdin="".join(lines))
check(r2.returncode == 0 and r2.stdout == r.stdout, "predict --stdin answers each line as --input does")

# --- forecaster ---------------------------------------------------------------------
rng = np.random.default_rng(5)


def write_series(path, n_series, steps):
    with open(path, "w") as f:
        f.write("series_id,temp,load\n")
        for s in range(n_series):
            phase = rng.uniform(0, 2 * math.pi)
            for t in range(steps):
                temp = 10 + 5 * math.sin(2 * math.pi * t / 24 + phase) + rng.normal(0, 0.3)
                load = 100 + 20 * math.cos(2 * math.pi * t / 24 + phase) + rng.normal(0, 1.0)
                f.write(f"s{s},{temp:.4f},{load:.3f}\n")


series = os.path.join(a.work, "series")
os.makedirs(series)
for name, n, steps in (("train", 4, 300), ("valid", 1, 150), ("test", 2, 60)):
    write_series(os.path.join(series, f"{name}.csv"), n, steps)
r = run([a.rnn_prep, "--csv", "--train", f"{series}/train.csv", "--valid", f"{series}/valid.csv", "--test",
         f"{series}/test.csv", "--out", series])
check(r.returncode == 0, "rnn_prep --csv prepares the synthetic series")
forecaster = train("forecaster", "sunspots_lstm.ini", f"data.dir={series}", "data.max_len=48", "train.steps=150")
with h5py.File(forecaster, "r") as f:
    check([w.decode() for w in f["feature_names"][()]] == ["temp", "load"] and f["mean"].shape == (2,)
          and f["std"].shape == (2,), "the forecaster's file carries /feature_names, /mean and /std")
r = run([a.rnn_dist, "predict", "--checkpoint", forecaster, "--input", f"{series}/test.csv", "--horizon", "5"])
rows = [line.split(",") for line in r.stdout.splitlines()]
with open(f"{series}/test.csv") as f:
    body = [line.strip().split(",") for line in f.readlines()[1:]]
histories = [";".join(",".join(x[1:]) for x in body if x[0] == s) for s in ("s0", "s1")]
theirs = [[[float(v) for v in step.split(",")] for step in line.split(";")]
          for line in torch_answers("forecast", forecaster, histories, 5)]
ours = [[[float(v) for v in row[2:]] for row in rows[1:] if row[0] == s] for s in ("s0", "s1")]
close = len(theirs) == 2 and all(len(o) == 5 for o in ours) and all(
    abs(x - y) <= 1e-4 * max(1.0, abs(y)) for o, t in zip(ours, theirs) for so, st in zip(o, t) for x, y in zip(so, st))
check(r.returncode == 0 and rows[0] == ["series_id", "step", "temp", "load"] and close,
      "predict --horizon 5: an LSTM forecaster's steps (fed back) equal PyTorch's (1e-4 relative), CSV in "
      "original units")
r2 = run([a.rnn_dist, "predict", "--checkpoint", forecaster, "--stdin", "--horizon=5"], stdin="\n".join(histories) + "\n")
stdin_steps = [[[float(v) for v in step.split(",")] for step in line.split(";")] for line in r2.stdout.splitlines()]
check(r2.returncode == 0 and stdin_steps == ours, "predict --stdin: one series a line, the same forecast")

# --- bad input ------------------------------------------------------------------------
error_line(run([a.rnn_dist, "generate", "--checkpoint", classifier]),
           r"a classifier model \(model\.task = classify\); rnn_dist generate takes a language model",
           "generate on a classifier")
error_line(run([a.rnn_dist, "predict", "--checkpoint", gru, "--input", texts]),
           r"a language model .*predict takes a classifier or a forecaster", "predict on a language model")
error_line(run([a.rnn_dist, "generate", "--checkpoint", gru, "--prompt", " "]), r"--prompt: the prompt is empty",
           "an empty prompt")
error_line(run([a.rnn_dist, "generate", "--checkpoint", gru, "--prompt", "qwzx vbnmz"]),
           r"every word of the prompt is unknown", "a prompt of only unknown words")
error_line(run([a.rnn_dist, "generate", "--checkpoint", gru, "--temperature", "-0.5"]), r"--temperature: -0\.5 is below 0",
           "a temperature below 0")
error_line(run([a.rnn_dist, "predict", "--checkpoint", forecaster, "--input", f"{series}/test.csv", "--horizon", "0"]),
           r"--horizon: 0 steps", "a horizon of 0")
one_feature = os.path.join(a.work, "one_feature.csv")
with open(one_feature, "w") as f:
    f.write("temp\n1.0\n2.0\n3.0\n")
error_line(run([a.rnn_dist, "predict", "--checkpoint", forecaster, "--input", one_feature]),
           r"one_feature\.csv: 1 feature columns, but the model .* forecasts 2", "a CSV with the wrong number of features")
error_line(run([a.rnn_dist, "predict", "--checkpoint", forecaster, "--stdin"], stdin="1,2;3\n"),
           r"stdin line 1: step 2 has 1 values but the model forecasts 2 features", "a --stdin series with a short step")
error_line(run([a.rnn_dist, "predict", "--checkpoint", classifier, "--input", texts, "--prompt", "x"]),
           r"predict: --prompt is not an option of this verb", "an option of the other verb")
error_line(run([a.rnn_dist, "generate", "--checkpoint", gru, "--tokens=many"]),
           r"--tokens: expected an integer in \[1, \d+\], got 'many'", "--tokens=many")
error_line(run([a.rnn_dist, "generate"]), r"generate: --checkpoint MODEL\.h5 is required", "no --checkpoint")
error_line(run([a.rnn_dist, "predict", "--checkpoint", classifier, "--stdin"], stdin="a b\n\n"),
           r"stdin:2: no words to classify", "a blank line to classify (after answering the first)", answered=1)
checks.finish()

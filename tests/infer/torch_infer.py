#!/usr/bin/env python3
"""What PyTorch says a model file predicts, for the inference tests
(tests/infer): the model is loaded once with tests/torch_reference.py's
load_model_file, in float64, and every line of stdin is a request,
answered on one line of stdout:

  torch_infer.py greedy MODEL N     request: prompt ids "3,17,5" (may be
                                    empty); answer: the N ids greedy decoding
                                    picks after <eos> and the prompt
  torch_infer.py classify MODEL     request: ids; answer: "class probability"
  torch_infer.py forecast MODEL H   request: rows "a,b;a,b" in original units;
                                    answer: the next H steps the same way,
                                    each fed back, normalised with the file's
                                    /mean and /std
"""
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_reference import load_model_file  # noqa: E402


def lm_logits(model, h):
    """Next-token log-probabilities from the top layer's output h [1, top]."""
    if model.adaptive:
        return model.decoder.log_prob(h)[0]
    return torch.log_softmax(model.decoder(h)[0], dim=0)


def greedy(model, eos, prompt, n):
    state, out = None, []
    token_inputs = [eos] + prompt
    with torch.no_grad():
        x = model.embedding(torch.tensor(token_inputs).view(-1, 1))
        y, state = model.rnn(x, state)
        for _ in range(n):
            nxt = int(torch.argmax(lm_logits(model, y[-1])))
            out.append(nxt)
            y, state = model.rnn(model.embedding(torch.tensor([[nxt]])), state)
    return " ".join(str(i) for i in out)


def classify(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor(ids).view(-1, 1), torch.tensor([len(ids)]))[0]
        p = torch.softmax(logits, dim=0)
    c = int(torch.argmax(p))
    return "%d %.9f" % (c, float(p[c]))


def forecast(model, mean, std, rows, horizon):
    x = (np.array(rows, dtype=np.float64) - mean) / std
    steps = []
    with torch.no_grad():
        y, state = model.rnn(model.input(torch.from_numpy(x).view(len(rows), 1, -1)), None)
        for h in range(horizon):
            nxt = model.decoder(y[-1])  # [1, F] normalised
            steps.append(nxt[0].numpy() * std + mean)
            y, state = model.rnn(model.input(nxt.view(1, 1, -1)), state)
    return ";".join(",".join("%.9g" % v for v in s) for s in steps)


def main():
    verb, path = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    model, task, _ = load_model_file(path)
    with h5py.File(path, "r") as f:
        if verb == "greedy":
            assert task == "lm", task
            eos, n = int(f.attrs["eos_id"]), int(sys.argv[3])
            answer = lambda line: greedy(model, eos, [int(i) for i in line.split(",") if i], n)
        elif verb == "classify":
            assert task == "classify", task
            answer = lambda line: classify(model, [int(i) for i in line.split(",")])
        elif verb == "forecast":
            assert task == "regress", task
            mean, std = f["mean"][()].astype(np.float64), f["std"][()].astype(np.float64)
            horizon = int(sys.argv[3])
            answer = lambda line: forecast(model, mean, std, [[float(v) for v in r.split(",")]
                                                              for r in line.split(";")], horizon)
        else:
            sys.exit("unknown verb " + verb)
    for line in sys.stdin:
        print(answer(line.strip()), flush=True)


if __name__ == "__main__":
    main()

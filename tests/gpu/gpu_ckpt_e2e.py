#!/usr/bin/env python3
"""The trainer on the GPU (device-resident step) against the CPU, and
checkpoints moving between them (CUDA backend present).

  - 16 steps on the GPU and on the CPU from the same start: training losses
    within 1e-3 relative at every step;
  - with 2 or more GPUs: a 2-rank GPU job (NCCL all-reduce) against a 2-rank
    CPU job, the same (skipped, saying so, with one GPU);

  - a model trained on the GPU (train.device=cuda), evaluated by the CPU
    (`rnn_dist eval`, CPU backend), gives the GPU run's own final
    validation loss within 1e-4 relative;
  - a run stopped on the CPU (checkpoint at step K) resumes on the GPU and
    one stopped on the GPU resumes on the CPU; the training losses after the
    switch stay within 1e-3 relative of an uninterrupted CPU run, and the
    final parameters within 1e-3 (fp32; the backends differ only in
    rounding).
Without a CUDA device it prints "SKIPPED: no CUDA device" and exits 77.
usage: gpu_ckpt_e2e.py --rnn-dist BIN --mpirun MPIEXEC --data DIR --work DIR
  [--gpu-device cpu]  dry run of this script's own logic with the CPU standing
                      in for the GPU (no device probe)"""
import argparse
import os
import re
import shutil
import subprocess
import sys

try:
    import h5py  # noqa: F401  (e2e_util reads metrics and model files with it)
    import numpy as np
except ImportError as missing:
    print(f"SKIPPED: this machine's python lacks {missing.name} (the GPU machine may have no h5py)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, mpi_env, read_series, model_params  # noqa: E402

p = argparse.ArgumentParser()
for k in ["--rnn-dist", "--mpirun", "--data", "--work"]:
    p.add_argument(k, required=True)
p.add_argument("--gpu-device", default="cuda")
a = p.parse_args()
GPU = a.gpu_device

probe = None if GPU != "cuda" else subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True) if shutil.which("nvidia-smi") else None
if GPU == "cuda" and (probe is None or probe.returncode != 0 or "GPU" not in probe.stdout):
    print("SKIPPED: no CUDA device")
    sys.exit(77)

shutil.rmtree(a.work, ignore_errors=True)
os.makedirs(a.work)
env = mpi_env()
N, K = 16, 8
common = ["--set", f"data.dir={a.data}", "--set", "data.test=none", "--set", f"train.steps={N}",
          "--set", "model.embed=32", "--set", "model.hidden=32", "--set", "model.dropout=0.1",
          "--set", "train.global_batch=12", "--set", "train.log_every=4", "--set", "train.eval_every=0",
          "--set", "train.threads=1"]
checks = Checks()
check = checks.check


def run(out, device, extra=(), stop_after=None, ranks=1):
    """stop_after=K: SIGTERM after step K (the RNND_FAULT_SIGNAL hook), so
    the run checkpoints and exits 0."""
    launcher = [a.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none"] if ranks > 1 else []
    cmd = [*launcher, a.rnn_dist, *common, "--set", f"output.dir={out}", "--set", f"train.device={device}", *extra]
    e = dict(env, RNND_FAULT_SIGNAL=f"0:{stop_after}") if stop_after is not None else env
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=300)
    if r.returncode != 0:
        print(f"--- {out}: exit {r.returncode}\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    return r


def losses(out):
    rows = read_series(os.path.join(out, "metrics.h5"))
    return dict(zip(rows["step"].tolist(), rows["loss"].tolist()))


def relative(x, y):
    return abs(x - y) / abs(y)


# A GPU-trained model, evaluated by the CPU.
gpu = os.path.join(a.work, "gpu")
r = run(gpu, GPU)
check(r.returncode == 0 and f"backend {GPU}" in r.stdout, f"GPU run uses the {GPU} backend and succeeds")
valid = read_series(os.path.join(gpu, "metrics.h5"), "val")
gpu_loss = float(valid["loss"][-1])
e = subprocess.run([a.rnn_dist, "eval", "--checkpoint", os.path.join(gpu, "model.h5"), "--data",
                    os.path.join(a.data, "valid.h5"), "--threads", "1", "--device", "cpu"], capture_output=True,
                   text=True, env=env)
m = re.search(r"^loss (\S+) ppl", e.stdout.strip().splitlines()[-1]) if e.returncode == 0 else None
cpu_loss = float(m.group(1)) if m else float("nan")
check(m is not None and relative(cpu_loss, gpu_loss) <= 1e-4,
      f"GPU model on the CPU: valid loss {cpu_loss:.6f} vs the GPU's {gpu_loss:.6f}")

# Uninterrupted CPU run, then CPU -> GPU and GPU -> CPU switches at step K.
reference = os.path.join(a.work, "cpu")
check(run(reference, "cpu").returncode == 0, "uninterrupted CPU run")
ref_losses, ref_params = losses(reference), model_params(reference)
got = losses(gpu)
worst = max(relative(got[s], ref_losses[s]) for s in ref_losses)
check(len(got) == len(ref_losses) and worst <= 1e-3,
      f"GPU vs CPU training: {len(got)} steps, worst loss difference {worst:.2e}")

gpus = probe.stdout.count("GPU ") if probe else 2
if gpus >= 2:
    pair = {}
    for device in ["cpu", GPU]:
        out = os.path.join(a.work, f"np2_{device}")
        check(run(out, device, ranks=2).returncode == 0, f"2-rank job on {device}")
        pair[device] = losses(out)
    worst = max(relative(pair[GPU][s], pair["cpu"][s]) for s in pair["cpu"])
    check(worst <= 1e-3, f"2 ranks, NCCL vs MPI: worst loss difference {worst:.2e}")
else:
    print("SKIPPED (part): the 2-rank NCCL comparison needs 2 GPUs, this machine has 1")
for first, second in [("cpu", GPU), (GPU, "cpu")]:
    out = os.path.join(a.work, f"{first}_then_{second}")
    r1 = run(out, first, stop_after=K)
    r2 = run(out, second, ["--resume", "auto"])
    check(r1.returncode == 0 and r2.returncode == 0 and f"resumed from" in r2.stdout,
          f"{first} run to step {K}, resumed on {second}")
    got = losses(out)
    worst = max(relative(got[s], ref_losses[s]) for s in ref_losses if s in got)
    check(len(got) == len(ref_losses) and worst <= 1e-3,
          f"{first} -> {second}: {len(got)} steps, worst loss difference {worst:.2e} vs the CPU run")
    final = model_params(out)
    err = max(float(np.max(np.abs(final[k] - ref_params[k])) / max(np.max(np.abs(ref_params[k])), 1e-30))
              for k in ref_params)
    check(err <= 1e-3, f"{first} -> {second}: final parameters within {err:.2e} of the CPU run")
checks.finish()

#!/usr/bin/env python3
"""model.task = regress end to end on a real series: monthly sunspot numbers
1749-2013 from R's datasets (data/prepare_sunspots.sh), split in time.

  - rnn_prep --csv writes the series data sets (mean/std from train);
  - configs/sunspots_lstm.ini (300 steps here) beats the naive last-value
    forecast on the validation windows (RMSE and MAE, original units);
  - bench/torch_forecast.py with rnn_dist's initial weights and batch plan
    (no dropout) reaches the same validation RMSE and MAE (1e-3 relative);
  - `rnn_dist eval --target-last 12` on the model file prints the test
    numbers the trainer printed;
  - bad input: a non-number in a CSV (file, line and column named), a
    forecaster config on token data, a token model on series data: one
    error line, exit 2.
Skips (exit 77) when Rscript (r-base-core) is missing.
usage: forecast_e2e.py --rnn-dist BIN --rnn-prep BIN --torch-forecast SCRIPT --config INI --work DIR --bible DIR"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, e2e_arguments, mpi_env  # noqa: E402

a = e2e_arguments(["--rnn-dist", "--rnn-prep", "--torch-forecast", "--config", "--work", "--bible"])
if not shutil.which("Rscript"):
    print("SKIPPED: Rscript (Debian package r-base-core) is not installed; launch/install_deps.sh --with-test-tools installs it")
    sys.exit(77)
env = mpi_env()
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
checks = Checks()
check = checks.check
data = os.path.join(a.work, "sunspots")


def run(cmd, timeout=600):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


r = run([os.path.join(root, "data", "prepare_sunspots.sh"), data])
check(r.returncode == 0 and "3177 months" in r.stdout, "prepare_sunspots.sh writes the three splits")
r = run([a.rnn_prep, "--csv", "--train", f"{data}/train.csv", "--valid", f"{data}/valid.csv", "--test",
         f"{data}/test.csv", "--out", data])
check(r.returncode == 0 and "1 series, 2541 steps" in r.stdout, "rnn_prep --csv: train has 2541 months")

out = os.path.join(a.work, "run")
common = ["--config", a.config, "--set", f"data.dir={data}", "--set", "train.steps=300", "--set", "train.threads=1"]
r = run([a.rnn_dist, *common, "--set", f"output.dir={out}"])
summary = dict(re.findall(r"summary: (valid|test) mse \S+ (rmse \S+ mae \S+)", r.stdout))
check(r.returncode == 0 and len(summary) == 2, "rnn_dist trains the forecaster and evaluates valid and test")
t = run(["/usr/bin/python3", a.torch_forecast, os.path.join(out, "config.ini"), "--match-rnn-dist"])
lines = t.stdout.strip().splitlines()
naive = re.match(r"naive rmse (\S+) mae (\S+)", lines[-2]) if len(lines) >= 2 else None
torch = re.match(r"loss \S+ rmse (\S+) mae (\S+) steps (\d+)", lines[-1]) if lines else None
ours = re.match(r"rmse (\S+) mae (\S+)", summary.get("valid", ""))
if naive and torch and ours:
    rmse, mae = float(ours.group(1)), float(ours.group(2))
    n_rmse, n_mae = float(naive.group(1)), float(naive.group(2))
    t_rmse, t_mae = float(torch.group(1)), float(torch.group(2))
    check(rmse < n_rmse and mae < n_mae, f"valid: rnn_dist RMSE {rmse} MAE {mae} beat the naive forecast's "
          f"{n_rmse} and {n_mae}")
    check(abs(rmse - t_rmse) / t_rmse < 1e-3 and abs(mae - t_mae) / t_mae < 1e-3,
          f"valid: PyTorch from the same weights and batches: RMSE {t_rmse}, MAE {t_mae} (rnn_dist {rmse}, {mae})")
else:
    check(False, f"parse the runs' numbers: torch exit {t.returncode}: {t.stdout[-500:]}{t.stderr[-500:]}")
e = run([a.rnn_dist, "eval", "--checkpoint", os.path.join(out, "model.h5"), "--data", f"{data}/test.h5",
         "--target-last", "12"])
last = e.stdout.strip().splitlines()[-1] if e.stdout.strip() else ""
m = re.match(r"loss \S+ rmse (\S+) mae (\S+) steps 209$", last)
want = re.match(r"rmse (\S+) mae (\S+)", summary.get("test", ""))
same = m and want and all(abs(float(m.group(i)) - float(want.group(i))) <= 1e-4 * float(want.group(i)) for i in (1, 2))
check(e.returncode == 0 and bool(same), f"rnn_dist eval: '{last}' matches the trainer's test line '{summary.get('test')}'")

# Bad input.
bad = os.path.join(a.work, "bad.csv")
with open(bad, "w") as f:
    f.write("a,b\n1,2\n3,x7\n")
r = run([a.rnn_prep, "--csv", "--train", bad, "--valid", bad, "--out", os.path.join(a.work, "bad")])
lines = r.stderr.strip().splitlines()
check(r.returncode == 2 and len(lines) == 1 and "bad.csv:3: column 'b': 'x7' is not a finite number" in lines[0],
      f"CSV with a non-number: {lines}")
r = run([a.rnn_dist, *common, "--set", f"data.dir={a.bible}", "--set", f"output.dir={a.work}/x1"])
lines = r.stderr.strip().splitlines()
check(r.returncode == 2 and len(lines) == 1 and "needs a time series (rnn_prep --csv)" in lines[0],
      f"forecaster on token data: {lines}")
r = run([a.rnn_dist, "--set", f"data.dir={data}", "--set", f"output.dir={a.work}/x2"])
lines = r.stderr.strip().splitlines()
check(r.returncode == 2 and len(lines) == 1 and "set model.task = regress" in lines[0],
      f"language model on series data: {lines}")
checks.finish()

#!/usr/bin/env python3
"""No hangs: a 2-rank job whose rank 1 dies or stops answering in the middle
of a step ends within a bounded time with a non-zero exit code.

  - rank 1 exits (code 3) after its backward, before the gradient all-reduce
    (RNND_FAULT_EXIT): the job ends in < 60 s, exit code non-zero;
  - rank 1 hangs there (RNND_FAULT_HANG, a process alive but silent) with
    comm.timeout_s = 5: rank 0's watchdog names the call it waited in and the
    wait, the job ends in < 60 s, exit code non-zero;
  - the same hang with the watchdog off (comm.timeout_s = 0) is still
    waiting after 15 s (so the bound above is the watchdog's doing), and is
    then killed by this script;
  - a training set that never finishes reading (a FIFO nobody writes, as a
    corrupt HDF5 file that makes the library loop) ends after
    RNND_READ_TIMEOUT_S = 3 s with one line naming the file, exit code 2.
usage: no_hang_e2e.py --rnn-dist BIN --mpirun MPIEXEC --data DIR --work DIR"""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, mpi_env, e2e_arguments  # noqa: E402

a = e2e_arguments(["--rnn-dist", "--mpirun", "--data", "--work"])
checks = Checks()
check = checks.check
common = ["--set", f"data.dir={a.data}", "--set", "data.valid=none", "--set", "data.test=none",
          "--set", "train.steps=20", "--set", "model.embed=32", "--set", "model.hidden=32",
          "--set", "train.global_batch=12", "--set", "train.threads=1"]


def job(name, hook, timeout_s, wait):
    """Starts a 2-rank job with the hook; returns (exit code or None, seconds, stderr)."""
    cmd = [a.mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", a.rnn_dist, *common,
           "--set", f"output.dir={os.path.join(a.work, name)}", "--set", f"comm.timeout_s={timeout_s}"]
    env = dict(mpi_env(), **hook)
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=wait)
        return proc.returncode, time.time() - start, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, time.time() - start, err


code, seconds, err = job("exit", {"RNND_FAULT_EXIT": "1:3"}, 900, 120)
check(code not in (None, 0) and seconds < 60,
      f"rank 1 exits mid-step: the job ends in {seconds:.1f} s with exit code {code}")

code, seconds, err = job("hang", {"RNND_FAULT_HANG": "1:3"}, 5, 120)
named = re.search(r"rank 0: MPI_\S+.* has waited \d+ s \(comm\.timeout_s = 5\)", err)
check(code not in (None, 0) and seconds < 60,
      f"rank 1 hangs: the watchdog ends the job in {seconds:.1f} s with exit code {code}")
check(named is not None, "rank 0's watchdog names the call and the wait: "
      + (named.group(0) if named else err.strip()[-300:]))

code, seconds, err = job("hang_unbounded", {"RNND_FAULT_HANG": "1:3"}, 0, 15)
check(code is None, f"without the watchdog the same hang is still waiting after {seconds:.0f} s")
fifo = os.path.join(a.work, "train.h5")
os.mkfifo(fifo)
start = time.time()
r = subprocess.run([a.rnn_dist, "--set", f"data.train={fifo}", "--set", "data.valid=none", "--set", "data.test=none",
                    "--set", f"output.dir={os.path.join(a.work, 'fifo')}"], capture_output=True, text=True,
                   env=dict(mpi_env(), RNND_READ_TIMEOUT_S="3"), timeout=60)
lines = r.stderr.strip().splitlines()
check(r.returncode == 2 and len(lines) == 1 and "train.h5: reading did not finish in 3 s" in lines[0]
      and time.time() - start < 30, f"a read that never ends stops after the bound: exit {r.returncode}, {lines}")
checks.finish()

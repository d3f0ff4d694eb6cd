#!/usr/bin/env python3
"""Kill-and-resume soak: a 2-rank CPU job killed with SIGKILL (the whole
process group: mpirun and both ranks) at random moments, relaunched each
time with --resume auto, ends with parameters bitwise identical to an
uninterrupted run of the same length.

  - at least KILLS (default 5) kills; one of them while rank 0 writes a
    checkpoint (RNND_FAULT_CHECKPOINT_DELAY holds the .tmp file open);
  - the kill times come from a seeded generator; the seed and every kill
    (time, step reached, checkpoint on disk) are printed;
  - after every kill every checkpoint on disk opens and every dataset reads
    back (HDF5 Fletcher32 checksums), and `latest` names one of them.
usage: soak_e2e.py --rnn-dist BIN --mpirun MPIEXEC --data DIR --work DIR [--seed S] [--kills N]"""
import glob
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, mpi_env, e2e_arguments, model_params  # noqa: E402


def more_options(parser):
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--kills", type=int, default=5)


a = e2e_arguments(["--rnn-dist", "--mpirun", "--data", "--work"], more_options)
checks = Checks()
check = checks.check
rng = random.Random(a.seed)
print(f"soak seed {a.seed} (rerun with --seed {a.seed})")
STEPS = 120
common = ["--set", f"data.dir={a.data}", "--set", "data.valid=none", "--set", "data.test=none",
          "--set", f"train.steps={STEPS}", "--set", "model.embed=32", "--set", "model.hidden=32",
          "--set", "model.dropout=0.1", "--set", "train.global_batch=12", "--set", "train.threads=1",
          "--set", "train.log_every=5", "--set", "output.checkpoint_every=4", "--set", "output.keep=3",
          "--set", "comm.timeout_s=60"]
env = mpi_env()


def command(out):
    return [a.mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none", a.rnn_dist, *common,
            "--set", f"output.dir={out}", "--resume", "auto"]


def checkpoints_readable(out):
    """(all readable, names): every ckpt_*.h5 opens and every dataset reads."""
    names = sorted(os.path.basename(x) for x in glob.glob(os.path.join(out, "ckpt_*.h5")))
    for name in names:
        try:
            with h5py.File(os.path.join(out, name), "r") as f:
                f.visititems(lambda n, obj: obj[()] if isinstance(obj, h5py.Dataset) else None)
        except Exception as e:  # noqa: BLE001 - any failure to read is the finding
            print(f"UNREADABLE {name}: {e}")
            return False, names
    latest = os.path.join(out, "latest")
    if os.path.exists(latest) and open(latest).read().strip() not in names:
        print(f"latest names {open(latest).read().strip()!r}, not one of {names}")
        return False, names
    return True, names


def session_members(sid):
    """Pids of the processes in session `sid` (field 6 of /proc/PID/stat)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def kill_group(proc):
    """SIGKILL to the whole job at once: mpirun and every rank. Open MPI puts
    each rank in a process group of its own, so killing mpirun's group left
    the ranks running until they noticed (rank 0 could still publish a
    checkpoint and `latest` after the "kill"); they all stay in the session
    the job was started in, so every member of it is killed, and waited for."""
    for _ in range(100):
        members = session_members(proc.pid)
        if not members:
            break
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    proc.wait()


def last_step(out):
    latest = os.path.join(out, "latest")
    return open(latest).read().strip() if os.path.exists(latest) else "(none)"


reference = os.path.join(a.work, "straight")
r = subprocess.run(command(reference), capture_output=True, text=True, env=env, timeout=600)
check(r.returncode == 0, "uninterrupted 2-rank run")

soak = os.path.join(a.work, "soak")
kills, during_write, launches = 0, False, 0
while launches < 40:
    launches += 1
    write_kill = kills == 2 and not during_write  # the third kill lands in a checkpoint write
    e = dict(env, RNND_FAULT_CHECKPOINT_DELAY="2") if write_kill else env
    proc = subprocess.Popen(command(soak), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=e,
                            start_new_session=True)
    if kills >= a.kills and during_write:
        code = proc.wait(timeout=600)
        check(code == 0, f"final relaunch runs to the end (exit {code})")
        break
    if write_kill:
        deadline = time.time() + 120
        while not glob.glob(os.path.join(soak, "*.h5.tmp")) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        tmp = glob.glob(os.path.join(soak, "*.h5.tmp"))
        kill_group(proc)
        if tmp:
            during_write = True
            kills += 1
            print(f"kill {kills}: during the write of {os.path.basename(tmp[0])}; latest -> {last_step(soak)}")
    else:
        delay = rng.uniform(0.8, 4.0)
        try:
            proc.wait(timeout=delay)
            print(f"launch {launches}: finished before the kill at {delay:.2f} s")
            if kills >= a.kills:
                break
            shutil.rmtree(soak)  # start over: the kills must come before the end
            continue
        except subprocess.TimeoutExpired:
            kill_group(proc)
            kills += 1
            print(f"kill {kills}: at {delay:.2f} s; latest -> {last_step(soak)}")
    ok, names = checkpoints_readable(soak)
    check(ok, f"after kill {kills}: every checkpoint on disk reads back ({', '.join(names) or 'none yet'})")

check(kills >= a.kills and during_write, f"{kills} kills, one during a checkpoint write: {during_write}")
if os.path.exists(os.path.join(soak, "model.h5")) and os.path.exists(os.path.join(reference, "model.h5")):
    want, got = model_params(reference), model_params(soak)
    same = want.keys() == got.keys() and all(np.array_equal(want[k], got[k]) for k in want)
    check(same, "after the kills and resumes the parameters are bitwise those of the uninterrupted run")
else:
    check(False, "both runs wrote model.h5")
checks.finish()

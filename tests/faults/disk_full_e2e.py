#!/usr/bin/env python3
"""Disk full and unwritable output, on small tmpfs mounts (needs root; says
SKIPPED and exits 77 where mounting is not allowed).

  - a checkpoint that no longer fits: one error line naming the .tmp file and
    "No space left on device", exit code 2, the previous checkpoint intact
    (every dataset reads back, `latest` names it), no .tmp left, nothing
    under the new checkpoint's final name;
  - a model file (output.save_every) that does not fit: the same for
    model.h5;
  - the metrics file on a full disk: one error line naming metrics.h5, exit 2;
  - output.dir on a read-only file system: one error line, exit 2, nothing
    written.
usage: disk_full_e2e.py --rnn-dist BIN --data DIR --work DIR"""
import glob
import os
import re
import subprocess
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, mpi_env, e2e_arguments  # noqa: E402

a = e2e_arguments(["--rnn-dist", "--data", "--work"])
env = mpi_env()
mounts = []


def mount(name, options):
    path = os.path.join(a.work, name)
    os.makedirs(path)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"SKIPPED: cannot mount a tmpfs here ({r.stderr.strip() or 'mount failed'}); needs root")
        cleanup()
        sys.exit(77)
    mounts.append(path)
    return path


def cleanup():
    for path in reversed(mounts):
        subprocess.run(["umount", path], capture_output=True)


def train(out, *extra):
    cmd = [a.rnn_dist, "--set", f"data.dir={a.data}", "--set", "data.valid=none", "--set", "data.test=none",
           "--set", "model.embed=32", "--set", "model.hidden=32", "--set", "train.global_batch=12",
           "--set", "train.threads=1", "--set", f"output.dir={out}", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def one_error_line(r, pattern):
    # The start-up advice (e.g. OpenBLAS running generic kernels on a CPU it
    # does not know) is a warning, not part of the error being checked.
    lines = [l for l in r.stderr.splitlines() if l.strip() and not l.startswith("rnn_dist: warning:")]
    return r.returncode == 2 and len(lines) == 1 and re.search(pattern, lines[0]) is not None, lines


def fill(path, leave_bytes):
    """Fills the file system of path so that about leave_bytes stay free."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    with open(os.path.join(path, "filler"), "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))


checks = Checks()
check = checks.check
try:
    # A checkpoint (about 9.7 MB for this model) that does not fit twice in 14 MB.
    out = os.path.join(mount("ckpt", "size=14m"), "run")
    r = train(out, "--set", "train.steps=8", "--set", "output.checkpoint_every=4")
    ok, lines = one_error_line(r, r"ckpt_step00000008\.h5\.tmp: cannot write .*No space left on device")
    check(ok, f"full disk at the second checkpoint: one error line, exit 2 (exit {r.returncode}: {lines})")
    names = sorted(os.listdir(out)) if os.path.isdir(out) else []
    check(not any(n.endswith(".tmp") for n in names) and "ckpt_step00000008.h5" not in names,
          f"no .tmp and nothing under the new checkpoint's name: {names}")
    try:
        with h5py.File(os.path.join(out, "ckpt_step00000004.h5"), "r") as f:
            f.visititems(lambda n, obj: obj[()] if isinstance(obj, h5py.Dataset) else None)
        intact = open(os.path.join(out, "latest")).read().strip() == "ckpt_step00000004.h5"
    except Exception as e:  # noqa: BLE001
        print(f"previous checkpoint: {e}")
        intact = False
    check(intact, "the previous checkpoint reads back and `latest` names it")

    # model.h5 (about 3.2 MB) with 1 MB left.
    disk = mount("model", "size=8m")
    out = os.path.join(disk, "run")
    os.makedirs(out)
    fill(disk, 1 << 20)
    r = train(out, "--set", "train.steps=4", "--set", "output.save_every=2", "--set", "metrics.hist_every=0")
    ok, lines = one_error_line(r, r"model\.h5\.tmp: cannot write .*No space left on device|model\.h5\.tmp: cannot")
    check(ok, f"full disk at the model file: one error line, exit 2 (exit {r.returncode}: {lines})")
    check(not glob.glob(os.path.join(out, "model.h5*")), f"no model.h5 or model.h5.tmp left: {os.listdir(out)}")

    # The metrics file on a disk with no room at all.
    disk = mount("metrics", "size=2m")
    out = os.path.join(disk, "run")
    os.makedirs(out)
    fill(disk, 0)
    r = train(out, "--set", "train.steps=4")
    ok, lines = one_error_line(r, r"metrics\.h5|train\.log|config\.ini")
    check(ok, f"no room for the run's outputs: one error line naming the file, exit 2 ({lines})")

    # A read-only file system.
    out = os.path.join(mount("readonly", "ro,size=1m"), "run")
    r = train(out, "--set", "train.steps=4")
    ok, lines = one_error_line(r, r"run.*(Read-only file system|cannot)")
    check(ok, f"read-only output: one error line, exit 2 ({lines})")
finally:
    cleanup()
checks.finish()

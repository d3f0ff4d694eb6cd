#!/usr/bin/env python3
"""Training reads its tokens from the file as it goes (token_store.h); what
goes wrong with the file mid-run must end the run with one clear line and
leave the last checkpoint usable:
  - a corrupted /tokens chunk (bytes overwritten in the middle of the file):
    exit 2, one line naming the file, the chunk and its byte offset (the one
    h5py reports), and the last checkpoint resumes on the good file;
  - the data file replaced under the running job (a new file renamed over
    it): exit 2 naming the file, rather than training on other data;
  - the same file rewritten in place (truncated and written again): exit 2;
  - a file cut short before the run: exit 2 naming the file and its size.
"""
import os
import re
import shutil
import signal
import subprocess
import time

import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from e2e_util import Checks, e2e_arguments, mpi_env

a = e2e_arguments(["--rnn-dist", "--data", "--work"])
checks = Checks()
check = checks.check
env = mpi_env()
common = ["--set", "data.valid=none", "--set", "data.test=none", "--set", "model.embed=32", "--set",
          "model.hidden=32", "--set", "train.global_batch=12", "--set", "train.log_every=5", "--set",
          "output.checkpoint_every=5"]


def data_copy(name):
    d = os.path.join(a.work, name)
    os.makedirs(d)
    for split in ("train.h5",):
        shutil.copy(os.path.join(a.data, split), d)
    return d


def train(data, out, steps, extra=(), background=False):
    cmd = [a.rnn_dist, "--set", f"data.dir={data}", *common, "--set", f"train.steps={steps}", "--set",
           f"output.dir={out}", *extra]
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def error_lines(stderr):
    return [line for line in stderr.splitlines() if ": error:" in line]


def rechunk(path, chunk):
    """Rewrites /tokens of path in chunks of `chunk` ids (shuffle + deflate, as
    another tool might write it), so there are many more chunks than the
    reader caches."""
    with h5py.File(path, "r+") as f:
        ids = f["tokens"][:]
        del f["tokens"]
        f.create_dataset("tokens", data=ids, chunks=(chunk,), shuffle=True, compression="gzip")


def wait_for_checkpoint(job, out):
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(out, "latest")) and time.time() < deadline and job.poll() is None:
        time.sleep(0.05)


def finish(job):
    try:
        return job.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        job.kill()
        return job.communicate()


# 1. chunks of /tokens go bad on disk mid-run (the file keeps its size and
# modification time, as when the medium corrupts it)
data = data_copy("corrupt")
path = os.path.join(data, "train.h5")
rechunk(path, 1024)
out = os.path.join(a.work, "corrupt_run")
job = train(data, out, 100000, background=True)
wait_for_checkpoint(job, out)
job.send_signal(signal.SIGSTOP)  # not reading while the file is written and its time put back
stat = os.stat(path)
with h5py.File(path, "r") as f:
    n_chunks = f["tokens"].id.get_num_chunks()
    spans = {k: (f["tokens"].id.get_chunk_info(k).byte_offset, f["tokens"].id.get_chunk_info(k).size)
             for k in range(1, n_chunks - 1, 7)}
with open(path, "r+b") as f:
    for k, (offset, size) in spans.items():
        f.seek(offset + size // 4)
        f.write(os.urandom(size // 2))
os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
job.send_signal(signal.SIGCONT)
stdout, stderr = finish(job)
lines = error_lines(stderr)
print(f"{len(spans)} of {n_chunks} chunks corrupted after the first checkpoint: exit {job.returncode}; {lines}")
check(job.returncode == 2, f"a corrupted chunk met mid-run ends the run with exit 2 (got {job.returncode})")
met = re.search(r"train\.h5: /tokens chunk (\d+) at byte offset (\d+) is corrupted \(zlib: [^)]*\)$",
                lines[0]) if len(lines) == 1 else None
check(met is not None and spans.get(int(met.group(1)), (None,))[0] == int(met.group(2)),
      "one error line naming the file, a corrupted chunk and its byte offset (as h5py reports it)")
latest = os.path.join(out, "latest")
with open(latest) as f:  # names the newest checkpoint
    step = int(re.search(r"ckpt_step0*(\d+)", f.read()).group(1))
good = data_copy("good")
resumed = train(good, out, step + 3, ["--resume", "auto"])
check(step > 0 and resumed.returncode == 0 and "resumed from" in resumed.stdout,
      f"the last checkpoint (step {step}) resumes on a good copy of the data (exit {resumed.returncode})")


def replaced_while_running(name, replace):
    data = data_copy(name)
    out = os.path.join(a.work, f"{name}_run")
    job = train(data, out, 100000, background=True)
    wait_for_checkpoint(job, out)
    replace(os.path.join(data, "train.h5"))
    stdout, stderr = finish(job)
    lines = error_lines(stderr)
    print(f"{name}: exit {job.returncode}; {lines}")
    return job.returncode, lines


def rename_other_file_over(path):
    other = path + ".new"
    with h5py.File(path, "r") as src, h5py.File(other, "w") as dst:
        for key, value in src.attrs.items():
            dst.attrs[key] = value
        for key in src:
            src.copy(key, dst)
    os.replace(other, path)


code, lines = replaced_while_running("replaced", rename_other_file_over)
check(code == 2 and len(lines) == 1 and re.search(r"train\.h5: the data file was replaced or removed while training",
                                                  lines[0]) is not None,
      "a data file replaced under the job ends it with exit 2, naming the file")


def rewrite_in_place(path):
    with open(path, "rb") as f:
        content = f.read()
    with open(path, "wb") as f:  # truncates: same inode, new contents
        f.write(content[: len(content) // 2])


code, lines = replaced_while_running("rewritten", rewrite_in_place)
check(code == 2 and len(lines) == 1 and re.search(r"train\.h5: the data file changed while training", lines[0]),
      "a data file rewritten in place ends the job with exit 2, naming the file")
# 4. a copy cut short (a full disk, an interrupted transfer): one line
# naming the file and its size, before any training
data = data_copy("truncated")
path = os.path.join(data, "train.h5")
os.truncate(path, os.path.getsize(path) * 3 // 4)
run = train(data, os.path.join(a.work, "truncated_run"), 5)
lines = error_lines(run.stderr)
print(f"truncated: exit {run.returncode}; {lines}")
check(run.returncode == 2 and len(lines) == 1 and re.search(
    rf"train\.h5: cannot open as HDF5 file \({os.path.getsize(path)} bytes: truncated or damaged\?\)$", lines[0]),
      "a truncated data file stops the run with exit 2, naming the file and its size")
checks.finish()

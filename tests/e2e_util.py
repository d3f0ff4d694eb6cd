"""Shared pieces of the end-to-end test scripts (tests/*/..._e2e.py): a
tally of named checks with the closing "N passed, N failed" line, the
environment for mpirun as root with no test hooks set, reading a run's
model file and a metrics.h5 group into dicts of arrays."""
import argparse
import os
import shutil
import sys

import h5py

TEST_HOOKS = ["RNND_FAULT_SIGNAL", "RNND_FAULT_NAN_GRAD", "RNND_FAULT_FLIP_PARAM", "RNND_FAULT_CHECKPOINT_DELAY",
              "RNND_FAULT_EXIT", "RNND_FAULT_HANG", "RNND_FAULT_SIGNAL_STARTUP"]


class Checks:
    def __init__(self):
        self.passed, self.failures = 0, []

    def check(self, ok, what):
        if ok:
            self.passed += 1
            print("ok   " + what)
        else:
            self.failures.append(what)
            print("FAIL " + what)

    def finish(self):
        """Prints the closing line and exits 1 if any check failed."""
        print(f"{self.passed} passed, {len(self.failures)} failed")
        sys.exit(1 if self.failures else 0)


def mpi_env():
    """One thread per rank, Open MPI allowed as root, no fault hooks inherited."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    for hook in TEST_HOOKS:
        env.pop(hook, None)
    return env


def model_params(out):
    """OUTPUT/model.h5's parameters as {state_dict name: numpy array}."""
    with h5py.File(os.path.join(out, "model.h5"), "r") as f:
        return {k: f["model"][k][()] for k in f["model"]}


def read_series(path, group="train"):
    """metrics.h5's group as {series name: numpy array}."""
    with h5py.File(path, "r") as f:
        return {name: values[:] for name, values in f[group].items()}


def e2e_arguments(required, add_more=None):
    """Parses the script's options: every name in `required` (e.g. "--work")
    as a required value, plus whatever add_more(parser) adds; then empties
    the --work directory. Returns the parsed namespace."""
    p = argparse.ArgumentParser()
    for name in required:
        p.add_argument(name, required=True)
    if add_more:
        add_more(p)
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    return a

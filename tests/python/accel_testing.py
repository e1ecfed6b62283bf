"""Helpers for the Python-driven tests: run accel-host, read its metrics,
write token files. ACCEL_HOST names the binary (set by ctest)."""
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np

ACCEL_HOST = os.environ.get("ACCEL_HOST", os.path.join(os.path.dirname(__file__), "../../build/bin/accel-host"))
# Sanitizer builds run several times slower: ctest passes the factor that
# stretches its own limits (tests/CMakeLists.txt), and the subprocess bounds
# below stretch with it. 1 everywhere else.
TIMEOUT_SCALE = int(os.environ.get("ACCEL_TEST_TIMEOUT_SCALE", "1"))


def run_host(*args, check=True, timeout=300):
    """Runs accel-host with args; returns the CompletedProcess (text mode)."""
    proc = subprocess.run([ACCEL_HOST, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout * TIMEOUT_SCALE)
    if check and proc.returncode != 0:
        raise AssertionError(f"accel-host {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


# mpirun, when installed, and the environment it needs here: Open MPI refuses
# root without the two confirmations and more ranks than cores without
# oversubscription.
MPIRUN = shutil.which("mpirun")
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")


def mpirun(n, *args, check=True, timeout=300, env=None):
    """Runs `mpirun -n N accel-host args` (with `env` added to the ranks'
    environment); returns the CompletedProcess."""
    proc = subprocess.run([MPIRUN, "-n", str(n), ACCEL_HOST, *map(str, args)], capture_output=True, text=True,
                          env=dict(MPI_ENV, **(env or {})), timeout=timeout * TIMEOUT_SCALE)
    if check and proc.returncode != 0:
        raise AssertionError(f"mpirun -n {n} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def one_step_from(n, args, checkpoint, step, metrics):
    """Runs the single step step + 1 on n ranks (one process without mpirun
    for 1) from `checkpoint`, saved after `step` steps (None: from the
    seeded start, step 0); returns its metrics row."""
    if os.path.exists(metrics):
        os.remove(metrics)
    run = [*args, "--steps", step + 1, "--metrics-file", metrics, *(["--resume", checkpoint] if checkpoint else [])]
    (run_host(*run) if n == 1 else mpirun(n, *run))
    [row] = read_metrics(metrics)
    return row


def steps_from_the_same_state(test, args, layouts, steps, tag):
    """Where a rounding-sensitive run (FP8, reduced precision) is compared
    with another: one step from the same state, never a free run. Over a
    free run the last bits in which two layouts (or two SIMD paths: AVX-512
    against AVX2) sum differently move an FP8 rounding now and then, and
    AdamW turns a changed near-zero gradient into an lr-sized step, so how
    far the runs drift depends on the machine. From the same weights,
    optimizer state and FP8 histories, one step differs by the step's own
    summation order only, within fp32's bound.

    Runs `args` in one process for max(steps) + 1 steps saving every step
    (files named after `tag` under test.path), then each layout, (ranks,
    *flags), runs step k + 1 from step k's checkpoint for k in `steps`
    (k = 0: from the seeded start, which both share). Yields (layout, k,
    one process's row of step k + 1, the layout's)."""
    root, metrics = test.path(tag), test.path(tag + ".jsonl")
    run_host(*args, "--steps", max(steps) + 1, "--save", root, "--save-every", 1, "--metrics-file", metrics)
    one = read_metrics(metrics)
    for n, *flags in layouts:
        for k in steps:
            checkpoint = os.path.join(root, f"step_{k}") if k else None
            row = one_step_from(n, [*args, *flags], checkpoint, k, test.path(tag + ".step.jsonl"))
            yield (n, *flags), k, one[k], row


def complete_lines(path):
    """The metrics lines written so far (a line being written is left out)."""
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for line in f if line.endswith("\n"))


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def assert_same_safetensors(test, a, b):
    """The .safetensors files of checkpoint directories `a` and `b` are the
    same names, byte for byte (a resume that continued to the last bit);
    returns the names."""
    names = sorted(f for f in os.listdir(a) if f.endswith(".safetensors"))
    test.assertEqual(names, sorted(f for f in os.listdir(b) if f.endswith(".safetensors")))
    for name in names:
        with open(os.path.join(a, name), "rb") as x, open(os.path.join(b, name), "rb") as y:
            test.assertTrue(x.read() == y.read(), f"{name} differs after resume")
    return names


def write_tokens(path, count, vocab, seed=0):
    """A learnable uint16 token file: a noisy walk, so losses move."""
    rng = np.random.default_rng(seed)
    steps = rng.integers(1, 4, size=count)
    tokens = (np.cumsum(steps) + rng.integers(0, 2, size=count) * rng.integers(0, vocab, size=count)) % vocab
    tokens.astype("<u2").tofile(path)
    return tokens.astype(np.int64)


class TempDirMixin:
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="accel_test_")
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp, name)


def error_lines(stderr):
    """The lines accel-host's logger printed at error level."""
    return [line for line in stderr.splitlines() if "[error]" in line]

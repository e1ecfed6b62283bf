#!/usr/bin/env python3
"""How long a job takes from SIGTERM to a complete checkpoint and exit, as a
preempted job gets it: `accel-host launch --max_restarts 1` supervising
mpirun (the supervisor passes SIGTERM on as SIGUSR1, which mpirun sends to
every rank), signalled after WARM steps. Prints the seconds from the signal
to the supervisor's exit, its exit code (75 expected) and the checkpoint
that resume would take, verified.

Usage: bench/checkpoint/stop_on_signal.py [--build build] [--ranks 2] [--warm 3] [--out DIR] -- [accel-host args]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
DEFAULT_JOB = ["--model", "gpt-small", "--seq-len", 256, "--batch-size", 2, "--threads", 1, "--plugin", "fsdp",
               "--log-level", "warn"]


def verifies(directory):
    with open(os.path.join(directory, "manifest.json")) as f:
        entries = json.load(f)["files"]
    for e in entries:
        with open(os.path.join(directory, e["file"]), "rb") as f:
            data = f.read()
        if len(data) != e["size"] or zlib.crc32(data) != e["crc32"]:
            return False
    return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--out", default=None)
    parser.add_argument("job", nargs="*")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="accel-stop.")
    os.makedirs(out, exist_ok=True)
    save, metrics = os.path.join(out, "save"), os.path.join(out, "m.jsonl")
    shutil.rmtree(save, ignore_errors=True)
    if os.path.exists(metrics):
        os.remove(metrics)
    host = os.path.join(args.build, "bin", "accel-host")
    job = [*map(str, args.job or DEFAULT_JOB), "--steps", "100000", "--save", save, "--metrics-file", metrics]
    proc = subprocess.Popen([host, "launch", "--num_processes", str(args.ranks), "--max_restarts", "1", "--", *job],
                            env=dict(MPI_ENV, HF_HOME=os.path.join(out, "hf")), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    while proc.poll() is None:
        if os.path.exists(metrics):
            with open(metrics) as f:
                if sum(1 for line in f if line.endswith("\n")) >= args.warm:
                    break
        time.sleep(0.05)
    if proc.poll() is not None:
        sys.exit(f"stop_on_signal.py: the job ended ({proc.returncode}) before the signal:\n{proc.stderr.read()[-3000:]}")
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate()
    seconds = time.monotonic() - signalled
    steps = sorted(int(n[5:]) for n in os.listdir(save) if n.startswith("step_") and n[5:].isdigit())
    newest = os.path.join(save, f"step_{steps[-1]}") if steps else None
    print(f"| {args.ranks} | {' '.join(map(str, args.job or DEFAULT_JOB))} | {seconds:.1f} | {proc.returncode} | "
          f"step_{steps[-1] if steps else '-'} ({'verifies' if newest and verifies(newest) else 'MISSING'}) |")
    if proc.returncode != 75:
        sys.stderr.write(err[-3000:])
        sys.exit(1)


if __name__ == "__main__":
    main()

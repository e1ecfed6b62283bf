#!/usr/bin/env python3
"""What a checkpoint costs the training loop: no saves, blocking saves,
--save-async saves and --snapshot-every snapshots (in /dev/shm), on the same job (gpt-small under fsdp on 2 ranks by
default, a save every 10 steps).

The clock is this script's: it watches the metrics file and timestamps each
line as it appears, so a mode's loop time is the time between the first and
the last periodic step's lines (steps 2..LAST, the saves at every
--save-every step inside; the final save, blocking in every mode, outside).
Tokens/s is that window's. Beside it, from the metrics lines, each save's
ckpt_blocking_ms (the training thread held at the save step), the next
step's ckpt_staging_wait_ms (its optimizer phase waiting for the background
copy of the plugins' lent state; both together are what a save blocks
training for), ckpt_write_ms (the background write) and ckpt_host_bytes
(the snapshot), and each rank's peak RSS.

Usage: bench/checkpoint/async_save.py [--build build] [--ranks 2] [--steps 31]
         [--every 10] [--modes none,blocking,async,snapshot] [--out DIR] -- [extra accel-host args]
Prints a Markdown table; raw metrics stay in --out.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
DEFAULT_JOB = ["--model", "gpt-small", "--seq-len", 256, "--batch-size", 2, "--threads", 1, "--plugin", "fsdp",
               "--log-level", "warn", "--log-every", 1000]


def run_mode(args, mode, out):
    metrics = os.path.join(out, f"{mode}.jsonl")
    save = os.path.join(out, f"save_{mode}")
    for path in (metrics,):
        if os.path.exists(path):
            os.remove(path)
    shutil.rmtree(save, ignore_errors=True)
    host = os.path.join(args.build, "bin", "accel-host")
    job = [*map(str, args.job or DEFAULT_JOB), "--steps", str(args.steps), "--metrics-file", metrics]
    if mode in ("blocking", "async"):
        job += ["--save", save, "--save-every", str(args.every)]
    if mode == "async":
        job.append("--save-async")
    if mode == "snapshot":
        # Into memory (tmpfs) every --every steps; --save only at the end.
        job += ["--save", save, "--snapshot-every", str(args.every), "--snapshot-dir",
                os.path.join("/dev/shm", f"accel-async-save-{os.getpid()}")]
    proc = subprocess.Popen(["mpirun", "-n", str(args.ranks), host, *job], env=MPI_ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen, arrival = 0, {}
    while proc.poll() is None:
        if os.path.exists(metrics):
            with open(metrics) as f:
                lines = [line for line in f if line.endswith("\n")]
            now = time.monotonic()
            for line in lines[seen:]:
                arrival[json.loads(line)["step"]] = now
            seen = len(lines)
        time.sleep(0.02)
    output = proc.stdout.read()
    if proc.returncode != 0:
        sys.exit(f"async_save.py: mode {mode} failed ({proc.returncode}):\n{output[-3000:]}")
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    last = args.steps - 1  # the final step's blocking save is outside the window
    window = arrival[last] - arrival[1]
    shutil.rmtree(save, ignore_errors=True)
    return {"mode": mode, "window_s": window, "rows": rows, "steps": last - 1}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=31)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--modes", default="none,blocking,async")
    parser.add_argument("--out", default=None)
    parser.add_argument("job", nargs="*")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="accel-async-save.")
    os.makedirs(out, exist_ok=True)
    tokens_per_step = None
    results = []
    for mode in args.modes.split(","):
        r = run_mode(args, mode, out)
        results.append(r)
        print(f"# {mode}: window {r['window_s']:.1f} s", file=sys.stderr, flush=True)
    base = next((r for r in results if r["mode"] == "none"), None)
    print("| mode | loop s (steps 2..%d) | vs no saves | blocking ms per save | of which the next step's wait | "
          "write ms per save | snapshot MB per rank | peak RSS MB (rank 0) |" % (args.steps - 1))
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        saves = [m for m in r["rows"] if "ckpt_blocking_ms" in m]
        writes = [m["ckpt_write_ms"] for m in r["rows"] if "ckpt_write_ms" in m]
        waits = [m["ckpt_staging_wait_ms"] for m in r["rows"] if "ckpt_staging_wait_ms" in m]
        wait = sum(waits) / len(saves) if saves else 0.0
        blocking = sum(m["ckpt_blocking_ms"] for m in saves) / len(saves) + wait if saves else 0.0
        snapshot = max((m.get("ckpt_host_bytes", 0) for m in saves), default=0) / 2**20
        rss = max(m["peak_mem_bytes"] for m in r["rows"]) / 2**20
        vs = f"{r['window_s'] / base['window_s'] - 1:+.1%}" if base else "-"
        print(f"| {r['mode']} | {r['window_s']:.1f} | {vs} | {blocking:.0f} | {wait:.0f} | "
              f"{(sum(writes) / len(writes)) if writes else 0:.0f} | {snapshot:.0f} | {rss:.0f} |")
    print(f"\nraw metrics: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()

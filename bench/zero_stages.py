#!/usr/bin/env python3
"""deepspeed_zero's stages at N = 1, 2, 4 ranks beside ddp and fsdp at N = 2
(issue 11's memory and speed tables): the host's per-category memory peaks,
the ledger's total at its peak, the kernel's peak RSS of the largest rank
(/usr/bin/time %M), the communicated bytes per step and the median step
time after the first. One repeat per row: run it on an idle machine.

  python3 bench/zero_stages.py [BUILD]      (default: build)
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
BASE = "--model gpt-small --seq-len 64 --batch-size 4 --steps 4 --threads 1 --log-level warn --data synthetic"
STRATS = {f"ZeRO-{s}": f"--plugin deepspeed_zero --deepspeed_zero.zero_stage {s}" for s in range(4)}
STRATS["ddp"] = "--plugin ddp"
STRATS["fsdp FULL_SHARD"] = "--plugin fsdp --fsdp.auto_wrap_policy transformer_based_wrap"
MiB = 2**20


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    host = os.path.join(build, "bin", "accel-host")
    work = tempfile.mkdtemp(prefix="accel-zero-stages-")
    plan = [(n, s) for n in (1, 2, 4) for s in STRATS if not (s in ("ddp", "fsdp FULL_SHARD") and n != 2)]
    print("| N | strategy | params | grads | optimizer | ledger total at peak | peak RSS (largest rank) | "
          "comm / step | median step (s) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for n, s in plan:
        out = os.path.join(work, f"zt_{n}_{s.replace(' ', '_')}")
        m = out + ".jsonl"
        inner = f"exec /usr/bin/time -f %M -o {out}.rss.$OMPI_COMM_WORLD_RANK {host} {BASE} {STRATS[s]} --metrics-file {m}"
        subprocess.run(["mpirun", "-n", str(n), "--bind-to", "none", "sh", "-c", inner], env=ENV, check=True,
                       capture_output=True)
        with open(m) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        last = rows[-1]
        peak = last["memory_peak_bytes"]
        led = max(r.get("memory_ledger_peak", {}).get("total", 0) for r in rows)
        rss = max(int(open(f"{out}.rss.{r}").read().split()[-1]) for r in range(n)) * 1024
        step = statistics.median([4 * 64 / r["tokens_per_s"] for r in rows[1:]])
        comm = last.get("comm_bytes", 0)
        print(f"| {n} | {s} | {peak['params'] // MiB:,} | {peak['grads'] // MiB:,} | {peak['optimizer'] // MiB:,} | {led//MiB:,} | {rss//MiB:,} | {comm//MiB:,} | {step:.2f} |", flush=True)


if __name__ == "__main__":
    main()

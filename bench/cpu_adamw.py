#!/usr/bin/env python3
"""The fused host AdamW of offloaded partitions (plugins/sharding/cpu_adamw.h,
timed by build/bin/cpu_adamw_bench) beside torch.optim.AdamW on CPU with
foreach=False (the single-tensor op sequence the host's adamw_step service
runs), foreach=True and fused=True, for the same N fp32 elements in one
parameter, at 1 and 2 threads (torch.set_num_threads), with the same
hyperparameters. Each cell: the median step over --steps steps after
--warmup untimed ones (the first of which creates the moments), and the
bandwidth at that median counting 28 bytes per element for every column —
four arrays read, three written: what a fused pass moves at least (torch's
unfused sequence moves more; that is the point). Prints one markdown table.

  .venv/bin/python bench/cpu_adamw.py [--numel 1M,16M,64M] [--threads 1,2]
                                      [--steps 20] [--warmup 3] [--build build]
"""
import argparse
import os
import re
import statistics
import subprocess
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BYTES_PER_ELEMENT = 28
HYPER = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
TORCH_VARIANTS = {"foreach=False": dict(foreach=False), "foreach=True": dict(foreach=True), "fused=True": dict(fused=True)}


def count(text):
    """'64M' -> 67108864 (K, M, G: powers of 1024)."""
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"not a count: {text}")
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]


def time_torch(numel, threads, options, steps, warmup):
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.rand(numel, generator=gen) - 0.5)
    p.grad = (torch.rand(numel, generator=gen) - 0.5) * 1e-2
    opt = torch.optim.AdamW([p], **HYPER, **options)
    ms = []
    with torch.no_grad():
        for s in range(warmup + steps):
            t = time.perf_counter()
            opt.step()
            elapsed = (time.perf_counter() - t) * 1e3
            if s >= warmup:
                ms.append(elapsed)
    del opt, p
    return statistics.median(ms)


def time_accel(binary, numel, threads, steps, warmup):
    out = subprocess.run([binary, "--numel", str(numel), "--threads", str(threads), "--steps", str(steps),
                          "--warmup", str(warmup)], check=True, capture_output=True, text=True).stdout
    fields = dict(kv.split("=") for kv in out.strip().splitlines()[-1].split())
    return float(fields["median_ms"]), fields["clone"]


def cell(ms, numel):
    return f"{ms:.2f} ms ({BYTES_PER_ELEMENT * numel / (ms * 1e-3) / 1e9:.1f} GB/s)"


def human(numel):
    for unit, size in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if numel % size == 0:
            return f"{numel // size}{unit}"
    return str(numel)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--numel", default="1M,16M,64M", type=lambda s: [count(x) for x in s.split(",")])
    ap.add_argument("--threads", default="1,2", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin", "cpu_adamw_bench")

    load = os.getloadavg()
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}; "
          f"load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    columns = list(TORCH_VARIANTS) + ["accel CpuAdamW"]
    rows = []
    clone = "?"
    for numel in args.numel:
        for threads in args.threads:
            times = {name: time_torch(numel, threads, options, args.steps, args.warmup)
                     for name, options in TORCH_VARIANTS.items()}
            times["accel CpuAdamW"], clone = time_accel(binary, numel, threads, args.steps, args.warmup)
            best_torch = min(times[name] for name in TORCH_VARIANTS)
            rows.append(f"| {human(numel)} | {threads} | " + " | ".join(cell(times[c], numel) for c in columns) +
                        f" | {best_torch / times['accel CpuAdamW']:.2f}x |")
    load = os.getloadavg()
    print(f"load average at end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; CpuAdamW ran its {clone} clone; "
          f"median of {args.steps} steps after {args.warmup} warm-up; GB/s = {BYTES_PER_ELEMENT} B/element / median\n")
    print("| N | threads | " + " | ".join(f"torch {c}" if c in TORCH_VARIANTS else c for c in columns) +
          " | CpuAdamW vs fastest torch |")
    print("|---:|---:|" + "---:|" * (len(columns) + 1))
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()

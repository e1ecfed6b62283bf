#!/usr/bin/env python3
"""Peak resident memory per rank of accel-host's ddp and fsdp (issue 18's
proof), measured from outside: /usr/bin/time's %M (the kernel's peak RSS)
around every rank, the largest rank reported. Memory, not speed: one repeat
is enough (the peaks moved by less than 1% between repeats on this machine).

  --table ranks      ddp / fsdp FULL_SHARD (and SHARD_GRAD_OP, activation
                     checkpointing) at each --ranks, one shape
  --table allocator  the same fsdp run under glibc malloc (default tuning),
                     glibc with M_MMAP_THRESHOLD fixed (MALLOC_MMAP_THRESHOLD_),
                     jemalloc and mimalloc (LD_PRELOAD of Debian's packages)
  --table climb      rank 0's peak RSS after every step (metrics
                     peak_mem_bytes) of one long run: step 1, 10, 50, last

Usage: .venv/bin/python bench/fsdp_memory.py --table ranks --ranks 2,4 -- --model gpt-small --n-layer 4 \\
           --seq-len 512 --batch-size 4 --steps 8
Arguments after `--` go to accel-host as they are.
"""
import argparse
import json
import os
import sys
import tempfile

from rank_rss import mib, run_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = "/usr/lib/x86_64-linux-gnu"
ALLOCATORS = {
    "glibc (default)": {},
    "glibc, MALLOC_MMAP_THRESHOLD_=1 MiB": {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)},
    "jemalloc 5.3 (LD_PRELOAD)": {"LD_PRELOAD": f"{LIB}/libjemalloc.so.2"},
    "mimalloc 2.0 (LD_PRELOAD)": {"LD_PRELOAD": f"{LIB}/libmimalloc.so.2"},
}
STRATEGIES = {
    "ddp": ["--plugin", "ddp"],
    "fsdp FULL_SHARD": ["--plugin", "fsdp", "--fsdp.auto_wrap_policy", "transformer_based_wrap"],
    "fsdp SHARD_GRAD_OP": ["--plugin", "fsdp", "--fsdp.auto_wrap_policy", "transformer_based_wrap",
                           "--fsdp.sharding_strategy", "SHARD_GRAD_OP"],
    "fsdp FULL_SHARD + activation_checkpointing": ["--plugin", "fsdp", "--fsdp.auto_wrap_policy",
                                                   "transformer_based_wrap", "--fsdp.activation_checkpointing",
                                                   "true"],
}


def run(build, ranks, host_args, env_extra, workdir):
    """Per-rank peak RSS in bytes, and rank 0's metrics rows."""
    metrics = os.path.join(workdir, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    args = ["--threads", "1", "--log-level", "warn", "--data", "synthetic", "--metrics-file", metrics] + host_args
    rss, _ = run_ranks(build, ranks, args, workdir, env_extra)
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return rss, rows


def main(argv):
    if "--" in argv:
        cut = argv.index("--")
        argv, host_args = argv[:cut], argv[cut + 1:]
    else:
        host_args = ["--model", "gpt-small", "--n-layer", "4", "--seq-len", "512", "--batch-size", "4",
                     "--steps", "8"]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--table", choices=["ranks", "allocator", "climb"], default="ranks")
    p.add_argument("--ranks", default="2")
    p.add_argument("--strategies", default="ddp,fsdp FULL_SHARD")
    a = p.parse_args(argv)
    work = tempfile.mkdtemp(prefix="accel-fsdp-memory-")
    print(f"accel-host {' '.join(host_args)} --threads 1 (per rank); load average {os.getloadavg()[0]:.1f}")
    print()
    if a.table == "ranks":
        print("| ranks | strategy | peak RSS per rank (MiB, each rank) | largest | ledger total at peak (MiB) |")
        print("|---|---|---|---:|---:|")
        for ranks in [int(r) for r in a.ranks.split(",")]:
            for name in a.strategies.split(","):
                rss, rows = run(a.build, ranks, STRATEGIES[name] + host_args, {}, work)
                ledger = max((r.get("memory_ledger_peak", {}).get("total", 0) for r in rows), default=0)
                print(f"| {ranks} | {name} | {' / '.join(mib(x) for x in rss)} | {mib(max(rss))} | "
                      f"{mib(ledger) if ledger else 'n/a'} |", flush=True)
    elif a.table == "allocator":
        ranks = int(a.ranks.split(",")[0])
        print("| allocator | strategy | peak RSS per rank (MiB, largest) | median step (s) |")
        print("|---|---|---:|---:|")
        for alloc, env in ALLOCATORS.items():
            for name in a.strategies.split(","):
                rss, rows = run(a.build, ranks, STRATEGIES[name] + host_args, env, work)
                # step seconds from the metrics' tokens/s; step 1 (warm-up) left out
                seq = int(host_args[host_args.index("--seq-len") + 1]) if "--seq-len" in host_args else 1024
                batch = int(host_args[host_args.index("--batch-size") + 1])
                step_s = sorted(batch * seq / r["tokens_per_s"] for r in (rows[1:] or rows))
                print(f"| {alloc} | {name} | {mib(max(rss))} | {step_s[len(step_s) // 2]:.2f} |", flush=True)
    else:
        ranks = int(a.ranks.split(",")[0])
        name = a.strategies.split(",")[0]
        rss, rows = run(a.build, ranks, STRATEGIES[name] + host_args, {}, work)
        marks = sorted({1, 10, 50, 100, 200, len(rows)} & set(range(1, len(rows) + 1)))
        print("| " + " | ".join(f"step {m}" for m in marks) + " |")
        print("|" + "---:|" * len(marks))
        print("| " + " | ".join(mib(rows[m - 1]["peak_mem_bytes"]) for m in marks) + " |")
        print()
        print(f"peak RSS per rank at the end: {' / '.join(mib(x) for x in rss)} MiB")


if __name__ == "__main__":
    main(sys.argv[1:])

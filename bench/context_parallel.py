#!/usr/bin/env python3
"""Context parallelism (--megatron.cp_degree) on CPU ranks: memory as the
sequence grows with the ranks, a sequence one rank cannot hold, and what the
ring costs. Peak RSS per rank from outside (/usr/bin/time's %M around every
rank, bench/rank_rss.py); step times from the metrics (the median of the
steps after the first).

  --table memory  fixed tokens per rank L: (L tokens, cp 1), (2L, cp 2),
                  (4L, cp 4), under each exchange
  --table limit   a sequence of 4L tokens: one rank under a cgroup memory
                  limit (memory.max) is killed; cp 2 under the same per-rank
                  limit trains
  --table speed   one sequence length: cp 1 on one rank against cp 2 on two
                  (ring and Ulysses); the ideal cp 2 step is half the cp 1
                  step (every rank does half of every part of it)

Usage: .venv/bin/python bench/context_parallel.py --table memory [--tokens 2048] [--build build]
Arguments after `--` go to accel-host as they are.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from rank_rss import MPI_ENV, mib, run_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A wide-ish llama (rotary positions, grouped-query attention) that runs a
# step of a few thousand tokens in seconds on one core: attention is what
# grows with the sequence.
MODEL = ["--model", "llama-tiny", "--n-layer", 4, "--n-embd", 256, "--n-head", 8, "--n-kv-head", 4,
         "--vocab-size", 4096, "--threads", 1, "--log-level", "warn"]


def cp_args(degree, comm_type):
    if degree == 1:
        return ["--plugin", "megatron"]
    return ["--plugin", "megatron", "--megatron.cp_degree", degree, "--megatron.cp_comm_type", comm_type]


def step_seconds(metrics_path, tokens_per_step):
    """The median step time after the first step, from tokens_per_s."""
    with open(metrics_path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    times = [tokens_per_step / r["tokens_per_s"] for r in rows[1:]]
    return statistics.median(times) if times else float("nan"), rows


# --mmap-threshold: glibc's M_MMAP_THRESHOLD fixed (its dynamic threshold
# keeps freed multi-MiB blocks in the heap, which the peak counts; see
# docs/benchmarks.md, "Allocators").
ENV = {}


def run(build, ranks, seq, extra, workdir, steps=4, batch=1):
    metrics = os.path.join(workdir, f"m{ranks}_{seq}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    args = [*MODEL, "--batch-size", batch, "--seq-len", seq, "--steps", steps, "--metrics-file", metrics, *extra]
    rss, _ = run_ranks(build, ranks, args, workdir, ENV)
    seconds, rows = step_seconds(metrics, seq * batch)
    return max(rss), seconds, rows


def table_memory(build, tokens, extra):
    print(f"Fixed {tokens} tokens per rank, peak RSS of the largest rank (MiB) and step time (s):\n")
    print("| sequence | cp | exchange | peak RSS / rank (MiB) | step (s) |")
    print("|---:|---:|---|---:|---:|")
    with tempfile.TemporaryDirectory() as workdir:
        for degree in (1, 2, 4):
            for comm_type in (("p2p",) if degree == 1 else ("p2p", "a2a", "a2a+p2p") if degree == 4 else ("p2p", "a2a")):
                seq = tokens * degree
                peak, seconds, _ = run(build, degree, seq, [*cp_args(degree, comm_type), *extra], workdir)
                shown = "-" if degree == 1 else comm_type
                print(f"| {seq} | {degree} | {shown} | {mib(peak)} | {seconds:.2f} |", flush=True)
            if degree > 1:
                # The same world without cp: data parallel over `degree`
                # ranks at the same tokens per rank (what MPI itself adds).
                peak, seconds, _ = run(build, degree, tokens, ["--plugin", "megatron", *extra], workdir, batch=degree)
                print(f"| {tokens} x {degree} sequences | 1 | data parallel on {degree} | {mib(peak)} | {seconds:.2f} |",
                      flush=True)


def table_limit(build, tokens, limit_mib, extra):
    seq = 4 * tokens
    print(f"A sequence of {seq} tokens, each rank in its own cgroup limited to {limit_mib} MiB (no swap):\n")
    base = "/sys/fs/cgroup"
    if not os.path.exists(os.path.join(base, "cgroup.controllers")):
        # cgroup v1: the memory controller's own hierarchy.
        base = "/sys/fs/cgroup/memory"
    limit_file = "memory.max" if base == "/sys/fs/cgroup" else "memory.limit_in_bytes"
    host = os.path.join(build, "bin", "accel-host")
    print("| run | result |")
    print("|---|---|")
    with tempfile.TemporaryDirectory() as workdir:
        for degree in (1, 2):
            metrics = os.path.join(workdir, f"limit{degree}.jsonl")
            args = " ".join(str(a) for a in [host, *MODEL, "--batch-size", 1, "--seq-len", seq, "--steps", 2, "--metrics-file", metrics,
                                              *cp_args(degree, "p2p"), *extra])
            rank_cmd = (f"G={base}/accel-cp-bench-$OMPI_COMM_WORLD_RANK; mkdir -p $G; "
                        f"echo {limit_mib * 2**20} > $G/{limit_file}; "
                        f"(echo 0 > $G/memory.swap.max) 2>/dev/null; (echo {limit_mib * 2**20} > $G/memory.memsw.limit_in_bytes) 2>/dev/null; "
                        f"echo $$ > $G/cgroup.procs; exec {args}")
            done = subprocess.run(["mpirun", "-n", str(degree), "--bind-to", "none", "sh", "-c", rank_cmd],
                                  env=dict(os.environ, **MPI_ENV), capture_output=True, text=True)
            if done.returncode == 0:
                rows = [json.loads(line) for line in open(metrics) if line.strip()]
                result = f"trained: {len(rows)} steps, loss {rows[-1]['loss']:.4f}"
            elif done.returncode == 137:
                result = "killed by the memory limit (exit 137: SIGKILL from the cgroup's OOM killer)"
            else:
                lines = [l for l in done.stderr.splitlines() if "[error]" in l] or ["(no [error] line)"]
                result = f"failed, exit {done.returncode}: {lines[0][:160]}"
            print(f"| {seq} tokens, cp {degree} on {degree} rank(s) | {result} |", flush=True)
        for r in range(2):
            subprocess.run(["rmdir", f"{base}/accel-cp-bench-{r}"], capture_output=True)


def table_speed(build, tokens, extra):
    seq = tokens
    print(f"One sequence of {seq} tokens; step time (s), median of steps 2-6:\n")
    print("| run | step (s) | against half the cp 1 step |")
    print("|---|---:|---:|")
    with tempfile.TemporaryDirectory() as workdir:
        _, one, _ = run(build, 1, seq, [*cp_args(1, "p2p"), *extra], workdir, steps=6)
        print(f"| cp 1, one rank | {one:.3f} | |")
        for comm_type in ("p2p", "a2a"):
            _, two, _ = run(build, 2, seq, [*cp_args(2, comm_type), *extra], workdir, steps=6)
            print(f"| cp 2 ({comm_type}), two ranks | {two:.3f} | {two / (one / 2):.2f}x |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", choices=["memory", "limit", "speed"], required=True)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per rank (memory, limit), the sequence (speed)")
    parser.add_argument("--limit-mib", type=int, default=0, help="limit: memory.max per rank (default 1024)")
    parser.add_argument("--mmap-threshold", type=int, default=0,
                        help="MALLOC_MMAP_THRESHOLD_ for accel-host (bytes; 0: glibc's dynamic default)")
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    opts = parser.parse_args(argv)
    if opts.mmap_threshold:
        ENV["MALLOC_MMAP_THRESHOLD_"] = str(opts.mmap_threshold)
    if opts.table == "memory":
        table_memory(opts.build, opts.tokens, extra)
    elif opts.table == "limit":
        table_limit(opts.build, opts.tokens, opts.limit_mib or 1024, extra)
    else:
        table_speed(opts.build, opts.tokens, extra)


if __name__ == "__main__":
    main()

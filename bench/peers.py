#!/usr/bin/env python3
"""Side-by-side peer benchmark (run it through bench/peers.sh): accel-host's
ddp and fsdp plugins against PyTorch eager DDP and FSDP2 (`fully_shard` per
block, bench/peers_torch.py) launched with torchrun, at the same GPT-2 shape,
global batch, threads per rank and AdamW settings.

Per contender and repeat it measures, on every rank:
  tokens/s      global batch x seq_len / the median step time after --warmup
                steps (each side times its own step: accel-host's metrics
                line, time.perf_counter around PyTorch's step);
  peak RSS      the rank's peak resident memory (getrusage: /usr/bin/time's
                %M around each accel-host rank, ru_maxrss in each PyTorch
                rank), the table shows the largest rank;
  start-up      launch to the first step: the launcher's wall time minus the
                steps' own times (the same formula for both sides, so
                teardown, a few ms, is in it for both).
Repeats are interleaved and the order rotates every repeat, so load drift
hits every contender alike. Prints a Markdown table (median over repeats,
range in brackets) and keeps every raw result under --out-dir.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
CONTENDERS = ["accel-ddp", "accel-fsdp", "torch-ddp", "torch-fsdp2"]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=4, help="global sequences per step")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--out-dir", default=None)
    a = p.parse_args(argv)
    a.contenders = a.contenders.split(",")
    for c in a.contenders:
        if c not in CONTENDERS:
            p.error(f"--contenders: unknown '{c}' (known: {', '.join(CONTENDERS)})")
    if a.steps <= a.warmup:
        p.error("--steps must be larger than --warmup")
    return a


def run_accel(a, strategy, out):
    metrics = os.path.join(out, "metrics.jsonl")
    host = os.path.join(a.build, "bin", "accel-host")
    args = [host, "--model", "gpt-small", "--n-layer", a.n_layer, "--seq-len", a.seq_len, "--batch-size",
            a.batch_size, "--steps", a.steps, "--threads", a.threads, "--lr", 6e-4, "--beta1", 0.9, "--beta2", 0.95,
            "--eps", 1e-8, "--weight-decay", 0.1, "--grad-clip", 1.0, "--data", "synthetic", "--log-level", "warn",
            "--metrics-file", metrics, "--plugin", strategy]
    if strategy == "fsdp":
        args += ["--fsdp.auto_wrap_policy", "transformer_based_wrap"]
    inner = " ".join(str(x) for x in args)
    rank_cmd = f'exec /usr/bin/time -f %M -o {out}/rss.$OMPI_COMM_WORLD_RANK {inner}'
    cmd = ["mpirun", "-n", str(a.ranks), "--bind-to", "none", "sh", "-c", rank_cmd]
    start = time.time()
    subprocess.run(cmd, env=dict(os.environ, **MPI_ENV), check=True, capture_output=True, text=True)
    wall = time.time() - start
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    tokens = a.batch_size * a.seq_len
    step_s = [tokens / r["tokens_per_s"] for r in rows]
    rss = []
    for r in range(a.ranks):
        with open(f"{out}/rss.{r}") as f:
            rss.append(int(f.read().split()[-1]) * 1024)
    return step_s, rss, wall - sum(step_s), [r["loss"] for r in rows]


def run_torch(a, strategy, out):
    torchrun = os.path.join(os.path.dirname(a.python), "torchrun")
    cmd = [torchrun, "--standalone", f"--nproc-per-node={a.ranks}", os.path.join(ROOT, "bench", "peers_torch.py"),
           "--strategy", strategy, "--n-layer", str(a.n_layer), "--seq-len", str(a.seq_len),
           "--batch-size", str(a.batch_size), "--steps", str(a.steps), "--threads", str(a.threads),
           "--out-dir", out]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    start = time.time()
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    wall = time.time() - start
    ranks = []
    for r in range(a.ranks):
        with open(os.path.join(out, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
    step_s = ranks[0]["step_s"]
    return step_s, [r["peak_rss_bytes"] for r in ranks], wall - sum(step_s), ranks[0]["loss"]


def run(a, contender, out):
    os.makedirs(out, exist_ok=True)
    side, strategy = contender.split("-", 1)
    return run_accel(a, strategy, out) if side == "accel" else run_torch(a, strategy, out)


def main(argv):
    a = parse_args(argv)
    out_dir = a.out_dir or tempfile.mkdtemp(prefix="accel-peers-")
    load_before = os.getloadavg()[0]
    results = {c: [] for c in a.contenders}
    for rep in range(a.repeats):
        order = a.contenders[rep % len(a.contenders):] + a.contenders[:rep % len(a.contenders)]
        for c in order:
            step_s, rss, startup, loss = run(a, c, os.path.join(out_dir, f"{c}.{rep}"))
            timed = step_s[a.warmup:]
            tps = a.batch_size * a.seq_len / statistics.median(timed)
            results[c].append({"tokens_per_s": tps, "peak_rss": max(rss), "rss_by_rank": rss, "startup_s": startup,
                               "loss": loss})
            print(f"# repeat {rep} {c}: {tps:.0f} tok/s, peak RSS {max(rss) / 2**20:.0f} MiB "
                  f"(ranks {[r // 2**20 for r in rss]}), start-up {startup:.1f} s, loss {loss[0]:.3f} -> {loss[-1]:.3f}",
                  file=sys.stderr, flush=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    def cell(values, fmt):
        m = statistics.median(values)
        return f"{fmt(m)} ({fmt(min(values))}–{fmt(max(values))})"

    print(f"gpt-small --n-layer {a.n_layer} --seq-len {a.seq_len}, global batch {a.batch_size}, {a.ranks} ranks x "
          f"{a.threads} thread(s), {a.steps} steps ({a.warmup} warm-up), {a.repeats} interleaved repeats; "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; raw results in {out_dir}")
    print()
    print("| contender | tokens/s | peak RSS per rank (MiB, largest rank) | start-up (s) |")
    print("|---|---:|---:|---:|")
    for c in a.contenders:
        rows = results[c]
        print(f"| {c} | {cell([r['tokens_per_s'] for r in rows], lambda v: f'{v:,.0f}')} | "
              f"{cell([r['peak_rss'] / 2**20 for r in rows], lambda v: f'{v:,.0f}')} | "
              f"{cell([r['startup_s'] for r in rows], lambda v: f'{v:.1f}')} |")


if __name__ == "__main__":
    main(sys.argv[1:])

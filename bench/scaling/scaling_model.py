"""An alpha-beta model of Accel's step time, fitted to measured collectives,
checked against measured training steps, and used to predict where each
strategy stops scaling (issue 33; results in docs/benchmarks.md, "Scaling
model").

    python bench/scaling/scaling_model.py measure [--build build] [--out FILE]
    python bench/scaling/scaling_model.py report FILE

`measure` (about 5 minutes on the 2-core VM, needs mpirun; the TCP fit also
needs root for network namespaces) runs, and writes as JSON:
  - accel_collectives_bench (all_reduce, all_gather, reduce_scatter, f32,
    64 KiB to 32 MiB) over shared memory at 2, 4 and 8 ranks, and over TCP
    between two network namespaces, one rank in each
    (bench/collectives/between_namespaces.sh);
  - the compute alone: N single-rank accel-host runs at once (N = 1, 2, 4,
    8), so that the cores are shared as they are by N ranks;
  - the training step of ddp, fsdp (FULL_SHARD), ZeRO-3 and megatron tp 2 at
    2, 4 and 8 ranks, weak scaling (2 sequences per data-parallel rank).

`report` fits, per transport, t_step = alpha + beta * bytes to every ring
step of the measured collectives (an all_reduce of S bytes over n ranks is
2(n-1) steps of S/n, an all_gather or reduce_scatter n-1), then models a
step as compute + the collectives the strategy issues (no overlap assumed),
prints the model against the measured steps, and predicts 8 to 1,024 ranks
at gpt-small and a 7B shape for two machines: one built of this VM's
measured parts, and an assumed GPU cluster whose figures are written in the
table (not measured here).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

# The validation shape: small enough for 8 ranks on 2 cores, with enough
# parameters (5.3 M, 21 MB of fp32 gradients) per token for communication
# to be a visible part of the step.
SHAPE = dict(n_layer=4, n_embd=256, n_head=4, seq_len=64, vocab=8192)
SEQS_PER_RANK = 2
HOST_ARGS = ["--model", "gpt-tiny", "--n-layer", "4", "--n-embd", "256", "--n-head", "4", "--seq-len", "64",
             "--vocab-size", "8192", "--data", "synthetic", "--threads", "1", "--log-level", "warn",
             "--steps", "12"]
STRATEGIES = {
    "ddp": ["--plugin", "ddp"],
    "fsdp": ["--plugin", "fsdp"],
    "zero3": ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", "3"],
    "tp2": ["--plugin", "megatron", "--megatron.tp_degree", "2"],
}
RANKS = [2, 4, 8]
OPS = ["all_reduce", "all_gather", "reduce_scatter"]


# ------------------------------------------------------------- measuring --

def bench_table(text):
    """{op: [(bytes, seconds)]} from accel_collectives_bench's markdown."""
    tables, op = {}, None
    for line in text.splitlines():
        m = re.match(r"### (\w+), (\d+) ranks", line)
        if m:
            op = m.group(1)
            tables[op] = []
        elif op and re.match(r"\| \d+ \|", line):
            cells = [c.strip() for c in line.strip("|").split("|")]
            tables[op].append((int(cells[0]), float(cells[2]) * 1e-6))
    return tables


def step_ms(path, seqs, seq_len):
    rows = [json.loads(line) for line in open(path)][3:]  # the first steps warm up
    return statistics.median(seqs * seq_len / r["tokens_per_s"] * 1e3 for r in rows)


def measure(args):
    build = os.path.abspath(args.build)
    bench = os.path.join(build, "bin", "accel_collectives_bench")
    host = os.path.join(build, "bin", "accel-host")
    bench_args = ["--ops", ",".join(OPS), "--min-bytes", "64K", "--max-bytes", "32M", "--rounds", "3",
                  "--target-ms", "20"]
    out = {"shape": SHAPE, "seqs_per_rank": SEQS_PER_RANK, "collectives": {}, "compute_ms": {}, "step_ms": {}}
    for n in RANKS:
        text = subprocess.run(["mpirun", "-n", str(n), "--oversubscribe", bench, *bench_args], env=ENV,
                              capture_output=True, text=True, check=True).stdout
        out["collectives"][f"shm{n}"] = {"ranks": n, "ops": bench_table(text)}
    if os.geteuid() == 0 and shutil.which("ip"):
        text = subprocess.run([os.path.join(ROOT, "bench", "collectives", "between_namespaces.sh"), build,
                               *bench_args], env=ENV, capture_output=True, text=True, check=True).stdout
        out["collectives"]["tcp2"] = {"ranks": 2, "ops": bench_table(text)}
    with tempfile.TemporaryDirectory() as tmp:
        for n in [1, *RANKS]:
            paths = [os.path.join(tmp, f"c{n}_{i}.jsonl") for i in range(n)]
            procs = [subprocess.Popen([host, *HOST_ARGS, "--batch-size", str(SEQS_PER_RANK), "--metrics-file", p],
                                      env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for p in paths]
            if any(p.wait() for p in procs):
                sys.exit(f"compute run with {n} at once failed")
            out["compute_ms"][str(n)] = statistics.mean(step_ms(p, SEQS_PER_RANK, SHAPE["seq_len"]) for p in paths)
        for name, flags in STRATEGIES.items():
            for n in RANKS:
                path = os.path.join(tmp, f"{name}{n}.jsonl")
                data_ranks = n // 2 if name == "tp2" else n
                subprocess.run(["mpirun", "-n", str(n), "--oversubscribe", host, *HOST_ARGS, *flags,
                                "--batch-size", str(SEQS_PER_RANK * data_ranks), "--metrics-file", path],
                               env=ENV, check=True, capture_output=True)
                out["step_ms"][f"{name}@{n}"] = step_ms(path, SEQS_PER_RANK * data_ranks, SHAPE["seq_len"])
                print(name, n, round(out["step_ms"][f"{name}@{n}"], 1), file=sys.stderr)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.out}", file=sys.stderr)


# ------------------------------------------------------------ the model --

def ring_steps(op, n):
    return 2 * (n - 1) if op == "all_reduce" else n - 1


def fit_alpha_beta(collectives):
    """Least squares of t / steps = alpha + beta * (S / n) over every size
    of every op from 256 KiB (smaller ones sit on the MPI library's own
    algorithms, not the ring)."""
    xs, ys = [], []
    n = collectives["ranks"]
    for op, rows in collectives["ops"].items():
        for size, t in rows:
            if size >= 256 * 1024:
                xs.append(size / n)
                ys.append(t / ring_steps(op, n))
    mx, my = statistics.mean(xs), statistics.mean(ys)
    beta = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    alpha = max(my - beta * mx, 0.0)
    return {"alpha_s": alpha, "beta_s_per_byte": beta}


def ring(op, size_bytes, n, link):
    """Seconds of a ring collective of `size_bytes` (the full buffer) over n ranks."""
    if n < 2 or size_bytes <= 0:
        return 0.0
    return ring_steps(op, n) * (link["alpha_s"] + size_bytes / n * link["beta_s_per_byte"])


def gpt_units(n_layer, n_embd, vocab, ffn=None, glu=False):
    """Parameters per unit (embedding, then each block), as the sharding
    plugins gather them; a tied head adds nothing."""
    ffn = ffn or 4 * n_embd
    block = 4 * n_embd * n_embd + (3 if glu else 2) * n_embd * ffn
    return [vocab * n_embd] + [block] * n_layer


def comm_seconds(strategy, units, tokens_per_rank, n_embd, n_layer, n, per_node, intra, inter,
                 hierarchical=True):
    """The collectives one step issues, in seconds (none overlapped).
    `per_node` ranks share a node; a group inside one node uses `intra`, a
    group spanning nodes is paced by its slowest link, `inter`."""
    nodes = max(1, n // per_node)
    link = intra if nodes == 1 else inter
    grad = 4 * sum(units)  # fp32 gradients and parameters: Accel's master copies
    if strategy == "ddp":
        buckets = split_buckets([4 * u for u in reversed(units)], 25 << 20)
        if nodes > 1 and hierarchical and per_node > 1:
            return sum(ring("reduce_scatter", b, per_node, intra) + ring("all_reduce", b / per_node, nodes, inter)
                       + ring("all_gather", b, per_node, intra) for b in buckets)
        return sum(ring("all_reduce", b, n, link) for b in buckets)
    if strategy in ("fsdp", "zero3"):
        # Each unit gathered for forward and again for backward, its
        # gradients reduce-scattered.
        return sum(2 * ring("all_gather", 4 * u, n, link) + ring("reduce_scatter", 4 * u, n, link) for u in units)
    if strategy == "zero2":
        return ring("reduce_scatter", grad, n, link) + ring("all_gather", grad, n, link)
    if strategy == "hybrid":
        inside = sum(2 * ring("all_gather", 4 * u, per_node, intra) + ring("reduce_scatter", 4 * u, per_node, intra)
                     for u in units)
        return inside + ring("all_reduce", grad / per_node, nodes, inter)
    if strategy.startswith("tp"):
        t = int(strategy[2:]) if strategy[2:] else per_node
        # Per block, two all_reduces of the activations forward and two
        # backward inside the tensor group (on one node); the gradients of
        # each rank's 1/t slice are all-reduced over the n/t data ranks.
        act = 4 * tokens_per_rank * n_embd
        tensor = 4 * n_layer * ring("all_reduce", act, t, intra)
        data = n // t
        data_link = intra if data * t <= per_node else inter
        return tensor + ring("all_reduce", grad / t, data, data_link)
    raise ValueError(strategy)


def split_buckets(sizes, cap):
    buckets, current = [], 0
    for s in sizes:
        if current and current + s > cap:
            buckets.append(current)
            current = 0
        current += s
    if current:
        buckets.append(current)
    return buckets


def flops_per_token(units, n_layer, n_embd, seq_len):
    # 6 per parameter (forward and backward) plus attention's scores and
    # values: 12 x layers x width x sequence length (Chinchilla's appendix).
    return 6 * sum(units) + 12 * n_layer * n_embd * seq_len


# ----------------------------------------------------------- reporting --

def report(args):
    data = json.load(open(args.results))
    fits = {name: fit_alpha_beta(c) for name, c in data["collectives"].items()}
    print("## Fitted links (seconds per ring step = alpha + beta x bytes)\n")
    print("| transport | ranks | alpha (us) | 1/beta (GB/s per step) |")
    print("|---|---:|---:|---:|")
    for name, f in fits.items():
        print(f"| {name} | {data['collectives'][name]['ranks']} | {f['alpha_s'] * 1e6:.1f} | "
              f"{1 / f['beta_s_per_byte'] / 1e9:.2f} |")

    shape = data["shape"]
    units = gpt_units(shape["n_layer"], shape["n_embd"], shape["vocab"])
    tokens = data["seqs_per_rank"] * shape["seq_len"]
    print("\n## The model against measured steps (this VM, one node, ranks sharing 2 cores)\n")
    print("| strategy | ranks | compute alone (ms) | modelled comm (ms) | model (ms) | measured (ms) | error |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for key, measured in data["step_ms"].items():
        strategy, n = key.split("@")
        n = int(n)
        link = fits[f"shm{n}"]
        compute = data["compute_ms"][str(n)]
        if strategy == "tp2":
            compute = data["compute_ms"][str(n)] / 2  # each rank computes half of its group's sequences
        comm = comm_seconds(strategy, units, tokens, shape["n_embd"], shape["n_layer"], n, n, link, link) * 1e3
        model = compute + comm
        error = model / measured - 1
        worst = max(worst, abs(error))
        print(f"| {strategy} | {n} | {compute:.1f} | {comm:.1f} | {model:.1f} | {measured:.1f} | {error:+.0%} |")
    print(f"\nLargest error: {worst:.0%}")

    # Compute rate of one rank of this VM (one core, fp32), from the
    # single-rank run of the validation shape.
    vm_flops = flops_per_token(units, shape["n_layer"], shape["n_embd"], shape["seq_len"]) * tokens / (
        data["compute_ms"]["1"] * 1e-3)
    machines = {
        "this VM's parts (measured)": dict(
            flops=vm_flops, per_node=2, intra=fits["shm2"], inter=fits.get("tcp2", fits["shm2"]),
            note=f"{vm_flops / 1e9:.1f} GFLOP/s per rank (one core, fp32, measured), 2 ranks per node, "
                 "shared memory inside a node and TCP between namespaces across (both fitted above)"),
        "GPU cluster (assumed, not measured)": dict(
            flops=400e12, per_node=8, intra={"alpha_s": 10e-6, "beta_s_per_byte": 1 / 150e9},
            inter={"alpha_s": 20e-6, "beta_s_per_byte": 1 / 40e9},
            note="400 TFLOP/s per GPU (an H100's bf16 dense peak at 40%), 8 GPUs per node, "
                 "NVLink 10 us + 150 GB/s per ring step, InfiniBand 20 us + 40 GB/s (400 Gb/s per GPU)"),
    }
    models = {
        "gpt-small": dict(units=gpt_units(12, 768, 50257), n_layer=12, n_embd=768, seq_len=1024),
        "7B (Llama-2 shape)": dict(units=gpt_units(32, 4096, 32000, ffn=11008, glu=True), n_layer=32,
                                   n_embd=4096, seq_len=4096),
    }
    for machine, m in machines.items():
        for model_name, shape in models.items():
            tokens = 4 * shape["seq_len"]
            compute = flops_per_token(shape["units"], shape["n_layer"], shape["n_embd"], shape["seq_len"]) * \
                tokens / m["flops"]
            print(f"\n## {model_name} on {machine}\n")
            print(f"{m['note']}; {sum(shape['units']) / 1e6:.0f} M parameters, {tokens} tokens per "
                  f"data-parallel rank, compute {compute * 1e3:.1f} ms per step.\n")
            strategies = ["ddp", "zero2", "fsdp", "hybrid", f"tp{m['per_node']}"]
            print("| ranks | " + " | ".join(f"{s} step (ms) / comm" for s in strategies) + " |")
            print("|---:|" + "---:|" * len(strategies))
            stops = {}
            for n in [8, 16, 32, 64, 128, 256, 512, 1024]:
                cells = []
                for s in strategies:
                    c = compute / (m["per_node"] if s.startswith("tp") else 1)
                    comm = comm_seconds(s, shape["units"], tokens, shape["n_embd"], shape["n_layer"], n,
                                        m["per_node"], m["intra"], m["inter"])
                    cells.append(f"{(c + comm) * 1e3:.0f} / {comm / (c + comm):.0%}")
                    if comm > c and s not in stops:
                        stops[s] = n
                print(f"| {n} | " + " | ".join(cells) + " |")
            print("\nCommunication over half the step (where the strategy stops scaling): " +
                  ", ".join(f"{s} from {stops[s]} ranks" if s in stops else f"{s} not up to 1,024"
                            for s in strategies) + ".")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--build", default=os.path.join(ROOT, "build"))
    m.add_argument("--out", default="scaling.json")
    r = sub.add_parser("report")
    r.add_argument("results")
    args = parser.parse_args()
    measure(args) if args.command == "measure" else report(args)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""FSDP memory, communication and speed on this machine (issue 5's proof).

Three tables, each printed as Markdown for docs/benchmarks.md:

  memory  gpt-small at world sizes 1, 2, 4 (FULL_SHARD): rank 0's peak
          accounted bytes of parameters, gradients and optimizer state
          (metrics' memory_peak_bytes, the host's memory ledger, which every
          materialised unit and every plugin buffer goes through) against
          the theory 16 P / N plus the full units alive at once.
  comm    gpt-small: collective bytes per step (metrics' comm_bytes: the full
          tensor each collective works on) against 3 x parameter bytes for
          FULL_SHARD and 2 x for SHARD_GRAD_OP.
  speed   a 6-block, 256-wide GPT (5.6 M parameters): median step time of
          ddp and fsdp (transformer_based_wrap; without and with forward +
          backward prefetch; SHARD_GRAD_OP) at the same world size.

Usage: .venv/bin/python bench/fsdp_bench.py [--build build] [--tables memory,comm,speed]
Every run uses --threads 1 per rank and mpirun --oversubscribe, so timings on
this 2-core machine measure the strategy's overheads, not a GPU cluster.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}

# gpt-small (GPT-2 124M): the parameter count and the units FSDP keeps full
# at once. The embedding group (wte, wpe and the tied head's ln_f) stays
# gathered from the embedding's forward to the head's; one block is gathered
# at a time, and a second one in flight under prefetch.
# The runs use --seq-len 64 (wpe has 64 rows instead of 1024) to keep
# activations small beside the state being measured.
SEQ_LEN = 64
GPT_SMALL_PARAMS = 124_439_808 - (1024 - SEQ_LEN) * 768
GPT_SMALL_EMBED_GROUP = 50257 * 768 + SEQ_LEN * 768 + 2 * 768
GPT_SMALL_BLOCK = 12 * 768 * 768 + 13 * 768


def run(build, world, args, workdir, tag):
    metrics = os.path.join(workdir, tag + ".jsonl")
    cmd = [os.path.join(build, "bin", "accel-host"), "--metrics-file", metrics, "--threads", "1",
           "--log-level", "warn"] + args
    if world > 1:
        cmd = ["mpirun", "-n", str(world), "--bind-to", "none"] + cmd
    env = dict(os.environ, **MPI_ENV)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    with open(metrics) as f:
        return [json.loads(line) for line in f if line.strip()]


def padded_shard(numel, world):
    return -(-numel // world)


def memory_table(build, workdir):
    small = ["--model", "gpt-small", "--seq-len", str(SEQ_LEN), "--batch-size", "4", "--steps", "2"]
    print("| world | params peak | grads peak | optimizer peak | sum | theory | sum / theory |")
    print("|---|---|---|---|---|---|---|")
    for world in (1, 2, 4):
        lines = run(build, world, small + ["--plugin", "fsdp", "--fsdp.auto_wrap_policy", "transformer_based_wrap"],
                    workdir, f"mem{world}")
        peak = lines[-1]["memory_peak_bytes"]
        total = peak["params"] + peak["grads"] + peak["optimizer"]
        shard = padded_shard(GPT_SMALL_PARAMS, world)
        # 4 B fp32 master + 4 B grad shard + 8 B AdamW moments per owned
        # element, plus the full fp32 params and grads of the embedding group
        # and one block, alive together in backward.
        in_flight = 2 * 4 * (GPT_SMALL_EMBED_GROUP + GPT_SMALL_BLOCK)
        theory = 16 * shard + in_flight
        mib = lambda b: f"{b / 2**20:.0f} MiB"
        print(f"| {world} | {mib(peak['params'])} | {mib(peak['grads'])} | {mib(peak['optimizer'])} | "
              f"{mib(total)} | {mib(theory)} | {total / theory:.3f} |")


def comm_table(build, workdir):
    small = ["--model", "gpt-small", "--seq-len", str(SEQ_LEN), "--batch-size", "4", "--steps", "2",
             "--fsdp.auto_wrap_policy", "transformer_based_wrap"]
    param_bytes = 4 * GPT_SMALL_PARAMS
    # FULL_SHARD gathers every group in forward and again in backward, and
    # reduce-scatters every gradient: 3 P. The embedding group is the last
    # one forward finishes (the head is tied to it) and the first backward
    # needs, so it is kept rather than released and gathered again (FSDP2
    # does the same for its root): 3 P - E. SHARD_GRAD_OP keeps every group
    # from forward to backward: 2 P.
    embed_bytes = 4 * GPT_SMALL_EMBED_GROUP
    print("| strategy | world | comm bytes / step | x parameter bytes | theory | measured / theory |")
    print("|---|---|---|---|---|---|")
    for strategy, theory, label in (("FULL_SHARD", 3 * param_bytes - embed_bytes, "3 P - E"),
                                    ("SHARD_GRAD_OP", 2 * param_bytes, "2 P")):
        lines = run(build, 4, small + ["--plugin", "fsdp", "--fsdp.sharding_strategy", strategy], workdir,
                    f"comm-{strategy}")
        per_step = lines[-1]["comm_bytes"]
        print(f"| {strategy} | 4 | {per_step / 2**20:.0f} MiB | {per_step / param_bytes:.3f} | "
              f"{label} = {theory / param_bytes:.3f} P | {per_step / theory:.4f} |")


def speed_table(build, workdir, repeats):
    # A 6-block model of 5.6 M parameters: big enough that gathers and
    # reduce-scatters show, small enough to start in a second.
    model = ["--model", "gpt-tiny", "--n-layer", "6", "--n-embd", "256", "--n-head", "4", "--vocab-size", "4096",
             "--seq-len", "128", "--batch-size", "8", "--steps", "25"]
    fsdp = ["--plugin", "fsdp", "--fsdp.auto_wrap_policy", "transformer_based_wrap"]
    contenders = [
        ("ddp", ["--plugin", "ddp"]),
        ("fsdp FULL_SHARD", fsdp),
        ("fsdp FULL_SHARD + prefetch", fsdp + ["--fsdp.forward_prefetch", "true",
                                               "--fsdp.backward_prefetch", "BACKWARD_PRE"]),
        ("fsdp SHARD_GRAD_OP", fsdp + ["--fsdp.sharding_strategy", "SHARD_GRAD_OP"]),
    ]
    print("| world | contender | median step (ms) |")
    print("|---|---|---|")
    for world in (2, 4):
        times = {name: [] for name, _ in contenders}
        for repeat in range(repeats):
            for name, extra in contenders[repeat % len(contenders):] + contenders[:repeat % len(contenders)]:
                lines = run(build, world, model + extra, workdir, f"speed{world}")
                tokens = 8 * 128
                steps = [tokens / line["tokens_per_s"] * 1000 for line in lines[5:]]
                times[name].append(statistics.median(steps))
        for name, _ in contenders:
            print(f"| {world} | {name} | {statistics.median(times[name]):.1f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--tables", default="memory,comm,speed")
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="accel-fsdp-bench.") as workdir:
        for table in opts.tables.split(","):
            print(f"\n### {table}\n")
            {"memory": lambda: memory_table(opts.build, workdir),
             "comm": lambda: comm_table(opts.build, workdir),
             "speed": lambda: speed_table(opts.build, workdir, opts.repeats)}[table]()


if __name__ == "__main__":
    main()

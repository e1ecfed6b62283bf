#!/usr/bin/env python3
"""deepspeed_zero's stages at N = 1, 2, 4 ranks beside ddp and fsdp at N = 2
(issue 11's memory and speed tables): the host's per-category memory peaks,
the ledger's total at its peak, the kernel's peak RSS of the largest rank
(/usr/bin/time %M), the communicated bytes per step and the median step
time after the first. One repeat per row: run it on an idle machine.

Against the theory (fp32 AdamW, 16 bytes per parameter P at N = 1): the
stage's formula (0: 16P, 1: 8P + 8P/N, 2: 4P + 12P/N, 3: 16P/N), what the
model states hold beyond it at the step's peak ("in flight": gradients
between a unit's backward and its reduce-scatter, gathered parameters;
the ledger's model states at its sample of highest RSS, less the formula),
and the model states as the process holds them at its peak: the peak RSS
less ZeRO-0's at the same N, plus ZeRO-0's 16P. Both runs hold the same
activations, runtime and libraries at their peaks (the loss's backward,
before any gradient is reduced); what could differ is the collectives'
scratch, and since the rings' receive scratch is a window of segments
(host/comm/ring_collectives.cpp) it is a few MiB in every run (the
ledger's comm_buffers at the peak, shown). ZeRO-0 holds exactly 16P of
model states. ZeRO-3 runs twice: with DeepSpeed's defaults (reuse
distance 1e9: every unit stays gathered at this size) and with
stage3_max_reuse_distance 0 (released after each use, FULL_SHARD's
schedule).

  python3 bench/zero_stages.py [BUILD] [--preload LIB] [--malloc-conf CONF]   (default: build)

--preload runs every rank with LD_PRELOAD=LIB (e.g. libjemalloc.so.2): an
allocator that returns freed memory promptly makes peak RSS follow the
live bytes more closely than glibc's kept free memory does. --malloc-conf
passes MALLOC_CONF=CONF to every rank: with jemalloc,
dirty_decay_ms:0,muzzy_decay_ms:0 purges freed pages at once. Without it
jemalloc purges on a 10 s decay timer, so the RSS sampled at a step's end
carries however many freed pages the timer has not yet returned: 12 to
53 MiB from one step to the next of one 4-rank run, 3 to 11 % of ZeRO-3's
472 MiB, which moved the RSS-implied column by as much (docs/benchmarks.md).
--from DIR tabulates an earlier run's files (the directory it printed) again.

A second table compares at a step's end, after the optimizer step, when no
gradient or gathered parameter is in flight: the ledger's model states,
and the model states implied by rank 0's RSS at that moment (its
memory_ledger.rss, less ZeRO-0's, plus 16P), against the formula.
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
REUSE0 = os.path.join(tempfile.mkdtemp(prefix="accel-zero-config-"), "zero3_reuse0.json")
with open(REUSE0, "w") as f:
    json.dump({"zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0}}, f)
STRATS["ZeRO-3 reuse 0"] = f"--plugin deepspeed_zero --deepspeed_zero.hf_ds_config {REUSE0}"
FORMULA = {"ZeRO-0": lambda p, n: 16 * p, "ZeRO-1": lambda p, n: 8 * p + 8 * p / n,
           "ZeRO-2": lambda p, n: 4 * p + 12 * p / n, "ZeRO-3": lambda p, n: 16 * p / n,
           "ZeRO-3 reuse 0": lambda p, n: 16 * p / n}
P = 123702528  # gpt-small's parameters at --seq-len 64
STRATS["ddp"] = "--plugin ddp"
STRATS["fsdp FULL_SHARD"] = "--plugin fsdp --fsdp.auto_wrap_policy transformer_based_wrap"
MiB = 2**20


def main():
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(__doc__)
        return
    preload = []
    if "--preload" in args:
        i = args.index("--preload")
        preload = ["-x", f"LD_PRELOAD={args[i + 1]}"]
        del args[i:i + 2]
    if "--malloc-conf" in args:
        i = args.index("--malloc-conf")
        preload += ["-x", f"MALLOC_CONF={args[i + 1]}"]
        del args[i:i + 2]
    rerun = "--from" not in args
    if not rerun:
        i = args.index("--from")
        work = args[i + 1]
        del args[i:i + 2]
    else:
        work = tempfile.mkdtemp(prefix="accel-zero-stages-")
        print(f"(files in {work})")
    build = args[0] if args else os.path.join(ROOT, "build")
    host = os.path.join(build, "bin", "accel-host")
    plan = [(n, s) for n in (1, 2, 4) for s in STRATS if not (s in ("ddp", "fsdp FULL_SHARD") and n != 2)]
    print("| N | strategy | params | grads | optimizer | formula | in flight | formula + in flight | "
          "comm scratch at peak | peak RSS (largest rank) | model states by RSS | vs formula + in flight | "
          "comm / step | median step (s) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    zero0_rss, zero0_end_rss, at_end = {}, {}, []
    for n, s in plan:
        out = os.path.join(work, f"zt_{n}_{s.replace(' ', '_')}")
        m = out + ".jsonl"
        inner = f"exec /usr/bin/time -f %M -o {out}.rss.$OMPI_COMM_WORLD_RANK {host} {BASE} {STRATS[s]} --metrics-file {m}"
        if rerun:
            subprocess.run(["mpirun", "-n", str(n), "--bind-to", "none", *preload, "sh", "-c", inner], env=ENV, check=True,
                           capture_output=True)
        with open(m) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        last = rows[-1]
        peak = last["memory_peak_bytes"]
        # The ledger at the sample of highest RSS, of the step that peaked highest.
        at_peak = max((r["memory_ledger_peak"] for r in rows if "memory_ledger_peak" in r),
                      key=lambda p: p["peak_rss"])
        rss = max(int(open(f"{out}.rss.{r}").read().split()[-1]) for r in range(n)) * 1024
        step = statistics.median([4 * 64 / r["tokens_per_s"] for r in rows[1:]])
        comm = last.get("comm_bytes", 0)
        states = at_peak["model_states"]
        if s == "ZeRO-0":
            zero0_rss[n] = rss
        formula = FORMULA[s](P, n) if s in FORMULA else None
        by_rss = rss - zero0_rss[n] + 16 * P if s in FORMULA and n in zero0_rss else None
        vs = f"{(by_rss - states) / states:+.1%}" if by_rss else ""
        cells = [f"{peak['params'] // MiB:,}", f"{peak['grads'] // MiB:,}", f"{peak['optimizer'] // MiB:,}",
                 f"{formula / MiB:,.0f}" if formula else "", f"{(states - formula) / MiB:,.0f}" if formula else "",
                 f"{states / MiB:,.0f}", f"{at_peak['comm_buffers'] / MiB:,.1f}", f"{rss // MiB:,}",
                 f"{by_rss / MiB:,.0f}" if by_rss else "", vs, f"{comm // MiB:,}", f"{step:.2f}"]
        print(f"| {n} | {s} | " + " | ".join(cells) + " |", flush=True)
        end = last["memory_ledger"]
        if s == "ZeRO-0":
            zero0_end_rss[n] = end["rss"]
        if formula:
            at_end.append((n, s, formula, end["model_states"], end["rss"] - zero0_end_rss[n] + 16 * P))
    print()
    print("| N | strategy | formula | ledger model states at step end | vs formula | implied by RSS at step end | "
          "vs formula |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n, s, formula, ledger, implied in at_end:
        print(f"| {n} | {s} | {formula / MiB:,.0f} | {ledger / MiB:,.0f} | {(ledger - formula) / formula:+.1%} | "
              f"{implied / MiB:,.0f} | {(implied - formula) / formula:+.1%} |")


if __name__ == "__main__":
    main()

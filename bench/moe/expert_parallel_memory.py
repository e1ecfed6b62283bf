#!/usr/bin/env python3
"""Peak resident memory per rank of a mixture of experts under expert
parallelism: the same model on the same 4 ranks at ep 1 (every rank holds
every expert: plain data parallelism), 2 and 4 (each rank holds E / ep
experts and exchanges tokens with all_to_all_v).

--strategy megatron (megatron's ep_degree, nothing partitioned): what
falls as 1 / ep is each rank's expert parameters with their gradients and
AdamW moments (fp32: 16 bytes a parameter); the rest of the model
(embeddings, attention, routers) stays replicated.

--strategy zero3 (deepspeed_zero stage 3 with ep_size): every unit is
partitioned already, the blocks over the ranks holding the same experts
(4 / ep of them), so a rank's expert state is E / 4 experts' at every ep;
what falls is what ZeRO-3 gathers for each forward and backward (the
experts a rank does not hold are never gathered), and with it the peak.

The table prints the measured peak (rank 0's peak_mem_bytes, the process's
resident memory) beside the arithmetic, and the tokens/s and all-to-all
(and, under zero3, all-gather) bytes each step.

    python3 bench/moe/expert_parallel_memory.py --host build/bin/accel-host [--strategy zero3]

Prints a markdown table (docs/benchmarks.md, "Expert parallelism").
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile

SHAPE = dict(layers=4, width=512, heads=8, kv_heads=4, ffn=1024, experts=8, top_k=2, vocab=8192, seq=128)
RANKS, BATCH, STEPS = 4, 8, 4


STRATEGIES = {
    "megatron": lambda ep: ["--plugin", "megatron", "--megatron.ep_degree", ep],
    "zero3": lambda ep: ["--plugin", "deepspeed_zero", "--deepspeed_zero.zero_stage", 3,
                         "--deepspeed_zero.ep_size", ep],
}


def run(host, strategy, ep, tmp):
    s = SHAPE
    metrics = os.path.join(tmp, f"ep{ep}.jsonl")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [shutil.which("mpirun"), "-n", str(RANKS), "--oversubscribe", "--bind-to", "none", host,
           "--model", "moe-tiny", "--n-layer", s["layers"], "--n-embd", s["width"], "--n-head", s["heads"],
           "--n-kv-head", s["kv_heads"], "--ffn-size", s["ffn"], "--n-experts", s["experts"],
           "--experts-per-token", s["top_k"], "--vocab-size", s["vocab"], "--seq-len", s["seq"],
           "--data", "synthetic", "--steps", STEPS, "--batch-size", BATCH, "--threads", 1,
           *STRATEGIES[strategy](ep), "--metrics-file", metrics, "--log-level", "warn"]
    subprocess.run([str(c) for c in cmd], check=True, env=env)
    with open(metrics) as f:
        rows = [json.loads(line) for line in f]
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="build/bin/accel-host")
    parser.add_argument("--strategy", choices=sorted(STRATEGIES), default="megatron")
    args = parser.parse_args()
    zero3 = args.strategy == "zero3"
    s = SHAPE
    expert_params = s["layers"] * s["experts"] * 3 * s["width"] * s["ffn"]
    print(f"{RANKS} ranks, {s['layers']} layers x {s['experts']} experts (width {s['width']}, ffn {s['ffn']}), "
          f"top-{s['top_k']}, batch {BATCH} x {s['seq']}, {STEPS} steps, fp32, {args.strategy}\n")
    print("| ep | experts per rank | expert params + grads + AdamW per rank (MiB) | peak RSS rank 0 (MiB) "
          "| tokens/s | all-to-all bytes/step (rank 0) |" + (" all-gather bytes/step (rank 0) |" if zero3 else ""))
    print("|---:|---:|---:|---:|---:|---:|" + ("---:|" if zero3 else ""))
    with tempfile.TemporaryDirectory() as tmp:
        base = None
        for ep in (1, 2, 4):
            rows = run(args.host, args.strategy, ep, tmp)
            peak = max(r["peak_mem_bytes"] for r in rows) / 2**20
            # Under ZeRO-3 the E / ep experts a rank holds partition over the
            # 4 / ep ranks holding the same ones: E / 4 experts' state each.
            expert_mib = expert_params / (RANKS if zero3 else ep) * 16 / 2**20
            speed = statistics.median(r["tokens_per_s"] for r in rows[1:])
            moved = rows[-1].get("host.expert_parallel_bytes", 0)
            base = base or peak
            gathered = f" {rows[-1]['deepspeed_zero.gather_bytes']:,.0f} |" if zero3 else ""
            print(f"| {ep} | {s['experts'] // ep} | {expert_mib:,.0f} | {peak:,.0f} ({peak - base:+,.0f}) "
                  f"| {speed:,.0f} | {moved:,.0f} |" + gathered)


if __name__ == "__main__":
    main()

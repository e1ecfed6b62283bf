#!/usr/bin/env python3
"""A mixture of experts trained by accel-host against transformers'
MixtralForCausalLM (PyTorch eager) on the same shape, the same card (this
CPU) and the same thread count, side by side; and the dense Llama of the
same active width for scale.

Each contender is its own process (peak resident memory is the process's):
accel-host reads its tokens/s and peak_mem_bytes from --metrics-file;
transformers' loop times each step with perf_counter (zero_grad, forward,
cross-entropy, backward, clip 1.0, AdamW) and reads ru_maxrss. Median step
time after WARMUP steps; the contenders interleave over REPEATS.

    python3 bench/moe/moe_vs_transformers.py --host build/bin/accel-host

Prints a markdown table (docs/benchmarks.md).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

SHAPE = dict(layers=4, width=512, heads=8, kv_heads=4, ffn=1024, experts=8, top_k=2, vocab=8192, seq=256)


def transformers_step_times(args):
    """Runs in a child process: MixtralForCausalLM (or Llama, dense) eager."""
    import torch
    import transformers
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    s = SHAPE
    common = dict(vocab_size=s["vocab"], hidden_size=s["width"], num_hidden_layers=s["layers"],
                  num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                  max_position_embeddings=s["seq"], rms_norm_eps=1e-5, tie_word_embeddings=False)
    if args.dense:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(intermediate_size=s["ffn"] * s["top_k"],
                                                                        **common))
    else:
        model = transformers.MixtralForCausalLM(transformers.MixtralConfig(
            intermediate_size=s["ffn"], num_local_experts=s["experts"], num_experts_per_tok=s["top_k"], **common))
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95))
    times = []
    for _ in range(args.steps):
        x = torch.randint(0, s["vocab"], (args.batch, s["seq"] + 1))
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"times": times, "peak": peak}))


def run_transformers(args, dense):
    cmd = [sys.executable, __file__, "--child", "--threads", str(args.threads), "--steps", str(args.steps),
           "--batch", str(args.batch)] + (["--dense"] if dense else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    step = statistics.median(result["times"][args.warmup:])
    return args.batch * SHAPE["seq"] / step, result["peak"]


def run_host(args, dense):
    s = SHAPE
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        model = ["--model", "llama-tiny", "--ffn-size", s["ffn"] * s["top_k"]] if dense else \
                ["--model", "moe-tiny", "--ffn-size", s["ffn"], "--n-experts", s["experts"],
                 "--experts-per-token", s["top_k"]]
        cmd = [args.host, *map(str, model), "--n-layer", str(s["layers"]), "--n-embd", str(s["width"]),
               "--n-head", str(s["heads"]), "--n-kv-head", str(s["kv_heads"]), "--vocab-size", str(s["vocab"]),
               "--seq-len", str(s["seq"]), "--batch-size", str(args.batch), "--steps", str(args.steps),
               "--threads", str(args.threads), "--lr", "1e-4", "--log-level", "warn", "--metrics-file", metrics]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        rows = [json.loads(line) for line in open(metrics)]
    tokens = statistics.median(r["tokens_per_s"] for r in rows[args.warmup:])
    return tokens, max(r["peak_mem_bytes"] for r in rows)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="build/bin/accel-host")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", action="store_true")
    p.add_argument("--dense", action="store_true")
    args = p.parse_args()
    if args.child:
        return transformers_step_times(args)
    contenders = [("accel-host, moe", lambda: run_host(args, False)),
                  ("transformers MixtralForCausalLM, eager", lambda: run_transformers(args, False)),
                  ("accel-host, dense llama (ffn = k x expert width)", lambda: run_host(args, True)),
                  ("transformers LlamaForCausalLM, eager, same dense shape", lambda: run_transformers(args, True))]
    results = {name: [] for name, _ in contenders}
    for repeat in range(args.repeats):
        for name, run in contenders[repeat % len(contenders):] + contenders[:repeat % len(contenders)]:
            results[name].append(run())
    print(f"shape {SHAPE}, batch {args.batch} x {SHAPE['seq']}, {args.threads} threads, "
          f"median of steps {args.warmup + 1}-{args.steps}, {args.repeats} repeats, load {os.getloadavg()[0]:.2f}\n")
    print("| contender | tokens/s (median of repeats) | range | peak resident memory |")
    print("|---|---:|---:|---:|")
    for name, _ in contenders:
        tokens = [t for t, _ in results[name]]
        peak = max(m for _, m in results[name])
        print(f"| {name} | {statistics.median(tokens):,.0f} | {min(tokens):,.0f}-{max(tokens):,.0f} | "
              f"{peak / 2**20:,.0f} MiB |")


if __name__ == "__main__":
    main()

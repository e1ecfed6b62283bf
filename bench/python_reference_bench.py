"""Training throughput of the Python PyTorch reference (tests/python/gpt_reference.py):
the third contender of bench/throughput.sh, beside accel-host and the plain
LibTorch loop (bench/plain_libtorch_gpt.cpp), with the same command line and
the same one-line JSON output.

One timed step: zero_grad, forward + loss, backward, clip to norm 1.0, AdamW
step (two parameter groups, ref.make_optimizer), read the loss. Every step's
random tokens are made before the clock starts. tokens_per_s and ms_per_step
are MEDIANS over the timed steps; --warmup-steps run first, untimed.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import gpt_reference as ref  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [("n-layer", 2), ("n-head", 4), ("n-embd", 64), ("seq-len", 64), ("vocab-size", 256),
                          ("batch-size", 8), ("steps", 20), ("warmup-steps", 3), ("threads", 0), ("seed", 1234)]:
        p.add_argument("--" + name, type=int, default=default)
    for name, default in [("lr", 1e-3), ("weight-decay", 0.1), ("grad-clip", 1.0)]:
        p.add_argument("--" + name, type=float, default=default)
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup_steps < 0 or args.batch_size < 1 or args.n_embd % args.n_head:
        p.error("need --steps >= 1, --warmup-steps >= 0, --batch-size >= 1, n_embd % n_head == 0")
    return args


def gpt2_init(model):
    """GPT-2's normal(0, 0.02) weights and zero biases, as the other two use."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
            elif not name.split(".")[-2].startswith("ln_"):
                p.zero_()


def main(argv):
    a = parse_args(argv)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = ref.GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size)
    gpt2_init(model)
    model.train()
    opt = ref.make_optimizer(model, a.lr, (0.9, 0.95), 1e-8, a.weight_decay)
    params = list(model.parameters())

    total = a.warmup_steps + a.steps
    windows = torch.randint(a.vocab_size, (total, a.batch_size, a.seq_len + 1), dtype=torch.long)
    inputs = [w[:, :-1].contiguous() for w in windows]
    targets = [w[:, 1:].contiguous() for w in windows]

    seconds = []
    loss = 0.0
    for s in range(total):
        start = time.perf_counter()
        opt.zero_grad()
        loss_tensor = model(inputs[s], targets[s])
        loss_tensor.backward()
        torch.nn.utils.clip_grad_norm_(params, a.grad_clip)
        opt.step()
        loss = loss_tensor.item()
        elapsed = time.perf_counter() - start
        if s >= a.warmup_steps:
            seconds.append(elapsed)

    tokens_per_step = a.batch_size * a.seq_len
    median_s = statistics.median(seconds)
    mean_s = statistics.fmean(seconds)
    print(json.dumps({
        "contender": "python-reference", "statistic": "median",
        "tokens_per_s": round(tokens_per_step / median_s, 3), "ms_per_step": round(1e3 * median_s, 4),
        "mean_tokens_per_s": round(tokens_per_step / mean_s, 3), "mean_ms_per_step": round(1e3 * mean_s, 4),
        "timed_steps": a.steps, "warmup_steps": a.warmup_steps, "batch_size": a.batch_size,
        "seq_len": a.seq_len, "threads": torch.get_num_threads(),
        "parameters": sum(p.numel() for p in params), "final_loss": round(loss, 6),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

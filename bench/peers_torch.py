#!/usr/bin/env python3
"""One rank of PyTorch's side of bench/peers.sh, launched by torchrun: eager
DDP, or FSDP2 (`fully_shard` on every block, then on the root), on CPU with
the gloo backend, the same GPT-2 as accel-host (tests/python/gpt_reference.py:
tanh GELU, tied embeddings, scaled_dot_product_attention) and the same step:
GPT-2's initialisation; zero the gradients, forward + mean cross-entropy, backward, clip the global
norm to --grad-clip, AdamW (betas 0.9/0.95, eps 1e-8, weight decay on the
>= 2-D parameters only), read the loss.

Every rank writes one JSON line to --out-dir/rank<R>.json: its per-step wall
times (the clock covers the step only; the random tokens are drawn before),
its peak resident memory (getrusage) and the Unix time its first step began,
from which the driver computes start-up time the way it does for accel-host.
"""
import argparse
import json
import math
import os
import resource
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import gpt_reference as ref  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategy", choices=["ddp", "fsdp2"], required=True)
    for name, default in [("n-layer", 12), ("n-head", 12), ("n-embd", 768), ("seq-len", 1024),
                          ("vocab-size", 50257), ("batch-size", 4), ("steps", 8), ("threads", 1), ("seed", 1234)]:
        p.add_argument("--" + name, type=int, default=default)
    for name, default in [("lr", 6e-4), ("weight-decay", 0.1), ("grad-clip", 1.0)]:
        p.add_argument("--" + name, type=float, default=default)
    p.add_argument("--out-dir", required=True)
    return p.parse_args(argv)


def gpt2_init(model, n_layer):
    """GPT-2's initialisation, as accel-host's (host/model/gpt.cpp): weights
    N(0, 0.02), the residual projections N(0, 0.02 / sqrt(2 n_layer)), biases
    zero, LayerNorm ones and zeros. torch.nn's defaults (N(0, 1) embeddings
    under a tied head) start at a loss in the hundreds, and the saturated
    softmax's denormal gradients made the head's backward GEMM 10x slower
    from step 5 on (measured): a different, slower job than accel-host's."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * n_layer))
            elif "ln_" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02)


def wrap(model, strategy):
    if strategy == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard  # FSDP2
    for block in model.h:
        fully_shard(block)
    fully_shard(model)  # the root: embeddings, the tied head and ln_f
    return model


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.batch_size % world:
        sys.exit(f"--batch-size {a.batch_size} is not a multiple of the world size {world}")
    torch.manual_seed(a.seed)
    model = ref.GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab_size)
    gpt2_init(model, a.n_layer)
    model = wrap(model, a.strategy)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    local = a.batch_size // world
    generator = torch.Generator().manual_seed(a.seed + rank)
    batches = [torch.randint(0, a.vocab_size, (local, a.seq_len + 1), generator=generator) for _ in range(a.steps)]

    times, losses, first_step_unix = [], [], None
    for tokens in batches:
        if first_step_unix is None:
            first_step_unix = time.time()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        optimizer.step()
        losses.append(loss.item())  # rank 0 reports its own; the driver shows first and last
        times.append(time.perf_counter() - start)

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "step_s": times, "loss": losses, "peak_rss_bytes": peak,
                   "first_step_unix": first_step_unix}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])

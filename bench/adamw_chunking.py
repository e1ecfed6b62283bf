#!/usr/bin/env python3
"""The host's AdamW step (host/model/adamw_step.cpp) on one gpt-small
embedding-sized flat buffer (39.4M fp32 elements), one thread: the same
ATen ops over the whole buffer (the step before bfc56a5: two buffer-sized
temporaries for the denominator) against 1M-element chunks with one
in-place temporary (the step now). Both give the same bits; this times
them. Run with the project's venv python:

  .venv/bin/python bench/adamw_chunking.py [--repeats 5]
"""
import argparse
import math
import statistics
import time

import torch

N = 39_400_000
CHUNK = 1 << 20
BETA1, BETA2, LR, EPS, DECAY, STEP = 0.9, 0.95, 1e-3, 1e-8, 0.1, 3


def whole(p, g, m, v):
    p.mul_(1 - LR * DECAY)
    m.lerp_(g, 1 - BETA1)
    v.mul_(BETA2).addcmul_(g, g, value=1 - BETA2)
    denom = (v.sqrt() / math.sqrt(1 - BETA2**STEP)).add_(EPS)
    p.addcdiv_(m, denom, value=-LR / (1 - BETA1**STEP))


def chunked(p, g, m, v):
    for b in range(0, N, CHUNK):
        pp, gg, mm, vv = p[b:b + CHUNK], g[b:b + CHUNK], m[b:b + CHUNK], v[b:b + CHUNK]
        pp.mul_(1 - LR * DECAY)
        mm.lerp_(gg, 1 - BETA1)
        vv.mul_(BETA2).addcmul_(gg, gg, value=1 - BETA2)
        denom = vv.sqrt()
        denom.div_(math.sqrt(1 - BETA2**STEP)).add_(EPS)
        pp.addcdiv_(mm, denom, value=-LR / (1 - BETA1**STEP))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    state = {name: [torch.randn(N) for _ in range(4)] for name in ("whole", "chunked")}
    for tensors in state.values():
        tensors[3].abs_()
        for t, src in zip(tensors, state["whole"]):
            t.copy_(src)
    times = {"whole": [], "chunked": []}
    for _ in range(args.repeats):  # interleaved, so drift hits both alike
        for name, step in (("whole", whole), ("chunked", chunked)):
            t0 = time.perf_counter()
            step(*state[name])
            times[name].append(time.perf_counter() - t0)
    same = all(torch.equal(a, b) for a, b in zip(state["whole"], state["chunked"]))
    for name, ts in times.items():
        print(f"{name:8s} median {statistics.median(ts) * 1e3:7.1f} ms  min {min(ts) * 1e3:7.1f} ms")
    print(f"same bits after {args.repeats} steps: {same}")


if __name__ == "__main__":
    main()

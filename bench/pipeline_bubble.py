#!/usr/bin/env python3
"""megatron's pipeline bubble against the theory (issue 14): the 1F1B
schedule's idle time is (P - 1) / M of the compute, the interleaved one's
(P - 1) / (v M) (Narayanan et al. 2021), GPipe's the same as 1F1B's.

Each rank measures its own step: the time inside run_forward / run_backward
(busy) and the whole train_step; the plugin's metric pp_bubble_fraction is
1 - busy / step on rank 0 (stage 0). Idle over busy, f / (1 - f), is what
the theory's (P - 1) / M counts (bubble time over ideal compute time). The
step is made compute-bound (a wide gpt-tiny: the activations sent between
stages are small beside each stage's GEMMs) and the median over the steps
after the first two is reported.

One rank per core: run it on an idle machine with at least P cores (P = 2
on the 2-core build machine).

  python3 bench/pipeline_bubble.py [BUILD]     (default: build)
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
BASE = ["--model", "gpt-tiny", "--n-layer", "4", "--n-embd", "512", "--n-head", "8", "--seq-len", "128",
        "--steps", "8", "--threads", "1", "--log-level", "warn", "--data", "synthetic"]
ROWS = [  # label, P, v, schedule, M
    ("1f1b", 2, 1, "1f1b", 2), ("1f1b", 2, 1, "1f1b", 4), ("1f1b", 2, 1, "1f1b", 8),
    ("gpipe", 2, 1, "gpipe", 4), ("gpipe", 2, 1, "gpipe", 8),
    ("interleaved", 2, 2, "1f1b", 2), ("interleaved", 2, 2, "1f1b", 4), ("interleaved", 2, 2, "1f1b", 8),
]


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    host = os.path.join(build, "bin", "accel-host")
    out = tempfile.mkdtemp(prefix="accel-bubble-")
    print(f"| schedule | P | v | M | measured idle / busy | theory | step (s) |")
    print(f"|---|---|---|---|---|---|---|")
    for label, p, v, schedule, m in ROWS:
        metrics = os.path.join(out, f"{label}_{p}_{v}_{m}.jsonl")
        plugin = ["--plugin", "megatron", "--megatron.pp_degree", str(p), "--megatron.pipeline_schedule", schedule]
        if v > 1:
            plugin += ["--megatron.num_layers_per_virtual_pipeline_stage", str(4 // (p * v))]
        subprocess.run(["mpirun", "-n", str(p), "--bind-to", "core", host, *BASE, *plugin, "--batch-size",
                        str(2 * m), "--grad-accum", str(m), "--metrics-file", metrics],
                       check=True, env=ENV, capture_output=True, text=True)
        rows = [json.loads(line) for line in open(metrics)][2:]
        f = statistics.median(r["megatron.pp_bubble_fraction"] for r in rows)
        step = statistics.median(2 * m * 128 / r["tokens_per_s"] for r in rows)
        theory = (p - 1) / (v * m)
        print(f"| {label} | {p} | {v} | {m} | {f / (1 - f):.3f} | {theory:.3f} | {step:.3f} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Bytes fsdp all-gathers per step with fp8, with and without the FP8 weight
gather (issue 10: "fsdp all-gathers FP8 weights, half the bytes of bf16,
measured"). Prints one Markdown table for docs/benchmarks.md.

Each row runs `mpirun -n 2 accel-host --plugin fsdp --plugin fp8` for a few
steps and reads rank 0's metrics line of the last step: `fsdp.gather_bytes`
(the output bytes of the machinery's all-gathers, what the host's comm_bytes
counts for them), `fsdp.encoded_gathers` (unit gathers through fp8's codec)
and the host's `comm_bytes` (every collective of the step: the gathers, the
gradients' reduce-scatters, the norm and fp8's amax all-reduces). Rows:
param_dtype fp32 and bf16 with `--fp8.fp8_weight_gather false` (fsdp gathers
in param_dtype, fp8 casts the gathered weight), then bf16 and fp32 with it on
(the block linears' weights travel as E4M3 codes). no_wrap: every unit is
gathered once per step; `--fsdp.auto_wrap_policy transformer_based_wrap`
(pass it after --) re-gathers the blocks in backward and doubles their part.

Usage: .venv/bin/python bench/fp8_gather.py [--build build] [--model gpt-small] [--steps 2] [-- extra args]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}

ROWS = [  # label, param_dtype, fp8_weight_gather
    ("fp32 gather", "fp32", "false"),
    ("bf16 gather", "bf16", "false"),
    ("FP8 weights, bf16 rest", "bf16", "true"),
    ("FP8 weights, fp32 rest", "fp32", "true"),
]


def run(build, args, metrics):
    cmd = ["mpirun", "-n", "2", "--bind-to", "none", os.path.join(build, "bin", "accel-host"),
           "--metrics-file", metrics, "--threads", "1", "--log-level", "warn"] + args
    done = subprocess.run(cmd, env=dict(os.environ, **MPI_ENV), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    with open(metrics) as f:
        return [json.loads(line) for line in f if line.strip()][-1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--model", default="gpt-small")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("extra", nargs="*")
    a = parser.parse_args()
    common = ["--model", a.model, "--seq-len", "64", "--batch-size", "2", "--steps", str(a.steps),
              "--plugin", "fsdp", "--plugin", "fp8", *a.extra]
    print(f"| {a.model}, 2 ranks | param_dtype | fsdp.gather_bytes / step | vs bf16 gather | encoded unit gathers "
          "| comm_bytes / step |")
    print("|---|---|---:|---:|---:|---:|")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for label, dtype, fp8 in ROWS:
            rows.append((label, dtype, run(a.build, common + ["--fsdp.param_dtype", dtype, "--fp8.fp8_weight_gather", fp8],
                                           os.path.join(work, f"{dtype}_{fp8}.jsonl"))))
    bf16 = rows[1][2]["fsdp.gather_bytes"]
    for label, dtype, row in rows:
        gathered = int(row["fsdp.gather_bytes"])
        print(f"| {label} | {dtype} | {gathered:,} | {gathered / bf16:.3f} | {int(row['fsdp.encoded_gathers'])} "
              f"| {int(row['comm_bytes']):,} |")

if __name__ == "__main__":
    main()
